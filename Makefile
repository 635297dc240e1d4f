# make test: everything CI runs (format, lints, every test against moto).
# make run:  the service locally (see README).

CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: test fmt-check clippy build run clean

test: fmt-check clippy
	./scripts/with-moto.sh $(CARGO) test --all-targets --locked

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --all-targets --locked -- -D warnings

run:
	./scripts/run.sh

build:
	$(CARGO) build --release --locked --bins

clean:
	$(CARGO) clean
