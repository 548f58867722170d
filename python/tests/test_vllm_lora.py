"""LoRA adapters as wt rounds, on a real `vllm serve --enable-lora`: each
round commits a new version of an adapter to a wt-server, and vLLM loads
it from the wt export, from memory (no file written), under the adapter's
name, through its own route (POST /v1/load_lora_adapter, load_inplace)
with a wt lora_path (wt_transfer.lora). After each load, requests for the
adapter generate what the new version generates, requests for the base
model what the base generates, and vLLM's own refusals (rank, target
modules) and wt's loader's (a tensor of the wrong shape for the model's
module, which vLLM does not check) leave the previous version serving.

The reference is plain torch: transformers' LlamaForCausalLM on CPU in
float32, with each target module's weight W replaced by W + B @ A * alpha /
r (lora_support.merged_weights), no vLLM and no LoRA kernel.

The tests of vllm serve run where vLLM is importable (scripts/test.sh runs
them in the venv of scripts/install-vllm.sh) and are skipped elsewhere,
saying so; those of the lora_path and of the trainer's call need neither
vLLM nor a wt-server."""

from __future__ import annotations

import http.server
import json
import os
import threading
import urllib.request

import pytest

from vllm_support import NEW_TOKENS, VllmServer, needs_vllm, prompt_ids

ALPHA = 16.0
RANK = 8
MAX_LORA_RANK = 16
# the tiny Llama (tiny_llama.make): hidden 128, 4 heads, 2 KV heads of 32,
# intermediate 256; {module: (out, in)}
A_TARGETS = {"self_attn.q_proj": (128, 128), "self_attn.v_proj": (64, 128)}
B_TARGETS = {"self_attn.o_proj": (128, 128), "mlp.up_proj": (256, 128),
             "mlp.down_proj": (128, 256)}
NO_SUCH_TARGET = {"self_attn.q_proj": (128, 128), "self_attn.x_proj": (128, 128)}


class Stack:
    """vLLM serving the tiny Llama with LoRA and wt's weight-transfer
    backend, and the wt-server beside it holding the base model and the
    adapter sets."""

    def __init__(self, d):
        from conftest import Server
        from lora_support import AdapterSets, base_weights
        from tiny_llama import make
        os.chmod(d, 0o700)
        self.model = make(str(d / "model"))
        self.base = base_weights(self.model)
        self.base_sock = str(d / "base.sock")
        self.base_server = Server(
            ["--model", os.path.join(self.model, "model.safetensors"), "--no-auth",
             "--memory", "shared", "--export", self.base_sock])
        self.adapters = AdapterSets(self.base_server, ALPHA)
        self.vllm = None
        try:
            self.vllm = VllmServer(
                self.model,
                ["--enable-lora", "--max-lora-rank", str(MAX_LORA_RANK),
                 "--max-loras", "2", "--max-cpu-loras", "4",
                 "--weight-transfer-config", '{"backend": "wt"}'],
                env_extra={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"})
        except BaseException:
            self.stop()
            raise
        print(f"vllm serve --enable-lora started in {self.vllm.start_s:.1f} s; "
              "references: plain torch (transformers' LlamaForCausalLM, CPU, "
              "float32) with W + B @ A * alpha / r merged, no vLLM")

    def push_adapter(self, name: str, version: str, tensors: dict):
        """Commits `tensors` as version `version` of adapter `name` where
        vLLM's host reads it: an adapter round on the wt-server beside vLLM,
        which holds the base model too; returns (export path, version,
        sequence)."""
        return self.adapters.push(name, version, tensors)

    def serve(self, name: str, version: str, tensors: dict) -> str:
        """Pushes a version, then has vLLM load it under `name`; returns its
        lora_path."""
        from wt_transfer.lora import load_adapter_on_vllm, lora_path
        export, version, sequence = self.push_adapter(name, version, tensors)
        path = lora_path(export, name, version, sequence, ALPHA)
        got = load_adapter_on_vllm(self.vllm.url, name, path)
        assert list(got) == [self.vllm.url]
        return path

    def greedy(self, model: str, prompt: list, n: int = NEW_TOKENS) -> list:
        """vLLM's greedy tokens after `prompt` for `model` (an adapter's
        name, or the base model's)."""
        out = self.vllm.post("/v1/completions", {
            "model": model, "prompt": prompt, "max_tokens": n, "min_tokens": n,
            "temperature": 0, "return_token_ids": True})
        return out["choices"][0]["token_ids"]

    def reference(self, adapter: dict | None, prompt: list,
                  n: int = NEW_TOKENS, base: dict | None = None) -> list:
        """Plain torch's greedy tokens for the base weights (`base`, else
        the checkpoint's) with `adapter` merged (None: none)."""
        from lora_support import merged_weights, reference
        w = self.base if base is None else base
        if adapter is not None:
            w = merged_weights(w, adapter, ALPHA)
        return reference(self.model, w, prompt, n)

    def stop(self):
        try:
            if self.vllm is not None:
                self.vllm.stop()
        finally:
            self.adapters.stop()
            self.base_server.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("vllm-lora"))
    try:
        yield s
    finally:
        s.stop()


def _adapter(stack, targets, seed, rank=RANK):
    from lora_support import adapter_tensors
    return adapter_tensors(stack.model, targets, rank, seed)


@needs_vllm
def test_rounds_of_an_adapter(stack):
    """5 rounds of adapter "a" (rank 8 on q_proj, v_proj): after each load,
    requests for "a" generate the new version's tokens (plain torch's),
    different from the last round's; requests for the base model the base's.
    Before each load the export already holds the next version and no
    longer the served one: vLLM keeps serving the served one from its own
    copy (a step never reloads)."""
    prompt = prompt_ids(31)
    base = stack.reference(None, prompt)
    assert stack.greedy(stack.vllm.model, prompt) == base
    prev = None
    for r in range(5):
        tensors = _adapter(stack, A_TARGETS, 100 + r)
        export, version, sequence = stack.push_adapter("a", f"a-{r + 1}", tensors)
        if prev is not None:
            assert stack.greedy("a", prompt) == prev, r
        # the trainer's helper: the set's export, version, sequence and
        # alpha from its wt-server, then vLLM's load route
        from wt_transfer.lora import load_adapter
        _, client, _, _ = stack.adapters.trainer("a", tensors)
        took = load_adapter(stack.vllm.url, client, version)[stack.vllm.url]["seconds"]
        print(f"round {r + 1}: vLLM loaded a-{r + 1} in {took * 1e3:.0f} ms")
        got = stack.greedy("a", prompt)
        assert got == stack.reference(tensors, prompt), r
        assert got != base, r
        assert got != prev, r
        assert stack.greedy(stack.vllm.model, prompt) == base, r
        prev = got


@needs_vllm
def test_a_request_in_flight_across_a_load(stack):
    """A request for "a" admitted before a load (its LoRARequest names the
    previous version, which the export no longer holds) runs on across the
    load and ends normally: its steps never reload, never bring the previous
    version back. vLLM's /pause?mode=keep holds it in flight while the next
    version is committed and loaded; after /resume it completes, and new
    requests get the new version."""
    prompt = prompt_ids(32, 24)
    stack.serve("a", "live-1", _adapter(stack, A_TARGETS, 200))
    long_n = 160
    # The pause must land while the request runs: on a loaded host the
    # 160 tokens can be done before vLLM takes the pause (CI once saw no
    # request running at the pause, beside the other jobs), which leaves
    # nothing in flight to test; then the request, which must have ended
    # whole, is let be and a new one started (3 tries at most).
    for attempt in range(3):
        out, tensors = _load_across_a_request(stack, prompt, long_n, 201 + attempt)
        if tensors is not None:
            break
        print(f"\n  try {attempt + 1}: the request ended ({len(out['tokens'])} "
              "tokens) before vLLM took the pause; again")
    assert tensors is not None, "the request never was in flight at a pause"
    assert "error" not in out, out.get("error")
    assert out["finish"] == "length" and len(out["tokens"]) == long_n
    assert stack.vllm.healthy()
    assert stack.greedy("a", prompt_ids(33)) == stack.reference(tensors, prompt_ids(33))


def _load_across_a_request(stack, prompt, long_n, seed):
    """Streams a request of long_n tokens for "a"; at its first token
    pauses vLLM (mode=keep) and, if the request is in flight then, loads a
    new version of "a" before /resume. Returns (what the stream got, the
    loaded tensors), or tensors None when the request had ended before
    the pause took hold (nothing loaded; the stream is over)."""
    started, out = threading.Event(), {"tokens": [], "finish": None}

    def stream():
        body = {"model": "a", "prompt": prompt, "max_tokens": long_n,
                "min_tokens": long_n, "temperature": 0, "stream": True,
                "return_token_ids": True}
        req = urllib.request.Request(
            stack.vllm.url + "/v1/completions", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                for line in r:
                    if not line.startswith(b"data: "):
                        continue
                    data = line[6:].strip()
                    if data == b"[DONE]":
                        break
                    choice = json.loads(data)["choices"][0]
                    out["tokens"] += choice.get("token_ids") or []
                    out["finish"] = choice.get("finish_reason") or out["finish"]
                    started.set()
        except Exception as e:  # noqa: BLE001  (reported by the caller)
            out["error"] = e
        finally:
            started.set()

    t = threading.Thread(target=stream)
    t.start()
    tensors = None
    try:
        assert started.wait(120), "no first token in 120 s"
        assert "error" not in out, out.get("error")
        stack.vllm.post("/pause?mode=keep")
        try:
            if _running(stack) == 1:
                tensors = _adapter(stack, A_TARGETS, seed)
                stack.serve("a", "live-2", tensors)
            else:
                # not in flight: it must have ended, and whole
                t.join(30)
                assert not t.is_alive() and out["finish"] == "length", (
                    "the request was not in flight at the pause, yet it has "
                    f"not ended whole: {out}")
        finally:
            stack.vllm.post("/resume")
    finally:
        t.join(300)
    assert not t.is_alive()
    return out, tensors


def _running(stack) -> int:
    """Requests vLLM's scheduler holds as running (its /metrics gauge)."""
    with urllib.request.urlopen(stack.vllm.url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("vllm:num_requests_running"):
                return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError("vLLM's /metrics has no vllm:num_requests_running")


@needs_vllm
def test_two_adapters_in_alternate_rounds(stack):
    """Adapters "a" (q_proj, v_proj) and "b" (o_proj, up_proj, down_proj),
    updated in alternate rounds: after each load every request is served by
    its own adapter's current version (plain torch's tokens for each)."""
    prompt = prompt_ids(41)
    current = {}
    for r in range(4):
        name = "ab"[r % 2]
        tensors = _adapter(stack, A_TARGETS if name == "a" else B_TARGETS, 300 + r)
        stack.serve(name, f"{name}-alt-{r}", tensors)
        current[name] = tensors
        for n, t in current.items():
            assert stack.greedy(n, prompt) == stack.reference(t, prompt), (r, n)
    assert stack.greedy("a", prompt) != stack.greedy("b", prompt)


@needs_vllm
def test_an_evicted_adapter_comes_back(stack):
    """Five adapters through vLLM's CPU cache of four (--max-cpu-loras 4):
    the first is evicted; its next request loads the version last loaded
    for it from the export again (plain torch's tokens)."""
    prompt = prompt_ids(61)
    adapters = {}
    for i in range(5):
        name = f"e{i}"
        adapters[name] = _adapter(stack, A_TARGETS, 500 + i)
        stack.serve(name, f"{name}-1", adapters[name])
        if i == 0:
            first = _loaded_ids(stack)[-1]  # ids grow: e0's is the newest
    assert first not in _loaded_ids(stack), "e0 was not evicted"
    assert stack.greedy("e0", prompt) == stack.reference(adapters["e0"], prompt)
    assert first in _loaded_ids(stack)
    for name, tensors in adapters.items():  # e1 is evicted now, and so on
        assert stack.greedy(name, prompt) == stack.reference(tensors, prompt), name


def _loaded_ids(stack) -> list:
    """The LoRA int ids vLLM's worker holds (vLLM's list_loras, through its
    dev-mode /collective_rpc)."""
    out = stack.vllm.post("/collective_rpc", {"method": "list_loras"})
    return sorted(out["results"][0])


@needs_vllm
def test_a_base_round_under_an_adapter(stack):
    """A round of base weights (wt's weight-transfer backend driven by
    vLLM's trainer API) resets vLLM's LoRA state; the adapter's next
    request loads the version it served again from its export, on the new
    base: plain torch's tokens for the new base with the adapter merged.
    The checkpoint's weights go back in a second round."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from tiny_llama import random_weights
    from vllm.distributed.weight_transfer.base import ModuleSource
    from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
    from wt_transfer.vllm_backend import WtTrainerInitInfo
    prompt = prompt_ids(71)
    tensors = _adapter(stack, A_TARGETS, 700)
    stack.serve("a", "over-base", tensors)
    assert stack.greedy("a", prompt) == stack.reference(tensors, prompt)
    m = LlamaForCausalLM(LlamaConfig.from_pretrained(stack.model)).to(torch.float32)
    engine = WeightTransferTrainerFactory.trainer_init(
        WtTrainerInitInfo(rank=0, servers=[stack.base_server.addr],
                          export=stack.base_sock),
        client=HTTPVLLMWeightSyncClient(stack.vllm.url), source=ModuleSource(m))

    def send(weights, version):
        with torch.no_grad():
            for name, p in m.named_parameters():
                p.copy_(torch.from_numpy(weights[name]))
        engine.send_weights(version)

    try:
        new_base = random_weights(stack.model, 701)
        send(new_base, "base-1")
        assert _loaded_ids(stack) == []  # vLLM dropped every adapter
        assert stack.greedy(stack.vllm.model, prompt) == \
            stack.reference(None, prompt, base=new_base)
        assert stack.greedy("a", prompt) == \
            stack.reference(tensors, prompt, base=new_base)
    finally:
        send(stack.base, "base-2")
        engine.shutdown()
    assert stack.greedy("a", prompt) == stack.reference(tensors, prompt)


@needs_vllm
def test_refusals_leave_the_served_version(stack):
    """vLLM's own refusals, through the trainer's call: a version of rank 32
    (over --max-lora-rank 16), one with a target module the model lacks,
    and one the export no longer holds; each raises naming the server and
    the adapter with vLLM's (or wt's) words, and "a" keeps serving the
    version loaded before."""
    import wt_transfer as wt
    from wt_transfer.lora import load_adapter_on_vllm, lora_path
    prompt = prompt_ids(51)
    tensors = _adapter(stack, A_TARGETS, 400)
    stack.serve("a", "kept", tensors)
    served = stack.greedy("a", prompt)
    assert served == stack.reference(tensors, prompt)

    def refused(path, error=wt.WtError) -> str:
        """Loading `path` raises `error`; "a" still serves `served`."""
        with pytest.raises(error) as e:
            load_adapter_on_vllm(stack.vllm.url, "a", path)
        msg = str(e.value)
        print(f"refused: {type(e.value).__name__}: {msg}")
        assert stack.greedy("a", prompt) == served
        return msg

    export, version, seq = stack.push_adapter(
        "a", "rank-32", _adapter(stack, A_TARGETS, 401, rank=32))
    msg = refused(lora_path(export, "a", version, seq, ALPHA))
    assert "LoRA rank 32 is greater than max_lora_rank 16." in msg, msg
    assert stack.vllm.url in msg and "adapter 'a'" in msg, msg

    export, version, seq = stack.push_adapter(
        "a", "x-proj", _adapter(stack, NO_SUCH_TARGET, 402))
    msg = refused(lora_path(export, "a", version, seq, ALPHA))
    assert "expected target modules in" in msg, msg
    assert "but received ['model.layers.0.self_attn.x_proj'" in msg, msg
    assert f"While loading wt:{export}?adapter=a&" in msg, msg

    # a version the export does not hold: wt's NotFound, naming what it holds
    msg = refused(lora_path(export, "a", "no-such", seq, ALPHA), wt.NotFound)
    assert "adapter 'a': version 'no-such'" in msg and "'x-proj'" in msg, msg
    assert stack.vllm.healthy()


@needs_vllm
def test_a_tensor_of_the_wrong_shape_leaves_the_served_version(stack):
    """vLLM checks no adapter tensor's shape against the model's modules
    (with load_inplace it would drop the served version, then fail at
    activation or in the forward); wt's loader refuses first: a lora_B of
    100 outputs for q_proj (a slice of vLLM's packed qkv_proj: 128), a
    lora_A of 200 inputs for down_proj (256). Each raises naming the path,
    the tensor, its shape and the module's size; "a" keeps serving the
    version loaded before and vLLM stays healthy.

    The versions come through a second wt-server, of the synthetic model
    "tiny" (no layer 1), so that nothing but vLLM's side checks them: the
    one beside vLLM holds the tiny Llama and may refuse such shapes itself
    at a set's first init."""
    import shutil
    import tempfile
    import wt_transfer as wt
    from conftest import Server
    from lora_support import AdapterSets
    from wt_transfer.lora import load_adapter_on_vllm, lora_path
    d = tempfile.mkdtemp(prefix="wt-shape-")
    os.chmod(d, 0o700)
    other = Server(["--model", "synthetic:tiny", "--no-auth", "--memory", "shared",
                    "--export", os.path.join(d, "x.sock")])
    sets = AdapterSets(other, ALPHA)
    try:
        prompt = prompt_ids(81)
        tensors = _adapter(stack, A_TARGETS, 800)
        stack.serve("a", "shape-kept", tensors)
        served = stack.greedy("a", prompt)
        assert served == stack.reference(tensors, prompt)

        p = "base_model.model.model.layers.1."
        cases = [
            ({"self_attn.q_proj": (100, 128), "self_attn.v_proj": (64, 128)},
             f"tensor '{p}self_attn.q_proj.lora_B.weight' is [100, 8], but module "
             "model.layers.1.self_attn.q_proj has 128 outputs"),
            ({"self_attn.v_proj": (64, 128), "mlp.down_proj": (128, 200)},
             f"tensor '{p}mlp.down_proj.lora_A.weight' is [8, 200], but module "
             "model.layers.1.mlp.down_proj has 256 inputs"),
        ]
        for i, (targets, words) in enumerate(cases):
            bad = {k: v for k, v in _adapter(stack, targets, 810 + i).items()
                   if k.startswith(p)}
            export, version, seq = sets.push("a", f"bad-shape-{i}", bad)
            path = lora_path(export, "a", version, seq, ALPHA)
            with pytest.raises(wt.FailedPrecondition) as e:
                load_adapter_on_vllm(stack.vllm.url, "a", path)
            msg = str(e.value)
            print(f"refused: {type(e.value).__name__}: {msg}")
            assert f"While loading {path}: {words}" in msg, msg
            assert stack.vllm.url in msg and "adapter 'a'" in msg, msg
            assert stack.greedy("a", prompt) == served, i
        assert stack.vllm.healthy()
    finally:
        sets.stop()
        other.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_lora_path_round_trip_and_refusals():
    """A wt lora_path names the export, the adapter, the version (any
    characters, percent-encoded), its sequence, alpha and worker, and reads
    back as written; a malformed one is InvalidArgument naming the field."""
    import wt_transfer as wt
    from wt_transfer.lora import AdapterSource, lora_path, parse_lora_path
    p = lora_path("/run/wt/a b.sock", "my-adapter", "step 3/a?b&c", 12, 16)
    assert p == ("wt:/run/wt/a%20b.sock?adapter=my-adapter&version=step%203%2Fa"
                 "%3Fb%26c&sequence=12&alpha=16.0&worker=0")
    assert parse_lora_path(p) == AdapterSource("/run/wt/a b.sock", "my-adapter",
                                               "step 3/a?b&c", 12, 16.0, 0)
    assert parse_lora_path(lora_path("/x.sock", "a", "v", 1, 0.5, worker=3)).worker == 3
    for bad, field in (
            ("wt:/x.sock", "no '?'"),
            ("wt:/x.sock?adapter=a&version=v&alpha=1", "no field 'sequence'"),
            ("wt:/x.sock?adapter=a&version=v&sequence=x&alpha=1", "field 'sequence'"),
            ("wt:/x.sock?adapter=a&version=v&sequence=0&alpha=1", "sequence:"),
            ("wt:/x.sock?adapter=a&version=v&sequence=1&alpha=nan", "alpha:"),
            ("wt:/x.sock?adapter=a&version=v&sequence=1&alpha=1&rank=8",
             "unknown field 'rank'"),
            ("wt:/x.sock?adapter=a&adapter=b&version=v&sequence=1&alpha=1",
             "field 'adapter' twice"),
            ("/some/dir", "not a wt path")):
        with pytest.raises(wt.InvalidArgument, match=field):
            parse_lora_path(bad)
    with pytest.raises(wt.InvalidArgument, match="version: a non-empty name"):
        lora_path("/x.sock", "a", "", 1, 16)


class _FakeVllm(http.server.BaseHTTPRequestHandler):
    """Answers /v1/load_lora_adapter as vLLM does: 200 with text, or its
    error JSON; the server's `answer` says which."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append((self.path, body))
        code, text = self.server.answer
        self.send_response(code)
        self.end_headers()
        self.wfile.write(text.encode())

    def log_message(self, *a):
        pass


def _fake_vllm(answer):
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeVllm)
    s.answer, s.bodies = answer, []
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s, f"http://127.0.0.1:{s.server_address[1]}"


def test_load_adapter_on_vllm_posts_and_names_failures():
    """The trainer's call posts vLLM's load request to every server and
    names the server, the adapter and vLLM's words in a failure: a worker's
    wt class comes back as that class (the "<path>" vLLM writes for the
    export's path as the path), vLLM's refusals as FailedPrecondition, a
    vLLM without the route says how to start it, a server not there is
    Unavailable; `.results` and `.failures` say how each server ended."""
    import wt_transfer as wt
    from wt_transfer.lora import load_adapter_on_vllm, lora_path
    path = lora_path("/tmp/wt/a.sock", "a", "v1", 1, 16)
    ok, ok_url = _fake_vllm((200, "Success: LoRA adapter 'a' added successfully."))
    refused, refused_url = _fake_vllm((500, json.dumps({"error": {
        "message": "Call to add_lora method failed: [wt:NOT_FOUND] adapter 'a': "
                   "version 'v1' (sequence 1): export <path>: version 'v1' is "
                   "not held", "type": "InternalServerError", "code": 500}})))
    try:
        got = load_adapter_on_vllm(ok_url, "a", path)
        assert got[ok_url]["message"].startswith("Success")
        assert ok.bodies == [("/v1/load_lora_adapter", {
            "lora_name": "a", "lora_path": path, "load_inplace": True})]

        with pytest.raises(wt.NotFound) as e:
            load_adapter_on_vllm([ok_url, refused_url], "a", path)
        assert str(e.value) == (
            f"{refused_url} /v1/load_lora_adapter: adapter 'a' ({path}): HTTP 500: "
            "Call to add_lora method failed: adapter 'a': version 'v1' (sequence "
            "1): export /tmp/wt/a.sock: version 'v1' is not held")
        assert list(e.value.results) == [ok_url]
        assert list(e.value.failures) == [refused_url]

        refused.answer = (500, json.dumps({"error": {
            "message": "Call to add_lora method failed: Worker failed with error "
                       "'LoRA rank 32 is greater than max_lora_rank 16.'"}}))
        with pytest.raises(wt.FailedPrecondition,
                           match="adapter 'a' .*LoRA rank 32 is greater"):
            load_adapter_on_vllm(refused_url, "a", path)

        refused.answer = (404, json.dumps({"detail": "Not Found"}))
        with pytest.raises(wt.FailedPrecondition,
                           match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
            load_adapter_on_vllm(refused_url, "a", path)
    finally:
        for s in (ok, refused):
            s.shutdown()
            s.server_close()
    with pytest.raises(wt.Unavailable, match=f"{refused_url} .*adapter 'a'"):
        load_adapter_on_vllm(refused_url, "a", path, timeout=5)
    with pytest.raises(wt.InvalidArgument, match="field 'alpha'"):
        load_adapter_on_vllm(ok_url, "a", path.replace("alpha=16.0", "alpha=x"))
