"""Sources that make their tensors as they are iterated (FSDP's
full_tensor()): with OnTheFly a round holds about hold_bytes of them at a
time, each let go once the part of the round that sent it is done; the
bytes that arrive are the ones made; a bad tensor mid-round aborts it and
leaves the committed version."""

import gc
import weakref

import numpy as np
import pytest

import wt_transfer as wt
from conftest import digests, has_backend, model_tensors


class Made:
    """A source that makes a fresh copy of each tensor when asked for it
    and counts how many of its copies are alive."""

    def __init__(self, params, seed):
        self.params = params
        self.seed = seed
        self.alive = 0
        self.most_alive = 0
        self.made = {}  # name -> digest of what was made this round
        self.bad = None  # (name, wrong shape) to yield once

    def metadata(self):
        return [wt.ParamMeta(p["name"], p["dtype"], tuple(p["shape"]))
                for p in self.params]

    def _gone(self):
        self.alive -= 1

    def __iter__(self):
        self.made = {}
        full = model_tensors(self.params, self.seed)
        for name in [p["name"] for p in self.params]:
            t = full.pop(name)  # the only reference: the copy made now
            a = t.array if isinstance(t, wt.view) else t
            if self.bad is not None and self.bad[0] == name:
                a = np.zeros(self.bad[1], dtype=a.dtype)
                t = wt.view(a, "bfloat16") if isinstance(t, wt.view) else a
            self.made.update(digests({name: t}))
            self.alive += 1
            self.most_alive = max(self.most_alive, self.alive)
            weakref.finalize(a, self._gone)
            yield name, t
            del t, a


@pytest.mark.parametrize("backend,config", [("grpc", None),
                                            ("ucx", {"transports": "tcp"})])
def test_tensors_let_go_once_sent(server, backend, config):
    gc.disable()  # counts by reference only: nothing waits for a collection
    try:
        with wt.Client([server.addr]) as client:
            if not has_backend(client, backend):
                pytest.skip(f"this wt-server was built without {backend}")
            params = client.parameters()
            assert len(params) >= 6
            made = Made(params, 1)
            total = sum(p["nbytes"] for p in params)
            source = wt.OnTheFly(made, hold_bytes=1)
            engine = wt.WeightTransferTrainerFactory.trainer_init(
                backend, config, None, client=client, source=source)
            try:
                for step in range(5):
                    made.seed = 10 + step
                    made.most_alive = 0
                    engine.send_weights(f"fly-{step}")
                    assert client.checksums() == made.made, f"round {step}"
                    # the one being sent, and the generator's last one
                    assert made.most_alive <= 2, made.most_alive
                    assert made.alive == 0
                    assert client.version().version == f"fly-{step}"
                # A larger hold: parts of several tensors, same bytes.
                engine.source = wt.OnTheFly(made, hold_bytes=total // 3)
                made.seed = 99
                made.most_alive = 0
                engine.send_weights("fly-parts")
                assert client.checksums() == made.made
                assert 1 < made.most_alive < len(params), made.most_alive
            finally:
                engine.shutdown()
    finally:
        gc.enable()


def test_bad_tensor_mid_round_aborts(server):
    with wt.Client([server.addr]) as client:
        params = client.parameters()
        made = Made(params, 1)
        engine = wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, None, client=client,
            source=wt.OnTheFly(made, hold_bytes=1))
        try:
            engine.send_weights("good")
            good = client.checksums()
            victim = params[len(params) // 2]
            made.seed = 2
            made.bad = (victim["name"], (3,))
            with pytest.raises(ValueError, match=f"tensor '{victim['name']}': shape"):
                engine.send_weights("bad")
            v = client.version()
            assert v.version == "good" and v.sequence == 1
            assert client.checksums() == good  # not a byte of the bad round
            made.bad = None
            made.seed = 3
            engine.send_weights("after")
            assert client.checksums() == made.made
            assert client.version().sequence == 2
        finally:
            engine.shutdown()


def test_on_the_fly_arguments():
    with pytest.raises(ValueError, match="hold_bytes"):
        wt.OnTheFly(wt.ArraySource({}), hold_bytes=0)
    with pytest.raises(ValueError, match="metadata"):
        wt.OnTheFly(object())
