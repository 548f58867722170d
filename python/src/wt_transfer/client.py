"""The control plane: wt's own client, and any object with vLLM's four methods.

`Client` satisfies vLLM's `VLLMWeightSyncClient` protocol (the four methods,
the same names and arguments, plain dicts) over libwt_client's sync client:
one call fans out to every wt-server in parallel, with deadlines, and a
round that fails on one server is aborted on all. It adds what wt has:
world size, versions, watch, checksums, abort, parameters, server info.

A foreign client (vLLM's `HTTPVLLMWeightSyncClient`, a framework's own) is
wrapped by `_ForeignPlane` into a C control plane whose calls are its
methods, so the same C orchestration drives it.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import threading
import weakref
from ctypes import byref, c_char_p, c_size_t, c_uint32, c_void_p
from typing import (Any, Dict, Iterable, Iterator, List, Literal,
                    NamedTuple, Optional, Protocol, Sequence, Tuple, TypedDict,
                    Union, cast, overload)

from . import _lib, errors


class _Detachable(Protocol):
    """What a Client asks of the trainer engines made over it (engines.py's
    CTrainerEngine, which imports this module: named here by what it does)."""

    def _detach(self, why: str) -> None: ...


# A committed version: its name, its commit sequence on that server, when it
# committed (Unix ms).
class Version(NamedTuple):
    version: str
    sequence: int
    committed_unix_ms: int


class ParameterInfo(TypedDict):
    """One entry of Client.parameters()."""

    name: str
    dtype: str
    shape: List[int]
    nbytes: int


# wt_control_method (wt/control.h)
WORLD_SIZE, INIT, START, UPDATE, FINISH, ABORT, SERVER_INFO = range(7)
_REQUIRED = (1 << INIT) | (1 << START) | (1 << UPDATE) | (1 << FINISH)


def _ms(seconds: Optional[float]) -> int:
    return 0 if seconds is None else max(1, int(seconds * 1000))


class Client:
    """wt's sync client over one or many wt-servers ("host:port").

    `timeout` bounds control calls and `data_timeout` the calls that move or
    digest bytes (seconds; None: wt's defaults, 30 s and 30 min). Without
    `token_file`, a server of this user on this host is found through the
    token file it wrote (its runtime directory: `runtime_base`, by default
    $XDG_RUNTIME_DIR as wt's tools use it); `token_discovery=False` never
    looks. `adapter` names the LoRA adapter set every call works on
    (docs/lora.md): its rounds, versions, checksums and parameters instead
    of the model's; an init whose info carries an adapter spec
    (`wt_transfer.lora.adapter_init_info`) sets it too.
    `keepalive_timeout` (seconds; None: 20 s) is how long a server may
    leave a keepalive ping unanswered while a call is open before its
    connection is closed and the call fails `Unavailable`: how long a
    loaded host may stall. `tcp_user_timeout` (seconds; None: 1 s) is how
    long bytes sent to a server may stay unacknowledged by its kernel (or
    its receive window shut) before the connection is dropped: how soon a
    cut link is noticed (a loaded host's kernel still acknowledges; a
    stopped server process is dropped too). Negative: gRPC's own, the
    keepalive timeout.
    """

    def __init__(self, servers: Union[str, Sequence[str]], *,
                 timeout: Optional[float] = None,
                 data_timeout: Optional[float] = None,
                 token_file: Optional[str] = None,
                 runtime_base: Optional[str] = None,
                 token_discovery: bool = True,
                 adapter: Optional[str] = None,
                 keepalive_timeout: Optional[float] = None,
                 tcp_user_timeout: Optional[float] = None) -> None:
        if keepalive_timeout is not None and not keepalive_timeout > 0:
            raise ValueError(f"keepalive_timeout: {keepalive_timeout!r} is "
                             "not a positive number of seconds")
        if tcp_user_timeout is not None and not (tcp_user_timeout > 0 or
                                                 tcp_user_timeout < 0):
            raise ValueError(f"tcp_user_timeout: {tcp_user_timeout!r} is "
                             "not a positive number of seconds (or negative: "
                             "gRPC's own)")
        if isinstance(servers, str):
            servers = [servers]
        servers = list(servers)
        if not servers:
            raise ValueError("servers: at least one 'host:port'")
        if runtime_base is None:
            runtime_base = os.environ.get("XDG_RUNTIME_DIR")
        L = _lib.lib()
        arr = (c_char_p * len(servers))(*[s.encode() for s in servers])
        self._h = c_void_p()
        # trainer engines made over it
        self._engines: weakref.WeakSet[_Detachable] = weakref.WeakSet()
        _lib.check(L.wt_bindings_client_new(
            arr, len(servers), _ms(timeout), _ms(data_timeout),
            token_file.encode() if token_file else None,
            runtime_base.encode() if runtime_base else None,
            not token_discovery, adapter.encode() if adapter else None,
            _ms(keepalive_timeout),
            -1 if tcp_user_timeout is not None and tcp_user_timeout < 0
            else _ms(tcp_user_timeout), byref(self._h)))
        self.servers = servers

    @classmethod
    def _over(cls, handle: c_void_p, servers: List[str]) -> "Client":
        self = cls.__new__(cls)
        self._h = handle
        self._engines = weakref.WeakSet()
        self.servers = servers
        return self

    def _handle(self) -> c_void_p:
        if not self._h:
            raise errors.FailedPrecondition("client: closed")
        return self._h

    # --- vLLM's VLLMWeightSyncClient -------------------------------------------

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:
        """InitWeightTransferEngine on every server with `init_info` (wt's
        WeightTransferInitInfo as a dict: backend, its sub-dict, options)."""
        if not isinstance(init_info, dict):
            raise ValueError("init_info: a dict")
        _lib.check(_lib.lib().wt_bindings_init_transfer(
            self._handle(), json.dumps(init_info).encode(), False, None))

    def start_weight_update(self) -> None:
        """Starts a round on every server."""
        _lib.check(_lib.lib().wt_sync_client_start(self._handle()))

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        """UpdateWeights with `update_info` (names, dtype_names, shapes, ...)
        on every server; returns once every server answered."""
        if not isinstance(update_info, dict):
            raise ValueError("update_info: a dict")
        _lib.check(_lib.lib().wt_bindings_update_info(
            self._handle(), json.dumps(update_info).encode()))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        """Commits the round on every server as `weight_version` (None: the
        round id of the first server, "round-N")."""
        if weight_version is None:
            rid = _lib.lib().wt_sync_client_round_id(self._handle(), 0)
            weight_version = f"round-{rid}"
        if not isinstance(weight_version, str) or not weight_version:
            raise ValueError("weight_version: a non-empty string")
        _lib.check(_lib.lib().wt_sync_client_finish(
            self._handle(), weight_version.encode()))

    # --- what wt adds -------------------------------------------------------------

    def get_world_size(self) -> int:
        """1 (the trainer) + every server's world size."""
        ws = c_uint32()
        _lib.check(_lib.lib().wt_sync_client_world_size(self._handle(), byref(ws)))
        return ws.value

    def abort_weight_update(self, reason: str | None = None) -> None:
        """Drops this client's round on every server (best effort)."""
        _lib.check(_lib.lib().wt_sync_client_abort(
            self._handle(), reason.encode() if reason else None))

    abort = abort_weight_update

    def version(self, server: int = 0) -> Version:
        """The committed version of one server."""
        v = _lib.WeightVersion()
        L = _lib.lib()
        _lib.check(L.wt_sync_client_get_version(self._handle(), server, byref(v)))
        try:
            return Version((v.version or b"").decode(), v.sequence,
                           v.committed_unix_ms)
        finally:
            L.wt_weight_version_clear(byref(v))

    def watch(self, server: int = 0,
              timeout: float | None = None) -> Iterator[Version]:
        """An iterator over one server's versions as they commit (the
        committed one first, if any), until `timeout` seconds pass or the
        server ends the stream."""
        # versions, then `done` or the WtError that ended the stream
        q: queue.Queue[object] = queue.Queue()
        stop = threading.Event()
        done = object()

        def on_version(vp: ctypes._Pointer[_lib.WeightVersion],
                       _user: Optional[int]) -> bool:
            v = vp.contents
            q.put(Version((v.version or b"").decode(), v.sequence,
                          v.committed_unix_ms))
            return not stop.is_set()
        c_on_version = _lib.VERSION_CALLBACK(on_version)  # kept while run() runs

        def run() -> None:
            try:
                _lib.check(_lib.lib().wt_sync_client_watch(
                    self._handle(), server, _ms(timeout) if timeout else -1,
                    c_on_version, None))
                q.put(done)
            except errors.WtError as e:
                q.put(e)

        th = threading.Thread(target=run, daemon=True, name="wt-watch")
        th.start()
        try:
            while True:
                item = q.get()
                if item is done:
                    return
                if isinstance(item, errors.DeadlineExceeded):
                    return
                if isinstance(item, Exception):
                    raise item
                yield cast(Version, item)
        finally:
            stop.set()

    @overload
    def checksums(self, names: Optional[Iterable[str]] = None, *,
                  algorithm: str = "sha256", server: int = 0,
                  all_workers: Literal[False] = False) -> Dict[str, str]: ...

    @overload
    def checksums(self, names: Optional[Iterable[str]] = None, *,
                  algorithm: str = "sha256", server: int = 0,
                  all_workers: Literal[True]) -> Dict[Tuple[str, int], str]: ...

    @overload
    def checksums(self, names: Optional[Iterable[str]] = None, *,
                  algorithm: str = "sha256", server: int = 0,
                  all_workers: bool = False
                  ) -> Dict[Union[str, Tuple[str, int]], str]: ...

    def checksums(self, names: Optional[Iterable[str]] = None, *,
                  algorithm: str = "sha256", server: int = 0,
                  all_workers: bool = False
                  ) -> Union[Dict[str, str], Dict[Tuple[str, int], str],
                             Dict[Union[str, Tuple[str, int]], str]]:
        """Digests (hex) of the committed bytes: {name: hex}, or
        {(name, worker): hex} with all_workers."""
        if algorithm not in _lib.WT_HASH:
            raise ValueError(f"algorithm: '{algorithm}' is not one of "
                             f"{sorted(_lib.WT_HASH)}")
        names = list(names or [])
        arr = (c_char_p * max(len(names), 1))(*[n.encode() for n in names])
        out = ctypes.POINTER(_lib.ParamChecksum)()
        n = c_size_t()
        L = _lib.lib()
        _lib.check(L.wt_sync_client_checksums(
            self._handle(), server, arr, len(names), _lib.WT_HASH[algorithm],
            all_workers, byref(out), byref(n)))
        try:
            res: Dict[Union[str, Tuple[str, int]], str] = {}
            for i in range(n.value):
                s = out[i]
                key = s.name.decode()
                res[(key, s.worker) if all_workers else key] = s.digest.decode()
            return res
        finally:
            L.wt_param_checksums_free(out, n.value)

    def parameters(self, prefix: str | None = None,
                   server: int = 0) -> List[ParameterInfo]:
        """The server's parameters: [{"name", "dtype", "shape", "nbytes"}]."""
        p = c_void_p()
        _lib.check(_lib.lib().wt_bindings_list_parameters(
            self._handle(), server, prefix.encode() if prefix else None, byref(p)))
        params: List[ParameterInfo] = json.loads(
            _lib.take_string(p)).get("parameters", [])
        for q in params:
            q.setdefault("shape", [])
            q["shape"] = [int(x) for x in q["shape"]]
            q["nbytes"] = int(q.get("nbytes", 0))
        return params

    @property
    def adapter(self) -> str:
        """The adapter set this client's calls name ("" for the model)."""
        name: str = _lib.lib().wt_sync_client_adapter(self._handle()).decode()
        return name

    def server_info(self, server: int = 0) -> Dict[str, Any]:
        """GetServerInfo of one server, as a dict of wt.v1.ServerInfo's fields."""
        p = c_void_p()
        _lib.check(_lib.lib().wt_bindings_server_info(self._handle(), server, byref(p)))
        info: Dict[str, Any] = json.loads(_lib.take_string(p))
        return info

    def close(self) -> None:
        """Closes the connections. Trainer engines made over this client are
        shut down first: using one afterwards raises FailedPrecondition."""
        if getattr(self, "_h", None):
            for engine in list(getattr(self, "_engines", ())):
                engine._detach("the Client it was made with is closed")
            _lib.lib().wt_sync_client_destroy(self._h)
            self._h = c_void_p()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _json_safe(v: Any) -> Any:
    """JSON for wt's parser: integers past 2^63 as strings (uint64 round ids),
    as proto3's JSON mapping writes 64-bit integers."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return str(v) if v > (1 << 63) - 1 or v < -(1 << 63) else v
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def _error_code(e: BaseException) -> int:
    if isinstance(e, errors.WtError):
        return e.code
    if isinstance(e, ValueError):
        return 3
    if isinstance(e, TimeoutError):
        return 4
    if isinstance(e, (ConnectionError, OSError)):
        return 14
    return 2


VLLM_DICTS = 1  # WT_CONTROL_VLLM_DICTS (wt/bindings.h)


class VllmClient:
    """Marks a client as vLLM's (its routes take vLLM's dicts): wrap a
    framework's own wrapper of vLLM's routes in it, and say the inference
    side's world size when the client cannot (vLLM's TP x PP x DP; without
    it each server counts one rank). vLLM's own clients (their class comes
    from a `vllm` module) are recognised without it."""

    def __init__(self, client: Any, world_size: int | None = None) -> None:
        self.client = client
        self.world_size = world_size
        for m in ("init_weight_transfer_engine", "start_weight_update",
                  "update_weights", "finish_weight_update"):
            setattr(self, m, getattr(client, m))
        if world_size is not None:
            self.get_world_size = lambda: int(world_size)
        elif callable(getattr(client, "get_world_size", None)):
            self.get_world_size = client.get_world_size
        self.base_url = getattr(client, "base_url", None)


def _is_vllm(obj: Any) -> bool:
    return isinstance(obj, VllmClient) or \
        (type(obj).__module__ or "").split(".")[0] == "vllm"


class _ForeignPlane:
    """A C control plane whose calls are a Python object's methods (vLLM's
    four, and `get_world_size` / `abort_weight_update` when it has them).
    The dicts it is given are wt.v1's messages as dicts (wt/pb.h's JSON),
    or, for vLLM's clients (VllmClient), the dicts vLLM's routes take
    (client/src/control_vllm.c)."""

    def __init__(self, obj: Any, name: str | None = None) -> None:
        for m in ("init_weight_transfer_engine", "start_weight_update",
                  "update_weights", "finish_weight_update"):
            if not callable(getattr(obj, m, None)):
                raise ValueError(f"client: {type(obj).__name__} has no {m}() "
                                 "(vLLM's VLLMWeightSyncClient protocol)")
        self.obj = obj
        self.name = name or getattr(obj, "base_url", None) or type(obj).__name__
        methods = _REQUIRED
        if callable(getattr(obj, "get_world_size", None)):
            methods |= 1 << WORLD_SIZE
        if callable(getattr(obj, "abort_weight_update", None)):
            methods |= 1 << ABORT
        self.vllm = _is_vllm(obj)
        self._cb = _lib.CONTROL_CALLBACK(self._call)
        names = (c_char_p * 1)(str(self.name).encode())
        self.plane = _lib.ControlPlane()
        _lib.check(_lib.lib().wt_control_callback_new(
            names, 1, methods, VLLM_DICTS if self.vllm else 0, self._cb, None,
            byref(self.plane)))

    def _dispatch(self, method: int, req: Dict[str, Any]) -> Any:
        o = self.obj
        if method == INIT:
            return o.init_weight_transfer_engine(req.get("init_info", {}))
        if method == START:
            return o.start_weight_update()
        if method == UPDATE:
            return o.update_weights(req.get("update_info", {}))
        if method == FINISH:
            version = req.get("weight_version")
            try:
                return o.finish_weight_update(weight_version=version)
            except TypeError:  # vLLM's protocol: finish_weight_update(self)
                return o.finish_weight_update()
        if method == WORLD_SIZE:
            ws = o.get_world_size()
            return ws if isinstance(ws, dict) else {"world_size": int(ws)}
        if method == ABORT:
            return o.abort_weight_update(req.get("reason") or None)
        raise errors.Unimplemented(f"method {method}")

    def _call(self, _user: Optional[int], _server: int, method: int,
              request: bytes, reply: Optional[int]) -> None:
        L = _lib.lib()
        try:
            res = self._dispatch(method, json.loads(request.decode()))
            text = json.dumps(_json_safe(res)) if isinstance(res, dict) else "{}"
            L.wt_control_reply_ok(reply, text.encode())
        except BaseException as e:  # a callback must answer, never raise
            L.wt_control_reply_error(reply, _error_code(e),
                                     f"{type(e).__name__}: {e}".encode())


def client_handle(client: Any, timeout: Optional[float] = None,
                  data_timeout: Optional[float] = None
                  ) -> Tuple[c_void_p, Any, bool]:
    """(C sync client handle, owner to keep alive, owned) for wt's Client
    or any object with the four methods."""
    if isinstance(client, Client):
        return client._handle(), client, False
    plane = _ForeignPlane(client)
    h = c_void_p()
    _lib.check(_lib.lib().wt_bindings_client_new_with(
        byref(plane.plane), _ms(timeout), _ms(data_timeout), byref(h)))
    return h, plane, True
