#!/usr/bin/env bash
# `make image`: builds the image gpuq:latest without pulling anything.
#   1. the base, localhost/gpuq-base:bookworm: a minimal Debian 12 root from Debian's packages
#      (debootstrap, deb.debian.org), made into an image with `docker import`; made once.
#   2. target/release/gpuq with its bundle inside (scripts/release.sh), unless it is newer than
#      every source file already.
#   3. `docker build` with that base for both stages; the build stage copies the host-built binary.
# Elsewhere, `docker build -t gpuq:latest .` pulls rust and debian-slim and compiles in the image.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${GPUQ_BASE_IMAGE:-localhost/gpuq-base:bookworm}
TAG=${GPUQ_IMAGE:-gpuq:latest}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
log() { printf '\033[1;34m[image]\033[0m %s\n' "$*"; }
started=$(date +%s)

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { echo "image.sh: debootstrap missing (scripts/deps.sh installs it)" >&2; exit 1; }
  log "making $BASE with debootstrap from $MIRROR (about a minute)"
  root=$(mktemp -d /tmp/gpuq-base.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase bookworm "$root" "$MIRROR" >/dev/null
  cat >"$root/etc/apt/sources.list" <<LIST
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
LIST
  # Slim, as debian:bookworm-slim: no caches, lists, manuals or docs.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/man/* \
    "$root"/usr/share/doc/* "$root"/var/log/*.log
  tar -C "$root" -c . | docker import -c 'CMD ["bash"]' - "$BASE" >/dev/null
  rm -rf "$root"; trap - EXIT
fi

bin=target/release/gpuq
if [ -x "$bin" ] && [ -z "$(find src style public migrations Cargo.toml Cargo.lock -newer "$bin" -print -quit)" ]; then
  log "reusing $bin (newer than every source)"
else
  log "building $bin with its browser bundle (scripts/release.sh)"
  scripts/release.sh
fi

log "docker build -t $TAG (base $BASE)"
# Host networking for the RUN steps: the default bridge may be missing (dockerd --bridge=none).
docker build --network host --build-arg BUILDER="$BASE" --build-arg BASE="$BASE" -t "$TAG" .
log "$TAG: $(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}'), made in $(( $(date +%s) - started )) s"
