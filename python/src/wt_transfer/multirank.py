"""Many trainer ranks, one version (docs/multirank.md).

Each rank of a sharded trainer sends only the boxes of tensors it holds,
from its own memory: no gather on rank 0. The ranks exchange their layouts
once, through their own process group (`TorchGroup`, or any object with
`rank()`, `size()` and `allgather(obj)`); every rank computes the same plan
and digest in C, every rank inits every server with it (the first init of a
plan creates the engines, the others join it), and each round every rank
starts (joins the plan's round), pushes its boxes and finishes: the last
finish commits one version for all ranks, on each server, only when every
byte of every tensor landed once. A rank that fails, dies or never comes
fails the round for every rank within the data deadline.

    mesh = init_device_mesh("cpu", (world,))
    fully_shard(model, mesh=mesh)
    trainer = wt.ShardedTrainer("grpc", wt.Client(servers), model.state_dict)
    for step in range(steps):
        train_step(model)
        trainer.send_weights(f"step-{step}")
"""

from __future__ import annotations

import base64
import json
import os
import time
from ctypes import byref, c_void_p
from typing import (Any, Dict, Iterable, Iterator, List, Optional, Protocol,
                    Sequence, Tuple)

from . import _lib
from .factory import WeightTransferTrainerFactory
from .sources import ParamMeta, describe


class RankGroup(Protocol):
    """What ShardedTrainer needs of the ranks' channel (TorchGroup's)."""

    def rank(self) -> int: ...

    def size(self) -> int: ...

    def allgather(self, obj: Any) -> List[Any]: ...


class Box:
    """A box of a tensor this rank holds: `local` (its bytes, dense), the
    whole tensor's `shape`, and the box's first index per dimension
    (`offsets`). A plain array (no Box) is a whole tensor, replicated."""

    def __init__(self, local: Any, shape: Iterable[int],
                 offsets: Iterable[int]) -> None:
        self.local = local
        self.shape = tuple(int(x) for x in shape)
        self.offsets = tuple(int(x) for x in offsets)


def _dtensor_box(t: Any) -> Box:
    """A DTensor's local shard as a Box (its offsets from its placements)."""
    from torch.distributed.tensor._utils import \
        compute_local_shape_and_global_offset
    local = t.to_local()
    lshape, offsets = compute_local_shape_and_global_offset(
        t.shape, t.device_mesh, t.placements)
    if tuple(lshape) != tuple(local.shape):
        raise ValueError(f"DTensor local shape {tuple(local.shape)} is not "
                         f"its placements' {tuple(lshape)}")
    return Box(local, t.shape, offsets)


def _as_box(name: str, obj: Any) -> Box:
    if isinstance(obj, Box):
        return obj
    if type(obj).__name__ == "DTensor" or hasattr(obj, "device_mesh"):
        return _dtensor_box(obj)
    shape = tuple(int(x) for x in getattr(obj, "shape"))
    return Box(obj, shape, (0,) * len(shape))


def _boxes(tensors: Any) -> Dict[str, Box]:
    t = tensors() if callable(tensors) else tensors
    items = t.items() if isinstance(t, dict) else t
    return {name: _as_box(name, obj) for name, obj in items}


def _local(box: Box) -> Any:
    """The box's bytes as something describe() takes: contiguous, detached."""
    x = box.local
    if hasattr(x, "detach"):
        x = x.detach()
        if not x.is_contiguous():
            x = x.contiguous()  # a copy; FSDP2's and Shard(d) shards are not
    return x


def layout(tensors: Any, rank: int) -> Dict[str, Any]:
    """This rank's layout (what it holds) as a ShardPlan rank entry."""
    out: List[Dict[str, Any]] = []
    for name, box in _boxes(tensors).items():
        d = describe(name, _local(box))
        out.append({"name": name, "dtype": d.dtype, "shape": list(box.shape),
                    "offsets": list(box.offsets), "sizes": list(d.shape)})
    return {"rank": int(rank), "boxes": out}


def build_plan(layouts: Sequence[Dict[str, Any]], nonce: bytes = b"",
               generation: int = 0) -> Dict[str, Any]:
    """The plan every rank computes from all the ranks' layouts (C: the
    checks, the replicate rule and the digest). InvalidArgument naming the
    rank and the tensor when they disagree, overlap or leave bytes out."""
    req: Dict[str, Any] = {"ranks": list(layouts), "world_size": len(layouts)}
    if nonce:
        req["nonce"] = base64.b64encode(nonce).decode()
    if generation:
        req["generation"] = str(int(generation))
    p = c_void_p()
    _lib.check(_lib.lib().wt_bindings_shard_plan(json.dumps(req).encode(),
                                                 byref(p)))
    plan: Dict[str, Any] = json.loads(_lib.take_string(p))
    return plan


class TorchGroup:
    """The trainer's torch.distributed process group as the ranks' channel
    (layouts exchanged once, at init; its timeout bounds that exchange)."""

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist
        self._dist, self._group = dist, group

    def rank(self) -> int:
        rank: int = self._dist.get_rank(self._group)
        return rank

    def size(self) -> int:
        size: int = self._dist.get_world_size(self._group)
        return size

    def allgather(self, obj: Any) -> List[Any]:
        out: List[Any] = [None] * self.size()
        self._dist.all_gather_object(out, obj, group=self._group)
        return out


class _BoxSource:
    """This rank's boxes of the plan, in the plan's order, read anew from
    `tensors` every round (a state_dict method, or a dict)."""

    def __init__(self, tensors: Any, mine: List[Dict[str, Any]]) -> None:
        self._tensors = tensors
        self._mine = mine
        self._metas = [ParamMeta(b["name"], b["dtype"],
                                 tuple(int(x) for x in b.get("sizes", [])))
                       for b in mine]

    def metadata(self) -> List[ParamMeta]:
        return self._metas

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        held = _boxes(self._tensors)
        for b in self._mine:
            box = held.get(b["name"])
            if box is None:
                raise ValueError(f"tensor '{b['name']}': this rank's plan "
                                 "sends a box of it, and its tensors no "
                                 "longer hold it (a new layout needs a new "
                                 "ShardedTrainer)")
            if list(box.offsets) != [int(x) for x in b.get("offsets", [])]:
                raise ValueError(f"tensor '{b['name']}': its box moved to "
                                 f"offsets {list(box.offsets)}; the plan's "
                                 f"are {b.get('offsets')} (a new layout "
                                 "needs a new ShardedTrainer)")
            yield b["name"], _local(box)


class ShardedTrainer:
    """One trainer rank of many: its boxes to every server of `client`,
    one version for all ranks (module docstring). `tensors` is what this
    rank holds: a dict (or a callable returning one, e.g. a module's
    `state_dict`) of DTensors, Boxes or whole arrays (replicated). `rank`
    defaults to the group's; `group` to TorchGroup()."""

    def __init__(self, backend: str, client: Any, tensors: Any, *,
                 group: Optional[RankGroup] = None, rank: int | None = None,
                 config: Any = None,
                 init_info: Optional[Dict[str, Any]] = None) -> None:
        group = group if group is not None else TorchGroup()
        self.rank = group.rank() if rank is None else int(rank)
        mine = layout(tensors, self.rank)
        # Each init is a new plan: the nonce of the group's first rank, and
        # its clock as the plan's generation (a server refuses an older
        # plan: a stale rank's init cannot replace this one).
        gathered = group.allgather({"layout": mine,
                                    "generation": time.time_ns(),
                                    "nonce": base64.b64encode(
                                        os.urandom(16)).decode(),
                                    "secret": base64.b64encode(
                                        os.urandom(32)).decode()})
        nonce = base64.b64decode(gathered[0]["nonce"])
        self.plan = build_plan([g["layout"] for g in gathered], nonce,
                               gathered[0]["generation"])
        self.world_size = len(gathered)
        self.digest = self.plan["digest"]
        boxes = self.plan["ranks"][self.rank].get("boxes", [])
        self.source = _BoxSource(tensors, boxes)
        info = dict(init_info or {})
        info["shard_plan"] = dict(self.plan, rank=self.rank)
        if backend == "ucx":
            # Every rank's connections prove the one init's secret (the
            # first rank's, exchanged through the group, never the servers).
            ucx = dict(info.get("ucx") or {})
            ucx.setdefault("auth_secret", gathered[0]["secret"])
            info["ucx"] = ucx
        # The client's deadlines apply: its data deadline bounds a wait for
        # the other ranks (wt.Client(servers, data_timeout=...)).
        self.engine = WeightTransferTrainerFactory.trainer_init(
            backend, config, info, client=client, source=self.source)

    def send_weights(self, weight_version: str | None = None) -> str:
        """This rank's part of one round: join it, push this rank's boxes,
        finish; returns once every rank finished and the version committed
        on every server (or raises the round's failure)."""
        version: str = self.engine.send_weights(weight_version)
        return version

    def shutdown(self) -> None:
        self.engine.shutdown()

    def __enter__(self) -> "ShardedTrainer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
