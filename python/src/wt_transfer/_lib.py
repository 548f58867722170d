"""ctypes bindings to libwt_client (wt/bindings.h, wt/client.h, wt/source.h).

The C libraries are found, in order: the package's own lib/ (pip install
built them), the installed tree pip install was pointed at
(WT_PYTHON_PREFIX, recorded in _prefix.py), or the directory in the
environment variable WT_TRANSFER_LIB_DIR (directories separated as in
PATH: a build tree's build/client and build/consumer, for development).
Nothing else here reads the environment.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import threading
from ctypes import (CFUNCTYPE, POINTER, c_bool, c_char_p, c_int, c_int64,
                    c_size_t, c_uint32, c_uint64, c_void_p)
from typing import Any, Iterator, Optional

from . import errors
# The structs' mirrors live in _structs; named here as they always were.
from ._structs import (ControlPlane as ControlPlane,
                       DeltaStats as DeltaStats,
                       ParamChecksum as ParamChecksum,
                       SourceTensor as SourceTensor,
                       WeightVersion as WeightVersion)

_HERE = pathlib.Path(__file__).resolve().parent


def _candidates() -> Iterator[pathlib.Path]:
    yield _HERE / "lib"
    try:
        # written by pip install with WT_PYTHON_PREFIX, never in the sources
        # (mypy finds it only where such an install is on its path)
        from . import _prefix  # type: ignore[attr-defined, unused-ignore]

        yield pathlib.Path(_prefix.PREFIX) / "lib"
    except ImportError:
        pass
    env = os.environ.get("WT_TRANSFER_LIB_DIR")  # a list, as PATH is
    for d in (env or "").split(os.pathsep):
        if d:
            yield pathlib.Path(d)


def find_lib(stem: str) -> pathlib.Path:
    """A C library by its stem ("libwt_client"): its link name (an installed
    tree, a build tree), else its one versioned file (a wheel holds only
    the SONAME's, libwt_client.so.MAJOR.MINOR)."""
    tried: list[str] = []
    for d in _candidates():
        p = d / f"{stem}.so"
        tried.append(str(p))
        if p.exists():
            return p
        versioned = sorted(d.glob(f"{stem}.so.*"))
        if versioned:
            return versioned[0]
    raise ImportError(
        f"wt_transfer: {stem}.so not found (looked in {', '.join(tried)}, "
        "and for a versioned file beside each); reinstall with "
        "`pip install ./python`, or set WT_TRANSFER_LIB_DIR to a directory "
        "holding it")


def lib_dir() -> pathlib.Path:
    """The directory the C libraries are loaded from."""
    return find_lib("libwt_client").parent


def bin_dir() -> pathlib.Path | None:
    """The directory holding wt-server, when the package has one."""
    for d in (lib_dir().parent / "bin", lib_dir().parent / "server"):
        if (d / "wt-server").exists():
            return d
    return None


# void (*)(void *user, size_t server, int method, const char *request_json,
#          wt_control_reply *reply)
CONTROL_CALLBACK = CFUNCTYPE(None, c_void_p, c_size_t, c_int, c_char_p,
                             c_void_p)
# bool (*)(const wt_weight_version *v, void *user)
VERSION_CALLBACK = CFUNCTYPE(c_bool, POINTER(WeightVersion), c_void_p)

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def _proto(lib: ctypes.CDLL, name: str, res: Any, *args: Any) -> None:
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = list(args)


def lib() -> ctypes.CDLL:
    """The loaded libwt_client, its functions typed."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = find_lib("libwt_client")
        L = ctypes.CDLL(str(path))
        st = c_void_p  # wt_status *
        errors.type_status_calls(L)
        _proto(L, "wt_bindings_free", None, c_void_p)
        _proto(L, "wt_bindings_client_new", st, POINTER(c_char_p), c_size_t,
               c_int64, c_int64, c_char_p, c_char_p, c_bool, c_char_p,
               c_int64, c_int64, POINTER(c_void_p))
        _proto(L, "wt_sync_client_adapter", c_char_p, c_void_p)
        _proto(L, "wt_bindings_client_new_with", st, POINTER(ControlPlane),
               c_int64, c_int64, POINTER(c_void_p))
        _proto(L, "wt_bindings_init_transfer", st, c_void_p, c_char_p, c_bool,
               POINTER(c_void_p))
        _proto(L, "wt_bindings_update_info", st, c_void_p, c_char_p)
        _proto(L, "wt_bindings_server_info", st, c_void_p, c_size_t,
               POINTER(c_void_p))
        _proto(L, "wt_bindings_list_parameters", st, c_void_p, c_size_t,
               c_char_p, POINTER(c_void_p))
        _proto(L, "wt_bindings_trainer_init_info", st, c_char_p, c_char_p,
               POINTER(c_void_p))
        _proto(L, "wt_bindings_trainer_init_info_new", st, c_char_p, c_char_p,
               c_char_p, POINTER(c_void_p))
        _proto(L, "wt_bindings_init_info_free", None, c_void_p)
        _proto(L, "wt_bindings_trainer_init_transfer", st, c_void_p, c_void_p,
               POINTER(c_void_p))
        _proto(L, "wt_bindings_client_init_info", st, c_void_p,
               POINTER(c_void_p))
        _proto(L, "wt_bindings_shard_plan", st, c_char_p, POINTER(c_void_p))
        _proto(L, "wt_control_callback_new", st, POINTER(c_char_p), c_size_t,
               c_uint32, c_uint32, CONTROL_CALLBACK, c_void_p,
               POINTER(ControlPlane))
        _proto(L, "wt_nccl_select", st, c_char_p, c_char_p)
        _proto(L, "wt_control_reply_ok", None, c_void_p, c_char_p)
        _proto(L, "wt_control_reply_error", None, c_void_p, c_int, c_char_p)
        _proto(L, "wt_sync_client_destroy", None, c_void_p)
        _proto(L, "wt_sync_client_server_count", c_size_t, c_void_p)
        _proto(L, "wt_sync_client_world_size", st, c_void_p, POINTER(c_uint32))
        _proto(L, "wt_sync_client_start", st, c_void_p)
        _proto(L, "wt_sync_client_round_id", c_uint64, c_void_p, c_size_t)
        _proto(L, "wt_sync_client_update", st, c_void_p, c_void_p, c_void_p,
               c_void_p, c_void_p)
        _proto(L, "wt_sync_client_finish", st, c_void_p, c_char_p)
        _proto(L, "wt_sync_client_abort", st, c_void_p, c_char_p)
        _proto(L, "wt_sync_client_get_version", st, c_void_p, c_size_t,
               POINTER(WeightVersion))
        _proto(L, "wt_weight_version_clear", None, POINTER(WeightVersion))
        _proto(L, "wt_sync_client_watch", st, c_void_p, c_size_t, c_int64,
               VERSION_CALLBACK, c_void_p)
        _proto(L, "wt_sync_client_checksums", st, c_void_p, c_size_t,
               POINTER(c_char_p), c_size_t, c_int, c_bool,
               POINTER(POINTER(ParamChecksum)), POINTER(c_size_t))
        _proto(L, "wt_param_checksums_free", None, POINTER(ParamChecksum),
               c_size_t)
        _proto(L, "wt_trainer_destroy", None, c_void_p)
        _proto(L, "wt_trainer_delta_stats", st, c_void_p,
               POINTER(DeltaStats))
        _proto(L, "wt_trainer_names", st, POINTER(c_void_p))
        _proto(L, "wt_source_memory", st, POINTER(SourceTensor), c_size_t,
               POINTER(c_void_p))
        _proto(L, "wt_source_destroy", None, c_void_p)
        _proto(L, "wt_dtype_from_name", st, c_char_p, POINTER(c_int))
        _lib = L
        return L


def check(st: Optional[int]) -> None:
    """Raises the WtError subclass of a returned status (and frees it)."""
    errors.raise_status(lib(), st)


def take_string(p: c_void_p) -> str:
    """A malloc'd C string handed out by wt/bindings.h, freed."""
    if not p.value:
        return ""
    try:
        return ctypes.string_at(p.value).decode("utf-8")
    finally:
        lib().wt_bindings_free(p)


WT_HASH = {"sha256": 0, "xxh3": 1}
