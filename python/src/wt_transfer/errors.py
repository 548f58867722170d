"""wt's errors: one exception type, a subclass per gRPC status code.

Every error carries the code (wt's numbers are gRPC's) and the message the
server or the C library gave, which names the server, the call and the
field or tensor at fault. INVALID_ARGUMENT is also a ValueError, as the
seed raises ValueError for bad input.
"""

from __future__ import annotations

import ctypes
import re
from typing import Optional


class WtError(Exception):
    """An error from wt; `code` is the gRPC status code, `message` wt's words."""

    code = 2
    code_name = "UNKNOWN"

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


# One class per code, written out (not made with type()) so that type
# checkers see each, and its extra base (ValueError, TimeoutError).
class Cancelled(WtError):
    """wt status CANCELLED (1)."""
    code = 1
    code_name = "CANCELLED"


class Unknown(WtError):
    """wt status UNKNOWN (2)."""
    code = 2
    code_name = "UNKNOWN"


class InvalidArgument(WtError, ValueError):
    """wt status INVALID_ARGUMENT (3)."""
    code = 3
    code_name = "INVALID_ARGUMENT"


class DeadlineExceeded(WtError, TimeoutError):
    """wt status DEADLINE_EXCEEDED (4)."""
    code = 4
    code_name = "DEADLINE_EXCEEDED"


class NotFound(WtError):
    """wt status NOT_FOUND (5)."""
    code = 5
    code_name = "NOT_FOUND"


class AlreadyExists(WtError):
    """wt status ALREADY_EXISTS (6)."""
    code = 6
    code_name = "ALREADY_EXISTS"


class PermissionDenied(WtError):
    """wt status PERMISSION_DENIED (7)."""
    code = 7
    code_name = "PERMISSION_DENIED"


class ResourceExhausted(WtError):
    """wt status RESOURCE_EXHAUSTED (8)."""
    code = 8
    code_name = "RESOURCE_EXHAUSTED"


class FailedPrecondition(WtError):
    """wt status FAILED_PRECONDITION (9)."""
    code = 9
    code_name = "FAILED_PRECONDITION"


class Aborted(WtError):
    """wt status ABORTED (10)."""
    code = 10
    code_name = "ABORTED"


class OutOfRange(WtError):
    """wt status OUT_OF_RANGE (11)."""
    code = 11
    code_name = "OUT_OF_RANGE"


class Unimplemented(WtError):
    """wt status UNIMPLEMENTED (12)."""
    code = 12
    code_name = "UNIMPLEMENTED"


class Internal(WtError):
    """wt status INTERNAL (13)."""
    code = 13
    code_name = "INTERNAL"


class Unavailable(WtError):
    """wt status UNAVAILABLE (14)."""
    code = 14
    code_name = "UNAVAILABLE"


class DataLoss(WtError):
    """wt status DATA_LOSS (15)."""
    code = 15
    code_name = "DATA_LOSS"


class Unauthenticated(WtError):
    """wt status UNAUTHENTICATED (16)."""
    code = 16
    code_name = "UNAUTHENTICATED"


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


def from_text(text: str, default: type[WtError] = Unavailable,
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


def type_status_calls(lib: ctypes.CDLL) -> None:
    """Types libwt_base's status calls on a loaded library (libwt_client and
    libwt_consumer both reach them)."""
    for name, res in (("wt_status_code", ctypes.c_int),
                      ("wt_status_message", ctypes.c_char_p),
                      ("wt_status_free", None)):
        f = getattr(lib, name)
        f.restype, f.argtypes = res, [ctypes.c_void_p]


def raise_status(lib: ctypes.CDLL, st: Optional[int]) -> None:
    """Raises the WtError subclass of a status `lib` returned, and frees it;
    nothing for NULL (OK)."""
    if not st:
        return
    code = lib.wt_status_code(st)
    msg = lib.wt_status_message(st).decode("utf-8", "replace")
    lib.wt_status_free(st)
    raise from_code(code, msg)
