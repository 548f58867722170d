"""A vLLM worker's load of a committed version, all or nothing.

Shared by the worker extension (`wt_transfer.vllm.WtWorkerExtension`) and
the `wt` weight-transfer backend (`wt_transfer.vllm_backend`): both load the
version the trainer committed from the wt-server export on this host into
the model's live storage through vLLM's own reload path, and never leave a
mixed model behind.

- **vLLM's reload path.** vLLM repacks layers after loading (on CPU every
  linear layer; quantized models on GPU), so `model.load_weights` alone
  writes into storage vLLM no longer reads, or fails. `reload_weights`
  (`vllm.model_executor.model_loader.reload`: layerwise reload around
  `load_weights`, then the model's post-load processing) updates the live
  tensors, as vLLM's own weight-transfer engines do.
- **Transactional.** The worker keeps a lease on the version it serves. A
  load that fails at any tensor is undone by loading that version again
  (or, before any wt version was loaded, the checkpoint vLLM started from,
  through the same path); the error names the tensor, the cause and the
  version that is back, with wt's error class. Only when the restore fails
  too is the model fenced: its forward raises from then on, so vLLM's
  engine stops and `/health` fails, and a load balancer sees it. A mixed
  model never serves.

A worker that keeps the served version's lease holds back a wt round only
when two rounds commit without a load between them (shadow staging: the
second waits up to the server's --lease-wait, then fails naming this
process), see docs/python.md.
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any, Callable, Iterable, Iterator, Optional, Tuple

from . import consumer as _consumer
from . import errors

_consumers: dict = {}
_consumers_lock = threading.Lock()

Reload = Callable[[Optional[Iterable[Tuple[str, Any]]]], None]


def _gpu_here() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def consumer_for(path: str, register_host: Any = "auto") -> _consumer.Consumer:
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


def as_torch(array: Any, dtype_name: str) -> Any:
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


class _Named:
    """The tensors of a lease as (name, tensor) pairs, remembering the last
    name handed out (the tensor a failed load stopped at)."""

    def __init__(self, tensors: Any, torchy: bool) -> None:
        self.tensors, self.torchy, self.last = tensors, torchy, None

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        for name, a in self.tensors.items():
            self.last = name
            yield name, (as_torch(a, self.tensors.dtypes[name]) if self.torchy else a)
        self.last = None


def _release(lease: _consumer.Lease) -> None:
    try:
        lease.release()
    except errors.WtError:
        pass  # its connection is gone: the server dropped it already


def _fence(model: Any, why: str) -> None:
    """Makes every forward of `model` raise: vLLM's engine then stops and its
    /health fails, instead of serving a mixed model."""
    def refuse(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError(f"wt: this worker's weights are mixed ({why}); it "
                           "refuses to serve until restarted")
    try:
        model.forward = refuse
    except Exception:  # noqa: BLE001  (a model that refuses attributes)
        pass


def abandon_layerwise_reload(model: Any) -> None:
    """Undoes what a layerwise reload that failed midway left behind (vLLM's
    `reload.layerwise`, 0.32 and 0.33): a layer still waiting for weights
    gets its live tensors back, unwrapped, its buffered loads dropped, so
    that the next reload starts clean. Layers already processed hold the
    new bytes; the restore that follows rewrites them."""
    try:
        from vllm.model_executor.model_loader.reload import layerwise as lw
    except ImportError:
        return
    for layer in model.modules():
        info = lw.LAYERWISE_INFO.get(layer)
        if info is None or not info.can_load():
            continue
        if info.kernel_tensors is not None:
            lw._place_kernel_tensors(layer, info)
        info.reset()
    if hasattr(model, "_original_do_torchao_reload"):
        model._do_torchao_reload = model._original_do_torchao_reload
    lw.LOADING_LAYERS.clear()


def through_vllm(model: Any, reload: Reload) -> Reload:
    """`reload` (vLLM's reload path) made safe to call again after it fails:
    a failure leaves no layer half in reload (abandon_layerwise_reload)."""
    def run(pairs: Optional[Iterable[Tuple[str, Any]]]) -> None:
        try:
            reload(pairs)
        except BaseException:
            abandon_layerwise_reload(model)
            raise
    return run


class Served:
    """What one worker serves: the lease on its wt version (None until the
    first wt load; the checkpoint vLLM started from is then what serves)."""

    def __init__(self) -> None:
        self.lease: Optional[_consumer.Lease] = None
        self.version: Optional[str] = None
        self.fenced: Optional[str] = None
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            if self.lease is not None:
                _release(self.lease)
                self.lease, self.version = None, None


def load(served: Served, reload: Reload, model: Any, path: str,
         version: str = "", *, worker: int = 0, timeout: float = 0.0,
         torchy: bool = True) -> dict:
    """Loads `version` ("" or None: the newest) of the export at `path` into
    the model through `reload` (vLLM's reload path; called with the pairs,
    or with None for the checkpoint vLLM started from). All or nothing, see
    the module's text. Returns {"version", "sequence", "tensors", "bytes",
    "seconds", "restored"}."""
    t0 = time.perf_counter()
    with served.lock:
        if served.fenced:
            raise errors.DataLoss(f"this worker is fenced: {served.fenced}")
        c = consumer_for(str(path))
        lease = c.acquire(version or None, worker=int(worker), timeout=float(timeout))
        tensors = lease.tensors
        named = _Named(tensors, torchy)
        try:
            reload(named)
        except BaseException as cause:  # noqa: BLE001  (restore, then raise)
            try:
                _restore_then_raise(served, reload, model, torchy,
                                    tensors.version, named.last, cause)
            finally:
                _release(lease)
        old = served.lease
        served.lease, served.version = lease, tensors.version
        if old is not None:
            _release(old)
        nbytes = sum(int(getattr(a, "nbytes", 0)) for a in tensors.values())
        return {"version": tensors.version, "sequence": tensors.sequence,
                "tensors": len(tensors), "bytes": nbytes,
                "seconds": time.perf_counter() - t0, "restored": False}


def _restore_then_raise(served: Served, reload: Reload, model: Any,
                        torchy: bool, version: str, at: Optional[str],
                        cause: BaseException) -> None:
    where = f" at tensor '{at}'" if at else ""
    what = f"loading version '{version}'{where} failed: {type(cause).__name__}: {cause}"
    prev = served.version
    back = f"version '{prev}'" if prev else "the checkpoint vLLM started from"
    try:  # the served version's lease never left: its bytes are intact
        if served.lease is not None:
            reload(_Named(served.lease.tensors, torchy))
        else:
            reload(None)
    except BaseException as again:  # noqa: BLE001
        served.fenced = (f"{what}; restoring {back} failed too: "
                         f"{type(again).__name__}: {again}")
        _fence(model, served.fenced)
        raise errors.DataLoss(served.fenced + "; the worker is fenced (vLLM's "
                              "health fails)") from cause
    cls = type(cause) if isinstance(cause, errors.WtError) else errors.FailedPrecondition
    raise cls(f"{what}; {back} is back") from cause
