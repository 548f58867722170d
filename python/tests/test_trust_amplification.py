"""Trust row 1 (docs/trust.md): nothing a caller sends costs the server more
than a bounded multiple of its bytes before the caller is known, with real
grpcio clients as the attackers.

- Health.Check (public, no token) with gzip: 16 KiB on the wire that
  inflates to 16 MiB, from 4 senders for 6 s; beside it a trainer's rounds
  commit within 3x the same rounds alone, kubelet-style 1 s health probes
  are all answered, and the server's RSS stays bounded.
- Health.Check with 16 KiB of unknown fields: refused before unpacking.
- A reader's ChecksumWeights with 4 M empty names (8 MiB): refused
  RESOURCE_EXHAUSTED before its unpacking costs more than 8 times its
  bytes; the server answers after."""

from __future__ import annotations

import os
import pathlib
import statistics
import threading
import time

import pytest

import wt_transfer as wt
from conftest import model_tensors

# Latencies beside an attacker against the same alone: on a host of its
# own (scripts/test.sh runs `alone` tests after its parallel pass).
pytestmark = pytest.mark.alone

grpc = pytest.importorskip("grpc", reason="no grpcio here")
health = pytest.importorskip("grpc_health.v1.health_pb2",
                             reason="no grpcio-health-checking here")
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

CHECK = "/grpc.health.v1.Health/Check"


def rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _field(num: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    n, out = len(payload), bytearray([(num << 3) | 2])
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out) + payload


def _rounds(client, tensors, n, tag):
    engine = wt.WeightTransferTrainerFactory.trainer_init(
        "grpc", None, None, client=client, source=wt.ArraySource(tensors))
    took = []
    try:
        for i in range(n):
            t0 = time.monotonic()
            engine.send_weights(f"{tag}-{i}")
            took.append(time.monotonic() - t0)
    finally:
        engine.shutdown()
    return took


@pytest.fixture
def guarded(start_server, tmp_path):
    os.chmod(tmp_path, 0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path))
    s = start_server("--model", "synthetic:small", env=env)
    token_dir = next(p for p in tmp_path.rglob("tokens-*"))
    tokens = dict(line.split()[:2] for line in token_dir.read_text().splitlines()
                  if line and not line.startswith("#"))
    return s, env, tokens


def test_gzip_bombs_at_health_cost_a_refusal(guarded):
    s, env, tokens = guarded
    client = wt.Client(s.addr, runtime_base=env["XDG_RUNTIME_DIR"])
    tensors = model_tensors(client.parameters(), 1)
    alone = statistics.median(_rounds(client, tensors, 5, "alone"))
    rss0 = rss_mib(s.proc.pid)
    # 16 MiB inflated: a HealthCheckRequest whose unknown field 9 is zeros
    bomb = _field(9, b"\0" * (16 << 20))
    stop = threading.Event()
    sent, refusals, answered = [0], {}, [0]

    def attacker():
        ch = grpc.insecure_channel(s.addr)
        call = ch.unary_unary(CHECK)
        while not stop.is_set():
            try:
                call(bomb, timeout=5, compression=grpc.Compression.Gzip)
                answered[0] += 1
            except grpc.RpcError as e:
                refusals[e.code()] = refusals.get(e.code(), 0) + 1
            sent[0] += 1
        ch.close()

    probes, probe_fail = [0], []

    def prober():
        # A connection per probe, as kubelet's gRPC probe makes: a token-less
        # connection is closed at the auth grace (3 s), and a probe in flight
        # on a long-lived one at that moment would fail for that reason only.
        # Its own subchannel pool: grpcio otherwise shares one connection
        # among the process's channels to the same target, the attackers'.
        while not stop.is_set():
            ch = grpc.insecure_channel(
                s.addr, options=[("grpc.use_local_subchannel_pool", 1)])
            try:
                health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(), timeout=1)
                probes[0] += 1
            except grpc.RpcError as e:
                probe_fail.append(e.code())
            finally:
                ch.close()
            time.sleep(0.2)

    threads = [threading.Thread(target=attacker) for _ in range(4)]
    threads.append(threading.Thread(target=prober))
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        beside = _rounds(client, tensors, 5, "beside")
        peak = rss_mib(s.proc.pid)
        time.sleep(max(0.0, 6 - 0.5 - sum(beside)))
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    print(f"\n  gzip bombs: {sent[0]} sent, refused {refusals}, {answered[0]} "
          f"answered; rounds {alone * 1e3:.0f} ms alone, "
          f"{statistics.median(beside) * 1e3:.0f} ms beside (median); probes "
          f"{probes[0]} answered, {len(probe_fail)} failed; RSS {rss0:.0f} -> "
          f"{peak:.0f} MiB")
    assert answered[0] == 0 and sent[0] > 0
    # refused as compressed; UNAVAILABLE: a token-less connection closed at
    # the auth grace while a bomb was in flight
    assert grpc.StatusCode.UNIMPLEMENTED in refusals
    assert set(refusals) <= {grpc.StatusCode.UNIMPLEMENTED,
                             grpc.StatusCode.UNAVAILABLE}
    assert statistics.median(beside) < max(3 * alone, alone + 0.5)
    assert not probe_fail and probes[0] > 0
    assert peak - rss0 < 64
    # the server still answers, committed what it was sent
    assert client.version().version == "beside-4"
    client.close()


def test_large_or_bloated_requests_are_refused_before_unpacking(guarded):
    s, env, tokens = guarded
    ch = grpc.insecure_channel(s.addr)
    # public: at most 4 KiB
    with pytest.raises(grpc.RpcError) as e:
        ch.unary_unary(CHECK)(_field(9, b"x" * 16384), timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "at most 4096" in e.value.details()
    # a reader's 4 M empty names: more than 8 times its bytes to unpack
    rss0 = rss_mib(s.proc.pid)
    names = _field(1, b"") * (4 << 20)
    call = ch.unary_unary("/wt.v1.WeightTransfer/ChecksumWeights")
    md = (("authorization", "Bearer " + tokens["reader"]),)
    with pytest.raises(grpc.RpcError) as e:
        call(names, timeout=30, metadata=md)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value.details()
    assert "8 times" in e.value.details()
    assert rss_mib(s.proc.pid) - rss0 < 160
    stub = health_pb2_grpc.HealthStub(ch)
    assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
        health_pb2.HealthCheckResponse.SERVING
    ch.close()


def test_a_hundred_readers_beside_the_trainer(guarded, tmp_path):
    """Trust row 2: 100 reader threads of the trainer's own uid (a
    monitoring loop, a dashboard) get no refusal (a peer alone uses the
    reader class's whole room, not a fixed cap), and the trainer's pushes,
    whose own reader calls run in the round class, commit beside them."""
    s, env, tokens = guarded
    rtok = tmp_path / "reader.token"
    rtok.write_text("reader " + tokens["reader"] + "\n")
    rtok.chmod(0o600)
    trainer = wt.Client(s.addr, runtime_base=env["XDG_RUNTIME_DIR"])
    tensors = model_tensors(trainer.parameters(), 2)
    stop = threading.Event()
    calls, errors = [0], []

    def reader():
        with wt.Client(s.addr, token_file=str(rtok)) as c:
            while not stop.is_set():
                try:
                    c.version()
                    calls[0] += 1
                except wt.WtError as e:
                    errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(100)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        took = _rounds(trainer, tensors, 5, "busy")
        for _ in range(5):  # the trainer's own reader calls, beside them
            trainer.server_info()
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    print(f"\n  100 readers of the trainer's uid: {calls[0]} calls, "
          f"{len(errors)} refused; 5 pushes beside them, median "
          f"{statistics.median(took) * 1e3:.0f} ms")
    assert not errors, errors[:3]
    assert calls[0] > 100
    assert trainer.version().version == "busy-4"
    trainer.close()
