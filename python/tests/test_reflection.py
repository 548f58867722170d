"""gRPC server reflection with stock clients: grpcio-reflection's
descriptor database (v1alpha) and the same messages on v1's path list
every service wt-server serves and describe every method, with the
request and response types of its proto; under tokens, reflection wants
a reader's token like every other call."""

import os
import pathlib
import re

import pytest

grpc = pytest.importorskip("grpc", reason="no grpcio here")
refl = pytest.importorskip("grpc_reflection.v1alpha.reflection_pb2",
                           reason="no grpcio-reflection here")
from google.protobuf import descriptor_pool  # noqa: E402
from grpc_reflection.v1alpha import reflection_pb2  # noqa: E402
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (  # noqa: E402
    ProtoReflectionDescriptorDatabase)

ROOT = pathlib.Path(__file__).resolve().parents[2]


def served_methods() -> dict:
    """{service: {method: (input, output, client_streaming,
    server_streaming)}} from the proto files in the tree, the ground truth."""
    out = {}
    for path in ("wt/v1/wt.proto", "grpc/health/v1/health.proto",
                 "grpc/reflection/v1/reflection.proto",
                 "grpc/reflection/v1alpha/reflection.proto"):
        text = (ROOT / "proto" / path).read_text()
        text = re.sub(r"//[^\n]*", "", text)
        pkg = re.search(r"package\s+([\w.]+)\s*;", text).group(1)
        for svc, body in re.findall(r"service\s+(\w+)\s*\{(.*?)\n\}", text, re.S):
            methods = {}
            for name, cs, inp, ss, outp in re.findall(
                    r"rpc\s+(\w+)\s*\(\s*(stream\s+)?([\w.]+)\s*\)\s*returns\s*"
                    r"\(\s*(stream\s+)?([\w.]+)\s*\)", body):
                q = lambda t: t if "." in t else f"{pkg}.{t}"  # noqa: E731
                methods[name] = (q(inp), q(outp), bool(cs), bool(ss))
            out[f"{pkg}.{svc}"] = methods
    return out


def check_pool(channel):
    db = ProtoReflectionDescriptorDatabase(channel)
    want = served_methods()
    assert sorted(db.get_services()) == sorted(want)
    pool = descriptor_pool.DescriptorPool(db)
    for svc, methods in want.items():
        d = pool.FindServiceByName(svc)
        got = {m.name: (m.input_type.full_name, m.output_type.full_name,
                        m.client_streaming, m.server_streaming)
               for m in d.methods}
        assert got == methods, svc
        for m in d.methods:  # every field of every message is described
            assert m.input_type.fields is not None
    info = pool.FindMessageTypeByName("wt.v1.ServerInfo")
    assert "backend_info" in info.fields_by_name
    return db


def test_list_and_describe(start_server):
    s = start_server("--model", "synthetic:tiny", "--no-auth")
    with grpc.insecure_channel(s.addr) as ch:
        check_pool(ch)
        # v1: the same messages on the newer path; several requests on one
        # stream, each answered in turn, errors as the protocol says.
        call = ch.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        reqs = [reflection_pb2.ServerReflectionRequest(list_services=""),
                reflection_pb2.ServerReflectionRequest(
                    file_containing_symbol="wt.v1.WeightTransfer.PushWeights"),
                reflection_pb2.ServerReflectionRequest(file_by_filename="nope.proto"),
                reflection_pb2.ServerReflectionRequest(
                    file_containing_symbol="wt.v1.NoSuchThing"),
                reflection_pb2.ServerReflectionRequest(
                    all_extension_numbers_of_type="wt.v1.ServerInfo"),
                reflection_pb2.ServerReflectionRequest()]
        got = list(call(iter(reqs), timeout=10))
        assert len(got) == len(reqs)
        assert {x.name for x in got[0].list_services_response.service} == \
            set(served_methods())
        assert got[0].original_request.HasField("list_services")
        names = []
        from google.protobuf import descriptor_pb2
        for raw in got[1].file_descriptor_response.file_descriptor_proto:
            f = descriptor_pb2.FileDescriptorProto.FromString(raw)
            names.append(f.name)
        assert names[-1] == "wt/v1/wt.proto"
        assert got[2].error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
        assert "nope.proto" in got[2].error_response.error_message
        assert "wt.v1.NoSuchThing" in got[3].error_response.error_message
        assert got[4].all_extension_numbers_response.base_type_name == "wt.v1.ServerInfo"
        assert list(got[4].all_extension_numbers_response.extension_number) == []
        assert got[5].error_response.error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]


def test_garbage_and_silence(start_server):
    s = start_server("--model", "synthetic:tiny", "--no-auth")
    with grpc.insecure_channel(s.addr) as ch:
        raw = ch.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as e:
            list(raw(iter([b"\xff\xff\xff\xff garbage"]), timeout=10))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # Afterwards reflection (and the rest) still answers.
        check_pool(ch)
        # A stream that never sends is ended after 10 s of silence.
        import threading
        import time
        quiet = threading.Event()

        def silent():
            quiet.wait(30)
            return
            yield  # a generator that never yields

        t0 = time.time()
        with pytest.raises(grpc.RpcError) as e:
            list(raw(silent(), timeout=30))
        took = time.time() - t0
        quiet.set()
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "reflection request" in e.value.details()
        assert 9 < took < 20, took


def test_reflection_wants_a_token(start_server, tmp_path):
    os.chmod(tmp_path, 0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path))
    s = start_server("--model", "synthetic:tiny", env=env)
    port = s.addr.rsplit(":", 1)[1]
    tokens = dict(line.split() for line in
                  (tmp_path / "wt" / f"tokens-{port}").read_text().splitlines()
                  if line.strip() and not line.startswith("#"))
    with grpc.insecure_channel(s.addr) as ch:
        db = ProtoReflectionDescriptorDatabase(ch)
        with pytest.raises(grpc.RpcError) as e:
            db.get_services()
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    creds = grpc.metadata_call_credentials(
        lambda ctx, cb: cb((("authorization", f"Bearer {tokens['reader']}"),), None))
    # Tokens over plaintext loopback: grpc wants local credentials for that.
    composite = grpc.composite_channel_credentials(
        grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP), creds)
    with grpc.secure_channel(s.addr, composite) as ch:
        check_pool(ch)
