#!/usr/bin/env bash
# Builds the release server with its browser bundle inside: target/release/gpuq, which serves the
# whole UI from any working folder (see src/server/http/assets.rs). `make image` uses it.
#
# Order matters: the server embeds target/site when it is compiled, so the site must be complete
# first. `--precompress` makes cargo-leptos build the front end, then the server (without it the
# two are built at the same time), and adds Brotli and gzip copies of the bundle, which gpuq serves
# to browsers that accept them.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/end2end/node_modules/.bin:$PATH"   # binaryen's wasm-opt (see TOOLCHAIN notes)
# The same flags as `make run`, so the two share one release build of the dependencies.
export RUSTFLAGS="--cfg erase_components"
unset "${!LEPTOS_@}"   # the debug settings `make test` exports; a release build takes the defaults
command -v wasm-opt >/dev/null || { echo "release.sh: wasm-opt not found (run scripts/deps.sh: npm ci in end2end/)" >&2; exit 1; }
started=$(date +%s)
cargo leptos build --release --split --precompress
bin=target/release/gpuq
# Proof that the binary carries this bundle: the WASM as built must be inside it, byte for byte.
python3 - "$bin" target/site/pkg/gpuq.wasm <<'PY'
import sys
binary, wasm = (open(p, "rb").read() for p in sys.argv[1:3])
if binary.find(wasm) < 0:
    sys.exit(f"release.sh: {sys.argv[1]} does not carry {sys.argv[2]}: the server was built before the site")
PY
echo "release.sh: $bin ($(du -h "$bin" | cut -f1)) carries the browser bundle; built in $(( $(date +%s) - started )) s"
