"""The inference side: what wt-server's export hands an inference process
(docs/export.md), through libwt_consumer (wt/consumer.h; no gRPC).

    import wt_transfer.consumer as wtc
    with wtc.open("/run/user/1000/wt/export.sock") as c:
        with c.acquire() as tensors:          # a lease on the newest version
            print(tensors.version, len(tensors))
            for name, array in tensors.items():
                load(name, array)             # read-only numpy views, no copy

Host regions come as numpy arrays over the server's memory, read-only
(numpy refuses writes; the mapping itself is read-only). bfloat16 and the
float8 types come as uint16 / uint8 arrays with the real dtype in
`tensors.dtypes`. Device regions come as objects with
`__cuda_array_interface__` and DLPack (`torch.from_dlpack` works), opened
through their CUDA IPC handles. The lease ends when the `with` block ends,
whatever happens inside it.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from ctypes import (POINTER, byref, c_char_p, c_int64, c_size_t, c_uint64,
                    c_void_p)

from typing import (TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple,
                    Union, cast)

from . import _lib, errors
# The structs' mirrors (wt/consumer.h, dlpack.h) live in _structs.
from ._structs import AcquireOptions as _Acquire
from ._structs import ConsumerOptions as _Options
from ._structs import ConsumerVersion as _Version
from ._structs import DL_DELETER as _DELETER
from ._structs import DLDataType as _DLDataType
from ._structs import DLDevice as _DLDevice
from ._structs import DLManagedTensor as _DLManaged

if TYPE_CHECKING:
    import numpy.typing as npt


_lock = threading.Lock()
_L: Optional[ctypes.CDLL] = None


def _lib_consumer() -> ctypes.CDLL:
    global _L
    with _lock:
        if _L is not None:
            return _L
        L = ctypes.CDLL(str(_lib.find_lib("libwt_consumer")))
        st = c_void_p
        errors.type_status_calls(L)
        for name, res, args in (
                ("wt_consumer_connect", st, [c_char_p, POINTER(_Options), POINTER(c_void_p)]),
                ("wt_consumer_close", None, [c_void_p]),
                ("wt_consumer_acquire", st, [c_void_p, POINTER(_Acquire),
                                             POINTER(POINTER(_Version))]),
                ("wt_consumer_release", st, [c_void_p, POINTER(_Version)]),
                ("wt_consumer_region_counts", None, [c_void_p, POINTER(c_uint64),
                                                     POINTER(c_size_t)])):
            f = getattr(L, name)
            f.restype, f.argtypes = res, args
        _L = L
        return L


def _check(st: Optional[int]) -> None:
    errors.raise_status(_lib_consumer(), st)


# safetensors' dtype -> (numpy typestr of the array handed out, itemsize)
_NP = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8",
       "I32": "<i4", "I16": "<i2", "I8": "|i1", "U8": "|u1", "U16": "<u2",
       "U32": "<u4", "U64": "<u8", "BOOL": "|b1", "F8_E4M3": "|u1",
       "F8_E5M2": "|u1"}
# safetensors' dtype -> PyTorch's name
TORCH_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16",
               "BF16": "bfloat16", "I64": "int64", "I32": "int32",
               "I16": "int16", "I8": "int8", "U8": "uint8", "U16": "uint16",
               "U32": "uint32", "U64": "uint64", "BOOL": "bool",
               "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
# DLPack (code, bits) per safetensors' dtype
_DL = {"F64": (2, 64), "F32": (2, 32), "F16": (2, 16), "BF16": (4, 16),
       "I64": (0, 64), "I32": (0, 32), "I16": (0, 16), "I8": (0, 8),
       "U8": (1, 8), "U16": (1, 16), "U32": (1, 32), "U64": (1, 64),
       "BOOL": (6, 8), "F8_E4M3": (1, 8), "F8_E5M2": (1, 8)}


class _HostView:
    """What numpy makes a read-only array from (the memory is the mapping)."""

    def __init__(self, ptr: int, shape: Tuple[int, ...], typestr: str,
                 owner: Lease) -> None:
        self.__array_interface__ = {"shape": shape, "typestr": typestr,
                                    "data": (ptr, True), "version": 3}
        self._owner = owner  # the lease


# id -> (managed struct, shape, owner) until the deleter runs
_live_dl: Dict[int, Tuple[_DLManaged, ctypes.Array[c_int64], Lease]] = {}


def _dl_delete(p: ctypes._Pointer[_DLManaged]) -> None:
    _live_dl.pop(ctypes.addressof(p.contents), None)


_dl_deleter = _DELETER(_dl_delete)


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]


class DeviceTensor:
    """A tensor in a device region: `__cuda_array_interface__` (read-only)
    and DLPack, so `torch.from_dlpack(t)` or `cupy.asarray(t)` sees the
    server's GPU memory without a copy. Valid while its lease is held."""

    def __init__(self, name: str, dtype: str, shape: Sequence[int],
                 ptr: Optional[int], nbytes: int, device: int,
                 owner: Lease) -> None:
        self.name, self.dtype, self.shape = name, dtype, tuple(shape)
        self.ptr, self.nbytes, self.device, self._owner = ptr, nbytes, device, owner

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        return {"shape": self.shape, "typestr": _NP[self.dtype],
                "data": (self.ptr, True), "version": 3, "strides": None,
                "stream": None}

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (2, self.device)  # kDLCUDA

    def __dlpack__(self, stream: Any = None) -> Any:
        m = _DLManaged()
        shape = (c_int64 * max(len(self.shape), 1))(*self.shape)
        code, bits = _DL[self.dtype]
        m.dl_tensor.data = self.ptr
        m.dl_tensor.device = _DLDevice(2, self.device)
        m.dl_tensor.ndim = len(self.shape)
        m.dl_tensor.dtype = _DLDataType(code, bits, 1)
        m.dl_tensor.shape = ctypes.cast(shape, POINTER(c_int64))
        m.dl_tensor.strides = None
        m.dl_tensor.byte_offset = 0
        m.deleter = _dl_deleter
        _live_dl[ctypes.addressof(m)] = (m, shape, self._owner)
        return _PyCapsule_New(ctypes.addressof(m), b"dltensor", None)


# A tensor of a version: a read-only numpy array over host memory, or a
# DeviceTensor.
TensorArray = Union["npt.NDArray[Any]", DeviceTensor]


class Tensors(dict[str, TensorArray]):
    """A version's tensors {name: array} in the model's order, under a lease.
    `version`, `sequence`, `committed_unix_ms`, `worker`, `device`, and
    `dtypes` ({name: PyTorch's dtype name}) say what they are."""

    version: str
    sequence: int
    committed_unix_ms: int
    worker: int
    device: str
    lease_id: int
    dtypes: Dict[str, str]


class Lease:
    """A context manager: entering yields the Tensors; leaving releases."""

    def __init__(self, consumer: Consumer, vp: ctypes._Pointer[_Version]) -> None:
        self._c = consumer
        # The C version, shared with the consumer's finalizer of this lease
        # (which must not hold the lease): released once, by whichever of
        # release(), the consumer's close or the collection comes first.
        self._box: List[Optional[ctypes._Pointer[_Version]]] = [vp]
        v = vp.contents
        t = Tensors()
        t.version = (v.version or b"").decode()
        t.sequence = v.sequence
        t.committed_unix_ms = v.committed_unix_ms
        t.worker = v.worker
        t.device = (v.device or b"").decode()
        t.lease_id = v.lease_id
        t.dtypes = {}
        import numpy as np
        for i in range(v.n_tensors):
            x = v.tensors[i]
            name = x.name.decode()
            dt = x.dtype.decode()
            shape = tuple(x.shape[k] for k in range(x.ndim))
            t.dtypes[name] = TORCH_NAMES.get(dt, dt.lower())
            if x.on_device:
                t[name] = DeviceTensor(name, dt, shape, x.data, x.nbytes,
                                       x.cuda_device, self)
            else:
                if dt not in _NP:
                    raise errors.Unimplemented(f"tensor '{name}': dtype {dt}")
                ptr = x.data if x.nbytes else None
                if ptr is None:
                    empty = np.zeros(shape, dtype=_NP[dt])
                    empty.flags.writeable = False
                    t[name] = empty
                else:
                    t[name] = np.asarray(_HostView(ptr, shape, _NP[dt], self))
        # None once released
        self.tensors: Optional[Tensors] = t

    def release(self) -> None:
        """Ends the lease (once; again is a no-op). Arrays of it stay
        readable, but the server may then write new bytes under them."""
        with self._c._mu:  # under the consumer's lock: close may free it
            vp, self._box[0] = self._box[0], None
            if vp is None:
                return
            self.tensors = None
            _check(_lib_consumer().wt_consumer_release(self._c._h, vp))

    def __enter__(self) -> Tensors:
        # (None only once released: entering a released lease is a misuse)
        return cast(Tensors, self.tensors)

    def __exit__(self, *exc: Any) -> None:
        self.release()


class Consumer:
    """A connection to a wt-server's export socket.

    Lifetimes (as numpy.memmap's): an array or device tensor handed out
    keeps its lease object, and the lease its consumer, alive; the mapping
    goes only when the consumer is closed *and* no lease object (so no
    array of it) lives any more. No order of close(), `with` exits and
    garbage collection unmaps memory a live array points at."""

    def __init__(self, path: str, *, register_host: bool = False,
                 server_uid: int = 0,
                 reply_timeout: Optional[float] = None) -> None:
        # keep_mappings: arrays may outlive their lease's release; the
        # mappings go only at the deferred close below
        o = _Options(int(reply_timeout * 1000) if reply_timeout else 0,
                     bool(register_host), int(server_uid), True)
        self._h = c_void_p()
        self.path = str(path)
        self._leases: weakref.WeakSet[Lease] = weakref.WeakSet()
        self._live = 0          # lease objects alive (their arrays may be read)
        self._closed = False
        # libwt_consumer serves one call at a time per consumer: threads of
        # this process (a server's workers in one process) take turns for
        # each call; leases of several threads may be held at once. An RLock:
        # a lease collected while the lock is held ends under it.
        self._mu = threading.RLock()
        _check(_lib_consumer().wt_consumer_connect(self.path.encode(), byref(o),
                                                   byref(self._h)))

    def acquire(self, version: str | None = None, *, after_sequence: int = 0,
                timeout: float = 0.0, worker: int = 0) -> Lease:
        """A lease on the newest committed version (or `version`, which must
        be the one held: NotFound naming it otherwise), waiting up to
        `timeout` seconds for one after `after_sequence`."""
        a = _Acquire(version.encode() if version else None, int(after_sequence),
                     int(timeout * 1000), int(worker))
        vp = POINTER(_Version)()
        with self._mu:
            if self._closed or not self._h:
                raise errors.FailedPrecondition(f"export {self.path}: closed")
            _check(_lib_consumer().wt_consumer_acquire(self._h, byref(a), byref(vp)))
            try:
                lease = Lease(self, vp)
            except BaseException:
                _lib_consumer().wt_consumer_release(self._h, vp)
                raise
            self._leases.add(lease)
            self._live += 1
        weakref.finalize(lease, self._lease_gone, lease._box)
        return lease

    def _lease_gone(self, box: List[Optional[ctypes._Pointer[_Version]]]) -> None:
        """A lease object (so every array of it) is gone: its server lease
        ends if release() never ran, and a closed consumer unmaps once the
        last one goes."""
        with self._mu:
            vp, box[0] = box[0], None
            if vp is not None and self._h:
                L = _lib_consumer()
                st = L.wt_consumer_release(self._h, vp)
                if st:
                    L.wt_status_free(st)
            self._live -= 1
            if self._closed and self._live <= 0:
                self._unmap()

    def _unmap(self) -> None:
        if self._h:
            _lib_consumer().wt_consumer_close(self._h)
            self._h = c_void_p()

    def regions(self) -> Tuple[int, int]:
        """(regions mapped since connecting, regions held now)."""
        m, h = c_uint64(), c_size_t()
        with self._mu:
            if not self._h:
                raise errors.FailedPrecondition(f"export {self.path}: closed")
            _lib_consumer().wt_consumer_region_counts(self._h, byref(m), byref(h))
        return m.value, h.value

    def close(self) -> None:
        """Ends every lease and closes the connection. Arrays handed out
        stay readable (the mapping lives until the last of them goes), but
        their bytes are no longer the version's: the server may reuse them.
        Copy what you keep before close or release."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            L = _lib_consumer()
            for lease in list(self._leases):
                vp, lease._box[0] = lease._box[0], None
                if vp is not None and self._h:
                    st = L.wt_consumer_release(self._h, vp)
                    if st:
                        L.wt_status_free(st)
            if self._live <= 0:
                self._unmap()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def open(path: "os.PathLike[str] | str", **kw: Any) -> Consumer:  # noqa: A001 (the issue's name)
    """Connects to the export socket at `path` (see Consumer)."""
    return Consumer(os.fspath(path), **kw)
