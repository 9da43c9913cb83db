#!/usr/bin/env bash
# The run command (`make run`): installs what is missing, builds gpuq (release, optimised WASM) and
# serves it on the embedded Postgres under ./gpuq-data.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
. scripts/services.sh
start_dockerd        # jobs run in Docker; gpuq also serves (and says why in /readyz) without it
build_test_image     # gpuq-test/busybox:latest, for the demo below
export PATH="$PWD/end2end/node_modules/.bin:$PATH"   # binaryen's wasm-opt, for the release bundle
# Type-erased views (a 22% smaller bundle, and a faster build); --split gives each lazy route its
# own WASM chunk, so the first page load fetches only the shared code (see scripts/bundle-size.sh).
export RUSTFLAGS="--cfg erase_components"
cargo leptos build --release --split
LISTEN=${GPUQ_LISTEN:-127.0.0.1:3000}
if [ -z "${GPUQ_GPU_SOURCE:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1'; then
  export GPUQ_GPU_SOURCE=sim
  export GPUQ_SIM_GPUS=${GPUQ_SIM_GPUS:-"3x24576:NVIDIA GeForce RTX 3090,1x81920:NVIDIA A100 80GB"}
  echo "No NVIDIA driver found (libnvidia-ml.so.1): using simulated cards: $GPUQ_SIM_GPUS"
fi
cat <<MSG

gpuq is starting on http://$LISTEN
Sign in as \`admin\`: on the first start the password is GPUQ_BOOTSTRAP_ADMIN_PASSWORD if you set
it, otherwise a random one printed once in the log below ("created user \`admin\` with password …").
Stop with Ctrl-C (the embedded Postgres stops with it).

MSG
exec target/release/gpuq serve --listen "$LISTEN" --site-root target/site "$@"
