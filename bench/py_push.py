"""The Python side of bench/python_bench.sh: the tensors of a safetensors
checkpoint as numpy views of its mapping (no copy, the same page-cache
pages wt-push's checkpoint source hands out), ROUNDS rounds through one
trainer engine of `wt_transfer`; prints "first S median S best S worst S
bytes B tensors N".

  py_push.py ADDR CKPT ROUNDS BACKEND [OPTION=VALUE ...]
"""
import json
import statistics
import struct
import sys
import time

import numpy as np

import wt_transfer as wt

addr, ckpt, rounds, backend = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
config = dict(kv.split("=", 1) for kv in sys.argv[5:])
with open(ckpt, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
mm = np.memmap(ckpt, dtype=np.uint8, mode="r")
base = 8 + n
kinds = {"F16": np.float16, "F32": np.float32, "BF16": np.uint16}
tensors = {}
for name, v in header.items():
    if name == "__metadata__":
        continue
    s, e = v["data_offsets"]
    a = mm[base + s:base + e].view(kinds[v["dtype"]]).reshape(v["shape"])
    tensors[name] = wt.view(a, "bfloat16") if v["dtype"] == "BF16" else a
total = sum(int(np.prod(v["shape"])) * np.dtype(kinds[v["dtype"]]).itemsize
            for k, v in header.items() if k != "__metadata__")
client = wt.Client([addr], data_timeout=120)
engine = wt.WeightTransferTrainerFactory.trainer_init(
    backend, config or None, None, client=client, source=wt.ArraySource(tensors))
secs = []
for i in range(rounds):
    t0 = time.perf_counter()
    engine.send_weights(f"py-{i}")
    secs.append(time.perf_counter() - t0)
steady = secs[1:] or secs
print(f"first {secs[0]:.4f} median {statistics.median(steady):.4f} "
      f"best {min(steady):.4f} worst {max(steady):.4f} bytes {total} "
      f"tensors {len(tensors)}")
engine.shutdown()
client.close()
