"""lora_bench.py (run by bench/lora_bench.sh in vLLM's venv): LoRA adapters
as rounds into a real vLLM (CPU build, --enable-lora), against the same
adapter written to a directory and loaded by vLLM from it, in the same run.

Per case, one wt-server (--memory shared --export) holding the model and
adapter set "a", one `vllm serve --enable-lora` beside it, one trainer
(client and grpc engine) that stays up, its arrays refilled each round
(the trainer's step, not counted). Per round (the first apart, as set-up),
the same new adapter tensors both ways, in alternating order:

- wt: send_weights (the adapter round: push to the wt-server, committed),
  then load_adapter (GetServerInfo for the set's export, version, sequence
  and alpha; POST /v1/load_lora_adapter {"lora_name": "a", "lora_path":
  "wt:...", "load_inplace": true}: vLLM's worker loads the version from the
  export, from memory): wt_s = send + load.
- file: the same tensors written with safetensors (numpy) as
  adapter_model.safetensors beside PEFT's adapter_config.json in a new
  directory of the run's tmp folder (vLLM keys an adapter by its path; the
  page cache, no fsync), then POST /v1/load_lora_adapter {"lora_name":
  "file-a", "lora_path": DIR, "load_inplace": true}: file_s = save + load.

"vLLM serves the new adapter" is the load route's return: vLLM's frontend
answers once its engine has the adapter loaded, and every request admitted
after that gets it. After each round (not counted) one greedy request per
adapter name confirms it: both names generate the same tokens (the same
tensors; anything else fails the run), and the line says whether they
changed from the round before.

Prints one line per case and round, then per case the medians of the steady
rounds, `  CASE: rank=R bytes=B wt_s=W file_s=F ratio=W/F`, and last
`lora: rank=R bytes=B wt_s=W file_s=F ratio=W/F` for the 100 MB adapter.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "tests"))

import numpy as np  # noqa: E402
import wt_transfer as wt  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402
from wt_transfer.lora import adapter_init_info, load_adapter  # noqa: E402

from conftest import Server  # noqa: E402
from lora_support import adapter_tensors  # noqa: E402
from tiny_llama import make  # noqa: E402
from vllm_support import VllmServer, prompt_ids  # noqa: E402

ALPHA = 16.0
ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
TIMEOUT = 600.0


def targets(model: str, modules) -> dict:
    """{module as in `self_attn.q_proj`: (out, in)} of the Llama at
    `model` for the Llama projection names `modules`."""
    with open(os.path.join(model, "config.json")) as f:
        c = json.load(f)
    h, inter = c["hidden_size"], c["intermediate_size"]
    kv = c["num_key_value_heads"] * (h // c["num_attention_heads"])
    shapes = {"q_proj": (h, h), "k_proj": (kv, h), "v_proj": (kv, h),
              "o_proj": (h, h), "gate_proj": (inter, h), "up_proj": (inter, h),
              "down_proj": (h, inter)}
    return {(f"self_attn.{m}" if m in ATTN else f"mlp.{m}"): shapes[m]
            for m in modules}


def write_adapter_dir(d: str, tensors: dict, rank: int, modules, model: str) -> None:
    """What PEFT's save_pretrained writes (and vLLM's
    PEFTHelper.from_local_dir and LoRAModel.from_local_checkpoint read)."""
    os.makedirs(d)
    save_file(tensors, os.path.join(d, "adapter_model.safetensors"))
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM",
                   "base_model_name_or_path": model, "r": rank,
                   "lora_alpha": ALPHA, "lora_dropout": 0.0,
                   "target_modules": sorted(modules), "bias": "none",
                   "fan_in_fan_out": False, "inference_mode": True,
                   "modules_to_save": None, "use_rslora": False,
                   "use_dora": False, "init_lora_weights": True}, f)


def load_dir(vllm: VllmServer, name: str, d: str) -> str:
    """vLLM's load route for the adapter directory `d` under `name`, in
    place of the one it serves under that name; vLLM's text."""
    req = urllib.request.Request(
        vllm.url + "/v1/load_lora_adapter", method="POST",
        data=json.dumps({"lora_name": name, "lora_path": d,
                         "load_inplace": True}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        return r.read().decode()


def greedy(vllm: VllmServer, name: str, prompt: list, n: int = 4) -> list:
    out = vllm.post("/v1/completions", {
        "model": name, "prompt": prompt, "max_tokens": n, "min_tokens": n,
        "temperature": 0, "return_token_ids": True}, timeout=TIMEOUT)
    return out["choices"][0]["token_ids"]


def bench(name: str, rounds: int, rank: int, modules, max_lora_rank: int,
          **shape) -> str:
    work = tempfile.mkdtemp(prefix=f"wt-lora-bench-{name}-")
    os.chmod(work, 0o700)
    model = make(os.path.join(work, "model"), **shape)
    tg = targets(model, modules)
    sock = os.path.join(work, "export.sock")
    server = Server(["--model", os.path.join(model, "model.safetensors"), "--no-auth",
                     "--memory", "shared", "--export", sock])
    vllm = client = engine = None
    rows = {k: [] for k in ("wt", "wt_send", "wt_load", "file", "file_save",
                            "file_load")}
    try:
        vllm = VllmServer(model, ["--enable-lora", "--max-lora-rank", str(max_lora_rank),
                                  "--max-loras", "2", "--max-cpu-loras", "4"],
                          start_timeout=900,
                          env_extra={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"})
        print(f"  {name}: vllm serve --enable-lora --max-lora-rank {max_lora_rank} "
              f"started in {vllm.start_s:.1f} s", flush=True)
        prompt = prompt_ids(7)
        base = greedy(vllm, vllm.model, prompt)
        arrays = {k: np.array(v) for k, v in
                  adapter_tensors(model, tg, rank, seed=100).items()}
        nbytes = sum(a.nbytes for a in arrays.values())
        client = wt.Client(server.addr, data_timeout=TIMEOUT)
        engine = wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, adapter_init_info("a", ALPHA), client=client,
            source=wt.ArraySource(arrays))
        prev_tokens, prev_dir = base, None
        for r in range(rounds + 1):
            # the trainer's step (not counted): new values in its arrays
            for k, v in adapter_tensors(model, tg, rank, seed=101 + r).items():
                np.copyto(arrays[k], v)
            t = {}

            def wt_round():
                t0 = time.perf_counter()
                version = engine.send_weights(f"a-{r}")
                t1 = time.perf_counter()
                load_adapter(vllm.url, client, version, timeout=TIMEOUT)
                t2 = time.perf_counter()
                t.update(wt=t2 - t0, wt_send=t1 - t0, wt_load=t2 - t1)

            def file_round():
                d = os.path.join(work, f"file-{r}")
                t0 = time.perf_counter()
                write_adapter_dir(d, arrays, rank, modules, model)
                t1 = time.perf_counter()
                load_dir(vllm, "file-a", d)
                t2 = time.perf_counter()
                t.update(file=t2 - t0, file_save=t1 - t0, file_load=t2 - t1)
                return d

            if r % 2 == 0:
                wt_round()
                d = file_round()
            else:
                d = file_round()
                wt_round()
            # not counted: both names serve this round's adapter
            got = greedy(vllm, "a", prompt)
            got_file = greedy(vllm, "file-a", prompt)
            if got != got_file:
                raise AssertionError(f"{name} round {r}: adapter 'a' (wt) generates "
                                     f"{got}, 'file-a' (file) {got_file}")
            changed = "changed" if got != prev_tokens else "UNCHANGED"
            prev_tokens = got
            if prev_dir:
                shutil.rmtree(prev_dir)
            prev_dir = d
            kind = "first" if r == 0 else "steady"
            order = "wt, file" if r % 2 == 0 else "file, wt"
            print(f"  {name} round {r} ({kind}, {order}): wt {t['wt']:.4f} s (send "
                  f"{t['wt_send']:.4f} s, load {t['wt_load']:.4f} s); file "
                  f"{t['file']:.4f} s (save {t['file_save']:.4f} s, load "
                  f"{t['file_load']:.4f} s); tokens {got} ({changed})", flush=True)
            if r:
                for k, v in t.items():
                    rows[k].append(v)
    finally:
        if engine is not None:
            engine.shutdown()
        if client is not None:
            client.close()
        if vllm is not None:
            vllm.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"  {name} medians: wt send {med['wt_send']:.4f} s + load "
          f"{med['wt_load']:.4f} s; file save {med['file_save']:.4f} s + load "
          f"{med['file_load']:.4f} s", flush=True)
    line = (f"rank={rank} bytes={nbytes} wt_s={med['wt']:.4f} "
            f"file_s={med['file']:.4f} ratio={med['wt'] / med['file']:.2f}")
    print(f"  {name}: {line}", flush=True)
    return line


def main() -> None:
    rounds = int(os.environ.get("ROUNDS", "5"))
    bench("tiny", rounds, 16, ATTN, 16)
    # 12 layers x 256 x (512+512 + 512+256 + 512+256 + 512+512 + 512+1024
    # x 2 + 1024+512) x 4 bytes = 100,663,296 bytes
    line = bench("100mb", rounds, 256, ATTN + MLP, 256, hidden=512, layers=12)
    print(f"lora: {line}")


if __name__ == "__main__":
    main()
