"""wt_transfer: wt's Python package, the trainer's side (docs/python.md).

    from wt_transfer import Client, ArraySource, WeightTransferTrainerFactory

    client = Client(["127.0.0.1:50051"])
    engine = WeightTransferTrainerFactory.trainer_init(
        "ucx", None, None, client=client, source=ArraySource(params))
    for step in range(steps):
        train(params)
        engine.send_weights(f"step-{step}")
"""

from .client import Client, Version, VllmClient
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss,
                     DeadlineExceeded, FailedPrecondition, Internal,
                     InvalidArgument, NotFound, OutOfRange, PermissionDenied,
                     ResourceExhausted, Unauthenticated, Unavailable,
                     Unimplemented, Unknown, WtError)
from .factory import WeightTransferTrainerFactory
from .multirank import Box, ShardedTrainer, TorchGroup, build_plan
from .sources import ArraySource, OnTheFly, ParamMeta, view
from ._lib import bin_dir, lib_dir

__all__ = [
    "Client", "Version", "VllmClient", "WeightTransferTrainerFactory", "ArraySource",
    "OnTheFly", "ParamMeta", "view", "WtError", "Cancelled", "Unknown", "InvalidArgument",
    "DeadlineExceeded", "NotFound", "AlreadyExists", "PermissionDenied",
    "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
    "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "lib_dir", "bin_dir", "Box", "ShardedTrainer", "TorchGroup", "build_plan",
]
__version__ = "0.1.0"
