"""wt as a vLLM weight-transfer backend, named "wt" (docs/python.md, "vLLM").

The wt-transfer package registers it in vLLM's two factories through its
`vllm.general_plugins` entry point (`wt_transfer.vllm:register`), so a stock
vLLM serves it without `--worker-extension-cls`:

    VLLM_SERVER_DEV_MODE=1 vllm serve MODEL --weight-transfer-config '{"backend": "wt"}'

and vLLM's standard trainer flow drives it:

    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
    from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
    from wt_transfer.vllm_backend import WtTrainerInitInfo
    engine = WeightTransferTrainerFactory.trainer_init(
        WtTrainerInitInfo(rank=0, servers=["10.0.0.7:50051"],
                          export="/run/user/1000/wt/export.sock"),
        client=HTTPVLLMWeightSyncClient("http://10.0.0.7:8000"),
        source=ModuleSource(model))
    engine.send_weights()          # every step

`send_weights` pushes the source to every wt-server (the `grpc` or `ucx`
transport; generation goes on meanwhile), then, once the version committed
on all of them, pauses vLLM, has every worker load it from its host's
export (`init_weight_transfer_engine({"export": ...})` at init;
`update_weights({"version": V})` each round), and resumes. The load is
vLLM's reload path, all or nothing (wt_transfer._vllm_load).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, cast

import torch
from vllm.distributed.weight_transfer.base import (TrainerInitInfo,
                                                   TrainerWeightTransferEngine,
                                                   WeightTransferEngine,
                                                   WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)

from . import _vllm_load, errors
from .sources import source_iter
from .errors import from_text, tagged
from .vllm import PAUSE_MODES, register

TRANSPORTS = ("grpc", "ucx")


@dataclass
class WtInitInfo(WeightTransferInitInfo):
    """What a vLLM worker needs: the export socket of the wt-server on its
    host, the wt worker it reads, how long an acquire may wait (seconds)."""

    export: str
    worker: int = 0
    timeout: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.export, str) or not self.export:
            raise ValueError("init_info.export: the wt-server export socket's "
                             "path on this host")


@dataclass
class WtUpdateInfo(WeightTransferUpdateInfo):
    """The version to load: one the trainer committed on every wt-server."""

    version: str

    def __post_init__(self) -> None:
        if not isinstance(self.version, str) or not self.version:
            raise ValueError("update_info.version: a committed wt version")


class WtWeightTransferEngine(WeightTransferEngine[WtInitInfo, WtUpdateInfo]):
    """vLLM's worker side: loads a committed version from the export."""

    init_info_cls = WtInitInfo
    update_info_cls = WtUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, config: Any, vllm_config: Any, device: torch.device,
                 model: torch.nn.Module) -> None:
        super().__init__(config, vllm_config, device, model)
        self.init_info: Optional[WtInitInfo] = None
        self.served = _vllm_load.Served()
        self.last: Optional[_vllm_load.LoadResult] = None

    def parse_init_info(self, init_dict: Dict[str, Any]) -> WtInitInfo:
        try:
            info: WtInitInfo = super().parse_init_info(init_dict)
            return info
        except ValueError as e:
            raise tagged(errors.InvalidArgument(str(e))) from e

    def parse_update_info(self, update_dict: Dict[str, Any]) -> WtUpdateInfo:
        try:
            info: WtUpdateInfo = super().parse_update_info(update_dict)
            return info
        except ValueError as e:
            raise tagged(errors.InvalidArgument(str(e))) from e

    def init_transfer_engine(self, init_info: WtInitInfo) -> None:
        try:
            _vllm_load.consumer_for(init_info.export)  # refused here, not later
        except errors.WtError as e:
            raise tagged(e) from e
        self.init_info = init_info

    def start_weight_update(self) -> None:
        if self.init_info is None:
            raise tagged(errors.FailedPrecondition(
                "the wt backend has no init: call init_weight_transfer_engine "
                "with {'export': PATH} first"))


    def receive_weights(self, update_info: WtUpdateInfo) -> None:
        assert self.init_info is not None
        try:
            self.last = _vllm_load.load(
                self.served, _vllm_load.vllm_reload(self.vllm_config, self.model),
                self.model, self.init_info.export,
                update_info.version, worker=self.init_info.worker,
                timeout=self.init_info.timeout,
                fence=_vllm_load.Fence(None, 1.0))
        except errors.WtError as e:
            raise tagged(e) from e

    def finish_weight_update(self) -> None:
        pass  # the load is whole when receive_weights returns

    def shutdown(self) -> None:
        self.served.close()


@dataclass
class WtTrainerInitInfo(TrainerInitInfo):
    """The trainer's side of the `wt` backend.

    servers: the wt-servers ("host:port"), one beside each vLLM host.
    export: the export socket's path on the vLLM hosts (the same on each).
    transport: the wt backend that moves the bytes, "grpc" or "ucx".
    options: the transport's options (docs/python.md: delta, ...).
    pause: how vLLM pauses around the load ("wait", "keep", "abort"), or
        None to reset its prefix cache after the load without pausing.
    token_file, timeout, data_timeout, keepalive_timeout, tcp_user_timeout:
        as wt's Client takes them."""

    backend: ClassVar[str] = "wt"

    servers: List[str]
    export: str
    transport: str = "grpc"
    options: Dict[str, Any] = field(default_factory=dict)
    pause: Optional[str] = "wait"
    worker: int = 0
    token_file: Optional[str] = None
    timeout: Optional[float] = None
    data_timeout: Optional[float] = None
    keepalive_timeout: Optional[float] = None
    tcp_user_timeout: Optional[float] = None

    def __post_init__(self) -> None:
        if isinstance(self.servers, str):
            self.servers = [self.servers]
        if not self.servers:
            raise ValueError("init_info.servers: at least one wt-server 'host:port'")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"init_info.transport: '{self.transport}' is not "
                             f"one of {TRANSPORTS}")
        if self.pause is not None and self.pause not in PAUSE_MODES:
            raise ValueError(f"init_info.pause: '{self.pause}' is not one of "
                             f"{PAUSE_MODES} or None")


def _vllm_call(what: str, fn: Any, *args: Any) -> None:
    """A call of the vLLM client, its failure as a WtError with the worker's
    class (the text of vLLM's answer carries it)."""
    try:
        fn(*args)
    except errors.WtError:
        raise
    except Exception as e:  # noqa: BLE001  (requests, Ray, a framework's own)
        resp = getattr(e, "response", None)
        text = getattr(resp, "text", None) or str(e)
        try:
            d = json.loads(text)
            text = str(d.get("detail") or d.get("error") or d.get("message") or text)
        except (ValueError, AttributeError):
            pass
        raise from_text(text[:2000], errors.Unavailable, f"vLLM {what}: ") from e


class _Pause:
    """Pauses vLLM around the load: its /pause and /resume routes where the
    client has a base_url (HTTPVLLMWeightSyncClient), its pause_generation
    and resume_generation where it has those; else the prefix cache is all
    that needs resetting, and only /reset_prefix_cache can."""

    def __init__(self, client: Any, mode: Optional[str], timeout: float) -> None:
        self.client, self.mode, self.timeout = client, mode, timeout
        self.base: Optional[str] = getattr(client, "base_url", None)
        self.calls = callable(getattr(client, "pause_generation", None)) and \
            callable(getattr(client, "resume_generation", None))
        if self.base is None and not self.calls:
            raise errors.FailedPrecondition(
                f"client {type(client).__name__}: neither a base_url (vLLM's HTTP "
                "routes) nor pause_generation/resume_generation, so wt cannot "
                "keep vLLM's prefix cache from serving blocks of the old weights")
        self.paused_s = 0.0

    def _post(self, route: str) -> None:
        base = cast(str, self.base)  # (called only where there is one)
        req = urllib.request.Request(base.rstrip("/") + route, data=b"",
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                r.read()
        except (urllib.error.URLError, OSError) as e:
            raise errors.Unavailable(f"{self.base} {route}: {e}") from e

    def _resume(self) -> None:
        if self.base is not None:
            self._post("/resume")
        else:
            self.client.resume_generation()

    def __enter__(self) -> "_Pause":
        if self.mode is not None:
            try:
                if self.base is not None:
                    self._post(f"/pause?mode={self.mode}")
                else:
                    self.client.pause_generation(mode=self.mode)
            except BaseException:
                try:  # it may have paused before the answer was lost
                    self._resume()
                except Exception:  # noqa: BLE001
                    pass
                raise
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.mode is None:
                if exc[0] is None and self.base is not None:
                    self._post("/reset_prefix_cache")
                elif exc[0] is None:
                    self.client.reset_prefix_cache()
            else:
                self._resume()
        except Exception:
            if exc[0] is None:
                raise  # else the load's own error is the one to see
        finally:
            self.paused_s = time.perf_counter() - self._t0


class WtTrainerWeightTransferEngine(TrainerWeightTransferEngine[WtTrainerInitInfo]):
    """vLLM's trainer side of the `wt` backend (see the module's text)."""

    init_info_cls = WtTrainerInitInfo

    def __init__(self, *, client: Any, source: Any = None,
                 is_sender: bool = True) -> None:
        super().__init__(client=client, source=source, is_sender=is_sender)
        self.wt_client: Any = None
        self.wt_engine: Any = None
        self.pause: Optional[_Pause] = None
        self.last_pause_s = 0.0

    @classmethod
    def trainer_init(cls, init_info: WtTrainerInitInfo, *, client: Any,
                     source: Any = None) -> "WtTrainerWeightTransferEngine":
        if source is None:
            raise ValueError("the wt trainer engine requires a WeightSource")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender)
        if not engine.is_sender:
            return engine  # iterates the source only, for its collectives
        from .client import Client
        from .factory import WeightTransferTrainerFactory as WtFactory
        engine.pause = _Pause(client, init_info.pause,
                              init_info.timeout or 300.0)
        engine.wt_client = Client(init_info.servers, token_file=init_info.token_file,
                                  timeout=init_info.timeout,
                                  data_timeout=init_info.data_timeout,
                                  keepalive_timeout=init_info.keepalive_timeout,
                                  tcp_user_timeout=init_info.tcp_user_timeout)
        try:
            engine.wt_engine = WtFactory.trainer_init(
                init_info.transport, dict(init_info.options), None,
                client=engine.wt_client, source=source)
            _vllm_call("init_weight_transfer_engine",
                       client.init_weight_transfer_engine,
                       {"export": init_info.export, "worker": init_info.worker})
        except BaseException:
            engine.shutdown()
            raise
        return engine

    def send_weights(self, weight_version: Optional[str] = None) -> Optional[str]:
        """One round: the source to every wt-server (committed on all), then
        every vLLM worker loads it, generation paused around the load only.
        Returns the version."""
        if not self.is_sender:
            for _ in source_iter(self.source):  # the collectives (full_tensor)
                pass
            return None
        if self.wt_engine is None:
            raise errors.FailedPrecondition("wt trainer engine: shut down")
        version: str = self.wt_engine.send_weights(weight_version)
        self.load(version)
        return version

    def load(self, version: str) -> None:
        """Has every vLLM worker load `version` (committed on the wt-servers
        already), generation paused around it. A failure raises the
        worker's WtError class (NotFound: the export does not hold it); the
        workers then serve what they served before."""
        if self.pause is None:
            raise errors.FailedPrecondition("wt trainer engine: not the sender "
                                            "(rank 0) or shut down")
        with self.pause:
            _vllm_call("start_weight_update", self.client.start_weight_update)
            try:
                _vllm_call("update_weights", self.client.update_weights,
                           {"version": version})
            except BaseException:
                # vLLM ends the update itself when its worker raised; when
                # only this side failed (a timeout), end it here, or every
                # later start is refused
                try:
                    self.client.finish_weight_update(None)
                except Exception:  # noqa: BLE001
                    pass
                raise
            _vllm_call("finish_weight_update", self.client.finish_weight_update,
                       version)
        self.last_pause_s = self.pause.paused_s

    def shutdown(self) -> None:
        if self.wt_engine is not None:
            self.wt_engine.shutdown()
            self.wt_engine = None
        if self.wt_client is not None:
            self.wt_client.close()
            self.wt_client = None


__all__ = ["WtInitInfo", "WtUpdateInfo", "WtWeightTransferEngine",
           "WtTrainerInitInfo", "WtTrainerWeightTransferEngine", "TRANSPORTS"]

# A trainer process never runs vLLM's plugins (vLLM's engine does, at its
# start); importing this module, as a trainer does for WtTrainerInitInfo,
# registers "wt" in both of vLLM's factories too.
register()
