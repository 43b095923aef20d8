#!/usr/bin/env bash
# Snakemake runs this inside the freshly created envs/aows.yaml environment (`--sdm conda`), from
# the workflow's working directory. It installs the aows package (editable, so the rules always run
# the checkout's code; its dependencies are already in the environment from envs/aows.yaml).
# Snakemake runs a copy of this script from .snakemake/conda/, so the checkout is found as the
# working directory (the usual `snakemake` call from the repository root) or AOWS_ROOT.
set -euo pipefail
root="${AOWS_ROOT:-$PWD}"
if ! grep -qs '^name = "aows"' "$root/pyproject.toml"; then
    echo "envs/aows.post-deploy.sh: no aows checkout at $root (pyproject.toml of project aows);" \
         "run snakemake from the repository root or set AOWS_ROOT to it" >&2
    exit 1
fi
python -m pip install --no-deps -e "$root"
