"""wt's errors: one exception type, a subclass per gRPC status code.

Every error carries the code (wt's numbers are gRPC's) and the message the
server or the C library gave, which names the server, the call and the
field or tensor at fault. INVALID_ARGUMENT is also a ValueError, as the
seed raises ValueError for bad input.
"""

from __future__ import annotations

import re


class WtError(Exception):
    """An error from wt; `code` is the gRPC status code, `message` wt's words."""

    code = 2
    code_name = "UNKNOWN"

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


def _sub(name: str, code: int, *bases):
    return type(name, (WtError,) + bases,
                {"code": code, "code_name": _NAMES[code],
                 "__doc__": f"wt status {_NAMES[code]} ({code})."})


_NAMES = {
    1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION", 10: "ABORTED",
    11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL", 14: "UNAVAILABLE",
    15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}

Cancelled = _sub("Cancelled", 1)
Unknown = _sub("Unknown", 2)
InvalidArgument = _sub("InvalidArgument", 3, ValueError)
DeadlineExceeded = _sub("DeadlineExceeded", 4, TimeoutError)
NotFound = _sub("NotFound", 5)
AlreadyExists = _sub("AlreadyExists", 6)
PermissionDenied = _sub("PermissionDenied", 7)
ResourceExhausted = _sub("ResourceExhausted", 8)
FailedPrecondition = _sub("FailedPrecondition", 9)
Aborted = _sub("Aborted", 10)
OutOfRange = _sub("OutOfRange", 11)
Unimplemented = _sub("Unimplemented", 12)
Internal = _sub("Internal", 13)
Unavailable = _sub("Unavailable", 14)
DataLoss = _sub("DataLoss", 15)
Unauthenticated = _sub("Unauthenticated", 16)

BY_CODE = {c.code: c for c in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound,
    AlreadyExists, PermissionDenied, ResourceExhausted, FailedPrecondition,
    Aborted, OutOfRange, Unimplemented, Internal, Unavailable, DataLoss,
    Unauthenticated)}


# wt's error class travels through vLLM's routes in the message: a worker
# raises "[wt:NOT_FOUND] ..." and the trainer's side raises NotFound.
_TAG = re.compile(r"\[wt:([A-Z_]+)\] ?")
_BY_NAME = {c.code_name: c for c in BY_CODE.values()}


def tagged(e: WtError) -> WtError:
    """`e` with its class name in the message, for a route that passes only
    text (vLLM's collective_rpc, its weight-transfer routes)."""
    if _TAG.search(e.message):
        return e
    out = type(e)(f"[wt:{e.code_name}] {e.message}")
    out.__cause__ = e.__cause__ or e
    return out


def from_text(text: str, default: type = Unavailable,
              prefix: str = "") -> WtError:
    """The WtError a tagged worker message stands for (its class and the
    worker's words), else `default` with the text."""
    m = _TAG.search(text)
    if m is None:
        return default(prefix + text)
    cls = _BY_NAME.get(m.group(1), Unknown)
    return cls(prefix + text[:m.start()] + text[m.end():])


def from_code(code: int, message: str) -> WtError:
    """The exception for a status code (UNKNOWN's for a code wt lacks)."""
    cls = BY_CODE.get(code, Unknown)
    return cls(message, code if code in BY_CODE else 2)


def type_status_calls(lib) -> None:
    """Types libwt_base's status calls on a loaded library (libwt_client and
    libwt_consumer both reach them)."""
    import ctypes
    for name, res in (("wt_status_code", ctypes.c_int),
                      ("wt_status_message", ctypes.c_char_p),
                      ("wt_status_free", None)):
        f = getattr(lib, name)
        f.restype, f.argtypes = res, [ctypes.c_void_p]


def raise_status(lib, st) -> None:
    """Raises the WtError subclass of a status `lib` returned, and frees it;
    nothing for NULL (OK)."""
    if not st:
        return
    code = lib.wt_status_code(st)
    msg = lib.wt_status_message(st).decode("utf-8", "replace")
    lib.wt_status_free(st)
    raise from_code(code, msg)
