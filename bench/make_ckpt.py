"""Writes the benchmarks' safetensors checkpoints (once; random bytes):

  make_ckpt.py 1g PATH    1 GiB of float16: 7 layers of 4 x 8 MiB attention
                          and 3 x 32 MiB mlp weights, two 64 MiB embeddings
  make_ckpt.py 10k PATH   10,000 float32 tensors of 16 elements (64 bytes)
"""
import sys

import numpy as np
from safetensors.numpy import save_file

kind, path = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(1)
t = {}


def add(name, shape):
    n = int(np.prod(shape))
    t[name] = rng.integers(0, 1 << 16, n, dtype=np.uint16).view(
        np.float16).reshape(shape)


if kind == "1g":
    add("model.embed_tokens.weight", (32768, 1024))
    for i in range(7):
        p = f"model.layers.{i}."
        for w in ("q", "k", "v", "o"):
            add(p + f"self_attn.{w}_proj.weight", (2048, 2048))
        for w in ("gate", "up"):
            add(p + f"mlp.{w}_proj.weight", (8192, 2048))
        add(p + "mlp.down_proj.weight", (2048, 8192))
    add("lm_head.weight", (32768, 1024))
elif kind == "10k":
    for i in range(10000):
        t[f"t.{i:05d}"] = rng.standard_normal(16).astype(np.float32)
else:
    sys.exit(f"make_ckpt.py: unknown kind '{kind}' (1g, 10k)")
save_file(t, path)
