#!/usr/bin/env bash
# What llama-server says reaches the client through prefixring unchanged:
# /v1/models, a streamed chat completion, and the engine's own errors (same
# status, same body as asked directly). Part of make e2e-real.
#
#   scripts/real-engine/passthrough.sh ROUTER_URL LLAMA_URL WORKDIR
set -euo pipefail
[[ $# -eq 3 ]] || { sed -n 2,6p "$0" >&2; exit 2; }
R=$1 L=$2 W=$3
fail() { echo "passthrough: FAIL: $*" >&2; exit 1; }

# call NAME BASE METHOD PATH [BODY]: status to stdout, headers and body to files.
call() {
	local args=(-sS -o "$W/$1.body" -D "$W/$1.headers" -w '%{http_code}' -X "$3" "$2$4")
	if [[ $# -ge 5 ]]; then
		printf '%s' "$5" >"$W/$1.request"
		args+=(-H 'Content-Type: application/json' --data-binary "@$W/$1.request")
	fi
	curl "${args[@]}"
}
# ids: the sorted model ids of a /v1/models body.
ids() { python3 -c 'import json,sys; print(sorted(m["id"] for m in json.load(open(sys.argv[1]))["data"]))' "$1"; }

# 1. /v1/models: the engine's list, as the engine gives it.
s=$(call models-router "$R" GET /v1/models)
[[ $s == 200 ]] || fail "GET /v1/models through the router: $s $(cat "$W/models-router.body")"
call models-direct "$L" GET /v1/models >/dev/null
[[ "$(ids "$W/models-router.body")" == "$(ids "$W/models-direct.body")" ]] ||
	fail "/v1/models differ: router $(ids "$W/models-router.body"), engine $(ids "$W/models-direct.body")"
grep -q '"tiny"' "$W/models-router.body" || fail "/v1/models lacks the model alias tiny"
echo "passthrough: GET /v1/models -> 200, models $(ids "$W/models-router.body") as the engine lists them"

# 2. A stream: server-sent events, several chunks, [DONE] last, the
#    routing header present.
body='{"model":"tiny","stream":true,"max_tokens":12,"messages":[{"role":"user","content":" abc def ghi"}]}'
s=$(call stream "$R" POST /v1/chat/completions "$body")
[[ $s == 200 ]] || fail "stream: status $s"
grep -qi '^content-type: text/event-stream' "$W/stream.headers" || fail "stream: $(grep -i '^content-type' "$W/stream.headers")"
ep=$(grep -i '^x-prefixring-endpoint:' "$W/stream.headers" | tr -d '\r' | cut -d' ' -f2)
[[ -n $ep ]] || fail "stream: no X-Prefixring-Endpoint header"
chunks=$(grep -c '^data: {' "$W/stream.body" || true)
[[ $chunks -ge 12 ]] || fail "stream: $chunks data chunks, want >= 12 (one per token)"
[[ "$(grep '^data: ' "$W/stream.body" | tail -1 | tr -d '\r')" == "data: [DONE]" ]] || fail "stream: last event is not [DONE]"
echo "passthrough: streamed chat completion -> 200 text/event-stream, $chunks chunks then [DONE], from $ep"

# 3. The engine's errors: the same request to the engine and through the
#    router gets the same status and the same body.
long=$(printf ' abc%.0s' $(seq 40000)) # 40000 tokens: beyond the context
check_error() { # NAME BODY
	local sr sd
	sr=$(call "$1-router" "$R" POST /v1/chat/completions "$2")
	sd=$(call "$1-direct" "$L" POST /v1/chat/completions "$2")
	[[ $sd -ge 400 ]] || fail "$1: the engine answered $sd; the check needs a request it refuses"
	[[ $sr == "$sd" ]] || fail "$1: router $sr, engine $sd"
	cmp -s "$W/$1-router.body" "$W/$1-direct.body" || fail "$1: bodies differ: router $(cat "$W/$1-router.body") engine $(cat "$W/$1-direct.body")"
	echo "passthrough: $1 -> $sr from the engine through the router: $(head -c 160 "$W/$1-router.body")"
}
check_error too-long '{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"'"$long"'"}]}'
check_error bad-format '{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"nope"}}'
