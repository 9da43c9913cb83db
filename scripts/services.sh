#!/usr/bin/env bash
# Starts what the tests need and is not yet running: dockerd (in the background), the local busybox
# test image, the fake NVML and stub NVIDIA hook (tests/fixtures), and a throw-away Postgres cluster
# for the tests. Source it: it exports DATABASE_URL and
# defines stop_test_postgres.
#   . scripts/services.sh
set -euo pipefail

TEST_IMAGE=${GPUQ_TEST_IMAGE:-gpuq-test/busybox:latest}
svc_log() { printf '\033[1;34m[services]\033[0m %s\n' "$*"; }

# start_dockerd [--nvidia-hook-stub]: starts dockerd unless it runs. With --nvidia-hook-stub (the
# tests), the stub NVIDIA hook is installed first where no real NVIDIA toolkit exists, so dockerd
# registers its `nvidia` device driver; see install_nvidia_hook_stub and ensure_dockerd_nvidia_driver.
start_dockerd() {
  local stub=0
  [ "${1:-}" = --nvidia-hook-stub ] && stub=1
  [ "$stub" = 1 ] && install_nvidia_hook_stub
  if docker info >/dev/null 2>&1; then
    [ "$stub" = 1 ] && ensure_dockerd_nvidia_driver
    return 0
  fi
  svc_log "starting dockerd in the background (log: /var/log/gpuq-dockerd.log)"
  nohup dockerd >/var/log/gpuq-dockerd.log 2>&1 &
  echo $! >"$GPUQ_DOCKERD_PIDFILE"
  for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  svc_log "dockerd did not come up within 60 s:"; tail -20 /var/log/gpuq-dockerd.log; return 1
}

# The dockerd this script started (only that one is ever restarted here).
GPUQ_DOCKERD_PIDFILE=${GPUQ_DOCKERD_PIDFILE:-/run/gpuq-dockerd.pid}
NVIDIA_HOOK_STUB_SRC=tests/fixtures/nvidia-hook/nvidia-container-runtime-hook
NVIDIA_HOOK_STUB=${GPUQ_NVIDIA_HOOK_STUB:-/usr/local/bin/nvidia-container-runtime-hook}

# Test machines only. dockerd registers its `nvidia` device driver (`--gpus`, DeviceRequests with
# driver nvidia, which gpuq's containers on NVML cards carry) only when nvidia-container-runtime-hook
# is on its PATH at start. Where no real NVIDIA container toolkit exists, this installs the stub
# (it records its calls and lets the container start). A real hook or nvidia-ctk: nothing is done.
install_nvidia_hook_stub() {
  local found
  found=$(command -v nvidia-container-runtime-hook 2>/dev/null || true)
  if [ -n "$found" ] && grep -q '^# gpuq-test-stub' "$found" 2>/dev/null; then
    cmp -s "$NVIDIA_HOOK_STUB_SRC" "$found" || install -m 0755 "$NVIDIA_HOOK_STUB_SRC" "$found"
    return 0
  fi
  if [ -n "$found" ] || command -v nvidia-ctk >/dev/null 2>&1; then
    svc_log "a real NVIDIA container toolkit is installed (${found:-nvidia-ctk}): no stub hook"
    return 0
  fi
  svc_log "installing the stub NVIDIA hook as $NVIDIA_HOOK_STUB (no NVIDIA toolkit here; tests only)"
  install -m 0755 "$NVIDIA_HOOK_STUB_SRC" "$NVIDIA_HOOK_STUB"
}

# Whether the running dockerd starts a container with an nvidia DeviceRequest (a made-up card).
dockerd_has_nvidia_driver() {
  build_test_image
  local id out
  id=$(docker create --network none --gpus device=GPU-00000000-0000-4000-8000-000000000000 \
    --label gpuq.probe=nvidia-driver "$TEST_IMAGE" true)
  out=$(docker start "$id" 2>&1) || true
  docker rm -f "$id" >/dev/null 2>&1 || true
  ! grep -q 'could not select device driver' <<<"$out"
}

# A dockerd started before the stub existed lacks the driver. It is restarted only when that is
# safe: it is the one this script started and runs no containers, or GPUQ_RESTART_DOCKERD=1 says
# the caller owns it. Otherwise the reason is printed and nothing changes (tests that need the
# driver then start their own throw-away dockerd, see tests/it/support/nvml.rs).
ensure_dockerd_nvidia_driver() {
  if dockerd_has_nvidia_driver; then return 0; fi
  local pid
  pid=$(cat "$GPUQ_DOCKERD_PIDFILE" 2>/dev/null || true)
  if [ "${GPUQ_RESTART_DOCKERD:-0}" != 1 ]; then
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null || [ -n "$(docker ps -q)" ]; then
      svc_log "dockerd runs without its nvidia device driver; not restarting a daemon this script did not start or that runs containers (GPUQ_RESTART_DOCKERD=1 to force)"
      return 0
    fi
  fi
  pid=${pid:-$(pidof dockerd || true)}
  [ -n "$pid" ] || { svc_log "dockerd runs but its pid is unknown: not restarting it"; return 0; }
  svc_log "restarting dockerd (pid $pid) so that it registers its nvidia device driver"
  kill -TERM "$pid"
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  start_dockerd
  dockerd_has_nvidia_driver || { svc_log "dockerd still has no nvidia device driver"; return 1; }
}

# The fake libnvidia-ml.so.1 (tests/fixtures/fake-nvml) in target/fake-nvml/, built when missing or
# older than its source. The Rust tests build it the same way themselves; this is for shells.
build_fake_nvml() {
  local src=tests/fixtures/fake-nvml out=${CARGO_TARGET_DIR:-target}/fake-nvml
  local lib=$out/libnvidia-ml.so.1
  if [ "$lib" -nt "$src/fake_nvml.c" ] && [ "$lib" -nt "$src/stubs.c" ]; then return 0; fi
  svc_log "building the fake NVML ($lib)"
  mkdir -p "$out"
  "${CC:-cc}" -shared -fPIC -O2 -Wall -o "$lib.$$.tmp" "$src/fake_nvml.c" "$src/stubs.c" -lpthread
  mv "$lib.$$.tmp" "$lib"
}

# Bump when the image's contents change: an image of an older revision is built again.
TEST_IMAGE_REVISION=2
build_test_image() {
  if [ "$(docker image inspect -f '{{index .Config.Labels "org.gpuq.test-image"}}' "$TEST_IMAGE" 2>/dev/null)" = "$TEST_IMAGE_REVISION" ]; then
    return 0
  fi
  svc_log "building $TEST_IMAGE from /bin/busybox (docker import; nothing is pulled)"
  local root
  root=$(mktemp -d)
  mkdir -p "$root/bin" "$root/dev" "$root/tmp" "$root/proc" "$root/sys" "$root/etc"
  chmod 1777 "$root/tmp" # as in every distribution's image: any uid may write /tmp
  cp /bin/busybox "$root/bin/busybox"
  for c in sh ls echo sleep cat printf seq head tail wc env true false test id; do
    ln -s busybox "$root/bin/$c"
  done
  tar -C "$root" -c . | docker import -c 'ENV PATH=/bin' \
    -c "LABEL org.gpuq.test-image=$TEST_IMAGE_REVISION" - "$TEST_IMAGE" >/dev/null
  rm -rf "$root"
}

# The session tests' image: a real Jupyter Notebook (Debian's jupyter-notebook and python3-ipykernel)
# on a minimal Debian 12 root made by debootstrap from Debian's mirror, made into an image with
# `docker import` (nothing is pulled from a registry), plus the echo server the Rust tests use
# (tests/fixtures/jupyter/echo.py, as /opt/gpuq/echo.py). A few minutes cold; built once, again only
# when JUPYTER_IMAGE_REVISION or the echo server changes.
JUPYTER_IMAGE=${GPUQ_JUPYTER_IMAGE:-gpuq-test/jupyter:latest}
JUPYTER_IMAGE_REVISION=1
jupyter_image_tag() {
  echo "$JUPYTER_IMAGE_REVISION-$(sha256sum tests/fixtures/jupyter/echo.py | cut -c1-12)"
}
build_jupyter_image() {
  local want
  want=$(jupyter_image_tag)
  if [ "$(docker image inspect -f '{{index .Config.Labels "org.gpuq.test-jupyter"}}' "$JUPYTER_IMAGE" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  local mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian} root
  svc_log "building $JUPYTER_IMAGE with debootstrap from $mirror (a few minutes, once)"
  root=$(mktemp -d /tmp/gpuq-jupyter.XXXXXX)
  # debootstrap's own --include resolves dependencies loosely (python3-zmq's were left
  # unconfigured): the minimal root first, then apt inside it.
  if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1; then
    tail -20 "$root.log"; rm -rf "$root" "$root.log"; return 1
  fi
  echo "deb $mirror bookworm main" >"$root/etc/apt/sources.list"
  mount -t proc proc "$root/proc"
  if ! chroot "$root" env DEBIAN_FRONTEND=noninteractive sh -c \
      'apt-get update -qq && apt-get install -y -qq --no-install-recommends jupyter-notebook python3-ipykernel' \
      >>"$root.log" 2>&1; then
    umount "$root/proc"; tail -20 "$root.log"; rm -rf "$root" "$root.log"; return 1
  fi
  umount "$root/proc"
  rm -f "$root.log"
  install -D -m 0755 tests/fixtures/jupyter/echo.py "$root/opt/gpuq/echo.py"
  chmod 1777 "$root/tmp"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/man/* \
    "$root"/usr/share/doc/* "$root"/var/log/*.log
  tar -C "$root" -c . | docker import \
    -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp JUPYTER_RUNTIME_DIR=/tmp/jupyter-runtime IPYTHONDIR=/tmp/ipython' \
    -c "LABEL org.gpuq.test-jupyter=$want" -c 'CMD ["python3", "/opt/gpuq/echo.py"]' \
    - "$JUPYTER_IMAGE" >/dev/null
  rm -rf "$root"
}

# A cluster owned by the unprivileged `postgres` user (Postgres refuses root), on a free loopback port.
start_test_postgres() {
  local bin
  bin=$(dirname "$(command -v initdb 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
  TEST_PG_DIR=$(mktemp -d /tmp/gpuq-test-pg.XXXXXX)
  chmod 755 "$TEST_PG_DIR"
  local as=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$TEST_PG_DIR"
    as=(runuser -u postgres --)
  fi
  TEST_PG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "${as[@]}" "$bin/initdb" -D "$TEST_PG_DIR/data" -U gpuq --auth=trust -E UTF8 --no-instructions >/dev/null
  "${as[@]}" "$bin/pg_ctl" -D "$TEST_PG_DIR/data" -l "$TEST_PG_DIR/postgres.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $TEST_PG_PORT -k $TEST_PG_DIR -c max_connections=300 -c fsync=off" start >/dev/null
  export DATABASE_URL="postgres://gpuq@127.0.0.1:$TEST_PG_PORT/postgres"
  svc_log "test Postgres at $DATABASE_URL (data in $TEST_PG_DIR)"
}

stop_test_postgres() {
  if [ -n "${TEST_PG_DIR:-}" ] && [ -d "$TEST_PG_DIR/data" ]; then
    local as=()
    [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
    "${as[@]}" pg_ctl -D "$TEST_PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$TEST_PG_DIR"
  fi
}
