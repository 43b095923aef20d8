#!/usr/bin/env bash
# All set-up on a fresh machine: the Debian Fashion-MNIST package and the Python packages (pinned).
# Idempotent: a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

if ! dpkg -s dataset-fashion-mnist >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist
fi

PY=${PYTHON:-python3}
# torch/torchvision first, pinned: these versions install from local wheels on our machines.
"$PY" -m pip install -q --disable-pip-version-check torch==2.14.1 torchvision==0.29.1
"$PY" -m pip install -q --disable-pip-version-check -e '.[test]'
