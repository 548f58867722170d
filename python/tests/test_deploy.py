"""The deployment recipes in deploy/: the systemd unit passes
systemd-analyze verify and scores as hardened; every configuration they
carry is one wt-server accepts; the Kubernetes manifests validate against
the API's schemas (kubernetes-validate) and probe, scrape and mount what
docs/operations.md says; the container recipe installs packages Debian 12
has. What needs a running systemd, a container engine with a registry or
a cluster is not run here (docs/operations.md says so)."""

import json
import pathlib
import shutil
import subprocess

import pytest

from conftest import _server_bin

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def accepts_config(text: str, tmp_path) -> None:
    f = tmp_path / "wt.json"
    f.write_text(text)
    r = subprocess.run([_server_bin(), "--config", str(f), "--print-config"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)) == set(json.loads(text))  # every key taken


def test_systemd_unit(tmp_path):
    sa = shutil.which("systemd-analyze")
    if sa is None:
        pytest.skip("no systemd-analyze here")
    unit = (DEPLOY / "systemd" / "wt-server.service").read_text()
    assert "DynamicUser=yes" in unit and "NoNewPrivileges=yes" in unit
    assert "ProtectSystem=strict" in unit and "RuntimeDirectory=wt" in unit
    # verify checks that ExecStart's binary exists: point it at the build's.
    f = tmp_path / "wt-server.service"
    f.write_text(unit.replace("/usr/local/bin/wt-server", _server_bin()))
    r = subprocess.run([sa, "verify", str(f)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr
    r = subprocess.run([sa, "security", "--offline=yes", str(f)],
                       capture_output=True, text=True, timeout=60)
    line = [x for x in r.stdout.splitlines() if "Overall exposure level" in x]
    assert line, r.stdout[-500:] + r.stderr
    score = float(line[0].split("wt-server.service:")[1].split()[0])
    assert score <= 2.0, line[0]  # systemd calls 0 to 2 "OK", up to 10 "UNSAFE"


def test_configs_are_accepted(tmp_path):
    accepts_config((DEPLOY / "systemd" / "wt-server.json").read_text(), tmp_path)
    yaml = pytest.importorskip("yaml", reason="no PyYAML here")
    docs = list(yaml.safe_load_all((DEPLOY / "k8s" / "wt-server.yaml").read_text()))
    cm = [d for d in docs if d and d["kind"] == "ConfigMap"][0]
    accepts_config(cm["data"]["wt-server.json"], tmp_path)


def test_kubernetes_manifests():
    kv = pytest.importorskip("kubernetes_validate",
                             reason="no kubernetes-validate here (pip install "
                             "kubernetes-validate)")
    yaml = pytest.importorskip("yaml", reason="no PyYAML here")
    docs = [d for d in yaml.safe_load_all((DEPLOY / "k8s" / "wt-server.yaml").read_text()) if d]
    version = kv.latest_version()
    for d in docs:
        kv.validate(d, version, strict=True)  # raises on any schema error
    ds = [d for d in docs if d["kind"] == "DaemonSet"][0]
    pod = ds["spec"]["template"]
    c = pod["spec"]["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == 50051, probe
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == "9464"
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["tokens"]["secret"]["secretName"] == "wt-tokens"
    assert vols["tokens"]["secret"]["defaultMode"] == 0o400
    assert vols["export"]["hostPath"]["path"] == "/run/wt"
    assert "--token-file" in c["args"]
    # metrics on the pod's address, reached by the monitoring namespace only
    assert c["args"][c["args"].index("--metrics-listen") + 1] == "$(POD_IP):9464"
    assert "metrics-listen" not in [d for d in docs if d["kind"] == "ConfigMap"][0][
        "data"]["wt-server.json"]
    pol = [d for d in docs if d["kind"] == "NetworkPolicy"][0]
    metrics_rule = [r for r in pol["spec"]["ingress"]
                    if any(p["port"] == 9464 for p in r["ports"])][0]
    assert metrics_rule["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"}
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"]
    inference = [d for d in docs if d["kind"] == "Pod"][0]
    assert inference["spec"]["volumes"][0]["hostPath"]["path"] == "/run/wt"


def test_container_recipe_packages():
    text = (DEPLOY / "container" / "Containerfile").read_text()
    if shutil.which("apt-cache") is None:
        pytest.skip("no apt-cache here")
    import re
    stages = re.findall(r"apt-get install[^\n]*--no-install-recommends((?:[^\n]*\\\n)+[^\n]*)", text)
    assert len(stages) == 2
    for stage in stages:
        for pkg in re.findall(r"\b[a-z0-9][a-z0-9.+-]+\b", stage.split("&&")[0]):
            r = subprocess.run(["apt-cache", "show", pkg], capture_output=True,
                               text=True, timeout=60)
            assert r.returncode == 0 and "Package: " + pkg in r.stdout, pkg
    assert 'ENTRYPOINT ["/opt/wt/bin/wt-server"' in text
