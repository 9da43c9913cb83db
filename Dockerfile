# gpuq's image: `make image` (scripts/image.sh) builds it here without a registry; elsewhere
#   docker build -t gpuq:latest .
# compiles everything in the build stage.
#
# Build stage. With a host-built `target/release/gpuq` in the context (scripts/release.sh: the
# server with its browser bundle inside), it is copied as it is; otherwise the stage compiles it with
# cargo-leptos. `make image` sets BUILDER and BASE to a Debian root made locally
# (localhost/gpuq-base:bookworm; the `localhost/` prefix means no registry image can ever be
# mistaken for it), so nothing is pulled.
ARG BUILDER=docker.io/library/rust:1.95-bookworm
ARG BASE=docker.io/library/debian:bookworm-slim

FROM ${BUILDER} AS build
WORKDIR /src
COPY . .
RUN set -eux; \
    if [ -x target/release/gpuq ]; then \
        echo "using the host-built target/release/gpuq"; \
    else \
        apt-get update; \
        apt-get install -y --no-install-recommends nodejs npm; \
        rustup target add wasm32-unknown-unknown; \
        cargo install cargo-leptos --version 0.3.10 --locked --features no_downloads; \
        cargo install wasm-bindgen-cli --version 0.2.129 --locked; \
        (cd end2end && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund); \
        scripts/release.sh; \
    fi; \
    install -D -m 0755 target/release/gpuq /out/gpuq

# Runtime: Debian slim, the Postgres server for the embedded cluster, curl for the health check.
FROM ${BASE} AS runtime
RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        postgresql ca-certificates curl; \
    rm -rf /var/lib/apt/lists/*; \
    useradd --system --user-group --home-dir /var/lib/gpuq --shell /usr/sbin/nologin gpuq; \
    install -d -m 0700 -o gpuq -g gpuq /var/lib/gpuq
COPY --from=build /out/gpuq /usr/local/bin/gpuq

# Listens on all of the container's addresses; publish the port where it is wanted. The embedded
# Postgres (no GPUQ_DATABASE_URL) keeps its cluster in the volume, run as the `gpuq` user.
ENV GPUQ_LISTEN=0.0.0.0:3000 \
    GPUQ_DATA_DIR=/var/lib/gpuq
USER gpuq
WORKDIR /var/lib/gpuq
VOLUME /var/lib/gpuq
EXPOSE 3000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD curl -fsS -o /dev/null http://127.0.0.1:3000/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/gpuq"]
CMD ["serve"]
