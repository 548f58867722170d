# lib.sh: what the bench scripts share (sourced, not run, from the
# repository root). The caller sets $bench (its name, for messages) and,
# before starting anything, $work (a scratch folder), and traps
# bench_cleanup on EXIT.

pids=()

# bench_build DIR "CMAKE_ARGS" TARGET...: configures DIR (RelWithDebInfo)
# if it is not yet, and builds the targets.
bench_build() {
  local dir=$1 args=$2
  shift 2
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    # shellcheck disable=SC2086
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo $args >/dev/null
  fi
  cmake --build "$dir" -j "$(nproc)" --target "$@" >/dev/null
}

bench_cleanup() {
  for p in "${pids[@]}"; do
    kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}

# start_bg NAME CMD...: starts CMD with stdout into $work/NAME.out and waits
# for its "listening on HOST:PORT" line; sets $bg_pid and $bg_addr.
start_bg() {
  local name=$1
  shift
  "$@" >"$work/$name.out" 2>"$work/$name.err" &
  bg_pid=$!
  pids+=("$bg_pid")
  bg_addr=""
  for _ in $(seq 1 1200); do
    bg_addr=$(sed -n 's/.* listening on //p' "$work/$name.out" 2>/dev/null | head -n1 || true)
    [ -n "$bg_addr" ] && return 0
    if ! kill -0 "$bg_pid" 2>/dev/null; then
      echo "$bench: $name exited before serving:" >&2
      cat "$work/$name.err" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "$bench: $name did not serve within 120 s" >&2
  exit 1
}

# stop_bg PID: SIGTERM and wait; fails the script on a non-zero exit.
stop_bg() {
  local rc=0
  kill -TERM "$1"
  wait "$1" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "$bench: pid $1 exited with status $rc after SIGTERM" >&2
    exit 1
  fi
}

# ckpt_bytes FILE: the bytes of the tensors of the safetensors FILE (its
# header's data_offsets), what one round moves.
ckpt_bytes() {
  python3 - "$1" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
print(sum(v["data_offsets"][1] - v["data_offsets"][0]
          for k, v in h.items() if k != "__metadata__"))
PY
}

# kib PID FIELD: a /proc/PID/status field in KiB.
kib() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }

gib() { awk -v k="$1" 'BEGIN { printf "%.2f", k / 1048576 }'; }

best() { sort -g | tail -n1; }

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# push_summary FILE: reads wt-push's summary line in FILE ("pushed T
# tensors, B bytes (..) to 1 server(s) in S s: G GB/s (round R s);
# committed version 'V'") into $push_gbps and $push_bytes; exits on none.
push_summary() {
  local summary
  summary=$(grep '^pushed ' "$1" | tail -n1)
  push_gbps=$(grep -oE '[0-9]+(\.[0-9]+)? GB/s' <<<"$summary" | cut -d' ' -f1)
  push_bytes=$(grep -oE '[0-9]+ bytes' <<<"$summary" | cut -d' ' -f1)
  if [ -z "$push_gbps" ] || [ -z "$push_bytes" ]; then
    echo "$bench: cannot read wt-push's summary:" >&2
    cat "$1" >&2
    exit 1
  fi
}

# bench_auth MODE DIR: the trust options of the benchmarked processes, into
# the arrays auth_server and auth_client. MODE: "" (none), "token" (bearer
# tokens on every call), "tls" (TLS and tokens). Certificates come from
# tests/support/make-certs.sh in DIR.
bench_auth() {
  local mode=$1 dir=$2
  auth_server=()
  auth_client=()
  [ -z "$mode" ] && return 0
  mkdir -p "$dir"
  printf 'trainer %s\n' "$(openssl rand -hex 32)" >"$dir/tokens"
  chmod 600 "$dir/tokens"
  auth_server=(--token-file "$dir/tokens")
  auth_client=(--token-file "$dir/tokens")
  if [ "$mode" = tls ]; then
    sh tests/support/make-certs.sh "$dir/pki" >/dev/null
    auth_server+=(--tls-cert "$dir/pki/server.pem" --tls-key "$dir/pki/server.key")
    auth_client+=(--tls-ca "$dir/pki/ca.pem")
  elif [ "$mode" != token ]; then
    echo "$bench: AUTH='$mode' is not '', 'token' or 'tls'" >&2
    exit 2
  fi
}

# push_rounds BACKEND LAYOUT [PUSH_ARGS...]: a wt-server on $device with
# synthetic:LAYOUT, and wt-push --backend BACKEND --device $device
# --rounds $runs+1 --verify=xxh3 to it ($server_bin, $push_bin); prints
# "first_s median_s best_s worst_s bytes tensors" and fails the script when
# the push or its verification fails.
push_rounds() {
  local backend=$1 layout=$2
  shift 2
  start_bg "srv-$backend-$layout" "$server_bin" --listen 127.0.0.1:0 \
    --device "$device" --model "synthetic:$layout"
  local out
  out=$("$push_bin" --server "$bg_addr" --backend "$backend" --device "$device" \
    --synthetic "$layout" --rounds $((runs + 1)) --data-timeout 60 --verify=xxh3 "$@" 2>&1) || {
    echo "$bench: wt-push: $out" >&2
    exit 1
  }
  stop_bg "$bg_pid"
  local line bytes tensors
  line=$(grep '^rounds:' <<<"$out")
  bytes=$(grep -oE 'pushed [0-9]+ tensors, [0-9]+ bytes' <<<"$out" | head -n1 | grep -oE '[0-9]+ bytes' | cut -d' ' -f1)
  tensors=$(grep -oE 'pushed [0-9]+ tensors' <<<"$out" | head -n1 | grep -oE '[0-9]+')
  grep -q '^verify: .* match' <<<"$out" || { echo "$bench: verify failed: $out" >&2; exit 1; }
  echo "$(sed -E 's/.*first ([0-9.]+) s.*median ([0-9.]+) s.*best ([0-9.]+) s, worst ([0-9.]+) s.*/\1 \2 \3 \4/' <<<"$line") $bytes $tensors"
}
