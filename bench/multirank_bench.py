"""One rank of bench/multirank_bench.sh (torch, gloo, CPU): the same model
sent two ways in one run, on the same server.

  sharded: every rank sends its own FSDP2 shards (wt.ShardedTrainer);
  gather:  every rank calls full_tensor() on every parameter (an all-gather,
           as a one-source trainer must), and rank 0 sends the full model
           through a one-source trainer (wt.ArraySource).

Each phase runs ROUNDS rounds after one warm-up round; rank 0 reports the
median steady-state round time and its peak resident memory during the
phase above its memory before the model was built (VmHWM, reset through
/proc/self/clear_refs before each phase). Environment: RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT.

    python multirank_bench.py model PATH LAYERS DIM   # the server's model
    python multirank_bench.py run SERVER OUT LAYERS DIM ROUNDS BACKEND
"""

import datetime
import json
import os
import statistics
import struct
import sys
import time

import torch
import torch.distributed as dist
from torch import nn


def build(layers, dim):
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(dim, dim, bias=False) for _ in range(layers)])


def rss_kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def write_model(path, layers, dim):
    header, at = {}, 0
    for name, t in build(layers, dim).state_dict().items():
        n = t.numel() * 4
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [at, at + n]}
        at += n
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + at)  # zeros: only the layout matters


def run(server, out, layers, dim, rounds, backend):
    import wt_transfer as wt
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    base_kib = rss_kib("VmRSS")  # before the model: torch, the group
    model = build(layers, dim)
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    report = {"ranks": world, "bytes": sum(
        p.numel() * p.element_size() for p in model.parameters())}

    def step():
        with torch.no_grad():
            for p in model.parameters():
                p.to_local().add_(0.001)

    def phase(name, send):
        dist.barrier()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM starts over from now
        times = []
        for i in range(rounds + 1):
            step()
            dist.barrier()
            t0 = time.perf_counter()
            send(f"{name}-{i}")
            dist.barrier()
            if i > 0:  # the first round sets things up
                times.append(time.perf_counter() - t0)
        report[name + "_s"] = statistics.median(times)
        report[name + "_peak_kib"] = rss_kib("VmHWM") - base_kib

    with wt.Client(server.split(",")) as client:
        sharded = wt.ShardedTrainer(backend, client, model.state_dict)
        phase("sharded", sharded.send_weights)
        sharded.shutdown()
        engine, held = None, {}
        if rank == 0:
            engine = wt.WeightTransferTrainerFactory.trainer_init(
                backend, None, None, client=client, source=wt.ArraySource(held))

        def gather_send(version):
            # Every rank takes part in the all-gathers; rank 0 sends.
            full = {k: v.full_tensor() for k, v in model.state_dict().items()}
            if rank == 0:
                held.update(full)
                engine.send_weights(version)
                held.clear()
            del full
        phase("gather", gather_send)
        if engine is not None:
            engine.shutdown()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(report, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "model":
        write_model(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        run(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
            int(sys.argv[6]), sys.argv[7])
