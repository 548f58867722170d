#!/usr/bin/env python3
"""The Python side of the benchmark: a grpcio server of wt.v1.WeightTransfer
whose PushWeights receives the stream and copies every chunk's bytes into one
preallocated bytearray (as a receiver must land them somewhere), counting
them. Prints "py-stream-server listening on HOST:PORT" once serving; exits on
SIGTERM/SIGINT."""

import argparse
import signal
import sys
import threading
from concurrent import futures

import grpc

import wt_stubs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--stubs-dir", required=True)
    ap.add_argument("--size", type=int, required=True,
                    help="bytes of the receive buffer")
    args = ap.parse_args()
    pb, pb_grpc = wt_stubs.load(args.proto_dir, args.stubs_dir)

    buf = bytearray(args.size)
    view = memoryview(buf)

    class Servicer(pb_grpc.WeightTransferServicer):

        def PushWeights(self, request_iterator, context):
            received = 0
            for msg in request_iterator:
                if msg.WhichOneof("payload") != "chunk":
                    continue
                data = msg.chunk.data
                off = msg.chunk.offset
                if off + len(data) > len(buf):
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"chunk at offset {off} out of bounds")
                view[off:off + len(data)] = data
                received += len(data)
            return pb.PushWeightsResponse(bytes_received=received)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         options=wt_stubs.CHANNEL_OPTIONS)
    pb_grpc.add_WeightTransferServicer_to_server(Servicer(), server)
    port = server.add_insecure_port(args.listen)
    host = args.listen.rsplit(":", 1)[0]
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"py-stream-server listening on {host}:{port}", flush=True)
    stop.wait()
    server.stop(grace=1).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
