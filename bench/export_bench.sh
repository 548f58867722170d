#!/usr/bin/env bash
# export_bench.sh: the inference side (docs/export.md) on one host.
#
#   wt-server --memory shared --export SOCK --model synthetic:MODEL
#   (bench-1g: 363 tensors, 1.0 GiB), one wt-push round committed, then
#   wt-bench-export (bench/export_ref.c) through libwt_consumer:
#   - acquire and map the version, the first time and the ACQUIRES-th
#     (target: the tenth under 1 ms: mappings are kept across versions);
#   - read every byte through the mapping against a private buffer of the
#     same size in the same run (target: at least 0.9x);
#   - with DEVICE set (cuda:N): host-to-device copies from a mapping
#     registered read-only against cudaMemcpy from pinned memory of the
#     same size (target: at least 0.9x).
#
# Settings: BUILD_DIR (default build) or SERVER_BIN/PUSH_BIN/
# EXPORT_REF_BIN (all three: nothing is built), MODEL (bench-1g), ACQUIRES
# (10), PASSES (5), DEVICE (unset: no host-to-device part). Not a test; CI
# does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=export_bench
build=${BUILD_DIR:-build}
model=${MODEL:-bench-1g}
acquires=${ACQUIRES:-10}
passes=${PASSES:-5}
# shellcheck source=bench/lib.sh
source bench/lib.sh
if [ -z "${SERVER_BIN:-}" ] || [ -z "${PUSH_BIN:-}" ] || [ -z "${EXPORT_REF_BIN:-}" ]; then
  bench_build "$build" "" wt-server wt-push wt-bench-export
fi
server_bin=${SERVER_BIN:-$build/server/wt-server}
push_bin=${PUSH_BIN:-$build/client/wt-push}
ref_bin=${EXPORT_REF_BIN:-$build/bench/wt-bench-export}
work=$(mktemp -d /tmp/wt-export-bench.XXXXXX)
trap bench_cleanup EXIT
sock=$work/export.sock

start_bg wt-server "$server_bin" --listen 127.0.0.1:0 --no-auth \
  --model "synthetic:$model" --memory shared --export "$sock" --log-level error
"$push_bin" --server "$bg_addr" --synthetic "$model" --backend grpc \
  --version bench-1 >"$work/push.out" 2>&1 || { cat "$work/push.out" >&2; exit 1; }

h2d=()
[ -n "${DEVICE:-}" ] && h2d=(--h2d "${DEVICE#cuda:}")
"$ref_bin" "$sock" "$acquires" "$passes" ${h2d[@]+"${h2d[@]}"} >"$work/ref.out"
val() { awk -v k="$1" '$1 == k { print $2 }' "$work/ref.out"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "export on $(hostname), synthetic:$model ($(val tensors) tensors, $(val bytes) bytes), $(date -u +%F)"
printf '| %-44s | %s |\n' "what" "result"
printf '| %-44s | %s |\n' "---" "---"
printf '| %-44s | %s ms |\n' "acquire + map, first" "$(val acquire_1_ms)"
printf '| %-44s | %s ms |\n' "acquire (mapped already), #$acquires" "$(val "acquire_${acquires}_ms")"
printf '| %-44s | %s GB/s |\n' "read every byte through the mapping" "$(val read_mapping_gbps)"
printf '| %-44s | %s GB/s |\n' "read a private buffer (reference)" "$(val read_private_gbps)"
printf '| %-44s | %s |\n' "ratio mapping/private" "$(ratio "$(val read_mapping_gbps)" "$(val read_private_gbps)")x"
if [ -n "${DEVICE:-}" ]; then
  if grep -q '^h2d skipped' "$work/ref.out"; then
    printf '| %-44s | %s |\n' "host to device" "$(sed -n 's/^h2d skipped: //p' "$work/ref.out")"
  else
    printf '| %-44s | %s GB/s |\n' "h2d from the registered mapping" "$(val h2d_registered_gbps)"
    printf '| %-44s | %s GB/s |\n' "h2d from pinned memory (reference)" "$(val h2d_pinned_gbps)"
    printf '| %-44s | %s |\n' "ratio registered/pinned" "$(ratio "$(val h2d_registered_gbps)" "$(val h2d_pinned_gbps)")x"
  fi
fi
