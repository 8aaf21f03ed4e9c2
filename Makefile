# svc: make targets. `make test` is what CI runs (via `make check`).
GO        ?= go
SPECS     ?= examples/specs
BENCHTIME ?= 1x
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/staticcheck)

.PHONY: run build test check vet staticcheck bench fuzz clean

## run: start svc serve on the example specs (no API key needed)
run:
	$(GO) run ./cmd/svc serve --specs $(SPECS)

## build: build the svc binary into ./bin/svc
build:
	$(GO) build -o bin/svc ./cmd/svc

## test: all tests with the race detector
test:
	$(GO) test -race -count=1 ./...

## vet: go vet
vet:
	$(GO) vet ./...

## staticcheck: installs staticcheck if missing, then runs it
staticcheck:
	@test -x "$(STATICCHECK)" || $(GO) install honnef.co/go/tools/cmd/staticcheck@latest
	"$(STATICCHECK)" ./...

## check: vet, staticcheck, gofmt, then the tests (import direction included)
check: vet staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(MAKE) test

## bench: the benchmarks of BENCHMARKS.md, each beside its baseline
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./bench/... ./eventstore/

## fuzz: a short run of every fuzz target
fuzz:
	@for p in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 10s $$p || exit 1; \
	  done; \
	done

clean:
	rm -rf bin .svc
