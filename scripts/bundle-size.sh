#!/usr/bin/env bash
# Measures the browser bundle as `make run` ships it: `cargo leptos build --release --split`
# (profile `wasm-release`, `--cfg erase_components`, binaryen's wasm-opt, one WASM chunk per lazy
# route). Prints raw and gzip -9 sizes of what the first page load fetches (main wasm, JS glue,
# split loader) and of each route's chunk. Needs the tools `make test` installs; a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/end2end/node_modules/.bin:$PATH"
export RUSTFLAGS="--cfg erase_components"
rm -rf target/site/pkg   # no stale chunks from earlier builds in the figures
cargo leptos build --release --split
python3 - target/site/pkg <<'PY'
import glob, gzip, os, sys
pkg = sys.argv[1]
def size(name):
    data = open(os.path.join(pkg, name), "rb").read()
    return len(data), len(gzip.compress(data, 9))
first = ["gpuq.wasm", "gpuq.js"] + [os.path.basename(p) for p in glob.glob(f"{pkg}/__wasm_split*.js")]
total = 0
print("first load (every page):")
for name in first:
    raw, gz = size(name)
    total += gz
    print(f"  {name[:40]:40} {raw:>9} B raw {gz:>8} B gzip")
print(f"  {'total':40} {'':>9}       {total:>8} B gzip = {total / 1000:.1f} KB (target <= 400 KB)")
print("per route, on its first visit:")
for path in sorted(glob.glob(f"{pkg}/split_*.wasm")):
    name = os.path.basename(path)
    raw, gz = size(name)
    route = name.split("___")[1].split("_route_view")[0] if "___" in name else name
    print(f"  {route:40} {raw:>9} B raw {gz:>8} B gzip")
shared = sum(size(os.path.basename(p))[1] for p in glob.glob(f"{pkg}/chunk_*.wasm"))
print(f"  {'shared small chunks (' + str(len(glob.glob(pkg + '/chunk_*.wasm'))) + ')':40} {'':>9}       {shared:>8} B gzip")
PY
