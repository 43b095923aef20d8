"""The timing protocol: job plan, drift correction, retest noise, resume after a kill, refusals."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import write_uniform_configs

from aows_core import artifacts as io
from aows_core.config import ProfilingSettings
from aows_core.latency.protocol import profile_plan as plan
from aows_core.latency.protocol import reference_config
from aows_core.stages.profile import ProfileJob
from aows_core.stages.profile import profile_session as profile
from aows_core.training.loop import RunControl


def protocol(**kw):
    return ProfilingSettings(**kw)


SYNTH = {"backend": "synthetic", "batch_size": 1, "threads": 1, "noise": 0.01, "drift": 0.3, "nonadditive": 0.0}


def test_plan_orders_samples_then_retests(tiny_space, tmp_path):
    write_uniform_configs(tiny_space, tmp_path / "c.parquet", (60, 20, 40))
    configs, _ = io.read_table(tmp_path / "c.parquet", "configs")
    p = protocol(retest=15)
    jobs = plan(tiny_space, configs, p, seed=3, analytic=False)
    assert all(j.role != "reference" for j in jobs)  # every job carries its own reference (D27)
    assert jobs == plan(tiny_space, configs, p, seed=3, analytic=False)  # deterministic
    assert [j.job for j in jobs] == list(range(len(jobs)))
    samples = [j for j in jobs if j.role == "sample"]
    assert sorted(j.config_id for j in samples) == list(range(120))
    n = len(samples)
    sample_pos = {j.config_id: k for k, j in enumerate(jobs) if j.role == "sample"}
    retests = [(k, j) for k, j in enumerate(jobs) if j.role == "retest"]
    assert len(retests) == 15 and all(j.set == "test" for _, j in retests)
    for k, j in retests:  # at least a third of the session after the first measurement
        assert k - sample_pos[j.config_id] >= math.ceil(n / 3)


def _run(space, tmp_path, name="synthetic", stop_after=None, resume="resume", p=None):
    return profile(ProfileJob(space, name, SYNTH, p or protocol(retest=10, repeats=5), seed=1),
                   tmp_path / "c.parquet", tmp_path / f"{name}.parquet", RunControl(tmp_path / resume, False, stop_after))


KEYS = ["job", "role", "config_id", "channels", "latency_ms_raw", "latency_ms", "drift_factor", "median_ms"]


def test_resume_ends_exactly_where_an_uninterrupted_run_ends(tiny_space, tmp_path):
    write_uniform_configs(tiny_space, tmp_path / "c.parquet")
    full = _run(tiny_space, tmp_path, resume="a")
    ref = io.read_table(tmp_path / "synthetic.parquet", "latency")[0].select(KEYS).to_pylist()
    os.remove(tmp_path / "synthetic.parquet")
    part = _run(tiny_space, tmp_path, stop_after=37, resume="b")
    assert not part["complete"] and part["done"] == 37 and not (tmp_path / "synthetic.parquet").exists()
    # a kill in the middle of writing a line: the torn line is dropped and that job redone
    journal = tmp_path / "b" / "profile_synthetic.jsonl"
    with open(journal, "a") as fh:
        fh.write('{"job": 37, "role": "sam')
    done = _run(tiny_space, tmp_path, resume="b")
    assert done["complete"] and done["done"] == full["done"]
    again = io.read_table(tmp_path / "synthetic.parquet", "latency")[0].select(KEYS).to_pylist()
    assert again == ref


def test_drift_is_corrected_and_noise_floor_reported(tiny_space, tmp_path):
    write_uniform_configs(tiny_space, tmp_path / "c.parquet", (80, 10, 60))
    res = _run(tiny_space, tmp_path, p=protocol(retest=30, repeats=5))
    table, meta = io.read_table(tmp_path / "synthetic.parquet", "latency")
    from aows_core.devices import get_device

    dev = get_device(SYNTH, tiny_space, 1)
    rows = [r for r in table.to_pylist() if r["role"] == "sample"]
    truth = np.array([dev.true_latency(r["channels"]) for r in rows])
    raw = np.array([r["latency_ms_raw"] for r in rows])
    cor = np.array([r["latency_ms"] for r in rows])
    # a 30 % drift dominates the raw error; after correction only noise and a common scale remain
    err = lambda x: np.std(np.log(x / truth))
    assert err(cor) < 0.35 * err(raw)
    assert 0 < res["sigma_n"] < 0.05 and res["retest_pairs"] == 30
    assert meta["reference_channels"] == reference_config(tiny_space) and meta["reference_baseline"] > 0
    assert meta["fingerprint"]["backend"] == "synthetic" and meta["statistic"] == "min"


def test_journal_from_another_device_is_set_aside_and_profiling_starts_afresh(tiny_space, tmp_path, capfd):
    write_uniform_configs(tiny_space, tmp_path / "c.parquet")
    _run(tiny_space, tmp_path, resume="fresh")
    fresh = io.read_table(tmp_path / "synthetic.parquet", "latency")[0].select(KEYS).to_pylist()
    os.remove(tmp_path / "synthetic.parquet")
    _run(tiny_space, tmp_path, stop_after=5)
    journal = tmp_path / "resume" / "profile_synthetic.jsonl"
    lines = journal.read_text().splitlines()
    head = json.loads(lines[0])
    head["fingerprint"]["cpu"] = "some other machine"
    journal.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    part = _run(tiny_space, tmp_path, stop_after=3)
    assert part["done"] == 3  # nothing of the other machine's timings was mixed in
    stale = journal.with_name(journal.name + ".stale")
    assert stale.read_text().splitlines()[1:] == lines[1:]  # nothing lost
    assert "another device fingerprint" in capfd.readouterr().err
    done = _run(tiny_space, tmp_path)
    assert done["complete"]
    assert io.read_table(tmp_path / "synthetic.parquet", "latency")[0].select(KEYS).to_pylist() == fresh


def test_corrupt_journal_header_is_said_and_kept(tiny_space, tmp_path, capfd):
    """Regression: an unreadable journal header restarted profiling from zero without a word."""
    write_uniform_configs(tiny_space, tmp_path / "c.parquet")
    _run(tiny_space, tmp_path, stop_after=5)
    journal = tmp_path / "resume" / "profile_synthetic.jsonl"
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(['{"plan": "torn', *lines[1:]]) + "\n")
    _run(tiny_space, tmp_path, stop_after=2)
    err = capfd.readouterr().err
    assert "unreadable header" in err and "afresh" in err
    assert journal.with_name(journal.name + ".stale").read_text().splitlines()[1:] == lines[1:]


def test_finished_session_removes_its_journal_and_a_rerun_times_again(tiny_space, tmp_path, monkeypatch):
    """Regression: a forced rerun replayed the finished journal and timed nothing."""
    from aows_core.devices.synthetic import Synthetic

    calls = []
    open_ = Synthetic.open
    monkeypatch.setattr(Synthetic, "open", lambda self, *a, **k: calls.append(1) or open_(self, *a, **k))
    write_uniform_configs(tiny_space, tmp_path / "c.parquet")
    first = _run(tiny_space, tmp_path)
    assert list((tmp_path / "resume").iterdir()) == []
    n = len(calls)
    assert n >= first["done"]
    os.remove(tmp_path / "synthetic.parquet")
    _run(tiny_space, tmp_path)
    assert len(calls) == 2 * n  # every network timed again


def test_configs_from_another_space_are_refused(tiny_space, tmp_path):
    from aows_core.space import get_space

    write_uniform_configs(tiny_space, tmp_path / "c.parquet")
    with pytest.raises(io.ArtifactError, match="sampled from space 'tiny'"):
        profile(ProfileJob(get_space("mobilenet_v1_fmnist"), "x", SYNTH, protocol(), 0), tmp_path / "c.parquet",
                tmp_path / "o.parquet", RunControl(tmp_path / "r", progress=False))


@pytest.mark.slow
def test_sigkilled_real_profiling_resumes_without_loss_or_duplicates(tiny_space, tmp_path):
    """A torch-cpu profiling process killed with SIGKILL, then rerun, completes every job once."""
    from aows_core.space import get_space

    space = get_space("mobilenet_v1_fmnist")
    write_uniform_configs(space, tmp_path / "c.parquet", (20, 5, 10))  # 35 networks: the kill lands after 11
    cfg = json.dumps({"profiling": {"repeats": 10, "retest": 5, "checkpoint_every": 1}})
    cmd = [sys.executable, "-m", "aows_core.cli", "profile", "--config-json", cfg, "--device", "cpu",
           "--configs", str(tmp_path / "c.parquet"), "--out", str(tmp_path / "cpu.parquet"),
           "--resume-dir", str(tmp_path / "resume"), "--quiet"]
    proc = subprocess.Popen(cmd)
    journal = tmp_path / "resume" / "profile_cpu.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and (not journal.exists() or len(journal.read_text().splitlines()) < 12):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "cpu.parquet").exists()
    n_before = len(journal.read_text().splitlines()) - 1
    assert n_before >= 11
    subprocess.run(cmd, check=True)
    table, _ = io.read_table(tmp_path / "cpu.parquet", "latency")
    jobs = table.column("job").to_pylist()
    assert jobs == list(range(len(jobs)))
    roles = table.column("role").to_pylist()
    assert roles.count("sample") == 35 and roles.count("retest") == 5
