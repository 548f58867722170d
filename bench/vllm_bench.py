"""vllm_bench.py (run by bench/vllm_bench.sh in vLLM's venv): a real vLLM
(CPU build) serving a Llama made here, updated through wt, against vLLM's
own reload of the same weights from a local safetensors file, in the same
run.

Per round (the first apart, as set-up):
- wt: send (the trainer's push to wt-server; vLLM keeps generating), then
  load_on_vllm (pause, every worker loads from the export, resume):
  send_to_loaded_s = push + load; pause_s = how long generation was paused.
- ref: the same weights written to a safetensors file beforehand (not
  counted), then vLLM's reload_weights(weights_path=...) through
  /collective_rpc, paused the same way: pause_s.

Prints one line per model and round kind, then the summary line
`vllm: model=NAME bytes=B wt_pause_s=P ref_pause_s=R pause_ratio=P/R
send_to_loaded_s=S` per model (medians of the steady rounds).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "tests"))

import wt_transfer as wt  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402
from wt_transfer.vllm import load_on_vllm  # noqa: E402

from conftest import Server  # noqa: E402
from tiny_llama import make, random_weights  # noqa: E402
from vllm_support import VllmServer, prompt_ids  # noqa: E402


def bench(name: str, rounds: int, **shape) -> str:
    work = tempfile.mkdtemp(prefix=f"wt-vllm-bench-{name}-")
    os.chmod(work, 0o700)
    model = make(os.path.join(work, "model"), **shape)
    nbytes = os.path.getsize(os.path.join(model, "model.safetensors"))
    sock = os.path.join(work, "export.sock")
    server = Server(["--model", os.path.join(model, "model.safetensors"), "--no-auth",
                     "--memory", "shared", "--export", sock])
    vllm = VllmServer(model, ["--worker-extension-cls",
                              "wt_transfer.vllm.WtWorkerExtension"], start_timeout=900)
    client = wt.Client(server.addr)
    rows = {"wt_pause": [], "wt_send": [], "wt_total": [], "ref_pause": []}
    try:
        vllm.greedy(prompt_ids(1))
        for r in range(rounds + 1):
            w = random_weights(model, 10 + r)
            eng = wt.WeightTransferTrainerFactory.trainer_init(
                "grpc", None, None, client=client, source=wt.ArraySource(w))
            t0 = time.perf_counter()
            eng.send_weights(f"b-{r}")
            t1 = time.perf_counter()
            out = load_on_vllm(vllm.url, sock, f"b-{r}")[vllm.url]
            t2 = time.perf_counter()
            eng.shutdown()
            # the reference: vLLM's reload of the same weights from a file
            ref_dir = os.path.join(work, f"ref-{r}")
            os.makedirs(ref_dir)
            for f in os.listdir(model):
                if f != "model.safetensors":
                    shutil.copy(os.path.join(model, f), ref_dir)
            save_file(w, os.path.join(ref_dir, "model.safetensors"))
            vllm.post("/pause?mode=wait")
            t3 = time.perf_counter()
            try:
                vllm.post("/collective_rpc", {"method": "reload_weights",
                                              "kwargs": {"weights_path": ref_dir},
                                              "timeout": 600}, timeout=700)
            finally:
                t4 = time.perf_counter()
                vllm.post("/resume")
            shutil.rmtree(ref_dir)
            kind = "first" if r == 0 else "steady"
            print(f"  {name} round {r} ({kind}): wt send {t1 - t0:.3f} s, load "
                  f"{t2 - t1:.3f} s (paused {out['pause_s']:.3f} s, in the worker "
                  f"{out['results'][0]['seconds']:.3f} s); ref reload paused "
                  f"{t4 - t3:.3f} s", flush=True)
            if r:
                rows["wt_pause"].append(out["pause_s"])
                rows["wt_send"].append(t1 - t0)
                rows["wt_total"].append(t2 - t0)
                rows["ref_pause"].append(t4 - t3)
    finally:
        client.close()
        vllm.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    return (f"vllm: model={name} bytes={nbytes} wt_pause_s={med['wt_pause']:.4f} "
            f"ref_pause_s={med['ref_pause']:.4f} "
            f"pause_ratio={med['wt_pause'] / med['ref_pause']:.2f} "
            f"send_to_loaded_s={med['wt_total']:.4f} send_s={med['wt_send']:.4f}")


def main() -> None:
    rounds = int(os.environ.get("ROUNDS", "5"))
    lines = [bench("tiny", rounds)]
    if os.environ.get("LARGE", "1") != "0":
        # about 1 GiB of float32: hidden 1024, 28 layers
        lines.append(bench("1g", max(2, rounds // 2), hidden=1024, layers=28,
                           intermediate=2048))
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
