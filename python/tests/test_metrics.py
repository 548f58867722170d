"""wt-server's Prometheus metrics (--metrics-listen), scraped during and
after rounds and parsed with prometheus_client's own parser: the counters
move by exactly the rounds, bytes and tensors pushed; failed rounds are
counted by cause; garbage and 1,000 connections to the metrics port leave
the server serving and the metrics answering after them."""

import pathlib
import re
import resource
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

import wt_transfer as wt
from conftest import model_tensors

parser = pytest.importorskip("prometheus_client.parser",
                             reason="no prometheus_client here (pip install "
                             "prometheus_client)")


def metrics_url(server) -> str:
    deadline = time.time() + 10
    while time.time() < deadline:
        m = re.search(r"metrics on (http://\S+)",
                      pathlib.Path(server.err.name).read_text())
        if m:
            return m.group(1)
        time.sleep(0.05)
    raise AssertionError("the server logged no metrics address")


def scrape(url) -> dict:
    """{(name, frozenset(labels)): value} of one scrape, every sample."""
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out = {}
    for fam in parser.text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(m, name, **labels):
    return m[(name, frozenset(labels.items()))]


@pytest.fixture
def mserver(start_server):
    s = start_server("--model", "synthetic:tiny", "--no-auth",
                     "--metrics-listen", "127.0.0.1:0", "--log-level", "info",
                     "--round-timeout", "1")
    return s, metrics_url(s)


def test_counters_move_by_the_rounds(mserver):
    server, url = mserver
    m0 = scrape(url)
    assert value(m0, "wt_rounds_total", outcome="committed") == 0
    assert value(m0, "wt_committed_sequence") == 0
    assert value(m0, "process_resident_memory_bytes") > 0
    assert value(m0, "process_open_fds") > 0
    with wt.Client(server.addr) as client:
        params = client.parameters()
        total = sum(p["nbytes"] for p in params)
        tensors = model_tensors(params, 1)
        engine = wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, None, client=client, source=wt.ArraySource(tensors))
        seen, stop = [], threading.Event()

        def scraper():  # scrapes while rounds run
            while not stop.is_set():
                seen.append(value(scrape(url), "wt_rounds_total",
                                  outcome="committed"))

        th = threading.Thread(target=scraper)
        th.start()
        try:
            for step in range(5):
                engine.send_weights(f"m-{step}")
        finally:
            stop.set()
            th.join()
        assert len(seen) > 0 and seen == sorted(seen)  # counters only grow
        m = scrape(url)
        assert value(m, "wt_rounds_total", outcome="committed") == 5
        assert value(m, "wt_rounds_total", outcome="failed") == 0
        assert value(m, "wt_committed_sequence") == 5
        assert abs(value(m, "wt_committed_timestamp_seconds") - time.time()) < 60
        assert value(m, "wt_round_duration_seconds_count") == 5
        assert value(m, "wt_round_duration_seconds_bucket", le="+Inf") == 5
        assert value(m, "wt_round_duration_seconds_sum") > 0
        w = dict(worker="0", device="cpu", backend="grpc")
        assert value(m, "wt_received_bytes_total", **w) == 5 * total
        assert value(m, "wt_received_tensors_total", **w) == 5 * len(params)
        assert value(m, "wt_worker_state", worker="0", device="cpu",
                     state="ready") == 1
        assert value(m, "wt_round_in_progress") == 0

        # Failed rounds, by cause: the trainer's abort and the round timeout.
        client.start_weight_update()
        assert value(scrape(url), "wt_round_in_progress") == 1
        client.abort_weight_update("changed my mind")
        client.start_weight_update()
        deadline = time.time() + 15
        while time.time() < deadline:
            m = scrape(url)
            if value(m, "wt_round_failures_total", cause="timeout") == 1:
                break
            time.sleep(0.2)
        assert value(m, "wt_round_failures_total", cause="timeout") == 1
        assert value(m, "wt_round_failures_total", cause="trainer_abort") == 1
        assert value(m, "wt_rounds_total", outcome="failed") == 2
        assert value(m, "wt_rounds_total", outcome="committed") == 5
        # A round after them commits and is counted.
        engine.send_weights("after")
        m = scrape(url)
        assert value(m, "wt_rounds_total", outcome="committed") == 6
        assert value(m, "wt_received_bytes_total", **w) == 6 * total
        engine.shutdown()


def test_strangers_on_the_metrics_port(mserver):
    server, url = mserver
    host, port = re.match(r"http://([^:/]+):(\d+)/", url).groups()
    port = int(port)
    # Garbage, a header too long, a method and a path not served.
    for junk in (b"\x00\xff garbage\r\n\r\n", b"GET /metrics HTTP/1.1\r\nX: " +
                 b"a" * 100000 + b"\r\n\r\n", b"\x16\x03\x01\x02\x00\x01"):
        with socket.create_connection((host, port), timeout=5) as s:
            try:
                s.sendall(junk)
                s.recv(4096)
            except OSError:
                pass  # closed on us: what garbage deserves
    req = urllib.request.Request(url, data=b"x" * 1000, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 405
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("/metrics", "/secrets"), timeout=5)
    assert e.value.code == 404
    # 1,000 silent connections: the control port keeps answering.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 4096)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    socks = []
    try:
        for _ in range(1000):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect((host, port))
            except BlockingIOError:
                pass
            socks.append(s)
        with wt.Client(server.addr) as client:
            t0 = time.time()
            assert client.version().sequence == 0
            assert client.get_world_size() == 2
            assert time.time() - t0 < 2
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    # Once they are gone the metrics answer again.
    deadline = time.time() + 15
    while True:
        try:
            m = scrape(url)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    assert value(m, "wt_rounds_total", outcome="committed") == 0
    assert server.proc.poll() is None


def test_metrics_listen_beyond_loopback_refused(start_server):
    with pytest.raises(RuntimeError, match="--metrics-listen 0.0.0.0:0: not a "
                                           "loopback address"):
        start_server("--model", "synthetic:tiny", "--no-auth",
                     "--metrics-listen", "0.0.0.0:0")


def test_json_logs_name_round_worker_and_peer(start_server):
    """--log-format json: a round's lines carry its id, the worker's its
    rank, a call's the peer, as fields of their own; every line parses."""
    import json
    s = start_server("--model", "synthetic:tiny", "--no-auth",
                     "--log-format", "json", "--log-level", "debug")
    with wt.Client(s.addr) as client:
        tensors = model_tensors(client.parameters(), 1)
        engine = wt.WeightTransferTrainerFactory.trainer_init(
            "grpc", None, None, client=client, source=wt.ArraySource(tensors))
        engine.send_weights("logged")
        engine.shutdown()
    deadline = time.time() + 10
    while True:
        lines = [json.loads(x) for x in
                 pathlib.Path(s.err.name).read_text().splitlines() if x]
        commit = [o for o in lines if "committed version 'logged'" in o["message"]]
        if commit or time.time() > deadline:
            break
        time.sleep(0.1)
    assert commit, lines[-5:]
    c = commit[0]
    assert c["round"].isdigit() and f"round {c['round']} committed" in c["message"]
    assert c["peer"].startswith("ipv4:127.0.0.1:")
    assert any(o.get("worker") == 0 for o in lines)
    assert all("round" not in o for o in lines if "listening" in o["message"])
