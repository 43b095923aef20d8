"""Supernet training: artifacts, exact resume after a kill, AOWS warm start from OWS, bad input."""

import json
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from stage_calls import train_supernet

from aows_core import artifacts as io
from aows_core.config import space_from_config, validate
from aows_core.devices.flops import variable_macs
from aows_core.latency import lut
from aows_core.nets.sandwich import NonFiniteLoss
from aows_core.search.results import InfeasibleTarget

pytestmark = pytest.mark.slow  # see pyproject: `pytest -m "not slow"` is the quick loop

TINY = {
    "space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25},
    "data": {"train_subset": 256, "search_val": 64, "calibration": 64},
    "supernet": {"epochs": 3, "batch_size": 32, "checkpoint_every": 3, "estimate_configs": 120, "estimate_batch": 32,
                 "estimate_images": 128},
    "aows": {"warmup_epochs": 1, "window": 50, "refresh": 3, "estimate_configs": 40},
}


@pytest.fixture(scope="module")
def ows(tmp_path_factory):
    d = tmp_path_factory.mktemp("ows")
    cfg = validate(TINY)
    train_supernet(cfg, d / "out", d / "resume", method="ows", progress=False)
    return cfg, d


def _weights(path):
    return torch.load(path, weights_only=False)["model"]


def _same_weights(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def test_ows_writes_unaries_metrics_and_checkpoints(ows):
    cfg, d = ows
    space = space_from_config(cfg)
    table, meta = io.read_table(d / "out/unaries.parquet", "unaries")
    assert table.schema.remove_metadata().equals(io.SCHEMAS["unaries"])
    assert sorted(set(table.column("epoch").to_pylist())) == [0, 1, 2]
    cells = sum(len(c) for c in space.layer_choices)
    # training-time rows every epoch, the frozen-weight estimate (D26) after the last one
    assert table.column("estimator").to_pylist() == ["training"] * 3 * cells + ["frozen"] * cells
    assert meta["method"] == "ows" and meta["loss"].startswith("hard-label CE") and meta["unaries"] == "frozen"
    m = io.read_table(d / "out/metrics.parquet", "train_metrics")[0].to_pylist()
    assert [r["epoch"] for r in m] == [0, 1, 2] and all(r["images"] == 256 for r in m)
    counts = np.array(table.column("count").to_pylist())
    assert (counts[: 3 * cells].reshape(3, -1).sum(1) == 256 * space.n_layers).all()  # one count per sample and layer
    assert counts[3 * cells:].sum() == cfg["supernet"]["estimate_configs"] * space.n_layers
    se = table.column("delta_se").to_pylist()
    assert all(v is not None and v > 0 for v in se)  # every cell visited ≥ 2 times here: a standard error each
    assert m[-1]["width_signal_se"] > 0 and m[-1]["unaries_r2"] is not None
    assert meta["width_signal_z"] == pytest.approx(m[-1]["width_signal"] / m[-1]["width_signal_se"])
    for n in (1, 2, 3):
        assert (d / f"out/checkpoints/after_{n}.pt").exists()


def test_resume_after_a_stop_ends_exactly_like_an_uninterrupted_run(ows, tmp_path):
    """Stopped twice (the second time in epoch 1, after the first epoch checkpoint) and its output folder deleted
    in between, as Snakemake deletes an incomplete job's outputs before it reruns it: the resumed run ends with the
    uninterrupted run's weights, unaries and every epoch checkpoint (AOWS starts from `after_W.pt`).
    Regression: the epoch checkpoints of the epochs done before the stop were lost with the outputs, so Snakemake
    failed the resumed job (MissingOutputException)."""
    cfg, d = ows
    r = train_supernet(cfg, tmp_path / "out", tmp_path / "resume", method="ows", progress=False, stop_after_steps=5)
    assert not r["complete"] and not (tmp_path / "out/unaries.parquet").exists()
    r = train_supernet(cfg, tmp_path / "out", tmp_path / "resume", method="ows", progress=False, stop_after_steps=7)
    assert not r["complete"] and (r["epoch"], r["step"]) == (1, 4)
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
    train_supernet(cfg, tmp_path / "out", tmp_path / "resume", method="ows", progress=False)
    assert _same_weights(_weights(d / "out/model.pt"), _weights(tmp_path / "out/model.pt"))
    a = io.read_table(d / "out/unaries.parquet", "unaries")[0].to_pylist()
    b = io.read_table(tmp_path / "out/unaries.parquet", "unaries")[0].to_pylist()
    assert a == b
    for n in (1, 2, 3):
        assert _same_weights(_weights(d / f"out/checkpoints/after_{n}.pt"),
                             _weights(tmp_path / f"out/checkpoints/after_{n}.pt")), n
    assert not (tmp_path / "resume").exists()  # and its resume state is gone


def _bar_start(stderr: str, desc: str) -> tuple[int, int]:
    """(position, total) of the first render of a tqdm bar `desc`: the step a run starts (or resumes) from."""
    m = re.search(rf"{desc}:\s+\d+%\|[^|]*\|\s*(\d+)/(\d+)", stderr)
    assert m is not None, stderr[-2000:]
    return int(m.group(1)), int(m.group(2))


def test_sigkilled_training_resumes_to_the_same_weights(ows, tmp_path):
    """SIGKILLed mid-training (no clean-up runs), the job resumes from its last checkpoint, not from step 0, and ends
    with the weights and unaries of the uninterrupted run."""
    cfg, d = ows
    cmd = [sys.executable, "-m", "aows_core.cli", "train-supernet", "--config-json", json.dumps(TINY), "--method", "ows",
           "--out-dir", str(tmp_path / "out"), "--resume-dir", str(tmp_path / "resume")]
    proc = subprocess.Popen([*cmd, "--quiet"])
    ckpt = tmp_path / "resume/checkpoint.pt"
    deadline = time.time() + 120
    while time.time() < deadline and not ckpt.exists():
        time.sleep(0.02)
    time.sleep(float(np.random.default_rng().uniform(0, 1.0)))
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL  # the kill ended it, not the end of its work
    # the kill landed mid-work: a resume checkpoint of an unfinished run, and no output
    assert not (tmp_path / "out/model.pt").exists() and not (tmp_path / "out/unaries.parquet").exists()
    state = torch.load(ckpt, weights_only=False)
    steps, total = 256 // 32, 3 * 256 // 32  # TINY: 8 steps an epoch, 3 epochs
    done = state["epoch"] * steps + state["step"]
    assert 3 <= done < total, (state["epoch"], state["step"])  # at least the first checkpoint (every 3 steps)
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)  # with its progress bar
    assert _bar_start(r.stderr, "supernet ows") == (done, total)  # it resumed from that checkpoint
    assert not ckpt.exists()  # and cleared it when done
    assert _same_weights(_weights(d / "out/model.pt"), _weights(tmp_path / "out/model.pt"))
    a = io.read_table(d / "out/unaries.parquet", "unaries")[0].to_pylist()
    assert a == io.read_table(tmp_path / "out/unaries.parquet", "unaries")[0].to_pylist()


def _flops_lut(space, path):
    meta = io.provenance(space_name=space.name, space_hash=space.hash, device="flops", unit="MMAC per forward",
                         unit_short="MMAC", fingerprint={"backend": "flops"}, lam=0.0)
    io.write_records(lut.lut_records(space, variable_macs(space) / 1e6, np.ones(space.n_variables, int)), path, "lut", meta)


def test_aows_starts_from_the_ows_warmup_and_then_concentrates(ows, tmp_path):
    cfg, d = ows
    space = space_from_config(cfg)
    _flops_lut(space, tmp_path / "lut.parquet")
    train_supernet(cfg, tmp_path / "out", tmp_path / "resume", method="aows", lut_path=tmp_path / "lut.parquet",
                   device="flops", target="range:0.3", init_from=d / "out/checkpoints/after_1.pt", progress=False)
    ows_rows = io.read_table(d / "out/unaries.parquet", "unaries")[0].to_pylist()
    aows_rows, meta = io.read_table(tmp_path / "out/unaries.parquet", "unaries")
    aows_rows = aows_rows.to_pylist()
    assert [r for r in aows_rows if r["epoch"] == 0] == [r for r in ows_rows if r["epoch"] == 0]
    # every adaptive epoch holds the frozen estimate that steered its sampling (D26)
    assert {r["epoch"] for r in aows_rows if r["estimator"] == "frozen"} == {1, 2}
    m = io.read_table(tmp_path / "out/metrics.parquet", "train_metrics")[0].to_pylist()
    assert [r["sampling"] for r in m] == ["uniform", "aows", "aows"]
    assert m[-1]["gamma"] is not None and m[-1]["temperature"] < m[1]["temperature"] and meta["temperature_scale"] > 0
    assert m[0]["entropy"] is None and 0 < m[2]["entropy"] < m[1]["entropy"] <= 1  # sampling concentrates
    assert all(r["sampled_latency"] > 0 and 0 <= r["gamma_zero_share"] <= 1 for r in m[1:])
    assert not _same_weights(_weights(d / "out/model.pt"), _weights(tmp_path / "out/model.pt"))


def test_bad_input_is_refused(ows, tmp_path):
    cfg, d = ows
    space = space_from_config(cfg)
    _flops_lut(space, tmp_path / "lut.parquet")
    with pytest.raises(InfeasibleTarget, match="minimum|smallest|below"):
        train_supernet(cfg, tmp_path / "a", tmp_path / "ra", method="aows", lut_path=tmp_path / "lut.parquet",
                       device="flops", target="0.0001mflops", init_from=d / "out/checkpoints/after_1.pt", progress=False)
    assert not (tmp_path / "a").exists()
    with pytest.raises(NonFiniteLoss):
        train_supernet(validate({**TINY, "supernet": {**TINY["supernet"], "lr": 1e30}}), tmp_path / "n",
                       tmp_path / "rn", method="ows", progress=False)
    assert not (tmp_path / "n/unaries.parquet").exists()


def test_a_resume_checkpoint_of_other_settings_starts_afresh_and_a_finished_run_clears_it(ows, tmp_path, capfd):
    """Regression: a changed setting failed on the old checkpoint ("belongs to another run … delete it") after
    Snakemake had deleted the old outputs, and a finished run never cleared its resume state."""
    cfg, d = ows
    other = validate({**TINY, "space": {**TINY["space"], "n_choices": 2}})
    train_supernet(other, tmp_path / "o", tmp_path / "ro", method="ows", progress=False, stop_after_steps=1)
    assert (tmp_path / "ro/checkpoint.pt").exists()
    train_supernet(cfg, tmp_path / "o", tmp_path / "ro", method="ows", progress=False)
    assert "belongs to another run" in capfd.readouterr().err
    assert not (tmp_path / "ro").exists()  # the finished run's resume state is gone, the set-aside one too
    assert io.read_table(tmp_path / "o/unaries.parquet", "unaries")[0].equals(
        io.read_table(d / "out/unaries.parquet", "unaries")[0])  # exactly a fresh run
    assert _same_weights(_weights(d / "out/model.pt"), _weights(tmp_path / "o/model.pt"))
    assert not (d / "resume").exists()
