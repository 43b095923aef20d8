"""Retraining: the Wilson interval, the schedule, learning on real data, exact resume, bad input."""

import pytest
import torch

from aows_core import artifacts as io
from aows_core.config import space_from_config, validate
from aows_core.artifacts import write_decisions
from aows_core.evaluation import wilson_interval
from aows_core.training.retrain import learning_rate
from stage_calls import retrain

CFG = {
    "space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25},
    "data": {"train_subset": 1024, "search_val": 64, "calibration": 64},
    "retrain": {"epochs": 3, "batch_size": 64, "lr": 0.1, "checkpoint_every": 7, "eval_batch_size": 2000},
}


def test_wilson_interval_matches_a_published_example_and_brackets_p():
    # Newcombe (1998), Stat. Med. 17:857, example: 81 of 263 → Wilson 95 % [0.2553, 0.3662]
    lo, hi = wilson_interval(81, 263)
    assert lo == pytest.approx(0.2553, abs=1e-4) and hi == pytest.approx(0.3662, abs=1e-4)
    assert wilson_interval(0, 10)[0] == pytest.approx(0.0, abs=1e-12)
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0, abs=1e-12)
    for k, n in [(1, 3), (50, 100), (999, 1000)]:
        lo, hi = wilson_interval(k, n)
        assert lo < k / n < hi
    with pytest.raises(ValueError):
        wilson_interval(5, 3)


def test_schedule_warms_up_linearly_then_decays_by_cosine():
    assert learning_rate(0, 100, 10, 1.0) == pytest.approx(0.1)
    assert learning_rate(9, 100, 10, 1.0) == pytest.approx(1.0)
    assert learning_rate(55, 100, 10, 1.0) == pytest.approx(0.5)
    assert learning_rate(100, 100, 10, 1.0) == pytest.approx(0.0, abs=1e-12)
    assert learning_rate(0, 100, 0, 1.0) == 1.0


@pytest.fixture(scope="module")
def decision(tmp_path_factory):
    d = tmp_path_factory.mktemp("retrain")
    cfg = validate(CFG)
    space = space_from_config(cfg)
    row = {"method": "ows", "device": "flops", "target": "range:0.5", "target_ms": 1.0, "unit": "MMAC",
           "channels": space.max_config, "predicted_latency_ms": 1.0, "objective": 0.0, "gamma": 0.0,
           "dual_bound": 0.0, "gap": 0.0, "exact": True, "unvisited_policy": "exclude", "epoch": 0}
    write_decisions([row], d / "decision.parquet", {"space_hash": space.hash, "space_name": space.name})
    full = retrain(cfg, d / "decision.parquet", d / "full", d / "resume_full", progress=False)
    return cfg, d, full


@pytest.mark.slow
def test_retrained_network_learns_and_reports_an_interval(decision):
    cfg, d, full = decision
    table, meta = io.read_table(d / "full/result.parquet", "retrain")
    assert table.schema.remove_metadata().equals(io.SCHEMAS["retrain"])
    assert full["test_n"] == 10000 and full["test_acc"] > 0.25  # 10 classes: chance is 0.1
    assert full["test_acc_low"] < full["test_acc"] < full["test_acc_high"]
    assert meta["interval"].startswith("Wilson")
    state = torch.load(d / "full/model.pt", weights_only=False)
    assert state["channels"] == full["channels"]


@pytest.mark.slow
def test_a_stopped_retraining_resumes_to_the_same_weights(decision, tmp_path):
    cfg, d, full = decision
    r = retrain(cfg, d / "decision.parquet", tmp_path / "out", tmp_path / "resume", progress=False, stop_after_steps=20)
    assert not r["complete"] and (r["epoch"], r["step"]) == (1, 4)
    done = retrain(cfg, d / "decision.parquet", tmp_path / "out", tmp_path / "resume", progress=False)
    assert done["test_correct"] == full["test_correct"]
    a = torch.load(tmp_path / "out/model.pt", weights_only=False)["model"]
    b = torch.load(d / "full/model.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_a_decision_of_another_space_is_refused(decision, tmp_path):
    cfg, d, _ = decision
    other = validate({**CFG, "space": {**CFG["space"], "n_choices": 4}})
    with pytest.raises(io.ArtifactError, match="decided on space"):
        retrain(other, d / "decision.parquet", tmp_path / "o", tmp_path / "r", progress=False)


@pytest.mark.slow
def test_a_checkpoint_of_other_settings_starts_afresh_and_a_finished_run_clears_it(decision, tmp_path, capfd):
    """Regression: a changed retraining setting failed on the old resume checkpoint ("delete it to restart")."""
    cfg, d, full = decision
    other = validate({**CFG, "retrain": {**CFG["retrain"], "lr": 0.05}})
    retrain(other, d / "decision.parquet", tmp_path / "out", tmp_path / "resume", progress=False, stop_after_steps=3)
    assert (tmp_path / "resume/checkpoint.pt").exists()
    done = retrain(cfg, d / "decision.parquet", tmp_path / "out", tmp_path / "resume", progress=False)
    assert "belongs to another run" in capfd.readouterr().err
    assert done["test_correct"] == full["test_correct"]  # exactly a fresh run
    assert not (tmp_path / "resume").exists() and not (d / "resume_full").exists()
