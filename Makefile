# make test: everything CI runs (format, lints, every test against moto, and
# the SeaweedFS ones against SeaweedFS).
# make run:  the service locally (see README).

CARGO ?= cargo
export CARGO_TERM_COLOR ?= never
# The pinned Python tools (make tools), first on PATH for every command.
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)

.PHONY: test tools fmt-check clippy lib-only openapi sam-validate deploy-check api-fuzz build run clean soak fuzz bench mutants chaos chaos-damage chaos-seaweedfs

# The suite twice: with the testing feature (fault injection: every test),
# then on the feature set that ships (the tests that need no fault injection;
# those that do declare required-features = ["testing"] in Cargo.toml).
test: tools fmt-check clippy lib-only openapi sam-validate
	./scripts/with-moto.sh ./scripts/with-seaweedfs.sh $(CARGO) test --all-targets --locked --features testing
	./scripts/with-moto.sh ./scripts/with-seaweedfs.sh $(CARGO) test --all-targets --locked
	./scripts/with-moto.sh ./scripts/api-fuzz.sh 15 1

# Schemathesis at length against the built submit function (make test runs
# 15 examples per operation, deterministically).
API_FUZZ_EXAMPLES ?= 300
api-fuzz: tools
	$(CARGO) build --locked --bin submit
	./scripts/with-moto.sh ./scripts/api-fuzz.sh $(API_FUZZ_EXAMPLES) random

# The Python tools the tests use (moto, cfn-lint and the SAM translator and
# CLI, buquet, Schemathesis, awscli, ...), every version pinned in
# requirements-test.txt, in a virtual environment of their own, .venv/: made
# where missing and made again when requirements-test.txt changes (pip, from
# PyPI). The system Python is not touched. Everything make runs, cargo test
# and its tests included, finds .venv/bin first on PATH (VENV, above).
tools: $(VENV)/.installed

# Made afresh, so that it holds what the file says and nothing else.
$(VENV)/.installed: requirements-test.txt
	rm -rf $(VENV)
	python3 -m venv $(VENV)
	$(VENV)/bin/python3 -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
	touch $@

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --all-targets --locked -- -D warnings
	$(CARGO) clippy --lib --locked --no-default-features -- -D warnings
	$(CARGO) clippy --all-targets --locked --features testing -- -D warnings

# docs/openapi.yaml is valid OpenAPI 3.1 and its examples match their
# schemas; the tests check every handler answer against it.
openapi:
	python3 scripts/openapi_check.py docs/openapi.yaml --doc

# The template as the SAM CLI reads it (cfn-lint included); offline.
sam-validate:
	AWS_DEFAULT_REGION=us-east-1 SAM_CLI_TELEMETRY=0 python3 -m samcli validate --lint --template template.yaml

# sam build (x86_64) and each built bootstrap run against moto under a
# runtime API stand-in: one submit, one replay, one sweep. Not part of make
# test (a release build of both functions); README has its result.
deploy-check:
	./scripts/with-moto.sh ./scripts/deploy-check.sh

# The library alone, for users of the Rust API: no Lambda runtime, no CLI.
lib-only:
	$(CARGO) build --lib --locked --no-default-features

# make run RECORD_EVENTS=submitter: a bucket that sends no events (the
# submit function sends each record's due message itself).
run:
	./scripts/run.sh

# The model-based randomized test at length (CI runs 1,000 schedules).
SOAK_SCHEDULES ?= 50000
soak:
	MODEL_SCHEDULES=$(SOAK_SCHEDULES) MODEL_BASE_SEED=$$(date +%s) $(CARGO) test --release --locked --features testing --test model -- --nocapture

# The chaos world at length (tests/chaos.rs, docs/reliability.md): the
# release binaries (profile chaos: release's, into target/chaos/, with the
# testing feature, which lets them take a test world's operating conditions
# and adds the fault injector they never build; target/chaos/ so that no
# such binary lands in target/release/), one world
# for CHAOS_SECONDS of producing with its progress printed, the same on
# SeaweedFS with RECORD_EVENTS=submitter, then the five runs in which the
# world damages the bucket. make test runs the world for
# 20 s on the debug binaries it builds anyway. Figures: target/chaos-report/.
CHAOS_SECONDS ?= 300
CHAOS_SEED ?= $(shell date +%s)
CHAOS_BINS := --profile chaos --locked --features testing --bin submit --bin sweep
chaos: tools
	$(CARGO) build $(CHAOS_BINS)
	CHAOS_BIN_DIR=$(CURDIR)/target/chaos CHAOS_SECONDS=$(CHAOS_SECONDS) CHAOS_SEED=$(CHAOS_SEED) \
	  CHAOS_REPORT=$(CURDIR)/target/chaos-report ./scripts/with-moto.sh ./scripts/with-seaweedfs.sh \
	  $(CARGO) test --locked --features testing --test chaos -- --nocapture --include-ignored --test-threads 1

# The five damage runs alone, on the debug binaries.
chaos-damage: tools
	CHAOS_REPORT=$(CURDIR)/target/chaos-report ./scripts/with-moto.sh \
	  $(CARGO) test --locked --features testing --test chaos the_audit_reports -- --nocapture --ignored

# The world on SeaweedFS (RECORD_EVENTS=submitter) alone, on the debug binaries.
chaos-seaweedfs: tools
	CHAOS_REPORT=$(CURDIR)/target/chaos-report ./scripts/with-moto.sh ./scripts/with-seaweedfs.sh \
	  $(CARGO) test --locked --features testing --test chaos seaweedfs -- --nocapture --ignored

# The event fuzzer at length (CI runs 10,000 inputs).
FUZZ_ITERATIONS ?= 2000000
fuzz:
	FUZZ_ITERATIONS=$(FUZZ_ITERATIONS) FUZZ_SEED=$$(date +%s) $(CARGO) test --release --locked --test fuzz -- --nocapture

# Mutation testing of the protocol and the S3 adapter with cargo-mutants
# (installed where missing), against the tests that cover those files; the
# model test at 200 schedules per mutant. Hours on two cores: not part of
# make test. MUTANTS_FILES narrows it (one -f per file), MUTANTS_TESTS the
# test targets, MUTANTS_ARGS adds options (e.g. --shard 0/4, --iterate).
# The targets go to every cargo call (-C), so a mutant builds only them, not
# every test crate; the crate is built without debug information (faster to
# build and link). Results: mutants.out/; docs/testing.md says how to run a
# narrow first pass, then --iterate with the whole set on what it missed.
MUTANTS_FILES ?= -f "src/protocol/*.rs" -f "src/protocol/sweep/*.rs" -f src/store/s3.rs
MUTANTS_TESTS ?= --lib --test=s3_status --test=recovery --test=protocol --test=model --test=due_events \
  --test=sweep --test=submit_handler --test=clock --test=options --test=schemas --test=phase
mutants: tools
	@command -v cargo-mutants >/dev/null || $(CARGO) install --locked cargo-mutants
	CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0 MODEL_SCHEDULES=200 \
	  ./scripts/with-moto.sh $(CARGO) mutants --features testing --timeout 300 \
	  $(MUTANTS_FILES) $(addprefix -C=,$(MUTANTS_TESTS)) $(MUTANTS_ARGS)

# Figures for docs/benchmarks.md (not part of make test).
bench: tools build
	./scripts/with-moto.sh $(CARGO) bench --locked --features testing --bench bench -- --bench

build:
	$(CARGO) build --release --locked --bins

clean:
	$(CARGO) clean
