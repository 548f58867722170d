#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, WT_FUZZ=ON) and runs each for a bounded
# time over a scratch copy of its seed corpus, so that nothing libFuzzer
# writes (new inputs, crash artifacts) lands in the git tree.
#
#   scripts/fuzz.sh [target...]     default: every target
#   FUZZ_SECONDS   seconds per target (default 30)
#   BUILD_DIR      build folder (default <repo>/build-fuzz)
#   FUZZ_JOBS      build parallelism (default: nproc)
#   FUZZ_BUILD_ONLY=1  build the targets, run nothing
#
# Exits non-zero if a target fails to build or libFuzzer reports a crash,
# leak or timeout; the reproducer is kept under $BUILD_DIR/fuzz-artifacts/.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
FUZZ_JOBS=${FUZZ_JOBS:-$(nproc)}
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then TARGETS=(safetensors proto export); fi

CC_BIN=${CC:-clang}
case "$(basename "$CC_BIN")" in
  clang*) ;;
  *) CC_BIN=clang ;;
esac
command -v "$CC_BIN" >/dev/null || { echo "fuzz.sh: clang not found" >&2; exit 2; }

cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_C_COMPILER="$CC_BIN" -DWT_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$FUZZ_JOBS" \
  --target "${TARGETS[@]/#/fuzz_}" >/dev/null
[ "${FUZZ_BUILD_ONLY:-0}" = 0 ] || exit 0

ARTIFACTS=$BUILD_DIR/fuzz-artifacts
mkdir -p "$ARTIFACTS"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/wt-fuzz-XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT

# Without a symbolizer ASan prints raw addresses; let it find llvm's.
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
  for s in llvm-symbolizer llvm-symbolizer-14 /usr/lib/llvm-*/bin/llvm-symbolizer; do
    if command -v "$s" >/dev/null 2>&1; then
      export ASAN_SYMBOLIZER_PATH=$(command -v "$s"); break
    fi
  done
fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

status=0
printf '%-20s %10s %8s %8s %s\n' target execs exec/s seconds result
for t in "${TARGETS[@]}"; do
  bin=$BUILD_DIR/tests/fuzz/fuzz_$t
  seeds=$ROOT/tests/fuzz/corpus/$t
  work=$SCRATCH/$t
  mkdir -p "$work"
  if [ -d "$seeds" ]; then cp -r "$seeds"/. "$work"/; fi
  args=(-max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -timeout=10
        -rss_limit_mb=2048 -artifact_prefix="$ARTIFACTS/$t-")
  if [ -f "$ROOT/tests/fuzz/$t.dict" ]; then
    args+=(-dict="$ROOT/tests/fuzz/$t.dict")
  fi
  log=$BUILD_DIR/fuzz-$t.log
  rc=0
  "$bin" "${args[@]}" "$work" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    result="FAILED (rc $rc; log $log)"
    status=1
    grep -E '^(==[0-9]+==ERROR|SUMMARY|fuzz_|.*runtime error)' "$log" >&2 || true
    ls "$ARTIFACTS"/"$t"-* 2>/dev/null | sed 's/^/  reproducer: /' >&2 || true
  fi
  printf '%-20s %10s %8s %8s %s\n' "fuzz_$t" "${execs:-?}" "${speed:-?}" \
    "${secs:-?}" "$result"
done
exit $status
