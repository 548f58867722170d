"""Generates the wt.v1 Python stubs from proto/ into a directory and imports
them (shared by the benchmark's Python client and server)."""

import os
import sys


def load(proto_dir, out_dir):
    """Returns (wt_pb2, wt_pb2_grpc), generated into out_dir."""
    from grpc_tools import protoc

    os.makedirs(out_dir, exist_ok=True)
    rc = protoc.main([
        "grpc_tools.protoc", f"-I{proto_dir}", f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        os.path.join(proto_dir, "wt", "v1", "wt.proto")
    ])
    if rc != 0:
        raise SystemExit(f"grpc_tools.protoc failed on {proto_dir} ({rc})")
    sys.path.insert(0, out_dir)
    from wt.v1 import wt_pb2, wt_pb2_grpc

    return wt_pb2, wt_pb2_grpc


# Both sides allow 16 MiB messages, as wt does; data moves in 1 MiB chunks.
MAX_MESSAGE = 16 * 1024 * 1024
CHANNEL_OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE),
                   ("grpc.max_receive_message_length", MAX_MESSAGE)]
