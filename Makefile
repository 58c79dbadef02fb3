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
