"""Fixtures: real wt-servers on loopback, started from the build's (or the
package's) wt-server; numpy tensors matching a server's model."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import time

import numpy as np
import pytest

import wt_transfer as wt


def _server_bin() -> str:
    env = os.environ.get("WT_SERVER_BIN")
    if env:
        return env
    d = wt.bin_dir()
    if d is not None:
        return str(d / "wt-server")
    found = shutil.which("wt-server")
    if found:
        return found
    pytest.skip("no wt-server (set WT_SERVER_BIN)")


CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE,
                 signal.SIGILL}
SANITIZER_REPORTS = ("runtime error:", "ERROR: AddressSanitizer",
                     "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer")


class Server:
    def __init__(self, args, env=None):
        self.dir = tempfile.mkdtemp(prefix="wt-py-")
        self.out = open(os.path.join(self.dir, "server.out"), "w+")
        self.err = open(os.path.join(self.dir, "server.err"), "w+")
        self.proc = subprocess.Popen([_server_bin(), "--listen", "127.0.0.1:0",
                                      "--log-level", "warn", *args],
                                     stdout=self.out, stderr=self.err, env=env)
        self.addr = None
        self.final_log: str | None = None  # its stderr, kept by stop()
        deadline = time.time() + 60
        while time.time() < deadline:
            self.out.flush()
            text = pathlib.Path(self.out.name).read_text()
            m = re.search(r"listening on (\S+)", text)
            if m:
                self.addr = m.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.err.flush()
        why = pathlib.Path(self.err.name).read_text()[-2000:]
        self.stop()
        raise RuntimeError("wt-server did not serve: " + why)

    def rss_kib(self) -> int:
        for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def crashed(self) -> str:
        """Why the server died by itself, with its log's tail: a signal of a
        crash (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL), or a sanitizer's
        report (a sanitized wt-server exits 1 after one; LeakSanitizer's
        comes at its exit after stop()); "" when it runs, or ended
        otherwise (stopped or killed: SIGTERM, SIGKILL). After stop() it
        judges the way the server ended."""
        rc = self.proc.poll()
        if rc is None:
            return ""
        log = self.final_log
        if log is None:
            self.err.flush()
            log = pathlib.Path(self.err.name).read_text(errors="replace")
        if rc < 0 and -rc in CRASH_SIGNALS:
            why = signal.Signals(-rc).name
        elif any(m in log for m in SANITIZER_REPORTS):
            why = f"a sanitizer's report (exit status {rc})"
        else:
            return ""
        return (f"wt-server (pid {self.proc.pid}, {self.addr}) died of "
                f"{why}; its log ends:\n{log[-4000:]}")

    def stop(self):
        if self.final_log is not None:
            return  # stopped already
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.flush()
        self.final_log = pathlib.Path(self.err.name).read_text(errors="replace")
        self.out.close()
        self.err.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def start_server():
    started = []

    def start(*args, env=None):
        s = Server(list(args), env=env)
        started.append(s)
        return s

    yield start
    # A server that crashed, or whose sanitizer reported (at its exit too:
    # leaks), fails the test that started it, whatever the test saw (a
    # crash otherwise shows only as a refused connection).
    for s in started:
        s.stop()
    crashes = [c for c in (s.crashed() for s in started) if c]
    assert not crashes, "\n".join(crashes)


@pytest.fixture
def server(start_server):
    return start_server("--model", "synthetic:tiny", "--no-auth")


def model_tensors(params, seed: int) -> dict:
    """numpy tensors for every parameter (bfloat16 as views of uint16)."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in params:
        shape = p["shape"]
        if p["dtype"] == "bfloat16":
            out[p["name"]] = wt.view(rng.integers(0, 1 << 16, size=shape,
                                                  dtype=np.uint16), "bfloat16")
        elif p["dtype"] == "float32":
            out[p["name"]] = rng.standard_normal(shape).astype(np.float32)
        elif p["dtype"] == "float16":
            out[p["name"]] = rng.standard_normal(shape).astype(np.float16)
        else:
            raise AssertionError(f"dtype {p['dtype']} in the test model")
    return out


def digests(tensors: dict) -> dict:
    import hashlib
    out = {}
    for name, t in tensors.items():
        a = t.array if isinstance(t, wt.view) else t
        out[name] = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
    return out


def has_backend(client, name: str) -> bool:
    info = client.server_info()
    return any(b.get("name") == name and b.get("available") is True
               for b in info.get("backend_info", []))
