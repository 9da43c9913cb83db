#!/usr/bin/env bash
# NVML calls per second per card of one `gpuq serve` on the fake NVML (tests/fixtures/fake-nvml),
# counted by the fake's call counter over a fixed window, with its default intervals.
#   scripts/nvml-calls.sh [GPUQ_BINARY] [CARDS] [WINDOW_S] [RUNNER true|false]
# Needs DATABASE_URL (a role that may create databases: a throw-away one is made and dropped) and,
# with RUNNER true (the default), a running dockerd. Prints the total and the calls per function.
set -euo pipefail

bin=${1:-target/debug/gpuq}
cards=${2:-2}
window=${3:-60}
runner=${4:-true}
: "${DATABASE_URL:?set DATABASE_URL to a Postgres role that may create databases}"

dir=$(mktemp -d /tmp/gpuq-nvml-calls.XXXXXX)
db="gpuq_nvml_calls_$$"
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  psql -q "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

cc -shared -fPIC -O2 -Wall -o "$dir/libnvidia-ml.so.1" \
  tests/fixtures/fake-nvml/fake_nvml.c tests/fixtures/fake-nvml/stubs.c -lpthread
# Each card busy, with one foreign process in its compute list (so a list read takes NVML's two
# steps, as on a card in use).
for i in $(seq 0 $((cards - 1))); do
  printf 'gpu GPU-%08x-0000-4000-8000-000000000000 "NVIDIA A100-SXM4-80GB" total_mib=81920 used_mib=1000 util=50\n' "$i"
  printf 'proc %d %d 1000 compute\n' "$i" $((900000 + i))
done >"$dir/libnvidia-ml.so.1.state"
: >"$dir/libnvidia-ml.so.1.calls"

psql -q "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null
url="${DATABASE_URL%/*}/$db"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
GPUQ_BOOTSTRAP_ADMIN_PASSWORD='nvml-calls-Passw0rd!' "$bin" serve \
  --listen "127.0.0.1:$port" --database-url "$url" --data-dir "$dir/data" --node nvml-calls \
  --gpu-source nvml --nvml-lib "$dir/libnvidia-ml.so.1" --runner "$runner" \
  >"$dir/server.log" 2>&1 &
server=$!
for _ in $(seq 1 60); do
  curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 1
done
curl -fs "http://127.0.0.1:$port/healthz" >/dev/null || { tail -20 "$dir/server.log"; exit 1; }
sleep 5 # past start-up: its one-off reads are not counted
cp "$dir/libnvidia-ml.so.1.calls" "$dir/before"
sleep "$window"
cp "$dir/libnvidia-ml.so.1.calls" "$dir/after"
python3 - "$dir/before" "$dir/after" "$cards" "$window" "$runner" <<'EOF'
import sys
def read(p):
    return {k: int(v) for k, v in (l.split() for l in open(p) if l.strip())}
a, b = read(sys.argv[1]), read(sys.argv[2])
cards, window = int(sys.argv[3]), float(sys.argv[4])
d = {k: b[k] - a.get(k, 0) for k in b}
total = d.pop("total")
print(f"runner={sys.argv[5]} cards={cards} window={window:.0f}s: {total} NVML calls, "
      f"{total / window:.2f}/s, {total / window / cards:.2f}/s per card")
for k, v in sorted(d.items(), key=lambda kv: -kv[1]):
    if v:
        print(f"  {k:48} {v:7} {v / window / cards:8.2f}/s per card")
EOF
