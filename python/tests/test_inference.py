"""The inference side in Python: wt_transfer.consumer over the export, the
vLLM worker extension against a stand-in model, and the trainer-side helper
against a stand-in of vLLM's /collective_rpc route."""

import hashlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import wt_transfer as wt
import wt_transfer.consumer as wtc
from wt_transfer.vllm import WtWorkerExtension, load_on_vllm
from conftest import digests, model_tensors


@pytest.fixture
def exported(start_server, tmp_path):
    os.chmod(tmp_path, 0o700)
    sock = str(tmp_path / "export.sock")
    s = start_server("--model", "synthetic:small", "--no-auth", "--memory",
                     "shared", "--export", sock)
    client = wt.Client(s.addr)
    params = client.parameters()
    yield s, client, params, sock
    client.close()


def push(client, params, seed, version):
    tensors = model_tensors(params, seed)
    engine = wt.WeightTransferTrainerFactory.trainer_init(
        "grpc", None, None, client=client, source=wt.ArraySource(tensors))
    engine.send_weights(version)
    engine.shutdown()
    return digests(tensors)


def view_digests(tensors):
    return {n: hashlib.sha256(a.tobytes()).hexdigest() for n, a in tensors.items()}


def test_views_are_the_trainer_bytes_and_read_only(exported):
    s, client, params, sock = exported
    want = push(client, params, 1, "v1")
    with wtc.open(sock) as c:
        with c.acquire() as tensors:
            assert tensors.version == "v1" and tensors.sequence == 1
            assert list(tensors) == [p["name"] for p in params]  # model order
            assert view_digests(tensors) == want
            a = next(iter(tensors.values()))
            assert not a.flags.writeable
            with pytest.raises(ValueError):
                a[...] = 0
            with pytest.raises(ValueError):
                a.flags.writeable = True
            assert client.server_info()["lease_count"] == 1
        assert client.server_info().get("lease_count", 0) == 0
        with pytest.raises(wt.NotFound, match="holds 'v1'"):
            c.acquire("v0")


def test_fifty_rounds_never_a_mix(exported):
    s, client, params, sock = exported
    expected = {}  # version -> digests
    stop = threading.Event()
    seen, torn = [], []

    def reader():
        with wtc.open(sock) as c:
            while not stop.is_set():
                try:
                    with c.acquire(timeout=1.0) as t:
                        d = view_digests(t)
                        seen.append((t.version, d))
                except wt.FailedPrecondition:
                    pass

    tensors = model_tensors(params, 0)
    engine = wt.WeightTransferTrainerFactory.trainer_init(
        "grpc", None, None, client=client, source=wt.ArraySource(tensors))
    th = threading.Thread(target=reader)
    th.start()
    for r in range(50):
        tensors.update(model_tensors(params, 100 + r))
        expected[f"r{r}"] = digests(tensors)
        engine.send_weights(f"r{r}")
    stop.set()
    th.join(30)
    engine.shutdown()
    for version, d in seen:
        if expected.get(version) != d:
            torn.append(version)
    assert seen and not torn, f"{len(torn)} of {len(seen)} views torn"
    print(f"\n  {len(seen)} views during 50 rounds, none torn")


def test_killed_consumer_frees_its_lease(exported):
    s, client, params, sock = exported
    push(client, params, 2, "v2")
    code = textwrap.dedent(f"""
        import sys, time, wt_transfer.consumer as wtc
        c = wtc.open({sock!r})
        lease = c.acquire()
        print("held", flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"held"
    assert client.server_info()["lease_count"] == 1
    p.send_signal(signal.SIGKILL)
    p.wait()
    t0 = time.time()
    while client.server_info().get("lease_count", 0) and time.time() - t0 < 1:
        time.sleep(0.01)
    assert client.server_info().get("lease_count", 0) == 0
    assert time.time() - t0 < 1


class StandInModel:
    """What vLLM's model gives the extension: load_weights records what it
    was given (the name and a digest of each tensor, in order)."""

    def __init__(self, fail_at=None, fail_once=False):
        self.loaded, self.fail_at, self.post_loads = [], fail_at, 0
        self.fail_once = fail_once

    def load_weights(self, weights):
        for i, (name, a) in enumerate(weights):
            if i == self.fail_at:
                if self.fail_once:
                    self.fail_at = None
                raise RuntimeError(f"the model refused '{name}'")
            self.loaded.append((name, hashlib.sha256(np.asarray(a).tobytes()).hexdigest()))
        return {n for n, _ in self.loaded}

    def process_weights_after_loading(self):
        self.post_loads += 1


class StandInRunner:
    def __init__(self, model):
        self.model = model


class StandInWorker(WtWorkerExtension):
    """A vLLM worker's shape: the extension is mixed into it."""

    def __init__(self, model):
        self.model_runner = StandInRunner(model)


def test_worker_extension_loads_the_trainer_bytes(exported):
    s, client, params, sock = exported
    want = push(client, params, 3, "v3")
    w = StandInWorker(StandInModel())
    out = w.update_weights_from_wt(sock, to_torch="0")
    assert out["version"] == "v3" and out["tensors"] == len(params)
    assert w.model_runner.model.loaded == [(p["name"], want[p["name"]]) for p in params]
    assert w.model_runner.model.post_loads == 1
    # the worker keeps the lease of what it serves, to go back to it
    assert client.server_info().get("lease_count", 0) == 1
    assert w.wt_served_version() == "v3"
    # a named version that is not held: refused, the served lease kept
    with pytest.raises(wt.NotFound, match=r"\[wt:NOT_FOUND\]"):
        w.update_weights_from_wt(sock, version="v9", to_torch="0")
    assert client.server_info().get("lease_count", 0) == 1
    # a load that raises midway goes back to the served version's bytes
    want4 = push(client, params, 4, "v4")
    assert want4 != want
    w.model_runner.model.fail_at, w.model_runner.model.fail_once = 3, True
    w.model_runner.model.loaded.clear()
    with pytest.raises(wt.FailedPrecondition) as e:
        w.update_weights_from_wt(sock, to_torch="0")
    msg = str(e.value)
    assert f"loading version 'v4' at tensor '{params[3]['name']}' failed" in msg, msg
    assert "the model refused" in msg and "version 'v3' is back" in msg, msg
    loaded = w.model_runner.model.loaded
    assert loaded[:3] == [(p["name"], want4[p["name"]]) for p in params[:3]]
    assert loaded[3:] == [(p["name"], want[p["name"]]) for p in params]
    assert w.wt_served_version() == "v3"
    assert client.server_info().get("lease_count", 0) == 1
    # with nothing to go back to (no reload path to the checkpoint vLLM
    # started from), the worker is fenced: its forward raises from then on
    bad = StandInWorker(StandInModel(fail_at=3))
    with pytest.raises(wt.DataLoss, match="restoring the checkpoint vLLM "
                       "started from failed too"):
        bad.update_weights_from_wt(sock, to_torch="0")
    with pytest.raises(RuntimeError, match="weights are mixed"):
        bad.model_runner.model.forward()
    with pytest.raises(wt.DataLoss, match="fenced"):
        bad.update_weights_from_wt(sock, to_torch="0")
    assert client.server_info().get("lease_count", 0) == 1
    w._wt_served().close()
    assert client.server_info().get("lease_count", 0) == 0


def _rank_main(sock, q):
    w = StandInWorker(StandInModel())
    out = w.update_weights_from_wt(sock, to_torch="0")
    q.put((out["version"], w.model_runner.model.loaded))


def test_eight_ranks_load_the_same_host_copy(exported):
    s, client, params, sock = exported
    want = push(client, params, 4, "v4")
    rss0 = s.rss_kib()
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(sock, q)) for _ in range(8)]
    for p in procs:
        p.start()
    got = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    rss1 = s.rss_kib()
    assert all(v == "v4" for v, _ in got)
    for _, loaded in got:
        assert loaded == [(p["name"], want[p["name"]]) for p in params]
    assert rss1 - rss0 < 2048, (rss0, rss1)  # one host copy, not eight
    assert client.server_info().get("lease_count", 0) == 0


def test_threads_of_one_process_share_a_consumer(exported):
    """Workers that are threads of one process share the process's consumer
    (its mappings); their calls take turns, their leases overlap."""
    s, client, params, sock = exported
    want = push(client, params, 6, "v6")
    errs, loads, workers = [], [], []

    def run():
        w = StandInWorker(StandInModel())
        workers.append(w)
        try:
            for _ in range(20):
                w.update_weights_from_wt(sock, to_torch="0")
            loads.append(w.model_runner.model.loaded[-len(params):])
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    ts = [threading.Thread(target=run) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errs, errs[0]
    assert len(loads) == 8
    for loaded in loads:
        assert loaded == [(p["name"], want[p["name"]]) for p in params]
    # each worker holds the lease of the version it serves, no more
    assert client.server_info().get("lease_count", 0) == 8
    for w in workers:
        w._wt_served().close()
    assert client.server_info().get("lease_count", 0) == 0


class StandInVllm(ThreadingHTTPServer):
    """vLLM's POST /collective_rpc as its route is written (vLLM with
    VLLM_SERVER_DEV_MODE=1): {"method", "args", "kwargs", "timeout"} in,
    {"results": [one per worker]} out, 400 without a method."""

    def __init__(self, workers, fail=False):
        self.workers, self.fail, self.bodies = workers, fail, []
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        srv = self.server
        srv.bodies.append((self.path, body))
        if self.path.startswith("/pause") or self.path in ("/resume",
                                                          "/reset_prefix_cache"):
            return self._send(200, {"status": "ok"})
        if self.path != "/collective_rpc":
            return self._send(404, {"detail": "Not Found"})
        if body.get("method") is None:
            return self._send(400, {"detail": "Missing 'method' in request body"})
        if srv.fail:
            return self._send(500, {"detail": "EngineCore died"})
        results = []
        try:
            for w in srv.workers:
                kwargs = dict(body.get("kwargs", {}), to_torch="0")
                results.append(getattr(w, body["method"])(*body.get("args", []), **kwargs))
        except Exception as e:  # a worker's exception fails the RPC
            return self._send(500, {"detail": f"{type(e).__name__}: {e}"})
        self._send(200, {"results": results})


def test_trainer_helper_over_collective_rpc(exported):
    s, client, params, sock = exported
    push(client, params, 5, "v5")
    a = StandInVllm([StandInWorker(StandInModel()), StandInWorker(StandInModel())])
    b = StandInVllm([StandInWorker(StandInModel())])
    out = load_on_vllm([a.url, b.url], sock, "v5")
    assert out[a.url]["workers"] == 2 and out[b.url]["workers"] == 1
    assert all(r["version"] == "v5" for r in out[a.url]["results"])
    # generation paused around the load only (vLLM's pause clears its
    # prefix cache), resumed after it
    assert [p for p, _ in a.bodies] == ["/pause?mode=wait", "/collective_rpc",
                                        "/resume"]
    path, body = a.bodies[1]
    assert body == {"method": "update_weights_from_wt", "args": [sock],
                    "kwargs": {"version": "v5"}, "timeout": 300.0}
    # without a pause: the prefix cache is reset after the load
    a.bodies.clear()
    load_on_vllm([a.url], sock, "v5", pause=None)
    assert [p for p, _ in a.bodies] == ["/collective_rpc", "/reset_prefix_cache"]
    # a version the server does not hold: the worker's class and refusal,
    # naming both, and generation resumed
    a.bodies.clear()
    with pytest.raises(wt.NotFound) as e:
        load_on_vllm([a.url], sock, "v6")
    assert "'v6' is not held: the server holds 'v5'" in str(e.value)
    assert "[wt:" not in str(e.value)
    assert a.bodies[-1][0] == "/resume"
    # a worker that loads another version than the trainer committed
    class Newest(StandInWorker):
        def update_weights_from_wt(self, path, version="", **kw):
            return super().update_weights_from_wt(path, version="", **kw)
    c = StandInVllm([Newest(StandInModel())])
    with pytest.raises(wt.FailedPrecondition) as e:
        load_on_vllm([c.url], sock, "v7")
    assert "loaded version 'v5', not 'v7'" in str(e.value) and c.url in str(e.value)
    c.shutdown()
    # one server fails: named, and the other's result kept
    bad = StandInVllm([StandInWorker(StandInModel())], fail=True)
    with pytest.raises(wt.Unavailable) as e:
        load_on_vllm([a.url, bad.url], sock, "v5")
    assert bad.url in str(e.value) and "HTTP 500: " in str(e.value)
    assert "EngineCore died" in str(e.value) and a.url in e.value.results
    assert bad.bodies[-1][0] == "/resume"
    for srv in (a, b, bad):
        srv.shutdown()


def test_device_regions_through_dlpack():
    torch = pytest.importorskip("torch", reason="torch is not installed here (CI has numpy only)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: device regions run in tests/gpu/run-device-checks.sh")
