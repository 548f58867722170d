#!/usr/bin/env bash
# multirank_bench.sh: many trainer ranks, one version (docs/multirank.md).
# The same model, M = RANKS (default 4) torch CPU ranks on gloo under
# FSDP2, sent in one run two ways to one wt-server:
#   sharded: every rank sends its own shards (wt.ShardedTrainer);
#   gather:  full_tensor() of every parameter (an all-gather on every
#            rank), then rank 0 sends the whole model as one source.
# Reports the median steady-state round time of each (ROUNDS rounds after
# one warm-up) and rank 0's peak memory during each phase above its memory
# before the model was built. Model: LAYERS (default 12) Linear(DIM, DIM)
# float32 layers (DIM default 2048: 192 MiB). BACKEND: grpc (default) or
# ucx. SERVERS (default 1): wt-servers, each sent the whole model. Needs torch: PYTHON (default: the vLLM CPU venv of
# scripts/install-vllm.sh, which has it) with wt_transfer installed (this
# script installs the build's). Not a test; CI does not run it. Last line:
#   multirank: ranks=M servers=N bytes=B gather_s=G sharded_s=S time_ratio=S/G rank0_peak_ratio=R
set -euo pipefail
cd "$(dirname "$0")/.."
bench=multirank_bench
build=${BUILD_DIR:-build}
ranks=${RANKS:-4}
layers=${LAYERS:-12}
dim=${DIM:-2048}
rounds=${ROUNDS:-5}
backend=${BACKEND:-grpc}
nservers=${SERVERS:-1}
work=$(mktemp -d /tmp/wt-multirank-bench.XXXXXX)
# shellcheck source=bench/lib.sh
. bench/lib.sh
trap bench_cleanup EXIT

python=${PYTHON:-}
if [ -z "$python" ]; then
  python="$(bash scripts/install-vllm.sh | tail -n1)/bin/python"
fi
"$python" -c 'import torch' 2>/dev/null ||
  { echo "$bench: $python has no torch (set PYTHON)" >&2; exit 1; }
bench_build "$build" "" wt-server wt_client
cmake --install "$build" --prefix "$build/prefix" >/dev/null
"$python" -m pip install -q ./python -Ccmake.define.WT_PYTHON_PREFIX="$PWD/$build/prefix" \
  >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }

"$python" bench/multirank_bench.py model "$work/model.safetensors" "$layers" "$dim"
server=""
for i in $(seq 1 "$nservers"); do
  start_bg "server$i" "$build/server/wt-server" --listen 127.0.0.1:0 --no-auth \
    --log-level warn --model "$work/model.safetensors"
  server=${server:+$server,}$bg_addr
done
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rank_pids=()
for r in $(seq 0 $((ranks - 1))); do
  RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
    "$python" bench/multirank_bench.py run "$server" "$work/report.json" \
    "$layers" "$dim" "$rounds" "$backend" >"$work/rank-$r.log" 2>&1 &
  rank_pids+=($!)
done
status=0
for p in "${rank_pids[@]}"; do wait "$p" || status=1; done
if [ $status -ne 0 ]; then
  tail -n 30 "$work"/rank-*.log >&2
  exit 1
fi
"$python" - "$work/report.json" "$backend" "$nservers" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{'way':<8} {'round (median)':>15} {'rank 0 peak above its base':>28}")
for way in ("gather", "sharded"):
    print(f"{way:<8} {r[way + '_s']:>13.3f} s {r[way + '_peak_kib'] / 1024:>24.1f} MiB")
print(f"backend {sys.argv[2]}; model {r['bytes'] / 2**20:.0f} MiB over {r['ranks']} ranks")
print(f"multirank: ranks={r['ranks']} servers={sys.argv[3]} bytes={r['bytes']} gather_s={r['gather_s']:.3f} "
      f"sharded_s={r['sharded_s']:.3f} time_ratio={r['sharded_s'] / r['gather_s']:.2f} "
      f"rank0_peak_ratio={r['sharded_peak_kib'] / r['gather_peak_kib']:.2f}")
PY
