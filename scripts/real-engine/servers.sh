#!/usr/bin/env bash
# Run N llama-servers on 127.0.0.1, ports BASE..BASE+N-1, until stopped
# (SIGTERM/SIGINT stops them all). Each has Prometheus metrics (--metrics),
# a host-RAM prompt cache beside its slots (--cache-ram) and serves the model
# as "tiny". Logs go to LOGDIR/llama-<port>.log.
#
#   scripts/real-engine/servers.sh N BASE MODEL LOGDIR
#
# Environment: LLAMA_SERVER (default: from build.sh), THREADS (per server,
# default 1), SLOTS (parallel slots per server, default 2), CTX (KV cells
# per server, shared by its slots, default 16384), CACHE_RAM (MiB, default 256).
set -euo pipefail
[[ $# -eq 4 ]] || { sed -n 2,12p "$0" >&2; exit 2; }
N=$1 BASE=$2 MODEL=$3 LOGDIR=$4
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ -z ${LLAMA_SERVER:-} ]]; then
	eval "$("$HERE/build.sh" 2>/dev/null | grep '^LLAMA_SERVER=')"
fi
mkdir -p "$LOGDIR"

pids=()
stop() {
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap stop EXIT
trap 'stop; exit 143' INT TERM

for ((i = 0; i < N; i++)); do
	port=$((BASE + i))
	# --kv-unified: the slots share one KV buffer of CTX cells, so one slot
	# may hold a long prompt. --no-ui: nothing to serve a browser here.
	"$LLAMA_SERVER" -m "$MODEL" --alias tiny --host 127.0.0.1 --port "$port" \
		--metrics --slots --no-ui --threads "${THREADS:-1}" --threads-batch "${THREADS:-1}" \
		--parallel "${SLOTS:-2}" --kv-unified --ctx-size "${CTX:-16384}" \
		--cache-ram "${CACHE_RAM:-256}" >"$LOGDIR/llama-$port.log" 2>&1 &
	pids+=($!)
done
for ((i = 0; i < N; i++)); do
	port=$((BASE + i))
	for _ in $(seq 300); do
		curl -fsS -o /dev/null "http://127.0.0.1:$port/health" 2>/dev/null && break
		kill -0 "${pids[$i]}" 2>/dev/null || { echo "llama-server on $port died:" >&2; tail -20 "$LOGDIR/llama-$port.log" >&2; exit 1; }
		sleep 0.1
	done
	curl -fsS -o /dev/null "http://127.0.0.1:$port/health" || { echo "llama-server on $port not healthy" >&2; exit 1; }
done
echo "real-engine/servers: $N llama-servers ready on 127.0.0.1:$BASE..$((BASE + N - 1))" >&2
wait
