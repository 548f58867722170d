"""Every bad input is refused before a byte moves, naming what is wrong;
the server's errors come back as the subclass of their code with its words."""

import numpy as np
import pytest

import wt_transfer as wt
from conftest import model_tensors


@pytest.fixture
def setup(server):
    client = wt.Client(server.addr)
    params = client.parameters()
    tensors = model_tensors(params, 1)
    engine = wt.WeightTransferTrainerFactory.trainer_init(
        "grpc", None, None, client=client, source=wt.ArraySource(tensors))
    yield client, params, tensors, engine
    engine.shutdown()
    client.close()


class Source:
    def __init__(self, metas, pairs):
        self.metas, self.pairs = metas, pairs

    def metadata(self):
        return self.metas

    def __iter__(self):
        return iter(self.pairs)


def metas_of(params):
    return [wt.ParamMeta(p["name"], p["dtype"], tuple(p["shape"])) for p in params]


def refused(engine, source, needle):
    engine.source = source
    with pytest.raises(ValueError, match=needle):
        engine.send_weights()


def test_bad_sources(setup):
    client, params, tensors, engine = setup
    names = [p["name"] for p in params]
    pairs = list(tensors.items())
    metas = metas_of(params)
    # out of order
    refused(engine, Source(metas, [pairs[1], pairs[0]] + pairs[2:]),
            f"tensor '{names[1]}' came where '{names[0]}' is declared")
    # fewer than declared, more than declared
    refused(engine, Source(metas, pairs[:-1]), "ended after 6 tensors")
    refused(engine, Source(metas[:-1], pairs), f"tensor '{names[-1]}' beyond")
    # declared twice
    refused(engine, Source(metas + metas[:1], pairs), "declared twice")
    # dtype and shape against the metadata
    norm = names[1]  # a float32 norm
    bad = dict(tensors)
    bad[norm] = tensors[norm].astype(np.float64)
    refused(engine, Source(metas, list(bad.items())),
            f"tensor '{norm}': dtype float64, the metadata says float32")
    bad[norm] = tensors[norm].reshape(4, 4)
    refused(engine, Source(metas, list(bad.items())),
            f"tensor '{norm}': shape \\[4, 4\\], the metadata says \\[16\\]")
    # not contiguous
    emb = names[0]
    bad = dict(tensors)
    bad[emb] = wt.view(np.ascontiguousarray(tensors[emb].array.T).T, "bfloat16")
    refused(engine, Source(metas, list(bad.items())), f"tensor '{emb}': not contiguous")
    # nothing to point at; a view of the wrong item size
    bad = dict(tensors)
    bad[norm] = [1.0] * 16
    refused(engine, Source(metas, list(bad.items())),
            f"tensor '{norm}': a list offers no DLPack")
    bad[norm] = wt.view(np.zeros(16, np.float32), "bfloat16")
    refused(engine, Source(metas, list(bad.items())), "needs 2-byte items")
    # not a source at all
    refused(engine, object(), "needs metadata and iteration")
    # the C side's own check: a name the server does not hold
    other = metas_of(params)
    other[0] = wt.ParamMeta("no.such.weight", other[0].dtype, other[0].shape)
    engine.source = Source(other, [("no.such.weight", pairs[0][1])] + pairs[1:])
    with pytest.raises(wt.WtError, match="no.such.weight"):
        engine.send_weights()
    # and after every refusal the engine still sends a good round
    engine.source = wt.ArraySource(tensors)
    assert engine.send_weights("after") == "after"
    assert client.version().version == "after"


def test_bad_calls(server):
    with pytest.raises(ValueError, match="at least one"):
        wt.Client([])
    with wt.Client(server.addr) as client:
        with pytest.raises(ValueError, match="init_info: a dict"):
            client.init_weight_transfer_engine("grpc")
        with pytest.raises(wt.InvalidArgument, match="init_info.backend: expected a string"):
            client.init_weight_transfer_engine({"backend": 3})
        with pytest.raises(wt.InvalidArgument, match="init_info.nope: wt.v1.WeightTransferInitInfo has no such field"):
            client.init_weight_transfer_engine({"nope": 1})
        with pytest.raises(wt.FailedPrecondition) as e:
            client.finish_weight_update("v")
        assert server.addr in str(e.value) and e.value.code == 9
        with pytest.raises(ValueError, match="algorithm"):
            client.checksums(algorithm="md5")
        with pytest.raises(wt.NotFound, match="nope"):
            client.checksums(["nope"])
        with pytest.raises(ValueError, match="has no init_weight_transfer_engine"):
            wt.WeightTransferTrainerFactory.trainer_init(
                "ucx", None, None, client=object(), source=wt.ArraySource({}))
        with pytest.raises(wt.InvalidArgument, match="bogus"):
            wt.WeightTransferTrainerFactory.trainer_init(
                "ucx", {"bogus": 1}, None, client=client, source=wt.ArraySource({}))
    with wt.Client("127.0.0.1:1", timeout=2) as dead:
        with pytest.raises(wt.WtError) as e:
            dead.get_world_size()
        assert "127.0.0.1:1" in str(e.value)
    assert issubclass(wt.InvalidArgument, ValueError)
    assert issubclass(wt.DeadlineExceeded, TimeoutError)


def test_sources_made_at_once_in_threads_keep_their_names():
    """Eight threads make C sources at once over tensors of one new layout
    per step (as the ranks of a sharded trainer do, each with its boxes of
    the same sizes): every C source holds exactly the names it was given.
    wt's layout cache once let a thread's layout go while its table still
    pointed into it: a rank then sent a tensor named '\\x07'."""
    import ctypes
    import threading
    from wt_transfer import _lib
    from wt_transfer.sources import CSource

    class Meta(ctypes.Structure):  # wt_tensor_meta (wt/tensor.h)
        _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int),
                    ("ndim", ctypes.c_int), ("shape", ctypes.c_int64 * 16),
                    ("numel", ctypes.c_uint64), ("nbytes", ctypes.c_uint64)]

    L = _lib.lib()
    L.wt_source_metas.restype = ctypes.POINTER(Meta)
    L.wt_source_metas.argtypes = [ctypes.c_void_p,
                                  ctypes.POINTER(ctypes.c_size_t)]
    T, STEPS = 8, 150
    go = threading.Barrier(T, timeout=60)
    bad = []

    def run():
        try:
            steps()
        except Exception as e:  # a thread's failure fails the test
            bad.append(repr(e))
            go.abort()

    def steps():
        for step in range(STEPS):
            names = [f"step{step}.layer{i}.weight.{'x' * 40}"
                     for i in range(16)]
            arrays = {n: np.zeros(4, np.float32) for n in names}
            go.wait()
            with CSource(wt.ArraySource(arrays)) as cs:
                n = ctypes.c_size_t()
                metas = L.wt_source_metas(cs.handle, ctypes.byref(n))
                got = [metas[i].name.decode("utf-8", "replace")
                       for i in range(n.value)]
            if got != names:
                bad.append((step, got[:2]))

    threads = [threading.Thread(target=run) for _ in range(T)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not bad, bad[:3]
