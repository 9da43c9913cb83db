# The two commands: `make run` and `make test` (see README.md).
.PHONY: run test deps

run:
	scripts/run.sh

test:
	scripts/test.sh

deps:
	scripts/deps.sh
