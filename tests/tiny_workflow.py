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
    "decode": {"targets": ["range:0.3", "range:0.8"], "device_targets": {"flops": ["range:0.3"]}},
    "data": {"train_subset": 256, "search_val": 64, "calibration": 64},
    # the unaries' estimation passes at a fourth to a tenth of their default sizes: three quarters of a supernet's
    # training time otherwise
    "supernet": {"epochs": 2, "batch_size": 64, "estimate_configs": 100, "estimate_images": 256},
    "aows": {"warmup_epochs": 1, "targets": ["range:0.5"], "device_targets": {"flops": []}, "estimate_configs": 20,
             "final_configs": 100},
    "greedy": {"n_eval": 64, "n_cal": 64, "batch_size": 64},
    "retrain": {"epochs": 1, "batch_size": 64, "eval_batch_size": 2000, "seeds": [0]},
    # the golden snapshots (tests/workflow/test_golden.py, two platforms) were made at 3 rounds per verified network
    # and no session margin; at 5 rounds, the default, the OWS decisions stand on their first pick without a refit, and
    # a margin moves every decision, so their predictions differ
    "verify": {"rounds": 3, "margin": 0},
    # nor a measure that times on until the host is back at its profiled speed (D46): the synthetic host's speed drifts
    # by design (drift 0.1), and its measure times its 5 rounds alone, as when the snapshots were made
    "measure": {"settle_s": 0},
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


def kill_mid_ows_training(workdir: Path, log: Path, *targets: str, timeout: float = 300) -> dict:
    """Snakemake on `targets` in `workdir` (2 cores, output to `log`), SIGKILLed (the whole job tree, so no clean-up
    runs) as soon as the OWS supernet has written its first resume checkpoint; what the kill left: the checkpoint's
    (epoch, step) (None without one) and whether the supernet's model was written."""
    import os
    import signal
    import time

    import torch

    cmd = ["snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir), "--cores", "2", *targets]
    ckpt = workdir / OWS_RESUME
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
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


def job_outputs(log: str) -> dict[str, list[str]]:
    """{job id: its outputs} of the jobs a Snakemake log started."""
    jobs, outputs = {}, []
    for line in map(str.strip, log.splitlines()):
        if line.startswith("output: "):
            outputs = line.removeprefix("output: ").split(", ")
        elif line.startswith("jobid: "):
            jobs[line.removeprefix("jobid: ")], outputs = outputs, []
    return jobs


def finished_outputs(log: str) -> list[str]:
    """The outputs of the jobs a Snakemake log reports finished."""
    import re

    jobs = job_outputs(log)
    return [o for job in re.findall(r"Finished jobid: (\d+)", log) for o in jobs.get(job, [])]


def group_tiny_run_tests(items: list[pytest.Item]) -> None:
    """Mark every test that reads the tiny runs for one pytest-xdist worker (`--dist loadgroup`), which makes them once.

    pytest-xdist 3.8 turns the mark into a node-id suffix that pytest 9 ignores (each worker then made its own tiny
    runs: 25 min instead of 10); pyproject keeps pytest below 9 and tests/test_xdist_groups.py checks the effect."""
    for item in items:
        if {"tiny_run", "pareto_run"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("tiny_run"))


# The README's main command's target, on the synthetic device.
MAIN = "results/pareto_synth.pdf"


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny run of every rule, made the hard way, and a copy of it as a user has it after the quick start.

    First the README's main command's own target (MAIN) under TINY: SIGKILLed (the whole job tree, on 2 cores) while
    the OWS supernet trains, after its first resume checkpoint, then completed with `--rerun-incomplete`; what
    test_a_killed_run_... checks is recorded in `killed.json`. A copy of that run is `pareto_run`. Then the same
    directory runs every rule (both devices, all methods, the retrained and exported finalists): `tiny_run`.
    test_golden checks that it ends with the artifacts of an uninterrupted run (its snapshot)."""
    import json

    wd = tmp_path_factory.mktemp("wf")
    (wd / "config.yaml").write_text(yaml.safe_dump(TINY))
    killed = kill_mid_ows_training(wd, wd / "killed_run.log", MAIN)
    killed_log = (wd / "killed_run.log").read_text()
    finished = finished_outputs(killed_log)  # by the jobs that ended before the kill
    before = {o: (wd / o).stat().st_mtime_ns for o in finished}
    r = smk(wd, "--rerun-incomplete", MAIN, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    (wd / "killed.json").write_text(json.dumps({
        **killed, "finished": sorted(before), "kept": all((wd / o).stat().st_mtime_ns == t for o, t in before.items()),
        "redone": sorted(set(before) & {o for outs in job_outputs(r.stdout + r.stderr).values() for o in outs}),
        "resumed_at": bar_start((wd / "results/logs/train_ows.log").read_text(), "supernet ows")}))
    logs = killed_log + r.stdout + r.stderr
    pareto = copy_run(wd, tmp_path_factory.mktemp("pareto_run") / "run")
    r = smk(wd, "all", "latency_models", "decisions", *RETRAINED, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    (wd / "tiny_run.log").write_text(logs + r.stdout + r.stderr)  # the jobs it ran, killed or finished
    return wd, pareto


@pytest.fixture(scope="session")
def tiny_run(tiny_runs) -> Path:
    """A finished tiny run of every rule (tiny_runs). Tests that change its config.yaml put TINY back before they
    return."""
    return tiny_runs[0]


@pytest.fixture(scope="session")
def pareto_run(tiny_runs) -> Path:
    """What a user has after the quick start: the tiny run of MAIN alone, killed and resumed on the way (tiny_runs)."""
    return tiny_runs[1]
