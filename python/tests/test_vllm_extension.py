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

from vllm_support import NEW_TOKENS, VllmServer, needs_vllm, prompt_ids, tiny_stack

pytestmark = needs_vllm


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A tiny Llama, a wt-server on it exporting to this host, and vLLM
    serving it with wt's worker extension."""
    import wt_transfer as wt
    d = tmp_path_factory.mktemp("vllm-ext")
    for model, server, sock, vllm in tiny_stack(
            d, ["--worker-extension-cls", "wt_transfer.vllm.WtWorkerExtension"]):
        with wt.Client(server.addr) as client:
            yield model, server, client, sock, vllm, d


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


def test_a_version_of_the_wrong_shape_is_refused_untouched(stack):
    """A version whose tensor has the wrong shape (layer 1's down_proj
    transposed) is refused before the model is touched, the error naming
    the tensor and both shapes; the next generation is exactly the served
    version's; vLLM stays healthy. A version the export does not hold is
    NotFound at the caller."""
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
        assert (f"tensor '{k}' is float32 [256, 128], served as float32 "
                "[128, 256]; version 'good' stays") in msg, msg
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


def test_a_version_of_another_layout_is_refused_untouched(stack):
    """A version missing a tensor (a wt-server on a checkpoint without the
    final norm) is refused before the model is touched: vLLM would load
    it and keep, or make up, the missing layer's weights."""
    import wt_transfer as wt
    from conftest import Server
    from safetensors.numpy import save_file
    from tiny_llama import random_weights
    from wt_transfer.vllm import load_on_vllm
    model, server, client, sock, vllm, d = stack
    w = random_weights(model, 2100)
    push(client, w, "whole")
    load_on_vllm(vllm.url, sock, "whole")
    prompt = prompt_ids(4)
    whole = vllm.greedy(prompt)
    part = {k: v for k, v in random_weights(model, 2101).items()
            if k != "model.norm.weight"}
    ckpt = str(d / "part.safetensors")
    save_file(part, ckpt)
    part_sock = str(d / "part.sock")
    other = Server(["--model", ckpt, "--no-auth", "--memory", "shared",
                    "--export", part_sock])
    try:
        with wt.Client(other.addr) as c2:
            push(c2, part, "part-1")
        with pytest.raises(wt.FailedPrecondition) as e:
            load_on_vllm(vllm.url, part_sock, "part-1")
        msg = str(e.value)
        assert "it has no tensor 'model.norm.weight'" in msg, msg
        assert "version 'whole' stays" in msg, msg
        assert vllm.greedy(prompt) == whole
    finally:
        other.stop()


def test_loads_that_fail_midway_restore_or_fence(tmp_path):
    """With a real vLLM whose loads are made to fail midway (a test
    extension: wt's, plus a hook arming the failures):
    - the first wt load fails midway (the wrong shape, no served version
      to compare with): the checkpoint vLLM started from is loaded again,
      and vLLM generates exactly what it generated before;
    - a load made to fail after 5 tensors: the served version is back,
      its tokens exactly;
    - the load and its restore both fail: DataLoss naming both, and the
      worker serves no more: vLLM's /health fails (the worker process
      exits), as a load balancer would see it."""
    import wt_transfer as wt
    from conftest import Server
    from safetensors.numpy import save_file
    from tiny_llama import make, random_weights, reference_tokens
    from wt_transfer.vllm import load_on_vllm
    os.chmod(tmp_path, 0o700)
    model = make(str(tmp_path / "model"))
    bad = dict(random_weights(model, 2200))
    k = "model.layers.1.mlp.down_proj.weight"
    bad[k] = np.ascontiguousarray(bad[k].T)
    ckpt = str(tmp_path / "bad.safetensors")
    save_file(bad, ckpt)
    bad_sock, sock = str(tmp_path / "bad.sock"), str(tmp_path / "export.sock")
    bad_server = Server(["--model", ckpt, "--no-auth", "--memory", "shared",
                         "--export", bad_sock])
    server = Server(["--model", os.path.join(model, "model.safetensors"),
                     "--no-auth", "--memory", "shared", "--export", sock])
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        vllm = VllmServer(model, ["--worker-extension-cls",
                                  "wt_test_extension.FailingWtExtension"],
                          env_extra={"PYTHONPATH": here})
        try:
            prompt = prompt_ids(5)
            start = vllm.greedy(prompt)
            with wt.Client(bad_server.addr) as c:
                push(c, bad, "bad-1")
            with pytest.raises(wt.FailedPrecondition) as e:
                load_on_vllm(vllm.url, bad_sock, "bad-1")
            msg = str(e.value)
            assert f"loading version 'bad-1' at tensor '{k}' failed" in msg, msg
            assert "the checkpoint vLLM started from is back" in msg, msg
            assert vllm.greedy(prompt) == start
            with wt.Client(server.addr) as c:
                w1 = random_weights(model, 2201)
                push(c, w1, "v1")
                load_on_vllm(vllm.url, sock, "v1")
                v1 = vllm.greedy(prompt)
                assert v1 == reference_tokens(model, w1, prompt, NEW_TOKENS)
                push(c, random_weights(model, 2202), "v2")
                vllm.post("/collective_rpc", {"method": "wt_fail_loads",
                                              "args": ["1", "5"]})
                with pytest.raises(wt.FailedPrecondition) as e:
                    load_on_vllm(vllm.url, sock, "v2")
                msg = str(e.value)
                assert "loading version 'v2' at tensor" in msg, msg
                assert "load made to fail after 5 tensors" in msg, msg
                assert "version 'v1' is back" in msg, msg
                assert vllm.greedy(prompt) == v1
                vllm.post("/collective_rpc", {"method": "wt_fail_loads",
                                              "args": ["2", "5"]})
                with pytest.raises(wt.DataLoss) as e:
                    load_on_vllm(vllm.url, sock, "v2")
            msg = str(e.value)
            assert "restoring version 'v1' failed too" in msg, msg
            deadline = time.monotonic() + 120
            while vllm.healthy() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not vllm.healthy(), "vLLM still says healthy with mixed weights"
        finally:
            vllm.stop()
    finally:
        server.stop()
        bad_server.stop()
