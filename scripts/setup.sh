#!/usr/bin/env bash
# All set-up on a fresh Debian/Ubuntu machine: Debian's Fashion-MNIST package, then a virtual environment in
# .venv with the pinned Python packages (a system Python is externally managed, PEP 668: pip refuses it).
# Idempotent: a second run installs nothing. Use it with `. .venv/bin/activate`. PYTHON picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
PY=${PYTHON:-python3}

apt_install() {
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

missing=()
dpkg -s dataset-fashion-mnist >/dev/null 2>&1 || missing+=(dataset-fashion-mnist)
# Debian and Ubuntu ship venv's pip bootstrap (ensurepip) apart, in python3-venv.
if [ ! -x .venv/bin/python ] && ! "$PY" -c "import ensurepip, venv" >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPY=.venv/bin/python
# Everything below is already satisfied on a second run: pip then checks and installs nothing.
stamp=.venv/.aows-installed
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$VPY" -c "import aows_core, torch, torchvision, snakemake" 2>/dev/null; then
  # torch/torchvision first, pinned: these versions install from local wheels on our machines.
  "$VPY" -m pip install -q --disable-pip-version-check torch==2.14.1 torchvision==0.29.1
  "$VPY" -m pip install -q --disable-pip-version-check -e '.[test]'
  echo "$want" > "$stamp"
fi
