#!/usr/bin/env bash
# Reproduces docs/study.md, "Conversations that spill": chwbl against its
# follow variants on the demo's shape (seeds 1-5, ratios to round-robin), the
# built-in conversation workloads on both fleets at x1 and x2 and the Mooncake
# conversation trace at x1 (seeds 11-13, ratios to chwbl). 3.5 minutes on
# 2 cores. Run from the repository root; OUT defaults to /tmp/follow.
set -euo pipefail
OUT=${OUT:-/tmp/follow}
TRACE=${TRACE:-../shared/traces/mooncake/conversation_trace.jsonl}
go build -o bin/prefixring ./cmd/prefixring
P=chwbl,chwbl-follow,chwbl-follow-shared
bin/prefixring eval --workload demo --endpoints 4 --kv-blocks 1000 --routers 3 --rate-scale 1 \
	--policies round-robin,$P --seeds 1,2,3,4,5 --out "$OUT/demo" >/dev/null
bin/prefixring eval --workload multi-turn,multi-turn-completions,agentic --policies $P --routers 3 \
	--rate-scale 1,2 --kv-blocks 0,1500 --seeds 11,12,13 --requests 1500 --out "$OUT/grid" >/dev/null
bin/prefixring eval --workload "trace:$TRACE" --policies $P --routers 3 --rate-scale 1 --kv-blocks 0,1500 \
	--seeds 11,12,13 --requests 1500 --out "$OUT/trace" >/dev/null
d=$(dirname "$0")
python3 "$d/table.py" "$OUT/demo/results.json" round-robin
python3 "$d/table.py" --compact "$OUT/grid/results.json"
python3 "$d/table.py" --compact "$OUT/trace/results.json"
