"""LoRA adapter sets as rounds (docs/lora.md), from Python to real
wt-servers: adapter versions beside the model over grpc and ucx (the bytes
that arrive, and what a consumer of the adapter's export reads), refusals
by name, a trainer SIGKILLed mid-round (nothing committed), wt-push
--adapter, and strangers' calls naming adapters."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading

import numpy as np
import pytest

import wt_transfer as wt
from wt_transfer import consumer as wt_consumer
from conftest import digests, has_backend
from test_foreign import stubs  # noqa: F401 - the grpcio stubs fixture

P = "base_model.model.model.layers"


def adapter(rank: int = 8, seed: int = 0, hidden: int = 64, layers: int = 2,
            modules=("q_proj", "v_proj"), dtype=np.float32) -> dict:
    """PEFT's tensors of a LoRA adapter: lora_A [r, in], lora_B [out, r], on
    layers from 1 (the servers' model, synthetic "tiny", has only layer 0,
    against whose modules test_refusals_name_the_tensor checks shapes)."""
    rng = np.random.default_rng(seed)
    t = {}
    for layer in range(1, layers + 1):
        for m in modules:
            p = f"{P}.{layer}.self_attn.{m}"
            t[p + ".lora_A.weight"] = rng.standard_normal((rank, hidden)).astype(dtype)
            t[p + ".lora_B.weight"] = rng.standard_normal((hidden, rank)).astype(dtype)
    return t


def export_server(start_server, *extra):
    d = tempfile.mkdtemp(prefix="wt-lora-")
    os.chmod(d, 0o700)
    s = start_server("--model", "synthetic:tiny", "--no-auth", "--memory",
                     "shared", "--export", os.path.join(d, "export.sock"), *extra)
    s.export = os.path.join(d, "export.sock")
    return s


def engine(backend, client, tensors, name, alpha=16.0):
    config = {"transports": "tcp"} if backend == "ucx" else None
    return wt.WeightTransferTrainerFactory.trainer_init(
        backend, config, {"adapter": {"name": name, "alpha": alpha}},
        client=client, source=wt.ArraySource(tensors))


@pytest.mark.parametrize("backend", ["grpc", "ucx"])
def test_adapter_rounds_beside_the_model(start_server, backend):
    """5 versions of adapter "policy": each round the servers hold the
    trainer's bytes, the adapter's export hands exactly them to a consumer,
    the adapter's version counts on while the model's stays where it was;
    GetServerInfo describes the set."""
    s = export_server(start_server)
    with wt.Client(s.addr) as model, wt.Client(s.addr, data_timeout=30) as c:
        if not has_backend(model, backend):
            pytest.skip(f"this wt-server was built without {backend}")
        before = model.checksums()
        t = adapter()
        e = engine(backend, c, t, "policy")
        assert c.adapter == "policy"
        try:
            for i in range(5):
                for k, v in adapter(seed=i + 1).items():
                    np.copyto(t[k], v)
                e.send_weights(f"policy-{i}")
                assert c.checksums() == digests(t), f"round {i}"
                v = c.version()
                assert (v.version, v.sequence) == (f"policy-{i}", i + 1)
                assert model.version().sequence == 0
        finally:
            e.shutdown()
        assert model.checksums() == before  # the model's bytes untouched
        info = model.server_info()
        (a,) = info["adapters"]
        assert a["name"] == "policy" and a["rank"] == 8 and a["alpha"] == 16
        assert a["target_modules"] == ["q_proj", "v_proj"]
        assert a["num_tensors"] == 8 and a["weight_version"] == "policy-4"
        assert a["export_path"] == s.export + ".lora.policy"
        # What vLLM's loader reads: the adapter's export, by version.
        with wt_consumer.open(a["export_path"]) as cons:
            with cons.acquire("policy-4") as got:
                assert sorted(got) == sorted(t)
                for k in t:
                    assert np.array_equal(np.asarray(got[k]), t[k]), k


def test_two_adapters_alternate(start_server):
    """Two sets in alternate rounds, each with its own versions and bytes."""
    s = export_server(start_server)
    with wt.Client(s.addr) as ca, wt.Client(s.addr) as cb:
        ta, tb = adapter(rank=8, seed=1), adapter(rank=4, seed=2, modules=("o_proj",))
        ea, eb = engine("grpc", ca, ta, "a", 16), engine("grpc", cb, tb, "b", 8)
        for i in range(4):
            for t, e, c, name, seed in ((ta, ea, ca, "a", 10 + i), (tb, eb, cb, "b", 20 + i)):
                np.copyto(t[next(iter(t))], np.full_like(t[next(iter(t))], seed))
                e.send_weights(f"{name}-{i}")
            assert ca.checksums() == digests(ta) and cb.checksums() == digests(tb)
            assert ca.version().version == f"a-{i}" and cb.version().version == f"b-{i}"
        ea.shutdown()
        eb.shutdown()


def test_refusals_name_the_tensor(start_server):
    """A later init with another layout, a spec without alpha, names that
    are no LoRA weights, a set no init made: each refused by name; the set
    keeps serving its version."""
    s = export_server(start_server)
    with wt.Client(s.addr) as c:
        t = adapter()
        e = engine("grpc", c, t, "policy")
        e.send_weights("good")
        e.shutdown()
    cases = [
        (adapter(rank=16), {"name": "policy", "alpha": 16}, wt.errors.FailedPrecondition,
         f"tensor '{P}.1.self_attn.q_proj.lora_A.weight' is float32 [16, 64], but "
         "its first round made it float32 [8, 64]"),
        (adapter(hidden=32), {"name": "policy", "alpha": 16}, wt.errors.FailedPrecondition,
         "[8, 32], but its first round made it float32 [8, 64]"),
        (adapter(), {"name": "policy", "alpha": 32}, wt.errors.FailedPrecondition,
         "alpha 32, but its first round set alpha 16"),
        (adapter(), {"name": "policy"}, wt.errors.InvalidArgument, "alpha 0"),
        ({"model.embed_tokens.weight": np.zeros((4, 4), np.float32)},
         {"name": "other", "alpha": 1}, wt.errors.InvalidArgument,
         "tensor 'model.embed_tokens.weight' is not a LoRA weight in PEFT's naming"),
        (adapter(), {"name": "no/slash", "alpha": 1}, wt.errors.InvalidArgument,
         "adapter name 'no/slash' has byte 0x2f"),
        # layer 0's q_proj is in the server's model: [16, 16]
        ({f"{P}.0.self_attn.q_proj.lora_A.weight": np.zeros((4, 16), np.float32),
          f"{P}.0.self_attn.q_proj.lora_B.weight": np.zeros((20, 4), np.float32)},
         {"name": "wrong", "alpha": 1}, wt.errors.InvalidArgument,
         f"tensor '{P}.0.self_attn.q_proj.lora_B.weight' is [20, 4], but the "
         "model's 'model.layers.0.self_attn.q_proj.weight' is [16, 16]: a lora_B "
         "writes its 16 outputs"),
    ]
    for tensors, spec, err, words in cases:
        with wt.Client(s.addr) as c:
            with pytest.raises(err) as ei:
                wt.WeightTransferTrainerFactory.trainer_init(
                    "grpc", None, {"adapter": spec}, client=c,
                    source=wt.ArraySource(tensors))
            assert words in str(ei.value), (words, str(ei.value))
    with wt.Client(s.addr, adapter="nobody") as c:
        with pytest.raises(wt.errors.NotFound, match="adapter 'nobody'"):
            c.version()
    with wt.Client(s.addr, adapter="policy") as c:
        assert c.version().version == "good" and c.checksums() == digests(t)


CHILD = r"""
import sys, time, numpy as np, wt_transfer as wt
addr, rank = sys.argv[1], 8
names = [f"base_model.model.model.layers.{l}.mlp.{m}.lora_{x}.weight"
         for l in range(1, 5) for m in ("up_proj", "down_proj") for x in "AB"]
shape = lambda n: (rank, 4096) if ".lora_A." in n else (4096, rank)
class Stalling:
    # Sent tensor by tensor (an update per tensor, wt.OnTheFly's way), it
    # yields half of them, then stalls: the round is open, half sent.
    hold_bytes = 1
    def __init__(self, stall):
        self.stall = stall
    @property
    def metadata(self):
        return [wt.sources.ParamMeta(n, "float32", shape(n)) for n in names]
    def __iter__(self):
        for i, n in enumerate(names):
            if self.stall and i == len(names) // 2:
                print("half-sent", flush=True)
                time.sleep(600)
            yield n, np.full(shape(n), i + 1.0, np.float32)
with wt.Client(addr, data_timeout=60) as c:
    e = wt.WeightTransferTrainerFactory.trainer_init(
        "grpc", {"chunk_size": "64K", "bucket_size": "128K"},
        {"adapter": {"name": "kill", "alpha": 8}}, client=c, source=Stalling(False))
    e.send_weights("whole")
    print("committed", flush=True)
    e.source = Stalling(True)
    e.send_weights("never")
"""


def test_trainer_killed_mid_round_commits_nothing(start_server):
    """A trainer SIGKILLed with its adapter round open and half its tensors
    sent (between two of its calls, so no call of it is cut: the server's
    round timeout, 3 s here, ends the round): the round fails, the set
    keeps its last version (bytes and name), and a new trainer (a new init)
    commits."""
    s = export_server(start_server, "--round-timeout", "3")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", CHILD, s.addr],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "committed"
        assert child.stdout.readline().strip() == "half-sent"
        with wt.Client(s.addr, adapter="kill") as c:
            assert c.server_info()["adapters"][0]["state"] == "updating"
            child.send_signal(signal.SIGKILL)
            child.wait(10)
            import time
            deadline = time.monotonic() + 10
            while c.server_info()["adapters"][0]["state"] == "updating":
                assert time.monotonic() < deadline, "the round stayed open"
                time.sleep(0.05)
            assert c.version().version == "whole"
            sums = c.checksums()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    whole = {n: np.full(a.shape, i + 1.0, np.float32)
             for i, (n, a) in enumerate(_kill_layout().items())}
    assert sums == digests(whole)
    with wt.Client(s.addr) as c:
        e = engine("grpc", c, {n: a * 2 for n, a in whole.items()}, "kill", 8)
        e.send_weights("after")
        e.shutdown()
        assert c.version().version == "after"


def _kill_layout() -> dict:
    names = [f"{P}.{l}.mlp.{m}.lora_{x}.weight"
             for l in range(1, 5) for m in ("up_proj", "down_proj") for x in "AB"]
    return {n: np.zeros((8, 4096) if ".lora_A." in n else (4096, 8), np.float32)
            for n in names}


def _safetensors(path: pathlib.Path, tensors: dict) -> None:
    header, off, blobs = {}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def test_wt_push_adapter(start_server, tmp_path):
    """wt-push --adapter pushes a PEFT adapter_model.safetensors as a
    version of the set and verifies it; without --lora-alpha it refuses."""
    from conftest import _server_bin
    push = str(pathlib.Path(_server_bin()).with_name("wt-push"))
    s = export_server(start_server)
    t = adapter(seed=5)
    f = tmp_path / "adapter_model.safetensors"
    _safetensors(f, t)
    r = subprocess.run([push, "--server", s.addr, "--adapter", "pushed",
                        "--lora-alpha", "16", "--checkpoint", str(f), "--verify",
                        "--version", "v1", "--quiet"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "verify: 8 parameters match" in r.stdout, r.stdout
    with wt.Client(s.addr, adapter="pushed") as c:
        assert c.version().version == "v1" and c.checksums() == digests(t)
    r = subprocess.run([push, "--server", s.addr, "--adapter", "pushed",
                        "--checkpoint", str(f)], capture_output=True, text=True)
    assert r.returncode == 2 and "--lora-alpha" in r.stderr


def test_strangers_naming_adapters(start_server, stubs):  # noqa: F811
    """While a trainer runs adapter rounds (5 at least), strangers call with adapter
    names: made-up and malformed ones, a spec of 70000 tensors, a spec
    claiming the set with other shapes, pushes into the set with the
    model's tensors and into sets that do not exist. Each is refused; every
    round commits the trainer's bytes."""
    import grpc
    pb2, pb2_grpc = stubs
    s = export_server(start_server)
    stop, refused, accepted, passes = threading.Event(), {}, [], []
    huge = pb2.AdapterSpec(name="huge", alpha=1, tensors=[
        pb2.ParameterInfo(name=f"m{i}.lora_A.weight", dtype="float32", shape=[1, 1])
        for i in range(70000)])

    def flood():
        ch = grpc.insecure_channel(s.addr, options=[("grpc.use_local_subchannel_pool", 1)])
        stub = pb2_grpc.WeightTransferStub(ch)
        other = pb2.AdapterSpec(name="policy", alpha=16, tensors=[
            pb2.ParameterInfo(name=f"{P}.1.self_attn.q_proj.lora_{x}.weight",
                              dtype="float32", shape=[64, 64]) for x in "AB"])
        calls = [
            lambda: stub.GetWeightVersion(pb2.GetWeightVersionRequest(adapter="x" * 65), timeout=5),
            lambda: stub.GetWeightVersion(pb2.GetWeightVersionRequest(adapter="ghost"), timeout=5),
            lambda: stub.StartWeightUpdate(pb2.StartWeightUpdateRequest(adapter="../../x"), timeout=5),
            lambda: stub.FinishWeightUpdate(pb2.FinishWeightUpdateRequest(
                adapter="policy", weight_version="evil", round_id=12345), timeout=5),
            lambda: stub.InitWeightTransferEngine(pb2.InitWeightTransferEngineRequest(
                init_info=pb2.WeightTransferInitInfo(backend="grpc", adapter=huge)), timeout=10),
            lambda: stub.InitWeightTransferEngine(pb2.InitWeightTransferEngineRequest(
                init_info=pb2.WeightTransferInitInfo(backend="grpc", adapter=other)), timeout=5),
            lambda: stub.PushWeights(iter([pb2.PushWeightsChunk(header=pb2.PushWeightsHeader(
                adapter="policy", round_id=1, update_info=pb2.WeightTransferUpdateInfo(
                    names=["model.embed_tokens.weight"], dtype_names=["float32"],
                    shapes=[pb2.Shape(dims=[4])], packed=True)))]), timeout=5),
            lambda: stub.ChecksumWeights(pb2.ChecksumWeightsRequest(adapter="ghost"), timeout=5),
        ]
        while not stop.is_set():
            for call in calls:
                try:
                    call()
                    accepted.append(call)
                except grpc.RpcError as e:
                    refused[e.code().name] = refused.get(e.code().name, 0) + 1
            passes.append(1)
        ch.close()

    with wt.Client(s.addr) as c:
        t = adapter()
        e = engine("grpc", c, t, "policy")
        e.send_weights("v0")
        th = [threading.Thread(target=flood) for _ in range(2)]
        for x in th:
            x.start()
        try:
            i = 0
            # At least 5 rounds, and on until every stranger's call was made
            # at least 4 times meanwhile.
            while i < 5 or (len(passes) < 4 and all(x.is_alive() for x in th)):
                i += 1
                for k, v in adapter(seed=i).items():
                    np.copyto(t[k], v)
                e.send_weights(f"v{i}")
                assert c.checksums() == digests(t)
        finally:
            stop.set()
            for x in th:
                x.join(30)
            e.shutdown()
        assert c.version().version == f"v{i}"
        assert [a["name"] for a in c.server_info()["adapters"]] == ["policy"]
    assert not accepted, accepted
    assert sum(refused.values()) >= 32, refused
    print(f"\n  {i} rounds committed; strangers refused: {refused}")
