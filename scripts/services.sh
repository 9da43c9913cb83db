#!/usr/bin/env bash
# Starts what the tests need and is not yet running: dockerd (in the background), the local busybox
# test image, and a throw-away Postgres cluster for the tests. Source it: it exports DATABASE_URL and
# defines stop_test_postgres.
#   . scripts/services.sh
set -euo pipefail

TEST_IMAGE=${GPUQ_TEST_IMAGE:-gpuq-test/busybox:latest}
svc_log() { printf '\033[1;34m[services]\033[0m %s\n' "$*"; }

start_dockerd() {
  if docker info >/dev/null 2>&1; then return 0; fi
  svc_log "starting dockerd in the background (log: /var/log/gpuq-dockerd.log)"
  nohup dockerd >/var/log/gpuq-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  svc_log "dockerd did not come up within 60 s:"; tail -20 /var/log/gpuq-dockerd.log; return 1
}

build_test_image() {
  if docker image inspect "$TEST_IMAGE" >/dev/null 2>&1; then return 0; fi
  svc_log "building $TEST_IMAGE from /bin/busybox (docker import; nothing is pulled)"
  local root
  root=$(mktemp -d)
  mkdir -p "$root/bin" "$root/dev" "$root/tmp" "$root/proc" "$root/sys" "$root/etc"
  cp /bin/busybox "$root/bin/busybox"
  for c in sh ls echo sleep cat printf seq head tail wc env true false test id; do
    ln -s busybox "$root/bin/$c"
  done
  tar -C "$root" -c . | docker import -c 'ENV PATH=/bin' - "$TEST_IMAGE" >/dev/null
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
