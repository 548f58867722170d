"""LoRA adapters for the real-vLLM LoRA test (test_vllm_lora.py): PEFT-named
tensors for the tiny Llama of tiny_llama.py, the reference a version must
generate (plain torch: the base weights with B @ A * alpha / r merged into
each target module, run by tiny_llama.reference_tokens), and wt-servers
that hold adapter versions and export them."""

from __future__ import annotations

import os

import numpy as np

PREFIX = "base_model.model."


def adapter_tensors(model_dir: str, targets: dict, rank: int, seed: int,
                    scale: float = 0.1) -> dict:
    """A random LoRA adapter of rank `rank` for every layer of the model at
    `model_dir`: {PEFT name: float32 array}. `targets` maps each target
    module (as in `self_attn.q_proj`) to its (out, in) features; a module
    the model lacks is named like any other."""
    import json
    with open(os.path.join(model_dir, "config.json")) as f:
        layers = json.load(f)["num_hidden_layers"]
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(layers):
        for module, (fout, fin) in targets.items():
            base = f"{PREFIX}model.layers.{i}.{module}"
            out[f"{base}.lora_A.weight"] = \
                (scale * rng.standard_normal((rank, fin))).astype(np.float32)
            out[f"{base}.lora_B.weight"] = \
                (scale * rng.standard_normal((fout, rank))).astype(np.float32)
    return out


def base_weights(model_dir: str) -> dict:
    from safetensors.numpy import load_file
    return load_file(os.path.join(model_dir, "model.safetensors"))


def merged_weights(base: dict, adapter: dict, alpha: float) -> dict:
    """The base weights with every module's LoRA delta merged in, as PEFT's
    merge does: W + B @ A * alpha / r (float64 products, float32 result)."""
    out = dict(base)
    for name, a in adapter.items():
        if not name.endswith(".lora_A.weight"):
            continue
        module = name[len(PREFIX):-len(".lora_A.weight")]
        b = adapter[name.replace(".lora_A.", ".lora_B.")]
        w = module + ".weight"
        delta = (b.astype(np.float64) @ a.astype(np.float64)) * (alpha / a.shape[0])
        out[w] = (base[w].astype(np.float64) + delta).astype(np.float32)
    return out


def reference(model_dir: str, weights: dict, prompt: list, n: int) -> list:
    """The greedy tokens of `weights` after `prompt`: plain torch
    (transformers' LlamaForCausalLM, float32, CPU), no vLLM."""
    from tiny_llama import reference_tokens
    return reference_tokens(model_dir, weights, prompt, n)


class AdapterSets:
    """Adapter sets on the base model's wt-server (docs/lora.md): one set per
    adapter name and tensor layout (a set's layout is fixed by its first
    round: the first layout of a name is the set of that name, another
    layout of it the set "<name>-<i>"), each with a trainer that stays up:
    one client and grpc trainer engine per set, its arrays refilled each
    round, as a trainer's own parameters are. Each set exports at the path
    GetServerInfo names."""

    def __init__(self, server, alpha: float) -> None:
        self.server = server
        self.alpha = alpha
        self.sets: dict = {}  # (name, layout) -> (set name, client, engine, arrays)

    def trainer(self, name: str, tensors: dict):
        import wt_transfer as wt
        from wt_transfer.lora import adapter_init_info
        layout = tuple((k, v.dtype.str, v.shape) for k, v in sorted(tensors.items()))
        key = (name, layout)
        if key not in self.sets:
            taken = sum(1 for n, _ in self.sets if n == name)
            set_name = name if taken == 0 else f"{name}-{taken}"
            arrays = {k: np.array(v) for k, v in tensors.items()}
            client = wt.Client(self.server.addr, data_timeout=60)
            engine = wt.WeightTransferTrainerFactory.trainer_init(
                "grpc", None, adapter_init_info(set_name, self.alpha),
                client=client, source=wt.ArraySource(arrays))
            self.sets[key] = (set_name, client, engine, arrays)
        return self.sets[key]

    def push(self, name: str, version: str, tensors: dict):
        """Commits `tensors` as version `version` of adapter `name`'s set:
        returns (export path, version, sequence) as the server reports
        them."""
        set_name, client, engine, arrays = self.trainer(name, tensors)
        for k, v in tensors.items():
            np.copyto(arrays[k], v)
        assert engine.send_weights(version) == version
        (a,) = [a for a in client.server_info()["adapters"] if a["name"] == set_name]
        assert a["weight_version"] == version, (a, version)
        assert client.version().sequence == a["sequence"]
        return a["export_path"], version, a["sequence"]

    def stop(self) -> None:
        for _, client, engine, _ in self.sets.values():
            engine.shutdown()
            client.close()
        self.sets.clear()
