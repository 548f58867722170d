#!/usr/bin/env bash
# run-device-checks.sh: everything wt checks on a real GPU, in one go, in
# well under 5 minutes: builds (or takes .devpack/, see pack.sh), runs the
# "gpu" suite on the CUDA device, ipc rounds between two processes (a
# wt-push trainer and a wt-server worker on cuda:0, unpacked and packed,
# SHA-256 verified, then a trainer SIGKILLed mid-run and the next trainer's
# round), a ucx round from GPU memory into a device store (UCX 1.22), nccl
# rounds between two processes on the GPU (NCCL 2.30 from ../shared/gpu)
# and a SIGKILLed nccl trainer, the export of a device store to a second
# process through CUDA IPC (libwt_consumer, SHA-256 against wt-ctl
# checksum), runs bench/gpu_bench.sh, bench/ipc_bench.sh,
# bench/nccl_bench.sh and bench/export_bench.sh (host-to-device from a
# registered mapping), prints a table. The gpu suite's NCCL checks use
# the NCCL in /usr/local/cuda (2.28).
# Where no device answers, the suite prints "skipped: no CUDA device (...)"
# and the bench is not run; the table says so.
#
# Build: with wt's build dependencies present (pkg-config finds grpc,
# libprotobuf-c and cunit), a fresh -Werror build with CUDA in build-gpu/;
# otherwise the prebuilt .devpack/ (made here by tests/gpu/pack.sh and
# carried to the device machine), whose origin the table shows;
# USE_DEVPACK=1 takes the pack even where a build could be made.
#
# Output: the table on stdout; logs in $OUT (when set) or build-gpu/checks/.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
logs=${OUT:-$root/build-gpu/checks}
mkdir -p "$logs"
t_start=$(date +%s)

step() { printf '%-34s %s\n' "$1" "$2" >>"$logs/table.txt"; }
: >"$logs/table.txt"

if [ "${USE_DEVPACK:-0}" != 1 ] && command -v cmake >/dev/null &&
   pkg-config --exists grpc libprotobuf-c cunit 2>/dev/null; then
  origin="built here ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
  if ! { cmake -S . -B build-gpu -DWT_WERROR=ON -DWT_WITH_CUDA=ON \
           -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
         cmake --build build-gpu -j "$(nproc)"; } >"$logs/build.log" 2>&1; then
    tail -n 30 "$logs/build.log"
    step "build" "FAILED (see build.log)"
    exit 1
  fi
  tests=build-gpu/tests/wt_tests
  bindir=$root/build-gpu
  consumer_check=$bindir/tests/wt_consumer_check
  export_ref=$bindir/bench/wt-bench-export
  server=$bindir/server/wt-server
  push=$bindir/client/wt-push
  ctl=$bindir/client/wt-ctl
elif [ -x .devpack/bin/wt_tests ]; then
  origin="prebuilt: $(head -n1 .devpack/BUILT); $(sed -n 2p .devpack/BUILT)"
  export LD_LIBRARY_PATH=$root/.devpack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # libwt_cuda.so sits beside libwt_common.so in .devpack/lib.
  tests=.devpack/bin/wt_tests
  server=$root/.devpack/bin/wt-server
  push=$root/.devpack/bin/wt-push
  ctl=$root/.devpack/bin/wt-ctl
  REF_BIN=$root/.devpack/bin/wt-bench-ipc-ref
  consumer_check=$root/.devpack/bin/wt_consumer_check
  export_ref=$root/.devpack/bin/wt-bench-export
  NCCL_REF_BIN=$root/.devpack/bin/wt-bench-nccl-ref
  # The pack's UCX (1.22) loads its CUDA transports from here.
  [ -d .devpack/lib/ucx ] && export UCX_MODULE_DIR=$root/.devpack/lib/ucx
else
  echo "run-device-checks: no build dependencies here and no .devpack/;" \
       "run tests/gpu/pack.sh on the build machine and carry .devpack" >&2
  exit 1
fi
step "wt" "$origin"

gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n1)
step "GPU (nvidia-smi)" "${gpu:-none answered}"

# ipc between two processes on cuda:0: a wt-push trainer whose tensors are
# in GPU memory, a wt-server worker that copies them out (5 rounds, every
# digest checked), unpacked and packed (the trainer's ring); then a trainer SIGKILLed while it runs rounds: the
# worker must be out of "updating" within 2 s, and a new trainer's round
# must verify.
# serve NAME [DEVICE]: a wt-server on DEVICE (cuda:0) with
# synthetic:llama-256m, its logs NAME-server.*; sets spid and addr (empty
# when it did not serve).
serve() {
  "$server" --listen 127.0.0.1:0 --device "${2:-cuda:0}" --model synthetic:llama-256m \
    >"$logs/$1-server.out" 2>"$logs/$1-server.log" &
  spid=$!
  addr=""
  local i
  for ((i = 0; i < 600; i++)); do
    addr=$(sed -n 's/.* listening on //p' "$logs/$1-server.out" 2>/dev/null | head -n1 || true)
    [ -n "$addr" ] && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
}

ipc_rc=0
ipc_checks() {
  local i
  serve ipc
  if [ -z "$addr" ]; then
    step "ipc (two processes)" "FAILED: wt-server did not serve (ipc-server.log)"
    ipc_rc=1
    return
  fi
  if timeout 120 "$push" --server "$addr" --backend ipc --device cuda:0 \
       --rounds 5 --verify --data-timeout 10 >"$logs/ipc-push.log" 2>&1; then
    step "ipc round, 5 on one init" "$(grep -m1 '^rounds:' "$logs/ipc-push.log" | cut -c1-90)"
    step "ipc verify (SHA-256)" "$(grep -m1 '^verify:' "$logs/ipc-push.log" | cut -c1-90)"
  else
    step "ipc round" "FAILED (ipc-push.log: $(tail -n1 "$logs/ipc-push.log" | cut -c1-80))"
    ipc_rc=1
  fi
  # Packed: a ring of two 64 MiB buffers, so that llama-256m is a few
  # buckets, each its own UpdateWeights.
  if timeout 120 "$push" --server "$addr" --backend ipc --device cuda:0 \
       --option packed=1 --bucket-size 64M --rounds 5 --verify \
       --data-timeout 10 >"$logs/ipc-packed.log" 2>&1; then
    step "ipc packed round, 5 on one init" "$(grep -m1 '^rounds:' "$logs/ipc-packed.log" | cut -c1-90)"
    step "ipc packed verify (SHA-256)" "$(grep -m1 '^verify:' "$logs/ipc-packed.log" | cut -c1-90)"
  else
    step "ipc packed round" "FAILED (ipc-packed.log: $(tail -n1 "$logs/ipc-packed.log" | cut -c1-80))"
    ipc_rc=1
  fi
  timeout 120 "$push" --server "$addr" --backend ipc --device cuda:0 \
    --rounds 100000 --quiet --data-timeout 10 >"$logs/ipc-killed.log" 2>&1 &
  local ppid=$!
  sleep 3
  kill -9 "$ppid" 2>/dev/null
  wait "$ppid" 2>/dev/null
  local t0 ready=""
  t0=$(date +%s%3N)
  for ((i = 0; i < 200; i++)); do
    if ! "$ctl" --server "$addr" info 2>/dev/null | grep -q updating; then
      ready=$(( $(date +%s%3N) - t0 )); break
    fi
    sleep 0.01
  done
  if [ -n "$ready" ] && [ "$ready" -le 2000 ] &&
     timeout 120 "$push" --server "$addr" --backend ipc --device cuda:0 \
       --verify --quiet --data-timeout 10 >"$logs/ipc-after.log" 2>&1; then
    step "ipc trainer SIGKILLed" "worker ready in ${ready} ms; next trainer verified"
  else
    step "ipc trainer SIGKILLed" "FAILED (ready: ${ready:-never} ms; ipc-after.log)"
    ipc_rc=1
  fi
  kill -TERM "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
}

# ucx from the trainer's GPU memory into a device store, two processes:
# where the UCX in use moves CUDA memory (the pack's 1.22), 3 rounds
# verified; where it cannot, the server's refusal is the row.
ucx_rc=0
ucx_device_checks() {
  serve ucx
  if [ -z "$addr" ]; then
    step "ucx device round" "FAILED: wt-server did not serve (ucx-server.log)"
    ucx_rc=1
    return
  fi
  if timeout 120 "$push" --server "$addr" --backend ucx --device cuda:0 \
       --rounds 3 --verify --data-timeout 10 >"$logs/ucx-push.log" 2>&1; then
    step "ucx cuda:0 -> cuda:0, 3 rounds" "$(grep -m1 '^rounds:' "$logs/ucx-push.log" | cut -c1-90)"
    step "ucx device verify (SHA-256)" "$(grep -m1 '^verify:' "$logs/ucx-push.log" | cut -c1-90)"
  elif grep -q "cannot move CUDA device memory" "$logs/ucx-push.log"; then
    step "ucx device round" "not run: $(grep -o 'the UCX in use ([0-9.]*)' "$logs/ucx-push.log" | head -n1) has no CUDA memory support"
  else
    step "ucx device round" "FAILED (ucx-push.log: $(tail -n1 "$logs/ucx-push.log" | cut -c1-80))"
    ucx_rc=1
  fi
  kill -TERM "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
}

# nccl between two processes on cuda:0 (trainer rank 0, one wt-server
# worker rank 1): two ranks on one GPU need NCCL 2.30 with
# NCCL_MULTI_RANK_GPU_ENABLE=1 (../shared/gpu/nccl-2.30.7-sm90; up to 2.29
# NCCL says "Duplicate GPU detected"). Rounds unpacked and packed, SHA-256
# verified; a trainer SIGKILLed mid-run: the worker must leave "updating"
# within the 3 s data deadline plus 2 s and say needs_init, and a new
# trainer's round (a new init) must verify.
nccl_rc=0
nccl30=$root/../shared/gpu/nccl-2.30.7-sm90/lib
nccl_checks() {
  if [ ! -f "$nccl30/libnccl.so.2" ]; then
    step "nccl two ranks, one GPU" "not run: no NCCL 2.30 at $nccl30"
    return
  fi
  local saved=${LD_LIBRARY_PATH:-}
  export LD_LIBRARY_PATH=$nccl30${saved:+:$saved}
  export NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_MAX_CTAS=4
  serve nccl
  if [ -z "$addr" ]; then
    step "nccl (two processes)" "FAILED: wt-server did not serve (nccl-server.log)"
    nccl_rc=1
  else
    local mode args
    for mode in unpacked packed; do
      args=()
      [ "$mode" = packed ] && args=(--option packed=1 --bucket-size 64M)
      if timeout 120 "$push" --server "$addr" --backend nccl --device cuda:0 \
           "${args[@]}" --rounds 3 --verify --data-timeout 10 \
           >"$logs/nccl-$mode.log" 2>&1; then
        step "nccl $mode, 3 rounds (2.30)" "$(grep -m1 '^rounds:' "$logs/nccl-$mode.log" | cut -c1-90)"
        step "nccl $mode verify (SHA-256)" "$(grep -m1 '^verify:' "$logs/nccl-$mode.log" | cut -c1-90)"
      else
        step "nccl $mode round (2.30)" "FAILED (nccl-$mode.log: $(tail -n1 "$logs/nccl-$mode.log" | cut -c1-80))"
        nccl_rc=1
      fi
    done
    timeout 120 "$push" --server "$addr" --backend nccl --device cuda:0 \
      --rounds 100000 --quiet --data-timeout 3 >"$logs/nccl-killed.log" 2>&1 &
    local ppid=$! i t0 ready="" state=""
    sleep 4
    kill -9 "$ppid" 2>/dev/null
    wait "$ppid" 2>/dev/null
    t0=$(date +%s%3N)
    for ((i = 0; i < 700; i++)); do
      state=$("$ctl" --server "$addr" info 2>/dev/null)
      if ! grep -q updating <<<"$state"; then
        ready=$(( $(date +%s%3N) - t0 )); break
      fi
      sleep 0.01
    done
    if [ -n "$ready" ] && [ "$ready" -le 5000 ] && grep -q needs_init <<<"$state" &&
       timeout 120 "$push" --server "$addr" --backend nccl --device cuda:0 \
         --verify --quiet --data-timeout 10 >"$logs/nccl-after.log" 2>&1; then
      step "nccl trainer SIGKILLed" "worker out of updating in ${ready} ms, needs_init; next trainer verified"
    else
      step "nccl trainer SIGKILLed" "FAILED (ready: ${ready:-never} ms; nccl-after.log)"
      nccl_rc=1
    fi
    kill -TERM "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
  fi
  # Across GPUs, where there are two: the trainer on cuda:0, the worker on
  # cuda:1 (NCCL 2.30 still, the same library for both processes).
  local ngpu
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [ "${ngpu:-0}" -ge 2 ]; then
    serve nccl-2gpu cuda:1
    if [ -n "$addr" ] && timeout 120 "$push" --server "$addr" --backend nccl \
         --device cuda:0 --option packed=1 --rounds 3 --verify --data-timeout 10 \
         >"$logs/nccl-2gpu.log" 2>&1; then
      step "nccl cuda:0 -> cuda:1, 3 rounds" "$(grep -m1 '^verify:' "$logs/nccl-2gpu.log" | cut -c1-90)"
    else
      step "nccl cuda:0 -> cuda:1" "FAILED (nccl-2gpu.log)"
      nccl_rc=1
    fi
    kill -TERM "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
  else
    step "nccl across GPUs" "not run: ${ngpu:-0} GPU(s) here"
  fi
  if [ -n "${NCCL_REF_BIN:-}" ] || [ -x "${bindir:-/nonexistent}/bench/wt-bench-nccl-ref" ]; then
    REF_BIN=${NCCL_REF_BIN:-$bindir/bench/wt-bench-nccl-ref} SERVER_BIN=$server \
      PUSH_BIN=$push RUNS=3 timeout 200 bash bench/nccl_bench.sh \
      >"$logs/nccl-bench.log" 2>&1
    local brc=$?
    cat "$logs/nccl-bench.log"
    step "nccl bench (wt/ncclBroadcast)" "$(sed -n 's/^ratio wt\/reference *//p' "$logs/nccl-bench.log") (rc $brc)"
    step "nccl per tensor (10k x 64 B)" "$(sed -n 's/^per tensor[^0-9]*//p' "$logs/nccl-bench.log" | cut -c1-60)"
  fi
  export LD_LIBRARY_PATH=$saved
  unset NCCL_MULTI_RANK_GPU_ENABLE NCCL_MAX_CTAS
}

# The export of a device store (docs/export.md, device regions): a
# wt-server worker on cuda:0 with --export, an ipc round committed, then a
# second process (wt_consumer_check, libwt_consumer) acquires the version
# through its CUDA IPC handle and hashes every tensor; the hashes must be
# wt-ctl checksum's (the server's own digests of its store). Then the
# export benchmark's host-to-device part from a registered mapping.
export_rc=0
export_checks() {
  local dir=$logs/export
  mkdir -p "$dir" && chmod 700 "$dir"
  "$server" --listen 127.0.0.1:0 --device cuda:0 --model synthetic:llama-256m \
    --export "$dir/export.sock" >"$logs/export-server.out" 2>"$logs/export-server.log" &
  spid=$!
  addr=""
  local i
  for ((i = 0; i < 600; i++)); do
    addr=$(sed -n 's/.* listening on //p' "$logs/export-server.out" 2>/dev/null | head -n1 || true)
    [ -n "$addr" ] && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$addr" ]; then
    step "export device version" "FAILED: wt-server did not serve (export-server.log)"
    export_rc=1
    return
  fi
  if timeout 120 "$push" --server "$addr" --backend ipc --device cuda:0 \
       --verify --quiet --data-timeout 10 >"$logs/export-push.log" 2>&1 &&
     timeout 60 "$consumer_check" "$dir/export.sock" --acquires 3 \
       >"$logs/export-consumer.log" 2>&1 &&
     "$ctl" --server "$addr" checksum --algo sha256 >"$logs/export-checksum.log" 2>&1; then
    local want got
    want=$(awk '{print $2, $1}' "$logs/export-checksum.log" | sort)
    got=$(awk '$1 == "tensor" {print $2, $3}' "$logs/export-consumer.log" | sort)
    if [ -n "$got" ] && [ "$want" = "$got" ]; then
      step "export device version (CUDA IPC)" "$(wc -l <<<"$got") tensors hashed by a second process = wt-ctl checksum; $(tail -n1 "$logs/export-consumer.log")"
    else
      step "export device version (CUDA IPC)" "FAILED: hashes differ (export-consumer.log, export-checksum.log)"
      export_rc=1
    fi
  else
    step "export device version (CUDA IPC)" "FAILED (export-push.log, export-consumer.log: $(tail -n1 "$logs/export-consumer.log" 2>/dev/null | cut -c1-80))"
    export_rc=1
  fi
  kill -TERM "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  if [ -x "$export_ref" ]; then
    BUILD_DIR=${bindir:-$root/.devpack-none} DEVICE=cuda:0 MODEL=bench-1g \
      SERVER_BIN=$server PUSH_BIN=$push EXPORT_REF_BIN=$export_ref \
      timeout 120 bash bench/export_bench.sh >"$logs/export-bench.log" 2>&1
    local erc=$?
    cat "$logs/export-bench.log"
    step "export bench h2d registered/pinned" "$(sed -n 's/^| ratio registered\/pinned *| \(.*\) |$/\1/p' "$logs/export-bench.log") (rc $erc)"
    step "export bench read mapping/private" "$(sed -n 's/^| ratio mapping\/private *| \(.*\) |$/\1/p' "$logs/export-bench.log")"
  fi
}

# The gpu suite.
timeout 180 "$tests" --suite gpu >"$logs/gpu-suite.log" 2>&1
rc=$?
cat "$logs/gpu-suite.log"
counts=$(awk '/^ +tests +[0-9]/{print "run " $3 ", passed " $4 ", failed " $5}' "$logs/gpu-suite.log")
skipped=$(grep -c "skipped:" "$logs/gpu-suite.log")
step "gpu suite" "${counts:-no summary} (rc $rc; $skipped skipped)"
# 77: the whole suite skipped (no CUDA device); the step above says so.
[ "$rc" -eq 77 ] && rc=0
if grep -q "skipped: .*no CUDA device" "$logs/gpu-suite.log"; then
  step "gpu bench" "not run: $(grep -m1 -o 'no CUDA device.*' "$logs/gpu-suite.log")"
  bench_rc=0
else
  SERVER_BIN=$server PUSH_BIN=$push timeout 240 bash bench/gpu_bench.sh \
    >"$logs/gpu-bench.log" 2>&1
  bench_rc=$?
  cat "$logs/gpu-bench.log"
  ratio=$(sed -n 's/^ratio device\/host *//p' "$logs/gpu-bench.log")
  step "gpu bench (device/host, median)" "${ratio:-no ratio} (rc $bench_rc)"
  ipc_checks
  ucx_device_checks
  export_checks
  nccl_checks
  if [ -n "${REF_BIN:-}" ] || [ -x "${bindir:-/nonexistent}/bench/wt-bench-ipc-ref" ]; then
    REF_BIN=${REF_BIN:-$bindir/bench/wt-bench-ipc-ref} SERVER_BIN=$server \
      PUSH_BIN=$push RUNS=3 timeout 200 bash bench/ipc_bench.sh \
      >"$logs/ipc-bench.log" 2>&1
    ipc_bench_rc=$?
    cat "$logs/ipc-bench.log"
    step "ipc bench (wt/cudaMemcpy, 8 GiB)" "$(sed -n 's/^ratio wt\/reference *//p' "$logs/ipc-bench.log") (rc $ipc_bench_rc)"
    step "ipc packed bench (wt/cudaMemcpy)" "$(sed -n 's/^ratio packed\/reference *//p' "$logs/ipc-bench.log")"
    step "ipc per tensor (10k x 64 B)" "$(sed -n 's/^per tensor[^0-9]*//p' "$logs/ipc-bench.log" | cut -c1-60)"
  else
    step "ipc bench" "not run: no wt-bench-ipc-ref in this build or pack"
  fi
fi
step "wall time" "$(( $(date +%s) - t_start )) s"
echo
cat "$logs/table.txt"
[ "$rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$ipc_rc" -eq 0 ] &&
  [ "$ucx_rc" -eq 0 ] && [ "$nccl_rc" -eq 0 ] && [ "$export_rc" -eq 0 ]
