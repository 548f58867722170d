#!/usr/bin/env bash
# grpc_bench.sh: the grpc backend against plain Python grpcio, on one machine.
#
#   C:      wt-push --synthetic bench-1g  ->  wt-server --model synthetic:bench-1g
#           (1 GiB, 363 tensors, bfloat16 + float32, packed 64 MiB buckets,
#           1 MiB chunks, loopback)
#   Python: py_stream_client.py  ->  py_stream_server.py
#           (the same number of bytes in the same 1 MiB chunks through the same
#           PushWeights method and generated stubs; the server copies each
#           chunk into a bytearray)
#
# Each side first runs WARMUP times (not counted: the receivers' buffers are
# faulted in on first touch), then RUNS times, all in this one invocation; the
# table shows the best and the median run of each (GB/s = 1e9 bytes per
# second) and the ratio C/Python of each (target >= 1.5). The C figure is wt-push's own summary: the data phase of a round
# (PushWeights streams until the server answered), like the Python figure.
# It also shows wt-server's peak RSS (VmHWM) against the model size, for
# shadow staging (two copies: committed + staging) and in-place (one).
#
# Environment: BUILD_DIR (default build), RUNS (default 5), WARMUP (default
# 1), MODEL (default bench-1g), CHUNK (default 1048576), STAGINGS (default
# "shadow inplace"; the first one is timed, each one's RSS is shown), AUTH
# ("" none, "token": bearer tokens on every call, "tls": TLS and tokens; the
# Python reference runs plaintext either way).
# Not a test: CI does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}
runs=${RUNS:-5}
warmup=${WARMUP:-1}
model=${MODEL:-bench-1g}
chunk=${CHUNK:-1048576}
stagings=${STAGINGS:-shadow inplace}

bench=grpc_bench
. "$root/bench/lib.sh"
bench_build "$build" "" wt-server wt-push wt-ctl
server_bin=$build/server/wt-server
push_bin=$build/client/wt-push

work=$(mktemp -d)
trap bench_cleanup EXIT
bench_auth "${AUTH:-}" "$work/auth"

# ---------------------------------------------------------------- C side
declare -A c_hwm c_rss0
c_best=""
c_bytes=""
for staging in $stagings; do
  start_bg "wt-server-$staging" "$server_bin" --listen 127.0.0.1:0 \
    --model "synthetic:$model" --staging "$staging" --log-level warn \
    ${auth_server[@]+"${auth_server[@]}"}
  server_pid=$bg_pid
  c_rss0[$staging]=$(kib "$server_pid" VmRSS)
  # The first staging mode is timed; the others only need one push for
  # their peak RSS.
  pushes=1
  [ "$staging" = "${stagings%% *}" ] && pushes=$((warmup + runs))
  for i in $(seq 1 "$pushes"); do
    out=$work/push-$staging-$i.out
    "$push_bin" --server "$bg_addr" --synthetic "$model" --backend grpc \
      --chunk-size "$chunk" --version "bench-$staging-$i" \
      ${auth_client[@]+"${auth_client[@]}"} >"$out" 2>&1 || {
      echo "grpc_bench: wt-push failed:" >&2
      cat "$out" >&2
      exit 1
    }
    push_summary "$out"
    gbps=$push_gbps
    bytes=$push_bytes
    c_bytes=$bytes
    if [ "$staging" = "${stagings%% *}" ] && [ "$i" -gt "$warmup" ]; then
      echo "$gbps" >>"$work/c.gbps"
    fi
  done
  c_hwm[$staging]=$(kib "$server_pid" VmHWM)
  stop_bg "$server_pid"
done
c_best=$(best <"$work/c.gbps")
c_median=$(median <"$work/c.gbps")

# ----------------------------------------------------------- Python side
start_bg py-server python3 "$root/bench/py_stream_server.py" \
  --proto-dir "$root/proto" --stubs-dir "$work/stubs-server" --size "$c_bytes"
py_pid=$bg_pid
python3 "$root/bench/py_stream_client.py" --server "$bg_addr" \
  --proto-dir "$root/proto" --stubs-dir "$work/stubs-client" \
  --bytes "$c_bytes" --chunk-size "$chunk" --runs $((warmup + runs)) \
  >"$work/py.out"
py_hwm=$(kib "$py_pid" VmHWM)
stop_bg "$py_pid"
sed -n 's/.*"gbps": \([0-9.e+-]*\).*/\1/p' "$work/py.out" |
  tail -n +$((warmup + 1)) >"$work/py.gbps"
py_best=$(best <"$work/py.gbps")
py_median=$(median <"$work/py.gbps")

# ----------------------------------------------------------------- table
model_kib=$((c_bytes / 1024))
echo
echo "grpc backend, $(gib "$model_kib") GiB ($c_bytes bytes, synthetic:$model)" \
  "in ${chunk}-byte chunks over loopback; $runs runs after $warmup warm-up;" \
  "$(nproc) CPUs; wt with auth '${AUTH:-none}'"
printf '%-44s %10s %10s\n' "path" "best GB/s" "median"
printf '%-44s %10.2f %10.2f\n' "C     wt-push -> wt-server (${stagings%% *})" \
  "$c_best" "$c_median"
printf '%-44s %10.2f %10.2f\n' "Python grpcio client -> grpcio server" \
  "$py_best" "$py_median"
awk -v cb="$c_best" -v pb="$py_best" -v cm="$c_median" -v pm="$py_median" \
  'BEGIN { rb = cb / pb; rm = cm / pm
  printf "%-44s %9.2fx %9.2fx  (target >= 1.5x: %s)\n", "ratio C/Python",
  rb, rm, (rm >= 1.5 ? "met" : "NOT met") }'
echo
printf '%-44s %10s %10s\n' "peak RSS (VmHWM)" "GiB" "x model"
for staging in $stagings; do
  printf '%-44s %10s %10s\n' "wt-server --staging $staging" \
    "$(gib "${c_hwm[$staging]}")" \
    "$(awk -v a="${c_hwm[$staging]}" -v m="$model_kib" 'BEGIN { printf "%.2f", a / m }')"
  printf '%-44s %10s\n' "  (RSS once serving, before any push)" \
    "$(gib "${c_rss0[$staging]}")"
done
printf '%-44s %10s %10s\n' "py_stream_server (bytearray receiver)" \
  "$(gib "$py_hwm")" \
  "$(awk -v a="$py_hwm" -v m="$model_kib" 'BEGIN { printf "%.2f", a / m }')"
