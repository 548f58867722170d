#!/usr/bin/env python3
"""The Python side of the benchmark: a grpcio client that streams BYTES
through wt.v1.WeightTransfer/PushWeights in chunks of CHUNK bytes (a header,
then BucketChunk messages), as the grpc backend does, and prints one JSON
line per run: {"bytes": N, "seconds": S, "gbps": G}."""

import argparse
import json
import os
import sys
import time

import grpc

import wt_stubs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--stubs-dir", required=True)
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--chunk-size", type=int, default=1 << 20)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    pb, pb_grpc = wt_stubs.load(args.proto_dir, args.stubs_dir)

    # The bytes exist before the clock starts, as a trainer's tensors do,
    # already cut into chunk-sized bytes objects (the cheapest form for
    # Python: no slicing copy while the clock runs).
    chunk = args.chunk_size
    blocks = [(off, os.urandom(min(chunk, args.bytes - off)))
              for off in range(0, args.bytes, chunk)]

    def messages():
        yield pb.PushWeightsChunk(header=pb.PushWeightsHeader(
            packed_buffer_size_bytes=chunk))
        for off, block in blocks:
            yield pb.PushWeightsChunk(chunk=pb.BucketChunk(
                bucket=0, offset=off, data=block))

    with grpc.insecure_channel(args.server,
                               options=wt_stubs.CHANNEL_OPTIONS) as ch:
        grpc.channel_ready_future(ch).result(timeout=30)
        stub = pb_grpc.WeightTransferStub(ch)
        for _ in range(args.runs):
            t0 = time.perf_counter()
            resp = stub.PushWeights(messages(), timeout=600)
            secs = time.perf_counter() - t0
            if resp.bytes_received != args.bytes:
                print(f"py_stream_client: server received "
                      f"{resp.bytes_received} of {args.bytes} bytes",
                      file=sys.stderr)
                return 1
            print(json.dumps({"bytes": args.bytes, "seconds": secs,
                              "gbps": args.bytes / secs / 1e9}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
