"""vLLM integration, checkpoint-engine style, without pickles (docs/python.md).

Inside vLLM: start it with `--worker-extension-cls
wt_transfer.vllm.WtWorkerExtension`. Every worker then has
`update_weights_from_wt(path, version="")`. It acquires the newest (or the
named) version from the wt-server export at `path` on this host, feeds
`model.load_weights` from the mapped tensors, runs the model's post-load
processing, releases the lease, and returns what it loaded. vLLM calls it
on every worker through `collective_rpc`, and every tensor-parallel rank
on the host maps the same host copy.

On the trainer's side: `load_on_vllm(urls, path, version)` asks every vLLM
server, once a wt round has committed on every wt-server, to load it
through vLLM's `/collective_rpc` route (vLLM with VLLM_SERVER_DEV_MODE=1).
It reports, per server, the version each worker loaded and the time. A
version that is not the one the trainer committed is an error naming both.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import warnings

from . import consumer as _consumer
from . import errors

_consumers: dict = {}
_consumers_lock = threading.Lock()


def _gpu_here() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _consumer_for(path: str, register_host):
    """One consumer per export and process: mappings made once, kept. Host
    mappings are registered with CUDA (read-only, cudaHostRegister) where
    this process has a GPU ("auto"), so load_weights' copies to it run at
    pinned speed; where registering is not possible, it goes on without."""
    if register_host == "auto":
        register_host = _gpu_here()
    key = (path, bool(register_host))
    with _consumers_lock:
        c = _consumers.get(key)
        if c is None or not c._h:
            try:
                c = _consumer.open(path, register_host=bool(register_host))
            except errors.FailedPrecondition as e:
                if not register_host:
                    raise
                warnings.warn(f"wt: host mappings not registered ({e})")
                c = _consumer.open(path)
            _consumers[key] = c
        return c


def _as_torch(array, dtype_name: str):
    """A torch tensor over the mapped bytes (host: the read-only mapping,
    through numpy; device: DLPack), no copy."""
    import torch
    if isinstance(array, _consumer.DeviceTensor):
        return torch.from_dlpack(array)
    with warnings.catch_warnings():  # the mapping is read-only, by design
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(array)
    want = getattr(torch, dtype_name)
    return t.view(want) if t.dtype != want else t


class WtWorkerExtension:
    """Methods vLLM adds to each worker (`--worker-extension-cls`). The
    worker is `self`; its model is `self.model_runner.model`."""

    def _wt_model(self):
        runner = getattr(self, "model_runner", None)
        model = getattr(runner, "model", None) if runner is not None else None
        if model is None:
            model = getattr(self, "model", None)
        if model is None:
            raise errors.FailedPrecondition("this worker has no model to load into")
        return model

    def _wt_post_load(self, model):
        """The model's post-load processing (quantisation repacking and the
        like): vLLM's process_weights_after_loading where vLLM is there, else
        the model's own method of that name."""
        try:
            from vllm.model_executor.model_loader.utils import \
                process_weights_after_loading
            cfg = getattr(self, "model_config", None) or getattr(
                getattr(self, "model_runner", None), "model_config", None)
            device = getattr(self, "device", None)
            if cfg is not None:
                process_weights_after_loading(model, cfg, device)
                return
        except ImportError:
            pass
        hook = getattr(model, "process_weights_after_loading", None)
        if callable(hook):
            hook()

    def update_weights_from_wt(self, path: str, version: str = "",
                               worker: str = "0", timeout: str = "0",
                               to_torch: str = "1") -> dict:
        """Loads a committed version (collective_rpc passes strings). Returns
        {"version", "sequence", "tensors", "bytes", "seconds"}."""
        t0 = time.perf_counter()
        c = _consumer_for(str(path), register_host="auto")
        lease = c.acquire(version or None, worker=int(worker),
                          timeout=float(timeout))
        with lease as tensors:  # released whatever load_weights does
            model = self._wt_model()
            torchy = to_torch not in ("0", "false", "")
            weights = ((n, _as_torch(a, tensors.dtypes[n]) if torchy else a)
                       for n, a in tensors.items())
            model.load_weights(weights=weights)
            self._wt_post_load(model)
            nbytes = sum(getattr(a, "nbytes", 0) for a in tensors.values())
            out = {"version": tensors.version, "sequence": tensors.sequence,
                   "tensors": len(tensors), "bytes": int(nbytes)}
        out["seconds"] = time.perf_counter() - t0
        return out


def _post(url: str, body: dict, timeout: float):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"},
                                 method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text = r.read().decode() or "{}"
        return json.loads(text)


def load_on_vllm(urls, path: str, version: str, *, timeout: float = 300.0,
                 method: str = "update_weights_from_wt") -> dict:
    """Asks every vLLM server in `urls` to load `version` from the wt export
    at `path` (on its host), in parallel, through POST /collective_rpc
    {"method", "args", "kwargs", "timeout"} as vLLM's route takes it.
    Returns {url: {"version", "workers", "seconds", "results"}}. A server
    that fails, or a worker that loaded another version than `version`,
    raises WtError naming the server (and both versions)."""
    if isinstance(urls, str):
        urls = [urls]
    results, failures = {}, {}

    def one(url):
        t0 = time.perf_counter()
        body = {"method": method, "args": [str(path)],
                "kwargs": {"version": str(version)}, "timeout": timeout}
        try:
            r = _post(url.rstrip("/") + "/collective_rpc", body, timeout + 10)
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")[:500]
            failures[url] = errors.Unavailable(
                f"{url} /collective_rpc: HTTP {e.code}: {detail}")
            return
        except (urllib.error.URLError, OSError) as e:
            failures[url] = errors.Unavailable(f"{url} /collective_rpc: {e}")
            return
        per_worker = r.get("results", [])
        for i, w in enumerate(per_worker):
            got = w.get("version") if isinstance(w, dict) else None
            if got != version:
                failures[url] = errors.FailedPrecondition(
                    f"{url} worker {i} loaded version '{got}', not '{version}' "
                    "(the one the trainer committed)")
                return
        results[url] = {"version": version, "workers": len(per_worker),
                        "seconds": time.perf_counter() - t0,
                        "results": per_worker}

    threads = [threading.Thread(target=one, args=(u,)) for u in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        first = next(u for u in urls if u in failures)
        err = failures[first]
        if len(failures) > 1:
            err = type(err)(str(err) + f" (and {len(failures) - 1} more server(s))")
        err.results = results
        err.failures = failures
        raise err
    return results
