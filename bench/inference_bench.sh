#!/usr/bin/env bash
# inference_bench.sh: from a commit to "every inference rank on the host has
# loaded it", for RANKS (8) stand-in ranks (wt_transfer's vLLM worker
# extension over the export; load_weights reads every byte), against every
# rank reading a private buffer of the same size at once, in the same run
# (bench/inference_bench.py). The model: synthetic:MODEL (bench-1g, 1.0
# GiB), shadow staging, --memory shared --export; wt-push commits ROUNDS
# (4) rounds; the first round (mapping, first touch) is reported apart.
# Settings: BUILD_DIR (build), MODEL, RANKS, ROUNDS. Needs about RANKS GiB
# of memory beyond the server's 2 GiB (the private buffers). Not a test; CI
# does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=inference_bench
build=${BUILD_DIR:-build}
model=${MODEL:-bench-1g}
ranks=${RANKS:-8}
rounds=${ROUNDS:-4}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_build "$build" "" wt-server wt-push wt_consumer wt_client
work=$(mktemp -d /tmp/wt-inference-bench.XXXXXX)
trap bench_cleanup EXIT
start_bg wt-server "$build/server/wt-server" --listen 127.0.0.1:0 --no-auth \
  --model "synthetic:$model" --memory shared --export "$work/export.sock" --log-level error
export WT_TRANSFER_LIB_DIR=$PWD/$build/client:$PWD/$build/consumer PYTHONPATH=$PWD/python/src${PYTHONPATH:+:$PYTHONPATH}
echo "inference side on $(hostname), synthetic:$model, $ranks ranks, $(date -u +%F)"
python3 bench/inference_bench.py "$bg_addr" "$work/export.sock" "$build/client/wt-push" \
  "$model" "$ranks" "$rounds"
