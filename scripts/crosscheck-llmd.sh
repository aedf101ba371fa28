#!/usr/bin/env bash
# Cross-check the simulated engine against llm-d-inference-sim v0.10.2, a
# third-party vLLM simulator: the same cold-then-warm experiment (one long
# prompt sent twice; compare TTFT, cached tokens and /metrics names).
#
# Not part of CI: building llm-d-inference-sim downloads about 1 GB of
# modules. Needs root for `ip netns` (llm-d-inference-sim listens on all
# interfaces, so it runs in a loopback-only namespace made here).
#
#   sudo scripts/crosscheck-llmd.sh            # results in $OUT (printed)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$(mktemp -d /tmp/crosscheck.XXXXXX)}
NS=${NS:-prefixring-xcheck}
PORT=8000
MODEL=meta-llama/Llama-3.1-8B-Instruct
PER_TOKEN_US=${PER_TOKEN_US:-36}   # llm-d prefill time per token, ~our 8B/H100 cold rate
TOKENS=${TOKENS:-4096}             # prompt length in our stand-in tokens (4 chars each)
echo "results in $OUT"

# 1. Build llm-d-inference-sim. `go install ...@v0.10.2` has been refused by
#    the module proxy, but a wrapper module that `go get`s the main package
#    (the package, so that go.sum gets its dependencies) can build it.
if [ ! -x "$OUT/llm-d-inference-sim" ]; then
	mkdir -p "$OUT/wrap"
	(
		cd "$OUT/wrap"
		printf 'module xcheck\n\ngo 1.24\n' >go.mod
		go get github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim@v0.10.2
		go build -o "$OUT/llm-d-inference-sim" github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim
	) 2>&1 | tee "$OUT/build.log"
fi
(cd "$ROOT" && go build -o "$OUT/prefixring" ./cmd/prefixring)

# 2. A loopback-only network namespace for both servers.
ip netns add "$NS" 2>/dev/null || true
trap 'ip netns pids "$NS" | xargs -r kill; ip netns del "$NS"' EXIT
ip netns exec "$NS" ip link set lo up
in_ns() { ip netns exec "$NS" "$@"; }

# Words of three letters and a space: 4 characters, one token for our
# stand-in tokenizer and one for llm-d's whitespace-splitting dummy tokenizer.
PROMPT=$(python3 -c "print('abc '*$TOKENS)")
BODY=$(printf '{"model":"%s","prompt":"%s","max_tokens":1}' "$MODEL" "$PROMPT")

# experiment NAME: cold then warm request, TTFT = time to the whole
# (one-token) response, then the server's metric names.
experiment() {
	local name=$1
	for i in 1 2; do
		in_ns curl -s -o "$OUT/$name.resp$i.json" -H 'Expect:' -H 'Content-Type: application/json' \
			-w "$name request $i: %{time_total}s\n" "http://127.0.0.1:$PORT/v1/completions" -d "$BODY"
		python3 -c "import json,sys; u=json.load(open(sys.argv[1])).get('usage',{}); print('  usage', u)" "$OUT/$name.resp$i.json" || true
	done
	in_ns curl -s "http://127.0.0.1:$PORT/metrics" >"$OUT/$name.metrics"
	grep -o '^vllm:[a-z0-9_:]*' "$OUT/$name.metrics" | sed 's/_\(bucket\|sum\|count\)$//' | sort -u >"$OUT/$name.names"
}

wait_up() { for _ in $(seq 100); do in_ns curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return; sleep 0.2; done; echo "$1 did not start" >&2; exit 1; }

# 3. llm-d-inference-sim: dummy tokenizer (else it fetches one from a model
#    hub), KV cache simulation on, per-token prefill latency.
ip netns exec "$NS" env POD_IP=127.0.0.1 "$OUT/llm-d-inference-sim" --model "$MODEL" --port $PORT \
	--force-dummy-tokenizer --enable-kvcache --block-size 16 --max-model-len 131072 \
	--latency-calculator per-token --prefill-time-per-token "${PER_TOKEN_US}us" \
	--time-to-first-token 0 --inter-token-latency 0 >"$OUT/llmd.log" 2>&1 &
pid=$!
wait_up llm-d-inference-sim
experiment llmd
kill $pid; wait $pid 2>/dev/null || true

# 4. prefixring sim, same experiment.
ip netns exec "$NS" "$OUT/prefixring" sim --listen 127.0.0.1:$PORT --model "$MODEL" --log-level warn >"$OUT/prefixring.log" 2>&1 &
pid=$!
wait_up "prefixring sim"
experiment prefixring
kill $pid; wait $pid 2>/dev/null || true

echo "metric names only llm-d-inference-sim has:"; comm -23 "$OUT/llmd.names" "$OUT/prefixring.names" | sed 's/^/  /'
echo "metric names only prefixring sim has:"; comm -13 "$OUT/llmd.names" "$OUT/prefixring.names" | sed 's/^/  /'
