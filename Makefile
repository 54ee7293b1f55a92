# Gantry: the two commands a newcomer needs.
#   make demo   builds Gantry and runs examples/pipeline.yaml on the embedded default
#   make test   installs and starts what the tests need, then runs them all
.PHONY: demo test deps build lint bench fuzz

CARGO ?= cargo

deps:
	scripts/install-deps.sh

build:
	$(CARGO) build -p gantry

demo: deps build
	scripts/demo.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: deps
	scripts/test.sh

fuzz:
	fuzz/run.sh 60

bench:
	$(CARGO) bench -p gantry-core
