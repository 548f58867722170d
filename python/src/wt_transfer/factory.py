"""The factories, with the seed's semantics (vLLM's
`vllm.distributed.weight_transfer.factory`): lazy registration by module
path, or direct by class; a duplicate name or a missing class_name is a
ValueError with vLLM's words; an unknown backend is a ValueError listing
the ones registered. Every built-in backend is registered at the bottom of
this file, in one place, and is a C trainer engine of libwt_client."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union


class WeightTransferTrainerFactory:
    """Trainer-side engines by backend name."""

    # name -> a loader of its engine class (a class with a trainer_init
    # classmethod: engines.CTrainerEngine's, or a caller's own)
    _registry: dict[str, Callable[[], Type[Any]]] = {}

    @classmethod
    def register_engine(cls, name: str, module_path_or_cls: Union[str, Type[Any]],
                        class_name: str | None = None) -> None:
        """register_engine(name, "pkg.module", "Class") (imported on first
        use) or register_engine(name, Class)."""
        if name in cls._registry:
            raise ValueError(
                f"Weight transfer trainer engine '{name}' is already registered.")
        if isinstance(module_path_or_cls, str):
            module_path = module_path_or_cls
            if class_name is None:
                raise ValueError(
                    "class_name is required when registering with module path")

            def loader() -> Type[Any]:
                module = importlib.import_module(module_path)
                engine: Type[Any] = getattr(module, class_name)
                return engine

            cls._registry[name] = loader
        else:
            engine_cls = module_path_or_cls
            cls._registry[name] = lambda: engine_cls

    @classmethod
    def available(cls) -> List[str]:
        return list(cls._registry.keys())

    @classmethod
    def trainer_init(cls, *args: Any, client: Any, source: Any = None,
                     **kwargs: Any) -> Any:
        """Build and rendezvous a ready-to-send trainer engine; then call its
        send_weights() each round. Both of vLLM's forms:

        - vLLM 0.32/0.33: `trainer_init(init_info, *, client, source=None)`.
          The backend is `init_info.backend` (a dataclass with a `backend`
          class variable, as vLLM's TrainerInitInfo, or a dict with a
          "backend" key); its other fields, but `rank` and `init_info`, are
          the backend's options (`delta`, ...), and `init_info` (a dict) is
          merged over wt's init info.
        - The seed's: `trainer_init(backend, config, init_info, *, client,
          source)`.

        `client`: wt's Client or any object with vLLM's four methods;
        `source`: a WeightSource (vLLM's ModuleSource, wt's ArraySource,
        ...)."""
        if len(args) == 1 and not isinstance(args[0], str):
            backend, config, init_info, rank = _split(args[0])
            if rank:
                return _Follower(source)
        elif len(args) == 3:
            backend, config, init_info = args
        elif len(args) == 1 and isinstance(args[0], str):
            backend = args[0]
            config = kwargs.pop("config", None)
            init_info = kwargs.pop("init_info", None)
        else:
            raise TypeError("trainer_init(init_info, *, client, source=None) or "
                            "trainer_init(backend, config, init_info, *, client, source)")
        if kwargs:
            raise TypeError(f"trainer_init: unexpected {sorted(kwargs)}")
        if backend not in cls._registry:
            available = list(cls._registry.keys())
            raise ValueError(
                f"Invalid weight transfer backend: {backend}. "
                f"Available trainer engines: {available}")
        engine_cls = cls._registry[backend]()
        return engine_cls.trainer_init(config=config, init_info=init_info,
                                       client=client, source=source)


def _split(info: Any) -> Tuple[str, Dict[str, Any], Optional[Dict[str, Any]], int]:
    """(backend, options, wt init info, rank) of a new-form init info."""
    if isinstance(info, dict):
        fields = dict(info)
    elif dataclasses.is_dataclass(info):
        fields = {f.name: getattr(info, f.name) for f in dataclasses.fields(info)}
        fields["backend"] = getattr(info, "backend", None)
    else:
        raise ValueError("init_info: a dict with a 'backend' key, or a dataclass "
                         "with a backend class variable (vLLM's TrainerInitInfo)")
    backend = fields.pop("backend", None)
    if not isinstance(backend, str) or not backend:
        raise ValueError("init_info.backend: the backend's name (grpc, ucx, nccl, ipc)")
    rank = int(fields.pop("rank", 0) or 0)
    init_info = fields.pop("init_info", None)
    return (backend, {k: v for k, v in fields.items() if v is not None},
            init_info, rank)


class _Follower:
    """A trainer rank other than 0 (vLLM's rule: rank 0 sends): it touches
    no server, and iterates the source each round so that the collectives
    its tensors need (FSDP's full_tensor()) run on every rank."""

    is_sender = False

    def __init__(self, source: Any) -> None:
        self.source = source

    def send_weights(self, weight_version: Optional[str] = None) -> None:
        from .sources import source_iter
        for _ in source_iter(self.source):
            pass

    def shutdown(self) -> None:
        pass


# The built-in backends: libwt_client's trainer engines, loaded lazily.
for _name, _cls in (("grpc", "GrpcTrainerEngine"), ("ucx", "UcxTrainerEngine"),
                    ("nccl", "NcclTrainerEngine"), ("ipc", "IpcTrainerEngine")):
    WeightTransferTrainerFactory.register_engine(_name, "wt_transfer.engines", _cls)
del _name, _cls
