"""Rounds from Python to a real wt-server: the bytes that arrive are the
numpy arrays' (hashlib's digests), over grpc and ucx, 20 rounds each on one
trainer engine; versions, watch, world size, checksums as the server says."""

import threading

import numpy as np
import pytest

import wt_transfer as wt
from conftest import digests, has_backend, model_tensors


@pytest.mark.parametrize("backend,config", [("grpc", None),
                                            ("ucx", {"transports": "tcp"})])
def test_twenty_rounds(server, backend, config):
    with wt.Client([server.addr]) as client:
        if not has_backend(client, backend):
            pytest.skip(f"this wt-server was built without {backend}")
        params = client.parameters()
        tensors = model_tensors(params, 0)
        source = wt.ArraySource(tensors)
        engine = wt.WeightTransferTrainerFactory.trainer_init(
            backend, config, None, client=client, source=source)
        try:
            for step in range(20):
                fresh = model_tensors(params, step + 1)
                for name, t in fresh.items():  # new values, same arrays
                    dst = tensors[name].array if isinstance(tensors[name], wt.view) else tensors[name]
                    src = t.array if isinstance(t, wt.view) else t
                    np.copyto(dst, src)
                version = engine.send_weights(f"{backend}-{step}")
                assert version == f"{backend}-{step}"
                assert client.checksums() == digests(tensors), f"round {step}"
                v = client.version()
                assert v.version == version and v.sequence == step + 1
        finally:
            engine.shutdown()


def test_protocol_and_extras(server):
    with wt.Client(server.addr) as client:
        assert client.get_world_size() == 2  # the trainer and one worker
        assert client.version().sequence == 0
        seen = []

        def watch():
            for v in client.watch(timeout=20):
                seen.append(v)
                if v.sequence >= 2:
                    return

        th = threading.Thread(target=watch)
        th.start()
        params = client.parameters()
        tensors = model_tensors(params, 7)
        engine = wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, {"timeout_ms": 20000}, client=client,
            source=wt.ArraySource(tensors))
        engine.send_weights()
        engine.send_weights()
        th.join(30)
        assert [v.version for v in seen if v.sequence] == ["round-1", "round-2"]
        sums = client.checksums([params[0]["name"]], algorithm="xxh3",
                                all_workers=True)
        assert list(sums) == [(params[0]["name"], 0)]
        info = client.server_info()
        assert info["weight_version"] == "round-2"
        # vLLM's four calls by hand: start, then abort (update_weights is
        # refused for grpc, which pushes), and the round is gone.
        client.start_weight_update()
        client.abort_weight_update("test")
        with pytest.raises(wt.FailedPrecondition, match="no round in progress"):
            client.finish_weight_update("never")
        engine.shutdown()


def test_default_tokens(start_server, tmp_path):
    """Secure by default: a server of this user writes its tokens where the
    client looks (the same runtime directory), and a client that does not
    look is refused."""
    import os
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path))
    os.chmod(tmp_path, 0o700)
    s = start_server("--model", "synthetic:tiny", env=env)
    with wt.Client(s.addr, runtime_base=str(tmp_path)) as c:
        assert c.server_info()["auth"] != "none"
        assert c.get_world_size() == 2
    with wt.Client(s.addr, token_discovery=False) as c:
        with pytest.raises(wt.Unauthenticated):
            c.get_world_size()
