# prefixring. `make test` is what CI runs; `make demo` is the quick start.
GO      ?= go
BIN     := bin/prefixring
PKGS    := ./...
FUZZTIME ?= 2m

.PHONY: study study-full study-seeds study-steady all build test test-deploy vet fmt-check tidy-check bench bench-proxy vs-haproxy demo e2e-real chaos fuzz clean

all: build

# Static, as the Dockerfile builds it: the dstack configs mount this binary
# into images of their own, whose libc need not be the build machine's.
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/prefixring

# The test suite: race detector on, no cache, vet and gofmt clean. The
# chaos package (every scenario in virtual time, in parallel) takes about
# 200 s alone on 2 cores and 600 s beside a second make test: past go
# test's default 10-minute limit per package, hence the wider one.
test: fmt-check vet tidy-check
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	$(MAKE) test-deploy

# deploy/ is a module of its own (Kubernetes' libraries stay out of the
# router's): the manifests, the Dockerfile's static build and the Grafana
# dashboard, checked against a prefixring binary it builds.
test-deploy:
	cd deploy && $(GO) test -race -count=1 -timeout 30m ./...

vet:
	$(GO) vet $(PKGS)
	cd deploy && $(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

tidy-check:
	$(GO) mod tidy -diff
	cd deploy && $(GO) mod tidy -diff

# Microbenchmarks of the hot path: key extraction, ring pick, proxy.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./prefix/ ./ring/ ./proxy/

# requests/s and added latency: direct vs prefixring vs HAProxy 2.6.
bench-proxy: build
	scripts/bench-proxy.sh

# Each fuzz target for FUZZTIME.
fuzz:
	@for t in $$($(GO) test -list 'Fuzz.*' ./prefix/ | grep ^Fuzz); do \
		echo "== $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -parallel 1 ./prefix/ || exit 1; \
	done

# prefixring x1/x3 against HAProxy 2.6 CHWBL x1/x3 and round-robin, in real
# time on 8 simulated engines, multi-turn and the Mooncake conversation
# trace (read from ../shared, skipped where it is not), 2 runs each
# (docs/vs-haproxy.md); about 40 minutes. Installs
# Debian's haproxy when missing and run as root. Flags: VS_HAPROXY_FLAGS,
# e.g. "-runs 3" or "-requests 200" for a quick check.
VS_HAPROXY_FLAGS ?=
vs-haproxy: build
	@command -v haproxy >/dev/null || { [ "$$(id -u)" = 0 ] || { echo "apt-get install haproxy (as root)"; exit 1; }; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; }
	$(GO) run ./scripts/vshaproxy -bin $(BIN) $(VS_HAPROXY_FLAGS)

demo: build
	$(GO) run ./scripts/demo -bin $(BIN)

# The routing study (docs/study.md): every policy on every workload and the
# Mooncake conversation trace, in the fleet simulator; writes out/eval
# (results.json, report.md, index.html). About 10 minutes on 2 cores;
# study-full runs the wider matrix.
study: build
	$(BIN) eval --out out/eval

study-full: build
	$(BIN) eval --full --out out/eval-full

# prefixring against round-robin over seeds 1-20: the study's grid (four
# workloads, x0.25-x2, both fleets) and 64 at a time. Each report.md's
# "Against round-robin, seed by seed" counts the seeds above round-robin's
# (docs/study.md, "The ideal fleet, and twenty seeds (stop 37)"); 5 min here.
SEEDS20 := 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20
study-seeds: build
	$(BIN) eval --workload shared-prefix,multi-turn,multi-turn-completions,agentic --policies chwbl,round-robin \
		--kv-blocks 0,1500 --rate-scale 0.25,1,2 --seeds $(SEEDS20) --requests 1500 --out out/study-seeds/grid
	$(BIN) eval --workload multi-turn,agentic --policies chwbl,round-robin --concurrency 64 \
		--kv-blocks 0,1500 --rate-scale 1 --seeds $(SEEDS20) --requests 1500 --out out/study-seeds/closed

# The study's grid run four times as long (6000 requests a run, against
# 1500), so that the conversations' caches reach their steady state, at
# x0.25, x0.5, x1 and x2 on both fleets, chwbl against round-robin, seeds
# 11-13; per-request records in out/study-steady/records (docs/study.md,
# "Steady state (stop 38)"); 2.5 min here.
study-steady: build
	$(BIN) eval --workload shared-prefix,multi-turn,multi-turn-completions,agentic --policies chwbl,round-robin \
		--kv-blocks 0,1500 --rate-scale 0.25,0.5,1,2 --seeds 11,12,13 --requests 6000 \
		--records out/study-steady/records --out out/study-steady

# prefixring in front of three real llama-servers (CPU, a tiny random-weight
# model): llama.cpp's own metrics must show a higher cached share than
# behind round-robin. The first run builds llama-server from the llama.cpp
# source that the npm package node-llama-cpp ships (~15 min on 2 cores,
# cached under ~/.cache/prefixring after). See README, "A real engine".
e2e-real: build
	scripts/real-engine/e2e.sh

# Chaos, both forms: the in-process scenarios (virtual time; also part of
# make test) with their figures, then the real processes: this binary's
# serve and sim, real signals, and as root each replica in a network
# namespace with its gossip links cut or made lossy, or its host
# black-holed (iproute2, nftables; tc netem where the kernel has it).
# docs/chaos.md lists which scenario runs in which form. About 10 minutes.
chaos: build
	CHAOS_TABLE=1 $(GO) test -race -count=1 -run . ./chaos/
	$(BIN) chaos

clean:
	rm -rf bin
