#!/usr/bin/env bash
# The session proxy's added latency (docs/benchmarks.md#session-proxy): a real gpuq server with a
# session listener, one session job (the Jupyter test image's echo server, fenced to a simulated
# card on the isolated job network), then, in one run and interleaved, small HTTP requests and
# WebSocket round trips through gpuq's proxy and straight to the container's address. Prints
# p50/p99 of each and what the proxy adds.
#
#   scripts/bench-session.sh [N]        N requests and N round trips each way (default 2000)
#
# Needs dockerd, the Jupyter test image and a Postgres (scripts/services.sh starts them) and a
# built server (GPUQ_BIN, default target/debug/gpuq; a release build gives the figures to keep).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000}
BIN=${GPUQ_BIN:-target/debug/gpuq}
. scripts/services.sh
start_dockerd --nvidia-hook-stub
build_jupyter_image
build_fake_nvml
[ -n "${DATABASE_URL:-}" ] || start_test_postgres

DB="gpuq_bench_session_$$"
psql "$DATABASE_URL" -qc "CREATE DATABASE $DB" >/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
SPORT=$(free_port)
DATA=$(mktemp -d /tmp/gpuq-bench-session.XXXXXX)
PASSWORD="bench-session-password"
GPUQ_BOOTSTRAP_ADMIN_PASSWORD="$PASSWORD" "$BIN" serve --listen "127.0.0.1:$PORT" \
  --sessions-listen "127.0.0.1:$SPORT" --public-url "http://127.0.0.1:$PORT" \
  --database-url "${DATABASE_URL%/*}/$DB" --data-dir "$DATA" --node bench-session \
  --gpu-source sim --sim-gpus "1x24576:NVIDIA GeForce RTX 3090" >"$DATA/server.log" 2>&1 &
SERVER=$!
cleanup() {
  kill "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
  docker ps -aq --filter label=org.gpuq.node=bench-session | xargs -r docker rm -f >/dev/null 2>&1 || true
  psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
  rm -rf "$DATA"
}
trap cleanup EXIT

python3 - "http://127.0.0.1:$PORT" "$PASSWORD" "$N" <<'PY'
import base64, http.client, json, os, socket, statistics, sys, time, urllib.parse

ui, password, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
u = urllib.parse.urlsplit(ui)

def call(method, path, body=None, token=None):
    for _ in range(300):
        try:
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
            h = {"content-type": "application/json"}
            if token:
                h["authorization"] = "Bearer " + token
            c.request(method, path, json.dumps(body) if body is not None else None, h)
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        except (ConnectionRefusedError, OSError):
            time.sleep(0.1)
    raise SystemExit("gpuq never answered")

s, _, b = call("POST", "/api/v1/tokens", {"username": "admin", "password": password, "name": "bench"})
assert s == 201, (s, b)
token = json.loads(b)["token"]
s, _, b = call("POST", "/api/v1/jobs", {"image": "gpuq-test/jupyter:latest",
    "command": ["python3", "/opt/gpuq/echo.py"], "port": 8888, "min_vram_mb": 1000,
    "timeout_s": 3600}, token)
assert s == 201, (s, b)
job = json.loads(b)["job_id"]
deadline = time.time() + 120
while True:
    s, _, b = call("GET", f"/api/v1/jobs/{job}", token=token)
    v = json.loads(b)
    if v["status"] == "running" and v.get("session_url"):
        break
    assert v["status"] in ("queued", "admitted", "starting", "running"), v
    assert time.time() < deadline, v
    time.sleep(0.2)
# The owner's way in: the 303 with a one-time code, traded for the session origin's cookie.
s, h, _ = call("GET", f"/api/v1/jobs/{job}/session", token=token)
assert s == 303, s
loc = urllib.parse.urlsplit(h["location"])
c = http.client.HTTPConnection(loc.hostname, loc.port)
c.request("GET", loc.path + "?" + loc.query)
r = c.getresponse(); r.read()
assert r.status == 303, r.status
cookie = r.getheader("set-cookie").split(";")[0]
prefix = loc.path
# The container's address on the job network, as docker has it.
name = os.popen("docker ps --filter label=org.gpuq.node=bench-session --format '{{.Names}}'").read().split()[0]
ip = os.popen("docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' " + name).read().strip()
targets = {"proxy": (loc.hostname, loc.port, {"cookie": cookie}), "direct": (ip, 8888, {})}

# Wait until the app answers through the proxy (503 while it starts).
while True:
    c = http.client.HTTPConnection(loc.hostname, loc.port)
    c.request("GET", prefix, headers={"cookie": cookie})
    r = c.getresponse(); r.read()
    if r.status == 200:
        break
    time.sleep(0.1)

def ws_open(host, port, headers):
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    key = base64.b64encode(os.urandom(16)).decode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall((f"GET {prefix}ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                  f"{extra}\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(4096)
    assert buf.startswith(b"HTTP/1.1 101"), buf[:80]
    return sock

def ws_round(sock, payload=b"ping"):
    mask = os.urandom(4)
    frame = bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    t = time.perf_counter()
    sock.sendall(frame)
    got = b""
    while len(got) < 2 + len(payload):
        got += sock.recv(4096)
    dt = time.perf_counter() - t
    assert got[2:] == payload, got
    return dt

conns = {k: http.client.HTTPConnection(h, p) for k, (h, p, _) in targets.items()}
socks = {k: ws_open(h, p, hd) for k, (h, p, hd) in targets.items()}
for c in conns.values():
    c.connect()
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
http_t = {k: [] for k in targets}
ws_t = {k: [] for k in targets}
for i in range(n + 100):
    for k, (_, _, hd) in targets.items():
        t = time.perf_counter()
        conns[k].request("GET", prefix + "ping", headers=hd)
        r = conns[k].getresponse(); body = r.read()
        dt = time.perf_counter() - t
        assert r.status == 200, (k, r.status, body)
        d = ws_round(socks[k])
        if i >= 100:  # the first 100 warm up
            http_t[k].append(dt)
            ws_t[k].append(d)

def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))] * 1000

print(f"session proxy, {n} each, interleaved (keep-alive HTTP GET of ~30 bytes; WebSocket text frame of 4 bytes)")
print(f"{'':28}{'p50 ms':>9}{'p99 ms':>9}")
for what, t in (("HTTP", http_t), ("WebSocket round trip", ws_t)):
    for k in ("direct", "proxy"):
        print(f"{what + ', ' + k:28}{q(t[k], 50):9.3f}{q(t[k], 99):9.3f}")
    print(f"{what + ', added by gpuq':28}{q(t['proxy'], 50) - q(t['direct'], 50):9.3f}{q(t['proxy'], 99) - q(t['direct'], 99):9.3f}")
PY
