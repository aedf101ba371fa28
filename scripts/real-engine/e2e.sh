#!/usr/bin/env bash
# make e2e-real: prefixring in front of a real inference engine.
#
# Three llama-servers (CPU, the tiny random-weight model, a host-RAM prompt
# cache each) on 127.0.0.1, first behind three gossiping prefixring
# replicas, then, on fresh servers, behind round-robin. The same multi-turn
# chat traffic goes through both. Checked:
#   - llama.cpp's own /metrics: the share of prompt tokens served from its
#     cache (llamacpp:prompt_tokens_cached_total against
#     llamacpp:prompt_tokens_total) is higher behind prefixring;
#   - /v1/models, a stream and the engine's own errors (status and body)
#     pass through the router unchanged;
#   - the official OpenAI Node client streams a chat completion through it.
# Everything started is stopped at the end, also on Ctrl-C or a failure.
#
#   make e2e-real                  # or scripts/real-engine/e2e.sh
#   KEEP=1 make e2e-real           # keep the logs (printed) after success
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/scripts/real-engine
cd "$ROOT"
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
OUT=${OUT:-$(mktemp -d /tmp/e2e-real.XXXXXX)}
REQUESTS=${REQUESTS:-48} CONCURRENCY=${CONCURRENCY:-3} MAX_TOKENS=${MAX_TOKENS:-16}
LLAMA_BASE=18300 ROUTER_BASE=18380 ADMIN_BASE=18383 GOSSIP_BASE=18390
T0=$SECONDS

say() { printf '[e2e-real %3ds] %s\n' $((SECONDS - T0)) "$*"; }
die() { say "FAIL: $*"; exit 1; }

pids=()
stop_all() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	stop_all
	if [[ $rc -ne 0 ]]; then say "logs kept in $OUT"; elif [[ -z ${KEEP:-} ]]; then rm -rf "$OUT"; else say "logs in $OUT"; fi
	exit $rc
}
trap on_exit EXIT
trap 'say interrupted; exit 130' INT TERM

wait_ok() { # URL WHAT
	for _ in $(seq 300); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	die "$2 not ready at $1"
}

# --- 1. Engine, model, router, clients.
say "llama-server (built once, then cached):"
eval "$("$HERE/build.sh" | grep -E '^(LLAMA_SERVER|GGUF_PY)=')"
eval "$("$HERE/model.sh" | grep '^MODEL=')"
export LLAMA_SERVER
say "building prefixring"
make -s build
if [[ ! -d $HERE/openai/node_modules/openai ]]; then
	say "installing the openai npm client (pinned in package-lock.json)"
	(cd "$HERE/openai" && npm ci --silent --no-audit --no-fund)
fi

llama_urls() { local u=() i; for i in 0 1 2; do u+=("http://127.0.0.1:$((LLAMA_BASE + i))"); done; (IFS=,; echo "${u[*]}"); }
router_urls() { local u=() i; for i in 0 1 2; do u+=("http://127.0.0.1:$((ROUTER_BASE + i))"); done; (IFS=,; echo "${u[*]}"); }

start_servers() { # LOGDIR
	"$HERE/servers.sh" 3 $LLAMA_BASE "$MODEL" "$1" &
	pids+=($!)
	for i in 0 1 2; do wait_ok "http://127.0.0.1:$((LLAMA_BASE + i))/health" llama-server; done
}

# Gossip refuses to run without a key; each cluster gets a fresh one.
start_routers() { # LOGDIR [serve flags...]
	local dir=$1 i join=() key
	key=$(head -c 32 /dev/urandom | base64)
	shift
	for i in 0 1 2; do
		bin/prefixring serve --listen 127.0.0.1:$((ROUTER_BASE + i)) --admin-listen 127.0.0.1:$((ADMIN_BASE + i)) \
			--endpoints "$(llama_urls)" --node-name "router-$i" --gossip-bind 127.0.0.1:$((GOSSIP_BASE + i)) \
			--gossip-key "$key" "${join[@]}" --drain-delay 0s --log-level warn "$@" >"$dir/router-$i.log" 2>&1 &
		pids+=($!)
		join=(--join 127.0.0.1:$GOSSIP_BASE)
	done
	for i in 0 1 2; do wait_ok "http://127.0.0.1:$((ROUTER_BASE + i))/readyz" "prefixring replica $i"; done
}

# drive NAME URLS: the traffic through URLS with prefixring load, which
# reads llama.cpp's own counters (llamacpp:prompt_tokens_total and
# llamacpp:prompt_tokens_cached_total) before and after; the cached share
# goes to $OUT/NAME.share.
drive() {
	local name=$1 urls=$2
	say "$name: $REQUESTS requests of multi-turn chats, $CONCURRENCY conversations at a time, through $urls"
	bin/prefixring load --url "$urls" --workload multi-turn --requests "$REQUESTS" --concurrency "$CONCURRENCY" \
		--think-scale 0 --max-tokens "$MAX_TOKENS" --stream --model tiny --label "$name" \
		--engine-metrics "$(llama_urls)" --json "$OUT/$name.json" | tee "$OUT/$name.table" ||
		die "$name: prefixring load saw errors"
	share=$(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["engine"]; assert e["source"]=="llamacpp" and e["prompt_tokens"]>0, e; print("%.3f" % e["cached_share"])' "$OUT/$name.json") ||
		die "$name: llama.cpp counted no prompt tokens"
	say "$name: llama.cpp metrics: cached share of prompt tokens $share"
	echo "$share" >"$OUT/$name.share"
}

# --- 2. prefixring: pass-through checks, then the traffic.
mkdir -p "$OUT/prefixring" "$OUT/round-robin"
start_servers "$OUT/prefixring"
start_routers "$OUT/prefixring"
R=http://127.0.0.1:$ROUTER_BASE
L=http://127.0.0.1:$LLAMA_BASE
say "3 llama-servers, 3 gossiping prefixring replicas up"
"$HERE/passthrough.sh" "$R" "$L" "$OUT/prefixring" || die "pass-through checks"
node "$HERE/openai/stream.mjs" "$R/v1" || die "openai-node client"
drive prefixring "$(router_urls)"
stop_all

# --- 3. round-robin, on fresh servers (empty caches).
start_servers "$OUT/round-robin"
start_routers "$OUT/round-robin" --policy round-robin
drive round-robin "$(router_urls)"
stop_all

p=$(cat "$OUT/prefixring.share") r=$(cat "$OUT/round-robin.share")
awk -v p="$p" -v r="$r" 'BEGIN { exit !(p > r) }' || die "cached share behind prefixring ($p) is not above round-robin's ($r)"
bin/prefixring load --compare "$OUT/round-robin.json" "$OUT/prefixring.json"
say "PASS: cached share of prompt tokens (llama.cpp's metrics): prefixring $p, round-robin $r; wall $((SECONDS - T0)) s"
