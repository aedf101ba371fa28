#!/usr/bin/env bash
# bench-proxy.sh: requests/s and added latency of prefixring against a direct
# connection and against HAProxy 2.6 (body-hash consistent hashing with
# bounded loads), with one load tool (wrk) and the same chat bodies.
# `make bench-proxy` builds bin/prefixring and runs it; docs/bench-proxy.md
# explains the method and records the results.
#
# Knobs (environment): SIZES="2048 65536" body bytes; CONNS=64 THREADS=2
# DURATION=15s for the throughput runs; LAT_CONNS=1 LAT_DURATION=8s for the
# latency runs; HASH_BYTES=2048 body bytes HAProxy hashes; PIN=1 pins wrk to
# CPU 0 and every server to CPU 1 (PIN=0: no pinning); BASE_PORT=19100;
# BIN=bin/prefixring the router measured; BASELINE_BIN, when set, a second
# prefixring binary (an older build) measured in the same session as the
# target "baseline", for a before/after in one run.
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"2048 65536"}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
DURATION=${DURATION:-15s}
LAT_CONNS=${LAT_CONNS:-1}
LAT_DURATION=${LAT_DURATION:-8s}
WARMUP=${WARMUP:-2s}
HASH_BYTES=${HASH_BYTES:-2048}
PIN=${PIN:-1}
BASE_PORT=${BASE_PORT:-19100}
BIN=${BIN:-bin/prefixring}
BASELINE_BIN=${BASELINE_BIN:-}
UPSTREAMS=4

UP_PORTS=()
for i in $(seq 1 "$UPSTREAMS"); do UP_PORTS+=($((BASE_PORT + i))); done
PR_PORT=$((BASE_PORT + 80))
HA_PORT=$((BASE_PORT + 81))
HA_STATS_PORT=$((BASE_PORT + 82))
PR_ADMIN_PORT=$((BASE_PORT + 83))
BL_PORT=$((BASE_PORT + 84))
BL_ADMIN_PORT=$((BASE_PORT + 85))
LUA=scripts/benchproxy/chat.lua

log() { printf '== %s\n' "$*" >&2; }
die() { printf 'bench-proxy: %s\n' "$*" >&2; exit 1; }

# --- tools -------------------------------------------------------------------
if ! command -v haproxy >/dev/null || ! command -v wrk >/dev/null; then
	[ "$(id -u)" = 0 ] || die "haproxy and wrk are missing; run as root or: apt-get install haproxy wrk"
	log "installing haproxy and wrk from Debian"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy wrk >/dev/null
fi
[ -x "$BIN" ] || die "$BIN not built; run make build (or make bench-proxy)"
[ -z "$BASELINE_BIN" ] || [ -x "$BASELINE_BIN" ] || die "BASELINE_BIN $BASELINE_BIN is not executable"
for p in "${UP_PORTS[@]}" "$PR_PORT" "$HA_PORT" "$HA_STATS_PORT" "$PR_ADMIN_PORT" "$BL_PORT" "$BL_ADMIN_PORT"; do
	if ss -ltnH "sport = :$p" | grep -q .; then die "port $p is in use; set BASE_PORT"; fi
done

LOAD=() SERVER=()
if [ "$PIN" = 1 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
	LOAD=(taskset -c 0) SERVER=(taskset -c 1)
fi

# --- processes ---------------------------------------------------------------
TMP=$(mktemp -d /tmp/bench-proxy.XXXXXX)
PIDS=()
HA_PID=
cleanup() {
	for p in "${PIDS[@]}" $HA_PID; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_http() { # url: wait up to 5s for a 2xx
	for _ in $(seq 50); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	die "$1 did not come up"
}

log "building the upstream"
go build -o "$TMP/upstream" ./scripts/benchproxy/upstream

up_addrs=$(printf '127.0.0.1:%s,' "${UP_PORTS[@]}")
"${SERVER[@]}" "$TMP/upstream" -listen "${up_addrs%,}" 2>"$TMP/upstream.log" &
PIDS+=($!)
endpoints=$(printf 'http://127.0.0.1:%s,' "${UP_PORTS[@]}")
# start_router bin port admin_port: /metrics is served on the admin
# listener, or on the API port by builds older than --admin-listen; sets
# METRICS to the URL it is scraped from.
start_router() {
	local admin=()
	METRICS="http://127.0.0.1:$2/metrics"
	local help
	help=$("$1" serve --help 2>&1 || true)
	if grep -q -- --admin-listen <<<"$help"; then
		admin=(--admin-listen "127.0.0.1:$3")
		METRICS="http://127.0.0.1:$3/metrics"
	fi
	"${SERVER[@]}" "$1" serve --listen "127.0.0.1:$2" "${admin[@]}" --endpoints "${endpoints%,}" \
		--log-level warn >/dev/null 2>"$TMP/router-$2.log" &
	PIDS+=($!)
}
wait_http "http://127.0.0.1:${UP_PORTS[0]}/health"
start_router "$BIN" "$PR_PORT" "$PR_ADMIN_PORT"
PR_METRICS=$METRICS
wait_http "http://127.0.0.1:$PR_PORT/readyz"
if [ -n "$BASELINE_BIN" ]; then
	start_router "$BASELINE_BIN" "$BL_PORT" "$BL_ADMIN_PORT"
	BL_METRICS=$METRICS
	wait_http "http://127.0.0.1:$BL_PORT/readyz"
fi

# start_haproxy bufsize: (re)starts HAProxy with the issue's balancing and
# a buffer big enough that http-buffer-request holds the whole body.
start_haproxy() {
	if [ -n "$HA_PID" ]; then kill "$HA_PID"; wait "$HA_PID" 2>/dev/null || true; fi
	{
		printf 'global\n\tmaxconn 4096\n\ttune.bufsize %s\n' "$1"
		printf 'defaults\n\tmode http\n\ttimeout connect 2s\n\ttimeout client 60s\n\ttimeout server 60s\n'
		printf 'frontend stats\n\tbind 127.0.0.1:%s\n\tstats enable\n\tstats uri /stats\n' "$HA_STATS_PORT"
		printf 'frontend fe\n\tbind 127.0.0.1:%s\n\tdefault_backend be\n' "$HA_PORT"
		printf 'backend be\n\toption http-buffer-request\n\tbalance hash req.body,bytes(0,%s)\n' "$HASH_BYTES"
		printf '\thash-type consistent\n\thash-balance-factor 125\n'
		for i in "${!UP_PORTS[@]}"; do
			printf '\tserver u%d 127.0.0.1:%s check inter 5s\n' "$i" "${UP_PORTS[$i]}"
		done
	} >"$TMP/haproxy.cfg"
	haproxy -c -q -f "$TMP/haproxy.cfg" || die "haproxy rejected $TMP/haproxy.cfg"
	"${SERVER[@]}" haproxy -db -f "$TMP/haproxy.cfg" 2>"$TMP/haproxy.log" &
	HA_PID=$!
	wait_http "http://127.0.0.1:$HA_STATS_PORT/stats"
}

# run_wrk threads conns duration size url: prints "rps p50 p90 p99 errors requests".
run_wrk() {
	local out
	out=$("${LOAD[@]}" wrk -t"$1" -c"$2" -d"$3" -s "$LUA" "$5" -- "$4" 2>&1) || die "wrk failed: $out"
	sed -n 's/^RESULT rps=\([0-9]*\) p50_us=\([0-9]*\) p90_us=\([0-9]*\) p99_us=\([0-9]*\) requests=\([0-9]*\) errors=\([0-9]*\).*/\1 \2 \3 \4 \6 \5/p' <<<"$out"
}

# spread: requests per upstream as each proxy counted them.
router_spread() {
	curl -fsS "$1" |
		awk '/^prefixring_requests_total/ { match($0, /127\.0\.0\.1:[0-9]+/); n[substr($0, RSTART + 10, RLENGTH - 10)] += $NF }
			END { for (p in n) printf " %s=%d", p, n[p] }'
}
spread() {
	printf '   prefixring:'
	router_spread "$PR_METRICS"
	if [ -n "$BASELINE_BIN" ]; then
		printf '\n   baseline:  '
		router_spread "$BL_METRICS"
	fi
	printf '\n   haproxy:   '
	curl -fsS "http://127.0.0.1:$HA_STATS_PORT/stats;csv" |
		awk -F, '$1 == "be" && $2 ~ /^u/ { printf " %s=%s", $2, $8 }'
	printf '\n'
}

# cpu_ticks target: user+system CPU the target's server process has used
# (the upstream's for direct). On a shared machine CPU per request is a
# steadier comparison than requests/s.
cpu_ticks() {
	local pid
	case $1 in
	direct) pid=${PIDS[0]} ;;
	prefixring) pid=${PIDS[1]} ;;
	baseline) pid=${PIDS[2]} ;;
	haproxy) pid=$HA_PID ;;
	esac
	awk '{ print $14 + $15 }' "/proc/$pid/stat"
}

declare -A R
TARGETS="direct prefixring haproxy"
[ -z "$BASELINE_BIN" ] || TARGETS="direct baseline prefixring haproxy"
url_of() {
	case $1 in
	direct) echo "http://127.0.0.1:${UP_PORTS[0]}" ;;
	prefixring) echo "http://127.0.0.1:$PR_PORT" ;;
	baseline) echo "http://127.0.0.1:$BL_PORT" ;;
	haproxy) echo "http://127.0.0.1:$HA_PORT" ;;
	esac
}

log "$(haproxy -v | head -1); $(wrk -v 2>&1 | head -1); $(go version)"
log "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); pinning: ${LOAD[*]:-none} wrk, ${SERVER[*]:-none} servers"
started=$SECONDS
for size in $SIZES; do
	# The whole request (body, headers, HAProxy's reserve) must fit one buffer.
	bufsize=16384
	while [ "$bufsize" -lt $((size + 8192)) ]; do bufsize=$((bufsize * 2)); done
	start_haproxy "$bufsize"
	log "body $size B (haproxy tune.bufsize $bufsize): -t$THREADS -c$CONNS -d$DURATION"
	for t in $TARGETS; do
		run_wrk "$THREADS" "$CONNS" "$WARMUP" "$size" "$(url_of "$t")" >/dev/null
		c0=$(cpu_ticks "$t")
		R[$size,$t,tput]=$(run_wrk "$THREADS" "$CONNS" "$DURATION" "$size" "$(url_of "$t")")
		c1=$(cpu_ticks "$t")
		read -r _ _ _ _ _ n <<<"${R[$size,$t,tput]}"
		R[$size,$t,cpu]=$(awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v n="$n" \
			'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
		log "  $t: ${R[$size,$t,tput]} cpu_us_per_req=${R[$size,$t,cpu]}"
	done
	spread >&2
	log "body $size B: latency -t1 -c$LAT_CONNS -d$LAT_DURATION"
	for t in $TARGETS; do
		R[$size,$t,lat]=$(run_wrk 1 "$LAT_CONNS" "$LAT_DURATION" "$size" "$(url_of "$t")")
		log "  $t: ${R[$size,$t,lat]}"
	done
done
log "done in $((SECONDS - started))s"

# --- report ------------------------------------------------------------------
echo
printf '%-6s %-11s %10s %9s %9s %9s | %9s %9s %12s %7s\n' body target "req/s" "p50 µs" "p99 µs" "CPU µs/r" \
	"p50 µs" "p99 µs" "added p50" errors
printf '%-6s %-11s %40s | %40s\n' "" "" "(-t$THREADS -c$CONNS -d$DURATION)" "(-t1 -c$LAT_CONNS -d$LAT_DURATION)"
for size in $SIZES; do
	read -r _ dp50 _ _ _ <<<"${R[$size,direct,lat]}"
	for t in $TARGETS; do
		read -r rps p50 _ p99 e1 _ <<<"${R[$size,$t,tput]}"
		read -r _ lp50 _ lp99 e2 _ <<<"${R[$size,$t,lat]}"
		printf '%-6s %-11s %10s %9s %9s %9s | %9s %9s %12s %7s\n' "$((size / 1024))KB" "$t" "$rps" "$p50" "$p99" \
			"${R[$size,$t,cpu]}" "$lp50" "$lp99" "$((lp50 - dp50)) µs" "$((e1 + e2))"
	done
done
echo
for size in $SIZES; do
	read -r prps _ <<<"${R[$size,prefixring,tput]}"
	read -r hrps _ <<<"${R[$size,haproxy,tput]}"
	read -r drps _ <<<"${R[$size,direct,tput]}"
	read -r _ d _ <<<"${R[$size,direct,lat]}"
	read -r _ p _ <<<"${R[$size,prefixring,lat]}"
	read -r _ h _ <<<"${R[$size,haproxy,lat]}"
	awk -v s="$((size / 1024))KB" -v p="$prps" -v h="$hrps" -v d="$drps" -v ap="$((p - d))" -v ah="$((h - d))" \
		-v cp="${R[$size,prefixring,cpu]}" -v ch="${R[$size,haproxy,cpu]}" 'BEGIN {
		printf "%-5s prefixring/haproxy req/s = %.2f (goal >= 1); prefixring/direct = %.2f, haproxy/direct = %.2f\n", s, p / h, p / d, h / d
		printf "%-5s added p50: prefixring %d µs (goal <= 200), haproxy %d µs; proxy CPU per request: prefixring/haproxy = %.2f\n", s, ap, ah, cp / ch }'
	if [ -n "$BASELINE_BIN" ]; then
		read -r brps _ <<<"${R[$size,baseline,tput]}"
		read -r _ bl _ <<<"${R[$size,baseline,lat]}"
		awk -v s="$((size / 1024))KB" -v p="$prps" -v b="$brps" -v ap="$((p - d))" -v ab="$((bl - d))" \
			-v cp="${R[$size,prefixring,cpu]}" -v cb="${R[$size,baseline,cpu]}" 'BEGIN {
			printf "%-5s prefixring/baseline: req/s = %.2f, CPU per request = %.2f; added p50 %d µs vs %d µs\n", s, p / b, cp / cb, ap, ab }'
	fi
done
