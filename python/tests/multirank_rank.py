"""One torch rank of test_torch_multirank.py (4 processes, gloo, CPU): a tiny
model under FSDP2's fully_shard, plus a bfloat16 tensor sharded on dimension
1 and a replicated one, sending every round through wt.ShardedTrainer.

    python multirank_rank.py model OUT.safetensors     # the servers' model
    python multirank_rank.py run --servers A,B --backend grpc --rounds 20 \\
        --out DIR [--kill-rank R --kill-round K] [--timeout-ms MS]

Environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun's). Each
committed round, rank 0 writes DIR/digests-N.json: the SHA-256 of every
tensor's full_tensor(), computed by torch apart from wt. A rank records its
outcome in DIR/rank-R.json.
"""

import argparse
import datetime
import hashlib
import json
import os
import signal
import struct
import sys
import time

import torch
import torch.distributed as dist
from torch import nn


# --size big: four 5120 x 5120 layers, about 400 MiB of float32, so that
# each rank's shard (about 100 MiB) is far over the flow-control windows
# between a rank and its servers (issue 45: two servers deadlocked at 50%
# once a rank's shard passed 12-16 MiB).
SIZES = {"tiny": (16, 24, 6, 3), "big": (5120, 5120, 5120, 5120, 5120)}


def build(size="tiny"):
    torch.manual_seed(0)
    dims = SIZES[size]
    layers = []
    for i in range(len(dims) - 1):
        layers += [nn.Linear(dims[i], dims[i + 1]), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    col = torch.randn(4, 10).to(torch.bfloat16)  # sharded on dimension 1
    rep = torch.randn(5)                         # replicated
    return model, col, rep


def full_state(model, col, rep):
    out = {k: v for k, v in model.state_dict().items()}
    out["extra.col"], out["extra.rep"] = col, rep
    return out


def sha(t) -> str:
    t = t.detach().contiguous()
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()


def write_model(path, size="tiny"):
    names = {"float32": "F32", "bfloat16": "BF16"}
    header, blobs, at = {}, [], 0
    for name, t in full_state(*build(size)).items():
        b = t.detach().contiguous().view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": names[str(t.dtype).split(".")[1]],
                        "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def run(a):
    import wt_transfer as wt
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    model, col, rep = build(a.size)
    x_dim = SIZES[a.size][0]
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    col = distribute_tensor(col, mesh, [Shard(1)])
    rep = distribute_tensor(rep, mesh, [Replicate()])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1234)
    result = {"rank": rank, "committed": []}
    out = os.path.join(a.out, f"rank-{rank}.json")

    def tensors():
        if a.kill_rank == rank and len(result["committed"]) == a.kill_round:
            os.kill(os.getpid(), signal.SIGKILL)  # mid-round: after its start
        return full_state(model, col, rep)

    client = wt.Client(a.servers.split(","))
    init_info = {"timeout_ms": a.timeout_ms} if a.timeout_ms else None
    trainer = wt.ShardedTrainer(a.backend, client, tensors, init_info=init_info)
    result["digest"] = trainer.digest
    result["boxes"] = [b["name"] for b in trainer.plan["ranks"][rank].get("boxes", [])]
    for step in range(a.rounds):
        if a.size == "big":
            # A step of the big model without its all-gathers (on gloo and
            # 2 cores they cost a minute): every shard moves, locally.
            with torch.no_grad():
                for prm in model.parameters():
                    prm.add_(0.25)
        else:
            x = torch.randn(8, x_dim, generator=gen)
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            col.add_(0.5)
            rep.mul_(1.5)
        t0 = time.monotonic()
        try:
            trainer.send_weights(f"step-{step}")
        except Exception as e:  # noqa: BLE001 - recorded for the test
            result.update(error=f"{type(e).__name__}: {e}",
                          error_after_s=time.monotonic() - t0)
            with open(out, "w") as f:
                json.dump(result, f)
            os._exit(3)  # the group has a dead rank: no more collectives
        result["committed"].append(f"step-{step}")
        # full_tensor() is a collective (every rank); rank 0 hashes. The
        # big model's digests: the last round's only (hashing 400 MiB a
        # round on 4 ranks is most of that test's time otherwise).
        if a.size == "big" and step != a.rounds - 1:
            continue
        full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v
                for k, v in full_state(model, col, rep).items()}
        if rank == 0:
            want = {k: sha(v) for k, v in full.items()}
            with open(os.path.join(a.out, f"digests-{step}.json"), "w") as f:
                json.dump(want, f)
    result["peak_rss_kib"] = int(open("/proc/self/status").read().split(
        "VmHWM:")[1].split()[0])
    with open(out, "w") as f:
        json.dump(result, f)
    trainer.shutdown()
    client.close()
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["model", "run"])
    p.add_argument("path", nargs="?")
    p.add_argument("--servers")
    p.add_argument("--backend", default="grpc")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--out")
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-round", type=int, default=-1)
    p.add_argument("--timeout-ms", type=int, default=0)
    a = p.parse_args()
    if a.what == "model":
        write_model(a.path, a.size)
    else:
        run(a)


if __name__ == "__main__":
    sys.exit(main())
