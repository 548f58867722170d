#!/usr/bin/env bash
# fanout_bench.sh: one trainer and N servers, each host on its own
# rate-limited link, for the ucx backend's three fan-outs (WT_UCX_FANOUT):
#
#   parallel:   every bucket to every worker at once (the trainer's link
#               carries N copies)
#   sequential: one worker after the other (N copies, one at a time)
#   chain:      the trainer sends to the first worker, which forwards every
#               bucket to the next as it lands, and so on (the trainer's
#               link carries one copy)
#
# Hosts are network namespaces made here (wtfo-t, wtfo-s1..wtfo-sN), each
# with one veth to a bridge in wtfo-sw, addresses 10.77.0.0/24 (never any
# other network); each host's link is limited to RATE in both directions
# (tc tbf on both ends of its veth). Each server holds MODEL with one
# worker; the trainer is one wt-push with --rounds ROUNDS+1 (one init), and
# the figure is the steady-state median round. Prints the table, an ASCII
# chart of round time against N, and the fan-out each N should default to.
# The chain's promise: its round at N = 8 within 1.25x of N = 1.
#
# Needs root, ip netns, a bridge and tc. Settings: BUILD_DIR (build), NS
# ("1 2 4 8"), MODES ("parallel sequential chain"), RATE (1gbit), MODEL
# (synthetic:llama-256m), ROUNDS (2), MTU (1500), BUCKET (4 MiB: the chain pipelines
# bucket by bucket, so a round is about (buckets + N - 1) bucket times),
# LOG_DIR (unset: where to keep each server's log, at debug level: every
# worker's round times, hop by hop), DELTA (unset: full rounds; on or auto:
# delta rounds, docs/delta.md) with CHANGE (0.02: the fraction of elements
# each step changes, wt-push --change). Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
# Absolute or relative to the repository, as every bench takes it.
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
ns_list=${NS:-1 2 4 8}
modes=${MODES:-parallel sequential chain}
rate=${RATE:-1gbit}
model=${MODEL:-synthetic:llama-256m}
rounds=${ROUNDS:-2}
bucket=${BUCKET:-4194304}
mtu=${MTU:-1500}
log_dir=${LOG_DIR:-}
delta=${DELTA:-}
change=${CHANGE:-0.02}
delta_args=()
[ -n "$delta" ] && delta_args=(--delta="$delta" --change "$change")
bench=fanout_bench
work=$(mktemp -d /tmp/wt-fanout.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh
server_bin=$build/server/wt-server
push_bin=$build/client/wt-push
[ "$(id -u)" = 0 ] || { echo "$bench: needs root (network namespaces)" >&2; exit 1; }
max=0
for n in $ns_list; do [ "$n" -gt "$max" ] && max=$n; done

hosts=(t)
for i in $(seq 1 "$max"); do hosts+=("s$i"); done
teardown() {
  if [ -n "${log_dir:-}" ] && [ -d "${work:-}" ]; then
    cp "$work"/srv-*.err "$log_dir"/ 2>/dev/null || true
  fi
  bench_cleanup
  for h in "${hosts[@]}"; do ip netns del "wtfo-$h" >/dev/null 2>&1 || true; done
  ip netns del wtfo-sw >/dev/null 2>&1 || true
}
trap teardown EXIT
teardown
work=$(mktemp -d /tmp/wt-fanout.XXXXXX)

# The switch, and one host per namespace on a rate-limited veth.
ip netns add wtfo-sw
ip -n wtfo-sw link add br0 type bridge
ip -n wtfo-sw link set br0 up
addr_of() { [ "$1" = t ] && echo 10.77.0.10 || echo "10.77.0.$((10 + ${1#s}))"; }
for h in "${hosts[@]}"; do
  ip netns add "wtfo-$h"
  ip -n "wtfo-$h" link set lo up
  ip link add "wtfo-$h-a" type veth peer name "wtfo-$h-b"
  ip link set "wtfo-$h-a" netns "wtfo-$h"
  ip link set "wtfo-$h-b" netns wtfo-sw
  ip -n "wtfo-$h" link set "wtfo-$h-a" name eth0
  ip -n "wtfo-$h" addr add "$(addr_of "$h")/24" dev eth0
  ip -n "wtfo-$h" link set eth0 mtu "$mtu" up
  ip -n wtfo-sw link set "wtfo-$h-b" mtu "$mtu" master br0 up
  # Upload (host egress) and download (switch egress toward the host).
  ip netns exec "wtfo-$h" tc qdisc add dev eth0 root tbf rate "$rate" \
    burst 256kb latency 100ms
  ip netns exec wtfo-sw tc qdisc add dev "wtfo-$h-b" root tbf rate "$rate" \
    burst 256kb latency 100ms
done

# One server per host namespace, started once for every N that needs it.
declare -A saddr
[ -n "$log_dir" ] && mkdir -p "$log_dir"
for i in $(seq 1 "$max"); do
  start_bg "srv-$i" env UCX_TLS=tcp ip netns exec "wtfo-s$i" "$server_bin" \
    --listen "$(addr_of "s$i"):0" --insecure --no-auth --model "$model" \
    --log-level "$([ -n "$log_dir" ] && echo debug || echo warn)"
  saddr[$i]=$bg_addr
done

# round N MODE: the steady-state median round, in seconds.
round() {
  local n=$1 mode=$2 args=() i out
  for i in $(seq 1 "$n"); do args+=(--server "${saddr[$i]}"); done
  out=$(ip netns exec wtfo-t env UCX_TLS=tcp WT_UCX_FANOUT="$mode" \
    "$push_bin" "${args[@]}" --backend ucx --bucket-size "$bucket" \
    --rounds $((rounds + 1)) --quiet --data-timeout 120 \
    ${delta_args[@]+"${delta_args[@]}"} 2>&1) || {
    echo "$bench: wt-push (N=$n, $mode): $out" >&2
    exit 1
  }
  sed -nE 's/^rounds:.*median ([0-9.]+) s.*/\1/p' <<<"$out"
}

declare -A t
echo "ucx fan-out over TCP${delta:+, delta=$delta at $change changed}," \
  "each host's link limited to $rate both ways" \
  "(MTU $mtu); $model; steady median of $rounds rounds on one init;" \
  "$(nproc) CPUs"
printf '%-6s' N
for m in $modes; do printf '%14s' "$m"; done
echo
for n in $ns_list; do
  printf '%-6s' "$n"
  for m in $modes; do
    t[$n,$m]=$(round "$n" "$m")
    printf '%13ss' "${t[$n,$m]}"
  done
  echo
done

# The chart: one row per N and mode, a bar per 0.1 of the longest round.
echo
longest=$(for k in "${!t[@]}"; do echo "${t[$k]}"; done | sort -g | tail -n1)
for n in $ns_list; do
  for m in $modes; do
    bar=$(awk -v v="${t[$n,$m]}" -v l="$longest" 'BEGIN {
      n = int(v / l * 50 + 0.5); s = ""; for (i = 0; i < n; i++) s = s "#";
      print s }')
    printf 'N=%-2s %-11s %6ss |%s\n' "$n" "$m" "${t[$n,$m]}" "$bar"
  done
done

# What each N should use, and the chain's promise.
echo
first=${ns_list%% *}
last=${ns_list##* }
for n in $ns_list; do
  bestm=""
  for m in $modes; do
    if [ -z "$bestm" ] || awk -v a="${t[$n,$m]}" -v b="${t[$n,$bestm]}" 'BEGIN { exit !(a < b) }'; then
      bestm=$m
    fi
  done
  echo "N=$n: fastest $bestm"
done
if [[ " $modes " == *" chain "* ]]; then
  awk -v a="${t[$last,chain]}" -v b="${t[$first,chain]}" -v n="$last" -v f="$first" 'BEGIN {
    r = a / b; printf "chain: N=%s is %.2fx N=%s (promise: within 1.25x: %s)\n",
    n, r, f, (r <= 1.25 ? "met" : "NOT met") }'
fi
