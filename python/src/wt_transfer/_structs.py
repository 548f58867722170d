"""Every ctypes mirror of a C struct the package passes to or reads from C.

Each class names the C struct it mirrors and the header that declares it.
wt's headers are installed under include/wt/; DLPack's structs come from
DLPack's dlpack.h (wt neither installs nor copies it: a DLPack producer's
capsule and a DLPack consumer's deleter use the layout DLPack fixes).
tests/test_structs.py compiles the C declarations at test time and checks
each mirror's size and every field's offset against them: a change to a C
struct that is not made here fails that test.

Field names follow the C names, except where a C struct nests one of wt's
(SourceTensor flattens its wt_device `device` into device_type and
device_index: the same bytes).
"""

from __future__ import annotations

import ctypes
from ctypes import (POINTER, c_bool, c_char_p, c_double, c_int, c_int32,
                    c_int64, c_size_t, c_uint8, c_uint16, c_uint32, c_uint64,
                    c_void_p)
from typing import Any, Optional

# WT_DIGEST_HEX_MAX (wt/checksum.h)
DIGEST_HEX_MAX = 65


# --- libwt_client (client/include/wt) ---------------------------------------

class SourceTensor(ctypes.Structure):
    """wt_source_tensor (wt/source.h)."""
    # the fields' Python types (ctypes reads _fields_; these are for mypy)
    name: Optional[bytes]
    dtype: int
    ndim: int
    shape: ctypes._Pointer[c_int64]
    data: Optional[int]
    nbytes: int
    kind: int
    device_type: int
    device_index: int
    cuda_stream: Optional[int]
    cuda_event: Optional[int]
    _fields_ = [
        ("name", c_char_p),
        ("dtype", c_int),            # wt_dtype
        ("ndim", c_int),
        ("shape", POINTER(c_int64)),
        ("data", c_void_p),
        ("nbytes", c_uint64),
        ("kind", c_int),             # wt_mem_kind
        ("device_type", c_int),      # wt_device (wt/memory.h): type, index
        ("device_index", c_int),
        ("cuda_stream", c_void_p),
        ("cuda_event", c_void_p),
    ]


class WeightVersion(ctypes.Structure):
    """wt_weight_version (wt/client.h)."""
    version: Optional[bytes]
    sequence: int
    committed_unix_ms: int
    _fields_ = [("version", c_char_p), ("sequence", c_uint64),
                ("committed_unix_ms", c_int64)]


class ParamChecksum(ctypes.Structure):
    """wt_param_checksum (wt/client.h)."""
    name: bytes
    digest: bytes
    worker: int
    _fields_ = [("name", c_char_p), ("digest", ctypes.c_char * DIGEST_HEX_MAX),
                ("worker", c_uint32)]


class ControlPlane(ctypes.Structure):
    """wt_control_plane (wt/control.h)."""
    _fields_ = [("ops", c_void_p), ("self", c_void_p)]


class DeltaStats(ctypes.Structure):
    """wt_delta_stats, that is wt_grpc_delta_stats (wt/trainer.h)."""
    raw_bytes: int
    delta_wire_bytes: int
    delta_servers: int
    full_servers: int
    encode_s: float
    round_s: float
    _fields_ = [("raw_bytes", c_uint64), ("delta_wire_bytes", c_uint64),
                ("delta_servers", c_uint32), ("full_servers", c_uint32),
                ("encode_s", c_double), ("round_s", c_double)]


# --- libwt_consumer (consumer/include/wt/consumer.h) ------------------------

class ConsumerTensor(ctypes.Structure):
    """wt_consumer_tensor (wt/consumer.h)."""
    name: bytes
    dtype: bytes
    shape: ctypes._Pointer[c_int64]
    ndim: int
    nbytes: int
    data: Optional[int]
    on_device: bool
    cuda_device: int
    _fields_ = [("name", c_char_p), ("dtype", c_char_p),
                ("shape", POINTER(c_int64)), ("ndim", c_size_t),
                ("nbytes", c_uint64), ("data", c_void_p), ("on_device", c_bool),
                ("cuda_device", c_int)]


class ConsumerVersion(ctypes.Structure):
    """wt_consumer_version (wt/consumer.h)."""
    lease_id: int
    version: Optional[bytes]
    sequence: int
    committed_unix_ms: int
    worker: int
    device: Optional[bytes]
    n_tensors: int
    tensors: ctypes._Pointer[ConsumerTensor]
    _fields_ = [("lease_id", c_uint64), ("version", c_char_p),
                ("sequence", c_uint64), ("committed_unix_ms", c_int64),
                ("worker", c_uint32), ("device", c_char_p),
                ("n_tensors", c_size_t), ("tensors", POINTER(ConsumerTensor))]


class ConsumerOptions(ctypes.Structure):
    """wt_consumer_options (wt/consumer.h)."""
    reply_timeout_ms: int
    register_host: bool
    server_uid: int
    keep_mappings: bool
    _fields_ = [("reply_timeout_ms", c_uint32), ("register_host", c_bool),
                ("server_uid", c_int64), ("keep_mappings", c_bool)]


class AcquireOptions(ctypes.Structure):
    """wt_acquire_options (wt/consumer.h)."""
    version: Optional[bytes]
    after_sequence: int
    timeout_ms: int
    worker: int
    _fields_ = [("version", c_char_p), ("after_sequence", c_uint64),
                ("timeout_ms", c_uint32), ("worker", c_uint32)]


# --- DLPack (dlpack.h: DLPack's own header, not wt's) -----------------------

class DLDevice(ctypes.Structure):
    """DLDevice (dlpack.h); device_type is the enum DLDeviceType."""
    device_type: int
    device_id: int
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(ctypes.Structure):
    """DLDataType (dlpack.h)."""
    code: int
    bits: int
    lanes: int
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(ctypes.Structure):
    """DLTensor (dlpack.h)."""
    data: Optional[int]
    device: DLDevice
    ndim: int
    dtype: DLDataType
    shape: ctypes._Pointer[c_int64]
    strides: Optional[ctypes._Pointer[c_int64]]
    byte_offset: int
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(ctypes.Structure):
    """DLManagedTensor (dlpack.h): what a "dltensor" capsule points at."""
    dl_tensor: DLTensor
    manager_ctx: Optional[int]
    deleter: Any  # DL_DELETER


# void (*deleter)(struct DLManagedTensor *self)
DL_DELETER = ctypes.CFUNCTYPE(None, POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", DL_DELETER)]

# Every mirror: its C name -> the class (tests/test_structs.py walks it).
ALL: dict[str, type[ctypes.Structure]] = {
    "wt_source_tensor": SourceTensor,
    "wt_weight_version": WeightVersion,
    "wt_param_checksum": ParamChecksum,
    "wt_control_plane": ControlPlane,
    "wt_delta_stats": DeltaStats,
    "wt_consumer_tensor": ConsumerTensor,
    "wt_consumer_version": ConsumerVersion,
    "wt_consumer_options": ConsumerOptions,
    "wt_acquire_options": AcquireOptions,
    "DLDevice": DLDevice,
    "DLDataType": DLDataType,
    "DLTensor": DLTensor,
    "DLManagedTensor": DLManagedTensor,
}
