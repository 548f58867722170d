#!/usr/bin/env bash
# ucx_bench.sh: the ucx backend against ucx_perftest -t tag_bw, on one machine.
#
#   wt:        wt-push --backend ucx --synthetic MODEL -> wt-server --model
#              synthetic:MODEL --workers W, for W in WORKERS (default "1 2");
#              the figure is wt-push's own summary (the data phase of a round:
#              UpdateWeights pending on every worker while the buckets go out)
#   reference: ucx_perftest -t tag_bw with messages of BUCKET bytes, as many
#              as a MODEL round moves, between two processes on loopback
#
# Both with the same UCX_TLS (default: UCX's choice; set UCX_TLS=tcp or use
# CONNECT=address PEER_ERRORS=off for shared memory, see ucx_trainer.c).
# Each configuration runs WARMUP (default 1) + RUNS (default 3) times; the
# table shows the best run, and for one worker the ratio wt / ucx_perftest
# (target >= 0.9). GB/s = 1e9 bytes per second. Not a test: CI does not run
# it. Environment: BUILD_DIR (default build), MODEL (default bench-1g),
# BUCKET (default 67108864), TOTAL (bytes of one MODEL round, default
# 1073741824 for bench-1g), WORKERS, RUNS, WARMUP.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
runs=${RUNS:-3}
warmup=${WARMUP:-1}
model=${MODEL:-bench-1g}
bucket=${BUCKET:-67108864}
workers_list=${WORKERS:-1 2}

command -v ucx_perftest >/dev/null ||
  { echo "ucx_bench: ucx_perftest not found (Debian: ucx-utils)" >&2; exit 1; }
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j "$(nproc)" --target wt-server wt-push >/dev/null

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

best() { sort -g | tail -n1; }

declare -A wt_best
for w in $workers_list; do
  "$build/server/wt-server" --listen 127.0.0.1:0 --model "synthetic:$model" \
    --workers "$w" >"$work/srv$w.out" 2>"$work/srv$w.err" &
  pid=$!
  pids+=("$pid")
  addr=""
  for _ in $(seq 1 1200); do
    addr=$(sed -n 's/.* listening on //p' "$work/srv$w.out" | head -n1)
    [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { echo "ucx_bench: wt-server did not serve" >&2; exit 1; }
  : >"$work/wt$w.gbps"
  for i in $(seq 1 $((warmup + runs))); do
    out=$("$build/client/wt-push" --server "$addr" --synthetic "$model" \
      --backend ucx --bucket-size "$bucket" --version "b$i" --quiet 2>&1)
    gbps=$(grep -oE '[0-9]+(\.[0-9]+)? GB/s' <<<"$out" | head -n1 | cut -d' ' -f1)
    [ -n "$gbps" ] || { echo "ucx_bench: wt-push said: $out" >&2; exit 1; }
    [ "$i" -gt "$warmup" ] && echo "$gbps" >>"$work/wt$w.gbps"
  done
  wt_best[$w]=$(best <"$work/wt$w.gbps")
  kill -TERM "$pid"
  wait "$pid" || true
done

# ucx_perftest: as many BUCKET-sized messages as one round of MODEL.
total=${TOTAL:-1073741824} # bytes of one MODEL round (bench-1g: 1 GiB)
iters=$(( (total + bucket - 1) / bucket ))
: >"$work/perf.gbps"
for i in $(seq 1 $((warmup + runs))); do
  port=$((20000 + RANDOM % 20000))
  ucx_perftest -p "$port" >"$work/perf_srv.out" 2>&1 &
  spid=$!
  sleep 0.5
  ucx_perftest -p "$port" -t tag_bw -s "$bucket" -n "$iters" -w 1 127.0.0.1 \
    >"$work/perf.out" 2>&1 || true
  wait "$spid" || true
  # Final line: "Final: ... bandwidth (MB/s) average overall ..."; MB = 2^20.
  mbs=$(awk '/Final:/ {print $(NF-2)}' "$work/perf.out")
  [ -n "$mbs" ] || { echo "ucx_bench: ucx_perftest said:"; cat "$work/perf.out"; exit 1; } >&2
  [ "$i" -gt "$warmup" ] && awk -v m="$mbs" 'BEGIN {printf "%.3f\n", m * 1048576 / 1e9}' >>"$work/perf.gbps"
done
perf=$(best <"$work/perf.gbps")

printf '%-28s %10s\n' "configuration" "GB/s"
printf '%-28s %10s\n' "ucx_perftest -t tag_bw" "$perf"
for w in $workers_list; do
  printf '%-28s %10s\n' "wt ucx, $w worker(s)" "${wt_best[$w]}"
done
first=${workers_list%% *}
awk -v a="${wt_best[$first]}" -v b="$perf" -v w="$first" \
  'BEGIN {printf "ratio wt (%s worker) / ucx_perftest: %.2f (target >= 0.9)\n", w, a / b}'
