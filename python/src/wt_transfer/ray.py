"""wt on a Ray cluster (docs/ray.md): one wt-server per chosen node, each
owned by a small actor pinned to its node, which starts the process, waits
until it serves, restarts it when it dies and stops it with itself.

    import wt_transfer as wt
    from wt_transfer.ray import start_servers

    servers = start_servers(nodes="all", args=["--model", "synthetic:tiny"])
    client = servers.client()             # a wt.Client over every server
    ...
    servers.close()                       # or `with start_servers(...)`

`servers.info` is picklable (addresses, nodes, the trainer token): a
trainer actor on any node makes its own client with `info.client()`. The
token is made here, travels through Ray (actor arguments, return values)
and is written only to files of mode 0600 that the actor or the client
removes; never to a command line or a log.

Ray is an optional extra (`pip install wt-transfer[ray]`); this module
imports it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Dict, List, Optional, Sequence,
                    TypedDict, Union, cast)

import ray

from . import errors

if TYPE_CHECKING:
    from .client import Client

# How long a server may take to say it serves (it loads its model first).
START_TIMEOUT_S = 120.0


def _write_private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _default_server_bin() -> str:
    from . import bin_dir
    d = bin_dir()
    found = os.path.join(str(d), "wt-server") if d is not None else shutil.which("wt-server")
    if not found or not os.access(found, os.X_OK):
        raise errors.FailedPrecondition(
            "wt-server: not in the wt_transfer package nor on PATH on this node "
            "(give server_bin)")
    return found


class ServerState(TypedDict):
    """ServerActor.info(): where the server is and how it is."""

    node_id: str
    address: str
    export: Optional[str]       # its --export path, if any
    pid: Optional[int]          # None while it is down
    restarts: int
    exits: List[int]            # exit statuses seen, newest last


class ServerActor:
    """Owns one wt-server on its node (made pinned there by start_servers).

    The process runs in the actor's private directory (mode 0700) with the
    token file there (mode 0600), listens on `host` (a fixed port after its
    first start, so a restart keeps its address) and dies with the actor:
    stop() ends it, and Linux's parent-death signal ends it if the actor's
    process dies first. A monitor thread restarts it when it exits on its
    own (unless stop() was called) and counts the restarts."""

    def __init__(self, token: str, args: Sequence[str], host: str,
                 server_bin: Optional[str], restart: bool) -> None:
        self._bin = server_bin or _default_server_bin()
        self._args = list(args)
        self._host = host
        self._restart = restart
        self._dir = tempfile.mkdtemp(prefix="wt-ray-")
        os.chmod(self._dir, 0o700)
        self._token_file = os.path.join(self._dir, "tokens")
        _write_private(self._token_file, f"trainer {token}\n")
        self._mu = threading.Lock()
        self._stopping = False
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._port = 0
        self.restarts = 0
        self.exits: List[int] = []  # exit statuses seen, newest last
        self._start()
        self._monitor = threading.Thread(target=self._watch, daemon=True)
        self._monitor.start()

    def _start(self) -> None:
        listen = f"{self._host}:{self._port}"
        # each start its own log: the listening line read below is this one's
        log = open(os.path.join(self._dir, "server.log"), "w")
        try:
            self._proc = subprocess.Popen(
                [self._bin, "--listen", listen, "--token-file", self._token_file,
                 *self._args],
                stdout=log, stderr=subprocess.STDOUT, cwd=self._dir,
                preexec_fn=_die_with_parent)
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        path = os.path.join(self._dir, "server.log")
        while time.monotonic() < deadline:
            text = open(path).read()
            marker = text.rfind("wt-server listening on ")
            if marker >= 0 and self._proc.poll() is None:
                addr = text[marker:].split()[3]
                self._port = int(addr.rsplit(":", 1)[1])
                return
            if self._proc.poll() is not None:
                raise errors.Unavailable(
                    f"wt-server on node {_node()}: exited {self._proc.returncode} "
                    f"before serving: {text[-1500:]}")
            time.sleep(0.05)
        self._proc.kill()
        raise errors.DeadlineExceeded(
            f"wt-server on node {_node()}: not serving within {START_TIMEOUT_S:.0f} s")

    def _watch(self) -> None:
        while True:
            with self._mu:
                proc = self._proc
            if proc is None:
                return
            code = proc.wait()
            with self._mu:
                if self._stopping or proc is not self._proc:
                    return
                self.exits.append(code)
                if not self._restart:
                    self._proc = None
                    return
                try:
                    self._start()
                    self.restarts += 1
                except errors.WtError:
                    self._proc = None
                    return

    def info(self) -> ServerState:
        """Where the server is and how it is: node id, address, pid (None
        while it is down), restarts, exit statuses seen."""
        with self._mu:
            proc = self._proc
            export = next((self._args[i + 1] for i, a in enumerate(self._args[:-1])
                           if a == "--export"), None)
            return {"node_id": _node(), "address": f"{self._host}:{self._port}",
                    "export": export,
                    "pid": proc.pid if proc is not None and proc.poll() is None else None,
                    "restarts": self.restarts, "exits": list(self.exits)}

    def wait_serving(self, restarts: int, timeout: float) -> ServerState:
        """Waits until the server has been restarted `restarts` times in all
        and serves; returns info()."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            i = self.info()
            if i["restarts"] >= restarts and i["pid"] is not None:
                return i
            time.sleep(0.05)
        raise errors.DeadlineExceeded(
            f"wt-server on node {_node()}: not back within {timeout:.0f} s")

    def stop(self) -> None:
        """Stops the server (SIGTERM: it drains and exits) and removes the
        actor's directory, token file included."""
        with self._mu:
            self._stopping = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the actor's process dies."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _node() -> str:
    node: str = ray.get_runtime_context().get_node_id()
    return node


@dataclass
class ServersInfo:
    """What a trainer needs of the servers, picklable (it goes to actors
    through Ray): the addresses, the node of each, the trainer token."""

    addresses: List[str]
    nodes: List[str]
    token: str = field(repr=False)
    exports: List[Optional[str]] = field(default_factory=list)  # --export paths

    def node_of(self, address: str) -> Optional[str]:
        for a, n in zip(self.addresses, self.nodes):
            if a == address:
                return n
        return None

    def name_nodes(self, e: errors.WtError) -> errors.WtError:
        """`e` with the Ray node of every server address it names."""
        text = str(e)
        for a, n in zip(self.addresses, self.nodes):
            if a in text:
                text = text.replace(a, f"{a} (Ray node {n})")
        return type(e)(text) if text != str(e) else e

    def client(self, **kw: Any) -> Client:
        """A wt.Client over every server, with the token written to a file
        of mode 0600 here (removed when the client is closed or
        collected)."""
        from . import Client
        d = tempfile.mkdtemp(prefix="wt-ray-client-")
        os.chmod(d, 0o700)
        path = os.path.join(d, "token")
        _write_private(path, self.token + "\n")
        try:
            c = Client(self.addresses, token_file=path, **kw)
        except BaseException:
            shutil.rmtree(d, ignore_errors=True)
            raise
        weakref.finalize(c, shutil.rmtree, d, True)
        return c


def _alive_nodes() -> List[Dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive")]


def _choose(nodes: Union[str, Sequence[str], Any]) -> List[Dict[str, Any]]:
    alive = _alive_nodes()
    if isinstance(nodes, str) and nodes == "all":
        return alive
    if hasattr(nodes, "bundle_specs"):  # a placement group: its bundles' nodes
        from ray.util.placement_group import placement_group_table
        ray.get(cast(Any, nodes).ready())
        ids = list(dict.fromkeys(placement_group_table(nodes)["bundles_to_node_id"].values()))
    else:
        ids = list(nodes)
    by_id = {n["NodeID"]: n for n in alive}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise errors.NotFound(f"nodes: {missing} are not alive nodes of this Ray cluster")
    return [by_id[i] for i in ids]


class Servers:
    """One wt-server per chosen node (start_servers). `info` is what a
    trainer needs; `client()` a wt.Client over them; close() (or the
    handle's collection, or `with`) stops every server and its actor."""

    def __init__(self, actors: List[Any], info: ServersInfo) -> None:
        self.actors = actors
        self.info = info
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop_all, list(actors))

    @property
    def addresses(self) -> List[str]:
        return self.info.addresses

    @property
    def nodes(self) -> List[str]:
        return self.info.nodes

    def client(self, **kw: Any) -> Client:
        return self.info.client(**kw)

    def states(self) -> List[Optional[ServerState]]:
        """Each actor's info(), or None for one whose node is gone."""
        out: List[Optional[ServerState]] = []
        for a in self.actors:
            try:
                out.append(ray.get(a.info.remote(), timeout=30))
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                out.append(None)
        return out

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> "Servers":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _stop_all(actors: List[Any]) -> None:
    refs = []
    for a in actors:
        try:
            refs.append(a.stop.remote())
        except Exception:  # noqa: BLE001  (a dead actor)
            pass
    for r in refs:
        try:
            ray.get(r, timeout=60)
        except Exception:  # noqa: BLE001  (its node is gone: so is its server)
            pass
    for a in actors:
        try:
            ray.kill(a)
        except Exception:  # noqa: BLE001
            pass


def start_servers(nodes: Union[str, Sequence[str], Any] = "all", *,
                  args: Sequence[str] = (), server_bin: Optional[str] = None,
                  host: Optional[str] = None, restart: bool = True,
                  timeout: float = START_TIMEOUT_S) -> Servers:
    """Starts one wt-server on each of `nodes`: "all" alive nodes, a
    placement group (its bundles' nodes) or a list of node ids. Each is
    owned by a ServerActor pinned to its node (num_cpus=0), started with
    `args` (the model, --memory, --export, ...; never a token) and a fresh
    trainer token, listening on `host` (default: the node's Ray address).
    Returns once every server serves; a server that fails to start fails
    the call naming its node (the others are stopped)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    chosen = _choose(nodes)
    if not chosen:
        raise errors.FailedPrecondition("nodes: no alive node chosen")
    token = secrets.token_urlsafe(32)
    cls = ray.remote(num_cpus=0, max_restarts=0)(ServerActor)
    actors = []
    for n in chosen:
        actors.append(cls.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
        ).remote(token, list(args), host or n["NodeManagerAddress"], server_bin,
                 restart))
    try:
        infos = ray.get([a.info.remote() for a in actors], timeout=timeout)
    except BaseException:
        _stop_all(actors)
        raise
    info = ServersInfo([i["address"] for i in infos], [i["node_id"] for i in infos],
                       token, [i["export"] for i in infos])
    return Servers(actors, info)


class RayEngines:
    """vLLM's weight-sync client protocol over vLLM engines that are Ray
    actors (as vLLM's RayVLLMWeightSyncClient, which it extends with the
    pause the `wt` backend's load needs): each call fans out to every
    handle and waits for all. An actor is expected to have vLLM's
    AsyncLLM/LLM methods: init_weight_transfer_engine, start_weight_update,
    update_weights, finish_weight_update, update_weight_version, and
    pause_generation / resume_generation / reset_prefix_cache.

    With it the `wt` backend's trainer engine (wt_transfer.vllm_backend)
    and `load_on_engines` drive engines on any node through Ray, not only
    over HTTP."""

    def __init__(self, handles: Union[Any, Sequence[Any]], timeout: float = 300.0):
        self.handles = list(handles) if isinstance(handles, (list, tuple)) else [handles]
        self.timeout = timeout

    @staticmethod
    def _request(kind: str, **fields: Any) -> Any:
        """vLLM's request object where vLLM is importable (its engines
        take WeightTransferInitRequest / WeightTransferUpdateRequest, as
        RayVLLMWeightSyncClient sends them), else the same fields as a
        dict (a stand-in's)."""
        try:  # vLLM 0.32: vllm/distributed/weight_transfer/base.py
            from vllm.distributed.weight_transfer import base as vbase
            cls = getattr(vbase, kind, None)
        except ImportError:
            cls = None
        return cls(**fields) if cls is not None else dict(fields)

    def _all(self, method: str, *args: Any, **kw: Any) -> List[Any]:
        refs = [getattr(h, method).remote(*args, **kw) for h in self.handles]
        try:
            results: List[Any] = ray.get(refs, timeout=self.timeout)
            return results
        except ray.exceptions.RayActorError as e:
            raise errors.Unavailable(f"vLLM engine actor: {method}: {e}") from None
        except ray.exceptions.GetTimeoutError:
            raise errors.DeadlineExceeded(
                f"vLLM engine actor: {method}: no answer in {self.timeout:.0f} s") from None

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:
        self._all("init_weight_transfer_engine",
                  self._request("WeightTransferInitRequest", init_info=init_info))

    def start_weight_update(self) -> None:
        self._all("start_weight_update")

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        self._all("update_weights",
                  self._request("WeightTransferUpdateRequest", update_info=update_info))

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        self._all("finish_weight_update")
        if weight_version is not None:
            self._all("update_weight_version", weight_version)

    def pause_generation(self, mode: str = "wait") -> None:
        self._all("pause_generation", mode=mode)

    def resume_generation(self) -> None:
        self._all("resume_generation")

    def reset_prefix_cache(self) -> None:
        self._all("reset_prefix_cache")


def load_on_engines(engines: RayEngines, version: str, pause: Optional[str] = "wait") -> None:
    """Has every engine load `version` from its host's wt export (the
    engines' `wt` backend was initialised with it): generation paused
    around the load (pause=None: the prefix cache reset after it), as
    vllm_backend's trainer engine does over HTTP."""
    if pause is not None:
        engines.pause_generation(mode=pause)
    try:
        engines.start_weight_update()
        try:
            engines.update_weights({"version": version})
        except BaseException:
            try:
                engines.finish_weight_update(None)
            except Exception:  # noqa: BLE001  (the load's error stands)
                pass
            raise
        engines.finish_weight_update(version)
    finally:
        if pause is not None:
            engines.resume_generation()
    if pause is None:
        engines.reset_prefix_cache()


__all__ = ["start_servers", "Servers", "ServersInfo", "ServerActor", "RayEngines",
           "load_on_engines"]
