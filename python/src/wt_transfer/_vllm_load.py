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
  version whose tensors (names, dtypes, shapes) differ from it is refused
  before the model is touched. A load that fails at any tensor, or leaves
  a parameter without bytes, is undone by loading that version again (or,
  before any wt version was loaded, the checkpoint vLLM started from,
  through the same path); the error names the tensor, the cause and the
  version that is back, with wt's error class. Only when the restore fails
  too is the worker fenced (Fence): it serves no more, vLLM's engine
  stops, `/health` fails, and a load balancer sees it.

Per worker: with tensor parallelism each rank loads and restores on its
own (docs/vllm.md, "What has not run"). A worker that keeps the served
version's lease holds back a wt round only when two rounds commit without
a load between them (shadow staging: the second waits up to the server's
--lease-wait, then fails naming this process); in-place staging needs no
lease held between rounds, so it does not fit (docs/vllm.md).
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import (Any, Callable, Dict, Iterable, Iterator, Optional, Tuple,
                    TypedDict, cast)

from . import consumer as _consumer
from . import errors

# (export path, host mappings registered) -> this process's consumer
_consumers: Dict[Tuple[str, bool], _consumer.Consumer] = {}
_consumers_lock = threading.Lock()

Reload = Callable[[Optional[Iterable[Tuple[str, Any]]]], None]

# What a load returns (the worker extension's update_weights_from_wt too).
LoadResult = TypedDict("LoadResult", {"version": str, "sequence": int,
                                      "tensors": int, "bytes": int,
                                      "seconds": float})


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
        if c is None or not c._h or c._closed:
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

    last: Optional[str]

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


class Fence:
    """How a worker stops serving when its weights are mixed: every forward
    of the model raises at once (the instance's class swapped for one whose
    `__call__` and `forward` raise, so a compiled `__call__` refuses too),
    the worker's `execute_model` where the worker is known; and, inside
    vLLM, the worker process exits a moment later (SIGKILL), since a
    captured CUDA graph replays without calling the model: vLLM's engine
    then stops, /health fails, and a load balancer takes it out. The error
    reaches the caller first."""

    def __init__(self, worker: Any = None, exit_after: Optional[float] = None):
        self.worker, self.exit_after = worker, exit_after

    def __call__(self, model: Any, why: str) -> None:
        def refuse(*_a: Any, **_k: Any) -> Any:
            raise RuntimeError(f"wt: this worker's weights are mixed ({why}); "
                               "it refuses to serve until restarted")
        try:
            cls = type(model)
            model.__class__ = type(f"Fenced{cls.__name__}", (cls,),
                                   {"__call__": refuse, "forward": refuse})
        except Exception:  # noqa: BLE001  (a class that cannot be swapped)
            try:
                model.forward = refuse
            except Exception:  # noqa: BLE001
                pass
        if self.worker is not None:
            try:
                self.worker.execute_model = refuse
            except Exception:  # noqa: BLE001
                pass
        if self.exit_after is not None:
            import logging
            import os
            import signal
            logging.getLogger("wt_transfer").critical(
                "wt: weights mixed, the worker exits: %s", why)
            t = threading.Timer(self.exit_after,
                                lambda: os.kill(os.getpid(), signal.SIGKILL))
            t.daemon = True
            t.start()


def abandon_layerwise_reload(model: Any) -> None:
    """Undoes what a layerwise reload that failed midway left behind (vLLM's
    `reload.layerwise`, 0.32 and 0.33: private names): a layer still waiting
    for weights gets its live tensors back, unwrapped, its buffered loads
    dropped, so that the next reload starts clean. Layers already processed
    hold the new bytes; the restore that follows rewrites them."""
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


class Unrecoverable(Exception):
    """A reload failed and what it left behind could not be undone."""


def vllm_reload(vllm_config: Any, model: Any,
                after: Optional[Callable[[], None]] = None) -> Reload:
    """vLLM's reload path for `model` (vLLM 0.32/0.33,
    `model_loader.reload`): layerwise reload around `load_weights`, each
    layer processed and copied into its live tensors; then every parameter
    must have had bytes (vLLM itself only logs the ones that did not: a
    layer without them would keep old weights, one with some of them would
    be built from uninitialised memory). None loads the checkpoint vLLM
    started from. `after` runs on success (caches derived from weights).
    A failure first drops what the reload left half done; if that fails
    too, Unrecoverable."""
    def run(pairs: Optional[Iterable[Tuple[str, Any]]]) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import (
            finalize_layerwise_reload, initialize_layerwise_reload)
        from vllm.model_executor.model_loader.reload.inplace import reload_weights
        mc = vllm_config.model_config
        with set_current_vllm_config(vllm_config):
            try:
                if pairs is None:
                    reload_weights(vllm_config, model, weights_iterator=None,
                                   weights_path=None, is_checkpoint_format=True)
                else:
                    lora = vllm_config.lora_config is not None
                    want = {n.replace(".base_layer.", ".") if lora else n
                            for n, _ in model.named_parameters()}
                    initialize_layerwise_reload(model)
                    loaded = model.load_weights(iter(pairs))
                    finalize_layerwise_reload(model, mc)
                    if loaded is not None and mc.quantization is None:
                        missing = sorted(want - set(loaded))
                        if missing:
                            raise errors.FailedPrecondition(
                                f"{len(missing)} parameter(s) of the model got "
                                f"no bytes from it: {', '.join(missing[:4])}"
                                + (", ..." if len(missing) > 4 else ""))
            except BaseException as e:
                try:
                    abandon_layerwise_reload(model)
                except BaseException as again:  # noqa: BLE001
                    raise Unrecoverable(
                        f"undoing the failed reload failed too: "
                        f"{type(again).__name__}: {again}") from e
                raise
        if after is not None:
            after()
    return run


def _layout(tensors: Any) -> Dict[str, Tuple[str, Tuple[int, ...]]]:
    return {n: (tensors.dtypes[n], tuple(getattr(a, "shape", ())))
            for n, a in tensors.items()}


def layout_change(old: Any, new: Any) -> Optional[str]:
    """How `new`'s tensors differ from `old`'s (names, dtypes, shapes), or
    None."""
    a, b = _layout(old), _layout(new)
    for name in a:
        if name not in b:
            return f"it has no tensor '{name}'"
        if a[name] != b[name]:
            return (f"tensor '{name}' is {b[name][0]} {list(b[name][1])}, "
                    f"served as {a[name][0]} {list(a[name][1])}")
    for name in b:
        if name not in a:
            return f"it has a tensor '{name}' the served version lacks"
    return None


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


def _acquire(path: str, version: str, worker: int,
             timeout: float) -> _consumer.Lease:
    """A lease from this process's consumer of `path`; a connection that
    broke (the wt-server restarted, an answer came too late) is replaced
    once by a new one."""
    c = consumer_for(path)
    try:
        return c.acquire(version or None, worker=worker, timeout=timeout)
    except (errors.Unavailable, errors.DeadlineExceeded,
            errors.FailedPrecondition) as e:
        if isinstance(e, errors.FailedPrecondition) and \
                "connect again" not in e.message and "closed" not in e.message:
            raise
        with _consumers_lock:
            for key, cached in list(_consumers.items()):
                if cached is c:
                    del _consumers[key]  # its leases keep it alive
        return consumer_for(path).acquire(version or None, worker=worker,
                                          timeout=timeout)


def load(served: Served, reload: Reload, model: Any, path: str,
         version: str = "", *, worker: int = 0, timeout: float = 0.0,
         torchy: bool = True, fence: Optional[Fence] = None) -> LoadResult:
    """Loads `version` ("" or None: the newest) of the export at `path` into
    the model through `reload` (vLLM's reload path; called with the pairs,
    or with None for the checkpoint vLLM started from). All or nothing, see
    the module's text; `fence` stops the worker if a restore fails too.
    Returns {"version", "sequence", "tensors", "bytes", "seconds"}."""
    t0 = time.perf_counter()
    with served.lock:
        if served.fenced:
            raise errors.DataLoss(f"this worker is fenced: {served.fenced}")
        lease = _acquire(str(path), version, int(worker), float(timeout))
        # (a lease just acquired holds them: None only once released)
        tensors = cast(_consumer.Tensors, lease.tensors)
        if served.lease is not None:
            change = layout_change(served.lease.tensors, tensors)
            if change is not None:  # refused before the model is touched
                _release(lease)
                raise errors.FailedPrecondition(
                    f"version '{tensors.version}' does not fit the model this "
                    f"worker serves: {change}; version '{served.version}' "
                    "stays")
        named = _Named(tensors, torchy)
        try:
            reload(named)
        except BaseException as cause:  # noqa: BLE001  (restore, then raise)
            try:
                _restore_then_raise(served, reload, model, torchy,
                                    tensors.version, named.last, cause,
                                    fence or Fence())
            finally:
                _release(lease)
        old = served.lease
        served.lease, served.version = lease, tensors.version
        if old is not None:
            _release(old)
        nbytes = sum(int(getattr(a, "nbytes", 0)) for a in tensors.values())
        return {"version": tensors.version, "sequence": tensors.sequence,
                "tensors": len(tensors), "bytes": nbytes,
                "seconds": time.perf_counter() - t0}


def _restore_then_raise(served: Served, reload: Reload, model: Any,
                        torchy: bool, version: str, at: Optional[str],
                        cause: BaseException, fence: Fence) -> None:
    where = f" at tensor '{at}'" if at else ""
    what = f"loading version '{version}'{where} failed: {type(cause).__name__}: {cause}"
    prev = served.version
    back = f"version '{prev}'" if prev else "the checkpoint vLLM started from"
    try:  # the served version's lease never left: its bytes are intact
        if isinstance(cause, Unrecoverable):
            raise cause
        if served.lease is not None:
            reload(_Named(served.lease.tensors, torchy))
        else:
            reload(None)
    except BaseException as again:  # noqa: BLE001
        served.fenced = (f"{what}; restoring {back} failed too: "
                         f"{type(again).__name__}: {again}")
        fence(model, served.fenced)
        raise errors.DataLoss(served.fenced + "; the worker is fenced: it "
                              "serves no more, and vLLM's health fails") from cause
    cls = type(cause) if isinstance(cause, errors.WtError) else errors.FailedPrecondition
    raise cls(f"{what}; {back} is back") from cause
