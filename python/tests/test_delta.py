"""Delta rounds from Python (docs/delta.md): with {"delta": "on"} rounds
after the first send only what changed, the server's digests are
hashlib's of the arrays every round, and a failed round makes the next one
full."""

import numpy as np
import pytest

import wt_transfer as wt
from conftest import digests, has_backend, model_tensors


def step(tensors, rng, fraction=0.02):
    for t in tensors.values():
        a = t.array if isinstance(t, wt.view) else t
        flat = a.reshape(-1).view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)
        idx = rng.choice(flat.size, size=max(1, int(flat.size * fraction)),
                         replace=False)
        flat[idx] ^= 1


@pytest.mark.parametrize("backend,staging", [("grpc", "shadow"),
                                             ("grpc", "inplace"),
                                             ("ucx", "shadow"),
                                             ("ucx", "inplace")])
def test_delta_rounds(start_server, backend, staging):
    s = start_server("--model", "synthetic:small", "--no-auth", "--workers", "2",
                     "--staging", staging)
    with wt.Client(s.addr) as client:
        if not has_backend(client, backend):
            pytest.skip(f"this wt-server was built without {backend}")
        tensors = model_tensors(client.parameters(), 1)
        config = {"delta": "on"}
        if backend == "ucx":
            config["transports"] = "tcp"
        engine = wt.WeightTransferTrainerFactory.trainer_init(
            backend, config, None, client=client,
            source=wt.ArraySource(tensors))
        rng = np.random.default_rng(0)
        try:
            engine.send_weights("r0")
            first = engine.delta_stats()
            assert first["full_servers"] == 1 and first["delta_servers"] == 0
            for r in range(1, 6):
                step(tensors, rng)
                engine.send_weights(f"r{r}")
                st = engine.delta_stats()
                assert st["delta_servers"] == 1, st
                assert st["delta_wire_bytes"] * 4 < st["raw_bytes"], st
                assert client.checksums() == digests(tensors), r
            # An aborted round: the next one is full, then deltas again.
            step(tensors, rng)
            client.start_weight_update()
            from wt_transfer.sources import CSource
            from wt_transfer import _lib
            with CSource(engine.source) as src:
                _lib.check(_lib.lib().wt_sync_client_update(
                    engine._client, engine._trainer, src.handle, None, None))
            client.abort_weight_update("the test")
            assert client.version().version == "r5"
            engine.send_weights("r6")
            assert engine.delta_stats()["full_servers"] == 1
            assert client.checksums() == digests(tensors)
            step(tensors, rng)
            engine.send_weights("r7")
            assert engine.delta_stats()["delta_servers"] == 1
            assert client.checksums() == digests(tensors)
        finally:
            engine.shutdown()


def test_delta_option_refused():
    with pytest.raises(wt.InvalidArgument, match="option delta: 'sometimes'"):
        wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", {"delta": "sometimes"}, None, client=object(),
            source=wt.ArraySource({}))
