#!/usr/bin/env bash
# pack.sh: builds wt with CUDA here and gathers what the device checks need
# into .devpack/ (git-ignored), for a GPU machine that has CUDA but not wt's
# build dependencies (gRPC, protobuf-c, CUnit, ...): its binaries, wt's
# libraries with libwt_cuda.so beside libwt_common, and every shared
# library they load except the C runtime and the NVIDIA driver. Then:
#
#   device run, carry [".devpack"]:  bash tests/gpu/run-device-checks.sh
#
# The pack is built against UCX 1.22 (PyPI's libucx-cu13, scripts/
# ucx-current.sh), whose CUDA transports (cuda_copy, cuda_ipc) let the ucx
# backend move GPU memory; its libraries come along, and its transport
# modules go to lib/ucx/ (UCX_MODULE_DIR on the device). PACK_UCX=system
# builds against Debian's 1.13 instead (no CUDA transports).
#
# Environment: BUILD_DIR (default build-gpu-pack), PACK (default .devpack),
# PACK_UCX (current | system).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-gpu-pack}
pack=${PACK:-.devpack}
ucx_modules=""
if [ "${PACK_UCX:-current}" = current ]; then
  PKG_CONFIG_PATH=$(bash scripts/ucx-current.sh build-ucx122-ucx)
  export PKG_CONFIG_PATH
  ucx_modules=$(cd "$PKG_CONFIG_PATH/../ucx" && pwd)
fi

cmake -S . -B "$build" -DWT_WERROR=ON -DWT_WITH_CUDA=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target wt_tests wt-server wt-push \
  wt-ctl wt_cuda wt_nccl wt-bench-ipc-ref wt-bench-nccl-ref \
  wt_consumer_check wt-bench-export >/dev/null

rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/lib"
bins=("$build/tests/wt_tests" "$build/server/wt-server"
      "$build/client/wt-push" "$build/client/wt-ctl"
      "$build/bench/wt-bench-ipc-ref" "$build/bench/wt-bench-nccl-ref"
      "$build/tests/wt_consumer_check" "$build/bench/wt-bench-export")
for b in "${bins[@]}"; do strip --strip-unneeded -o "$pack/bin/$(basename "$b")" "$b"; done
strip --strip-unneeded -o "$pack/lib/libwt_cuda.so" "$build/common/libwt_cuda.so"
strip --strip-unneeded -o "$pack/lib/libwt_nccl.so" "$build/common/libwt_nccl.so"

# Everything they load, but what every Linux has (or must be the target's
# own: glibc, libstdc++, libgcc_s, the driver's libcuda), and NCCL (218 MB
# for every architecture here; the device machine has its own 2.28, and
# ../shared/gpu has 2.30).
skip='^(libc|libm|libdl|librt|libpthread|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libnccl)\.so'
for f in "${bins[@]}" "$build/common/libwt_cuda.so" "$build/common/libwt_nccl.so"; do
  ldd "$f" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  name=$(basename "$lib")
  if [[ "$name" =~ $skip ]]; then continue; fi
  strip --strip-unneeded -o "$pack/lib/$name" "$lib" 2>/dev/null || cp -L "$lib" "$pack/lib/$name"
done
# UCX's transport modules it loads at run time (not through ldd): the CUDA
# ones and cma; the driver's libcuda and libnvidia-ml are the target's.
if [ -n "$ucx_modules" ]; then
  mkdir -p "$pack/lib/ucx"
  for m in libuct_cuda libucm_cuda libuct_cma; do
    strip --strip-unneeded -o "$pack/lib/ucx/$m.so.0" "$ucx_modules/$m.so.0"
  done
fi
{
  echo "built on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -n1 | awk '{print $NF}'))"
  echo "at $(date -u +%FT%TZ) from $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes'), UCX $(pkg-config --modversion ucx 2>/dev/null || echo none)"
} >"$pack/BUILT"
echo "pack.sh: $(du -sh "$pack" | cut -f1) in $pack ($(ls "$pack/lib" | wc -l) libraries):"
cat "$pack/BUILT"
