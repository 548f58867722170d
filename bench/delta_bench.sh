#!/usr/bin/env bash
# delta_bench.sh: delta rounds (docs/delta.md) against full rounds in the
# same run, over the grpc or the ucx backend (BACKEND), on rate-limited
# links and on loopback.
#
# For each link (RATES: tc tbf on a veth pair between two network
# namespaces made here, wtdl-t and wtdl-s, addresses 10.78.0.0/24, never
# any other network; "loopback": both on 127.0.0.1 in this namespace) and
# each fraction of elements a step changes (FRACTIONS; wt-push --change,
# the optimizer-step generator of client/tools/update_step.c; 1 is random
# noise), one wt-push with --rounds ROUNDS+1 on one init per mode: delta
# off (the reference), on, and auto. Reported: the steady-state median
# round of each, the ratios against off, and the bytes the delta push put
# on the wire against the model's (the last round's), with the encode rate
# on the trainer's one thread; then the codec alone, encode and decode per
# core (bench/delta_codec.c). Targets (issue #25): at 2 percent on
# 1 Gbit/s at least 8x fewer bytes and 5x faster; auto within 1.1x of off
# at 100 percent and on loopback.
#
# Needs root, ip netns and tc for the links (loopback alone needs
# neither). Settings: BUILD_DIR (build), MODEL (synthetic:llama-256m; the
# 1 GiB model is synthetic:bench-1g), RATES ("1gbit 10gbit loopback"),
# FRACTIONS ("0.005 0.02 0.1 0.5 1"), ROUNDS (3), BACKEND (grpc; ucx runs
# over TCP, UCX_TLS=tcp). Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
model=${MODEL:-synthetic:llama-256m}
rates=${RATES:-1gbit 10gbit loopback}
fractions=${FRACTIONS:-0.005 0.02 0.1 0.5 1}
rounds=${ROUNDS:-3}
backend=${BACKEND:-grpc}
bench=delta_bench
work=$(mktemp -d /tmp/wt-delta.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh
server_bin=$build/server/wt-server
push_bin=$build/client/wt-push

teardown() {
  bench_cleanup
  ip netns del wtdl-t >/dev/null 2>&1 || true
  ip netns del wtdl-s >/dev/null 2>&1 || true
}
trap teardown EXIT

# link RATE: the server's address for RATE, the namespaces made for it.
link() {
  local rate=$1
  teardown
  work=$(mktemp -d /tmp/wt-delta.XXXXXX)
  pids=()
  if [ "$rate" = loopback ]; then
    start_bg srv env UCX_TLS=tcp "$server_bin" --listen 127.0.0.1:0 --no-auth \
      --model "$model" --log-level warn
    in_t=()
    return
  fi
  [ "$(id -u)" = 0 ] || { echo "$bench: $rate needs root (network namespaces)" >&2; exit 1; }
  ip netns add wtdl-t
  ip netns add wtdl-s
  ip link add wtdl-a type veth peer name wtdl-b
  ip link set wtdl-a netns wtdl-t
  ip link set wtdl-b netns wtdl-s
  ip -n wtdl-t addr add 10.78.0.1/24 dev wtdl-a
  ip -n wtdl-s addr add 10.78.0.2/24 dev wtdl-b
  for n in t s; do
    ip -n "wtdl-$n" link set lo up
    ip -n "wtdl-$n" link set "wtdl-$([ $n = t ] && echo a || echo b)" up
    ip netns exec "wtdl-$n" tc qdisc add dev "wtdl-$([ $n = t ] && echo a || echo b)" \
      root tbf rate "$rate" burst 256kb latency 100ms
  done
  start_bg srv ip netns exec wtdl-s env UCX_TLS=tcp "$server_bin" \
    --listen 10.78.0.2:0 \
    --insecure --no-auth --model "$model" --log-level warn
  in_t=(ip netns exec wtdl-t)
}

# push FRACTION MODE: "median wire raw encode_s" of one wt-push run.
push() {
  local f=$1 mode=$2 out
  out=$("${in_t[@]}" env UCX_TLS=tcp "$push_bin" --server "$bg_addr" \
    --backend "$backend" --rounds $((rounds + 1)) \
    --change "$f" --delta="$mode" --data-timeout 300 2>&1) || {
    echo "$bench: wt-push (--change $f --delta=$mode): $out" >&2
    exit 1
  }
  local med wire raw enc
  med=$(sed -nE 's/^rounds:.*median ([0-9.]+) s.*/\1/p' <<<"$out")
  # The last round's delta line: servers, wire bytes, model bytes, encode s.
  read -r wire raw enc < <(sed -nE 's/^  delta: ([0-9]+) server\(s\) took ([0-9]+) bytes .* than ([0-9]+)\), [0-9]+ full; encode ([0-9.]+) s/\1 \2 \3 \4/p' <<<"$out" |
    tail -n1 | awk '{print ($1 > 0 ? $2 : 0), $3, $4}')
  echo "$med ${wire:-0} ${raw:-0} ${enc:-0}"
}

echo "delta rounds ($backend) against full rounds in the same run; $model;" \
  "steady median of $rounds rounds; $(nproc) CPUs; $(date -u +%Y-%m-%d)"
printf '%-9s %-6s %9s %9s %9s %8s %8s %12s %10s\n' link changed off_s on_s auto_s \
  on/off auto/off wire_ratio encode_MB/s
for rate in $rates; do
  link "$rate"
  for f in $fractions; do
    read -r t_off _ _ _ < <(push "$f" off)
    read -r t_on wire raw enc < <(push "$f" on)
    read -r t_auto _ _ _ < <(push "$f" auto)
    awk -v l="$rate" -v f="$f" -v a="$t_off" -v b="$t_on" -v c="$t_auto" \
        -v w="$wire" -v r="$raw" -v e="$enc" 'BEGIN {
      printf "%-9s %-6s %9.3f %9.3f %9.3f %8.2f %8.2f %11.1fx %10.0f\n",
        l, f * 100 "%", a, b, c, b / a, c / a, (w > 0 ? r / w : 0),
        (e > 0 ? r / e / 1e6 : 0) }'
  done
done

# The codec's rate per core apart from any link: encode (the trainer's
# work per byte) and decode (a worker's), against memcpy in the same run.
echo
"$build/bench/wt-bench-delta-codec" 256 $fractions
