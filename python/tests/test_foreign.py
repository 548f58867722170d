"""Any control plane under wt's C trainer engines: an object with vLLM's
four methods, written here in Python over wt's generated gRPC stubs (as a
framework would wrap its own RPC), drives the ucx trainer engine; the bytes
that land are the arrays'. Its failures come back with its words."""

import importlib
import os
import pathlib
import subprocess
import sys

import pytest

import wt_transfer as wt
from conftest import digests, has_backend, model_tensors

PROTO = pathlib.Path(__file__).resolve().parents[2] / "proto"


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    try:
        import grpc  # noqa: F401
        import grpc_tools  # noqa: F401
        from google.protobuf import json_format  # noqa: F401
    except ImportError as e:
        pytest.skip(f"no grpcio/grpcio-tools/protobuf here ({e})")
    out = tmp_path_factory.mktemp("stubs")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO}",
                    f"--python_out={out}", f"--grpc_python_out={out}",
                    str(PROTO / "wt/v1/wt.proto")], check=True)
    sys.path.insert(0, str(out))
    try:
        pb2 = importlib.import_module("wt.v1.wt_pb2")
        pb2_grpc = importlib.import_module("wt.v1.wt_pb2_grpc")
    finally:
        sys.path.remove(str(out))
    return pb2, pb2_grpc


class StubPlane:
    """vLLM's four methods (and get_world_size) over wt's gRPC stubs."""

    def __init__(self, addr, pb2, pb2_grpc):
        import grpc
        from google.protobuf import json_format
        self.pb2, self.jf = pb2, json_format
        self.channel = grpc.insecure_channel(addr)
        self.stub = pb2_grpc.WeightTransferStub(self.channel)
        self.round_id = 0
        self.calls = []
        self.fail_start = False

    def _d(self, msg):
        return self.jf.MessageToDict(msg, preserving_proto_field_name=True)

    def get_world_size(self):
        self.calls.append("world_size")
        return self.stub.GetWorldSize(self.pb2.GetWorldSizeRequest()).world_size

    def init_weight_transfer_engine(self, init_info):
        self.calls.append("init")
        info = self.jf.ParseDict(init_info, self.pb2.WeightTransferInitInfo())
        return self._d(self.stub.InitWeightTransferEngine(
            self.pb2.InitWeightTransferEngineRequest(init_info=info)))

    def start_weight_update(self):
        self.calls.append("start")
        if self.fail_start:
            raise ConnectionError("the framework's RPC is down")
        r = self.stub.StartWeightUpdate(self.pb2.StartWeightUpdateRequest())
        self.round_id = r.round_id
        return {"round_id": r.round_id}

    def update_weights(self, update_info):
        self.calls.append("update")
        info = self.jf.ParseDict(update_info, self.pb2.WeightTransferUpdateInfo())
        return self._d(self.stub.UpdateWeights(self.pb2.UpdateWeightsRequest(
            update_info=info, round_id=self.round_id)))

    def finish_weight_update(self, weight_version=None):
        self.calls.append("finish")
        self.stub.FinishWeightUpdate(self.pb2.FinishWeightUpdateRequest(
            weight_version=weight_version, round_id=self.round_id))


def test_python_plane_drives_the_ucx_engine(server, stubs):
    with wt.Client(server.addr) as check:
        if not has_backend(check, "ucx"):
            pytest.skip("this wt-server was built without ucx")
        params = check.parameters()
        plane = StubPlane(server.addr, *stubs)
        tensors = model_tensors(params, 3)
        engine = wt.WeightTransferTrainerFactory.trainer_init(
            "ucx", {"transports": "tcp"}, None, client=plane,
            source=wt.ArraySource(tensors))
        for step in range(3):
            tensors.update(model_tensors(params, 10 + step))
            engine.send_weights(f"plane-{step}")
            assert check.checksums() == digests(tensors)
            assert check.version().version == f"plane-{step}"
        assert plane.calls[0] == "world_size"  # the ranks, first
        assert plane.calls.index("init") < plane.calls.index("start")
        assert plane.calls[-3:] == ["start", "update", "finish"]
        plane.fail_start = True
        with pytest.raises(wt.Unavailable, match="ConnectionError: the framework's RPC is down"):
            engine.send_weights("never")
        assert check.version().version == "plane-2"
        engine.shutdown()
        plane.channel.close()


class VllmLike:
    """vLLM's HTTP client's shape: four methods, returning None, finish
    without arguments; it records the dicts it is given."""

    def __init__(self):
        self.seen = []

    def init_weight_transfer_engine(self, init_info):
        self.seen.append(("init", init_info))

    def start_weight_update(self):
        self.seen.append(("start", None))

    def update_weights(self, update_info):
        self.seen.append(("update", update_info))

    def finish_weight_update(self):
        self.seen.append(("finish", None))


def test_vllm_shaped_client_gets_plain_dicts():
    """The ucx engine over a client that answers nothing: init fails when no
    worker endpoint comes back (what ucx needs from the servers), and the
    dict it was given is wt's init info with the fields vLLM's sets
    (rank_offset 1, world_size 2)."""
    c = VllmLike()
    with pytest.raises(wt.WtError):
        wt.WeightTransferTrainerFactory.trainer_init(
            "ucx", {"transports": "tcp"}, None, client=c,
            source=wt.ArraySource({}))
    kind, info = c.seen[0]
    assert kind == "init"
    assert info["backend"] == "ucx" and info["rank_offset"] == 1
    assert info["world_size"] == 2 and "ucx" in info


def test_vllm_dialect_refuses_what_vllm_cannot_receive():
    """A vLLM client gets vLLM's dicts (client/src/control_vllm.c; the
    nccl round itself runs on emulated GPUs in the C suite nccl, "vLLM's
    dicts from the nccl trainer engine"): ucx and grpc are refused by name,
    before any call reaches vLLM."""
    c = VllmLike()
    with pytest.raises(wt.InvalidArgument, match="backend 'ucx' to a vLLM control plane"):
        wt.WeightTransferTrainerFactory.trainer_init(
            "ucx", {"transports": "tcp"}, None, client=wt.VllmClient(c, world_size=2),
            source=wt.ArraySource({}))
    assert c.seen == []


def test_nccl_version_is_checked_by_name():
    """The NCCL wt would load must be the peers': asked for another version
    the engine refuses, naming both, before any collective (or says why
    NCCL is unavailable here)."""
    with pytest.raises(wt.FailedPrecondition) as e:
        wt.WeightTransferTrainerFactory.trainer_init(
            "nccl", {"nccl_version": "1.0.0"}, None, client=VllmLike(),
            source=wt.ArraySource({}))
    msg = str(e.value)
    assert ("the peers run 1.0.0" in msg) or ("NCCL is unavailable" in msg), msg
    with pytest.raises(wt.InvalidArgument, match="nccl_version '2.x'"):
        wt.WeightTransferTrainerFactory.trainer_init(
            "nccl", {"nccl_version": "2.x"}, None, client=VllmLike(),
            source=wt.ArraySource({}))
    with pytest.raises(wt.FailedPrecondition, match="nccl_library /nonexistent"):
        wt.WeightTransferTrainerFactory.trainer_init(
            "nccl", {"nccl_library": "/nonexistent/libnccl.so.2"}, None,
            client=VllmLike(), source=wt.ArraySource({}))
