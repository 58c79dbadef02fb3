# chargeonce — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO          ?= go
PYTHON      ?= python3
VENV        := .venv
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
WITH_EMU    := scripts/with-emulator.sh

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-24s %s\n", $$1, $$2}'

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Create the Python virtualenv (moto, cfn-lint, aws-sam-cli, Schemathesis, Powertools)

.PHONY: fmt-check
fmt-check: ## Fail if any Go file is not gofmt-ed
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.venv/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The repository holds two modules, as aws-sdk-go-v2 does: the service at
# the top, and the idempotency library in pkg/idem, which the service
# takes through a replace. Every Go step runs in both.
IDEM := pkg/idem

.PHONY: vet
vet: ## go vet and staticcheck, in both modules (with the samlocal tag, so test/sam is checked too)
	$(GO) vet -tags samlocal ./...
	$(GO) run $(STATICCHECK) -tags samlocal ./...
	cd $(IDEM) && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

MODEL_PKG    := ./test/model
MODEL_CHECKS ?= 1000
# The simulation of two and three Regions (docs/regions.md): a short run
# of each world here, about 0.7 s a history; make soak runs it at length.
REGIONS_PKG    := ./test/regions
REGIONS_CHECKS ?= 25
# The same model with PROVIDER=stripe on stripesim: fewer histories, each
# slower (a lost answer costs the adapter's timeout). Both run under a
# 30-minute timeout: the 1,000 histories take about 4 minutes on a quiet
# machine and 9.5 under load, near go test's default of 10.
MODEL_STRIPE_CHECKS ?= 200
# A count, not a duration: Go 1.26's fuzz coordinator can report a spurious
# "context deadline exceeded" when a duration runs out while a worker is
# busy (golang/go#75804, fixed in Go 1.27). 20,000 inputs took 3-17 s a target in a clean-clone make test.
FUZZTIME     ?= 20000x
# module directory:package:target
FUZZ_TARGETS := $(IDEM):.:FuzzCanonicalJSON $(IDEM):.:FuzzFingerprintEquivalence $(IDEM):.:FuzzKeyRoundTrip \
                .:./internal/charge:FuzzCreate .:./internal/charge:FuzzCommandID \
                .:./internal/metrics:FuzzAppendString .:./internal/metrics:FuzzAppendFloat

# The store tests whose answers depend on DynamoDB honouring a retried
# transaction's ClientRequestToken (the emulator does by default).
TOKEN_BLIND_TESTS := Lifecycle|Fencing|Settlements|CommitRetried|RetriedPut

.PHONY: test
test: lint fuzz schemathesis ## make lint (with cfn-lint), short fuzz runs, Schemathesis on the local stack, then every test with -race on the emulator, then 1,000 model histories and 200 in Stripe mode, and 25 in each world of two and three Regions
	$(WITH_EMU) bash -c 'set -eo pipefail; $(GO) test -race -count=1 $$($(GO) list ./... | grep -vx -e "$$($(GO) list $(MODEL_PKG))" -e "$$($(GO) list $(REGIONS_PKG))"); \
		$(GO) test -count=1 -v $(REGIONS_PKG) -rapid.checks=$(REGIONS_CHECKS) | grep -v "^=== RUN"; \
		$(GO) test -count=1 -timeout 30m -v -run "^TestChargePathModel$$" $(MODEL_PKG) -rapid.checks=$(MODEL_CHECKS) | grep -v "^=== RUN"; \
		$(GO) test -count=1 -timeout 30m -v -run "^TestChargePathModelStripe$$" $(MODEL_PKG) -rapid.checks=$(MODEL_STRIPE_CHECKS) | grep -v "^=== RUN"; \
		cd $(IDEM) && $(GO) test -race -count=1 ./...'
ifneq ($(EMULATOR),fakecloud)
	@echo "the store's lifecycle and fencing tests again, on an emulator that ignores ClientRequestToken as moto does:"
	cd $(IDEM) && EMULATOR_HONOUR_REQUEST_TOKEN=0 ../../$(WITH_EMU) $(GO) test -count=1 -run '$(TOKEN_BLIND_TESTS)' . ./dynamostore
endif

# EMULATOR=fakecloud runs make test, make run and make bench on fakecloud
# instead of moto (scripts/fakecloud.py finds it on PATH or in
# bin/tools/bin). It is optional: cargo compiles it for about 40 minutes on
# two cores, so nothing else depends on it. fakecloud always honours
# ClientRequestToken, so make test's token-blind second run is moto's only.
FAKECLOUD_VERSION := 0.51.0
# Where scripts/fakecloud.py finds it; empty when it is not installed.
FAKECLOUD_BIN      = $(firstword $(shell command -v fakecloud) $(wildcard bin/tools/bin/fakecloud))

.PHONY: fakecloud
fakecloud: ## Install the pinned fakecloud (cargo, ~40 min on 2 cores) into bin/tools/bin, for EMULATOR=fakecloud
	cargo install fakecloud --version $(FAKECLOUD_VERSION) --locked --root $(CURDIR)/bin/tools

.PHONY: fuzz
fuzz: venv ## Fuzz every target for FUZZTIME (default 20,000 inputs) each, on the emulator
	$(WITH_EMU) bash -c 'for t in $(FUZZ_TARGETS); do \
		IFS=: read -r dir pkg name <<< "$$t"; \
		(cd "$$dir" && $(GO) test -run "^$$" -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg") || exit 1; \
	done'

.PHONY: soak
soak: venv ## The model test on fresh seeds, both modes, and the simulation of two and three Regions, for SOAK_MINUTES (default 10), then a short make chaos (CHAOS_DURATION=60s), on the emulator; prints the histories run
	$(WITH_EMU) env GO=$(GO) scripts/soak.sh

# make chaos (docs/testing.md#chaos): the local stack with its DynamoDB,
# SQS and provider behind Toxiproxy, under load and random faults, the
# last CHAOS_OUTAGE of CHAOS_DURATION a DynamoDB outage; then healing,
# settling, and the checks. Not part of make test: it takes minutes.
# `make chaos CHAOS_ARGS="-seed 7 -rate 8"` passes more flags to cmd/chaos.
CHAOS_DURATION ?= 3m
CHAOS_OUTAGE   ?= 30s
CHAOS_ARGS     ?=

.PHONY: chaos
chaos: venv ## The local stack behind Toxiproxy: every operation under random faults for CHAOS_DURATION (default 3m), then healed, settled and checked against the provider's ledger and the tables
	@mkdir -p out
	$(GO) build -o out/localstack ./cmd/localstack
	$(GO) build -o out/chaos ./cmd/chaos
	$(WITH_EMU) out/chaos -stack out/localstack -duration $(CHAOS_DURATION) -outage $(CHAOS_OUTAGE) -out out/chaos $(CHAOS_ARGS)

# ---- Local stack and end-to-end test ----
# `make run RUN_ARGS="-emulator-port 0 -slow 8s"` passes flags to cmd/localstack.
RUN_ARGS ?=

.PHONY: run
run: venv ## Run the whole stack on loopback (API 127.0.0.1:3000) in the foreground until Ctrl-C
	$(GO) run ./cmd/localstack $(RUN_ARGS)

# Schemathesis (pinned in requirements.txt) generates requests from
# api/openapi.yaml against a local stack that scripts/schemathesis.sh starts
# on free ports and stops; seed, example count and checks are in
# scripts/schemathesis.toml. `make schemathesis SCHEMATHESIS_ARGS="--seed 7"`
# passes more options to `schemathesis run`.
SCHEMATHESIS_ARGS ?=

.PHONY: schemathesis
schemathesis: venv ## Spec-driven API test: Schemathesis (50 examples per operation, fixed seed) on a local stack on free ports
	scripts/schemathesis.sh $(SCHEMATHESIS_ARGS)

# `make test` runs this test too, as part of ./...; this target shows its log.
.PHONY: e2e
e2e: venv ## Build the bootstraps, run them under the Lambda RIE (bin/tools) on the emulator, print sizes and init durations
	$(WITH_EMU) $(GO) test -count=1 -v -run '^TestFunctionsUnderTheRuntimeEmulator$$' ./test/e2e

# ---- sam local (docs/sam-local.md) ----
# scripts/sam-docker.sh installs docker.io (and qemu for a foreign
# architecture) from Debian when missing, starts dockerd unless one runs,
# makes sure the Lambda base image is there (the real one, or a stand-in it
# says it built), runs the command, then stops what it started and puts
# iptables, ip_forward and binfmt_misc back. SAM_ARCH: arm64 (as deployed;
# under qemu on x86_64) or x86_64 (native on x86_64).
SAM_ARCH ?= arm64
SAM_DOCKER := scripts/sam-docker.sh $(SAM_ARCH)

.PHONY: sam-local
sam-local: venv ## Docker, the base image, the emulator and provider on the docker bridge, sam build; then a shell where sam local invoke/start-api work (SAM_ARCH=arm64|x86_64)
	@mkdir -p out
	$(GO) build -o out/samlocal ./cmd/samlocal
	$(SAM_DOCKER) out/samlocal -arch $(SAM_ARCH)

# Not part of make test: it needs root to install packages and run a
# daemon. .ci/run runs it after make test.
.PHONY: sam-test
sam-test: venv ## Through SAM CLI itself: sam build, sam local invoke of every function with events/, sam local start-api with HTTP, answers checked against the spec
	SAM_DOCKER_SKIP_OK=1 $(SAM_DOCKER) env SAM_ARCH=$(SAM_ARCH) $(GO) test -tags samlocal -count=1 -v -timeout 15m -run '^TestSAMLocal$$' ./test/sam

# ---- Lambda build (provided.al2023, one static `bootstrap` per function) ----
# GOOS/GOARCH default to the Lambda target (template.yaml: arm64); override on
# the command line, e.g. `make build GOARCH=amd64` for a host binary.
GOOS      ?= linux
GOARCH    ?= arm64
BIN       := bin
FUNCTIONS := charge sweeper reconcile intake audit devauth
GO_BUILD   = CGO_ENABLED=0 GOOS=$(GOOS) GOARCH=$(GOARCH) $(GO) build -tags lambda.norpc -trimpath -ldflags "-s -w"

.PHONY: build
build: $(FUNCTIONS:%=$(BIN)/%/bootstrap) ## Build bin/<function>/bootstrap for every function

# Always handed to go build: its cache decides what is stale.
$(BIN)/%/bootstrap: FORCE
	$(GO_BUILD) -o $@ ./functions/$*

# `sam build` (Metadata BuildMethod: makefile) runs `make build-<LogicalId>`
# from the repository root with ARTIFACTS_DIR set; logical ID -> package:
SAM_FUNCTION_ChargeFunction    := charge
SAM_FUNCTION_SweeperFunction   := sweeper
SAM_FUNCTION_ReconcileFunction := reconcile
SAM_FUNCTION_IntakeFunction    := intake
SAM_FUNCTION_AuditFunction     := audit
# Only in a template built with ApiAuthorizer=sam-local-dev (sam local).
SAM_FUNCTION_DevAuthorizerFunction := devauth
SAM_TARGETS := build-ChargeFunction build-SweeperFunction build-ReconcileFunction build-IntakeFunction build-AuditFunction build-DevAuthorizerFunction

.PHONY: $(SAM_TARGETS)
build-ChargeFunction: ## sam build hook for ChargeFunction (into ARTIFACTS_DIR)
build-SweeperFunction: ## sam build hook for SweeperFunction (into ARTIFACTS_DIR)
build-ReconcileFunction: ## sam build hook for ReconcileFunction (into ARTIFACTS_DIR)
build-IntakeFunction: ## sam build hook for IntakeFunction (into ARTIFACTS_DIR)
build-AuditFunction: ## sam build hook for AuditFunction (into ARTIFACTS_DIR)
build-DevAuthorizerFunction: ## sam build hook for DevAuthorizerFunction (into ARTIFACTS_DIR)
$(SAM_TARGETS): build-%:
	$(if $(ARTIFACTS_DIR),,$(error ARTIFACTS_DIR is not set: $@ is run by `sam build`; use `make build`))
	$(GO_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/$(SAM_FUNCTION_$*)

# The pinned SAM CLI from the virtualenv, without telemetry. Both steps work
# offline and without Docker: validate --lint runs cfn-lint on the
# transformed template, build runs the build-<LogicalId> targets above into
# .aws-sam/build (git-ignored; `make clean` removes it).
SAM := SAM_CLI_TELEMETRY=0 $(VENV)/bin/sam

# make check: what runs without the emulator or .venv, in under a minute.
# Whole packages that need no DynamoDB, and in the packages that mix both
# the tests that need none (fuzz seeds, examples, the contract's rules on
# memstore, Do, parsing and canonical JSON). The emulator tests elsewhere
# fail loudly without an endpoint; make test runs them.
CHECK_PKGS  := ./cmd/chaos ./cmd/loadgen ./cmd/providersim ./internal/actor ./internal/app ./internal/awsenv ./internal/metrics \
               ./internal/provider/... ./internal/tracing ./test/deploy ./test/docs ./cmd/benchdoc ./cmd/capacity ./internal/benchout
CHECK_MIXED := ./internal/charge ./internal/intake ./internal/audit ./internal/charge/httpapi
CHECK_RUN   := ^(Fuzz|Example|TestRules|TestDo|TestParse|TestCanonicalJSON|TestFingerprintJSON|TestNewKey|TestEmptyDescriptionIsNoDescription|TestTableInputFollowsTheOptions|TestLayoutOptionsRefused|TestEachChangeOfARecordIsNamed|TestAChangeNotReadIsKeptAsUnreadable|TestProblemsMatchTheSpec|TestAThrottledStoreShedsWhatCanWait)

.PHONY: check
check: fmt-check ## gofmt, go vet and every test that needs no emulator (no .venv needed; under a minute)
	$(GO) vet ./...
	cd $(IDEM) && $(GO) vet ./...
	$(GO) test -count=1 $(CHECK_PKGS)
	$(GO) test -count=1 -run '$(CHECK_RUN)' $(CHECK_MIXED)
	cd $(IDEM) && $(GO) test -count=1 ./memstore && $(GO) test -count=1 -run '$(CHECK_RUN)' . ./dynamostore

.PHONY: lint
lint: venv fmt-check vet ## gofmt, vet, staticcheck, go.mod tidiness, cfn-lint, sam validate --lint, sam build
	$(GO) mod tidy -diff
	cd $(IDEM) && $(GO) mod tidy -diff
	$(VENV)/bin/cfn-lint template.yaml template-regions.yaml
	$(SAM) validate --lint
	$(SAM) validate --lint -t pkg/idem/docs/recovery-template.yaml
	$(SAM) build

# ---- Benchmarks: docs/benchmarks.md's figures ----
BENCH_COUNT ?= 5
BENCH_TIME  ?= 1s
LOAD_N      ?= 20000
STEADY_N    ?= 600
STEADY_RATE ?= 10
# How long loadgen sustain runs each offered rate.
SUSTAIN_STEP ?= 60s
# The charges made before each step of loadgen growth, and of its run on
# moto's own Query and garbage collection (shorter: moto's sweeps alone
# then hold the emulator for seconds at a time).
GROWTH_SIZES      ?= 0,10000,50000
GROWTH_MOTO_SIZES ?= 0,10000
comma := ,
# $(call GROWTH_RUN,OUT,SIZES,ENV) runs loadgen growth on two fresh stacks
# started with ENV, the growing one on 127.0.0.1:3002 and the reference on
# 127.0.0.1:3003, and stops them.
GROWTH_RUN   = set -euo pipefail; $(if $(3),export $(3);) \
	$(call START_STACK,3002,$(1)-stack.log,-addr 127.0.0.1:3002 -provider-addr 127.0.0.1:4012 -emulator-port 4568); \
	out/localstack -addr 127.0.0.1:3003 -provider-addr 127.0.0.1:4013 -emulator-port 4569 >$(1)-reference-stack.log 2>&1 & ref=$$!; \
	trap 'kill -INT $$pid $$ref; wait $$pid $$ref || true' EXIT; \
	for i in $$(seq 1 600); do $(call PORT_OPEN,3003) && break; sleep 0.1; done; \
	out/loadgen growth -sizes $(2) -out $(1) \
		-target http://127.0.0.1:3002 -provider http://127.0.0.1:4012 -dynamodb http://127.0.0.1:4568 \
		-reference-target http://127.0.0.1:3003 -reference-provider http://127.0.0.1:4013 -reference-dynamodb http://127.0.0.1:4569
# The Powertools TypeScript handler TestSideBySide runs, and its packages,
# pinned in its package-lock.json and installed from the npm registry.
POWERTOOLS_TS := test/bench/powertools-ts
# Wait up to two minutes for the 1-minute load average to fall below 1.5:
# the machine may be shared, and each step loads it for the next.
WAIT_QUIET   = for i in $$(seq 1 24); do awk '{exit !($$1 < 1.5)}' /proc/loadavg && break; sleep 5; done
# $(call PORT_OPEN,PORT) succeeds when something accepts on 127.0.0.1:PORT.
PORT_OPEN    = (exec 3<>/dev/tcp/127.0.0.1/$(1)) 2>/dev/null
# $(call START_STACK,PORT,LOG,FLAGS) starts out/localstack FLAGS in the
# background, logging to LOG, stops it when the recipe's shell exits, and
# waits for its API on PORT.
START_STACK  = out/localstack $(3) >$(2) 2>&1 & pid=$$!; \
	trap 'kill -INT $$pid; wait $$pid || true' EXIT; \
	for i in $$(seq 1 600); do $(call PORT_OPEN,$(1)) && break; sleep 0.1; done

$(POWERTOOLS_TS)/node_modules/.installed: $(POWERTOOLS_TS)/package.json $(POWERTOOLS_TS)/package-lock.json
	cd $(POWERTOOLS_TS) && npm ci --no-audit --no-fund --ignore-scripts
	touch $@

.PHONY: bench
bench: venv build $(POWERTOOLS_TS)/node_modules/.installed ## Round trips, Powertools (Python and TypeScript) side by side, Go benchmarks, cold start, the seeds' retry mix, the sustained rate and the cost as the tables grow, on the local stack; rewrites docs/benchmarks.md and docs/capacity.md
	@mkdir -p out
	$(GO) build -o out/loadgen ./cmd/loadgen
	$(GO) build -o out/localstack ./cmd/localstack
	@$(WAIT_QUIET)
	$(WITH_EMU) bash -c 'set -eo pipefail; \
		$(GO) test -count=1 -v -run "^TestRoundTrips$$" ./test/bench -args -roundtrips=$(CURDIR)/out/roundtrips.md -roundtrips-json=$(CURDIR)/out/roundtrips.json; \
		$(GO) test -count=1 -v -run "^TestSideBySide$$" ./test/bench -args -sidebyside-json=$(CURDIR)/out/sidebyside.json; \
		{ echo "loadavg: $$(cut -d" " -f1-3 /proc/loadavg)"; \
		  $(GO) test -run "^$$" -bench . -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) ./test/bench; } | tee out/bench.txt; \
		$(GO) test -count=1 -v -run "^TestFunctionsUnderTheRuntimeEmulator$$" ./test/e2e | tee out/e2e.txt'
	@set -euo pipefail; \
	if $(call PORT_OPEN,3000); then \
		echo "bench: reusing the local stack on 127.0.0.1:3000"; \
	else \
		$(call START_STACK,3000,out/localstack.log,); \
	fi; \
	$(WAIT_QUIET); \
	out/loadgen -n $(STEADY_N) -rate $(STEADY_RATE) -out out/load-steady; \
	$(WAIT_QUIET); \
	out/loadgen sustain -bench out/bench.txt -duration $(SUSTAIN_STEP) -out out/sustain; \
	out/loadgen -n $(LOAD_N) -out out/load-seeds
	@echo "bench: the same fixed-rate run as the tables grow, on a fresh stack (127.0.0.1:3002) beside a reference whose tables stay empty (127.0.0.1:3003)"
	@$(WAIT_QUIET)
	@$(call GROWTH_RUN,out/growth,$(GROWTH_SIZES),)
	@echo "bench: the same with moto's own Query and garbage collection, up to $(lastword $(subst $(comma), ,$(GROWTH_MOTO_SIZES))) charges"
	@$(WAIT_QUIET)
	@$(call GROWTH_RUN,out/growth-moto,$(GROWTH_MOTO_SIZES),EMULATOR_INDEXED_QUERIES=0 EMULATOR_GC_FREEZE=0)
ifneq ($(FAKECLOUD_BIN),)
	@echo "bench: the sustained rate again on fakecloud ($(FAKECLOUD_BIN)), the stack on 127.0.0.1:3001"
	@$(WAIT_QUIET)
	EMULATOR=fakecloud $(WITH_EMU) $(GO) test -run '^$$' -bench '^Benchmark(EmulatorPutItem|EmulatorTransactWriteItems|Begin|Commit)$$' \
		-count $(BENCH_COUNT) -benchtime $(BENCH_TIME) ./test/bench | tee out/bench-fakecloud.txt
	@set -euo pipefail; \
	export EMULATOR=fakecloud; \
	$(call START_STACK,3001,out/localstack-fakecloud.log,-addr 127.0.0.1:3001 -provider-addr 127.0.0.1:4011 -emulator-port 4567); \
	$(WAIT_QUIET); \
	rc=0; out/loadgen sustain -bench out/bench-fakecloud.txt -duration $(SUSTAIN_STEP) -out out/sustain-fakecloud \
		-target http://127.0.0.1:3001 -provider http://127.0.0.1:4011 -dynamodb http://127.0.0.1:4567 || rc=$$?; \
	echo $$rc >out/sustain-fakecloud.rc
endif
	$(GO) run ./cmd/benchdoc -doc docs/benchmarks.md -bench out/bench.txt -roundtrips out/roundtrips.md \
		-load out/load-steady.json,out/load-seeds.json -coldstart out/e2e.txt -bin $(BIN) \
		-sidebyside out/sidebyside.json -sustain out/sustain.json -growth "the emulator as make run starts it=out/growth.json,moto's own Query and garbage collection=out/growth-moto.json" \
		-isolation docs/isolation.json $(if $(FAKECLOUD_BIN),-sustain-fakecloud out/sustain-fakecloud.json)
	$(GO) run ./cmd/capacity -roundtrips out/roundtrips.json -bench out/bench.txt
	@# A failed check on fakecloud fails make bench, after the docs show its steps.
	$(if $(FAKECLOUD_BIN),@rc=$$(cat out/sustain-fakecloud.rc); [ "$$rc" = 0 ] || { echo "bench: loadgen sustain on fakecloud exited $$rc (see above)"; exit 1; })

# loadgen isolation on a fresh stack (API on 127.0.0.1:3004) that reads
# the tenants' limits every minute, as deployed: tenant A at 10 times its
# limit beside tenant B, sent with vegeta. A read every second fell on B's
# requests ten times as often alone as beside A's flood. Its summary is committed (docs/isolation.json),
# and make bench renders its section from it without measuring again. It
# fails only on behaviours (B always 201, A's excess 429, exact ledgers).
# B's latency beside A over alone is its figure, never a check: the
# machine's load moves it. Not part of make test or CI: it takes minutes.
ISOLATION_PHASE  ?= 10s
ISOLATION_ROUNDS ?= 6
ISOLATION_LIMIT  ?= 2

.PHONY: isolation
isolation: venv ## One tenant at 10 times its limit beside another (vegeta, on a fresh local stack): docs/isolation.json and its section of docs/benchmarks.md
	@mkdir -p out
	$(GO) build -o out/loadgen ./cmd/loadgen
	$(GO) build -o out/localstack ./cmd/localstack
	@$(WAIT_QUIET)
	@set -euo pipefail; export LIMITS_MAX_AGE=1m; \
	$(call START_STACK,3004,out/isolation-stack.log,-addr 127.0.0.1:3004 -provider-addr 127.0.0.1:4014 -emulator-port 4570); \
	out/loadgen isolation -phase $(ISOLATION_PHASE) -rounds $(ISOLATION_ROUNDS) -limit $(ISOLATION_LIMIT) -limits-max-age 1m -out docs/isolation \
		-target http://127.0.0.1:3004 -provider http://127.0.0.1:4014 -dynamodb http://127.0.0.1:4570
	$(GO) run ./cmd/benchdoc -doc docs/benchmarks.md -bench "" -roundtrips "" -load "" -isolation docs/isolation.json

# The capacity model reads make bench's measurements from the snapshot it
# keeps (docs/capacity-measured.json), so a change of its cited inputs
# (docs/capacity-inputs.json), of its template or of template.yaml needs
# no new measurement.
.PHONY: capacity
capacity: ## Rewrite docs/capacity.md from the committed measurements, inputs and template.yaml
	$(GO) run ./cmd/capacity

.PHONY: clean
clean: ## Remove build outputs (bin/, .aws-sam/)
	rm -rf $(BIN) .aws-sam

.PHONY: FORCE
FORCE:
