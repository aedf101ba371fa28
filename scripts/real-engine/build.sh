#!/usr/bin/env bash
# Build llama-server (llama.cpp's OpenAI-compatible server, CPU only) from the
# llama.cpp source that the npm package node-llama-cpp ships as a git bundle,
# and keep it under the user's cache directory. A second run reuses the build
# (it only checks it). Prints where things are; the last lines are
# shell assignments (LLAMA_SERVER=..., GGUF_PY=...) for other scripts to eval.
#
#   scripts/real-engine/build.sh            # ~10-15 min on 2 cores the first time
#   JOBS=8 scripts/real-engine/build.sh     # more compile jobs
#
# Needs: npm, git, cmake >= 3.18, a C++17 compiler
# (Debian: apt-get install -y cmake build-essential).
set -euo pipefail

# Pinned: the npm package, its tarball's integrity (npm's dist.integrity) and
# the commit its bundle must hold. A different download fails loudly.
NLC_VERSION=3.22.1
NLC_INTEGRITY=sha512-bltIipuWmc123H7tMIgDGKSsSrhmhlQYeVUC48XTjVW7XGJJiJJyCdlTMzQ/LiWoPkGDpcL4FviDpgw7qfTiDw==
LLAMA_COMMIT=de3ff815ea7d559ee917f063901b8986f038abc6
JOBS=${JOBS:-2}

CACHE=${PREFIXRING_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/prefixring/llama.cpp-${LLAMA_COMMIT:0:7}}
SRC=$CACHE/src
BUILD=$CACHE/build
BIN=$BUILD/bin/llama-server

# GGML_NATIVE=ON: -march=native, the fastest CPU kernels for this machine.
# The binary never leaves the machine that built it (a per-user cache), and
# the stamp below records the CPU's flags, so a cache that meets another CPU
# (a shared home directory) is rebuilt instead of dying on SIGILL.
# Static, no OpenSSL (we only serve plain HTTP on 127.0.0.1), no web UI
# download (LLAMA_USE_PREBUILT_UI fetches it from a model hub otherwise).
CMAKE_FLAGS=(
	-DCMAKE_BUILD_TYPE=Release
	-DGGML_NATIVE=ON
	-DBUILD_SHARED_LIBS=OFF
	-DLLAMA_OPENSSL=OFF
	-DLLAMA_USE_PREBUILT_UI=OFF
	-DLLAMA_BUILD_UI=OFF
	-DLLAMA_BUILD_TESTS=OFF
	-DLLAMA_BUILD_EXAMPLES=OFF
)
cpu_flags=$( (grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m) | sha256sum | cut -c1-16)
STAMP="nlc=$NLC_VERSION commit=$LLAMA_COMMIT cpu=$cpu_flags flags=${CMAKE_FLAGS[*]}"

say() { echo "real-engine/build: $*" >&2; }
need() { command -v "$1" >/dev/null || { say "$1 is missing ($2)"; exit 1; }; }

report() {
	say "llama.cpp source: $SRC (commit ${LLAMA_COMMIT:0:12}, from node-llama-cpp@$NLC_VERSION)"
	say "llama-server:     $BIN"
	say "gguf-py:          $SRC/gguf-py"
	echo "LLAMA_SERVER=$BIN"
	echo "GGUF_PY=$SRC/gguf-py"
}

if [[ -x $BIN && -f $CACHE/stamp && "$(cat "$CACHE/stamp")" == "$STAMP" ]]; then
	say "cached build is up to date"
	report
	exit 0
fi

need git "apt-get install -y git"
need cmake "apt-get install -y cmake"
need c++ "apt-get install -y build-essential"
mkdir -p "$CACHE"

# 1. The source: node-llama-cpp's bundle, checked against the pins.
if [[ "$(git -C "$SRC" rev-parse HEAD 2>/dev/null)" != "$LLAMA_COMMIT" ]]; then
	need npm "Node.js 18+ ships it"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	say "downloading node-llama-cpp@$NLC_VERSION (npm pack, ~35 MB)"
	(cd "$tmp" && npm pack --silent "node-llama-cpp@$NLC_VERSION" >/dev/null)
	tgz=$tmp/node-llama-cpp-$NLC_VERSION.tgz
	got=sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)
	[[ $got == "$NLC_INTEGRITY" ]] || { say "integrity mismatch: got $got want $NLC_INTEGRITY"; exit 1; }
	tar -xzf "$tgz" -C "$tmp" package/llama/gitRelease.bundle
	rm -rf "$SRC"
	git clone --quiet "$tmp/package/llama/gitRelease.bundle" "$SRC" 2>/dev/null
	head=$(git -C "$SRC" rev-parse HEAD)
	[[ $head == "$LLAMA_COMMIT" ]] || { say "bundle holds $head, want $LLAMA_COMMIT"; exit 1; }
fi

# 2. Configure and build only llama-server.
start=$(date +%s)
rm -f "$CACHE/stamp"
cmake -S "$SRC" -B "$BUILD" "${CMAKE_FLAGS[@]}" >"$CACHE/cmake.log" 2>&1 ||
	{ tail -30 "$CACHE/cmake.log" >&2; say "cmake configure failed (log: $CACHE/cmake.log)"; exit 1; }
say "building llama-server with $JOBS jobs (log: $CACHE/build.log)"
cmake --build "$BUILD" --target llama-server -j "$JOBS" >"$CACHE/build.log" 2>&1 ||
	{ tail -30 "$CACHE/build.log" >&2; say "build failed (log: $CACHE/build.log)"; exit 1; }
"$BIN" --version >/dev/null 2>&1 || { say "$BIN does not run"; exit 1; }
echo "$STAMP" >"$CACHE/stamp"
say "built in $(($(date +%s) - start)) s"
report
