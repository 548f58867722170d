"""wt's C trainer engines, as vLLM's TrainerWeightTransferEngine.

`trainer_init(config, init_info, *, client, source)` hands C the
backend's options (`config`) and the caller's `init_info`, once: C builds
the backend's init info (its secrets and rendezvous), merges the caller's
over it and runs the sync client's init_transfer: every server's InitWeightTransferEngine, the trainer
engine's connect beside them. `send_weights()` then runs one round of the
source: start, the C engine's sends (and UpdateWeights where the backend
needs it), finish. The client is wt's `Client` or any object with vLLM's
four methods; the C orchestration (fan-out, deadlines, abort on the first
failure) is the same for both.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from ctypes import byref, c_void_p
from typing import (Any, Dict, List, Optional, Sequence, Tuple, Type, TypeVar,
                    cast)

from . import _lib, errors
from .client import client_handle
from .sources import (CSource, ParamMeta, _Described, ended, source_iter,
                      source_metas, yielded)

_Engine = TypeVar("_Engine", bound="CTrainerEngine")


def _options(config: Any) -> Dict[str, str]:
    """A backend's options (strings) from a dict, a dataclass or None."""
    if config is None:
        return {}
    if dataclasses.is_dataclass(config):
        # (a dataclass class, not an instance, raises TypeError here)
        config = dataclasses.asdict(cast(Any, config))
    elif not isinstance(config, dict):
        config = {k: v for k, v in vars(config).items() if not k.startswith("_")}
    out: Dict[str, str] = {}
    for k, v in config.items():
        if k == "backend" or v is None:
            continue
        out[str(k)] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def _adapter_from_source(init_info: Optional[Dict[str, Any]],
                         source: Any) -> Optional[Dict[str, Any]]:
    """An adapter spec (docs/lora.md) without tensors takes the source's:
    the C client completes rank and target modules from them."""
    adapter = (init_info or {}).get("adapter")
    if not isinstance(adapter, dict) or adapter.get("tensors"):
        return init_info
    md = source.metadata
    md = md() if callable(md) else md
    tensors = [{"name": m.name, "dtype": str(m.dtype).replace("torch.", ""),
                "shape": [int(d) for d in m.shape]} for m in md]
    return dict(init_info or {}, adapter=dict(adapter, tensors=tensors))


class CTrainerEngine:
    """A trainer engine of libwt_client (the backend named `backend`)."""

    backend: str = ""

    def __init__(self, handle: c_void_p, owner: Any, owned: bool,
                 trainer: c_void_p, source: Any) -> None:
        self._client = handle
        self._owner = owner  # keeps wt's Client or the foreign plane alive
        self._owned = owned
        self._trainer = trainer
        self.source = source
        self._init_info: Optional[Dict[str, Any]] = None
        self.is_sender = True
        self.rounds = 0
        self._gone = "shut down"
        # send_weights, shutdown and a closing Client take turns: a Client
        # closed by another thread waits for the round in flight to end
        self._mu = threading.RLock()
        if not owned and hasattr(owner, "_engines"):
            owner._engines.add(self)  # closing the Client shuts this down

    def _live(self) -> Tuple[c_void_p, c_void_p]:
        """(sync client, trainer) handles; FailedPrecondition once shut
        down or once the Client it was made with is closed."""
        if not self._trainer or not self._client:
            raise errors.FailedPrecondition(f"trainer engine '{self.backend}': "
                                            f"{self._gone}")
        return self._client, self._trainer

    def _detach(self, why: str) -> None:
        with self._mu:
            self.shutdown()
            self._gone = why

    @classmethod
    def trainer_init(cls: Type[_Engine], config: Any, init_info: Any, *,
                     client: Any, source: Any, timeout: Optional[float] = None,
                     data_timeout: Optional[float] = None) -> _Engine:
        """Rendezvous with every server and return a ready engine."""
        if init_info is not None and not isinstance(init_info, dict):
            if dataclasses.is_dataclass(init_info):
                init_info = dataclasses.asdict(cast(Any, init_info))
            else:
                raise ValueError("init_info: a dict of wt's WeightTransferInitInfo "
                                 "fields (or None)")
        if source is None or not hasattr(source, "metadata"):
            raise ValueError("source: a WeightSource (metadata and iteration)")
        init_info = _adapter_from_source(init_info, source)
        L = _lib.lib()
        # Built once in C, and checked before any client is touched.
        info = c_void_p()
        _lib.check(L.wt_bindings_trainer_init_info_new(
            cls.backend.encode(), json.dumps(_options(config)).encode(),
            json.dumps(init_info).encode() if init_info else None, byref(info)))
        try:
            handle, owner, owned = client_handle(client, timeout, data_timeout)
            trainer = c_void_p()
            try:
                _lib.check(L.wt_bindings_trainer_init_transfer(
                    handle, info, byref(trainer)))
            except BaseException:
                if owned:
                    L.wt_sync_client_destroy(handle)
                raise
        finally:
            L.wt_bindings_init_info_free(info)
        return cls(handle, owner, owned, trainer, source)

    @property
    def init_info(self) -> Dict[str, Any]:
        """The init info this engine's init sent (wt's JSON form), read
        from C on first use."""
        if self._init_info is None:
            with self._mu:
                self._live()
                p = c_void_p()
                _lib.check(_lib.lib().wt_bindings_client_init_info(
                    self._client, byref(p)))
                self._init_info = json.loads(_lib.take_string(p))
        return self._init_info

    def send_weights(self, weight_version: str | None = None) -> str:
        """One round of the source to every server: start, send, finish.
        Returns the committed version's name (default "round-N", N counting
        this engine's rounds from 1). Any failure aborts the round on every
        server and raises the WtError naming the server at fault."""
        with self._mu:
            self._live()
            L = _lib.lib()
            version = weight_version or f"round-{self.rounds + 1}"
            hold = getattr(self.source, "hold_bytes", None)
            if hold is None:
                with CSource(self.source) as src:  # checked before any byte moves
                    _lib.check(L.wt_sync_client_start(self._client))
                    _lib.check(L.wt_sync_client_update(self._client, self._trainer,
                                                       src.handle, None, None))
            else:
                self._send_on_the_fly(hold)
            _lib.check(L.wt_sync_client_finish(self._client, version.encode()))
            self.rounds += 1
            return version

    def _update(self, metas: Sequence[ParamMeta],
                described: List[_Described]) -> None:
        with CSource.over(metas, described) as src:
            _lib.check(_lib.lib().wt_sync_client_update(
                self._client, self._trainer, src.handle, None, None))

    def _send_on_the_fly(self, hold: int) -> None:
        """One round in parts of about `hold` bytes, each an update of the
        round; a part's tensors are let go before the next is asked for.
        A bad tensor, or any exception from the source, aborts the round
        (a failed update has aborted it already; a second abort is a
        no-op)."""
        L = _lib.lib()
        metas = source_metas(self.source)
        it = source_iter(self.source)
        _lib.check(L.wt_sync_client_start(self._client))
        part: Optional[List[_Described]]  # None: let go (as `d`)
        d: Optional[_Described]
        try:
            first, part, held = 0, [], 0
            for i in range(len(metas)):
                d = yielded(metas, it, i)
                part.append(d)
                held += d.nbytes
                d = None
                if held >= hold:
                    self._update(metas[first:i + 1], part)
                    first, part, held = i + 1, [], 0
            ended(metas, it)
            if part or first == 0:
                self._update(metas[first:], part)
            part = None
        except BaseException as e:
            L.wt_sync_client_abort(self._client,
                                   f"the source failed: {e}"[:512].encode())
            raise

    def shutdown(self) -> None:
        with self._mu:
            self._shutdown()

    def _shutdown(self) -> None:
        L = _lib.lib()
        if self._trainer:
            L.wt_trainer_destroy(self._trainer)
            self._trainer = c_void_p()
        if self._owned and self._client:
            L.wt_sync_client_destroy(self._client)
        self._client = c_void_p()

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:
            pass

    def delta_stats(self) -> Dict[str, float]:
        """What the last round sent (docs/delta.md; the grpc and ucx
        backends): raw_bytes (the model), delta_wire_bytes (the delta
        data's bytes), delta_servers, full_servers, encode_s, round_s.
        FailedPrecondition for a backend that sends no delta rounds."""
        out = _lib.DeltaStats()
        _, trainer = self._live()
        _lib.check(_lib.lib().wt_trainer_delta_stats(trainer, byref(out)))
        return {f[0]: getattr(out, f[0]) for f in out._fields_}


class GrpcTrainerEngine(CTrainerEngine):
    """`grpc`: the bytes over wt's own gRPC channel (PushWeights). With
    config {"delta": "on"|"auto"}, rounds after the first send only what
    changed to servers that hold the last one (docs/delta.md)."""
    backend = "grpc"


class UcxTrainerEngine(CTrainerEngine):
    """`ucx`: UCX (shared memory, TCP, RDMA), parallel or a chain. Takes
    {"delta": "on"|"auto"} as `grpc` does (docs/delta.md)."""
    backend = "ucx"


def _wheel_nccl() -> str:
    """The nvidia-nccl wheel's libnccl.so.2 (the NCCL vLLM runs)."""
    import importlib.util
    import pathlib
    spec = importlib.util.find_spec("nvidia.nccl")
    for base in (spec.submodule_search_locations or []) if spec else []:
        p = pathlib.Path(base) / "lib" / "libnccl.so.2"
        if p.exists():
            return str(p)
    raise ValueError("nccl_library='wheel': no nvidia-nccl wheel here "
                     "(pip install nvidia-nccl-cu12, as vLLM has it)")


class NcclTrainerEngine(CTrainerEngine):
    """`nccl`: NCCL broadcast from rank 0, GPU memory. Beside the backend's
    options, `config` may say which NCCL to load: `nccl_library` (a path to
    a libnccl.so.2, or "wheel": the nvidia-nccl wheel's, which vLLM runs)
    and `nccl_version` (the peers' "2.27.3": another version is refused by
    name before any collective, as NCCL would refuse the peer)."""
    backend = "nccl"

    @classmethod
    def trainer_init(cls: Type[_Engine], config: Any, init_info: Any, *,
                     client: Any, source: Any, timeout: Optional[float] = None,
                     data_timeout: Optional[float] = None) -> _Engine:
        opts = _options(config)
        library = opts.pop("nccl_library", None)
        version = opts.pop("nccl_version", None)
        if library == "wheel":
            library = _wheel_nccl()
        if library or version:
            _lib.check(_lib.lib().wt_nccl_select(
                library.encode() if library else None,
                version.encode() if version else None))
        return super().trainer_init(opts, init_info, client=client, source=source,
                                    timeout=timeout, data_timeout=data_timeout)


class IpcTrainerEngine(CTrainerEngine):
    """`ipc`: CUDA IPC handles on one host's GPUs."""
    backend = "ipc"
