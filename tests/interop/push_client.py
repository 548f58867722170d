#!/usr/bin/env python3
"""A wt client in Python: the wire contract works from another language.

Talks to a real wt-server through grpcio and stubs generated from proto/ at
run time (grpc_tools.protoc, into a temporary directory), with nothing of the
C code base: it re-implements the grpc backend's data path (vLLM's packing
rule, bucket chunks) from the contract alone.

  push_client.py make-checkpoint OUT.safetensors
      writes the checkpoint the server is started with (numpy, safetensors).
  push_client.py push --server HOST:PORT --checkpoint PATH --proto-dir DIR
                      --version V [--expected-json OUT]
      checks what the server holds against the checkpoint, pushes new values
      of every tensor in one round (two PushWeights streams), and compares the
      server's SHA-256 of each parameter with hashlib's of the bytes it sent;
      then checks a few errors. Writes the pushed digests to OUT for the C side.

Exit status 0 when every check passed, 1 otherwise (the failing check is
printed), 2 on bad usage.
"""

import argparse
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

# Sizes chosen so that the plan has several buckets, one tensor larger than
# the buffer (it closes its bucket on its own), and odd byte counts.
BUFFER_BYTES = 16 * 1024
CHUNK_BYTES = 4 * 1024
TIMEOUT_S = 20
MAX_MESSAGE = 16 * 1024 * 1024

# name -> (numpy dtype, shape, PyTorch dtype name), in the order the client
# pushes them, which is deliberately not the file's (safetensors sorts).
LAYOUT = [
    ("model.embed_tokens.weight", np.float32, (64, 48), "float32"),
    ("model.layers.0.input_layernorm.weight", np.float32, (48,), "float32"),
    ("model.layers.0.self_attn.q_proj.weight", np.float16, (48, 48), "float16"),
    ("model.layers.0.mlp.up_proj.weight", np.float16, (96, 48), "float16"),
    ("model.layers.0.mlp.down_proj.weight", np.float32, (48, 96), "float32"),
    ("model.layers.0.token_counts", np.int32, (7,), "int32"),
    ("model.layers.0.mask", np.uint8, (1001,), "uint8"),
    ("model.big_table", np.float32, (128, 80), "float32"),
    ("model.norm.weight", np.float32, (48,), "float32"),
    ("lm_head.weight", np.float16, (64, 48), "float16"),
]


class CheckFailed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise CheckFailed(what)


def make_tensors(seed):
    """Deterministic contents for every tensor of LAYOUT."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, dt, shape, _ in LAYOUT:
        if np.issubdtype(dt, np.integer):
            info = np.iinfo(dt)
            a = rng.integers(info.min, info.max, size=shape, dtype=dt,
                             endpoint=True)
        else:
            a = rng.standard_normal(size=shape).astype(dt)
        out[name] = np.ascontiguousarray(a)
    return out


def cmd_make_checkpoint(args):
    from safetensors.numpy import save_file

    save_file(make_tensors(0), args.out)
    print(f"interop: wrote {args.out} ({len(LAYOUT)} tensors)")
    return 0


def load_stubs(proto_dir, workdir):
    """Generates wt/v1 stubs into workdir and imports them."""
    from grpc_tools import protoc

    gen = os.path.join(workdir, "gen")
    os.makedirs(gen, exist_ok=True)
    rc = protoc.main([
        "grpc_tools.protoc", f"-I{proto_dir}", f"--python_out={gen}",
        f"--grpc_python_out={gen}",
        os.path.join(proto_dir, "wt", "v1", "wt.proto")
    ])
    if rc != 0:
        raise CheckFailed(f"grpc_tools.protoc failed on {proto_dir} ({rc})")
    sys.path.insert(0, gen)
    from wt.v1 import wt_pb2, wt_pb2_grpc  # noqa: E402

    return wt_pb2, wt_pb2_grpc


def pack_plan(sizes, buffer_bytes):
    """vLLM's packing rule: tensors in order, flat bytes, no padding; close a
    bucket once its size EXCEEDS the buffer size; the rest at the end.
    Returns a list of lists of tensor indices."""
    buckets, cur, size = [], [], 0
    for i, s in enumerate(sizes):
        cur.append(i)
        size += s
        if size > buffer_bytes:
            buckets.append(cur)
            cur, size = [], 0
    if cur:
        buckets.append(cur)
    return buckets


def push_stream(pb, stub, round_id, names, tensors):
    """One PushWeights call carrying `names` (in that order)."""
    arrays = [tensors[n] for n in names]
    meta = {n: (d, s, t) for n, d, s, t in LAYOUT}
    info = pb.WeightTransferUpdateInfo(
        names=names,
        dtype_names=[meta[n][2] for n in names],
        shapes=[pb.Shape(dims=list(a.shape)) for a in arrays],
        packed=True,
        grpc=pb.GrpcUpdateInfo(transfer_id="python-interop"))
    header = pb.PushWeightsHeader(update_info=info, round_id=round_id,
                                  packed_buffer_size_bytes=BUFFER_BYTES)
    plan = pack_plan([a.nbytes for a in arrays], BUFFER_BYTES)

    def messages():
        yield pb.PushWeightsChunk(header=header)
        for b, members in enumerate(plan):
            data = b"".join(arrays[i].tobytes() for i in members)
            for off in range(0, len(data), CHUNK_BYTES):
                yield pb.PushWeightsChunk(chunk=pb.BucketChunk(
                    bucket=b, offset=off, data=data[off:off + CHUNK_BYTES]))

    resp = stub.PushWeights(messages(), timeout=TIMEOUT_S)
    want_bytes = sum(a.nbytes for a in arrays)
    check(
        resp.tensors_received == len(names) and
        resp.bytes_received == want_bytes,
        f"PushWeights answered {resp.tensors_received} tensors, "
        f"{resp.bytes_received} bytes; sent {len(names)}, {want_bytes}")
    return len(plan)


def server_digests(pb, stub, names=()):
    resp = stub.ChecksumWeights(pb.ChecksumWeightsRequest(
        names=list(names), algorithm=pb.CHECKSUM_ALGORITHM_SHA256),
                                timeout=TIMEOUT_S)
    return {c.name: c.digest for c in resp.checksums}


def expect_digests(pb, stub, tensors, what):
    want = {n: hashlib.sha256(a.tobytes()).hexdigest()
            for n, a in tensors.items()}
    got = server_digests(pb, stub)
    check(set(got) == set(want),
          f"{what}: server digests {sorted(got)} for parameters "
          f"{sorted(want)}")
    bad = [n for n in want if got[n] != want[n]]
    check(not bad, f"{what}: SHA-256 differs for {bad}")
    return want


def expect_error(grpc, fn, code, needle, what):
    try:
        fn()
    except grpc.RpcError as e:
        check(
            e.code() == code and needle in (e.details() or ""),
            f"{what}: got {e.code()} '{e.details()}', want {code} "
            f"mentioning '{needle}'")
        return
    raise CheckFailed(f"{what}: succeeded, want {code}")


def cmd_push(args):
    import grpc

    with tempfile.TemporaryDirectory(prefix="wt-interop-") as work:
        pb, pb_grpc = load_stubs(args.proto_dir, work)
        opts = [("grpc.max_send_message_length", MAX_MESSAGE),
                ("grpc.max_receive_message_length", MAX_MESSAGE)]
        if args.tls_ca:  # grpcio's TLS (BoringSSL) against wt's own (OpenSSL)
            with open(args.tls_ca, "rb") as f:
                creds = grpc.ssl_channel_credentials(root_certificates=f.read())
            ch = grpc.secure_channel(args.server, creds, options=opts)
        else:
            ch = grpc.insecure_channel(args.server, options=opts)
        with ch:
            stub = pb_grpc.WeightTransferStub(ch)
            run_checks(grpc, pb, stub, args)
    return 0


def run_checks(grpc, pb, stub, args):
    from safetensors.numpy import load_file

    initial = load_file(args.checkpoint)
    check(set(initial) == {n for n, *_ in LAYOUT},
          f"checkpoint {args.checkpoint} holds {sorted(initial)}")
    meta = {n: (d, s, t) for n, d, s, t in LAYOUT}

    info = stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=TIMEOUT_S)
    total = sum(a.nbytes for a in initial.values())
    check(
        info.model.num_parameters == len(LAYOUT) and
        info.model.total_bytes == total,
        f"ServerInfo model: {info.model.num_parameters} parameters, "
        f"{info.model.total_bytes} bytes; want {len(LAYOUT)}, {total}")
    check("grpc" in info.backends, f"backends {list(info.backends)}")
    print(f"interop: GetServerInfo: {info.server_version}, "
          f"{info.model.num_parameters} parameters, {total} bytes")

    # Paged listing: a small page forces several calls.
    params, token = [], ""
    while True:
        page = stub.ListParameters(pb.ListParametersRequest(
            page_size=3, page_token=token), timeout=TIMEOUT_S)
        params.extend(page.parameters)
        token = page.next_page_token
        if not token:
            break
    listed = {p.name: (p.dtype, tuple(p.shape), p.nbytes) for p in params}
    want = {n: (t, s, initial[n].nbytes) for n, (_, s, t) in meta.items()}
    check(listed == want, f"ListParameters: {listed}, want {want}")
    print(f"interop: ListParameters: {len(params)} parameters in pages of 3")

    expect_digests(pb, stub, initial, "before the push")

    init = pb.WeightTransferInitInfo(
        backend="grpc",
        grpc=pb.GrpcInitInfo(
            chunk_size_bytes=pb.UInt64Value(value=CHUNK_BYTES),
            packed_buffer_size_bytes=pb.UInt64Value(value=BUFFER_BYTES)))
    r = stub.InitWeightTransferEngine(
        pb.InitWeightTransferEngineRequest(init_info=init), timeout=TIMEOUT_S)
    check(r.ready, f"InitWeightTransferEngine: not ready: {r.message}")

    before = stub.GetWeightVersion(pb.GetWeightVersionRequest(),
                                   timeout=TIMEOUT_S)
    round_id = stub.StartWeightUpdate(pb.StartWeightUpdateRequest(),
                                      timeout=TIMEOUT_S).round_id
    check(round_id >= 1, f"round id {round_id}")

    new = make_tensors(1)
    names = [n for n, *_ in LAYOUT]
    half = len(names) // 2
    nb = push_stream(pb, stub, round_id, names[:half], new)
    nb += push_stream(pb, stub, round_id, names[half:], new)
    print(f"interop: pushed {len(names)} tensors in 2 streams: {nb} buckets "
          f"(buffer {BUFFER_BYTES} bytes), chunks of {CHUNK_BYTES} bytes")

    v = stub.GetWeightVersion(pb.GetWeightVersionRequest(), timeout=TIMEOUT_S)
    check(v.version == before.version,
          f"version '{v.version}' visible before finish")
    expect_digests(pb, stub, initial, "before finish")

    r = stub.FinishWeightUpdate(pb.FinishWeightUpdateRequest(
        weight_version=args.version, round_id=round_id), timeout=TIMEOUT_S)
    check(r.weight_version == args.version,
          f"FinishWeightUpdate answered '{r.weight_version}'")
    v = stub.GetWeightVersion(pb.GetWeightVersionRequest(), timeout=TIMEOUT_S)
    check(v.version == args.version and v.sequence == before.sequence + 1,
          f"GetWeightVersion '{v.version}' #{v.sequence}, want "
          f"'{args.version}' #{before.sequence + 1}")

    digests = expect_digests(pb, stub, new, "after finish")
    one = names[2]
    got = server_digests(pb, stub, [one])
    check(got == {one: digests[one]}, f"ChecksumWeights([{one}]): {got}")
    print(f"interop: checksums match: {len(digests)} parameters, SHA-256 of "
          f"the bytes sent (hashlib)")

    # Errors reach a Python client with their code and words.
    expect_error(
        grpc, lambda: server_digests(pb, stub, ["model.no_such"]),
        grpc.StatusCode.NOT_FOUND, "model.no_such", "unknown checksum name")
    round2 = stub.StartWeightUpdate(pb.StartWeightUpdateRequest(),
                                    timeout=TIMEOUT_S).round_id
    bad = dict(new)
    bad["model.norm.weight"] = np.zeros((24,), np.float32)
    expect_error(
        grpc, lambda: push_stream(pb, stub, round2, ["model.norm.weight"], bad),
        grpc.StatusCode.INVALID_ARGUMENT, "model.norm.weight",
        "wrong shape in the header")
    expect_error(
        grpc, lambda: stub.FinishWeightUpdate(pb.FinishWeightUpdateRequest(
            round_id=round2), timeout=TIMEOUT_S),
        grpc.StatusCode.INVALID_ARGUMENT, "weight_version",
        "finish without a version")
    # The bad push failed its round, and every later call of it says why.
    expect_error(
        grpc, lambda: stub.FinishWeightUpdate(pb.FinishWeightUpdateRequest(
            round_id=round2, weight_version="bad"), timeout=TIMEOUT_S),
        grpc.StatusCode.FAILED_PRECONDITION, "model.norm.weight",
        "finish after a failed push")
    r = stub.AbortWeightUpdate(pb.AbortWeightUpdateRequest(
        reason="interop test", round_id=round2), timeout=TIMEOUT_S)
    check(not r.aborted, "AbortWeightUpdate of a failed round: aborted=true")
    round3 = stub.StartWeightUpdate(pb.StartWeightUpdateRequest(),
                                    timeout=TIMEOUT_S).round_id
    r = stub.AbortWeightUpdate(pb.AbortWeightUpdateRequest(
        reason="interop test", round_id=round3), timeout=TIMEOUT_S)
    check(r.aborted, "AbortWeightUpdate: aborted=false")
    v = stub.GetWeightVersion(pb.GetWeightVersionRequest(), timeout=TIMEOUT_S)
    check(v.version == args.version, f"version '{v.version}' after abort")
    expect_digests(pb, stub, new, "after abort")
    print("interop: errors: NOT_FOUND, INVALID_ARGUMENT (shape, version), "
          "FAILED_PRECONDITION (failed round); abort kept the version")

    if args.expected_json:
        with open(args.expected_json, "w") as f:
            json.dump({"version": args.version, "sha256": digests}, f,
                      indent=1)
    print(f"interop: OK, version {args.version}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make-checkpoint")
    mk.add_argument("out")
    p = sub.add_parser("push")
    p.add_argument("--server", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--proto-dir", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--expected-json")
    p.add_argument("--tls-ca", help="talk TLS, trusting this CA (PEM)")
    args = ap.parse_args()
    try:
        if args.cmd == "make-checkpoint":
            return cmd_make_checkpoint(args)
        return cmd_push(args)
    except CheckFailed as e:
        print(f"interop: FAILED: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a gRPC error, a missing module: say which
        print(f"interop: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
