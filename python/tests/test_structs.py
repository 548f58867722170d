"""The ctypes mirrors in wt_transfer._structs match the C structs they mirror.

A tiny C program, compiled at test time with `cc` against the installed
headers (the include/ beside WT_SERVER_BIN's bin/), prints sizeof,
_Alignof and, for every field, offsetof and sizeof; each mirror must agree
to the byte. A change to a C struct that its mirror does not follow fails
here instead of corrupting memory at run time. Skipped, saying why, where
there is no `cc` or no installed headers.
"""

import ctypes
import os
import pathlib
import shutil
import subprocess

import pytest

from wt_transfer import _structs
from conftest import _server_bin

# C struct -> (the header that declares it, {Python field: C member}).
# Python's names may differ from C's; each is mapped here, explicitly.
# DLPack's come from the declarations in _DLPACK below.
STRUCTS = {
    "wt_source_tensor": ("wt/source.h", {
        "name": "name", "dtype": "dtype", "ndim": "ndim", "shape": "shape",
        "data": "data", "nbytes": "nbytes", "kind": "kind",
        "device_type": "device.type", "device_index": "device.index",
        "cuda_stream": "cuda_stream", "cuda_event": "cuda_event"}),
    "wt_weight_version": ("wt/client.h", {
        "version": "version", "sequence": "sequence",
        "committed_unix_ms": "committed_unix_ms"}),
    "wt_param_checksum": ("wt/client.h", {
        "name": "name", "digest": "digest", "worker": "worker"}),
    "wt_control_plane": ("wt/control.h", {"ops": "ops", "self": "self"}),
    "wt_delta_stats": ("wt/trainer.h", {
        "raw_bytes": "raw_bytes", "delta_wire_bytes": "delta_wire_bytes",
        "delta_servers": "delta_servers", "full_servers": "full_servers",
        "encode_s": "encode_s", "round_s": "round_s"}),
    "wt_consumer_tensor": ("wt/consumer.h", {
        "name": "name", "dtype": "dtype", "shape": "shape", "ndim": "ndim",
        "nbytes": "nbytes", "data": "data", "on_device": "on_device",
        "cuda_device": "cuda_device"}),
    "wt_consumer_version": ("wt/consumer.h", {
        "lease_id": "lease_id", "version": "version", "sequence": "sequence",
        "committed_unix_ms": "committed_unix_ms", "worker": "worker",
        "device": "device", "n_tensors": "n_tensors", "tensors": "tensors"}),
    "wt_consumer_options": ("wt/consumer.h", {
        "reply_timeout_ms": "reply_timeout_ms",
        "register_host": "register_host", "server_uid": "server_uid",
        "keep_mappings": "keep_mappings"}),
    "wt_acquire_options": ("wt/consumer.h", {
        "version": "version", "after_sequence": "after_sequence",
        "timeout_ms": "timeout_ms", "worker": "worker"}),
    "DLDevice": (None, {"device_type": "device_type",
                        "device_id": "device_id"}),
    "DLDataType": (None, {"code": "code", "bits": "bits", "lanes": "lanes"}),
    "DLTensor": (None, {
        "data": "data", "device": "device", "ndim": "ndim", "dtype": "dtype",
        "shape": "shape", "strides": "strides",
        "byte_offset": "byte_offset"}),
    "DLManagedTensor": (None, {
        "dl_tensor": "dl_tensor", "manager_ctx": "manager_ctx",
        "deleter": "deleter"}),
}

# wt neither installs nor copies dlpack.h: these are its declarations
# (DLPack's ABI, unchanged since v0.6; the enums cut to what wt uses).
_DLPACK = """
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 } DLDeviceType;
typedef struct { DLDeviceType device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
"""


def _include_dir() -> pathlib.Path:
    server = pathlib.Path(_server_bin()).resolve()
    inc = server.parent.parent / "include"
    if not (inc / "wt" / "consumer.h").is_file():
        pytest.skip(f"no installed wt headers at {inc} (beside "
                    f"{server}): the struct layout check needs them")
    return inc


def _program() -> str:
    headers = sorted({h for h, _ in STRUCTS.values() if h})
    lines = ["#include <stdalign.h>", "#include <stddef.h>",
             "#include <stdint.h>", "#include <stdio.h>"]
    lines += [f'#include "{h}"' for h in headers]
    lines += [_DLPACK, "#define F(T, m) printf(\"%s %s %zu %zu\\n\", #T, #m, "
              "offsetof(T, m), sizeof(((T *)0)->m))",
              "int main(void) {"]
    for c_name, (_, fields) in STRUCTS.items():
        lines.append(f'  printf("{c_name} = %zu %zu\\n", sizeof({c_name}), '
                     f"alignof({c_name}));")
        lines += [f"  F({c_name}, {m});" for m in fields.values()]
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    """{(C struct, "=" or member): (offset or size, size or alignment)}."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler (cc): the struct layout check needs one")
    inc = _include_dir()
    d = tmp_path_factory.mktemp("structs")
    (d / "layout.c").write_text(_program())
    p = subprocess.run([cc, "-std=c11", "-I", str(inc), "-o",
                        str(d / "layout"), str(d / "layout.c")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"compiling the layout program:\n{p.stderr}"
    out = subprocess.run([str(d / "layout")], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    layout = {}
    for line in out.splitlines():
        struct, member, a, b = line.split()
        layout[(struct, member)] = (int(a), int(b))
    return layout


def test_every_mirror_is_checked():
    assert set(STRUCTS) == set(_structs.ALL)
    for c_name, cls in _structs.ALL.items():
        names = [f[0] for f in cls._fields_]
        assert names == list(STRUCTS[c_name][1]), c_name


@pytest.mark.parametrize("c_name", sorted(STRUCTS))
def test_layout_matches_c(c_layout, c_name):
    cls = _structs.ALL[c_name]
    size, align = c_layout[(c_name, "=")]
    got = []
    want = []
    got.append(("sizeof", ctypes.sizeof(cls)))
    want.append(("sizeof", size))
    got.append(("alignof", ctypes.alignment(cls)))
    want.append(("alignof", align))
    for py_name, c_member in STRUCTS[c_name][1].items():
        field = getattr(cls, py_name)
        got.append((py_name, field.offset, field.size))
        want.append((py_name, *c_layout[(c_name, c_member)]))
    # (field, offset, size) each: one assert so a drift shows every field
    assert got == want, f"{cls.__name__} does not mirror {c_name}"
