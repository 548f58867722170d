"""vLLM integration, checkpoint-engine style, without pickles (docs/python.md).

Two ways in, one load path (`wt_transfer._vllm_load`: vLLM's reload path,
all or nothing):

- **The `wt` weight-transfer backend** (`wt_transfer.vllm_backend`),
  registered in vLLM's factories by the package's `vllm.general_plugins`
  entry point: `vllm serve MODEL --weight-transfer-config
  '{"backend": "wt"}'` and vLLM's own trainer flow.
- **The worker extension**: start vLLM with `--worker-extension-cls
  wt_transfer.vllm.WtWorkerExtension`; every worker then has
  `update_weights_from_wt(path, version="")`, called on every worker
  through `collective_rpc`. On the trainer's side `load_on_vllm(urls, path,
  version)` asks every vLLM server to load a committed version through
  vLLM's `/collective_rpc` route (VLLM_SERVER_DEV_MODE=1), pausing
  generation around the load only (`/pause?mode=wait` ... `/resume`), so
  no prefix-cache block computed from the old weights is used after it.

Either way a worker acquires the version from the wt-server export at
`path` on its host (every tensor-parallel rank maps the same host copy),
loads it into the model's live storage, and keeps a lease on it until the
next version is in. A load that fails leaves the previous version serving
and says so; the caller gets wt's error class and the worker's reason.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import (Any, Dict, Iterable, List, Optional, Sequence, Tuple,
                    TypedDict, Union)

from . import _vllm_load
from . import errors
from ._fanout import fan_out

# wt's error class travels through vLLM's routes in the message
# (errors.tagged, errors.from_text); re-exported here for older callers.
tagged = errors.tagged
from_text = errors.from_text


class WtWorkerExtension:
    """Methods vLLM adds to each worker (`--worker-extension-cls`). The
    worker is `self`; its model is `self.model_runner.model`."""

    # the worker's (vLLM's has one; a stand-in may not)
    vllm_config: Any
    _wt_served_state: _vllm_load.Served

    def _wt_model(self) -> Any:
        runner = getattr(self, "model_runner", None)
        get = getattr(runner, "get_model", None)
        model = get() if callable(get) else getattr(runner, "model", None)
        if model is None:
            model = getattr(self, "model", None)
        if model is None:
            raise errors.FailedPrecondition("this worker has no model to load into")
        return model

    def _wt_served(self) -> _vllm_load.Served:
        served = getattr(self, "_wt_served_state", None)
        if served is None:
            served = _vllm_load.Served()
            self._wt_served_state = served
        return served

    def _wt_in_vllm(self) -> bool:
        return getattr(self, "vllm_config", None) is not None and \
            callable(getattr(self, "reload_weights", None))

    def _wt_reload(self, model: Any) -> _vllm_load.Reload:
        """vLLM's reload path (wt_transfer._vllm_load.vllm_reload), then the
        caches vLLM's own reload_weights resets (LoRA, encoder, multimodal);
        None loads the checkpoint vLLM started from. A worker without it
        (a stand-in) gets load_weights and the model's post-load
        processing."""
        if self._wt_in_vllm():
            runner = getattr(self, "model_runner", None)

            def after() -> None:
                for reset in ("reset_lora_state", "reset_encoder_cache",
                              "reset_mm_cache"):
                    fn = getattr(runner, reset, None)
                    if callable(fn):
                        fn()
            return _vllm_load.vllm_reload(self.vllm_config, model, after)

        def plain(pairs: Optional[Iterable[Tuple[str, Any]]]) -> None:
            if pairs is None:
                raise errors.FailedPrecondition(
                    "no reload path here to restore the checkpoint vLLM started from")
            model.load_weights(weights=iter(pairs))
            hook = getattr(model, "process_weights_after_loading", None)
            if callable(hook):
                hook()
        return plain

    def update_weights_from_wt(self, path: str, version: str = "",
                               worker: str = "0", timeout: str = "0",
                               to_torch: str = "1") -> _vllm_load.LoadResult:
        """Loads a committed version (collective_rpc passes strings), all or
        nothing. Returns {"version", "sequence", "tensors", "bytes",
        "seconds", "restored"}. Errors carry wt's class in their text."""
        try:
            model = self._wt_model()
            fence = _vllm_load.Fence(self, 1.0 if self._wt_in_vllm() else None)
            return _vllm_load.load(
                self._wt_served(), self._wt_reload(model), model, str(path),
                version or "", worker=int(worker), timeout=float(timeout),
                torchy=to_torch not in ("0", "false", ""), fence=fence)
        except errors.WtError as e:
            raise tagged(e) from e

    def wt_served_version(self) -> Optional[str]:
        """The wt version this worker serves (None: the checkpoint vLLM
        started from)."""
        return self._wt_served().version


def _post(url: str, body: Optional[Dict[str, Any]], timeout: float) -> Any:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data,
                                 headers={"Content-Type": "application/json"},
                                 method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text = r.read().decode() or "{}"
        try:
            return json.loads(text)
        except ValueError:
            return {}


def _http_error(url: str, route: str, e: Exception) -> errors.WtError:
    if isinstance(e, urllib.error.HTTPError):
        detail = e.read().decode("utf-8", "replace")
        try:
            d = json.loads(detail)
            detail = d.get("detail") or d.get("error") or d.get("message") or detail
            if isinstance(detail, dict):
                detail = detail.get("message", json.dumps(detail))
        except ValueError:
            pass
        return from_text(str(detail)[:2000], errors.Unavailable,
                         f"{url} {route}: HTTP {e.code}: ")
    return errors.Unavailable(f"{url} {route}: {e}")


PAUSE_MODES = ("wait", "keep", "abort")


class VllmLoad(TypedDict):
    """One server's load_on_vllm result (`results`: its workers')."""

    version: str
    workers: int
    seconds: float
    pause_s: float
    results: List[Any]


def load_on_vllm(urls: Union[str, Sequence[str]], path: str, version: str, *,
                 timeout: float = 300.0, method: str = "update_weights_from_wt",
                 pause: Optional[str] = "wait") -> Dict[str, VllmLoad]:
    """Asks every vLLM server in `urls` to load `version` from the wt export
    at `path` (on its host), in parallel, through POST /collective_rpc
    {"method", "args", "kwargs", "timeout"} as vLLM's route takes it.

    Generation pauses around the load only (POST /pause?mode=`pause`, which
    also clears vLLM's prefix cache, then /resume whatever happens): no
    block computed from the old weights is used after it. pause=None never
    pauses and resets the prefix cache after the load (/reset_prefix_cache)
    instead; requests running across the load then see both versions.

    Returns {url: {"version", "workers", "seconds", "pause_s", "results"}}
    (pause_s: how long generation was paused). A server that fails, or a
    worker that loaded another version than `version`, raises the worker's
    WtError class (NotFound for a version the export does not hold, ...)
    naming the server (and both versions); `.results` and `.failures` on it
    say how every server ended."""
    if isinstance(urls, str):
        urls = [urls]
    if pause is not None and pause not in PAUSE_MODES:
        raise ValueError(f"pause: '{pause}' is not one of {PAUSE_MODES} or None")

    def one(url: str) -> VllmLoad:
        base = url.rstrip("/")
        t0 = time.perf_counter()
        body = {"method": method, "args": [str(path)],
                "kwargs": {"version": str(version)}, "timeout": timeout}
        paused_at = None
        try:
            if pause is not None:
                try:
                    _post(f"{base}/pause?mode={pause}", None, timeout + 10)
                except (urllib.error.URLError, OSError) as e:
                    # it may have paused before the answer was lost
                    try:
                        _post(base + "/resume", None, 10)
                    except (urllib.error.URLError, OSError):
                        pass
                    raise _http_error(url, "/pause", e) from None
                paused_at = time.perf_counter()
            try:
                r = _post(base + "/collective_rpc", body, timeout + 10)
            except (urllib.error.URLError, OSError) as e:
                err = _http_error(url, "/collective_rpc", e)
                # vLLM writes "<path>" for any file path in an error it
                # returns; the export's is the caller's own
                raise type(err)(err.message.replace(
                    "export <path>", f"export {path}")) from None
            if pause is None:
                try:
                    _post(base + "/reset_prefix_cache", None, timeout + 10)
                except (urllib.error.URLError, OSError) as e:
                    raise _http_error(url, "/reset_prefix_cache", e) from None
        except BaseException:
            if paused_at is not None:  # resumed; the first failure stands
                try:
                    _post(base + "/resume", None, timeout + 10)
                except (urllib.error.URLError, OSError):
                    pass
            raise
        if paused_at is not None:
            try:
                _post(base + "/resume", None, timeout + 10)
            except (urllib.error.URLError, OSError) as e:
                raise _http_error(url, "/resume", e) from None
        pause_s = time.perf_counter() - paused_at if paused_at is not None else 0.0
        per_worker = r.get("results", []) if isinstance(r, dict) else []
        for i, w in enumerate(per_worker):
            got = w.get("version") if isinstance(w, dict) else None
            if got != version:
                raise errors.FailedPrecondition(
                    f"{url} worker {i} loaded version '{got}', not '{version}' "
                    "(the one the trainer committed)")
        return {"version": version, "workers": len(per_worker),
                "seconds": time.perf_counter() - t0, "pause_s": pause_s,
                "results": per_worker}

    return fan_out(urls, one)


def register() -> None:
    """The `vllm.general_plugins` entry point: registers backend "wt" in
    vLLM's worker and trainer factories (each process of vLLM runs it; a
    name registered already, by an earlier call or by vLLM itself, is left
    as it is), and teaches vLLM's LoRA manager wt lora paths
    (`wt_transfer.lora.install_vllm_loader`: LoRA adapter versions loaded
    from a wt export)."""
    from . import lora
    lora.install_vllm_loader()
    from vllm.distributed.weight_transfer.factory import (
        WeightTransferEngineFactory, WeightTransferTrainerFactory)
    for factory, cls in ((WeightTransferEngineFactory, "WtWeightTransferEngine"),
                         (WeightTransferTrainerFactory, "WtTrainerWeightTransferEngine")):
        if "wt" not in factory._registry:
            factory.register_engine("wt", "wt_transfer.vllm_backend", cls)


__all__: List[str] = ["WtWorkerExtension", "load_on_vllm", "register", "PAUSE_MODES"]
