"""wt-server's grpc.health.v1.Health with a stock client
(grpcio-health-checking): SERVING once up, without a token while every
other call still wants one; NOT_SERVING from SIGTERM on (--health-grace),
which a Watch sees; unknown services as the protocol says."""

import os
import signal
import threading
import time

import pytest

import wt_transfer as wt

grpc = pytest.importorskip("grpc", reason="no grpcio here")
health = pytest.importorskip("grpc_health.v1.health_pb2",
                             reason="no grpcio-health-checking here")
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
UNKNOWN_SERVICE = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


def test_health_with_tokens_on(start_server, tmp_path):
    os.chmod(tmp_path, 0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path))
    s = start_server("--model", "synthetic:tiny", "--health-grace", "1.5", env=env)
    ch = grpc.insecure_channel(s.addr)
    stub = health_pb2_grpc.HealthStub(ch)
    for name in ("", "wt.v1.WeightTransfer"):
        assert stub.Check(health_pb2.HealthCheckRequest(service=name),
                          timeout=5).status == SERVING
    with pytest.raises(grpc.RpcError) as e:
        stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    unknown = stub.Watch(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
    assert next(unknown).status == UNKNOWN_SERVICE
    unknown.cancel()
    # Every other call still needs a token: health opened nothing else.
    with wt.Client(s.addr, token_discovery=False) as c:
        with pytest.raises(wt.Unauthenticated):
            c.get_world_size()
    # SIGTERM: Watch sees SERVING then NOT_SERVING; during the grace a Check
    # says NOT_SERVING while the server still answers.
    seen = []
    watch = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)

    def follow():
        try:
            for r in watch:
                seen.append(r.status)
        except grpc.RpcError:
            pass

    th = threading.Thread(target=follow)
    th.start()
    time.sleep(0.3)
    s.proc.send_signal(signal.SIGTERM)
    t0 = time.time()
    status = SERVING
    while status == SERVING and time.time() - t0 < 1.0:
        status = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
        time.sleep(0.02)
    assert status == NOT_SERVING
    th.join(20)
    assert seen[:2] == [SERVING, NOT_SERVING], seen
    assert s.proc.wait(timeout=20) == 0
    ch.close()
