#!/usr/bin/env bash
# Installs what building, running and testing gpuq needs, each only when missing (pinned versions).
# Safe to run again: a machine that has everything spends a few seconds here.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_LEPTOS_VERSION=0.3.10
WASM_BINDGEN_VERSION=0.2.129
APT_UPDATED=0

log() { printf '\033[1;34m[deps]\033[0m %s\n' "$*"; }

apt_install() {
  if [ "$APT_UPDATED" = 0 ]; then
    log "apt-get update"
    apt-get update -qq
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

need_apt=()
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
[ -x /bin/busybox ] || need_apt+=(busybox-static)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need_apt+=(postgresql)
fi
command -v psql >/dev/null 2>&1 || need_apt+=(postgresql-client)
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)   # builds the tests' fake NVML
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)   # `make image`'s base, no registry
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)   # `make lint` checks the unit
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)             # the strict SMTP relay's certificates (tests)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)                 # the image's smoke test
command -v docker-registry >/dev/null 2>&1 || need_apt+=(docker-registry)   # the pull tests' registry
command -v htpasswd >/dev/null 2>&1 || need_apt+=(apache2-utils)   # the auth registry's bcrypt htpasswd file
/usr/bin/python3 -c 'import aiosmtpd' >/dev/null 2>&1 || need_apt+=(python3-aiosmtpd)   # the notification tests' SMTP sink
if [ ${#need_apt[@]} -gt 0 ]; then
  apt_install "${need_apt[@]}"
fi

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  log "rustup target add wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi

if [ "$(cargo leptos --version 2>/dev/null | awk '{print $2}')" != "$CARGO_LEPTOS_VERSION" ]; then
  log "cargo install cargo-leptos $CARGO_LEPTOS_VERSION (about 12 minutes on 2 cores)"
  cargo install cargo-leptos --version "$CARGO_LEPTOS_VERSION" --locked --features no_downloads
fi

if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$WASM_BINDGEN_VERSION" ]; then
  log "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION"
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --locked
fi

if [ ! -x end2end/node_modules/.bin/wasm-opt ] || [ ! -d end2end/node_modules/@playwright/test ] \
   || [ end2end/package-lock.json -nt end2end/node_modules/.package-lock.json ]; then
  log "npm ci (Playwright test runner, binaryen's wasm-opt)"
  (cd end2end && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
fi
log "all tools present"
