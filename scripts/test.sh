#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds with warnings as
# errors, runs every CUnit suite through ctest and prints CUnit's summaries.
#
#   scripts/test.sh              normal build in build/
#   scripts/test.sh --sanitize   AddressSanitizer + UBSan build in build-asan/
#
# Environment: BUILD_DIR overrides the build folder; JOBS the parallelism;
# SKIP_DEPS=1 skips the package check.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=normal
for arg in "$@"; do
  case "$arg" in
    --sanitize) mode=sanitize ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

[ "${SKIP_DEPS:-0}" = 1 ] || bash scripts/install-deps.sh

jobs=${JOBS:-$(nproc)}
if [ "$mode" = sanitize ]; then
  build=${BUILD_DIR:-build-asan}
  extra=(-DWT_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
else
  build=${BUILD_DIR:-build}
  extra=()
fi

cmake -S . -B "$build" -DWT_WERROR=ON "${extra[@]}" >/dev/null
cmake --build "$build" -j "$jobs"

status=0
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600) || status=$?

# ctest keeps each suite's output; show CUnit's own counts, suite by suite,
# and the total as the closing line.
log="$build/Testing/Temporary/LastTest.log"
if [ -f "$log" ]; then
  echo
  echo "== CUnit summaries ($mode build) =="
  grep -h "skipped:" "$log" | sed 's/^ */  /' | sort -u || true
  awk '/^[0-9]+\/[0-9]+ Testing: /{suite=$3}
       /^ +tests +[0-9]/{printf "  %-14s tests run %4d  passed %4d  failed %d\n", suite, $3, $4, $5;
                         ran+=$3; pass+=$4; fail+=$5}
       END{printf "CUnit: %d passed, %d failed (%d tests run)\n", pass, fail, ran}' "$log"
fi
exit $status
