#!/usr/bin/env bash
# The main job, end to end: build if needed, start wt-server on the built-in
# default model (synthetic:llama-256m), push a new version of every weight
# with wt-push over the grpc backend, verify every parameter's SHA-256 on the
# server against the trainer's, print the summary, stop the server.
#
# Environment: BUILD_DIR (default build), WORKERS (default 1), SKIP_DEPS=1.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "${SKIP_DEPS:-0}" = 1 ] || bash scripts/install-deps.sh
build=${BUILD_DIR:-build}
if [ ! -x "$build/server/wt-server" ] || [ ! -x "$build/client/wt-push" ]; then
  cmake -S . -B "$build" -DWT_WERROR=ON >/dev/null
fi
# Always let the build system decide whether anything changed.
cmake --build "$build" -j "$(nproc)" --target wt-server wt-push wt-ctl >/dev/null

workdir=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT

"$build/server/wt-server" --listen 127.0.0.1:0 --workers "${WORKERS:-1}" \
  >"$workdir/server.out" 2>"$workdir/server.err" &
server_pid=$!

# The server prints "wt-server listening on HOST:PORT" once it serves.
addr=""
for _ in $(seq 1 600); do
  addr=$(sed -n 's/^wt-server listening on //p' "$workdir/server.out" | head -n1)
  [ -n "$addr" ] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "demo: wt-server exited before serving:" >&2
    cat "$workdir/server.err" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "demo: wt-server did not start serving within 60 s" >&2
  cat "$workdir/server.err" >&2
  exit 1
fi
echo "demo: wt-server (pid $server_pid) serving on $addr"
"$build/client/wt-ctl" --server "$addr" info

"$build/client/wt-push" --server "$addr" --verify

"$build/client/wt-ctl" --server "$addr" version

kill -TERM "$server_pid"
rc=0
wait "$server_pid" || rc=$?
server_pid=""
if [ "$rc" -ne 0 ]; then
  echo "demo: wt-server exited with status $rc after SIGTERM" >&2
  cat "$workdir/server.err" >&2
  exit 1
fi
echo "demo: wt-server stopped cleanly"
