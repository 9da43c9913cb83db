# The two commands: `make run` and `make test` (see README.md). `make test` runs the four parts
# below in order; each part can also be run alone while working on it.
.PHONY: run test lint test-rust test-e2e image deps

run:
	scripts/run.sh

test:
	scripts/test.sh all

# Format, the direction of imports, clippy for the server and for the browser bundle.
lint:
	scripts/test.sh lint

# Unit and integration tests against real Postgres and dockerd.
test-rust:
	scripts/test.sh rust

# The browser bundle and the Playwright tests in headless Chromium.
test-e2e:
	scripts/test.sh e2e

# The image gpuq:latest, built here without a registry (scripts/image.sh), and its smoke test.
image:
	scripts/test.sh image

deps:
	scripts/deps.sh
