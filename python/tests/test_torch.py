"""The same rounds from torch tensors, where torch is importable (not in CI)."""

import hashlib

import pytest

import wt_transfer as wt

torch = pytest.importorskip("torch", reason="torch is not installed here (CI has numpy only)")


def test_rounds_from_torch(server):
    with wt.Client(server.addr) as client:
        params = client.parameters()
        gen = torch.Generator().manual_seed(0)
        tensors = {p["name"]: torch.randn(p["shape"], generator=gen).to(
            getattr(torch, p["dtype"])) for p in params}
        engine = wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, None, client=client, source=wt.ArraySource(tensors))
        for _ in range(3):
            engine.send_weights()
        want = {n: hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()
                for n, t in tensors.items()}
        assert client.checksums() == want
        engine.shutdown()
