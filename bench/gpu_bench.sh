#!/usr/bin/env bash
# gpu_bench.sh: a grpc round into GPU memory against the same round into
# host memory, in one run on one machine.
#
#   device: wt-push --synthetic MODEL -> wt-server --device cuda:0
#           (the store in device memory; each chunk copied in through the
#           worker's pinned bounce buffer)
#   host:   wt-push --synthetic MODEL -> wt-server (cpu, host memory): the
#           reference, measured in the same run
#
# One server of each kind stays up (steady state); the first WARMUP pushes
# to each are not counted (first-round set-up: buffers faulted in, pools
# filled); then RUNS pushes alternate device, host, device, host, ... The
# table shows each one's best and median GB/s (wt-push's own data-phase
# figure) and the ratio device/host of the medians, plus each server's
# start time (the model loaded, onto the GPU for device).
#
# Environment: BUILD_DIR (default build-gpu) or SERVER_BIN and PUSH_BIN;
# RUNS (default 5), WARMUP (default 1), MODEL (default bench-1g), CHUNK
# (default 1048576), DEVICE (default cuda:0). Needs a CUDA device.
# Not a test: CI does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
runs=${RUNS:-5}
warmup=${WARMUP:-1}
model=${MODEL:-bench-1g}
chunk=${CHUNK:-1048576}
device=${DEVICE:-cuda:0}
bench=gpu_bench
. "$root/bench/lib.sh"
if [ -z "${SERVER_BIN:-}" ] || [ -z "${PUSH_BIN:-}" ]; then
  build=${BUILD_DIR:-build-gpu}
  bench_build "$build" -DWT_WITH_CUDA=ON wt-server wt-push wt_cuda
  SERVER_BIN=$build/server/wt-server
  PUSH_BIN=$build/client/wt-push
fi

work=$(mktemp -d)
trap bench_cleanup EXIT

declare -A addr start_ms
for kind in device host; do
  args=(--listen 127.0.0.1:0 --model "synthetic:$model" --log-level warn)
  [ "$kind" = device ] && args+=(--device "$device")
  t0=$(date +%s%N)
  start_bg "wt-server-$kind" "$SERVER_BIN" "${args[@]}"
  start_ms[$kind]=$(( ($(date +%s%N) - t0) / 1000000 ))
  addr[$kind]=$bg_addr
done

push_once() { # KIND N: one push to KIND's server; its GB/s into $push_gbps
  local out=$work/push-$1-$2.out
  "$PUSH_BIN" --server "${addr[$1]}" --synthetic "$model" --backend grpc \
    --chunk-size "$chunk" --version "bench-$1-$2" >"$out" 2>&1 || {
    echo "gpu_bench: wt-push to the $1 server failed:" >&2
    cat "$out" >&2
    exit 1
  }
  push_summary "$out"
}

for kind in device host; do
  for i in $(seq 1 "$warmup"); do push_once "$kind" "w$i"; done
done
for i in $(seq 1 "$runs"); do
  for kind in device host; do
    push_once "$kind" "$i"
    echo "$push_gbps" >>"$work/$kind.gbps"
  done
done
bytes=$push_bytes

echo
echo "grpc round of synthetic:$model ($bytes bytes) in ${chunk}-byte chunks" \
  "over loopback; $runs alternating runs after $warmup warm-up each;" \
  "$(nproc) CPUs; $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)"
printf '%-40s %10s %10s %12s\n' "wt-server" "best GB/s" "median" "start (ms)"
for kind in device host; do
  label="--device $device (device memory)"
  [ "$kind" = host ] && label="cpu (host memory, reference)"
  printf '%-40s %10.2f %10.2f %12s\n' "$label" "$(best <"$work/$kind.gbps")" \
    "$(median <"$work/$kind.gbps")" "${start_ms[$kind]}"
done
awk -v d="$(median <"$work/device.gbps")" -v h="$(median <"$work/host.gbps")" \
  'BEGIN { printf "ratio device/host %.2fx\n", d / h }'
