"""Many trainer ranks, one version, with torch itself: 4 processes on gloo,
a tiny model under FSDP2's fully_shard (plus a tensor sharded on dimension 1
and a replicated one), every rank sending its own shards zero-copy to two
wt-servers (multirank_rank.py is one rank). Runs where torch imports (the
vLLM CPU venv in CI, WT_REQUIRE_TORCH=1 there); skipped elsewhere."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

import wt_transfer as wt

if os.environ.get("WT_REQUIRE_TORCH") != "1":
    pytest.importorskip("torch", reason="torch is not installed here "
                        "(scripts/test.sh runs this in the vLLM venv)")

HERE = pathlib.Path(__file__).parent
RANK = HERE / "multirank_rank.py"
W = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mr") / "tiny.safetensors"
    subprocess.run([sys.executable, str(RANK), "model", str(path)], check=True,
                   timeout=120)
    return path


def ranks(servers, out, *, backend="grpc", rounds=20, extra=(), timeout=240):
    """Runs the 4 ranks to their end; their results by rank."""
    port = free_port()
    procs = []
    for r in range(W):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(W),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            [sys.executable, str(RANK), "run", "--servers",
             ",".join(s.addr for s in servers), "--backend", backend,
             "--rounds", str(rounds), "--out", str(out), *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + timeout
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=max(1, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("a rank hung:\n" + "\n".join(
                q.communicate()[0][-3000:] for q in procs))
    results = {}
    for r in range(W):
        f = out / f"rank-{r}.json"
        results[r] = json.loads(f.read_text()) if f.exists() else None
    return procs, results, logs


def two_servers(start_server, model_file, backend):
    """Two servers of the test's model; skips a backend this build lacks."""
    servers = [start_server("--model", str(model_file), "--no-auth")
               for _ in range(2)]
    with wt.Client(servers[0].addr) as c:
        if not any(b.get("name") == backend and b.get("available")
                   for b in c.server_info().get("backend_info", [])):
            pytest.skip(f"backend '{backend}' is not in this build")
    return servers


def servers_hold(servers, digests, version):
    for s in servers:
        with wt.Client(s.addr) as c:
            assert c.version().version == version
            assert c.checksums() == digests, s.addr


@pytest.mark.parametrize("backend", ["grpc", "ucx"])
def test_fsdp2_four_ranks_twenty_rounds(start_server, model_file, tmp_path,
                                        backend):
    servers = two_servers(start_server, model_file, backend)
    procs, results, logs = ranks(servers, tmp_path, backend=backend)
    assert [p.returncode for p in procs] == [0] * W, "\n".join(logs)
    digests = json.loads((tmp_path / "digests-19.json").read_text())
    servers_hold(servers, digests, "step-19")
    # One plan on every rank; every rank sent something (the replicated
    # tensor from one of them only); rank 3's shard of the 6-row weight is
    # empty and sends nothing of it.
    assert len({results[r]["digest"] for r in range(W)}) == 1
    sent = [set(results[r]["boxes"]) for r in range(W)]
    assert sum("extra.rep" in s for s in sent) == 1
    assert all("extra.col" in s for s in sent)
    assert "2.weight" in sent[0] and "2.weight" not in sent[3]
    print(f"{backend}: 4 ranks x 20 rounds to 2 servers; rank peaks (KiB): "
          f"{[results[r]['peak_rss_kib'] for r in range(W)]}")


@pytest.mark.parametrize("backend", ["grpc", "ucx"])
def test_fsdp2_400mib_to_two_servers(start_server, tmp_path, backend):
    """docs/multirank.md's shape at size (issue 45, item 2): 4 gloo ranks
    under fully_shard, about 400 MiB (a 100 MiB shard per rank), to two
    servers, 5 rounds, every digest equal to full_tensor(). Each server
    takes the ranks' pushes in rank order, so a rank's lockstep sends to
    both servers never wait on one server for a rank the other serves."""
    model = tmp_path / "big.safetensors"
    subprocess.run([sys.executable, str(RANK), "model", str(model),
                    "--size", "big"], check=True, timeout=300)
    servers = two_servers(start_server, model, backend)
    out = tmp_path / "out"
    out.mkdir()
    t0 = time.monotonic()
    procs, results, logs = ranks(servers, out, backend=backend, rounds=5,
                                 extra=("--size", "big"), timeout=600)
    took = time.monotonic() - t0
    assert [p.returncode for p in procs] == [0] * W, "\n".join(l[-3000:] for l in logs)
    digests = json.loads((out / "digests-4.json").read_text())
    servers_hold(servers, digests, "step-4")
    print(f"{backend}: 4 FSDP2 ranks, {model.stat().st_size >> 20} MiB, 5 rounds "
          f"to 2 servers in {took:.1f} s (training included)")


@pytest.mark.parametrize("backend", ["grpc", "ucx"])
def test_a_rank_sigkilled_mid_round_commits_nothing(start_server, model_file,
                                                    tmp_path, backend):
    servers = two_servers(start_server, model_file, backend)
    out = tmp_path / "killed"
    out.mkdir()
    procs, results, logs = ranks(servers, out, backend=backend, rounds=6, extra=(
        "--kill-rank", "2", "--kill-round", "3", "--timeout-ms", "5000"))
    assert procs[2].returncode == -signal.SIGKILL, "\n".join(logs)
    for r in (0, 1, 3):
        res = results[r]
        assert res is not None and "error" in res, (r, logs[r][-2000:])
        assert res["committed"] == ["step-0", "step-1", "step-2"], res
        # Within the data deadline (5 s), plus the calls' own time.
        assert res["error_after_s"] < 5 + 10, res
    errors = " | ".join(results[r]["error"] for r in (0, 1, 3))
    print("the other ranks heard:", errors[:600])
    digests = json.loads((out / "digests-2.json").read_text())
    servers_hold(servers, digests, "step-2")
    # A new init (the ranks restarted, a new plan) commits the next round.
    again = tmp_path / "again"
    again.mkdir()
    procs, results, logs = ranks(servers, again, backend=backend, rounds=1)
    assert [p.returncode for p in procs] == [0] * W, "\n".join(logs)
    servers_hold(servers, json.loads((again / "digests-0.json").read_text()),
                 "step-0")
