"""A tiny Llama made here (no model hub): a transformers config with random
float32 weights and a word-level tokenizer built with `tokenizers`; the
reference greedy tokens of a set of weights, computed with transformers.

Used by the real-vLLM tests (test_vllm_*.py) and bench/vllm_bench.sh:

    python tiny_llama.py DIR [--hidden 128 --layers 2 --vocab 512]
"""

from __future__ import annotations

import json
import os
import sys

VOCAB = 512


def make(path: str, *, hidden: int = 128, layers: int = 2, vocab: int = VOCAB,
         intermediate: int | None = None, seed: int = 0) -> str:
    """Writes a Llama checkpoint (config.json, model.safetensors, tokenizer)
    to `path` and returns it."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    os.makedirs(path, exist_ok=True)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden,
                      intermediate_size=intermediate or 2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                      torch_dtype="float32")
    model = LlamaForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(path, safe_serialization=True)
    words = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(3, vocab):
        words[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(path)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    return path


def random_weights(path: str, seed: int) -> dict:
    """New float32 weights for the model at `path`, one numpy array per
    checkpoint name (the layout of model.safetensors), scaled as at init."""
    import numpy as np
    from safetensors.numpy import load_file
    base = load_file(os.path.join(path, "model.safetensors"))
    rng = np.random.default_rng(seed)
    out = {}
    for name, a in base.items():
        if name.endswith("norm.weight"):
            out[name] = (1.0 + 0.1 * rng.standard_normal(a.shape)).astype(np.float32)
        else:
            out[name] = (0.05 * rng.standard_normal(a.shape)).astype(np.float32)
    return out


def reference_tokens(path: str, weights: dict, prompt_ids: list, n: int) -> list:
    """Greedy tokens of `weights` (float32, plain transformers on CPU) after
    `prompt_ids`: what vLLM must generate once it serves them."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig.from_pretrained(path)
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    state = {k: torch.from_numpy(v) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("rotary_emb.inv_freq")]
    assert not missing and not unexpected, (missing, unexpected)
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False,
                             eos_token_id=None, pad_token_id=0,
                             min_new_tokens=n)
    return out[0, len(prompt_ids):].tolist()


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--intermediate", type=int, default=None)
    a = ap.parse_args()
    print(make(a.dir, hidden=a.hidden, layers=a.layers, vocab=a.vocab,
               intermediate=a.intermediate))
    sys.exit(0)
