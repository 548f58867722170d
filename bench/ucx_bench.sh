#!/usr/bin/env bash
# ucx_bench.sh: the ucx backend against ucx_perftest -t tag_bw, like with
# like, on one machine, in one run.
#
# Source of the bytes: a 1 GiB safetensors checkpoint (CKPT, default
# /dev/shm/wt-bench-1g.safetensors, written once with numpy if missing) that
# is both wt-server's --model and wt-push's --checkpoint, so the trainer
# sends page-cache memory (the checkpoint source hands out pointers into its
# mmap) and nothing is generated while measuring. Its tensors are 8 and
# 32 MiB, so a BUCKET of 64 MiB (the default) packs into buckets of exactly
# BUCKET bytes: the same message size as ucx_perftest's.
#
# For each transport mode in MODES (default "tcp sm"):
#   tcp: UCX_TLS=tcp for ucx_perftest and for both wt processes; wt with
#        the backend's defaults (by worker address, peer-failure handling
#        on).
#   tcp-address: as tcp, but wt connects like ucx_perftest does: by worker
#        address, without peer-failure handling (WT_UCX_CONNECT=address,
#        WT_UCX_PEER_ERRORS=off); not in the default MODES.
#   sm:  UCX_TLS=sm (shared memory + CMA) for both; wt connects by worker
#        address without peer-failure handling (WT_UCX_CONNECT=address,
#        WT_UCX_PEER_ERRORS=off: UCX 1.13 selects no shared memory otherwise).
#   reference: ucx_perftest -t tag_bw -s BUCKET -n (1 GiB / BUCKET) between
#        two processes on 127.0.0.1, with the UCX settings wt runs with (the
#        same UCX_TLS, and UCX_TCP_TX_SEG_SIZE=64k, wt's default for it).
#   wt: wt-push --backend ucx --checkpoint CKPT to one wt-server with W
#        workers (W in WORKERS, default "1 2"); the figure is wt-push's own:
#        bytes / time of the data phase (wt_sync_client_update), per worker.
#   fan-out (2 workers): FANOUTS (default "parallel sequential chain"), the
#        trainer's WT_UCX_FANOUT (chain: trainer -> w1 -> w2).
# Plus the grpc backend with one worker on the same checkpoint (GRPC=0 skips).
#
# Each configuration runs WARMUP (default 1) + RUNS (default 3) times; the
# table shows the best and the median run. GB/s = 1e9 bytes/s. Peak RSS of
# wt-server (VmHWM) is shown against the model size. Not a test; CI does not
# run it. Environment: BUILD_DIR (default build), CKPT, BUCKET, MODES,
# WORKERS, FANOUTS, RUNS, WARMUP, GRPC, AUTH ("" none, "token": bearer
# tokens on the control plane, "tls": TLS and tokens; the data plane's
# keyed tags are always on).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
runs=${RUNS:-3}
warmup=${WARMUP:-1}
ckpt=${CKPT:-/dev/shm/wt-bench-1g.safetensors}
bucket=${BUCKET:-67108864}
modes=${MODES:-tcp sm}
workers_list=${WORKERS:-1 2}
fanouts=${FANOUTS:-parallel sequential chain}
grpc=${GRPC:-1}

command -v ucx_perftest >/dev/null ||
  { echo "ucx_bench: ucx_perftest not found (Debian: ucx-utils)" >&2; exit 1; }
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j 2 --target wt-server wt-push >/dev/null

if [ ! -f "$ckpt" ]; then
  echo "ucx_bench: writing $ckpt (1 GiB, once)" >&2
  python3 bench/make_ckpt.py 1g "$ckpt"
fi
bench=ucx_bench
. bench/lib.sh
total=$(ckpt_bytes "$ckpt")
iters=$(( (total + bucket - 1) / bucket ))
work=$(mktemp -d)
pids=()
bench_auth "${AUTH:-}" "$work/auth"
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# best and median of a column of numbers
stats() { sort -g | awk '{a[NR] = $1} END {printf "%.2f %.2f\n", a[NR], a[int((NR + 1) / 2)]}'; }

# wt NAME W BACKEND [ENV...]: one wt-server with W workers, WARMUP + RUNS
# wt-push rounds; prints "best median peak_rss_mib".
wt() {
  local name=$1 w=$2 backend=$3
  shift 3
  env "$@" "$build/server/wt-server" --listen 127.0.0.1:0 --model "$ckpt" \
    --workers "$w" ${auth_server[@]+"${auth_server[@]}"} \
    >"$work/$name.srv" 2>"$work/$name.srv.err" &
  local pid=$! addr="" i out gbps
  pids+=("$pid")
  for _ in $(seq 1 1200); do
    addr=$(sed -n 's/.* listening on //p' "$work/$name.srv" 2>/dev/null | head -n1 || true)
    [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { echo "ucx_bench: wt-server did not serve:" >&2; cat "$work/$name.srv.err" >&2; exit 1; }
  : >"$work/$name.gbps"
  for i in $(seq 1 $((warmup + runs))); do
    out=$(env "$@" "$build/client/wt-push" --server "$addr" --checkpoint "$ckpt" \
      --backend "$backend" --bucket-size "$bucket" --version "b$i" --quiet \
      ${auth_client[@]+"${auth_client[@]}"} 2>&1)
    gbps=$(grep -oE '[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)? GB/s' <<<"$out" | head -n1 | cut -d' ' -f1)
    [ -n "$gbps" ] || { echo "ucx_bench: wt-push said: $out" >&2; exit 1; }
    [ "$i" -gt "$warmup" ] && echo "$gbps" >>"$work/$name.gbps"
  done
  local rss
  rss=$(awk '/VmHWM/ {printf "%d", $2 / 1024}' "/proc/$pid/status")
  kill -TERM "$pid"
  wait "$pid" || true
  echo "$(stats <"$work/$name.gbps") $rss"
}

# perftest ENV...: ucx_perftest tag_bw, as many BUCKET messages as one round.
perftest() {
  : >"$work/perf.gbps"
  local i port spid mbs
  for i in $(seq 1 $((warmup + runs))); do
    port=$((20000 + RANDOM % 20000))
    env "$@" ucx_perftest -p "$port" >"$work/perf_srv.out" 2>&1 &
    spid=$!
    sleep 0.5
    env "$@" ucx_perftest -p "$port" -t tag_bw -s "$bucket" -n "$iters" -w 1 \
      127.0.0.1 >"$work/perf.out" 2>&1 || true
    wait "$spid" || true
    # "Final: iters latency(typ avg) bw(typ avg overall MB/s) rate...";
    # MB = 2^20.
    mbs=$(awk '/Final:/ {print $(NF-2)}' "$work/perf.out")
    [ -n "$mbs" ] || { echo "ucx_bench: ucx_perftest said:"; cat "$work/perf.out"; exit 1; } >&2
    [ "$i" -gt "$warmup" ] && awk -v m="$mbs" 'BEGIN {printf "%.3f\n", m * 1048576 / 1e9}' >>"$work/perf.gbps"
  done
  stats <"$work/perf.gbps"
}

mib=$((total / 1048576))
echo "checkpoint $ckpt: $total bytes; bucket $bucket bytes ($iters buckets)"
echo "runs: best and median of $runs after $warmup warm-up; GB/s = 1e9 B/s"
printf '%-44s %8s %8s %7s %12s\n' configuration best median ratio "server RSS"
for mode in $modes; do
  case $mode in
    tcp) env_wt=(UCX_TLS=tcp) ;;
    tcp-address)
      env_wt=(UCX_TLS=tcp WT_UCX_CONNECT=address WT_UCX_PEER_ERRORS=off) ;;
    sm) env_wt=(UCX_TLS=sm WT_UCX_CONNECT=address WT_UCX_PEER_ERRORS=off) ;;
    *) echo "ucx_bench: unknown mode '$mode' (tcp, tcp-address, sm)" >&2; exit 2 ;;
  esac
  # wt sets UCX_TCP_TX_SEG_SIZE=64k unless told otherwise
  # (backends/ucx/ucx_shared.c): the reference gets the same.
  read -r pbest pmed < <(perftest "${env_wt[0]}" "UCX_TCP_TX_SEG_SIZE=${UCX_TCP_TX_SEG_SIZE:-64k}")
  printf '%-44s %8s %8s %7s %12s\n' "ucx_perftest tag_bw UCX_TLS=${env_wt[0]#UCX_TLS=}" "$pbest" "$pmed" "1.00" "-"
  for w in $workers_list; do
    if [ "$w" -eq 1 ]; then
      fl=parallel
    else
      fl=$fanouts
    fi
    for f in $fl; do
      read -r best med rss < <(wt "$mode-$w-$f" "$w" ucx "${env_wt[@]}" WT_UCX_FANOUT="$f")
      label="wt ucx $mode, $w worker(s)"
      [ "$w" -gt 1 ] && label="$label, $f"
      printf '%-44s %8s %8s %7s %12s\n' "$label" "$best" "$med" \
        "$(awk -v a="$best" -v b="$pbest" 'BEGIN {printf "%.2f", a / b}')" \
        "$rss MiB/$mib"
    done
  done
done
if [ "$grpc" = 1 ]; then
  read -r best med rss < <(wt grpc-1 1 grpc WT_NONE=1)
  printf '%-44s %8s %8s %7s %12s\n' "wt grpc, 1 worker" "$best" "$med" "-" "$rss MiB/$mib"
fi
echo "ratio: wt best / ucx_perftest best of the same UCX_TLS (target >= 0.9" \
  "for 1 worker); wt GB/s with W workers counts the bytes of one copy"
