# sluice — make targets. `make test` is what CI runs.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
PKGS        ?= ./...

.PHONY: all build test test-short lint fmt deps run sim bench bench-redis bench-server pictures help

all: build

build: ## Build the sluice binary into bin/.
	$(GO) build -o bin/sluice ./cmd/sluice

run: ## Run `sluice serve` on the built-in demo config (in-memory store).
	$(GO) run ./cmd/sluice serve

sim: ## Replay the classic scenarios in the terminal.
	$(GO) run ./cmd/sluice sim

deps: ## Install what the tests start and is missing: redis-server, nginx, chromium.
	@./scripts/install-test-deps.sh

lint: ## gofmt, go vet and staticcheck.
	@out=$$(gofmt -l . | grep -v '^bench/' || true); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	cd bench && gofmt -l . | (! grep .) && $(GO) vet ./...

test: deps lint ## Everything CI checks: lint, the whole suite under the race detector, the bench module's tests.
	$(GO) test -race -count=1 $(PKGS)
	# The exact-model tests of package rate take fewer steps under the
	# race detector; here they take all of them.
	$(GO) test -count=1 ./rate
	# What only a 32-bit int can get wrong (a bound past its range),
	# run as a 386 build, which this machine runs natively.
	GOARCH=386 $(GO) test -count=1 -run 'TestMaxKeysNeverWraps' ./policy
	# The bench module's own tests: the peers configured alike, the
	# middlewares limiting, sluice answering as Envoy's reference service.
	cd bench && $(GO) test -race -count=1 ./...

test-short: ## The suite without the race detector, for a quick loop.
	$(GO) test -count=1 $(PKGS)

bench: ## In-process benchmarks against peer libraries (see BENCHMARKS.md).
	cd bench && $(GO) test -run '^$$' -bench 'HotKey|ManyKeys|Middleware' -benchmem -count 5 -cpu 2 .

bench-redis: deps ## Redis benchmarks against redis_rate on one local redis-server.
	cd bench && $(GO) test -run '^$$' -bench 'Redis' -benchmem -count 3 -cpu 2 .

bench-server: deps ## sluice serve under load, beside Envoy's reference rate limit service.
	cd bench && $(GO) test -run '^$$' -bench 'Server' -benchtime 3s -count 3 -timeout 40m .

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

pictures: ## Regenerate the pictures in docs/ with `sluice sim`.
	for s in boundary calm-burst flood; do $(GO) run ./cmd/sluice sim --scenario $$s --svg docs/$$s.svg >/dev/null; done
