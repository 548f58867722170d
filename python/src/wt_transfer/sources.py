"""Weight sources: the trainer's tensors, handed to the C engines as pointers.

The seed's contract (vLLM's `WeightSource`): `metadata()` first, a list of
`(name, dtype, shape)`, then iteration yields `(name, tensor)` pairs in that
order, a fresh pass each round. Any object with those two works; this
module adds `ArraySource` over a dict or a list of pairs.

A tensor is anything that offers `__cuda_array_interface__` (a GPU tensor:
torch, cupy), `__array_interface__` (numpy, and what wraps it), DLPack
(`__dlpack__` and `__dlpack_device__`: torch, jax, cupy), or torch's
`data_ptr()`. Its bytes are never copied: the C engines get its address,
and the tensor is kept alive until the round that sends it ends. A tensor
that is not contiguous, or that differs from the metadata (name, order,
dtype, shape), is a ValueError naming it before any byte moves.

numpy has no bfloat16: wrap a uint16 array as `view(array, "bfloat16")` (or
use ml_dtypes' bfloat16, which is recognised by name).
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import byref, c_int, c_void_p
from typing import (Any, Dict, Iterable, Iterator, List, NamedTuple, Optional,
                    Sequence, Set, Tuple, Union)

from . import _lib
# DLPack's structs (dlpack.h) live in _structs.
from ._structs import DLTensor as _DLTensor


# One tensor of a source's metadata. wt's own (ArraySource's, and what
# source_metas() returns) has dtype as wt's name (a str) and shape a tuple
# of ints; a source's may give a torch or numpy dtype, which wt names.
class ParamMeta(NamedTuple):
    name: str
    dtype: Any
    shape: Tuple[int, ...]


# typestr (without byte order) -> wt's (PyTorch's) dtype name
_TYPESTR = {
    "f2": "float16", "f4": "float32", "f8": "float64",
    "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64",
    "u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64",
    "b1": "bool",
}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
             "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1,
             "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1,
             "float8_e4m3fn": 1, "float8_e5m2": 1}
# DLPack type codes (dlpack.h): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
# kDLBool 6
_DLPACK = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
           (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32",
           (1, 64): "uint64", (2, 16): "float16", (2, 32): "float32",
           (2, 64): "float64", (4, 16): "bfloat16", (6, 8): "bool"}

WT_MEM_HOST, WT_MEM_DEVICE = 0, 3
WT_DEVICE_CPU, WT_DEVICE_CUDA = 0, 1


def dtype_name(dt: Any) -> str:
    """wt's name for a dtype given as a string, a torch dtype or a numpy dtype."""
    if isinstance(dt, str):
        s = dt
    else:
        s = getattr(dt, "name", None) or str(dt)
    if s.startswith("torch."):
        s = s[len("torch."):]
    aliases = {"float": "float32", "half": "float16", "double": "float64",
               "long": "int64", "int": "int32", "bool_": "bool"}
    return aliases.get(s, s)


class view:
    """An array whose bytes are declared another dtype of the same size:
    `view(np_uint16_array, "bfloat16")`."""

    def __init__(self, array: Any, dtype: str) -> None:
        self.array = array
        self.dtype = dtype_name(dtype)


class _Described:
    """What the C side needs of one tensor, and what keeps it alive."""

    __slots__ = ("name", "dtype", "shape", "data", "nbytes", "kind",
                 "device", "stream", "keep")
    name: str
    dtype: str                  # wt's name
    shape: Tuple[int, ...]
    data: Optional[int]         # the first byte's address
    nbytes: int
    kind: int                   # WT_MEM_HOST or WT_MEM_DEVICE
    device: int                 # the CUDA device's index
    stream: Optional[int]       # the CUDA stream the bytes are written on
    keep: List[Any]             # what keeps the bytes alive


_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _contiguous(shape: Sequence[int], strides: Optional[Sequence[int]],
                itemsize: int) -> bool:
    if strides is None:
        return True
    want = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != want:
            return False
        want *= dim
    return True


def _numel(shape: Iterable[Any]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _device_index(obj: Any) -> int:
    dev = getattr(obj, "device", None)
    for attr in ("index", "id"):
        v = getattr(dev, attr, None)
        if isinstance(v, int):
            return v
    return 0


def describe(name: str, obj: Any) -> _Described:
    """Where `obj`'s bytes are, without copying them; ValueError naming the
    tensor when it cannot be sent as it is."""
    declared = None
    if isinstance(obj, view):
        declared, obj = obj.dtype, obj.array
    if getattr(obj, "requires_grad", False) and callable(getattr(obj, "detach", None)):
        obj = obj.detach()  # the same storage: torch refuses to export it else
    d = _Described()
    d.name, d.keep, d.stream, d.kind, d.device = name, [obj], None, WT_MEM_HOST, 0
    dt: Optional[str] = None
    ai = getattr(obj, "__array_interface__", None)
    if ai is not None:  # numpy first: the common case, and the cheapest
        shape = tuple(ai["shape"])
        ts = ai["typestr"]
        dt = _TYPESTR.get(ts[1:])
        if dt is None and getattr(getattr(obj, "dtype", None), "name", "") == "bfloat16":
            dt = "bfloat16"  # ml_dtypes
        itemsize = int(ts[2:]) if ts[2:].isdigit() else 0
        if not _contiguous(shape, ai.get("strides"), itemsize):
            raise ValueError(f"tensor '{name}': not contiguous (strides "
                             f"{ai.get('strides')}); send a contiguous copy")
        d.data = ai["data"][0]
    elif hasattr(obj, "__cuda_array_interface__"):
        cai = obj.__cuda_array_interface__
        shape = tuple(cai["shape"])
        dt = _TYPESTR.get(cai["typestr"][1:])
        itemsize = int(cai["typestr"][2:])
        if not _contiguous(shape, cai.get("strides"), itemsize):
            raise ValueError(f"tensor '{name}': not contiguous (strides "
                             f"{cai.get('strides')}); send .contiguous()")
        d.data = cai["data"][0]
        d.kind, d.device = WT_MEM_DEVICE, _device_index(obj)
        stream = cai.get("stream")
        d.stream = stream if isinstance(stream, int) and stream > 2 else None
    elif hasattr(obj, "__dlpack__"):
        dev_type, dev_id = obj.__dlpack_device__()
        cap = obj.__dlpack__()
        d.keep.append(cap)  # its destructor frees the tensor when we drop it
        p = _PyCapsule_GetPointer(cap, b"dltensor")
        t = _DLTensor.from_address(p)
        shape = tuple(t.shape[i] for i in range(t.ndim))
        dt = _DLPACK.get((t.dtype.code, t.dtype.bits))
        strides = (None if not t.strides else
                   tuple(t.strides[i] * (t.dtype.bits // 8) for i in range(t.ndim)))
        if not _contiguous(shape, strides, max(t.dtype.bits // 8, 1)):
            raise ValueError(f"tensor '{name}': not contiguous (DLPack strides)")
        d.data = (t.data or 0) + t.byte_offset
        if dev_type == 2:  # kDLCUDA
            d.kind, d.device = WT_MEM_DEVICE, int(dev_id)
        elif dev_type not in (1, 3):  # kDLCPU, kDLCUDAHost
            raise ValueError(f"tensor '{name}': DLPack device type {dev_type} "
                             "is neither the host nor a CUDA GPU")
    elif hasattr(obj, "data_ptr"):  # torch without the interfaces
        shape = tuple(obj.shape)
        dt = dtype_name(obj.dtype)
        if not obj.is_contiguous():
            raise ValueError(f"tensor '{name}': not contiguous; send .contiguous()")
        d.data = obj.data_ptr()
        if getattr(obj, "is_cuda", False):
            d.kind, d.device = WT_MEM_DEVICE, _device_index(obj)
    else:
        raise ValueError(f"tensor '{name}': a {type(obj).__name__} offers no "
                         "DLPack, __array_interface__ or __cuda_array_interface__")
    if declared is not None:
        if dt is not None and _ITEMSIZE.get(dt) != _ITEMSIZE.get(declared):
            raise ValueError(f"tensor '{name}': view as {declared} needs "
                             f"{_ITEMSIZE.get(declared)}-byte items, the array "
                             f"holds {dt}")
        dt = declared
    if dt is None:
        raise ValueError(f"tensor '{name}': its element type is not one wt "
                         "sends (numpy has no bfloat16: use view(a, 'bfloat16'))")
    d.dtype, d.shape = dt, shape
    d.nbytes = _numel(shape) * _ITEMSIZE[dt]
    if d.data is None or (d.data == 0 and d.nbytes > 0):
        raise ValueError(f"tensor '{name}': no data pointer")
    return d


def _meta(m: Any) -> ParamMeta:
    if type(m) is ParamMeta and type(m.dtype) is str and m.dtype in _ITEMSIZE \
            and type(m.shape) is tuple:
        return m  # already wt's (ArraySource's own)
    if isinstance(m, ParamMeta):
        return ParamMeta(m.name, dtype_name(m.dtype), tuple(int(x) for x in m.shape))
    if isinstance(m, dict):
        return ParamMeta(m["name"], dtype_name(m["dtype"]),
                         tuple(int(x) for x in m["shape"]))
    name, dt, shape = m.name, m.dtype, m.shape  # vLLM's ParamMeta
    return ParamMeta(name, dtype_name(dt), tuple(int(x) for x in shape))


class ArraySource:
    """A source over a dict {name: tensor} or a list of (name, tensor): the
    metadata is the tensors' own, in that order; each round sends what the
    mapping holds then (replace its values between rounds, same layout)."""

    def __init__(self, tensors: Union[Dict[str, Any],
                                      Iterable[Tuple[str, Any]]]) -> None:
        self._tensors = tensors
        # (the objects' ids, their metadata)
        self._cached: Optional[Tuple[List[Tuple[str, int]],
                                     List[ParamMeta]]] = None

    def _pairs(self) -> List[Tuple[str, Any]]:
        t = self._tensors
        return list(t.items()) if isinstance(t, dict) else list(t)

    def metadata(self) -> List[ParamMeta]:
        pairs = self._pairs()
        ids = [(n, id(o)) for n, o in pairs]
        if self._cached is not None and self._cached[0] == ids:
            return self._cached[1]  # the same tensors: the same layout
        out: List[ParamMeta] = []
        for name, obj in pairs:
            d = describe(name, obj)
            out.append(ParamMeta(name, d.dtype, d.shape))
        self._cached = (ids, out)
        return out

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        return iter(self._pairs())


class _Layout:
    """The C tensor table of one layout (names, dtypes, shapes, sizes),
    built once and copied for each round, which sets only the pointers."""

    def __init__(self, metas: Sequence[ParamMeta]) -> None:
        L = _lib.lib()
        n = len(metas)
        self.n = n
        self.template = (_lib.SourceTensor * max(n, 1))()
        self._keep: List[object] = []
        codes: Dict[str, int] = {}
        for i, m in enumerate(metas):
            if m.dtype not in codes:
                code = c_int()
                _lib.check(L.wt_dtype_from_name(m.dtype.encode(), byref(code)))
                codes[m.dtype] = code.value
            shape = (ctypes.c_int64 * max(len(m.shape), 1))(*m.shape)
            nm = m.name.encode()
            self._keep += [shape, nm]
            t = self.template[i]
            t.name = nm
            t.dtype = codes[m.dtype]
            t.ndim = len(m.shape)
            t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
            t.nbytes = _numel(m.shape) * _ITEMSIZE[m.dtype]

    def table(self) -> ctypes.Array[_lib.SourceTensor]:
        arr = (_lib.SourceTensor * max(self.n, 1))()
        ctypes.memmove(arr, self.template, ctypes.sizeof(arr))
        return arr


_layouts: Dict[Tuple[ParamMeta, ...], _Layout] = {}
_layouts_lock = threading.Lock()


def _layout(metas: Sequence[ParamMeta]) -> _Layout:
    """The cached layout of `metas`. A table it makes points into it (the
    names, the shapes): whoever holds the table holds the layout too, as
    the cache may drop it at any time (from another thread as well)."""
    key = tuple(metas)
    with _layouts_lock:
        lay = _layouts.get(key)
        if lay is None:
            if len(_layouts) >= 64:  # an on-the-fly round has one per part
                _layouts.pop(next(iter(_layouts)))
            lay = _layouts[key] = _Layout(metas)
        return lay


def source_iter(source: Any) -> Iterator[Tuple[str, Any]]:
    """A fresh pass over the source's (name, tensor) pairs: vLLM 0.33's
    `iter_full()` where it has one, else iteration (vLLM 0.32, wt's)."""
    full = getattr(source, "iter_full", None)
    says = getattr(source, "implements_iter_full", None)
    if callable(full) and (not callable(says) or says()):
        return iter(full())
    return iter(source)


def source_metas(source: Any) -> List[ParamMeta]:
    """The source's metadata in wt's form, names unique; ValueError else.
    `metadata` is a method (vLLM 0.32, wt) or a property holding the list
    (vLLM 0.33's cached property)."""
    md = getattr(source, "metadata", None)
    if md is None or not (hasattr(source, "__iter__") or
                          callable(getattr(source, "iter_full", None))):
        raise ValueError("source: needs metadata and iteration (vLLM's "
                         "WeightSource); wrap a dict in ArraySource")
    metas = [_meta(m) for m in (md() if callable(md) else md)]
    names: Set[str] = set()
    for m in metas:
        if m.name in names:
            raise ValueError(f"source: tensor '{m.name}' is declared twice")
        names.add(m.name)
    return metas


def yielded(metas: Sequence[ParamMeta], it: Iterator[Tuple[str, Any]],
            i: int) -> _Described:
    """Tensor i of a round from the iterator `it`, checked against
    metas[i] (name, order, dtype, shape); ValueError naming it else."""
    m = metas[i]
    try:
        name, obj = next(it)
    except StopIteration:
        raise ValueError(f"source: the round ended after {i} tensors; "
                         f"the metadata declares {len(metas)} (next: "
                         f"'{m.name}')") from None
    if name != m.name:
        raise ValueError(f"source: tensor '{name}' came where '{m.name}'"
                         f" is declared (position {i})")
    d = describe(name, obj)
    if d.dtype != m.dtype:
        raise ValueError(f"tensor '{name}': dtype {d.dtype}, the metadata "
                         f"says {m.dtype}")
    if d.shape != m.shape:
        raise ValueError(f"tensor '{name}': shape {list(d.shape)}, the "
                         f"metadata says {list(m.shape)}")
    return d


def ended(metas: Sequence[ParamMeta], it: Iterator[Tuple[str, Any]]) -> None:
    """ValueError when the iterator yields more than the metadata declares."""
    extra = next(it, None)
    if extra is not None:
        raise ValueError(f"source: tensor '{extra[0]}' beyond the "
                         f"{len(metas)} the metadata declares")


class CSource:
    """A C wt_source over tensors' memory: one round of a Python source
    (`CSource(source)`: every tensor checked against the metadata first),
    or a part of one (`CSource.over(metas, described)`). A context manager:
    the C source and the references to the tensors go on exit."""

    tensors: List[_Described]
    metas: Sequence[ParamMeta]
    _keep: List[object]

    def __init__(self, source: Any = None) -> None:
        self.handle = c_void_p()
        self.tensors, self.metas, self._keep = [], [], []
        if source is None:
            return
        metas = source_metas(source)
        it = source_iter(source)
        described = [yielded(metas, it, i) for i in range(len(metas))]
        ended(metas, it)
        self._build(metas, described)

    @classmethod
    def over(cls, metas: Sequence[ParamMeta],
             described: List[_Described]) -> "CSource":
        """A C source over tensors already checked (yielded())."""
        cs = cls()
        cs._build(metas, described)
        return cs

    def _build(self, metas: Sequence[ParamMeta],
               described: List[_Described]) -> None:
        self.tensors = described
        self.metas = metas
        n = len(described)
        lay = _layout(metas)
        arr = lay.table()
        self._keep = [arr, lay]  # arr points into lay
        for i, d in enumerate(described):
            t = arr[i]
            t.data = d.data if d.nbytes else (d.data or 1)
            if d.kind == WT_MEM_DEVICE:
                t.kind = d.kind
                t.device_type = WT_DEVICE_CUDA
                t.device_index = d.device
                t.cuda_stream = d.stream
        _lib.check(_lib.lib().wt_source_memory(arr, n, byref(self.handle)))

    def close(self) -> None:
        if self.handle:
            _lib.lib().wt_source_destroy(self.handle)
            self.handle = c_void_p()
        self.tensors = []
        self._keep = []

    def __enter__(self) -> "CSource":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class OnTheFly:
    """Marks a source whose tensors are made as it is iterated (FSDP's
    `full_tensor()`, a dequantised copy): a round takes them `hold_bytes`
    at a time (at least one tensor), sends those as one update of the
    round, and lets go of them before it asks for more, so the trainer
    holds about `hold_bytes` of them, not the model. Each tensor is still
    checked against the metadata before it is sent; a bad one ends the
    round (aborted on every server, ValueError naming it) after the parts
    before it moved, and the committed version stays. Any source may
    instead have a `hold_bytes` attribute of its own."""

    def __init__(self, source: Any, hold_bytes: int = 256 << 20) -> None:
        if not hasattr(source, "metadata") or not (
                hasattr(source, "__iter__") or hasattr(source, "iter_full")):
            raise ValueError("source: needs metadata and iteration (vLLM's "
                             "WeightSource)")
        if not isinstance(hold_bytes, int) or hold_bytes < 1:
            raise ValueError(f"hold_bytes: {hold_bytes!r}, a positive number "
                             "of bytes")
        self.source = source
        self.hold_bytes = hold_bytes

    def metadata(self) -> Any:
        md = self.source.metadata
        return md() if callable(md) else md

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        return source_iter(self.source)
