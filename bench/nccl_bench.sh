#!/usr/bin/env bash
# nccl_bench.sh: the nccl backend's packed round between two processes on
# one GPU, against a plain ncclBroadcast of the same bytes and bucket size
# between two processes, in the same run with the same NCCL. Needs a CUDA
# GPU and, for two ranks on one GPU, NCCL 2.30 with
# NCCL_MULTI_RANK_GPU_ENABLE=1 (set here; NCCL_LIB_DIR puts that NCCL first
# on LD_LIBRARY_PATH, e.g. ../shared/gpu/nccl-2.30.7-sm90/lib).
#
#   wt:        wt-push --backend nccl --option packed=1 --device DEVICE
#              --rounds RUNS+1 of synthetic:MODEL (bench-8g: 750 tensors,
#              8.0 GiB; 1 GiB buckets, 2 buffers, vLLM's defaults) to a
#              wt-server --device DEVICE; the first round (the rendezvous is
#              at init) apart, the steady state's median round
#   reference: wt-bench-nccl-ref, the same bytes in 1 GiB buckets, two
#              buffers and streams, RUNS times
#   per tensor: unpacked, synthetic:small-10k (10,000 tensors of 64 bytes,
#              one broadcast each): the steady-state round over the count
#
# Settings: BUILD_DIR (build) or SERVER_BIN/PUSH_BIN/REF_BIN, RUNS (5),
# MODEL (bench-8g), DEVICE (cuda:0), NCCL_LIB_DIR. Target (issue #11): at
# least 0.9x the reference. Not a test; CI does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=nccl_bench
build=${BUILD_DIR:-build}
runs=${RUNS:-5}
model=${MODEL:-bench-8g}
device=${DEVICE:-cuda:0}
server_bin=${SERVER_BIN:-$build/server/wt-server}
push_bin=${PUSH_BIN:-$build/client/wt-push}
ref_bin=${REF_BIN:-$build/bench/wt-bench-nccl-ref}
if [ -n "${NCCL_LIB_DIR:-}" ]; then
  export LD_LIBRARY_PATH=$NCCL_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export NCCL_MULTI_RANK_GPU_ENABLE=${NCCL_MULTI_RANK_GPU_ENABLE:-1}
export NCCL_MAX_CTAS=${NCCL_MAX_CTAS:-4}
work=$(mktemp -d /tmp/wt-nccl-bench.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh
trap bench_cleanup EXIT

read -r first med best worst bytes tensors <<<"$(push_rounds nccl "$model" --option packed=1)"
ref=$("$ref_bin" "$bytes" $((1 << 30)) "$runs" "${device#cuda:}")
ref_med=$(sed -E 's/.*median ([0-9.]+).*/\1/' <<<"$ref")
wt_gbps=$(awk -v b="$bytes" -v s="$med" 'BEGIN { printf "%.2f", b / s / 1e9 }')
read -r sfirst smed _ _ _ stensors <<<"$(push_rounds nccl small-10k)"

echo "nccl (packed) on $device, two ranks, synthetic:$model ($tensors tensors, $bytes bytes), $runs steady rounds"
printf '%-40s %s\n' "wt first round" "$first s"
printf '%-40s %s\n' "wt steady state (median)" "$med s: $wt_gbps GB/s (best $best s, worst $worst s)"
printf '%-40s %s\n' "reference ncclBroadcast (median)" "$ref_med GB/s ($ref)"
printf '%-40s %s\n' "ratio wt/reference" "$(awk -v a="$wt_gbps" -v b="$ref_med" 'BEGIN { printf "%.2f", a / b }')"
printf '%-40s %s\n' "per tensor (small-10k, unpacked, median)" "$(awk -v s="$smed" -v n="$stensors" 'BEGIN { printf "%.2f us (%d tensors in %s s; first round %s s)", s * 1e6 / n, n, s, "'"$sfirst"'" }')"
