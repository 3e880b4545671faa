# reshard — developer entry points. Needs Go 1.26 on PATH (/usr/local/go/bin).
GO ?= go
TEMPORAL_VERSION := v1.5.1
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin
# Extra flags for go test, e.g. GOTESTFLAGS=-v (.ci/run sets it).
GOTESTFLAGS ?=
# go test's own vet pass is off in make test: it runs a subset of go vet's
# analyzers (atomic, bool, buildtags, directive, errorsas, ifaceassert,
# nilfunc, printf, stringintconv, tests), and make test has just run go vet
# ./... with all of them over the same packages and test files (no file
# here is built only with the race tag), so it type-checked every package a
# second time for nothing: that subset over ./... took 64 CPU-s here (52 s
# of wall on 2 cores), beside go vet's own 60-88 s.
TESTBUILDFLAGS := -vet=off
FUZZFLAGS ?=

.PHONY: tools build test fuzz demo bench e2e doctest

# The pinned Temporal CLI (dev server), installed only when devenv would not
# find one: $$TEMPORAL_CLI, PATH, then $$(go env GOPATH)/bin.
tools:
	@if [ -n "$$TEMPORAL_CLI" ] && [ -x "$$TEMPORAL_CLI" ]; then echo "temporal CLI: $$TEMPORAL_CLI"; \
	elif command -v temporal >/dev/null 2>&1; then echo "temporal CLI: $$(command -v temporal)"; \
	elif [ -x "$(GOBIN_DIR)/temporal" ]; then echo "temporal CLI: $(GOBIN_DIR)/temporal"; \
	else echo "installing temporal CLI $(TEMPORAL_VERSION) into $(GOBIN_DIR)"; \
		GOBIN="$(GOBIN_DIR)" $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_VERSION); fi

build:
	$(GO) build -o bin/reshard ./cmd/reshard

# gofmt, vet, then every test with the race detector, integration tests
# included (they need PostgreSQL 15 binaries and the temporal CLI; with
# CI=true a missing one fails the run instead of skipping).
test:
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 25m $(TESTBUILDFLAGS) $(GOTESTFLAGS) ./...
	$(MAKE) fuzz FUZZTIME=3000x FUZZFLAGS="$(TESTBUILDFLAGS)"

# Each fuzz target for a few seconds (go test fuzzes one target per run).
# make test gives each a count of inputs, not a duration: with a duration,
# Go's fuzz coordinator (before go1.27) can report "context deadline
# exceeded" as a failure when the time is up while a worker is busy
# (golang/go#75804); CI failed so once on a loaded machine, 3 s into
# FuzzTokenOfInt. 3,000 inputs take 1-3 s per target here.
FUZZTIME ?= 30s
FUZZ_TARGETS := ./ring:FuzzTokenText ./ring:FuzzTokenOfInt ./ring:FuzzTokenOfUUID ./ring:FuzzRingOwner ./internal/pgcsv:FuzzRead
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "fuzz $$pkg $$fn for $(FUZZTIME)"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS); done

# The whole story end to end: a 4-shard local cluster under live writes
# gains a fifth shard (reshard demo; its own cluster in .reshard/demo,
# removed at the end unless DEMO_FLAGS=--keep). DEMO_FLAGS=--users 200000
# for a quicker run.
DEMO_FLAGS ?=
demo: build tools
	PATH="$$PATH:$(GOBIN_DIR)" bin/reshard demo $(DEMO_FLAGS)

# The ring benchmarks, then the data-plane benchmarks against two throwaway
# PostgreSQL servers (bench/run.sh: every section of cmd/reshard-bench, 1M
# rows), then 4 → 8 shards on a whole local cluster as one rebalance against
# four add-nodes (section rebalance: 8 servers, Temporal, a worker; 600,000
# users); their table, with the machine and the date, goes to docs/benchmarks.md.
# One section alone: bash bench/run.sh -sections rebalance -out docs/benchmarks.md
# Production size (opt-in, not in the run above: 20 GB of table data, about an
# hour and 45 GB of free disk): bash bench/run.sh -sections large -out docs/benchmarks.md
# (the other sections' rows are kept, with their own date).
bench: tools
	$(GO) test -run '^$$' -bench . -benchmem ./ring/...
	bash bench/run.sh -out docs/benchmarks.md

# The fault-injection, availability and bad-input suites and the whole
# cluster-life scenario (e2e/faults_test.go, e2e/availability_test.go,
# e2e/temporalkill_test.go, e2e/badinput_test.go, e2e/lifecycle_long_test.go,
# build tag e2e) with the rest of e2e (TestDocs among them: make doctest): whole migrations through the worker
# binary under live writes. About 40 minutes on 2 idle cores, over 60 on a
# busy machine (a run at load 20-30 reached its 51st test at 60 minutes), so
# the bound is 120 minutes; needs PostgreSQL 15 binaries and the temporal CLI.
# Then a migration of 1,000 moves (real workflows, stubbed activities) on a
# dev server: every history under 10,000 events, and replayed.
e2e: tools
	PATH="$$PATH:$(GOBIN_DIR)" $(GO) test -tags e2e -count=1 -timeout 120m -v ./e2e/
	PATH="$$PATH:$(GOBIN_DIR)" $(GO) test -tags e2e -count=1 -timeout 60m -v -run '^TestThousandMovesHistoriesStayBounded$$' ./workflows/

# Every ```sh block of README.md and docs/operations.md, run as written
# against a local cluster of its own (e2e/docs_test.go, TestDocs; make e2e
# runs it too): about 2 minutes. make test checks the blocks' lines without
# running them (TestDocBlocksParse).
doctest: tools
	PATH="$$PATH:$(GOBIN_DIR)" $(GO) test -tags e2e -count=1 -timeout 30m -v -run '^TestDocs$$' ./e2e/
