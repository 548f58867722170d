#!/usr/bin/env bash
# steady_bench.sh: a trainer that stays up. One wt-push process runs
# RUNS+1 rounds on one init (--rounds) against one wt-server; the first
# round (connecting, wire-up, first touch) is reported apart from the
# steady state (median, best, worst), beside the reference of the same
# transport measured in the same run:
#
#   grpc:    wt-bench-tcp-ref (bench/tcp_ref.c), a plain TCP stream of the
#            same bytes between two processes on loopback, in CHUNK-byte
#            writes into a buffer, over a connection made beforehand
#            (target: wt at least 0.8x); and Python grpcio client to
#            grpcio server, the same bytes and chunks through the same
#            PushWeights stubs, one channel for every run (target: wt at
#            least 1.5x)
#   ucx tcp: ucx_perftest -t tag_bw -s BUCKET, UCX_TLS=tcp (and wt's
#            UCX_TCP_TX_SEG_SIZE), as many messages as one round (target:
#            wt at least 0.95x); wt with its defaults (connected by worker
#            address, peer-failure handling on); ucx-tcp-nopeer: peer
#            errors off (as ucx_perftest)
#   ucx sm:  the same with UCX_TLS=sm (wt by worker address, peer errors
#            off, as UCX 1.13 selects no shared memory otherwise)
#   per tensor: synthetic:small-10k (10,000 tensors of 64 bytes), steady
#            median, for every backend: (round - bytes at the 1 GiB round's
#            rate) / 10,000 (target: at most 2 us)
#
# The bytes: the 1 GiB checkpoint bench/ucx_bench.sh writes (CKPT, default
# /dev/shm/wt-bench-1g.safetensors; page-cache memory the checkpoint source
# hands out as pointers), the server's --model and the trainer's
# --checkpoint. GB/s = 1e9 B/s.
#
# Blocks: this machine's speed drifts (a loopback stream moved 1.2 to 2.3
# GB/s within minutes on the 2-core VM), so one wt figure and one reference
# figure taken a minute apart can give any ratio. Each backend runs BLOCKS
# blocks of (wt: one trainer, RUNS+1 rounds; then its reference, RUNS runs)
# back to back; each block gives a ratio of the two medians, and the
# verdict is the median of the blocks' ratios (all of them printed).
#
# Settings: BUILD_DIR (build), RUNS (10), BLOCKS (3),
# CHUNK (1 MiB), BUCKET (64 MiB), BACKENDS ("grpc ucx-tcp ucx-sm"; also
# ucx-tcp-nopeer), PY (1: the Python reference, once per run),
# PERFTEST (ucx_perftest: the one of the UCX wt was built with). Not a
# test; CI does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}
runs=${RUNS:-10}
blocks=${BLOCKS:-3}
chunk=${CHUNK:-1048576}
bucket=${BUCKET:-67108864}
backends=${BACKENDS:-grpc ucx-tcp ucx-sm}
ckpt=${CKPT:-/dev/shm/wt-bench-1g.safetensors}
py=${PY:-1}
perftest_bin=${PERFTEST:-ucx_perftest}
bench=steady_bench
work=$(mktemp -d /tmp/wt-steady.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh
trap bench_cleanup EXIT
bench_build "$build" "" wt-server wt-push wt-bench-tcp-ref
server_bin=$build/server/wt-server
push_bin=$build/client/wt-push
if [ ! -f "$ckpt" ]; then
  echo "$bench: $ckpt is missing: run bench/ucx_bench.sh once (it writes it)" >&2
  exit 1
fi
total=$(ckpt_bytes "$ckpt")

# rounds NAME MODEL PUSH_SOURCE BACKEND [ENV...] -- [PUSH_ARGS...]: one
# wt-server (MODEL), one wt-push of RUNS+1 rounds; prints "first_s
# median_s best_s worst_s".
rounds() {
  local name=$1 model=$2 source=$3 backend=$4
  shift 4
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  start_bg "srv-$name" env ${envs[@]+"${envs[@]}"} "$server_bin" \
    --listen 127.0.0.1:0 --model "$model" --log-level warn
  local out line
  # shellcheck disable=SC2086
  out=$(env ${envs[@]+"${envs[@]}"} "$push_bin" --server "$bg_addr" $source \
    --backend "$backend" --rounds $((runs + 1)) --quiet "$@" 2>&1) || {
    echo "$bench: wt-push ($name): $out" >&2
    exit 1
  }
  stop_bg "$bg_pid"
  line=$(grep '^rounds:' <<<"$out")
  sed -E 's/.*first ([0-9.]+) s.*median ([0-9.]+) s.*best ([0-9.]+) s, worst ([0-9.]+) s.*/\1 \2 \3 \4/' <<<"$line"
}

gbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.2f", (s > 0 ? b / s / 1e9 : 0) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

# perftest UCX_TLS: ucx_perftest tag_bw median over RUNS, as GB/s.
perftest() {
  local i port spid mbs
  : >"$work/perf.gbps"
  for i in $(seq 1 "$runs"); do
    port=$((20000 + RANDOM % 20000))
    env UCX_TLS="$1" UCX_TCP_TX_SEG_SIZE=64k "$perftest_bin" -p "$port" >"$work/perf_srv.out" 2>&1 &
    spid=$!
    sleep 0.5
    env UCX_TLS="$1" UCX_TCP_TX_SEG_SIZE=64k "$perftest_bin" -p "$port" -t tag_bw \
      -s "$bucket" -n $(( (total + bucket - 1) / bucket )) -w 1 127.0.0.1 \
      >"$work/perf.out" 2>&1 || true
    wait "$spid" || true
    mbs=$(awk '/Final:/ {print $(NF-2)}' "$work/perf.out")
    [ -n "$mbs" ] && awk -v m="$mbs" 'BEGIN {printf "%.3f\n", m * 1048576 / 1e9}' >>"$work/perf.gbps"
  done
  sort -g "$work/perf.gbps" | awk '{a[NR] = $1} END {printf "%.2f", a[int((NR + 1) / 2)]}'
}

# med2: the median (bench/lib.sh's) of the numbers on stdin, to 2 places.
med2() { printf '%.2f' "$(median)"; }

echo "steady state: one wt-push, $((runs + 1)) rounds on one init; $total bytes" \
  "($ckpt); $blocks block(s) of wt then its reference; $(nproc) CPUs;" \
  "GB/s = 1e9 B/s"
printf '%-34s %9s %9s %9s %9s %9s\n' path first "median" best worst "GB/s"
declare -A rate
for b in $backends; do
  case $b in
    grpc) envs=(WT_NONE=1); backend=grpc; args=(--chunk-size "$chunk")
          target=0.8 ;;
    ucx-tcp) envs=(UCX_TLS=tcp); backend=ucx; args=(--bucket-size "$bucket")
             target=0.95 ;;
    ucx-tcp-nopeer) envs=(UCX_TLS=tcp WT_UCX_PEER_ERRORS=off); backend=ucx
            args=(--bucket-size "$bucket"); target=0.95 ;;
    ucx-sm) envs=(UCX_TLS=sm WT_UCX_CONNECT=address WT_UCX_PEER_ERRORS=off)
            backend=ucx; args=(--bucket-size "$bucket"); target=0.95 ;;
    *) echo "$bench: unknown backend '$b'" >&2; exit 2 ;;
  esac
  ratios=()
  rates=()
  for blk in $(seq 1 "$blocks"); do
    tag=""
    [ "$blocks" -gt 1 ] && tag=" #$blk"
    read -r first med best worst < <(rounds "$b" "$ckpt" "--checkpoint $ckpt" \
      "$backend" "${envs[@]}" -- "${args[@]}")
    r=$(gbps "$total" "$med")
    rates+=("$r")
    printf '%-34s %8ss %8ss %8ss %8ss %9s\n' "wt $b$tag" "$first" "$med" "$best" \
      "$worst" "$r"
    case $b in
      grpc)
        out=$("$build/bench/wt-bench-tcp-ref" "$total" "$chunk" "$runs")
        ref=$(sed -E 's/.*median ([0-9.]+).*/\1/' <<<"$out")
        name="  TCP stream, loopback (reference)" ;;
      ucx-*)
        ref=$(perftest "${envs[0]#UCX_TLS=}")
        name="  ucx_perftest tag_bw (reference)" ;;
    esac
    ratios+=("$(ratio "$r" "$ref")")
    printf '%-34s %49s %9s  ratio %s\n' "$name" "" "$ref" "${ratios[-1]}"
  done
  rate[$b]=$(printf '%s\n' "${rates[@]}" | med2)
  verdict=$(printf '%s\n' "${ratios[@]}" | med2)
  printf '%-34s %59s  median of %d: %s (target >= %s: %s)\n' "  $b ratio" \
    "per block: ${ratios[*]}" "$blocks" "$verdict" "$target" \
    "$(awk -v v="$verdict" -v t="$target" 'BEGIN { print (v >= t ? "met" : "NOT met") }')"
  if [ "$b" = grpc ] && [ "$py" = 1 ]; then
    start_bg py-server python3 "$root/bench/py_stream_server.py" \
      --proto-dir "$root/proto" --stubs-dir "$work/stubs-server" --size "$total"
    python3 "$root/bench/py_stream_client.py" --server "$bg_addr" \
      --proto-dir "$root/proto" --stubs-dir "$work/stubs-client" \
      --bytes "$total" --chunk-size "$chunk" --runs $((runs + 1)) >"$work/py.out"
    stop_bg "$bg_pid"
    pyg=$(sed -n 's/.*"gbps": \([0-9.e+-]*\).*/\1/p' "$work/py.out" | tail -n +2 | med2)
    printf '%-34s %49s %9s  ratio %s (wt median of blocks; target >= 1.5)\n' \
      "  Python grpcio (reference)" "" "$pyg" "$(ratio "${rate[$b]}" "$pyg")"
  fi
done
echo
echo "per tensor: synthetic:small-10k (10,000 x 64 B), steady median"
printf '%-34s %9s %9s %12s\n' path first "median" "us/tensor"
for b in $backends; do
  case $b in
    grpc) envs=(WT_NONE=1); backend=grpc ;;
    ucx-tcp) envs=(UCX_TLS=tcp); backend=ucx ;;
    ucx-tcp-nopeer) envs=(UCX_TLS=tcp WT_UCX_PEER_ERRORS=off); backend=ucx ;;
    ucx-sm) envs=(UCX_TLS=sm WT_UCX_CONNECT=address WT_UCX_PEER_ERRORS=off); backend=ucx ;;
  esac
  read -r first med _ _ < <(rounds "small-$b" synthetic:small-10k \
    "--synthetic small-10k" "$backend" "${envs[@]}" --)
  printf '%-34s %8ss %8ss %12s\n' "wt $b" "$first" "$med" \
    "$(awk -v s="$med" -v r="${rate[$b]:-0}" 'BEGIN {
        t = s - (r > 0 ? 640000 / (r * 1e9) : 0); printf "%.2f", t * 1e6 / 10000 }')"
done
