#!/usr/bin/env bash
# ucx-current.sh DIR: a current UCX (PyPI's libucx-cu13, UCX 1.22.0) unpacked
# under DIR, with its pkg-config files pointing there. Prints the
# PKG_CONFIG_PATH to build wt against it:
#   export PKG_CONFIG_PATH=$(bash scripts/ucx-current.sh build-ucx122/ucx)
# Debian 12's own UCX (1.13.1) stays the default build; CI builds and runs
# the ucx and trust suites against both (see .ci/run and docs/trust.md,
# UCX 1.13.1's sockaddr listener aborts on 17 bytes).
set -euo pipefail
dir=$1
version=1.22.0
py=${PYTHON:-python3}
if [ ! -f "$dir/.done-$version" ]; then
  rm -rf "$dir" && mkdir -p "$dir/whl"
  "$py" -m pip download -q --no-deps --disable-pip-version-check \
    "libucx-cu13==$version" -d "$dir/whl" >&2
  "$py" - "$dir" <<'PY'
import glob, sys, zipfile
d = sys.argv[1]
zipfile.ZipFile(glob.glob(d + "/whl/*.whl")[0]).extractall(d)
PY
  prefix=$(cd "$dir/libucx" && pwd)
  sed -i "s|^prefix *=.*|prefix = $prefix|" "$dir"/libucx/lib/pkgconfig/*.pc
  rm -rf "$dir/whl"
  touch "$dir/.done-$version"
fi
echo "$(cd "$dir/libucx/lib/pkgconfig" && pwd)"
