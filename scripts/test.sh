#!/usr/bin/env bash
# The test command (`make test` = `scripts/test.sh all`): installs what is missing, starts services,
# then runs format and lint checks, every Rust test and the browser tests. Exits non-zero on any
# failure. One part alone: `scripts/test.sh lint|rust|e2e|image` (`make lint`, `make test-rust`,
# `make test-e2e`, `make image` and its smoke test).
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-all}
case "$what" in
  all|lint|rust|e2e|image) ;;
  *) echo "usage: $0 [all|lint|rust|e2e|image]" >&2; exit 2 ;;
esac

step() { printf '\n\033[1;32m==> %s\033[0m\n' "$*"; }
started=$(date +%s)

# The tests leave the host's Docker as they found it. Its default bridge, docker0, is the easiest
# thing to lose: a throw-away dockerd started with --bridge=none deletes it (the tests' own start
# with a bridge of their own, see tests/it/support/nvml.rs), and then every plain `docker run` fails
# until dockerd restarts. Noted now (and again once dockerd runs), checked at the end.
has_docker0() { ip link show docker0 >/dev/null 2>&1; }
DOCKER0_AT_START=no
has_docker0 && DOCKER0_AT_START=yes
docker0_check() {
  [ "$DOCKER0_AT_START" = yes ] || return 0
  has_docker0 && return 0
  printf '\n\033[1;31m%s\033[0m\n' "FAILED: the host's docker0 bridge existed when the tests began and is gone now: something they started removed it. Plain \`docker run\` fails on this host until dockerd is restarted." >&2
  return 1
}

scripts/deps.sh

# cargo-leptos builds the debug server with `--cfg erase_components` and LEPTOS_* variables; giving
# cargo test and clippy the same environment lets them reuse one build of the dependency tree.
export RUSTFLAGS="--cfg erase_components"
export LEPTOS_OUTPUT_NAME=gpuq LEPTOS_SITE_ROOT=target/site LEPTOS_SITE_PKG_DIR=pkg \
  LEPTOS_SITE_ADDR=127.0.0.1:3000 LEPTOS_RELOAD_PORT=3001 LEPTOS_LIB_DIR=. LEPTOS_BIN_DIR=. \
  LEPTOS_JS_MINIFY=false LEPTOS_HASH_FILES=false

lint() {
  step "cargo fmt --check"
  cargo fmt --all -- --check
  step "imports go one way, floors inside the domain (scripts/check-layers.py, see docs/architecture.md)"
  python3 scripts/check-layers.py --self-test
  python3 scripts/check-layers.py
  step "links in the docs (scripts/check-links.py: every relative link and #anchor resolves)"
  python3 scripts/check-links.py --self-test
  python3 scripts/check-links.py
  step "cargo clippy (server, all targets)"
  cargo clippy --all-targets --features ssr -- -D warnings
  step "cargo clippy (browser bundle)"
  cargo clippy --lib --features hydrate --target wasm32-unknown-unknown -- -D warnings
  unit_check
}

# The service unit: `systemd-analyze verify` says nothing about it (any warning fails), and its
# exposure score stays at or below 5.0. Offline checks: no systemd needs to run here.
UNIT=packaging/systemd/gpuq.service
FIREWALL_UNIT=packaging/systemd/gpuq-firewall.service
unit_check() {
  step "systemd unit: verify, and security score <= 5.0 ($UNIT)"
  local dir out score
  dir=$(mktemp -d)
  # verify wants ExecStart's program to exist; the unit's /usr/local/bin/gpuq exists only installed.
  sed 's|^ExecStart=/usr/local/bin/gpuq |ExecStart=/usr/bin/true |' "$UNIT" >"$dir/gpuq.service"
  out=$(systemd-analyze verify --man=no "$dir/gpuq.service" 2>&1) || { echo "$out"; rm -rf "$dir"; return 1; }
  rm -rf "$dir"
  if [ -n "$out" ]; then echo "$out"; echo "systemd-analyze verify: warnings about $UNIT" >&2; return 1; fi
  out=$(systemd-analyze security --offline=true --threshold=50 "$UNIT" 2>&1) || {
    echo "$out" | grep -v '^✓'; echo "$UNIT: exposure above 5.0" >&2; return 1; }
  score=$(echo "$out" | sed -n 's/.*Overall exposure level for gpuq.service: \([0-9.]*\).*/\1/p')
  echo "verify: clean; exposure level $score (threshold 5.0)"
  # The firewall unit runs as root by necessity (it writes iptables rules): verified, not scored.
  dir=$(mktemp -d)
  sed 's|^ExecStart=/usr/local/bin/gpuq |ExecStart=/usr/bin/true |' "$FIREWALL_UNIT" >"$dir/gpuq-firewall.service"
  out=$(systemd-analyze verify --man=no "$dir/gpuq-firewall.service" 2>&1) || { echo "$out"; rm -rf "$dir"; return 1; }
  rm -rf "$dir"
  if [ -n "$out" ]; then echo "$out"; echo "systemd-analyze verify: warnings about $FIREWALL_UNIT" >&2; return 1; fi
  echo "verify: $FIREWALL_UNIT clean"
}

SERVICES_UP=
SERVER_PID=
SMOKE_CONTAINER=
# The jobs' network the runner makes on first use (server::runtime::JOB_NETWORK): removed at the
# end unless the host had it before, as a gpuq already serving there would.
JOB_NETWORK=gpuq-jobs
JOB_NETWORK_AT_START=
services() {
  [ -n "$SERVICES_UP" ] && return 0
  . scripts/services.sh
  start_dockerd --nvidia-hook-stub   # tests only: the stub NVIDIA hook where no real toolkit exists
  has_docker0 && DOCKER0_AT_START=yes
  docker network inspect "$JOB_NETWORK" >/dev/null 2>&1 && JOB_NETWORK_AT_START=yes
  build_test_image
  build_jupyter_image   # the session tests' real Jupyter (debootstrap + docker import, cached)
  build_fake_nvml
  start_test_postgres
  SERVICES_UP=1
}
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  # The browser tests' server is gone: its jobs' containers (node e2e) go too.
  [ -n "$SERVER_PID" ] && docker ps -aq --filter label=org.gpuq.node=e2e | xargs -r docker rm -f >/dev/null 2>&1 || true
  [ -n "$SMOKE_CONTAINER" ] && docker rm -fv "$SMOKE_CONTAINER" >/dev/null 2>&1 || true
  [ -n "$SMOKE_CONTAINER" ] && docker network rm "$SMOKE_CONTAINER" >/dev/null 2>&1 || true
  [ -n "$SERVICES_UP" ] && stop_test_postgres
  # Refused, and so kept, while a container still uses it.
  [ -n "$SERVICES_UP" ] && [ -z "$JOB_NETWORK_AT_START" ] && docker network rm "$JOB_NETWORK" >/dev/null 2>&1 || true
  return 0
}
trap cleanup EXIT

bundle() {
  step "cargo leptos build (server + WASM bundle, one chunk per lazy route)"
  cargo leptos build --split
}

rust_tests() {
  services
  step "cargo test (unit tests and the integration test binary, real Postgres and Docker)"
  cargo test --features ssr -- --test-threads=4
}

e2e() {
  services
  step "browser tests (Playwright, headless Debian Chromium)"
  E2E_DB="gpuq_e2e_$$"
  psql "$DATABASE_URL" -qc "CREATE DATABASE $E2E_DB" >/dev/null
  E2E_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  export GPUQ_E2E_URL="http://127.0.0.1:$E2E_PORT"
  export GPUQ_E2E_ADMIN_PASSWORD="e2e-admin-password"
  # The server's database, for tests that record what a sampler would (learn.spec.ts).
  export GPUQ_E2E_DATABASE_URL="${DATABASE_URL%/*}/$E2E_DB"
  mkdir -p target/e2e
  # From an empty folder outside the checkout and without --site-root: the server serves the
  # browser bundle it carries (end2end/tests/embedded.spec.ts checks that it was started so).
  local repo serve_dir
  repo=$PWD
  serve_dir=$(mktemp -d /tmp/gpuq-e2e-cwd.XXXXXX)
  export GPUQ_E2E_SITE=embedded
  # Sessions on a listener of their own (end2end/tests/sessions.spec.ts): another origin.
  SESSIONS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  export GPUQ_E2E_SESSIONS_URL="http://127.0.0.1:$SESSIONS_PORT"
  (cd "$serve_dir" && GPUQ_BOOTSTRAP_ADMIN_PASSWORD="$GPUQ_E2E_ADMIN_PASSWORD" \
    exec "$repo/target/debug/gpuq" serve --listen "127.0.0.1:$E2E_PORT" \
    --sessions-listen "127.0.0.1:$SESSIONS_PORT" --public-url "$GPUQ_E2E_URL" \
    --database-url "${DATABASE_URL%/*}/$E2E_DB" \
    --data-dir "$repo/target/e2e/data" --node e2e --gpu-source sim --sim-gpus "2x24576:NVIDIA GeForce RTX 3090" \
    >"$repo/target/e2e/server.log" 2>&1) &
  SERVER_PID=$!
  # PLAYWRIGHT_ARGS narrows or repeats a run by hand (e.g. `-g resubmits --repeat-each=10`).
  # On a failure the server's last words go to the output too, and then Playwright's account of
  # what failed once more: CI keeps only the end of a run's output, so that must come last.
  local report=target/e2e/playwright.log rc=0
  # shellcheck disable=SC2086
  (cd end2end && npx playwright test ${PLAYWRIGHT_ARGS:-}) 2>&1 | tee "$report" || rc=$?
  if [ "$rc" -ne 0 ]; then
    step "browser tests failed: the last 120 lines of target/e2e/server.log"
    tail -n 120 target/e2e/server.log
    step "browser tests failed: Playwright's failures again (all of it in $report)"
    sed -n '/^  [0-9][0-9]*) /,$p' "$report" | head -n 150
    return 1
  fi
}

# `make image`, then the image alone (embedded Postgres in its volume, simulated cards, no runner):
# it must become healthy and serve the sign-in page and its WASM bundle.
image() {
  . scripts/services.sh
  start_dockerd
  step "make image (gpuq:latest, built offline: scripts/image.sh)"
  scripts/image.sh
  step "image smoke test: docker run gpuq:latest until healthy, then the sign-in page"
  local t0 status ip page
  t0=$(date +%s)
  SMOKE_CONTAINER="gpuq-smoke-$$"
  # Its own network (the default bridge may be missing: dockerd --bridge=none), reached by its IP.
  docker network create "$SMOKE_CONTAINER" >/dev/null
  docker run -d --name "$SMOKE_CONTAINER" --network "$SMOKE_CONTAINER" \
    -e GPUQ_GPU_SOURCE=sim -e GPUQ_SIM_GPUS="1x24576:NVIDIA GeForce RTX 3090" -e GPUQ_RUNNER=false \
    --health-interval 1s --health-timeout 3s --health-start-period 120s --health-retries 3 \
    gpuq:latest >/dev/null
  for _ in $(seq 1 120); do
    status=$(docker inspect -f '{{.State.Health.Status}}' "$SMOKE_CONTAINER" 2>/dev/null || echo gone)
    case "$status" in healthy|unhealthy|gone) break ;; esac
    sleep 1
  done
  if [ "$status" != healthy ]; then
    docker logs "$SMOKE_CONTAINER" 2>&1 | tail -30
    echo "image smoke test: the container is $status, not healthy" >&2; return 1
  fi
  ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$SMOKE_CONTAINER")
  page=$(curl -fsS "http://$ip:3000/login")
  grep -q 'Sign in' <<<"$page" || { echo "image smoke test: /login has no sign-in form" >&2; return 1; }
  [ "$(curl -fsS -o /dev/null -w '%{content_type}' "http://$ip:3000/pkg/gpuq.wasm")" = application/wasm ] \
    || { echo "image smoke test: /pkg/gpuq.wasm is not served as application/wasm" >&2; return 1; }
  echo "healthy and serving the sign-in page $(( $(date +%s) - t0 )) s after docker run"
  docker rm -fv "$SMOKE_CONTAINER" >/dev/null; docker network rm "$SMOKE_CONTAINER" >/dev/null
  SMOKE_CONTAINER=
}

case "$what" in
  lint) lint ;;
  rust) bundle; rust_tests ;;
  e2e) bundle; e2e ;;
  image) image ;;
  all) lint; bundle; rust_tests; e2e; image ;;
esac
docker0_check
printf '\n\033[1;32m%s passed in %s s\033[0m\n' "$what" "$(( $(date +%s) - started ))"
