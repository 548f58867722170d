#!/usr/bin/env python3
"""Writes the fuzzing seed corpora under tests/fuzz/corpus/ (run once; the
seeds are committed). Needs only the standard library for safetensors seeds
and grpcio-tools + protobuf for the proto seeds (generated from
proto/wt/v1/wt.proto into a temporary folder, never into the tree).

Usage: python3 tests/fuzz/make_corpus.py
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def write(kind, name, data):
    d = os.path.join(CORPUS, kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def st_file(header, data=b"", pad=True, length=None):
    """A safetensors file: 8-byte LE length, JSON header, data region."""
    h = header if isinstance(header, bytes) else json.dumps(
        header, separators=(",", ":")).encode()
    if pad and len(h) % 8:
        h += b" " * (8 - len(h) % 8)  # the reference writer pads with spaces
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def safetensors_seeds():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)
    write("safetensors", "valid_f32_2x2", st_file(
        {"__metadata__": {"format": "pt"},
         "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}},
        f32))
    write("safetensors", "valid_mixed", st_file(
        {"b": {"dtype": "I64", "shape": [1], "data_offsets": [4, 12]},
         "a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
         "s": {"dtype": "U8", "shape": [], "data_offsets": [12, 13]},
         "z": {"dtype": "F16", "shape": [0, 3], "data_offsets": [13, 13]}},
        b"\x80\x3f\x00\x40" + struct.pack("<q", -7) + b"\x01"))
    write("safetensors", "valid_empty", st_file({}))
    write("safetensors", "valid_f8", st_file(
        {"e4": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]},
         "e5": {"dtype": "F8_E5M2", "shape": [1], "data_offsets": [2, 3]},
         "t": {"dtype": "BOOL", "shape": [1], "data_offsets": [3, 4]}},
        b"\x38\xb8\x3c\x01"))
    one = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    write("safetensors", "bad_truncated_data", st_file(one, b"\0" * 4))
    write("safetensors", "bad_header_past_end",
          st_file(one, b"\0" * 8, length=4096))
    write("safetensors", "bad_overlap", st_file(
        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
        b"\0" * 12))
    write("safetensors", "bad_dtype", st_file(
        {"w": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}},
        b"\0" * 16))
    write("safetensors", "bad_nbytes", st_file(
        {"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
        b"\0" * 8))
    write("safetensors", "bad_not_json", st_file(b"{\"w\": [1, 2", b""))
    write("safetensors", "bad_short", b"\x10\x00\x00")


def plan_seeds(pb):
    """Shard plans (docs/multirank.md): 2 ranks' layouts of a Shard(0), a
    Shard(1) and a replicated tensor, and the plan they make (its digest
    from wt's builder is not needed: the fuzzer checks what it accepts)."""
    def box(name, shape, off, size, dtype="float32"):
        return pb.TensorBox(name=name, dtype=dtype, shape=shape, offsets=off,
                            sizes=size)
    layouts = pb.ShardPlan(world_size=2, nonce=b"seed", ranks=[
        pb.RankBoxes(rank=r, boxes=[
            box("a", [6, 4], [3 * r, 0], [3, 4]),
            box("b", [4, 10], [0, 5 * r], [4, 5], "bfloat16"),
            box("c", [5], [0], [5])]) for r in (1, 0)])
    write("proto", "shard_layouts", layouts.SerializeToString())
    plan = pb.ShardPlan(world_size=2, nonce=b"seed", rank=1, digest="0" * 64,
                        ranks=[pb.RankBoxes(rank=0, boxes=[
                            box("a", [6, 4], [0, 0], [3, 4]),
                            box("b", [4, 10], [0, 0], [4, 5], "bfloat16"),
                            box("c", [5], [0], [5])]),
                            pb.RankBoxes(rank=1, boxes=[
                                box("a", [6, 4], [3, 0], [3, 4]),
                                box("b", [4, 10], [0, 5], [4, 5], "bfloat16")])])
    write("proto", "shard_plan", plan.SerializeToString())


def proto_seeds():
    try:
        from grpc_tools import protoc  # noqa: F401
    except ImportError:
        print("make_corpus: grpc_tools missing; proto seeds not written",
              file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        proto_dir = os.path.join(ROOT, "proto")
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc",
                        "-I" + proto_dir, "--python_out=" + tmp,
                        "wt/v1/wt.proto"], check=True)
        sys.path.insert(0, tmp)
        from wt.v1 import wt_pb2 as pb

        nccl = pb.InitWeightTransferEngineRequest(init_info=pb.WeightTransferInitInfo(
            backend="nccl", timeout_ms=5000, world_size=3, rank_offset=1,
            nccl=pb.NcclInitInfo(nccl_unique_id=bytes(range(128)),
                                 packed=True,
                                 packed_buffer_size_bytes=pb.UInt64Value(
                                     value=1 << 30))))
        nccl.init_info.options["k"] = "v"
        write("proto", "init_nccl", nccl.SerializeToString())
        ucx = pb.InitWeightTransferEngineRequest(init_info=pb.WeightTransferInitInfo(
            backend="ucx", ucx=pb.UcxInitInfo(
                trainer_address="10.0.0.1", trainer_port=13337,
                packed_num_buffers=pb.UInt32Value(value=2), transports="tcp")))
        write("proto", "init_ucx", ucx.SerializeToString())
        plan_seeds(pb)
        ring = pb.InitWeightTransferEngineRequest(init_info=pb.WeightTransferInitInfo(
            backend="ipc", timeout_ms=2000, ipc=pb.IpcInitInfo(
                packed=True,
                packed_buffer_size_bytes=pb.UInt64Value(value=1 << 20),
                packed_num_buffers=pb.UInt32Value(value=2),
                ring=[pb.IpcExport(
                    id=i, handle=bytes([i]) * 64, size_bytes=1 << 20,
                    gpu_uuid="GPU-5c2f8a41-0d4e-4f0b-9a57-1b2c3d4e5f60")
                    for i in (1, 2)])))
        write("proto", "init_ipc_packed", ring.SerializeToString())
        info = pb.WeightTransferUpdateInfo(
            names=["model.embed_tokens.weight", "lm_head.weight"],
            dtype_names=["bfloat16", "float32"],
            shapes=[pb.Shape(dims=[8, 4]), pb.Shape(dims=[4])],
            packed=True, packed_tensor_sizes=[64, 16],
            grpc=pb.GrpcUpdateInfo(transfer_id="t1"))
        write("proto", "update_weights",
              pb.UpdateWeightsRequest(update_info=info, round_id=7)
              .SerializeToString())
        write("proto", "push_header", pb.PushWeightsChunk(
            header=pb.PushWeightsHeader(update_info=info, round_id=7,
                                        packed_buffer_size_bytes=1 << 20))
              .SerializeToString())
        write("proto", "push_chunk", pb.PushWeightsChunk(
            chunk=pb.BucketChunk(bucket=1, offset=4096, data=b"\xab" * 16))
              .SerializeToString())
        ipc = pb.UpdateWeightsRequest(update_info=pb.WeightTransferUpdateInfo(
            names=["w"], dtype_names=["float16"], shapes=[pb.Shape(dims=[2])],
            ipc=pb.IpcUpdateInfo(
                exports=[pb.IpcExport(
                    id=3, handle=b"\x01" * 64, size_bytes=4096,
                    gpu_uuid="GPU-5c2f8a41-0d4e-4f0b-9a57-1b2c3d4e5f60")],
                tensors=[pb.IpcTensor(places=[pb.IpcPlace(
                    export_id=3, offset_bytes=256)])])))
        write("proto", "update_ipc", ipc.SerializeToString())
        split = pb.UpdateWeightsRequest(update_info=pb.WeightTransferUpdateInfo(
            names=["model.embed_tokens.weight", "lm_head.weight"],
            dtype_names=["bfloat16", "float32"],
            shapes=[pb.Shape(dims=[8, 4]), pb.Shape(dims=[4])],
            ucx=pb.UcxUpdateInfo(
                packed_buffer_size_bytes=pb.UInt64Value(value=24),
                split_tensors=True)), round_id=7)
        write("proto", "update_ucx_split", split.SerializeToString())
        write("proto", "list_parameters", pb.ListParametersRequest(
            name_prefix="model.layers.0.", page_size=10, page_token="abc")
              .SerializeToString())
        write("proto", "finish", pb.FinishWeightUpdateRequest(
            weight_version="step-42", round_id=7).SerializeToString())
        write("proto", "checksum", pb.ChecksumWeightsRequest(
            names=["w"], algorithm=pb.CHECKSUM_ALGORITHM_XXH3_64,
            all_workers=True).SerializeToString())
        write("proto", "server_info", pb.ServerInfo(
            server_version="0.1.0", backends=["grpc", "ucx"],
            workers=[pb.WorkerInfo(rank=0, device="cpu", state="ready")],
            model=pb.ModelSummary(name="synthetic:llama-tiny",
                                  num_parameters=3, total_bytes=96))
              .SerializeToString())
    # Malformed: a varint that never ends, a length past the end, a field
    # number 0, and a group wire type.
    write("proto", "bad_varint", b"\x10" + b"\xff" * 11)
    write("proto", "bad_length", b"\x0a\x7f\x08\x01")
    write("proto", "bad_field_zero", b"\x00\x01")
    write("proto", "bad_group", b"\x0b\x08\x01\x0c")


if __name__ == "__main__":
    safetensors_seeds()
    proto_seeds()
