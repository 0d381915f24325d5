# stratum-upgrade. `make help` lists the targets.
GO        ?= go
SHELL     := bash
.SHELLFLAGS := -o pipefail -c
BIN       := bin
CACHE     ?= $(or $(STRATUM_CACHE),$(HOME)/.cache/stratum-upgrade)
STATICCHECK_VERSION := v0.7.0
export STRATUM_CACHE := $(CACHE)

.PHONY: help build dist dist-check kubelet-rules test check lint docs fuzz crash demo bench bench-doc torture e2e-kubelet bench-kubelet real-binaries test-real real-cluster ha ha-doc flag-tables kubeadm-fixtures clean

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/ciq/stratum-upgrade/internal/cli.Version=$(VERSION)

build: ## build every command into bin/
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# The release artifacts (internal/harness/cmd/dist): per architecture a
# tarball (binary, units, man pages, completions, example config), a .deb
# and an .rpm made by nfpm (its tool module, internal/harness/tools/nfpm),
# and SHA256SUMS. dist-check installs this machine's .deb with dpkg, checks
# it and removes it (scripts/dist-check.sh); make check runs it.
DIST ?= dist
dist: ## release artifacts into dist/: linux/amd64 and arm64 tarballs, .deb and .rpm (nfpm), SHA256SUMS (19 s warm; 8 minutes from a cold build cache)
	$(GO) run ./internal/harness/cmd/dist -version $(VERSION) -out $(DIST)

dist-check: ## build this machine's .deb, install it with dpkg, check the binary and the units, remove it (root; about 1 minute)
	$(GO) run ./internal/harness/cmd/dist -version $(VERSION) -out $(BIN)/dist-check -arch $$($(GO) env GOARCH)
	./scripts/dist-check.sh $(BIN)/dist-check

# make test is the quick answer, make check all of it (what CI runs).
#
# The first go test compiles every test binary with the default -p (one
# package per core) and runs none, so that a cold build cache compiles in
# parallel even where the tests below would not.
#
# Packages run in parallel too (go test's default -p, one per core): every
# test bed node's process scans are scoped to its own kubelet stand-in
# (--proc-scope, proc.Scanner.Within; the in-memory matrices use the
# kubelet model), its ports are claimed across test processes
# (testbed.FreePorts, testbed.HoldPorts), and its files live in its own
# temp dir. The one machine-wide name, the network namespace and bridge
# of testbed's TestClusterNetNS, is used by that test alone (and by make
# ha, which runs on its own). -parallel 8: within a package, tests that
# opt in run eight at a time (every test bed node and fault matrix case
# does): most of a case waits on the kubelet stand-in or on fsync, and
# with 8 the engine's tests keep the 2 cores about a third busy.
#
# The fault matrices (make crash) are sampled: each scenario's every phase
# once, from a seed printed here and in the engine's output; STRATUM_SEED
# replays a run, STRATUM_MATRIX=full (make check) runs every case. The
# real control plane (make test-real) and the three-node tests (make ha)
# skip. Not root: the tests that need root, FUSE or a network namespace
# skip, naming what they need.
#
# go test's output goes through slowest (internal/harness/cmd/slowest),
# which passes it on as it comes and ends with the five slowest packages'
# times; make test's exit status stays go test's (pipefail).
SEED         := $(or $(STRATUM_SEED),$(shell date +%s%N))
TEST_TIMEOUT ?= 30m
PARALLEL     ?= 8
test: ## the quick answer: unit and package tests, test bed nodes, the in-memory fault matrix in full on the default node and a seeded sample of the others (the VIP node's included); ends with the slowest packages' times (7m55s on 2 cores alone, warm caches)
	$(GO) test -count=1 -run '^$$' ./... >/dev/null
	$(GO) build -o $(BIN)/slowest ./internal/harness/cmd/slowest
	@echo "make test: fault matrices $(if $(filter full,$(STRATUM_MATRIX)),in full,sampled with seed $(SEED) (replay: make test STRATUM_SEED=$(SEED); every case: make crash))"
	STRATUM_SEED=$(SEED) STRATUM_MATRIX=$(STRATUM_MATRIX) $(GO) test -parallel $(PARALLEL) -count=1 -timeout $(TEST_TIMEOUT) ./... | $(BIN)/slowest -n 5

# Everything CI runs (.ci/run calls it), in CI's order. The matrices run in
# full inside make test's go test (STRATUM_MATRIX=full), not again after
# it: they overlap the other packages, and every case runs once. The
# timing lines count from CHECK_START (.ci/run passes its own).
CHECK_START := $(or $(CHECK_START),$(shell date +%s))
CHECK_LABEL ?= check
check: ## everything CI runs: lint, dist-check, make test with every fault matrix in full, fuzz, test-real, ha, real-cluster, e2e-kubelet (root; on a fresh 2-core machine with cold caches about 80 minutes: make test in full 19, test-real 12, ha 16, real-cluster about 13, e2e-kubelet about 19, with the builds)
	$(MAKE) lint
	$(MAKE) dist-check
	$(MAKE) test STRATUM_MATRIX=full TEST_TIMEOUT=60m
	$(MAKE) fuzz
	@echo "$(CHECK_LABEL): lint and tests passed after $$(( $$(date +%s) - $(CHECK_START) ))s"
	$(MAKE) test-real
	@echo "$(CHECK_LABEL): real control plane passed after $$(( $$(date +%s) - $(CHECK_START) ))s"
	$(MAKE) ha
	@echo "$(CHECK_LABEL): three-node cluster passed after $$(( $$(date +%s) - $(CHECK_START) ))s"
	$(MAKE) real-cluster
	@echo "$(CHECK_LABEL): real kubeadm cluster passed after $$(( $$(date +%s) - $(CHECK_START) ))s"
	$(MAKE) e2e-kubelet
	@echo "$(CHECK_LABEL): passed in $$(( $$(date +%s) - $(CHECK_START) ))s"

lint: ## go.mod/go.sum tidy check, no tracked file over 1 MiB outside testdata/, gofmt check, go vet, staticcheck
	$(GO) mod tidy -diff
	./scripts/check-large-files.sh
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# The reference pages of the two input files, from their Go types and field
# comments (internal/harness/cmd/refdocs); its test fails when a checked-in
# page is not what this writes.
docs: ## regenerate docs/reference/ (the node state and release reference) from the Go types
	$(GO) run ./internal/harness/cmd/refdocs

# go test -fuzz takes one package and one target at a time. A crash input
# is written to the package's testdata/fuzz/<target>/: commit it with the
# fix, and plain go test runs it from then on. -fuzzminimizetime bounds the
# minimizing of each new input (default 60 s), which otherwise eats short runs.
#
# Each target runs a fixed number of executions (about 10 s each here), not a
# duration: with a duration, Go 1.26's fuzz coordinator can report its own
# deadline as a failure, "context deadline exceeded" with no input written
# (golang/go#75804, fixed in Go 1.27). FUZZTIME=30s (or 50000x) overrides the
# budget of every target.
FUZZTIME ?=
FUZZ_TARGETS := ./journal:FuzzOpen:15000x ./nodestate:FuzzParse:100000x ./engine:FuzzParseRelease:12000x ./snapshot:FuzzLoadIndex:8000x

fuzz: ## run each fuzz target for a fixed number of inputs (about 10 s each; FUZZTIME=30s overrides): journal open, node state, release, snapshot index
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget=$${rest#*:}; \
		[ -z "$(FUZZTIME)" ] || budget="$(FUZZTIME)"; \
		echo "fuzz $$name ($$pkg, $$budget)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime "$$budget" -fuzzminimizetime 200x "$$pkg"; \
	done

# The fault matrices of docs/reliability.md, each in full (make test
# samples them; make check runs them in full inside its make test),
# summed up by matrixsum: one line per matrix; the test output goes to
# bin/crash.log.
CRASH_TESTS := TestCrashMatrix|TestRebootMatrix|TestMemMatrix|TestPowerLossMatrix|TestPowerCutAtEveryIO|TestIOErrorMatrix
crash: ## every fault matrix in full (kill, reboot, power loss, power cut at every I/O, I/O errors), one summary line each (about 11 minutes; root, /dev/fuse)
	@mkdir -p $(BIN)
	STRATUM_MATRIX=full $(GO) test -count=1 -timeout 60m -parallel $(PARALLEL) -json -run '^($(CRASH_TESTS))$$' ./engine \
		| $(GO) run ./internal/harness/cmd/matrixsum 2>$(BIN)/crash.log

torture: ## randomized SIGKILL crash test, 50 rounds (STRATUM_TORTURE=N for more)
	STRATUM_TORTURE=$${STRATUM_TORTURE:-50} $(GO) test -count=1 -timeout 0 -run TestCrashRandom -v ./engine | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|seed'

# The figures of make bench and make ha are printed; they go into
# docs/performance.md only when asked (make bench-doc, make ha-doc, or
# DOC=1), so that a test or a benchmark run leaves the clone clean.
bench: ## performance benchmarks: prints one table (about 3 minutes; briefly runs 10,000 sleeping processes); DOC=1 or make bench-doc also writes it into docs/performance.md
	$(GO) run ./bench/cmd/report $(if $(DOC),-doc docs/performance.md) -save $(BIN)/bench.out

bench-doc: ## make bench, and its table and the machine written into docs/performance.md
	$(MAKE) bench DOC=1

# One build configuration for the demo, stratum-upgrade, the stand-ins and
# etcd (internal/harness/etcdbuild uses -trimpath, CGO_ENABLED=0): from a cold cache
# the standard library and the shared modules compile once, not twice.
demo: ## the demo: a node in a temp dir, a real etcd 3.5 -> 3.6 upgrade, then a broken release rolled back (REAL=1: the real control plane, v1.36.3 -> v1.37.2, once make real-binaries built it)
	CGO_ENABLED=0 GOFLAGS="$$($(GO) env GOFLAGS) -trimpath" $(GO) run ./internal/harness/cmd/demo -version $(VERSION) $(if $(REAL),-real)

real-binaries: ## build every real etcd and Kubernetes control plane (kube-apiserver, -controller-manager, -scheduler), and each version's kubeadm, into the cache, timing each (about 11 minutes per Kubernetes version from a cold build cache; kubeadm about 30 s more each)
	$(GO) run ./internal/harness/cmd/buildbins

# The real control plane's tests run here only (STRATUM_REAL=1; go test
# and make test skip them, built or not): real-binaries builds what is
# missing first, so they never skip. CI runs it after make test.
# internal/harness/kubeadmgen: the kubeadm fixtures of each version whose
# control plane is built (1.36, 1.37) regenerated by the real kubeadm and
# kubelet code and compared with the checked-in ones, kubelet's UID rule
# pinned, init --from-kubeadm --yes checked to keep the real kubelet's pod
# UIDs, and kubeletpod.Same checked against them (about 3 minutes once
# kubeadm is built). The kubeadm-only minors (1.34, 1.35) are covered only
# where their kubeadm is built (make kubeadm-fixtures builds it; CI does
# not: about 7 minutes each from a cold cache). TestDemoReal: make demo
# REAL=1.
REAL_TESTS := TestReal|TestDemoReal
test-real: real-binaries ## the real control plane (kube-apiserver, -controller-manager, -scheduler 1.36 and 1.37; etcd 3.5-3.7) from the rendered manifests: starts, upgrades, the etcd chain, a rollback, a two-step minor upgrade with its rollbacks and read-back, the real demo, the Events and kubeadm-config an upgrade through the command leaves in the API server; the kubeadm fixtures are still kubeadm's output
	STRATUM_REAL=1 $(GO) test -p 1 -count=1 -timeout 40m -run '^($(REAL_TESTS))' ./versions ./engine ./cmd/stratum-upgrade ./internal/harness/testbed ./internal/harness/kubeadmgen ./internal/harness/cmd/demo
	@# The two-step upgrade prints its figures (-v, without the event lines).
	STRATUM_REAL=1 $(GO) test -count=1 -v -timeout 15m -run '^TestTwoStepReal$$' ./engine | grep -Ev '^=== |: event |^[0-9]{4}/[0-9]{2}/[0-9]{2} |start.go:[0-9]+: '

# The Kubernetes tables come from each version's flagdump (its tool
# module's flagdump/, built into the cache beside the binaries): the whole
# flag set, hidden and deprecated flags included, which --help leaves out
# though the binaries accept them. etcd's come from its --help.
flag-tables: ## regenerate versions/flags/<component>-<minor>.txt and versions/features/kube-<minor>.txt: Kubernetes from each version's flagdump (whole flag sets, built beside the binaries: seconds after make real-binaries), etcd from the cached binaries' --help
	$(GO) run ./internal/harness/cmd/flagtable -out versions/flags

# The fixtures of the kubeadm adoption tests (issues 15 and 28): for each
# supported minor (kubebuild.KubeadmVersions, 1.34 to 1.37) and each
# configuration of internal/harness/kubeadmgen, the manifests the real
# kubeadm writes and the pod UIDs the real kubelet code computes for them.
# make test-real fails when those of 1.36 and 1.37 are not what this
# writes. Root: kubeadm --rootfs chroots.
kubeadm-fixtures: ## rewrite testdata/kubeadm/<version>/<config>/ with the real kubeadm of each minor 1.34-1.37 (root; builds kubeadm into the cache first: about 30 s for 1.36 and 1.37 once their control plane is built, about 7 minutes each for 1.34 and 1.35 from a cold cache; then about 2 s per configuration)
	$(GO) run ./internal/harness/cmd/kubeadmfixtures

# The real kubeadm cluster of issue 38 (internal/harness/realcluster):
# nodes each in its own network, mount and UTS namespaces with its own
# containerd and the real kubelet, made by the real kubeadm. Not in make
# check yet (the issue's first layer). Builds its kubeadm, kubelet and
# control plane first (cached), outside the test's timeout.
real-cluster: ## the real kubeadm HA cluster: three nodes in their own namespaces, each with containerd and the real kubelet v1.36.3, made by kubeadm init and join --control-plane, adopted, then upgraded to v1.37.2 and a kubelet restarted mid-step under writers and probes; SCENARIOS=all adds the rollback and node-dies scenarios (about 40 minutes); prints each scenario's figures (root; apt-installs containerd/runc; about 12 minutes warm; docs/real-cluster.md)
	./scripts/real-cluster.sh

# The three-node tests of docs/ha.md (TestHA* in engine and the command):
# make test skips them (-p 1 here: the partition tests share one network
# namespace name); their figures are printed, and written into
# docs/performance.md by make ha-doc (or DOC=1). The
# partition tests make a network namespace, a veth and a bridge (strat-ns,
# strat-br0) with iproute2's ip, as root; they skip without.
# The kubeadm-shaped cluster runs the real kube-apiserver, so ha builds
# the real binaries first (seconds once cached): without them its tests
# would skip and make ha would pass without them.
ha: real-binaries ## three nodes of one real etcd cluster: concurrent runs serialize, a crash mid-transaction resumes, a rollback halts the rollout, the quorum gate, etcd downgraded after the last member's point of no return (and crashed there), a node cut off in its etcd step (root, iproute2); the kubeadm-shaped cluster on the real kube-apiserver (built first by real-binaries); prints the availability figures (about 13 minutes); DOC=1 or make ha-doc also writes them into docs/performance.md
	STRATUM_HA=1 $(GO) test -p 1 -count=1 -timeout 20m -json -run '^TestHA' ./engine ./cmd/stratum-upgrade \
		| $(GO) run ./internal/harness/cmd/hafigures $(if $(DOC),-doc docs/performance.md)

ha-doc: ## make ha, and its figures written into docs/performance.md
	$(MAKE) ha DOC=1

e2e-kubelet: ## end to end against the real kubelets v1.37.2 and v1.34.4 on containerd (KUBELET=v1.34.4 picks one; root; apt-installs containerd/runc; docs/e2e.md)
	./scripts/e2e-kubelet.sh

# Not part of e2e-kubelet (CI time): a measurement for issue 18, rerun when
# kubelet or the replacement rule changes. STRATUM_BENCH_N=20 for more rounds.
bench-kubelet: ## measure on each real kubelet (or KUBELET=) when a removed static pod's name is released and each replacement strategy; writes its section of docs/performance.md (root; about 10 minutes per kubelet)
	./scripts/e2e-kubelet.sh bench

# Not part of e2e-kubelet (CI time): e2e-kubelet checks kubeletpod.Check's
# rule cases against the code of the two kubelets it runs; this runs them
# through every tool module's kubelet code, 1.35 and 1.36 too (a module
# download and a kubelet compile each, 3-5 minutes cold). Root, as the e2e.
kubelet-rules: ## kubeletpod.Check's rule cases through the real kubelet code of every supported minor (1.34-1.37; about 3-5 minutes per minor from a cold cache)
	STRATUM_E2E=1 STRATUM_KUBELET_RULES=all $(GO) test -count=1 -v -timeout 60m -run '^TestKubeletRules$$' ./e2e/

clean: ## remove build output (not the etcd build cache)
	rm -rf $(BIN) $(DIST)
