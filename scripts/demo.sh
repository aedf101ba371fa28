#!/usr/bin/env bash
# make demo: two fleets of 4 simulated vLLM servers on 127.0.0.1. The same
# multi-turn chat traffic goes to one fleet through two prefixring replicas
# that gossip their load (the client alternates between them, as DNS
# round-robin would), and to the other fleet at random, as a Kubernetes
# Service spreads connections. The demo prints cache hits and time to first
# token for both, and where each conversation's turns went.
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
$BIN serve --listen 127.0.0.1:18080 --admin-listen 127.0.0.1:18082 --endpoints "$eps" --log-level warn \
  --node-name router-a --gossip-bind 127.0.0.1:18090 & pids+=($!)
$BIN serve --listen 127.0.0.1:18081 --admin-listen 127.0.0.1:18083 --endpoints "$eps" --log-level warn \
  --node-name router-b --gossip-bind 127.0.0.1:18091 --join 127.0.0.1:18090 & pids+=($!)

for port in 18080 18081; do
  for _ in $(seq 100); do
    curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null && break
    sleep 0.1
  done
done

go run ./scripts/demo \
  -router http://127.0.0.1:18080,http://127.0.0.1:18081 \
  -direct http://127.0.0.1:18200,http://127.0.0.1:18201,http://127.0.0.1:18202,http://127.0.0.1:18203
echo
echo "The gossip cluster as router-b sees it (GET /debug/cluster on its admin listener):"
curl -fsS http://127.0.0.1:18083/debug/cluster
