"""A real `vllm serve` (vLLM's CPU build) updated through wt with the worker
extension and the trainer-side helper (docs/python.md, "vLLM"): the greedy
tokens it generates after each load are those of the new weights, computed
separately with transformers; a load that fails leaves the previous version
serving; generation never errs during pushes.

Runs where vLLM is importable (scripts/test.sh runs it in the venv of
scripts/install-vllm.sh); skipped elsewhere, saying so."""

from __future__ import annotations

import os
import threading
import time
import urllib.error

import numpy as np
import pytest

from vllm_support import NEW_TOKENS, VllmServer, needs_vllm, prompt_ids

pytestmark = needs_vllm


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A tiny Llama, a wt-server on it exporting to this host, and vLLM
    serving it with wt's worker extension."""
    import wt_transfer as wt
    from conftest import Server
    from tiny_llama import make
    d = tmp_path_factory.mktemp("vllm-ext")
    os.chmod(d, 0o700)
    model = make(str(d / "model"))
    sock = str(d / "export.sock")
    server = Server(["--model", os.path.join(model, "model.safetensors"),
                     "--no-auth", "--memory", "shared", "--export", sock])
    vllm = VllmServer(model, ["--worker-extension-cls",
                              "wt_transfer.vllm.WtWorkerExtension"])
    client = wt.Client(server.addr)
    yield model, server, client, sock, vllm, d
    client.close()
    vllm.stop()
    server.stop()


def push(client, weights: dict, version: str, backend: str = "grpc") -> None:
    import wt_transfer as wt
    engine = wt.WeightTransferTrainerFactory.trainer_init(
        backend, None, None, client=client, source=wt.ArraySource(weights))
    try:
        engine.send_weights(version)
    finally:
        engine.shutdown()


def test_five_rounds_generate_what_the_new_weights_generate(stack):
    """5 rounds: after each load the greedy tokens of /v1/completions equal
    transformers' from the same new weights (float32) and differ from the
    round before; the prompt fills more than a prefix-cache block and is
    asked before each load too, so a stale block would show."""
    from tiny_llama import random_weights, reference_tokens
    from wt_transfer.vllm import load_on_vllm
    model, server, client, sock, vllm, _ = stack
    prompt = prompt_ids(1)
    before = vllm.greedy(prompt)
    prev = before
    pauses = []
    for r in range(5):
        w = random_weights(model, 1000 + r)
        push(client, w, f"ext-{r}")
        assert vllm.greedy(prompt) == prev  # pushed, not loaded: unchanged
        out = load_on_vllm(vllm.url, sock, f"ext-{r}")
        res = out[vllm.url]
        assert res["workers"] == 1 and res["results"][0]["tensors"] == len(w)
        pauses.append(res["pause_s"])
        got = vllm.greedy(prompt)
        want = reference_tokens(model, w, prompt, NEW_TOKENS)
        assert got == want, (r, got, want)
        assert got != prev, (r, got)
        prev = got
    print(f"loads paused generation {min(pauses) * 1e3:.0f} to "
          f"{max(pauses) * 1e3:.0f} ms (tiny model, 2-core VM)")


def test_a_failed_load_leaves_the_previous_version_serving(stack):
    """A version whose tensor has the wrong shape fails midway (earlier
    layers already reloaded): the worker loads the previous version again;
    the next generation is exactly its tokens; the error names the tensor,
    the cause and the version that is back; vLLM stays healthy. A version
    the export does not hold is NotFound at the caller."""
    import wt_transfer as wt
    from conftest import Server
    from safetensors.numpy import save_file
    from tiny_llama import random_weights
    from wt_transfer.vllm import load_on_vllm
    model, server, client, sock, vllm, d = stack
    w = random_weights(model, 2000)
    push(client, w, "good")
    load_on_vllm(vllm.url, sock, "good")
    prompt = prompt_ids(2)
    good = vllm.greedy(prompt)
    # a wt-server whose model has down_proj of layer 1 transposed: the
    # bytes arrive, vLLM's loader refuses them after layer 0 is in
    bad = dict(random_weights(model, 2001))
    k = "model.layers.1.mlp.down_proj.weight"
    bad[k] = np.ascontiguousarray(bad[k].T)
    bad_ckpt = str(d / "bad.safetensors")
    save_file(bad, bad_ckpt)
    bad_sock = str(d / "bad.sock")
    other = Server(["--model", bad_ckpt, "--no-auth", "--memory", "shared",
                    "--export", bad_sock])
    try:
        with wt.Client(other.addr) as c2:
            push(c2, bad, "bad-1")
        with pytest.raises(wt.FailedPrecondition) as e:
            load_on_vllm(vllm.url, bad_sock, "bad-1")
        msg = str(e.value)
        assert f"at tensor '{k}'" in msg, msg
        assert "exceeds dimension size" in msg, msg
        assert "version 'good' is back" in msg, msg
        assert vllm.greedy(prompt) == good
        assert vllm.healthy()
    finally:
        other.stop()
    with pytest.raises(wt.NotFound) as e:
        load_on_vllm(vllm.url, sock, "no-such-version")
    assert f"export {sock}: version 'no-such-version' is not held" in str(e.value)
    assert vllm.greedy(prompt) == good


def test_requests_during_pushes_and_loads_all_complete(stack):
    """Requests sent while pushes are in flight, and across the loads'
    pauses, complete: none errs."""
    from tiny_llama import random_weights
    from wt_transfer.vllm import load_on_vllm
    model, server, client, sock, vllm, _ = stack
    stop = threading.Event()
    done, failed = [], []

    def ask():
        prompt = prompt_ids(3, 40)
        while not stop.is_set():
            try:
                vllm.greedy(prompt, 4)
                done.append(time.monotonic())
            except (urllib.error.URLError, OSError, KeyError) as e:
                failed.append(e)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for r in range(4):
            push(client, random_weights(model, 3000 + r), f"busy-{r}",
                 "ucx" if r % 2 else "grpc")
            load_on_vllm(vllm.url, sock, f"busy-{r}")
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert not failed, failed[:3]
    assert len(done) >= 4, len(done)
