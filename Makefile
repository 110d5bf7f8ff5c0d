# ratelimit-svc — `make help` lists the targets.
GO ?= go
PKGS := ./...

.PHONY: help run build test race vet fmt lint bench fuzz loadtest clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

run: ## serve the example policies in config/ (local-only, :8081 gRPC, :8080 HTTP)
	$(GO) run ./cmd/ratelimit-svc

build: ## build bin/ratelimit-svc and bin/rlsbench
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/ ./cmd/...

test: vet fmt ## vet, gofmt check, then every test with the race detector (scripts/test.sh)
	GO=$(GO) scripts/test.sh

vet: ## go vet
	$(GO) vet $(PKGS)

fmt: ## fail if any file is not gofmt'ed
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "not gofmt'ed:"; echo "$$out"; exit 1; fi

lint: vet fmt ## the checks CI runs before the tests

bench: ## library benchmarks (limiter beside golang.org/x/time/rate, policy matcher)
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

fuzz: ## run each fuzz target for 30 s
	@for t in $$(grep -rhoE '^func (Fuzz[A-Za-z0-9_]+)' --include=*_test.go pkg | sed 's/func //'); do \
		pkg=$$(grep -rlE "^func $$t\(" --include=*_test.go pkg | xargs dirname); \
		echo "== $$t ($$pkg)"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime 30s ./$$pkg || exit 1; done

loadtest: build ## 10 s of rlsbench against a local instance on :8081 (start it with make run)
	bin/rlsbench -addr 127.0.0.1:8081 -domain api -descriptor 'generic_key=api,api_key=key-{k}' -keys 10000 -c 16 -d 10s

clean: ## remove build output
	rm -rf bin
