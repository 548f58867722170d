"""bench/inference_bench.sh's driver: RANKS stand-in inference ranks on one
host load each committed version of a wt-server's export (wt_transfer's
consumer and vLLM worker extension, load_weights reading every byte), the
trainer (wt-push) commits ROUNDS rounds; per round, the time from the
commit (the manifest's committed_unix_ms) until the last rank has loaded
it, against every rank reading a private buffer of the same size at once
(the reference, the same processes, right after).

  inference_bench.py ADDR SOCKET WT_PUSH MODEL RANKS ROUNDS
"""
import multiprocessing as mp
import statistics
import subprocess
import sys
import time

import numpy as np


class ReadingModel:
    """load_weights reads every byte (a sum of 64-bit words), as a copy into
    the engine's parameters would touch them."""

    def __init__(self):
        self.sink = 0

    def load_weights(self, weights):
        for _, a in weights:
            b = a.view(np.uint8).reshape(-1)
            n = b.size // 8 * 8
            self.sink += int(b[:n].view(np.uint64).sum(dtype=np.uint64)) & 0xff


def rank(sock, rounds, q, go):
    from wt_transfer.vllm import WtWorkerExtension

    class Worker(WtWorkerExtension):
        def __init__(self):
            self.model = ReadingModel()

    w = Worker()
    import wt_transfer.consumer as wtc
    c = wtc.open(sock)
    seq = 0
    private = None
    for r in range(rounds):
        with c.acquire(after_sequence=seq, timeout=300) as t:
            seq = t.sequence
            committed = t.committed_unix_ms / 1000.0
            w.model.load_weights(t.items())
            loaded = time.time()
            total = sum(a.nbytes for a in t.values())
        if private is None:
            private = np.ones(total // 8, dtype=np.uint64)
        q.put(("loaded", r, loaded - committed))
        go.wait()  # every rank reads its private buffer at once
        t0 = time.perf_counter()
        _ = int(private.sum(dtype=np.uint64))
        q.put(("private", r, time.perf_counter() - t0))
    c.close()


def main():
    addr, sock, push, model, nranks, rounds = sys.argv[1:7]
    nranks, rounds = int(nranks), int(rounds)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    gos = [ctx.Event() for _ in range(rounds)]
    # one Event per round, shared by every rank
    procs = [ctx.Process(target=_rank_rounds, args=(sock, rounds, q, gos))
             for _ in range(nranks)]
    for p in procs:
        p.start()
    time.sleep(2)  # the ranks connect and wait
    rows = []
    for r in range(rounds):
        subprocess.run([push, "--server", addr, "--synthetic", model, "--backend",
                        "grpc", "--version", f"inf-{r}", "--quiet"], check=True,
                       stdout=subprocess.DEVNULL)
        loaded = [q.get(timeout=600) for _ in range(nranks)]
        gos[r].set()
        private = [q.get(timeout=600) for _ in range(nranks)]
        lw = max(x[2] for x in loaded)
        pv = max(x[2] for x in private)
        rows.append((r, lw, pv))
    for p in procs:
        p.join(60)
    for r, lw, pv in rows:
        print(f"round {r} commit_to_all_loaded {lw:.3f} private_read_all {pv:.3f}")
    steady = rows[1:] or rows
    print(f"steady median commit_to_all_loaded {statistics.median(x[1] for x in steady):.3f} "
          f"private_read_all {statistics.median(x[2] for x in steady):.3f}")


def _rank_rounds(sock, rounds, q, gos):
    class Go:
        def __init__(self):
            self.r = 0

        def wait(self):
            gos[self.r].wait()
            self.r += 1
    rank(sock, rounds, q, Go())


if __name__ == "__main__":
    main()
