# meshlet — `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
CNI_BIN := $(BIN)/cni
CNI_PLUGINS := ipam/host-local main/bridge main/loopback meta/firewall meta/portmap
PLUGINS_MOD := github.com/containernetworking/plugins
# Test timeouts are safety nets against hangs, not performance targets.
TEST_TIMEOUT ?= 15m
# The race tier: every package with concurrency of its own (the e2e tests
# run the agent binary, which the race detector cannot see into).
RACE_PKGS ?= ./acl/... ./aclstate/... ./sidecar/... ./xds/... ./ca/... ./cni/... ./client/... ./driver/... ./intention/... \
	./catalog/... ./authz/... ./server/... ./state/... ./scheduler/... ./controlplane/... ./consulapi/... \
	./api/... ./agent/... ./internal/... ./rpc/... ./configentry/... ./meshstate/... ./sitoken/...

.PHONY: all build cni deps test-deps test test-race test-unit check-provision lint demo demo-stop bench clean help

all: build cni ## Build meshlet and the CNI plugins (default)

help: ## List targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

deps: ## Install what the build and the demo need (Go modules, iptables, iproute2)
	@scripts/provision.sh deps

test-deps: ## deps, plus what the tests need (docker.io, busybox-static for the docker driver's tests)
	@scripts/provision.sh deps test

build: ## Build bin/meshlet
	$(GO) build -ldflags "-X github.com/meshlet/meshlet/command.GitCommit=$$(git rev-parse --short HEAD 2>/dev/null)" -o $(BIN)/meshlet .

# Static, as the plugins' own releases are built: a dynamically linked
# plugin pays the loader's start-up (its CPU feature probing traps to the
# hypervisor on a VM) on each of the five execs per ADD and per DEL.
cni: ## Build the standard CNI plugins pinned in go.mod into bin/cni
	@mkdir -p $(CNI_BIN)
	@for p in $(CNI_PLUGINS); do \
		CGO_ENABLED=0 $(GO) build -o $(CNI_BIN)/ $(PLUGINS_MOD)/plugins/$$p || exit 1; \
	done

test: test-deps all check-provision ## Run every test tier (privileged tiers run as root, skip otherwise), then the race tier
	MESHLET_BIN=$(CURDIR)/$(BIN)/meshlet MESHLET_CNI_PATH=$(CURDIR)/$(CNI_BIN) \
		$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	@$(MAKE) --no-print-directory test-race

test-race: all ## The race detector over the concurrent packages (unit and privileged tests)
	MESHLET_BIN=$(CURDIR)/$(BIN)/meshlet MESHLET_CNI_PATH=$(CURDIR)/$(CNI_BIN) \
		$(GO) test -race -p 1 -count=1 -timeout $(TEST_TIMEOUT) $(RACE_PKGS)

test-unit: ## Unit tests only (no root needed)
	MESHLET_SKIP_PRIVILEGED=1 $(GO) test -count=1 -short ./...

check-provision: ## Check the Vagrantfile and provisioning script without a hypervisor
	@if command -v shellcheck >/dev/null; then shellcheck scripts/*.sh; else echo "check-provision: shellcheck not installed, skipped"; fi
	@if command -v ruby >/dev/null; then ruby -c Vagrantfile >/dev/null; else echo "check-provision: ruby not installed, skipped"; fi
	@if command -v vagrant >/dev/null; then vagrant validate >/dev/null; fi
	@DRY_RUN=1 scripts/provision.sh vm >/dev/null
	@DRY_RUN=1 scripts/provision.sh server s2 192.168.56.12 192.168.56.11,192.168.56.12 >/dev/null
	@DRY_RUN=1 scripts/provision.sh client c1 192.168.56.21 192.168.56.11,192.168.56.12 >/dev/null
	@echo "check-provision: Vagrantfile and scripts/provision.sh OK"

lint: ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck ./...

demo: deps all $(if $(filter docker,$(DRIVER)),test-deps) ## Start a dev agent and run the connect demo job (DRIVER=docker: as containers)
	@DRIVER=$(DRIVER) scripts/demo.sh start

demo-stop: ## Stop the demo agent (and the demo's private dockerd) and clean up
	@scripts/demo.sh stop

bench: deps all ## Run the benchmarks and write bench/RESULTS.md
	@scripts/bench.sh

clean: ## Remove build output
	rm -rf $(BIN)
