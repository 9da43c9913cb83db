#!/usr/bin/env bash
# gpu-smoke.sh: the checks that need a real NVIDIA GPU, for the day one is at hand.
#
#   scripts/gpu-smoke.sh [--gpuq PATH] [--image CUDA_IMAGE] [--database-url URL]
#
# 1. NVML inventory: the cards `gpuq doctor --json` sees through NVML (uuid, name, memory) must be
#    exactly those `nvidia-smi --query-gpu=uuid,name,memory.total` lists.
# 2. Fenced job (needs Docker and the NVIDIA Container Toolkit): `gpuq doctor --smoke-image IMAGE`
#    runs a container fenced to card 0 that must list only that card in `nvidia-smi -L`.
# 3. Fenced vs privileged A/B: the same image run `--privileged` sees every card (what the fence
#    prevents), and run with `--gpus device=UUID` of card 0 sees only that card.
# Parts 2 and 3 are skipped, with a message, on a host without Docker. IMAGE must be present
# locally (gpuq never pulls): a CUDA base image with nvidia-smi, e.g. nvidia/cuda:12.4.1-base-ubuntu22.04.
# Exits non-zero when any part fails.
set -euo pipefail

GPUQ=${GPUQ:-target/release/gpuq}
IMAGE=${GPUQ_SMOKE_IMAGE:-}
DB_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --gpuq) GPUQ=$2; shift 2 ;;
    --image) IMAGE=$2; shift 2 ;;
    --database-url) DB_ARGS=(--database-url "$2"); shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "gpu-smoke: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

failures=0
say() { printf '%s\n' "$*"; }
pass() { say "pass  $*"; }
fail() { say "FAIL  $*"; failures=$((failures + 1)); }
skip() { say "skip  $*"; }

for tool in nvidia-smi python3; do
  command -v "$tool" >/dev/null || { say "gpu-smoke: $tool is not on PATH (install the NVIDIA driver / python3)"; exit 2; }
done
[ -x "$GPUQ" ] || command -v "$GPUQ" >/dev/null || { say "gpu-smoke: gpuq binary $GPUQ not found (--gpuq PATH)"; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- 1. NVML inventory vs nvidia-smi -------------------------------------------------------------
say "== 1. NVML inventory (gpuq doctor) vs nvidia-smi"
# The doctor's exit status is judged below by its checks; here only its inventory is wanted.
"$GPUQ" doctor --json --gpu-source nvml --runner false --data-dir "$work/data" "${DB_ARGS[@]}" \
  >"$work/doctor.json" 2>"$work/doctor.err" || true
nvidia-smi --query-gpu=uuid,name,memory.total --format=csv,noheader,nounits >"$work/smi.csv"
say "nvidia-smi:"; sed 's/^/    /' "$work/smi.csv"
if python3 - "$work/doctor.json" "$work/smi.csv" <<'PY'
import csv, json, sys
doc = json.load(open(sys.argv[1]))
gpus = next(c for c in doc["checks"] if c["name"] == "gpus")
print(f"    gpuq doctor: {gpus['status']}: {gpus['detail']}")
if gpus["status"] == "fail":
    sys.exit(1)
ours = {c["uuid"]: (c["name"], c["memory_total_mib"]) for c in gpus["data"]["cards"]}
smi = {r[0].strip(): (r[1].strip(), int(r[2].strip())) for r in csv.reader(open(sys.argv[2])) if r}
ok = True
for uuid in sorted(set(ours) | set(smi)):
    a, b = ours.get(uuid), smi.get(uuid)
    # NVML reports bytes, nvidia-smi MiB: they agree to the MiB.
    same = a is not None and b is not None and a[0] == b[0] and abs(a[1] - b[1]) <= 1
    print(f"    {'same' if same else 'DIFF'} {uuid}: gpuq {a} nvidia-smi {b}")
    ok &= same
sys.exit(0 if ok else 1)
PY
then pass "NVML inventory equals nvidia-smi"; else fail "NVML inventory differs from nvidia-smi (or NVML failed; see $work/doctor.err)"; cat "$work/doctor.err" || true; fi

# ---- 2 and 3 need Docker ----------------------------------------------------------------------
if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
  skip "Docker is not available on this host: the fenced job and the A/B were not run (install Docker and the NVIDIA Container Toolkit to run them)"
  if [ "$failures" -eq 0 ]; then say "gpu-smoke: NVML part passed"; else say "gpu-smoke: $failures part(s) failed"; fi
  exit $(( failures > 0 ))
fi
if [ -z "$IMAGE" ]; then
  skip "no CUDA image given (--image IMAGE or GPUQ_SMOKE_IMAGE): the fenced job and the A/B were not run"
  exit $(( failures > 0 ))
fi
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  fail "image $IMAGE is not present locally (gpuq never pulls: docker pull or docker load it)"
  exit 1
fi

# ---- 2. A fenced job sees only its card --------------------------------------------------------
say "== 2. fenced job through gpuq (gpuq doctor --smoke-image $IMAGE)"
"$GPUQ" doctor --json --gpu-source nvml --data-dir "$work/data" --smoke-image "$IMAGE" "${DB_ARGS[@]}" \
  >"$work/doctor2.json" 2>/dev/null || true
if python3 - "$work/doctor2.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for name in ("nvidia-runtime", "smoke"):
    c = next(c for c in doc["checks"] if c["name"] == name)
    print(f"    {c['status']} {name}: {c['detail']}")
smoke = next(c for c in doc["checks"] if c["name"] == "smoke")
sys.exit(0 if smoke["status"] == "pass" else 1)
PY
then pass "a fenced job sees only its card"; else fail "the fenced job did not see exactly its card"; fi

# ---- 3. Fenced vs privileged A/B --------------------------------------------------------------
say "== 3. fenced vs privileged A/B with $IMAGE"
total=$(wc -l <"$work/smi.csv")
first=$(head -n1 "$work/smi.csv" | cut -d, -f1 | tr -d ' ')
privileged=$(docker run --rm --privileged --gpus all "$IMAGE" nvidia-smi -L 2>&1 | grep -c '^GPU ' || true)
fenced_out=$(docker run --rm --gpus "device=$first" "$IMAGE" nvidia-smi -L 2>&1 || true)
fenced=$(printf '%s\n' "$fenced_out" | grep -c '^GPU ' || true)
say "    privileged container sees $privileged of $total cards"
say "    fenced container (device=$first) sees $fenced:"; printf '%s\n' "$fenced_out" | sed 's/^/      /'
if [ "$privileged" -eq "$total" ]; then pass "A: a privileged container sees every card ($total)"; else fail "A: a privileged container saw $privileged of $total cards"; fi
if [ "$fenced" -eq 1 ] && printf '%s\n' "$fenced_out" | grep -q "$first"; then
  pass "B: a fenced container sees only $first"
else
  fail "B: a fenced container saw $fenced cards"
fi
if [ "$total" -lt 2 ]; then
  say "note: one card on this host: the A/B shows the fence only with two or more cards"
fi

if [ "$failures" -eq 0 ]; then say "gpu-smoke: all parts passed"; else say "gpu-smoke: $failures part(s) failed"; fi
exit $(( failures > 0 ))
