"""The factories, with the seed's semantics (vLLM's
`vllm.distributed.weight_transfer.factory`): lazy registration by module
path, or direct by class; a duplicate name or a missing class_name is a
ValueError with vLLM's words; an unknown backend is a ValueError listing
the ones registered. Every built-in backend is registered at the bottom of
this file, in one place, and is a C trainer engine of libwt_client."""

from __future__ import annotations

import importlib
from typing import Callable


class WeightTransferTrainerFactory:
    """Trainer-side engines by backend name."""

    _registry: dict[str, Callable[[], type]] = {}

    @classmethod
    def register_engine(cls, name: str, module_path_or_cls, class_name: str | None = None) -> None:
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

            def loader() -> type:
                module = importlib.import_module(module_path)
                return getattr(module, class_name)

            cls._registry[name] = loader
        else:
            engine_cls = module_path_or_cls
            cls._registry[name] = lambda: engine_cls

    @classmethod
    def available(cls) -> list:
        return list(cls._registry.keys())

    @classmethod
    def trainer_init(cls, backend: str, config, init_info, *, client, source):
        """Build and rendezvous a ready-to-send trainer engine of `backend`
        (`client`: wt's Client or any object with vLLM's four methods;
        `source`: a WeightSource). Then call its send_weights() each round."""
        if backend not in cls._registry:
            available = list(cls._registry.keys())
            raise ValueError(
                f"Invalid weight transfer backend: {backend}. "
                f"Available trainer engines: {available}")
        engine_cls = cls._registry[backend]()
        return engine_cls.trainer_init(config=config, init_info=init_info,
                                       client=client, source=source)


# The built-in backends: libwt_client's trainer engines, loaded lazily.
for _name, _cls in (("grpc", "GrpcTrainerEngine"), ("ucx", "UcxTrainerEngine"),
                    ("nccl", "NcclTrainerEngine"), ("ipc", "IpcTrainerEngine")):
    WeightTransferTrainerFactory.register_engine(_name, "wt_transfer.engines", _cls)
del _name, _cls
