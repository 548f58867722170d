#!/usr/bin/env bash
# python_bench.sh: a trainer in Python (wt_transfer, docs/python.md) against
# wt-push, the same bytes in the same run, a trainer that stays up:
#
#   1 GiB:      wt-server --model CKPT (bench/make_ckpt.py 1g, in /dev/shm);
#               per block, wt-push --backend ucx --checkpoint CKPT --rounds
#               RUNS+1 (the C reference: checkpoint pointers), then
#               bench/py_push.py with the checkpoint's tensors as numpy views
#               of its mapping (the same pages), RUNS+1 rounds on one engine;
#               the first round apart, the steady medians' ratio
#               (target: Python at least 0.95x)
#   per tensor: the same with CKPT10K (10,000 float32 tensors of 64 bytes):
#               steady round / 10,000, Python minus C (target: at most 5 us)
#
# Blocks (BLOCKS, 3) interleave the two, as this VM's speed drifts; the
# verdict is the median of the blocks' ratios. Settings: BUILD_DIR (build),
# RUNS (5), BLOCKS (3), CKPT, CKPT10K, TRANSPORTS (tcp). The package is
# loaded from the build tree (WT_TRANSFER_LIB_DIR). Not a test; CI does not
# run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=python_bench
build=${BUILD_DIR:-build}
runs=${RUNS:-5}
blocks=${BLOCKS:-3}
ckpt=${CKPT:-/dev/shm/wt-bench-1g.safetensors}
ckpt10k=${CKPT10K:-/dev/shm/wt-bench-10k.safetensors}
transports=${TRANSPORTS:-tcp}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_build "$build" "" wt-server wt-push wt_client
[ -f "$ckpt" ] || python3 bench/make_ckpt.py 1g "$ckpt"
[ -f "$ckpt10k" ] || python3 bench/make_ckpt.py 10k "$ckpt10k"
work=$(mktemp -d /tmp/wt-python-bench.XXXXXX)
trap bench_cleanup EXIT
export WT_TRANSFER_LIB_DIR=$PWD/$build/client:$PWD/$build/consumer PYTHONPATH=$PWD/python/src${PYTHONPATH:+:$PYTHONPATH}

c_rounds() { # ADDR CKPT -> "first median"
  local out
  out=$("$build/client/wt-push" --server "$1" --backend ucx --option "transports=$transports" \
    --checkpoint "$2" --rounds $((runs + 1)) --data-timeout 120 --quiet 2>&1) ||
    { echo "$bench: wt-push: $out" >&2; exit 1; }
  sed -nE 's/^rounds:.*first ([0-9.]+) s.*median ([0-9.]+) s.*/\1 \2/p' <<<"$out"
}
py_rounds() { # ADDR CKPT -> "first median"
  local out
  out=$(python3 bench/py_push.py "$1" "$2" $((runs + 1)) ucx "transports=$transports" 2>&1) ||
    { echo "$bench: py_push: $out" >&2; exit 1; }
  sed -nE 's/^first ([0-9.]+) median ([0-9.]+).*/\1 \2/p' <<<"$out"
}

measure() { # NAME CKPT: blocks of (C, Python) -> lines "block c_first c_med py_first py_med"
  start_bg "srv-$1" "$build/server/wt-server" --listen 127.0.0.1:0 --no-auth \
    --model "$2" --log-level error
  local addr=$bg_addr b
  for b in $(seq 1 "$blocks"); do
    echo "$b $(c_rounds "$addr" "$2") $(py_rounds "$addr" "$2")"
  done >"$work/$1.txt"
  stop_bg "$bg_pid"
}

measure 1g "$ckpt"
measure 10k "$ckpt10k"
bytes=$(ckpt_bytes "$ckpt")
echo "python vs wt-push over ucx ($transports) on $(hostname), $(date -u +%F): $runs steady rounds per block"
printf '| %-5s | %-12s | %-12s | %-12s | %-12s | %-22s |\n' block "C first" "C median" "Py first" "Py median" "1 GiB: Py/C rate"
printf '| --- | --- | --- | --- | --- | --- |\n'
while read -r b cf cm pf pm; do
  printf '| %-5s | %-12s | %-12s | %-12s | %-12s | %-22s |\n' "$b" "$cf s" "$cm s" "$pf s" "$pm s" \
    "$(awk -v c="$cm" -v p="$pm" -v n="$bytes" 'BEGIN { printf "%.2fx (%.2f vs %.2f GB/s)", c / p, n / p / 1e9, n / c / 1e9 }')"
done <"$work/1g.txt"
echo "verdict (median of blocks): $(awk '{print $3 / $5}' "$work/1g.txt" | median | awk '{printf "%.2fx", $1}') (target >= 0.95x)"
printf '| %-5s | %-16s | %-16s | %-16s |\n' block "C per tensor" "Py per tensor" "Py - C"
printf '| --- | --- | --- | --- |\n'
while read -r b cf cm pf pm; do
  awk -v b="$b" -v c="$cm" -v p="$pm" 'BEGIN { printf "| %-5s | %-16s | %-16s | %-16s |\n", b, sprintf("%.2f us", c / 1e4 * 1e6), sprintf("%.2f us", p / 1e4 * 1e6), sprintf("%.2f us", (p - c) / 1e4 * 1e6) }'
done <"$work/10k.txt"
echo "verdict (median of blocks): $(awk '{print ($5 - $3) / 1e4 * 1e6}' "$work/10k.txt" | median | awk '{printf "%.2f us", $1}') above C (target <= 5 us)"
