"""HTTP/2 keepalive on the client's channels: a server whose answers are
late (a host whose CPUs are busy with inference) by less than the
keepalive timeout keeps its round; one silent for longer fails the call
`Unavailable` while still silent, commits nothing, and the next round
commits; a server that reads nothing at all (a stopped process) fails the
call too, later. The stall is a TCP relay between the client and a real
wt-server that, once the push is under way, holds back what the server
sends (its ping answers and flow-control windows), or everything."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

import pytest

import wt_transfer as wt
from conftest import _server_bin, digests, model_tensors


class StallingRelay:
    """Relays 127.0.0.1:PORT to `target`; once `after` bytes went upstream
    it relays nothing the server sends for `hold` seconds, once (and, with
    `both`, reads nothing from the client either). `stalled` is set when
    the stall begins, `stall_at` is its time."""

    def __init__(self, target: str, after: int, hold: float,
                 both: bool = False) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.after, self.hold, self.both = after, hold, both
        self.up = 0
        self.stalled = threading.Event()
        self.resumed = threading.Event()
        self.stall_at = None
        self.lock = threading.Lock()
        self.ls = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.ls.getsockname()[1]}"
        self.socks = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            s = socket.create_connection(self.target)
            self.socks += [c, s]
            for a, b, up in ((c, s, True), (s, c, False)):
                t = threading.Thread(target=self._pump, args=(a, b, up),
                                     daemon=True)
                self.threads.append(t)
                t.start()

    def _gate(self, up: bool) -> None:
        if (self.stalled.is_set() and not self.resumed.is_set()
                and (self.both or not up)):
            self.resumed.wait()

    def _pump(self, a, b, up: bool) -> None:
        try:
            while True:
                self._gate(up)
                data = a.recv(1 << 20)
                if not data:
                    break
                self._gate(up)
                b.sendall(data)
                if up:
                    with self.lock:
                        self.up += len(data)
                        start = (self.up >= self.after
                                 and not self.stalled.is_set())
                        if start:
                            self.stall_at = time.monotonic()
                            self.stalled.set()
                    if start:
                        threading.Timer(self.hold, self.resumed.set).start()
        except OSError:
            pass
        finally:
            for x in (a, b):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.resumed.set()
        self.ls.close()
        for s in self.socks:
            s.close()
        for t in self.threads:
            t.join(10)


@pytest.fixture
def big_server(start_server):
    return start_server("--model", "synthetic:llama-256m", "--no-auth")


def push(client, tensors, version):
    engine = wt.WeightTransferTrainerFactory.trainer_init(
        "grpc", None, None, client=client, source=wt.ArraySource(tensors))
    try:
        return engine.send_weights(version)
    finally:
        engine.shutdown()


def wait_idle(client, version: str) -> None:
    """Until the server is back at `version` with no round open (the
    failed round's abort reaches it when the client's connection closes)."""
    deadline = time.monotonic() + 30
    while True:
        info = client.server_info()
        if (client.version().version == version
                and info.get("state") != "updating"
                and all(w.get("state") != "updating"
                        for w in info.get("workers", []))):
            return
        assert time.monotonic() < deadline, info
        time.sleep(0.05)


def test_answers_late_by_less_than_the_keepalive_timeout_keep_the_round(
        big_server):
    """Everything the server sends is held back 3 s once 8 MiB of a
    252 MiB push went through: about three pings are answered 1 to 3 s
    late (the default keepalive timeout is 20 s; a client with 1 s, as wt
    had before, fails here). The round commits every byte."""
    with wt.Client(big_server.addr) as direct:
        params = direct.parameters()
    tensors = model_tensors(params, 1)
    relay = StallingRelay(big_server.addr, 8 << 20, 3.0)
    try:
        with wt.Client(relay.addr) as client:
            t0 = time.monotonic()
            assert push(client, tensors, "through-a-stall") == "through-a-stall"
            took = time.monotonic() - t0
        assert relay.stalled.is_set() and relay.resumed.is_set()
    finally:
        relay.close()
    with wt.Client(big_server.addr) as direct:
        assert direct.version().version == "through-a-stall"
        assert direct.checksums() == digests(tensors)
    print(f"the push took {took:.1f} s across 3 s of late answers")


@pytest.mark.parametrize("keepalive,both,within", [
    # answers withheld, 1 s: the ping (1 s) goes unanswered (1 s), the
    # best-effort abort waits 1 s more: about 3 s
    (1.0, False, 8.0),
    # nothing read, the default: the relay's kernel takes and acknowledges
    # all that HTTP/2's windows let the client send, as a stopped server's
    # kernel does, so TCP's user timeout does not see it (only a window
    # larger than the socket buffers would shut theirs); the ping (1 s)
    # unanswered for 20 s, then the abort's 5 s at most: about 26 s
    (None, True, 40.0)])
def test_silence_past_the_keepalive_timeout_fails_the_call_and_commits_nothing(
        big_server, keepalive, both, within):
    """The relay withholds the server's answers (or reads nothing at all,
    as from a stopped process) for 60 s mid-push: the push fails
    `Unavailable` naming the server well inside the silence (the
    best-effort abort that follows waits at most the keepalive timeout
    for it); the server keeps the version it had; a new client's round
    commits."""
    with wt.Client(big_server.addr) as direct:
        params = direct.parameters()
        before = direct.version().version
    relay = StallingRelay(big_server.addr, 8 << 20, 60.0, both=both)
    try:
        with wt.Client(relay.addr, keepalive_timeout=keepalive) as client:
            with pytest.raises(wt.Unavailable) as e:
                push(client, model_tensors(params, 2), "never")
            failed_after = time.monotonic() - relay.stall_at
        assert not relay.resumed.is_set(), "the call outlived the silence"
        msg = str(e.value)
        assert relay.addr in msg, msg
        assert failed_after < within, (failed_after, msg)
        # The setting that decided is named: the ping's watchdog, or TCP's
        # user timeout when the peer's kernel shut its window on bytes the
        # client had for it.
        ka_ms = int((keepalive or 20.0) * 1000)
        if not both or "keepalive watchdog" in msg:
            assert (f"keepalive watchdog timeout (the server left a keepalive "
                    f"ping unanswered for {ka_ms} ms, this client's "
                    "keepalive_timeout_ms") in msg, msg
        else:
            assert "for 1000 ms, this client's tcp_user_timeout_ms" in msg, msg
    finally:
        relay.close()
    tensors = model_tensors(params, 3)
    with wt.Client(big_server.addr) as direct:
        wait_idle(direct, before)
        assert push(direct, tensors, "after") == "after"
        assert direct.checksums() == digests(tensors)
    print(f"the push failed {failed_after:.1f} s into the silence: {msg}")


def test_a_tcp_user_timeout_that_is_not_a_duration_is_refused(big_server):
    """Python and wt-push refuse a TCP user timeout of 0, naming it; one
    too large for the library is INVALID_ARGUMENT naming the field; a
    negative one keeps gRPC's own and works."""
    with pytest.raises(ValueError, match="tcp_user_timeout"):
        wt.Client(big_server.addr, tcp_user_timeout=0)
    with pytest.raises(wt.InvalidArgument, match="tcp_user_timeout_ms"):
        wt.Client(big_server.addr, tcp_user_timeout=3e6)
    with wt.Client(big_server.addr, tcp_user_timeout=-1) as c:
        assert c.version() is not None
    push_bin = os.path.join(os.path.dirname(_server_bin()), "wt-push")
    r = subprocess.run([push_bin, "--server", big_server.addr,
                        "--tcp-user-timeout", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "--tcp-user-timeout: '0' is not a number of seconds" in r.stderr, \
        r.stderr


def test_a_keepalive_timeout_that_is_not_a_duration_is_refused(big_server):
    """Python and wt-push refuse a keepalive timeout of 0 or less, naming
    it; one too large for the library is INVALID_ARGUMENT naming the
    field."""
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="keepalive_timeout"):
            wt.Client(big_server.addr, keepalive_timeout=bad)
    with pytest.raises(wt.InvalidArgument, match="keepalive_timeout_ms"):
        wt.Client(big_server.addr, keepalive_timeout=3e6)
    push_bin = os.path.join(os.path.dirname(_server_bin()), "wt-push")
    r = subprocess.run([push_bin, "--server", big_server.addr,
                        "--keepalive-timeout", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "--keepalive-timeout: '0' is not a number of seconds" in r.stderr, \
        r.stderr
