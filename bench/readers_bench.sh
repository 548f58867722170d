#!/usr/bin/env bash
# readers_bench.sh: an inference fleet reading while the trainer pushes.
#
#   wt-push --synthetic MODEL -> wt-server --model synthetic:MODEL, with and
#   without READERS concurrent readers (wt-bench-readers: each on its own
#   connection, GetWeightVersion then a ChecksumWeights of one small
#   parameter, back to back, for as long as the push runs)
#
# One server stays up (steady state); WARMUP pushes first (not counted:
# first-round set-up); then RUNS pairs, each an unloaded push (the
# reference, in the same run) then a loaded one. The table shows the push's
# median GB/s each way and the slowdown (unloaded / loaded), and the
# readers' calls, errors and latency (p50, p99, max per call) over all
# loaded pushes.
#
# Environment: BUILD_DIR (default build) or SERVER_BIN/PUSH_BIN/READERS_BIN;
# RUNS (default 3), WARMUP (default 1), MODEL (default bench-1g), READERS
# (default 100), SERVER_ARGS (extra wt-server options). Not a test: CI does
# not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}
runs=${RUNS:-3}
warmup=${WARMUP:-1}
model=${MODEL:-bench-1g}
nreaders=${READERS:-100}
bench=readers_bench
. "$root/bench/lib.sh"
if [ -z "${SERVER_BIN:-}" ] || [ -z "${PUSH_BIN:-}" ] || [ -z "${READERS_BIN:-}" ]; then
  bench_build "$build" "" wt-server wt-push wt-bench-readers
fi
SERVER_BIN=${SERVER_BIN:-$build/server/wt-server}
PUSH_BIN=${PUSH_BIN:-$build/client/wt-push}
READERS_BIN=${READERS_BIN:-$build/bench/wt-bench-readers}

work=$(mktemp -d)
trap bench_cleanup EXIT

# shellcheck disable=SC2086
start_bg wt-server "$SERVER_BIN" --listen 127.0.0.1:0 --model "synthetic:$model" \
  --log-level error ${SERVER_ARGS:-}
addr=$bg_addr

push_once() { # TAG: one push; its GB/s into $push_gbps
  local out=$work/push-$1.out
  "$PUSH_BIN" --server "$addr" --synthetic "$model" --backend grpc \
    --version "readers-$1" >"$out" 2>&1 || {
    echo "readers_bench: wt-push ($1) failed:" >&2
    cat "$out" >&2
    exit 1
  }
  push_summary "$out"
}

for i in $(seq 1 "$warmup"); do push_once "w$i"; done
: >"$work/readers.txt"
for i in $(seq 1 "$runs"); do
  push_once "alone-$i"
  echo "$push_gbps" >>"$work/alone.gbps"
  "$READERS_BIN" --server "$addr" --readers "$nreaders" >"$work/readers-$i.out" 2>&1 &
  rpid=$!
  pids+=("$rpid")
  for _ in $(seq 1 100); do
    grep -q "readers started" "$work/readers-$i.out" && break
    sleep 0.1
  done
  sleep 0.5 # every reader connected and calling
  push_once "loaded-$i"
  echo "$push_gbps" >>"$work/loaded.gbps"
  kill -TERM "$rpid"
  wait "$rpid"
  grep -E '^(readers [0-9]|error )' "$work/readers-$i.out" | tee -a "$work/readers.txt" >/dev/null
done

alone=$(median <"$work/alone.gbps")
loaded=$(median <"$work/loaded.gbps")
echo
echo "$nreaders readers during a grpc push of synthetic:$model ($push_bytes bytes)" \
  "over loopback; $runs pairs after $warmup warm-up; $(nproc) CPUs"
printf '%-36s %10s\n' "push" "median GB/s"
printf '%-36s %10.2f\n' "unloaded (reference)" "$alone"
printf '%-36s %10.2f\n' "with $nreaders readers" "$loaded"
awk -v a="$alone" -v l="$loaded" 'BEGIN { printf "%-36s %9.2fx\n", "slowdown (unloaded/loaded)", a / l }'
echo
printf '%-8s %10s %8s %10s %10s %10s\n' "run" "calls" "errors" "p50 ms" "p99 ms" "max ms"
awk '/^readers /{ n++; printf "%-8s %10d %8d %10.2f %10.2f %10.2f\n", n, $4, $6, $8, $10, $12;
       calls += $4; errs += $6 }
     END { printf "%-8s %10d %8d\n", "all", calls, errs }' "$work/readers.txt"
grep '^error ' "$work/readers.txt" | sort | uniq -c | head -n 5 || true
