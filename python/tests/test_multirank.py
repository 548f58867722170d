"""Many trainer ranks, one version (docs/multirank.md), from numpy boxes:
ranks as threads of this process, each with its own Client, exchanging
layouts through a stand-in group (the torch process-group runs are in
test_torch_multirank.py). The servers are real wt-servers."""

from __future__ import annotations

import json
import struct
import threading
import time

import numpy as np
import pytest

import wt_transfer as wt
from conftest import digests, has_backend, model_tensors
from test_foreign import stubs  # noqa: F401 - the grpcio stubs fixture

W = 4


class Group:
    """W ranks' allgather over a barrier (what TorchGroup does over gloo)."""

    def __init__(self, n=W, timeout=30):
        self.n, self.slots = n, [None] * n
        self.barrier = threading.Barrier(n, timeout=timeout)

    def member(self, r):
        g = self

        class Member:
            def rank(self):
                return r

            def size(self):
                return g.n

            def allgather(self, obj):
                g.slots[r] = obj
                g.barrier.wait()
                out = list(g.slots)
                g.barrier.wait()
                return out
        return Member()


def arr(t):
    return t.array if isinstance(t, wt.view) else t


def rows(t, lo, hi):
    """Rows [lo, hi) of t (a numpy array or a wt.view), contiguous."""
    a = t.array if isinstance(t, wt.view) else t
    loc = np.ascontiguousarray(a[lo:hi])
    return wt.view(loc, t.dtype) if isinstance(t, wt.view) else loc


def shard(full: dict, r: int, n: int = W) -> dict:
    """Rank r's boxes: dimension 0 split as FSDP2 does (ceil, the last ones
    short or empty); tensors of fewer than n rows whole (replicated)."""
    out = {}
    for name, t in full.items():
        a = t.array if isinstance(t, wt.view) else t
        if a.ndim == 0 or a.shape[0] < n:
            out[name] = t
            continue
        step = -(-a.shape[0] // n)
        lo, hi = min(r * step, a.shape[0]), min((r + 1) * step, a.shape[0])
        out[name] = wt.Box(rows(t, lo, hi), a.shape, (lo,) + (0,) * (a.ndim - 1))
    return out


def run_ranks(fn, n=W):
    """fn(r) on n threads; their exceptions (None for none) by rank."""
    errs = [None] * n

    def body(r):
        try:
            fn(r)
        except BaseException as e:  # noqa: BLE001 - reported per rank
            errs[r] = e
    ts = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts), "a rank hung"
    return errs


@pytest.fixture
def two_servers(start_server):
    return [start_server("--model", "synthetic:tiny", "--no-auth") for _ in range(2)]


def params_of(addr):
    with wt.Client(addr) as c:
        return c.parameters()


@pytest.mark.parametrize("backend", ["grpc", "ucx"])
def test_four_ranks_rounds_land_every_byte_once(two_servers, backend):
    addrs = [s.addr for s in two_servers]
    with wt.Client(addrs[0]) as c:
        if not has_backend(c, backend):
            pytest.skip(f"backend '{backend}' is not in this build")
    params = params_of(addrs[0])
    state = {"full": model_tensors(params, 1)}
    g, step = Group(), threading.Barrier(W, timeout=30)
    digests_seen = []

    def rank(r):
        with wt.Client(addrs, data_timeout=30) as client:
            tr = wt.ShardedTrainer(backend, client,
                                   lambda: shard(state["full"], r),
                                   group=g.member(r))
            assert tr.world_size == W
            for i in range(5):
                if r == 0:
                    state["full"] = model_tensors(params, 100 + i)
                step.wait()
                tr.send_weights(f"step-{i}")
                step.wait()
                if r == 0:
                    for a in addrs:
                        with wt.Client(a) as c:
                            assert c.version().version == f"step-{i}"
                            digests_seen.append(c.checksums())
                step.wait()
            tr.shutdown()
    errs = run_ranks(rank)
    assert errs == [None] * W, errs
    want = digests(state["full"])
    assert digests_seen[-1] == want and digests_seen[-2] == want
    assert digests_seen[0] != want
    with wt.Client(addrs[0]) as c:
        info = c.server_info()
        assert info["plan_world_size"] == W and info["plan_joined"] == W
        assert len(info["plan_digest"]) == 64


def write_scalar_model(path):
    """A safetensors file: 'w' [8, 4] f32 and 's', a 0-d f32 (a scalar)."""
    header = {"s": {"dtype": "F32", "shape": [], "data_offsets": [128, 132]},
              "w": {"dtype": "F32", "shape": [8, 4], "data_offsets": [0, 128]}}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(132))


def test_a_scalar_in_the_plan_commits(start_server, tmp_path):
    """A 0-d tensor (a scale, a step counter) in a plan: its shape, offsets
    and sizes are empty, which protobuf-c hands over as NULL arrays. Both
    ranks hold it (a replica), one sends it, and it commits beside the
    sharded one. The server once compared those arrays with memcmp, whose
    NULL arguments are undefined behaviour even for 0 bytes (issue 47: an
    ASan+UBSan server aborted at the init): scripts/test.sh --sanitize runs
    this test against that server."""
    write_scalar_model(tmp_path / "m.safetensors")
    srvs = [start_server("--model", str(tmp_path / "m.safetensors"), "--no-auth")
            for _ in range(2)]
    addrs = [s.addr for s in srvs]
    rng = np.random.default_rng(5)
    full = {"w": rng.standard_normal((8, 4)).astype(np.float32),
            "s": np.array(3.5, dtype=np.float32)}
    g = Group(2)

    def rank(r):
        with wt.Client(addrs, data_timeout=30) as client:
            tr = wt.ShardedTrainer("grpc", client, lambda: shard(full, r, 2),
                                   group=g.member(r))
            tr.send_weights("scalar-1")
            tr.shutdown()
    assert run_ranks(rank, 2) == [None, None]
    for a in addrs:
        with wt.Client(a) as c:
            assert c.version().version == "scalar-1"
            assert c.checksums() == digests(full)


def test_plan_is_the_same_on_every_rank_and_spreads_replicas(two_servers):
    params = params_of(two_servers[0].addr)
    full = model_tensors(params, 3)
    layouts = [wt.multirank.layout(shard(full, r), r) for r in range(W)]
    plan = wt.build_plan(layouts, b"nonce")
    again = wt.build_plan(list(reversed(layouts)), b"nonce")
    assert plan["digest"] == again["digest"]
    assert wt.build_plan(layouts, b"other")["digest"] != plan["digest"]
    # Every tensor's bytes are sent once: replicated ones by one holder,
    # spread over the ranks by the rule (tensor index % holders).
    names = sorted(full)
    sent = {}
    for r, rk in enumerate(plan["ranks"]):
        for b in rk.get("boxes", []):
            sent.setdefault(b["name"], []).append(r)
    for i, name in enumerate(names):
        a = arr(full[name])
        if a.ndim == 0 or a.shape[0] < W:
            assert sent[name] == [i % W], name
        else:
            assert len(sent[name]) >= 1


def refused(layouts_by_rank, needle, servers):
    """Every rank's ShardedTrainer refuses at init, naming the problem."""
    g = Group()

    def rank(r):
        tensors, claimed = layouts_by_rank(r)
        with wt.Client([s.addr for s in servers]) as client:
            wt.ShardedTrainer("grpc", client, tensors, group=g.member(r),
                              rank=claimed)
    errs = run_ranks(rank)
    for e in errs:
        assert isinstance(e, wt.InvalidArgument), repr(e)
        assert needle in str(e), str(e)
    # Nothing reached the servers: no plan, no version.
    for s in servers:
        with wt.Client(s.addr) as c:
            assert "plan_digest" not in c.server_info()
            assert c.version().version == ""


def test_refusals_at_init_name_rank_and_tensor(two_servers):
    params = params_of(two_servers[0].addr)
    full = model_tensors(params, 5)
    big = next(n for n in sorted(full)
               if arr(full[n]).ndim == 2 and arr(full[n]).shape[0] >= W)
    rows_n = arr(full[big]).shape[0]

    def overlap(r):
        t = shard(full, r)
        if r == 1:  # rank 1 claims one row of rank 0's too
            b = t[big]
            lo = b.offsets[0] - 1
            t[big] = wt.Box(rows(full[big], lo, lo + -(-rows_n // W) + 1),
                            b.shape, (lo,) + b.offsets[1:])
        return t, None
    refused(overlap, f"tensor '{big}': rank 1's box", two_servers)

    def missing(r):
        t = shard(full, r)
        if r == 0:  # rank 0 holds nothing of it: its rows are nobody's
            b = t[big]
            t[big] = wt.Box(rows(full[big], 0, 0), b.shape, b.offsets)
        return t, None
    refused(missing, f"tensor '{big}': ", two_servers)

    def other_layout(r):
        t = shard(full, r)
        if r == 2:  # rank 2 was built from another model: one more row
            b = t[big]
            t[big] = wt.Box(b.local, (rows_n + 4,) + b.shape[1:], b.offsets)
        return t, None
    refused(other_layout, f"rank 2's layout differs from rank 0's: tensor '{big}'",
            two_servers)

    def same_rank(r):
        return shard(full, r), (1 if r == 2 else r)
    refused(same_rank, "rank 1 is claimed by two layouts", two_servers)


def test_a_rank_that_never_comes_fails_the_round_within_the_deadline(two_servers):
    addrs = [s.addr for s in two_servers]
    params = params_of(addrs[0])
    full = model_tensors(params, 7)
    g, ready = Group(), threading.Barrier(W, timeout=30)
    times = [None] * W

    def rank(r):
        with wt.Client(addrs) as client:
            # The init's data deadline: how long the servers wait for a rank.
            tr = wt.ShardedTrainer("grpc", client, lambda: shard(full, r),
                                   group=g.member(r),
                                   init_info={"timeout_ms": 3000})
            tr.send_weights("v1")  # every rank
            ready.wait()
            if r == 3:
                return  # rank 3 never starts round 2
            t0 = time.monotonic()
            try:
                tr.send_weights("v2")
            finally:
                times[r] = time.monotonic() - t0
    errs = run_ranks(rank)
    assert errs[3] is None
    # Every surviving rank: one error class, naming the rank that is missing.
    for r in range(3):
        assert isinstance(errs[r], wt.Aborted), repr(errs[r])
        assert "rank(s) 3 did not start this round" in str(errs[r]), errs[r]
        assert times[r] < 3 + 5, times
    for a in addrs:
        with wt.Client(a) as c:
            assert c.version().version == "v1"
            assert c.checksums() == digests(full)


def plan_and_rank1(full, nonce):
    """The plan of W ranks sharding `full`, and rank 1's boxes to send."""
    plan = wt.build_plan([wt.multirank.layout(shard(full, r), r)
                          for r in range(W)], nonce)
    mine = {b["name"] for b in plan["ranks"][1].get("boxes", [])}
    return plan, {n: t.local if isinstance(t, wt.Box) else t
                  for n, t in shard(full, 1).items() if n in mine}


def test_a_second_process_claiming_a_joined_rank_is_refused(two_servers):
    addr = two_servers[0].addr
    full = model_tensors(params_of(addr), 9)
    plan, held = plan_and_rank1(full, b"n1")
    src = wt.ArraySource(held)
    info = {"shard_plan": dict(plan, rank=1)}
    with wt.Client(addr) as a, wt.Client(addr) as b:
        e1 = wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, info, client=a, source=src)
        with pytest.raises(wt.AlreadyExists, match="rank 1 already joined this init"):
            wt.WeightTransferTrainerFactory.trainer_init(
                "grpc", None, info, client=b, source=src)
        # A plain start (no plan) is refused while the plan is the server's.
        with pytest.raises(wt.FailedPrecondition, match="shard plan of 4 trainer ranks"):
            b.start_weight_update()
        e1.shutdown()


def test_a_new_init_invalidates_the_old_plan(two_servers):
    addrs = [two_servers[0].addr]
    params = params_of(addrs[0])
    full = model_tensors(params, 11)
    g1, g2 = Group(), Group()
    trainers = [None] * W

    def first(r):
        client = wt.Client(addrs, data_timeout=5)
        trainers[r] = (client, wt.ShardedTrainer("grpc", client,
                                                 lambda: shard(full, r),
                                                 group=g1.member(r)))
        trainers[r][1].send_weights("a")
    assert run_ranks(first) == [None] * W

    def second(r):  # the ranks restarted: a new init, a new plan
        with wt.Client(addrs, data_timeout=5) as client:
            wt.ShardedTrainer("grpc", client, lambda: shard(full, r),
                              group=g2.member(r)).send_weights("b")
    assert run_ranks(second) == [None] * W
    # The old trainers' plan is gone: refused by digest, never reused.
    with pytest.raises(wt.FailedPrecondition, match="is not this server's plan"):
        trainers[0][1].send_weights("c")
    for client, tr in trainers:
        tr.shutdown()
        client.close()
    with wt.Client(addrs[0]) as c:
        assert c.version().version == "b"


def test_plans_and_claims_a_server_refuses(two_servers):
    """What a server is sent by a client that lies: a plan whose digest is
    not its own, a plan of another model, too many ranks, a rank's push of
    boxes that are not its own, a start naming a plan the server lacks."""
    addr = two_servers[0].addr
    full = model_tensors(params_of(addr), 13)
    plan, held = plan_and_rank1(full, b"n2")

    def init(client, p, tensors=held):
        return wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, {"shard_plan": p}, client=client,
            source=wt.ArraySource(tensors))

    with wt.Client(addr) as c:
        with pytest.raises(wt.InvalidArgument, match="is not the plan's"):
            init(c, dict(plan, rank=1, digest="0" * 64))
        other = wt.build_plan([{"rank": 0, "boxes": [{
            "name": "not.in.the.model", "dtype": "float32", "shape": [4],
            "offsets": [0], "sizes": [4]}]}])
        with pytest.raises(wt.WtError, match="'not.in.the.model' is not in the model"):
            init(c, dict(other, rank=0), {"not.in.the.model": np.zeros(4, np.float32)})
        huge = {"world_size": 5000, "ranks": [{"rank": i} for i in range(5000)],
                "digest": "0" * 64}
        with pytest.raises(wt.InvalidArgument, match="5000 ranks; at most 4096"):
            init(c, huge)
        assert "plan_digest" not in c.server_info()
    # Rank 1 joins, then pushes boxes of the wrong shape: refused by name,
    # nothing committed.
    wrong = {n: (np.zeros((1,) + arr(t).shape[1:], arr(t).dtype)
                 if arr(t).ndim else t) for n, t in held.items()}
    with wt.Client(addr) as c:
        e = init(c, dict(plan, rank=1), wrong)
        with pytest.raises(wt.InvalidArgument, match="rank 1 sends '"):
            e.send_weights("bad")
        e.shutdown()
        assert c.version().version == ""
    # A rank whose server was re-initialized without a plan: its start,
    # naming the plan, is refused.
    plan2, _ = plan_and_rank1(full, b"n3")
    with wt.Client(addr) as c, wt.Client(addr) as plain:
        e = init(c, dict(plan2, rank=1))
        wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, None, client=plain,
            source=wt.ArraySource(full)).send_weights("plain")
        with pytest.raises(wt.FailedPrecondition, match="this server's init has none"):
            e.send_weights("stale")
        e.shutdown()
        assert c.version().version == "plain"


def test_strangers_beside_a_plan_round_change_nothing(two_servers, stubs):
    """While 4 ranks run 5 rounds, strangers (grpcio, the no-auth server's
    anyone) send garbage bytes, starts and finishes naming made-up plans,
    ranks and rounds, pushes claiming ranks, a plan with a forged digest,
    and a push stream that stays silent: every one is refused, every round
    commits, and the servers hold the trainers' bytes."""
    import os as _os
    import grpc
    pb2, pb2_grpc = stubs
    addr = two_servers[0].addr
    full = model_tensors(params_of(addr), 17)
    g, stop = Group(), threading.Event()
    refused, accepted = {}, []

    def note(e):
        refused[e.code()] = refused.get(e.code(), 0) + 1

    def flood():
        ch = grpc.insecure_channel(addr)
        stub = pb2_grpc.WeightTransferStub(ch)
        raw_push = ch.stream_unary("/wt.v1.WeightTransfer/PushWeights")
        raw_init = ch.unary_unary("/wt.v1.WeightTransfer/InitWeightTransferEngine")
        forged = pb2.ShardPlan(world_size=1, digest="0" * 64, ranks=[
            pb2.RankBoxes(rank=0, boxes=[pb2.TensorBox(
                name="x", dtype="float32", shape=[4], offsets=[0], sizes=[4])])])
        while not stop.is_set():
            rank, rid = int.from_bytes(_os.urandom(1), "little") % 8, \
                int.from_bytes(_os.urandom(8), "little") or 1
            calls = [
                lambda: stub.StartWeightUpdate(pb2.StartWeightUpdateRequest(
                    trainer_rank=rank, plan_digest=_os.urandom(32).hex()), timeout=5),
                lambda: stub.FinishWeightUpdate(pb2.FinishWeightUpdateRequest(
                    weight_version="evil", round_id=rid, trainer_rank=rank), timeout=5),
                lambda: stub.PushWeights(iter([pb2.PushWeightsChunk(
                    header=pb2.PushWeightsHeader(round_id=rid, trainer_rank=rank,
                                                 update_info=pb2.WeightTransferUpdateInfo(
                                                     names=["x"], dtype_names=["float32"],
                                                     shapes=[pb2.Shape(dims=[4])],
                                                     packed=True))),
                    pb2.PushWeightsChunk(chunk=pb2.BucketChunk(
                        bucket=0, offset=0, data=b"\xee" * 16))]), timeout=5),
                lambda: raw_push(iter([_os.urandom(64)]), timeout=5),
                lambda: raw_init(_os.urandom(48), timeout=5),
                lambda: stub.InitWeightTransferEngine(
                    pb2.InitWeightTransferEngineRequest(init_info=pb2.WeightTransferInitInfo(
                        backend="grpc", shard_plan=forged)), timeout=5),
            ]
            for c in calls:
                try:
                    c()
                    accepted.append(c)
                except grpc.RpcError as e:
                    note(e)
        ch.close()

    def silent():  # a push stream that never sends its header
        ch = grpc.insecure_channel(addr)
        push = ch.stream_unary("/wt.v1.WeightTransfer/PushWeights")

        def nothing():
            stop.wait()
            return
            yield
        try:
            push(nothing(), timeout=60)
        except grpc.RpcError as e:
            note(e)
        ch.close()

    def rank(r):
        with wt.Client([addr], data_timeout=30) as client:
            tr = wt.ShardedTrainer("grpc", client, lambda: shard(full, r),
                                   group=g.member(r))
            for i in range(5):
                tr.send_weights(f"v{i}")
            tr.shutdown()

    strangers = [threading.Thread(target=flood) for _ in range(3)]
    strangers.append(threading.Thread(target=silent))
    for t in strangers:
        t.start()
    try:
        errs = run_ranks(rank)
    finally:
        stop.set()
        for t in strangers:
            t.join(30)
    assert errs == [None] * W, errs
    assert not accepted, accepted
    assert sum(refused.values()) > 20, refused
    with wt.Client(addr) as c:
        assert c.version().version == "v4"
        assert c.checksums() == digests(full)
        info = c.server_info()
        assert info["plan_joined"] == W and info["plan_world_size"] == W
    print(f"\n  strangers refused: {dict((k.name, v) for k, v in refused.items())}")


def await_parked(addr, want, seconds=30):
    """Until the server has `want` ranks' calls parked (GetServerInfo)."""
    end = time.monotonic() + seconds
    while True:
        with wt.Client(addr) as c:
            got = c.server_info().get("plan_parked", 0)
        if got == want:
            return
        assert time.monotonic() < end, f"parked {got}, want {want}"
        time.sleep(0.02)


def test_a_stale_ranks_init_replaces_nothing(two_servers):
    """Issue 45, item 6: the last init no longer wins. A rank of an older
    plan (an older generation: rank 0's clock at its init) that inits
    during a live round is refused, naming both generations; the round
    goes on and commits. A rank silent for a round fails that round only
    (the others: Aborted, naming it); the plan stays, and the next round
    commits without a new init."""
    addr = two_servers[0].addr
    params = params_of(addr)
    full = model_tensors(params, 21)
    g = Group()
    go, step = threading.Event(), threading.Barrier(W, timeout=60)
    trainers = [None] * W
    errs2 = [None] * W

    def rank(r):
        with wt.Client([addr], data_timeout=30) as client:
            tr = wt.ShardedTrainer("grpc", client, lambda: shard(full, r),
                                   group=g.member(r),
                                   init_info={"timeout_ms": 2000})
            trainers[r] = tr
            if r == 3:
                assert go.wait(30)
            tr.send_weights("v1")
            step.wait()
            if r != 3:  # rank 3 is silent this round
                errs2[r] = capture(tr.send_weights, "v2")
            step.wait()
            tr.send_weights("v3")
    errs = [None] * W
    ts = [threading.Thread(target=lambda r=r: errs.__setitem__(r, capture(rank, r)))
          for r in range(W)]
    for t in ts:
        t.start()
    await_parked(addr, 3)  # ranks 0-2 wait for rank 3
    live = trainers[0].plan
    stale = wt.build_plan([wt.multirank.layout(shard(full, r), r)
                           for r in range(W)], b"old",
                          int(live["generation"]) - 1)
    with wt.Client(addr) as c:
        with pytest.raises(wt.FailedPrecondition,
                           match=r"is not newer than this server's plan"):
            wt.WeightTransferTrainerFactory.trainer_init(
                "grpc", None, {"shard_plan": dict(stale, rank=1)}, client=c,
                source=wt.ArraySource({}))
        assert c.server_info()["plan_digest"] == live["digest"]
    go.set()
    for t in ts:
        t.join(90)
    assert not any(t.is_alive() for t in ts), "a rank hung"
    assert errs == [None] * W, errs
    for r in range(3):
        assert isinstance(errs2[r], wt.Aborted), repr(errs2[r])
        assert "rank(s) 3 did not start this round" in str(errs2[r])
    with wt.Client(addr) as c:
        assert c.version().version == "v3"
        assert c.checksums() == digests(full)
        assert c.server_info()["plan_digest"] == live["digest"]


def capture(fn, *args):
    try:
        fn(*args)
    except BaseException as e:  # noqa: BLE001 - reported per rank
        return e
    return None
