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
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Create the Python virtualenv (moto, cfn-lint)

.PHONY: fmt-check
fmt-check: ## Fail if any Go file is not gofmt-ed
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.venv/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## go vet and staticcheck
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

.PHONY: test
test: venv fmt-check vet ## Lint, then every test with -race on the emulator
	$(WITH_EMU) $(GO) test -race -count=1 ./...

# ---- Lambda build (provided.al2023, one static `bootstrap` per function) ----
# GOOS/GOARCH default to the Lambda target (template.yaml: arm64); override on
# the command line, e.g. `make build GOARCH=amd64` for a host binary.
GOOS      ?= linux
GOARCH    ?= arm64
BIN       := bin
FUNCTIONS := charge sweeper reconcile
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
SAM_TARGETS := build-ChargeFunction build-SweeperFunction build-ReconcileFunction

.PHONY: $(SAM_TARGETS)
build-ChargeFunction: ## sam build hook for ChargeFunction (into ARTIFACTS_DIR)
build-SweeperFunction: ## sam build hook for SweeperFunction (into ARTIFACTS_DIR)
build-ReconcileFunction: ## sam build hook for ReconcileFunction (into ARTIFACTS_DIR)
$(SAM_TARGETS): build-%:
	$(if $(ARTIFACTS_DIR),,$(error ARTIFACTS_DIR is not set: $@ is run by `sam build`; use `make build`))
	$(GO_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/$(SAM_FUNCTION_$*)

.PHONY: lint
lint: venv fmt-check vet ## gofmt, vet, staticcheck, go.mod tidiness, cfn-lint
	$(GO) mod tidy -diff
	$(VENV)/bin/cfn-lint template.yaml

.PHONY: clean
clean: ## Remove build outputs (bin/, .aws-sam/)
	rm -rf $(BIN) .aws-sam

.PHONY: FORCE
FORCE:
