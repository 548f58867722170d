#!/usr/bin/env bash
# The checks CI runs besides the tests (docs/testing.md, "Checks"):
#
#   1. format: every C source and header of the tree is as .clang-format
#      says (clang-format --dry-run -Werror; `scripts/check.sh --fix`
#      rewrites them in place);
#   2. static analysis: cppcheck on the product code (common/, server/,
#      client/, consumer/, backends/; not tests/ or bench/), warnings as
#      errors;
#   3. types: mypy --strict on the Python package (python/src/wt_transfer,
#      as python/pyproject.toml's [tool.mypy] says; the package ships
#      py.typed), every error a failure;
#   4. installed headers: each header `cmake --install` puts under
#      include/wt/ compiles on its own as C11 and as C++17.
#
# Usage: scripts/check.sh [--fix] [BUILD_DIR]   (default build/; the header
# check configures and builds it when it holds no build). Tools from
# Debian's packages (scripts/install-deps.sh installs them); mypy, pinned,
# from PyPI into a venv of its own, BUILD_DIR/mypy-venv (made once).
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0
if [ "${1:-}" = --fix ]; then
  fix=1
  shift
fi
build=${1:-build}
status=0

mapfile -t sources < <(git ls-files '*.c' '*.h')

echo "== format: ${#sources[@]} files against .clang-format ($(clang-format --version))"
if [ "$fix" = 1 ]; then
  clang-format -i "${sources[@]}"
elif ! clang-format --dry-run -Werror "${sources[@]}" 2>/tmp/wt-format.$$; then
  grep -E '^[^ ].*: (error|warning):' /tmp/wt-format.$$ | cut -d: -f1 | sort -u |
    sed 's/^/  not formatted: /'
  echo "format: FAILED (scripts/check.sh --fix formats them)"
  status=1
fi
rm -f /tmp/wt-format.$$

# cppcheck 2.10 reads `return f(&local);`, where f returns a status object
# it allocated, as returning the local's address (returnDanglingLifetime):
# wt's WT_CHECK idiom everywhere. That false positive is off; every other
# finding fails, or carries an inline suppression saying why it is safe.
echo "== static analysis: $(cppcheck --version) on the product code"
[ -f "$build/backends/backends_list.h" ] ||
  cmake -S . -B "$build" -DWT_WERROR=ON >/dev/null
if ! cppcheck -q --std=c11 --enable=warning,portability --inline-suppr \
    --error-exitcode=1 -j "$(nproc)" -D__GNUC__ -DWT_WITH_UCX \
    -Icommon/include -Icommon/internal -Iserver/include -Iclient/include \
    -Iconsumer/include -I. -I"$build/backends" \
    --suppress=missingIncludeSystem --suppress=returnDanglingLifetime \
    --template='  {file}:{line}: {severity} {id}: {message}' \
    common/src server/src client/src client/tools consumer/src backends; then
  echo "static analysis: FAILED"
  status=1
fi

# mypy and numpy (for its stubs: wt_transfer.consumer hands out numpy
# arrays), pinned, in a venv of their own and nothing else: vLLM, torch and
# Ray are Any to the check (pyproject.toml), whatever the host has.
MYPY_VERSION=2.4.1
MYPY_NUMPY_VERSION=2.4.6
venv=$build/mypy-venv
if ! "$venv/bin/python" - "$MYPY_VERSION" "$MYPY_NUMPY_VERSION" >/dev/null 2>&1 <<'PYEOF'
import sys, importlib.metadata as md
sys.exit(md.version("mypy") != sys.argv[1] or md.version("numpy") != sys.argv[2])
PYEOF
then
  rm -rf "$venv"
  mkdir -p "$build"
  "${PYTHON:-python3}" -m venv "$venv" >/dev/null &&
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      "mypy==$MYPY_VERSION" "numpy==$MYPY_NUMPY_VERSION" >&2 ||
    echo "types: could not make $venv (python3 -m venv, pip install mypy)" >&2
fi
echo "== types: mypy --strict on python/src/wt_transfer ($("$venv/bin/mypy" --version 2>/dev/null | cut -d' ' -f1-2))"
if ! "$venv/bin/mypy" --config-file python/pyproject.toml \
    --cache-dir "$build/mypy-cache" >"$build/mypy.out" 2>&1; then
  sed -e '/^Found [0-9]* error/d' -e 's/^/  /' "$build/mypy.out"
  echo "types: FAILED"
  status=1
fi

echo "== installed headers: each alone, as C11 and as C++17"
[ -f "$build/Makefile" ] || cmake -S . -B "$build" -DWT_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
read -r -a deps <<<"$(pkg-config --cflags grpc libprotobuf-c)"
n=0
# one_header LANG STD NAME: NAME alone in a translation unit of LANG.
one_header() {
  local cc=gcc
  [ "$1" = c++ ] && cc=g++
  printf '#include "%s"\nint wt_header_check;\n' "$3" |
    "$cc" -std="$2" -Wall -Wextra -Werror -fsyntax-only -I"$prefix/include" \
      "${deps[@]}" -x "$1" - 2>"$prefix/err" && return 0
  sed "s|^|  $3 ($2): |" "$prefix/err"
  return 1
}
for h in "$prefix"/include/wt/*.h; do
  name=wt/$(basename "$h")
  n=$((n + 1))
  one_header c c11 "$name" || status=1
  one_header c++ c++17 "$name" || status=1
done
echo "installed headers: $n checked"

if [ "$status" -eq 0 ]; then
  echo "check: format, static analysis, types and headers OK"
else
  echo "check: FAILED"
fi
exit "$status"
