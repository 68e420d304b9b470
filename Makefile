# Copyright The hpmount Authors.
# SPDX-License-Identifier: Apache-2.0

# hpmount — see README.md. Everything here runs as root on a Linux node-like
# machine: the tests make real mounts, loop devices and cgroups.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
TOOLS_DIR ?= $(HOME)/.cache/hpmount/bin
export HPMOUNT_TOOLS_DIR := $(TOOLS_DIR)

# One flavour of build for everything make compiles of this module, and
# for the builds its tests run: static, as the image needs, and -trimpath,
# as the release is. go vet, go test, make build, the binaries the tests
# build and the release's linux/amd64 (darwin/amd64 with vet's) then use
# the same build cache entries. With three flavours, a cold machine
# compiled client-go and everything under it three times for linux.
# test/tools/build.sh builds the upstream tools as before, without them.
export CGO_ENABLED := 0
export GOFLAGS := -trimpath

.PHONY: all build deps tools test unit vet bench bench-node demo fuzz fuzz-quick peer-test peer-soak chart chart-package release node-up node-down clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/hpmount ./cmd/hpmount

deps:
	@bash .ci/install-deps.sh

# etcd and kube-apiserver for the end-to-end tests, built once from the Go
# module proxy and cached outside the repo.
tools:
	@bash test/tools/build.sh

vet:
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

# Every test, root tests included; a skipped test fails the run. Packages
# run one at a time (-p 1): several start their own etcd and kube-apiserver,
# and on a 2-core machine running those side by side only makes them time out.
test: deps tools vet build
	set -o pipefail; HPMOUNT_REQUIRE_ROOT=1 HPMOUNT_BINARY=$(CURDIR)/bin/hpmount \
	  $(GO) test -count=1 -p 1 -timeout 20m -json ./... | $(GO) run ./test/testsummary
	@$(MAKE) --no-print-directory peer-test
	@$(MAKE) --no-print-directory fuzz-quick

# KubeVirt's own code against hpmount's (test/peer/kubevirt, a Go module of
# its own that ./... above does not reach): its API types against hpmount's
# VMI model, its hotplug mounter and virt-handler's controllers against
# the node engine on simulated nodes (differences, coexistence, unplug,
# migrations, seed 004), two of them on one kube-apiserver (hence tools).
# Twice: at v1.7.0 (go.mod, Harvester v1.8) and at v1.8.4 (go.kv184.mod,
# Harvester v1.9). A cold build compiles much of KubeVirt
# (test/peer/kubevirt/doc.go says how long).
PEER_KUBEVIRT = "" "-modfile=go.kv184.mod -tags=kubevirt184"
peer-test: tools
	cd test/peer/kubevirt && for v in $(PEER_KUBEVIRT); do \
	  $(GO) vet $$v ./... && \
	  HPMOUNT_REQUIRE_ROOT=1 $(GO) test $$v -count=1 -p 1 -timeout 20m ./... || exit 1; \
	done

# The coexistence matrix PEER_RUNS times, each run its own process, with
# its concurrent order too (HPMOUNT_PEER_CONCURRENT=1): that order races
# the two mounters with a random delay, so one run samples one
# interleaving, which is why make test runs only the orders that do not
# depend on timing (each mounter inside the other's check-then-act is
# forced with a seam there). A second run in the same process finds the
# first's fixed paths. Not part of make test: 40 runs take about 20
# minutes. It stops at the first failing run and keeps its log.
PEER_RUNS ?= 40
peer-soak:
	cd test/peer/kubevirt && $(GO) test -c -o $(CURDIR)/bin/peer.test . && \
	  for i in $$(seq $(PEER_RUNS)); do \
	    HPMOUNT_REQUIRE_ROOT=1 HPMOUNT_PEER_CONCURRENT=1 $(CURDIR)/bin/peer.test -test.count=1 -test.run '^TestCoexistenceMatrix$$' \
	      > $(CURDIR)/bin/peer-soak.log 2>&1 || { echo "run $$i of $(PEER_RUNS) failed: bin/peer-soak.log"; exit 1; }; \
	  done; echo "$(PEER_RUNS) runs of TestCoexistenceMatrix passed"

# Fuzz targets (SECURITY.md), as package:target:executions. Their seed
# corpora (f.Add and testdata/fuzz) run with every go test above: that
# replay is the deterministic gate. make test then fuzzes each target for
# its number of executions (-fuzztime Nx: 1-3 s of fuzzing each on a loaded
# 2-core machine, 25-60 s in all with building the instrumented test
# binaries, most of it diag's link): a count, not a duration, because
# a duration lets Go's fuzz coordinator fail a target that found nothing
# (golang/go#75804, .ci/fuzz.sh), and because a loaded machine then
# explores as much as an idle one. make fuzz fuzzes each for FUZZ_LONG and
# fails only on a failing input (or a failing go test).
FUZZ_TARGETS := ./mountinfo:FuzzParseMountinfo:10000 ./mountinfo:FuzzParseKernelLine:10000 \
	./diag:FuzzParseFindmnt:5000 ./kubelet:FuzzValidName:20000 \
	./kubelet:FuzzPodVolumePaths:20000 ./kubevirt:FuzzDecodeVMI:2000
FUZZ_LONG ?= 60s

fuzz-quick:
	GO=$(GO) bash .ci/fuzz.sh --count $(FUZZ_TARGETS)

# The long security run (SECURITY.md): TestAttachSwapRace with RACES swaps
# of disk.img, its parent, the target and hotplug-disks for symlinks racing
# Attach (make test runs 1,000), then every fuzz target for FUZZ_LONG.
RACES ?= 10000
fuzz: deps
	HPMOUNT_REQUIRE_ROOT=1 HPMOUNT_RACES=$(RACES) $(GO) test -count=1 -run '^TestAttachSwapRace$$' -v ./mount/
	GO=$(GO) bash .ci/fuzz.sh --time $(FUZZ_LONG) $(FUZZ_TARGETS)

bench: deps
	HPMOUNT_REQUIRE_ROOT=1 $(GO) test -run '^$$' -bench . -benchmem ./...

# The node-scale harness (250 VMIs x 4 volumes, 10k mounts, a real API
# server), a cluster of 20 agents through an API outage, and the Go
# benchmarks; writes BENCHMARKS.md. About 25 minutes.
# Smaller: make bench-node BENCH_NODE_FLAGS="--vmis 50 --idle 10s --storm 10s --big-vmis 0 --settle 10s".
bench-node: deps tools build
	$(GO) run ./test/scale --binary $(CURDIR)/bin/hpmount --out $(CURDIR)/BENCHMARKS.md $(BENCH_NODE_FLAGS)

demo: deps tools build
	$(GO) run ./test/demo --binary $(CURDIR)/bin/hpmount

# deploy/chart from the kustomize renders of deploy/ (deploy/README.md);
# test/manifests fails while the checked-in chart differs from it.
chart:
	$(GO) run ./test/chartgen

# deploy/chart as a Helm chart repository (hpmount-<version>.tgz and
# index.yaml) in CHART_REPO_DIR: serve that folder from any HTTP server and
# set its URL as spec.repo of deploy/harvester/addon.yaml (deploy/README.md).
CHART_REPO_DIR ?= $(CURDIR)/bin/chart-repo
chart-package: chart
	$(GO) run ./test/chartgen -package $(CHART_REPO_DIR)

# A release in DIST_DIR (test/release): static linux/amd64 and arm64
# binaries, an SBOM of each, a multi-arch OCI image layout, the chart
# repository and SHA256SUMS; the same commit gives the same bytes. Times
# come from SOURCE_DATE_EPOCH, else the commit. VERSION must be vX.Y.Z.
DIST_DIR ?= $(CURDIR)/dist
release:
	rm -rf $(DIST_DIR)
	$(GO) run ./test/release/cmd/release --version $(VERSION) --out $(DIST_DIR)

# A real node to poke at by hand (test/realnode/cmd/realnode, README
# "Tests"): control plane, containerd, kubelet, CNI and the test CSI plugin
# in a private mount namespace of a background process; NODE_AGENT=1 also
# runs the agent as deployed. node-up prints how to reach it; node-down
# tears it down as the tests do and reports anything left on the host.
NODE_DIR ?= /tmp/hpmount-node-up
node-up: deps tools build
	$(GO) build -o bin/realnode ./test/realnode/cmd/realnode
	bin/realnode up --dir $(NODE_DIR) $(if $(filter 1,$(NODE_AGENT)),--agent --binary $(CURDIR)/bin/hpmount)

node-down:
	$(GO) build -o bin/realnode ./test/realnode/cmd/realnode
	bin/realnode down --dir $(NODE_DIR)

clean:
	rm -rf bin dist
