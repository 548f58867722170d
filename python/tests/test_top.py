"""wt-ctl top under tmux: the screen shows a round in progress and then its
completion in the last rounds; `q` and Ctrl-C end it; without a terminal
it prints plain frames, no escape codes."""

import os
import shutil
import subprocess
import time

import pytest

import wt_transfer as wt
from wt_transfer import _lib
from wt_transfer.sources import CSource
from conftest import _server_bin, model_tensors


def wt_ctl() -> str:
    ctl = os.path.join(os.path.dirname(_server_bin()), "..", "client", "wt-ctl")
    if os.path.exists(ctl):
        return os.path.abspath(ctl)
    ctl = os.path.join(os.path.dirname(_server_bin()), "wt-ctl")  # installed
    if os.path.exists(ctl):
        return ctl
    pytest.skip("no wt-ctl beside wt-server")


class Tmux:
    def __init__(self, command):
        if shutil.which("tmux") is None:
            pytest.skip("no tmux here")
        self.sock = f"wt-top-{os.getpid()}-{time.monotonic_ns()}"
        subprocess.run(["tmux", "-L", self.sock, "new-session", "-d", "-s", "t",
                        "-x", "120", "-y", "40", command], check=True, timeout=10)

    def screen(self) -> str:
        r = subprocess.run(["tmux", "-L", self.sock, "capture-pane", "-p", "-t", "t"],
                           capture_output=True, text=True, timeout=10)
        return r.stdout

    def wait_for(self, text, timeout=15) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.screen()
            if text in s:
                return s
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared; the screen:\n{self.screen()}")

    def keys(self, *k):
        subprocess.run(["tmux", "-L", self.sock, "send-keys", "-t", "t", *k],
                       check=True, timeout=10)

    def alive(self) -> bool:
        return subprocess.run(["tmux", "-L", self.sock, "has-session", "-t", "t"],
                              capture_output=True, timeout=10).returncode == 0

    def close(self):
        subprocess.run(["tmux", "-L", self.sock, "kill-server"],
                       capture_output=True, timeout=10)


def gone(t: Tmux, timeout=5) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not t.alive():
            return True
        time.sleep(0.05)
    return False


def test_top_shows_a_round_and_its_end(server):
    ctl = wt_ctl()
    t = Tmux(f"{ctl} --server {server.addr} top --interval 0.2")
    try:
        t.wait_for("no round in progress")
        with wt.Client(server.addr) as client:
            tensors = model_tensors(client.parameters(), 3)
            engine = wt.WeightTransferTrainerFactory.trainer_init(
                "grpc", None, None, client=client, source=wt.ArraySource(tensors))
            L = _lib.lib()
            _lib.check(L.wt_sync_client_start(engine._client))
            s = t.wait_for("round in progress:")
            assert "updating" in s
            with CSource(engine.source) as src:
                _lib.check(L.wt_sync_client_update(engine._client, engine._trainer,
                                                   src.handle, None, None))
            s = t.wait_for("100.0% of")  # every byte of the round is in
            _lib.check(L.wt_sync_client_finish(engine._client, b"top-1"))
            s = t.wait_for("committed  top-1")
            t.wait_for("no round in progress")
            # A failed round shows its cause.
            client.start_weight_update()
            client.abort_weight_update("from the test")
            s = t.wait_for("trainer_abort")
            engine.shutdown()
        assert "admission" in s and "reflection" in s
        t.keys("q")
        assert gone(t), "q did not end wt-ctl top"
    finally:
        t.close()
    t = Tmux(f"{ctl} --server {server.addr} top --interval 0.2")
    try:
        t.wait_for("no round in progress")
        t.keys("C-c")
        assert gone(t), "Ctrl-C did not end wt-ctl top"
    finally:
        t.close()


def test_top_plain_without_a_terminal(server):
    r = subprocess.run([wt_ctl(), "--server", server.addr, "top", "--count", "2",
                        "--interval", "0.1"], capture_output=True, text=True,
                       timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "\033" not in r.stdout
    assert r.stdout.count("wt-ctl top:") == 2
    assert "no round in progress" in r.stdout
    r = subprocess.run([wt_ctl(), "--server", server.addr, "top", "--interval", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--interval '0'" in r.stderr
