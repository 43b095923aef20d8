"""Cluster placement by a device's backend, never by its name: a device called `gpu` on torch-cuda lands on the GPU
partition (queue) with one GPU, a device called `cuda` on onnxruntime on the CPU one with none.

The rules ask for `gpu` from the device class (`gpu = True`), and the Snakefile lists the devices whose backend times
on a GPU in $AOWS_GPU_DEVICES, which the slurm and cluster-generic profiles' expressions read. The fast test evaluates
the profiles' expressions with Snakemake's own evaluator; the slow one dry-runs the workflow through both profiles.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from aows_core import config as aows_config

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "workflow" / "profiles"
TIMING = ("profile", "measure", "decode", "decide_baseline")
DEVICES = {"gpu": {"backend": "torch-cuda", "batch_size": 16}, "cuda": {"backend": "onnxruntime"},
           "flops": {"backend": "flops"}}
# (partition or queue resource, its value on a GPU device, on another) of each profile's placement
PLACEMENT = {"slurm": ("slurm_partition", "gpu", "cpu"), "cluster-generic": ("queue", "gpu-timing.q", "cpu-timing.q")}


def expected(profile: str, device: str) -> dict[str, str]:
    key, on_gpu, on_cpu = PLACEMENT[profile]
    gpu = DEVICES[device]["backend"] == "torch-cuda"
    return {key: on_gpu if gpu else on_cpu, "gpu": "1" if gpu else "0"}


@pytest.mark.parametrize("profile", sorted(PLACEMENT))
def test_profile_expressions_place_by_backend(profile, monkeypatch):
    from snakemake.iocontainers import Wildcards
    from snakemake.resources import Resource

    cfg = aows_config.validate({"devices": DEVICES})
    gpu = aows_config.gpu_devices(aows_config.device_backends(cfg))
    assert gpu == ["gpu"]
    monkeypatch.setenv("AOWS_GPU_DEVICES", ",".join(gpu))  # as workflow/rules/common.smk sets it
    rules = yaml.safe_load((PROFILES / profile / "config.yaml").read_text())["set-resources"]
    key = PLACEMENT[profile][0]
    for rule in TIMING:
        assert "gpu" not in rules[rule], f"{profile}: {rule} takes its gpu from the rule (the device class)"
        for device in DEVICES:
            wildcards = Wildcards(fromdict={"device": device})
            value = Resource.cli_evaluator(key, rules[rule][key], wildcards=wildcards, input=[], attempt=1,
                                           async_run=None)
            assert value == expected(profile, device)[key], (rule, device)
    assert "== 'cuda'" not in (PROFILES / profile / "config.yaml").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("profile", sorted(PLACEMENT))
def test_dry_run_places_timing_jobs_by_backend(profile, tmp_path):
    import subprocess

    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"devices": DEVICES}))
    env = {k: v for k, v in os.environ.items() if k != "AOWS_GPU_DEVICES"}
    r = subprocess.run(["snakemake", "-s", str(ROOT / "workflow" / "Snakefile"), "--directory", str(tmp_path),
                        "--cores", "2", "-n", "--profile", str(PROFILES / profile),
                        "results/measure/gpu.parquet", "results/measure/cuda.parquet"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    seen = set()
    for chunk in re.split(r"\n(?=(?:local)?(?:rule|checkpoint) \w+:)", r.stdout):
        rule = re.match(r"(?:rule|checkpoint) (\w+):", chunk)
        device = re.search(r"^\s+wildcards: .*?\bdevice=([\w-]+)", chunk, re.M)
        if not (rule and device and rule.group(1) in TIMING):
            continue
        rule, device = rule.group(1), device.group(1)
        line = re.search(r"^\s+resources: (.*)$", chunk, re.M).group(1)
        resources = dict(kv.split("=", 1) for kv in line.split(", "))
        want = expected(profile, device)
        assert {k: resources.get(k) for k in want} == want, (rule, device)
        seen.add((rule, device))
    assert {("profile", "gpu"), ("profile", "cuda"), ("decode", "gpu"), ("decode", "cuda")} <= seen
