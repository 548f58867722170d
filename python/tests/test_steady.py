"""A trainer that stays up: 200 grpc rounds from Python, RSS flat within 5%
after warm-up in the trainer process and in the server."""

import pathlib

import wt_transfer as wt
from conftest import model_tensors


def rss_kib() -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_rss_flat_over_200_rounds(server):
    with wt.Client(server.addr) as client:
        tensors = model_tensors(client.parameters(), 5)
        engine = wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, None, client=client, source=wt.ArraySource(tensors))
        for _ in range(20):
            engine.send_weights()
        mine, theirs = rss_kib(), server.rss_kib()
        for _ in range(180):
            engine.send_weights()
        mine2, theirs2 = rss_kib(), server.rss_kib()
        engine.shutdown()
        assert client.version().sequence == 200
        print(f"\n  RSS after 20 and 200 rounds: trainer {mine} -> {mine2} KiB, "
              f"server {theirs} -> {theirs2} KiB")
        assert mine2 <= mine * 1.05, (mine, mine2)
        assert theirs2 <= theirs * 1.05, (theirs, theirs2)
