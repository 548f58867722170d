"""No order of close(), `with` exits and garbage collection crashes the
interpreter (docs/python.md, "Lifetimes"): each order runs in a subprocess,
so a segfault fails the test instead of the suite. Also: sources of vLLM
0.33's shape, vLLM's dicts through wt.Client, and the grpc backend over a
vLLM client refused as documented."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import wt_transfer as wt
from conftest import model_tensors


def run_py(code: str, env_extra=None) -> str:
    env = dict(os.environ, **(env_extra or {}))
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(__file__)] + [p for p in sys.path if p])
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, (f"exit {r.returncode} (negative: a signal)\n"
                               f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return r.stdout


@pytest.fixture
def exported(start_server, tmp_path):
    os.chmod(tmp_path, 0o700)
    sock = str(tmp_path / "export.sock")
    s = start_server("--model", "synthetic:tiny", "--no-auth", "--memory",
                     "shared", "--export", sock)
    return s, sock


def test_engine_after_its_client_closed(exported):
    s, _ = exported
    out = run_py(f"""
        import gc, wt_transfer as wt
        from conftest import model_tensors
        with wt.Client({s.addr!r}) as c:
            t = model_tensors(c.parameters(), 1)
            e = wt.WeightTransferTrainerFactory.trainer_init(
                "grpc", None, None, client=c, source=wt.ArraySource(t))
            e.send_weights("in")
        for call in (lambda: e.send_weights("after"), e.delta_stats):
            try:
                call()
                print("no error")
            except wt.FailedPrecondition as err:
                assert "the Client it was made with is closed" in str(err), err
        e.shutdown(); e.shutdown()
        # the engine outliving a client collected first, and the reverse
        c = wt.Client({s.addr!r})
        e = wt.WeightTransferTrainerFactory.trainer_init(
            "ucx", None, None, client=c, source=wt.ArraySource(t))
        del c; gc.collect()
        print(e.send_weights("kept"))
        c = wt.Client({s.addr!r})
        e = wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, None, client=c, source=wt.ArraySource(t))
        del e; gc.collect(); c.close(); del c; gc.collect()
        print("ok")
    """)
    assert "no error" not in out and out.split() == ["kept", "ok"], out


def test_views_after_consumer_close_and_release(exported):
    s, sock = exported
    with wt.Client(s.addr) as c:
        t = model_tensors(c.parameters(), 2)
        e = wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, None, client=c, source=wt.ArraySource(t))
        e.send_weights("v1")
        e.shutdown()
    first = next(iter(t))
    want = np.asarray(t[first].array if isinstance(t[first], wt.view) else t[first]).tobytes()
    out = run_py(f"""
        import gc
        import wt_transfer.consumer as wtc
        # a view read after Consumer.close(): its mapping lives on
        c = wtc.open({sock!r})
        lease = c.acquire()
        a = lease.tensors[{first!r}]
        c.close()
        assert a.tobytes() == bytes.fromhex({want.hex()!r})
        del lease; gc.collect()
        assert a.tobytes() == bytes.fromhex({want.hex()!r})
        # released, the consumer collected, then read
        c = wtc.open({sock!r})
        with c.acquire() as tensors:
            b = tensors[{first!r}]
        del c, tensors; gc.collect()
        b.sum()
        # closed with leases open, then every object dropped in turn
        c = wtc.open({sock!r})
        l1, l2 = c.acquire(), c.acquire()
        x = l1.tensors[{first!r}]
        c.close(); l1.release(); l2.release(); c.close()
        del l1, l2; gc.collect(); x.sum(); del x; gc.collect()
        try:
            c.acquire()
        except Exception as err:
            print(type(err).__name__)
        print("ok")
    """)
    assert out.split() == ["FailedPrecondition", "ok"], out
    with wt.Client(s.addr) as c:
        assert c.server_info().get("lease_count", 0) == 0


class Source033:
    """A source of vLLM 0.33's shape: `metadata` a (cached) property,
    iteration through iter_full()."""

    def __init__(self, tensors, params):
        self.t, self.params = tensors, params

    @property
    def metadata(self):
        return [wt.ParamMeta(p["name"], p["dtype"], tuple(p["shape"]))
                for p in self.params]

    def iter_full(self):
        return iter(self.t.items())


def test_a_source_of_vllm_033s_shape(server):
    from conftest import digests
    with wt.Client(server.addr) as c:
        params = c.parameters()
        t = model_tensors(params, 3)
        e = wt.WeightTransferTrainerFactory.trainer_init(
            {"backend": "grpc"}, client=c, source=Source033(t, params))
        e.send_weights("v033")
        assert c.checksums() == digests(t)
        e.shutdown()


def test_vllms_dicts_through_wt_client(server):
    """vLLM's NCCL init dict (no torch or vLLM needed to write it): TCPStore
    refused naming the field and the mode wt takes; a field vLLM lacks
    named; the update dict's list shapes parsed."""
    with wt.Client(server.addr) as c:
        with pytest.raises(wt.InvalidArgument, match=r"init_info.master_address: .*"
                           r"unique-id mode: init_info.nccl_unique_id_b64"):
            c.init_weight_transfer_engine({"master_address": "127.0.0.1",
                                           "master_port": 29500, "rank_offset": 1,
                                           "world_size": 2, "packed": True})
        with pytest.raises(wt.InvalidArgument, match="init_info.bogus: not a field"):
            c.init_weight_transfer_engine({"nccl_unique_id_b64": "AAAA", "bogus": 1})
        c.init_weight_transfer_engine({"backend": "grpc"})
        c.start_weight_update()
        p = c.parameters()[0]
        with pytest.raises(wt.FailedPrecondition, match="through PushWeights"):
            c.update_weights({"names": [p["name"]], "dtype_names": [p["dtype"]],
                              "shapes": [p["shape"]]})


def test_grpc_over_a_vllm_client_is_invalid_argument():
    class VllmLike:
        def init_weight_transfer_engine(self, info): raise AssertionError
        def start_weight_update(self): raise AssertionError
        def update_weights(self, info): raise AssertionError
        def finish_weight_update(self, weight_version=None): raise AssertionError

    with pytest.raises(wt.InvalidArgument, match="backend 'grpc'"):
        wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, None, client=wt.VllmClient(VllmLike(), world_size=1),
            source=wt.ArraySource({}))
