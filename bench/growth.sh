#!/usr/bin/env bash
# growth.sh: does wt-server grow per round or per init? For each backend
# (grpc, ucx) and each way a trainer runs (a new wt-push, hence a new init,
# per round; one wt-push --rounds N on a single init), runs ROUNDS rounds of
# synthetic:small against one wt-server and samples its VmRSS, threads and
# open fds after 5, 20, 50, 100 and ROUNDS rounds. Prints a table; the
# verdict compares after ROUNDS with after 20: at most 5% more RSS, no more
# fds, no more of wt's own threads (gRPC's thread pools grow on demand and
# shrink when idle: at most 2 more of those).
#
#   bench/growth.sh                       both backends, ROUNDS=200
#   ROUNDS=60 BACKENDS=ucx bench/growth.sh
#
# Environment: BUILD (build folder, default build), ROUNDS, BACKENDS,
# MODES ("per-init one-init"). Exit 1 when a row grows. Not a test; CI
# does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=growth
build=${BUILD:-build}
rounds=${ROUNDS:-200}
backends=${BACKENDS:-grpc ucx}
modes=${MODES:-per-init one-init}
work=$(mktemp -d /tmp/wt-growth.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh
trap bench_cleanup EXIT
cmake --build "$build" -j "$(nproc)" --target wt-server wt-push >/dev/null

marks=()
for m in 5 20 50 100; do [ "$m" -lt "$rounds" ] && marks+=("$m"); done
marks+=("$rounds")
[ "$rounds" -gt 20 ] || { echo "$bench: ROUNDS must be more than 20" >&2; exit 2; }
is_mark() { local m; for m in "${marks[@]}"; do [ "$1" = "$m" ] && return 0; done; return 1; }
# sample PID: "rss_kib threads fds own_threads": own_threads are wt's
# (named after the process), the rest gRPC's pools, which grow on demand
# and shrink when idle.
sample() {
  local own
  own=$(cat /proc/"$1"/task/*/comm 2>/dev/null | grep -c '^wt-server$' || true)
  echo "$(kib "$1" VmRSS) $(awk '/^Threads:/ {print $2}' "/proc/$1/status") $(ls "/proc/$1/fd" | wc -l) $own"
}

printf '%-7s %-9s' backend mode
for m in "${marks[@]}"; do printf ' %9s' "rss@$m"; done
printf ' %8s %9s %9s %9s %s\n' "20->$rounds" threads "wt's own" fds verdict
status=0
for backend in $backends; do
  for mode in $modes; do
    start_bg "srv-$backend-$mode" "$build/server/wt-server" --listen 127.0.0.1:0 \
      --model synthetic:small --workers 2
    srv=$bg_pid addr=$bg_addr
    declare -A at=()
    if [ "$mode" = per-init ]; then
      for i in $(seq 1 "$rounds"); do
        out=$("$build/client/wt-push" --server "$addr" --backend "$backend" \
          ${BUCKET:+--bucket-size $BUCKET} --quiet 2>&1) || { echo "$bench: round $i: $out" >&2; exit 1; }
        if is_mark "$i"; then at[$i]=$(sample "$srv"); fi
      done
    else
      i=0
      while read -r line; do
        case "$line" in
          "round pushed"*)
            i=$((i + 1))
            if is_mark "$i"; then at[$i]=$(sample "$srv"); fi
            ;;
        esac
      done < <("$build/client/wt-push" --server "$addr" --backend "$backend" \
        ${BUCKET:+--bucket-size $BUCKET} --rounds "$rounds" 2>&1)
      [ "$i" = "$rounds" ] || { echo "$bench: one-init run ended after $i rounds" >&2; exit 1; }
    fi
    stop_bg "$srv"
    printf '%-7s %-9s' "$backend" "$mode"
    for m in "${marks[@]}"; do
      read -r r _ _ _ <<<"${at[$m]}"
      printf ' %9s' "$(awk -v k="$r" 'BEGIN { printf "%.1fM", k / 1024 }')"
    done
    read -r r20 t20 f20 o20 <<<"${at[20]}"
    read -r rn tn fn on <<<"${at[$rounds]}"
    pct=$(awk -v a="$r20" -v b="$rn" 'BEGIN { printf "%+.1f%%", (b - a) * 100 / a }')
    verdict=ok
    # RSS within 5%, no more fds, no more of wt's own threads, and gRPC's
    # pools at most 2 threads up.
    if awk -v a="$r20" -v b="$rn" 'BEGIN { exit !(b > a * 1.05) }' ||
      [ "$fn" -gt "$f20" ] || [ "$on" -gt "$o20" ] || [ "$tn" -gt $((t20 + 2)) ]; then
      verdict=GROWS
      status=1
    fi
    printf ' %8s %9s %9s %9s %s\n' "$pct" "$t20->$tn" "$o20->$on" "$f20->$fn" "$verdict"
    if [ -n "${GROWTH_DEBUG:-}" ]; then for m in "${marks[@]}"; do echo "  $m: ${at[$m]}"; done; fi
    unset at
  done
done
exit "$status"
