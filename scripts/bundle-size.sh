#!/usr/bin/env bash
# Measures the browser bundle as `make run` ships it: the hydrate crate built with the size-optimised
# `wasm-release` profile, wasm-bindgen, then binaryen's `wasm-opt -Oz`. Prints raw and gzip (-9)
# sizes of the .wasm and the JS glue. Needs the tools `make test` installs. Takes a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/end2end/node_modules/.bin:$PATH"
# As `make run` builds it (type-erased views); BUNDLE_RUSTFLAGS= measures without.
export RUSTFLAGS="${BUNDLE_RUSTFLAGS---cfg erase_components}"
out=target/bundle-size
rm -rf "$out" && mkdir -p "$out"
cargo build --lib --target wasm32-unknown-unknown --profile wasm-release \
  --no-default-features --features hydrate
wasm-bindgen --target web --no-typescript --out-dir "$out" --out-name gpuq \
  target/wasm32-unknown-unknown/wasm-release/gpuq.wasm
wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-mutable-globals "$out/gpuq_bg.wasm" -o "$out/gpuq_bg.opt.wasm"
size() { stat -c %s "$1"; }
gz() { gzip -9 -c "$1" | wc -c; }
wasm=$out/gpuq_bg.opt.wasm js=$out/gpuq.js
printf 'wasm: %8d B raw  %8d B gzip\n' "$(size "$wasm")" "$(gz "$wasm")"
printf 'js:   %8d B raw  %8d B gzip\n' "$(size "$js")" "$(gz "$js")"
total=$(( $(gz "$wasm") + $(gz "$js") ))
awk -v t="$total" 'BEGIN { printf "total gzip (wasm + js): %d B = %.1f KB; target <= 400 KB\n", t, t / 1000 }'
