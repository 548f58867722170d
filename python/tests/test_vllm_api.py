"""vLLM's current trainer API against wt (no vllm serve): vLLM's protocol
and dataclasses, its NCCL dicts handed to wt.Client, its ModuleSource as a
source, torch parameters that require grad, wt's factory in vLLM's new form.

Runs where vLLM is importable (scripts/test.sh runs it in the venv of
scripts/install-vllm.sh); skipped elsewhere, saying so."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
from typing import ClassVar

import pytest

import wt_transfer as wt
from vllm_support import needs_vllm

pytestmark = needs_vllm


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from conftest import Server
    from tiny_llama import make
    d = tmp_path_factory.mktemp("vllm-api")
    model = make(str(d / "model"))
    server = Server(["--model", os.path.join(model, "model.safetensors"), "--no-auth"])
    yield model, server
    server.stop()


def _module(model_dir, seed):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig.from_pretrained(model_dir)).to(torch.float32)


def _param_digests(m):
    return {n: hashlib.sha256(p.detach().numpy().tobytes()).hexdigest()
            for n, p in m.named_parameters()}


def test_client_is_vllms_protocol_and_takes_its_dicts(tiny):
    from vllm.distributed.weight_transfer.base import VLLMWeightSyncClient
    from vllm.distributed.weight_transfer.nccl_common import (
        NCCLWeightTransferInitInfo, worker_init_payload)
    from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferUpdateInfo
    _, server = tiny
    with wt.Client(server.addr) as c:
        assert isinstance(c, VLLMWeightSyncClient)
        # TCPStore mode: refused naming the field and the mode wt takes
        tcp = worker_init_payload(NCCLWeightTransferInitInfo(
            master_address="127.0.0.1", master_port=29500, rank_offset=1,
            world_size=2))
        with pytest.raises(wt.InvalidArgument) as e:
            c.init_weight_transfer_engine(tcp)
        assert "init_info.master_address" in str(e.value)
        assert "nccl_unique_id_b64" in str(e.value)
        # unique-id mode: taken as wt's nccl init; this CPU server's own
        # refusal (no GPU) comes back, not a field error
        uid = worker_init_payload(NCCLWeightTransferInitInfo(
            nccl_unique_id_b64=base64.b64encode(os.urandom(128)).decode(),
            rank_offset=1, world_size=2, packed=True))
        with pytest.raises(wt.FailedPrecondition, match="backend 'nccl' cannot receive"):
            c.init_weight_transfer_engine(uid)
        # the update dict with list shapes parses (the grpc engine then says
        # its bytes come through PushWeights)
        c.init_weight_transfer_engine({"backend": "grpc"})
        c.start_weight_update()
        upd = dataclasses.asdict(NCCLWeightTransferUpdateInfo(
            names=["lm_head.weight"], dtype_names=["float32"], shapes=[[512, 128]]))
        with pytest.raises(wt.FailedPrecondition, match="through PushWeights"):
            c.update_weights(upd)


def test_module_source_and_requires_grad_parameters(tiny):
    """vLLM's ModuleSource over a torch CPU model (every parameter requires
    grad): sent zero-copy, the server's SHA-256 of every tensor equals the
    parameter's bytes; wt's factory in vLLM's new form, with a dict and
    with a TrainerInitInfo dataclass."""
    from vllm.distributed.weight_transfer.base import ModuleSource, TrainerInitInfo
    model_dir, server = tiny

    @dataclasses.dataclass
    class GrpcInit(TrainerInitInfo):
        backend: ClassVar[str] = "grpc"

    for form, info in (("dict", {"backend": "grpc"}), ("dataclass", GrpcInit(rank=0)),
                       ("dict-ucx", {"backend": "ucx"})):
        m = _module(model_dir, hash(form) % 1000)
        assert all(p.requires_grad for p in m.parameters())
        with wt.Client(server.addr) as c:
            engine = wt.WeightTransferTrainerFactory.trainer_init(
                info, client=c, source=ModuleSource(m))
            engine.send_weights(f"module-{form}")
            assert c.checksums() == _param_digests(m), form
            engine.shutdown()


def test_requires_grad_tensor_in_an_array_source(tiny):
    import torch
    model_dir, server = tiny
    m = _module(model_dir, 7)
    params = dict(m.named_parameters())
    params["lm_head.weight"] = torch.nn.Parameter(torch.randn(512, 128))
    with wt.Client(server.addr) as c:
        engine = wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, None, client=c, source=wt.ArraySource(params))
        engine.send_weights("grad")
        got = c.checksums(["lm_head.weight"])["lm_head.weight"]
        assert got == hashlib.sha256(
            params["lm_head.weight"].detach().numpy().tobytes()).hexdigest()
        engine.shutdown()


def test_non_sender_ranks_iterate_only(tiny):
    """A rank other than 0 in vLLM's new form touches no server: its
    send_weights only iterates the source (the collectives FSDP needs)."""
    model_dir, _ = tiny
    seen = []

    class Source:
        def metadata(self):
            return []

        def __iter__(self):
            seen.append(1)
            return iter(())

    e = wt.WeightTransferTrainerFactory.trainer_init(
        {"backend": "grpc", "rank": 1}, client=object(), source=Source())
    assert e.is_sender is False
    e.send_weights()
    assert seen == [1]
