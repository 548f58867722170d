#!/usr/bin/env bash
# Installs every package wt's build, tests and tools need on Debian 12.
# Idempotent: packages already present are skipped quickly.
# Python packages (for the interop and fixture tests) come from PyPI; their
# absence makes those tests skip with a message, never fail the build.
set -euo pipefail

DEBS=(
  build-essential cmake pkg-config clang libclang-rt-dev clang-format cppcheck
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
  libcunit1-dev libucx-dev ucx-utils libjansson-dev libssl-dev libxxhash-dev libmicrohttpd-dev libzstd-dev
  python3 python3-pip python3-venv iproute2 procps openssl tmux systemd
)
PIP=(safetensors numpy grpcio grpcio-tools protobuf h2 pytest pytest-xdist grpcio-health-checking
     prometheus_client grpcio-reflection kubernetes-validate pyyaml)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if command -v "$PY" >/dev/null 2>&1; then
  if ! "$PY" -c 'import safetensors, numpy, grpc, grpc_tools, h2, pytest, xdist, grpc_health.v1, prometheus_client, grpc_reflection.v1alpha, kubernetes_validate, yaml' >/dev/null 2>&1; then
    echo "install-deps: pip install ${PIP[*]}"
    "$PY" -m pip install -q --disable-pip-version-check "${PIP[@]}" 2>/dev/null ||
      "$PY" -m pip install -q --disable-pip-version-check --break-system-packages "${PIP[@]}" ||
      echo "install-deps: warning: pip install failed; Python interop tests will be skipped"
  fi
fi
echo "install-deps: ok"
