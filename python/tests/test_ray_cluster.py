"""wt on a Ray cluster (docs/ray.md), with a real multi-node Ray cluster on
this machine (ray.cluster_utils.Cluster: a head and two more nodes, every
socket on 127.0.0.1): servers started by wt_transfer.ray on the two nodes,
a trainer actor pinned to the head pushing rounds over grpc and ucx, a
server killed mid-round and brought back by its actor, and no wt-server
left once the handle is closed."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import numpy as np
import pytest

# Before Ray is imported (it reads it then): with node_ip_address
# 127.0.0.1 below, every socket of Ray stays on loopback (docs/ray.md).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

try:
    import ray
    HAVE_RAY = True
except ImportError:
    if os.environ.get("WT_REQUIRE_RAY") == "1":
        raise
    HAVE_RAY = False

pytestmark = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed here "
                                "(pip install wt-transfer[ray]; scripts/test.sh "
                                "installs it)")

from conftest import _server_bin, digests  # noqa: E402

MODEL = ["--model", "synthetic:small"]


@pytest.fixture(scope="module")
def cluster():
    import shutil
    import tempfile
    from ray.cluster_utils import Cluster
    # short: Ray's Unix sockets live under it (108 bytes a path at most)
    tmp = tempfile.mkdtemp(prefix="wtray", dir="/tmp")
    os.environ["RAY_TMPDIR"] = tmp
    # Ray's workers, started by its raylets from this process's
    # environment, import the trainer's helpers from here
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    common = dict(node_ip_address="127.0.0.1", object_store_memory=200 << 20)
    c = Cluster(initialize_head=True, connect=True, head_node_args=dict(
        num_cpus=2, include_dashboard=False, resources={"head": 1}, **common))
    nodes = [c.add_node(num_cpus=1, resources={f"node{i}": 1}, **common)
             for i in (1, 2)]
    c.wait_for_nodes()
    try:
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def _listening_beyond_loopback() -> list:
    """Ray's and wt's listening sockets whose address is not loopback."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    bad = []
    for line in out.splitlines():
        cols = line.split()
        if len(cols) < 6 or not any(p in cols[-1] for p in (
                "raylet", "gcs_server", "wt-server", "python")):
            continue
        local = cols[3]
        if not local.startswith(("127.", "[::ffff:127.", "[::1]")):
            bad.append(line)
    return bad


@ray.remote(num_cpus=0) if HAVE_RAY else (lambda c: c)
class Trainer:
    """A trainer on its node: a client over the servers (info.client()), an
    engine, new tensors each round; returns its bytes' digests."""

    def __init__(self, info, backend):
        import wt_transfer as wt
        from conftest import model_tensors
        self.info = info
        self.client = info.client(data_timeout=30)
        self.params = self.client.parameters()
        self.tensors = model_tensors(self.params, 0)
        self.backend = backend
        self._engine(wt)

    def _engine(self, wt):
        config = {"transports": "tcp"} if self.backend == "ucx" else None
        self.engine = wt.WeightTransferTrainerFactory.trainer_init(
            self.backend, config, {"timeout_ms": 5000}, client=self.client,
            source=wt.ArraySource(self.tensors))

    def reinit(self):
        """A new init, on a new client: its channels connect afresh to a
        server that came back (an old channel may be in gRPC's reconnect
        backoff)."""
        import wt_transfer as wt
        self.engine.shutdown()
        self.client.close()
        self.client = self.info.client(data_timeout=30)
        self._engine(wt)

    def round(self, step):
        import wt_transfer as wt
        from conftest import model_tensors
        for name, t in model_tensors(self.params, step + 1).items():
            dst = self.tensors[name]
            np.copyto(dst.array if isinstance(dst, wt.view) else dst,
                      t.array if isinstance(t, wt.view) else t)
        t0 = time.monotonic()
        try:
            self.engine.send_weights(f"step-{step}")
        except Exception as e:  # noqa: BLE001  (returned to the driver)
            from wt_transfer import errors
            named = self.info.name_nodes(e) if isinstance(e, errors.WtError) else e
            return {"error": f"{type(named).__name__}: {named}",
                    "seconds": time.monotonic() - t0}
        return {"digests": digests(self.tensors), "seconds": time.monotonic() - t0}


def test_ray_servers_rounds_and_cleanup(cluster):
    """Servers on node1 and node2, a trainer actor on the head: 10 rounds
    through grpc and 10 through ucx; after each, both servers' SHA-256 of
    every tensor equal the trainer's; nothing of Ray or wt listens beyond
    loopback; closing the handle leaves no wt-server process."""
    from wt_transfer.ray import start_servers
    c, nodes = cluster
    servers = start_servers([n.node_id for n in nodes], args=MODEL,
                            server_bin=_server_bin())
    try:
        assert servers.nodes == [n.node_id for n in nodes]
        pids = [s["pid"] for s in servers.states()]
        assert all(pids)
        assert not _listening_beyond_loopback(), _listening_beyond_loopback()
        with servers.client() as check:
            for backend in ("grpc", "ucx"):
                tr = Trainer.options(resources={"head": 1}).remote(servers.info, backend)
                for step in range(10):
                    r = ray.get(tr.round.remote(step))
                    assert "error" not in r, r
                    for k in range(2):
                        assert check.checksums(server=k) == r["digests"], (backend, step, k)
                ray.kill(tr)
    finally:
        servers.close()
    for pid in pids:  # every server process is gone
        assert not os.path.exists(f"/proc/{pid}") or \
            open(f"/proc/{pid}/stat").read().split()[2] == "Z", pid


def fails_mid_rounds(servers, fault, node_id):
    """A trainer actor on the head commits round 0 over `servers`, starts
    rounds 1 to 29 and calls `fault()` while they run: the first round that
    fails names the second server's address and Ray node `node_id`, within
    the data deadline (5 s, plus 5 s of slack). Returns the trainer and the
    second server's state before the fault."""
    tr = Trainer.options(resources={"head": 1}).remote(servers.info, "grpc")
    assert "error" not in ray.get(tr.round.remote(0))
    victim = servers.states()[1]
    rounds = [tr.round.remote(step) for step in range(1, 30)]
    time.sleep(0.05)
    fault(victim)
    results = ray.get(rounds, timeout=300)
    failed = [r for r in results if "error" in r]
    assert failed, "no round failed"
    first = failed[0]
    assert victim["address"] in first["error"], first
    assert f"Ray node {node_id}" in first["error"], first
    assert first["seconds"] < 5 + 5, first
    return tr, victim


def test_ray_server_killed_mid_round_comes_back(cluster):
    """node2's wt-server SIGKILLed while rounds run: the round in progress
    fails within the data deadline (5 s) with an error naming node2's
    server and Ray node; node1's server holds a whole version (the bytes of
    the step it names); the actor brings
    node2's server back on the same address; after a new init the next
    round commits on both."""
    from wt_transfer.ray import start_servers
    c, nodes = cluster
    servers = start_servers([n.node_id for n in nodes], args=MODEL,
                            server_bin=_server_bin())
    try:
        tr, victim = fails_mid_rounds(
            servers, lambda v: os.kill(v["pid"], signal.SIGKILL),
            nodes[1].node_id)
        back = ray.get(servers.actors[1].wait_serving.remote(1, 30))
        assert back["address"] == victim["address"] and back["pid"] != victim["pid"]
        with servers.client() as check:
            # node1's server holds a whole version: the bytes of the step it
            # names (a round that failed at node2 is aborted on node1, or, if
            # it failed only at node2's commit, committed whole on node1)
            from conftest import model_tensors
            held = check.version(server=0).version
            step = int(held.split("-")[1])
            assert check.checksums(server=0) == digests(
                model_tensors(check.parameters(server=0), step + 1)), held
            ray.get(tr.reinit.remote())
            r = ray.get(tr.round.remote(100))
            assert "error" not in r, r
            for k in range(2):
                assert check.checksums(server=k) == r["digests"]
                assert check.version(server=k).version == "step-100"
    finally:
        servers.close()


def test_ray_node_removed_mid_round(cluster):
    """A third node joins, gets a server, and is removed from the cluster
    while rounds run: the round in progress fails within the data deadline
    naming that node's server and Ray node; node1's server holds a whole
    version; the removed node's actor is gone (no restart), and so is its
    wt-server; a new init over the servers left commits."""
    from wt_transfer.ray import start_servers
    c, nodes = cluster
    extra = c.add_node(num_cpus=1, resources={"node3": 1},
                       node_ip_address="127.0.0.1", object_store_memory=200 << 20)
    c.wait_for_nodes()
    servers = start_servers([nodes[0].node_id, extra.node_id], args=MODEL,
                            server_bin=_server_bin())
    try:
        tr, victim = fails_mid_rounds(
            servers, lambda v: c.remove_node(extra), extra.node_id)
        states = servers.states()
        assert states[0] is not None and states[1] is None
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{victim['pid']}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{victim['pid']}"), "its wt-server lives on"
        from conftest import model_tensors
        from wt_transfer.ray import ServersInfo
        left = ServersInfo(servers.addresses[:1], servers.nodes[:1], servers.info.token)
        with left.client() as check:
            held = check.version().version
            assert check.checksums() == digests(model_tensors(
                check.parameters(), int(held.split("-")[1]) + 1)), held
        ray.kill(tr)  # the head's one "head" resource, for the next trainer
        t2 = Trainer.options(resources={"head": 1}).remote(left, "grpc")
        r = ray.get(t2.round.remote(200), timeout=120)
        assert "error" not in r, r
    finally:
        servers.close()


def _field(request, name):
    """A request's field: vLLM's request objects (attributes, as vLLM's
    own Ray client sends them) or dicts."""
    return getattr(request, name) if hasattr(request, name) else request[name]


@ray.remote(num_cpus=0) if HAVE_RAY else (lambda c: c)
class EngineStandIn:
    """A STAND-IN for a vLLM engine as a Ray actor (vLLM's AsyncLLM
    weight-transfer methods, as RayVLLMWeightSyncClient calls them): it
    loads each version from its node's wt export through the same all-or-
    nothing loader the `wt` backend's worker uses (_vllm_load.load), into
    a dict instead of a model. Not vLLM: its generation is not tested here
    (test_vllm_*.py serve the real one over HTTP)."""

    def __init__(self):
        from wt_transfer import _vllm_load
        self.served = _vllm_load.Served()
        self.weights = {}
        self.export = None
        self.version = None
        self.paused = False
        self.calls = []

    def _reload(self, pairs):
        if pairs is None:  # restore: what it served stays
            return
        for name, a in pairs:
            self.weights[name] = np.array(a, copy=True)

    def init_weight_transfer_engine(self, request):
        self.export = _field(request, "init_info")["export"]
        self.calls.append("init")

    def start_weight_update(self):
        self.calls.append("start")

    def update_weights(self, request):
        from wt_transfer import _vllm_load
        _vllm_load.load(self.served, self._reload, None, self.export,
                        _field(request, "update_info")["version"], torchy=False)
        self.calls.append("update")

    def finish_weight_update(self):
        self.calls.append("finish")

    def update_weight_version(self, version):
        self.version = version

    def pause_generation(self, mode="wait"):
        self.paused = True

    def resume_generation(self):
        self.paused = False

    def reset_prefix_cache(self):
        self.calls.append("reset")

    def state(self):
        import hashlib
        return {"version": self.version, "paused": self.paused, "digests": {
            n: hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
            for n, a in self.weights.items()}}


def test_ray_engines_load_each_version(cluster):
    """Engine stand-ins as Ray actors on node1 and node2, each reading its
    node's wt-server export: after every round the trainer has each load
    the committed version through Ray (RayEngines, load_on_engines), and
    each holds exactly the trainer's bytes under that version."""
    from wt_transfer.ray import RayEngines, load_on_engines, start_servers
    c, nodes = cluster
    sock_dir = __import__("tempfile").mkdtemp(prefix="wtx", dir="/tmp")
    os.chmod(sock_dir, 0o700)
    export = os.path.join(sock_dir, "e.sock")
    # one machine: the two servers' exports need two paths
    servers = [start_servers([n.node_id], args=MODEL + [
        "--memory", "shared", "--export", f"{export}.{i}"], server_bin=_server_bin())
        for i, n in enumerate(nodes)]
    try:
        assert [s.info.exports for s in servers] == [[f"{export}.0"], [f"{export}.1"]]
        engines = [EngineStandIn.options(resources={f"node{i + 1}": 1}).remote()
                   for i in range(2)]
        for i, e in enumerate(engines):
            ray.get(e.init_weight_transfer_engine.remote(
                {"init_info": {"export": f"{export}.{i}"}}))
        ray_engines = RayEngines(engines)
        # each start_servers made its own token: a trainer per server
        trainers = [Trainer.remote(s.info, "grpc") for s in servers]
        for step in range(3):
            rs = ray.get([t.round.remote(step) for t in trainers])
            assert all("error" not in r for r in rs), rs
            load_on_engines(ray_engines, f"step-{step}")
            for e in engines:
                st = ray.get(e.state.remote())
                assert st["version"] == f"step-{step}" and not st["paused"]
                assert st["digests"] == rs[0]["digests"]
    finally:
        for s in servers:
            s.close()
        __import__("shutil").rmtree(sock_dir, ignore_errors=True)


def test_ray_wt_backend_over_ray_engines(cluster, tmp_path):
    """vLLM's trainer API with the `wt` backend (vllm_backend's trainer
    engine, where vLLM is importable) driving engine actors through
    RayEngines instead of HTTP: 3 rounds, each pushed to node1's wt-server
    and loaded by the engine actor there (a STAND-IN for vLLM's engine, as
    above), which then holds the trainer's bytes under that version."""
    pytest.importorskip("vllm.distributed.weight_transfer.base",
                        reason="vLLM is not importable here (scripts/test.sh runs "
                        "this in the vLLM venv)")
    import wt_transfer as wt
    from conftest import model_tensors
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
    from wt_transfer.ray import RayEngines, start_servers
    from wt_transfer.vllm_backend import WtTrainerInitInfo
    c, nodes = cluster
    sock_dir = __import__("tempfile").mkdtemp(prefix="wtb", dir="/tmp")
    os.chmod(sock_dir, 0o700)
    export = os.path.join(sock_dir, "e.sock")
    servers = start_servers([nodes[0].node_id], args=MODEL + [
        "--memory", "shared", "--export", export], server_bin=_server_bin())
    token = tmp_path / "token"
    token.write_text(servers.info.token + "\n")
    token.chmod(0o600)
    try:
        engine_actor = EngineStandIn.options(resources={"node1": 1}).remote()
        with servers.client() as check:
            params = check.parameters()
        tensors = model_tensors(params, 0)
        engine = WeightTransferTrainerFactory.trainer_init(
            WtTrainerInitInfo(rank=0, servers=servers.addresses, export=export,
                              token_file=str(token)),
            client=RayEngines([engine_actor]), source=wt.ArraySource(tensors))
        try:
            for step in range(3):
                for name, t in model_tensors(params, step + 1).items():
                    dst = tensors[name]
                    np.copyto(dst.array if isinstance(dst, wt.view) else dst,
                              t.array if isinstance(t, wt.view) else t)
                assert engine.send_weights(f"b-{step}") == f"b-{step}"
                st = ray.get(engine_actor.state.remote())
                assert st["version"] == f"b-{step}" and not st["paused"]
                assert st["digests"] == digests(tensors)
        finally:
            engine.shutdown()
    finally:
        servers.close()
        __import__("shutil").rmtree(sock_dir, ignore_errors=True)
