#!/usr/bin/env bash
# make demo: two fleets of 4 simulated vLLM servers on 127.0.0.1; the same
# multi-turn chat traffic goes through prefixring to one and, picking a
# server at random as a Kubernetes Service does, to the other; the demo prints cache hits and time to first token for both.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=bin/prefixring
[[ -x $BIN ]] || make build
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

$BIN sim --count 4 --base-port 18100 --log-level warn & pids+=($!)
$BIN sim --count 4 --base-port 18200 --log-level warn & pids+=($!)
eps=http://127.0.0.1:18100,http://127.0.0.1:18101,http://127.0.0.1:18102,http://127.0.0.1:18103
$BIN serve --listen 127.0.0.1:18080 --endpoints "$eps" --log-level warn & pids+=($!)

for _ in $(seq 100); do
  curl -fsS -o /dev/null http://127.0.0.1:18080/readyz 2>/dev/null && break
  sleep 0.1
done

go run ./scripts/demo \
  -router http://127.0.0.1:18080 \
  -direct http://127.0.0.1:18200,http://127.0.0.1:18201,http://127.0.0.1:18202,http://127.0.0.1:18203
echo
echo "Router state (GET /debug/ring):"
curl -fsS http://127.0.0.1:18080/debug/ring
