#!/usr/bin/env bash
# Write the tiny random-weight GGUF model (scripts/real-engine/model.py) once
# and keep it beside the llama.cpp build. Prints MODEL=<path> last.
#
#   scripts/real-engine/model.sh            # after build.sh (it needs gguf-py)
#
# Needs python3 with numpy and PyYAML (Debian: apt-get install -y python3-numpy python3-yaml).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
eval "$("$HERE/build.sh" 2>/dev/null | grep -E '^(LLAMA_SERVER|GGUF_PY)=')"
[[ -n ${GGUF_PY:-} ]] || { echo "real-engine/model: build.sh failed; run it alone to see why" >&2; exit 1; }

# The shape (README, "A real engine"): small enough that three servers share
# two cores, deep and wide enough that a few thousand prompt tokens take
# long to prefill next to a cache hit.
ARGS=(--layers 4 --embd 256 --heads 4 --kv-heads 4 --ff 768 --ctx 32768 --dtype f32 --seed 1)
key=$( (echo "${ARGS[*]}"; cat "$HERE/model.py") | sha256sum | cut -c1-12)
MODEL=$(dirname "$(dirname "$GGUF_PY")")/models/tiny-$key.gguf

if [[ ! -s $MODEL ]]; then
	py=
	for p in ${PYTHON:-} python3 /usr/bin/python3; do
		if "$p" -c 'import numpy, yaml' 2>/dev/null; then py=$p; break; fi
	done
	[[ -n $py ]] || { echo "real-engine/model: no python3 with numpy and yaml (apt-get install -y python3-numpy python3-yaml)" >&2; exit 1; }
	mkdir -p "$(dirname "$MODEL")"
	PYTHONPATH=$GGUF_PY "$py" "$HERE/model.py" "$MODEL.tmp" "${ARGS[@]}"
	mv "$MODEL.tmp" "$MODEL"
fi
echo "real-engine/model: $MODEL" >&2
echo "MODEL=$MODEL"
