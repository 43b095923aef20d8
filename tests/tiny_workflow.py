"""The tiny workflow configuration the workflow tests run, the session fixtures that run it, and helpers to run
and read Snakemake.

Not a test module: tests/conftest.py imports its fixtures and tests/workflow/ its helpers (tests/ is on sys.path
via conftest, as for stage_calls).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEFILE = ROOT / "workflow" / "Snakefile"

# One retraining seed: the per-seed paths are exercised by the twins test, which asks for two.
TINY = {
    "seed": 0,
    "space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25},
    "devices": {
        "synth": {"backend": "synthetic", "noise": 0.01, "drift": 0.1},
        "flops": {"backend": "flops"},
    },
    "sampling": {"coverage": 2, "lambda_val": 20, "test": 40},
    "profiling": {"repeats": 5, "retest": 10},
    "lut": {"lambdas": [0.0, 1e-3, 1e-1]},
    "decode": {"targets": ["range:0.3", "range:0.8"]},
    "data": {"train_subset": 256, "search_val": 64, "calibration": 64},
    "supernet": {"epochs": 2, "batch_size": 64},
    "aows": {"warmup_epochs": 1, "targets": ["range:0.5"]},
    "greedy": {"n_eval": 64, "n_cal": 64, "batch_size": 64},
    "retrain": {"epochs": 1, "batch_size": 64, "eval_batch_size": 2000, "seeds": [0]},
}
RETRAINED = ["results/retrain/synth/aows/range:0.5/seed0/result.parquet",
             "results/retrain/flops/greedy/range:0.3/seed0/result.parquet",
             "results/export/synth/aows/range:0.5/seed0/model.onnx"]


def smk(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Snakemake on the repository's workflow in `workdir` on 2 cores, output captured."""
    cmd = ["snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir), "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


def planned(stdout: str) -> dict[str, int]:
    """{rule: number of jobs} of a dry run's job table."""
    counts, table = {}, False
    for line in stdout.splitlines():
        if line.startswith("job ") and "count" in line:
            table = True
        elif table and line.strip() and not line.startswith("---"):
            name, *rest = line.split()
            if name == "total":
                break
            counts[name] = int(rest[0])
    return counts


def copy_run(src: Path, dst: Path) -> Path:
    """A finished run elsewhere (results, Snakemake's records, config), modification times kept."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


OWS_RESUME = "results/.resume/supernet/ows/checkpoint.pt"


def kill_mid_ows_training(workdir: Path, *targets: str, cores: int = 1, timeout: float = 300) -> dict:
    """Snakemake on `targets` in `workdir`, SIGKILLed (the whole job tree, so no clean-up runs) as soon as the OWS
    supernet has written its first resume checkpoint; what the kill left: the checkpoint's (epoch, step) (None
    without one) and whether the supernet's model was written."""
    import os
    import signal
    import time

    import torch

    cmd = ["snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir), "--cores", str(cores), *targets]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ckpt = workdir / OWS_RESUME
    deadline = time.time() + timeout
    while time.time() < deadline and not ckpt.exists() and proc.poll() is None:
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # mid-training: the checkpoint is there, the model not yet
    except ProcessLookupError:  # it had ended on its own (recorded: killed_by_signal is False)
        pass
    proc.wait()
    state = torch.load(ckpt, weights_only=False) if ckpt.exists() else None
    smk(workdir, "--unlock")  # a SIGKILLed Snakemake leaves its lock (a Ctrl-C would release it)
    return {"killed_by_signal": proc.returncode == -signal.SIGKILL,
            "checkpoint": None if state is None else [state["epoch"], state["step"]],
            "model_written": (workdir / "results/supernet/ows/model.pt").exists()}


def bar_start(log: str, desc: str) -> tuple[int, int] | None:
    """(position, total) of the first render of the tqdm bar `desc` in a job's log: where the job started (or
    resumed); None if the bar never showed."""
    import re

    m = re.search(rf"{desc}:\s+\d+%\|[^|]*\|\s*(\d+)/(\d+)", log)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def group_tiny_run_tests(items: list[pytest.Item]) -> None:
    """Mark every test that reads the tiny runs for one pytest-xdist worker (`--dist loadgroup`), which makes them once.

    pytest-xdist 3.8 turns the mark into a node-id suffix that pytest 9 ignores (each worker then made its own tiny
    runs: 25 min instead of 10); pyproject keeps pytest below 9 and tests/test_xdist_groups.py checks the effect."""
    for item in items:
        if {"tiny_run", "pareto_run"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("tiny_run"))


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A finished tiny run of every rule (both devices, all methods, the retrained and exported finalists).

    Tests that change its config.yaml put TINY back before they return."""
    wd = tmp_path_factory.mktemp("wf")
    (wd / "config.yaml").write_text(yaml.safe_dump(TINY))
    r = smk(wd, "all", "latency_models", "decisions", *RETRAINED, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    (wd / "tiny_run.log").write_text(r.stdout + r.stderr)  # the jobs it ran
    return wd


# The settings the quick-start-like run is made with: TINY but for larger supernet and retraining batches (fewer
# steps), so that test_a_changed_setting_... changes a supernet and a retraining setting on it and lands on TINY's.
PRE = {**TINY, "supernet": {**TINY["supernet"], "batch_size": 128}, "retrain": {**TINY["retrain"], "batch_size": 128}}


@pytest.fixture(scope="session")
def pareto_run(tiny_run, tmp_path_factory):
    """A finished tiny run made with the README's main command's target (`results/pareto_synth.pdf`, the synthetic
    device) under PRE: what a user has after the quick start, for its follow-up commands.

    It is made the hard way, to check resuming on the way: profiling and the LUT copied from `tiny_run`, the run
    SIGKILLed (the whole job tree) while the OWS supernet trains, after its first resume checkpoint, then completed
    with `--rerun-incomplete`. What test_a_killed_run_... checks is recorded in `killed.json`."""
    import json

    wd = tmp_path_factory.mktemp("pareto_run")
    (wd / "config.yaml").write_text(yaml.safe_dump(PRE))
    for d in ("latency", "lut"):
        shutil.copytree(tiny_run / "results" / d, wd / "results" / d)
    lut = wd / "results/lut/synth/lut.parquet"
    before = lut.stat().st_mtime_ns
    killed = kill_mid_ows_training(wd, "results/pareto_synth.pdf")
    r = smk(wd, "--rerun-incomplete", "results/pareto_synth.pdf", check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    (wd / "killed.json").write_text(json.dumps({
        **killed, "lut_kept": lut.stat().st_mtime_ns == before,
        "resumed_at": bar_start((wd / "results/logs/train_ows.log").read_text(), "supernet ows"),
        "reprofiled": any(f"rule {rule}:" in r.stdout + r.stderr for rule in ("profile", "fit_lut"))}))
    return wd
