# svc: make targets. `make test` is what CI runs (via `make check`).
GO        ?= go
SPECS     ?= examples/specs
BENCHTIME ?= 1x
FUZZTIME  ?= 10m
# make soak: minutes of mixed load, and kills per store in the kill loop.
SOAK_DURATION    ?= 10m
SOAK_KILL_ROUNDS ?= 20
# staticcheck is pinned: v0.8.2 (release 2026.2.2) reads Go 1.26 code
# (checked with go1.26.8). `make staticcheck` installs this version into
# GOBIN when the staticcheck found there is another one.
STATICCHECK_VERSION ?= v0.8.2
GOBIN_DIR   := $(shell d=$$($(GO) env GOBIN); echo $${d:-$$($(GO) env GOPATH)/bin})
STATICCHECK ?= $(GOBIN_DIR)/staticcheck
# The MCP reference server the tools/mcp tests run, pinned so that a new
# release cannot change what they see; installed into .cache/mcp (kept out
# of git), where the tests find it.
MCP_EVERYTHING_VERSION ?= 2026.8.31
MCP_EVERYTHING := .cache/mcp/node_modules/.bin/mcp-server-everything
# The TypeScript compiler the clients/ts tests type-check index.d.ts with,
# pinned likewise; installed into .cache/ts (the client itself has no
# build step and no dependencies).
TYPESCRIPT_VERSION ?= 5.9.3
TSC := .cache/ts/node_modules/.bin/tsc
# The generator of clients/ts/src/openapi.d.ts (the client's wire types,
# from docs/openapi.json), pinned and installed beside tsc: `make ts-types`
# regenerates the file, and clients/ts's tests fail when it is stale.
OPENAPI_TYPESCRIPT_VERSION ?= 7.13.0
OPENAPI_TS := .cache/ts/node_modules/.bin/openapi-typescript
# The interpreter of the Python client's tests (clients/python): the first
# of python3 on PATH and Debian's /usr/bin/python3 that has httpx, pytest,
# pytest-asyncio and mypy (Debian's python3-httpx, python3-pytest,
# python3-pytest-asyncio and mypy install them for /usr/bin/python3, which
# a pyenv or venv python3 earlier on PATH does not see).
PYTHON ?= $(shell for p in python3 /usr/bin/python3; do \
  $$p -c 'import httpx, pytest, pytest_asyncio, mypy' 2>/dev/null && { command -v $$p; break; }; done)
# The runtime half of the generated client clients/ts's tests build from
# the server's /openapi.json (test/generated.test.js: openapi-typescript's
# types, called through openapi-fetch), pinned and installed beside them.
OPENAPI_FETCH_VERSION ?= 0.17.0
OPENAPI_FETCH := .cache/ts/node_modules/openapi-fetch/package.json
# bash, for pipefail: `make test` pipes go test through the summary.
SHELL := bash

.PHONY: run build test test-ts test-python ts-types deps check vet staticcheck bench bench-batch bench-durable bench-outside bench-groupcommit bench-python bench-http bench-million bench-stream bench-waiting fuzz fuzz-long soak soak-metrics clean

## run: start svc serve on the example specs (no API key needed)
run:
	$(GO) run ./cmd/svc serve --specs $(SPECS)

## build: build the svc binary into ./bin/svc
# The commit is stamped with -ldflags too: go build's own VCS stamp is
# missing where GOFLAGS has -buildvcs=false or the tree is a git worktree.
build:
	$(GO) build -ldflags "-X main.commit=$$(git rev-parse --short=12 HEAD 2>/dev/null)$$(git diff --quiet HEAD 2>/dev/null || echo -dirty)" -o bin/svc ./cmd/svc

## test: all tests with the race detector; prints one line per package,
## the output of what failed, and every skipped test with its reason
## (internal/testsummary), ending with a SKIPPED: line when any skipped
## and the ten slowest tests and packages.
# TEST_FLAGS adds to go test's: -p 3 -parallel 4 runs more packages and
# tests at once (many wait on the servers and browsers they start, and the
# default of one each per core leaves about a third of two cores idle), but
# on this machine it gained little (552 s against 497-579 s) and the
# browser tests' timeouts tripped under the load, so the default stays.
TEST_FLAGS ?=
# SVC_TEST_BUILD_DIR: the packages whose tests run the svc binary
# (cmd/svc, dashboard, docs) share one build of it per run, race and plain
# (internal/svcproc), instead of linking their own; make check gives its
# own directory, for test-ts to run the plain build too.
test:
	@set -o pipefail; bins=$${SVC_TEST_BUILD_DIR:-}; \
	  if [ -z "$$bins" ]; then bins=$$(mktemp -d) && trap 'rm -rf "$$bins"' EXIT; fi && \
	  SVC_TEST_BUILD_DIR="$$bins" $(GO) test -race -count=1 -timeout 30m $(TEST_FLAGS) -json ./... | $(GO) run ./internal/testsummary

## test-ts: the TypeScript client's tests (clients/ts), node's own test
## runner against a real svc serve built from this tree (once, here: each
## test file would build it otherwise; under make check, the plain build
## make test made)
test-ts:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && bin="$$tmp/svc" && \
	  if [ -n "$${SVC_TEST_BUILD_DIR:-}" ] && [ -x "$$SVC_TEST_BUILD_DIR/svc" ]; then bin="$$SVC_TEST_BUILD_DIR/svc"; \
	  else $(GO) build -o "$$bin" ./cmd/svc; fi && \
	  cd clients/ts && SVC_BIN="$$bin" node --test

## test-python: the Python client's tests (clients/python): pytest
## against a real svc serve built from this tree (once, as test-ts; under
## make check, the plain build make test made), then mypy --strict on the
## package
test-python:
	@if [ -z "$(PYTHON)" ]; then echo "make test-python: no python3 with httpx, pytest, pytest-asyncio and mypy: apt-get install python3-httpx python3-pytest python3-pytest-asyncio mypy"; exit 1; fi
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && bin="$$tmp/svc" && \
	  if [ -n "$${SVC_TEST_BUILD_DIR:-}" ] && [ -x "$$SVC_TEST_BUILD_DIR/svc" ]; then bin="$$SVC_TEST_BUILD_DIR/svc"; \
	  else $(GO) build -o "$$bin" ./cmd/svc; fi && \
	  cd clients/python && echo "$(PYTHON): $$($(PYTHON) --version)" && \
	  SVC_BIN="$$bin" $(PYTHON) -m pytest -q && $(PYTHON) -m mypy --strict src

## ts-types: regenerates clients/ts/src/openapi.d.ts from docs/openapi.json
## with the pinned openapi-typescript (make deps installs it)
ts-types:
	node clients/ts/support/gen-types.js

## deps: installs what the tests need and can install without root (the
## MCP reference server, with npm) and says loudly what is missing
## (redis-server, npm): the tests that need it skip, and say so
deps:
	@if [ -x $(MCP_EVERYTHING) ]; then :; \
	elif command -v npm >/dev/null; then \
	  npm install --no-audit --no-fund --prefix .cache/mcp @modelcontextprotocol/server-everything@$(MCP_EVERYTHING_VERSION); \
	else echo "make deps: npm not found: the MCP tests (tools/mcp) will skip; install nodejs and npm"; fi
	@if [ -x $(TSC) ] && $(TSC) --version | grep -qxF 'Version $(TYPESCRIPT_VERSION)' && \
	  [ -x $(OPENAPI_TS) ] && $(OPENAPI_TS) --version | grep -qF '$(OPENAPI_TYPESCRIPT_VERSION)' && \
	  [ -f $(OPENAPI_FETCH) ] && grep -qF '"version": "$(OPENAPI_FETCH_VERSION)"' $(OPENAPI_FETCH); then :; \
	elif command -v npm >/dev/null; then \
	  npm install --no-audit --no-fund --prefix .cache/ts typescript@$(TYPESCRIPT_VERSION) openapi-typescript@$(OPENAPI_TYPESCRIPT_VERSION) openapi-fetch@$(OPENAPI_FETCH_VERSION); \
	else echo "make deps: npm not found: clients/ts's type check, its check of openapi.d.ts and its generated client will skip"; fi
	@[ -n "$(PYTHON)" ] || \
	  echo "make deps: no python3 with httpx, pytest, pytest-asyncio and mypy: make test-python (part of check) will fail; apt-get install python3-httpx python3-pytest python3-pytest-asyncio mypy"
	@command -v redis-server >/dev/null || \
	  echo "make deps: redis-server not found: the Redis tests will skip; install redis-server (SVC_REQUIRE_REDIS=1 makes them fail instead)"

## vet: go vet
vet:
	$(GO) vet ./...

## staticcheck: installs the pinned staticcheck if needed, then runs it
staticcheck:
	@"$(STATICCHECK)" -version 2>/dev/null | grep -qF '($(patsubst v%,%,$(STATICCHECK_VERSION)))' || \
	  $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	"$(STATICCHECK)" ./...

## check: what the tests need (deps), gofmt, then the Go tests (import
## direction and the docs' commands included) with, beside them, go vet
## and staticcheck, and then the TypeScript and the Python clients' tests
## (against a plain svc built first into the SVC_TEST_BUILD_DIR check
## makes, which the Go tests' svcproc then reuses). Each background stage's
## output follows the Go tests', with its time. The stages beside the Go
## tests use the CPU those leave idle while they wait on their servers (on
## two cores the Go tests alone keep about 1.3 busy).
check: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && start=$$(date +%s) && \
	  export SVC_TEST_BUILD_DIR="$$tmp/bin" && mkdir "$$SVC_TEST_BUILD_DIR" && \
	  $(GO) build -o "$$SVC_TEST_BUILD_DIR/svc" ./cmd/svc && \
	  stage() { name=$$1; shift; s=$$(date +%s); "$$@" > "$$tmp/$$name.out" 2>&1; echo $$? > "$$tmp/$$name.rc"; \
	    echo "make $$name: $$(( $$(date +%s) - s )) s" >> "$$tmp/$$name.out"; } && \
	  { ( stage vet-staticcheck $(MAKE) --no-print-directory vet staticcheck ) & } && \
	  { ( stage test-ts $(MAKE) --no-print-directory test-ts; stage test-python $(MAKE) --no-print-directory test-python ) & } && \
	  $(MAKE) --no-print-directory test; rc=$$?; \
	  echo "make test: $$(( $$(date +%s) - start )) s"; wait; \
	  for name in vet-staticcheck test-ts test-python; do \
	    echo "== $$name (run beside the tests):"; cat "$$tmp/$$name.out"; \
	    if [ "$$(cat "$$tmp/$$name.rc" 2>/dev/null)" != 0 ]; then echo "$$name failed"; rc=1; fi; \
	  done; \
	  echo "make check: $$(( $$(date +%s) - start )) s"; exit $$rc

## bench: the benchmarks of BENCHMARKS.md, each beside its baseline (bench-million apart)
bench:
	$(GO) test -run '^$$' -bench . -skip 'MillionInFlight|Outside|BatchMillion' -benchmem -benchtime $(BENCHTIME) -timeout 60m ./bench/... ./eventstore/...

## bench-http: issue 15's benchmarks of the svc serve binary with its
## default flags (part of bench): POST /agents/echo/run against a bare chi
## process, and 1,000 GET /events/stream subscribers under run load
bench-http:
	$(GO) test -run '^$$' -bench 'ServeDefaults|EventsStreamFanout' -benchtime $(BENCHTIME) -timeout 30m ./bench/

## bench-durable: issue 30 part 6 (part of bench): svc serve with and
## without step recording, alternated (wrk POST /submit; the base build is
## this tree with -tags nosteps, or SVC_BENCH_BASE_REV's commit, or
## SVC_BENCH_BASE_BIN), and 1,000 runs in flight killed
## with SIGKILL and resumed by a restart
bench-durable:
	$(GO) test -run '^$$' -bench 'Durable' -benchtime 1x -timeout 30m -v ./bench/

## bench-batch: issue 32 part 6: a batch of a million test:echo tasks
## through svc serve (SQLite), its RSS at a tenth and at the full size,
## beside one streamed gather of the same tasks; killed at half-way and
## resumed; then over four workers (SVC_BENCH_BATCH_TASKS sets the count)
bench-batch:
	$(GO) test -run '^$$' -bench BatchMillion -benchtime 1x -timeout 90m ./bench/

## bench-million: a million runs in flight beside bare goroutines (needs about 16 GiB; SVC_BENCH_INFLIGHT sets the count)
bench-million:
	$(GO) test -run '^$$' -bench MillionInFlight -benchtime 1x -timeout 60m -v ./bench/

## bench-stream: issue 19's benchmark alone (part of bench): a million
## test:echo tasks through one streamed gather to an svc serve process,
## beside the same tasks as plain gathers of 10,000; then the bounded
## memory check of the million in process
bench-stream:
	$(GO) test -run '^$$' -bench BenchmarkGatherStream -benchtime 1x ./bench/
	SVC_STREAM_TASKS=1000000 $(GO) test -count=1 -run TestGatherStreamBoundedMemory -v ./supervisor/

## bench-python: issue 35 part 5 alone (part of bench): the Python
## client's streamed gather of 100,000 tasks and AsyncClient's runs at 64
## in flight, each beside the Go client, against one svc serve
bench-python:
	SVC_PYTHON=$(PYTHON) $(GO) test -run '^$$' -bench PythonClient -benchtime 1x -v ./bench/

## bench-waiting: issue 31 part 7 alone (part of bench): 100,000 submitted
## runs waiting for approval at once in one svc serve (default flags), RSS
## per waiting run beside the warmed server's; 1,000 of them approved
bench-waiting:
	$(GO) test -run '^$$' -bench WaitingRuns -benchtime 1x -timeout 60m -v ./bench/

## bench-outside: issue 36 part 5: svc serve and svc worker start with their
## default flags driven from outside (wrk where installed), each figure
## beside its baseline from the same run; SHORT=1 for a smoke run (CI)
bench-outside:
	$(if $(SHORT),SVC_BENCH_OUTSIDE_SHORT=1) $(GO) test -run '^$$' -bench '^BenchmarkOutside$$' -benchtime 1x -timeout 30m ./bench/

## bench-groupcommit: issue 15.2, group commit for submitted runs: in
## process per store (with and without group commit) and over HTTP
bench-groupcommit:
	$(GO) test -run '^$$' -bench 'GroupCommit' -benchmem -benchtime $(BENCHTIME) ./bench/

## fuzz: a short run of every fuzz target
fuzz:
	@for p in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 10s $$p || exit 1; \
	  done; \
	done

## fuzz-long: every fuzz target for FUZZTIME (default 10m) each, one worker,
## nice'd; an input that fails is kept in the package's testdata/fuzz/<Target>/
## (commit it with the fix). Goes on after a failure and lists them at the end.
fuzz-long:
	@failed=""; for p in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
	    echo "== $$p $$f for $(FUZZTIME)"; \
	    nice -n 19 $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -parallel 1 $$p || failed="$$failed $$p.$$f"; \
	  done; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz targets that failed:$$failed"; exit 1; fi

## soak: SOAK_DURATION (10m) of mixed load against svc serve, sampling RSS,
## goroutines and open files, then the kill -9 loops (SOAK_KILL_ROUNDS kills
## each: runs that must end consistently, and runs on llmsim that must be
## resumed without paying twice) on SQLite, Pebble and Redis; see
## RELIABILITY.md. Not part of check.
soak:
	SOAK_DURATION=$(SOAK_DURATION) SOAK_KILL_ROUNDS=$(SOAK_KILL_ROUNDS) SVC_REQUIRE_REDIS=1 \
	  nice -n 19 $(GO) test -tags soak -count=1 -v -timeout 90m ./soak/

## soak-metrics: issue 13's full soak, 100,000 runs with --metrics (live heap within 20 MB)
soak-metrics:
	SVC_SOAK_REQUESTS=100000 $(GO) test -count=1 -run '^TestMetricsSoak$$' -v -timeout 30m ./app/

clean:
	rm -rf bin .svc svc embed
