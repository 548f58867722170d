#!/usr/bin/env bash
# tls_bench.sh: grpc-backend rounds over TLS (wt terminates it, see
# docs/trust.md "TLS") against the same rounds in plaintext in the same run
# (the reference), one server on loopback.
#
# For each mode, one wt-push --rounds ROUNDS+1 on one init; reported: the
# steady-state median round, and TLS's against plaintext's. The PKI is made
# here with tests/support/make-certs.sh (openssl). Settings: BUILD_DIR
# (build), MODEL (synthetic:llama-256m), ROUNDS (7), MUTUAL (0; 1: the
# trainer presents a client certificate). Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
model=${MODEL:-synthetic:llama-256m}
rounds=${ROUNDS:-7}
mutual=${MUTUAL:-0}
bench=tls_bench
work=$(mktemp -d /tmp/wt-tls.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh
trap bench_cleanup EXIT
bench_build "$build" "" wt-server wt-push
sh tests/support/make-certs.sh "$work/pki"
pki=$work/pki

# median_of MODE ARGS...: the steady-state median (s) of a push to a
# server started with ARGS.
median_of() {
  local mode=$1
  shift
  local server_tls=() client_tls=()
  if [ "$mode" = tls ]; then
    server_tls=(--tls-cert "$pki/server.pem" --tls-key "$pki/server.key")
    client_tls=(--tls-ca "$pki/ca.pem")
    if [ "$mutual" = 1 ]; then
      server_tls+=(--tls-ca "$pki/ca.pem")
      client_tls+=(--tls-cert "$pki/client.pem" --tls-key "$pki/client.key")
    fi
  fi
  start_bg "server-$mode" "$build/server/wt-server" --listen 127.0.0.1:0 \
    --model "$model" --no-auth "${server_tls[@]}"
  local pid=$bg_pid
  "$build/client/wt-push" --server "$bg_addr" "${client_tls[@]}" \
    --rounds $((rounds + 1)) --quiet >"$work/push-$mode.out" 2>&1 || {
    cat "$work/push-$mode.out" >&2
    exit 1
  }
  stop_bg "$pid"
  sed -n 's/.*steady state median \([0-9.]*\) s.*/\1/p' "$work/push-$mode.out"
}

plain=$(median_of plain)
tls=$(median_of tls)
echo "| model | rounds | plaintext (reference) | TLS$([ "$mutual" = 1 ] && echo ', mutual') | TLS / plaintext |"
echo "| --- | --- | --- | --- | --- |"
awk -v m="$model" -v r="$rounds" -v p="$plain" -v t="$tls" \
  'BEGIN { printf "| %s | %d | %.3f s | %.3f s | %.2f |\n", m, r, p, t, t / p }'
