"""Retraining: the Wilson interval, the schedule, learning on real data, exact resume, bad input."""

import pytest
import torch
from stage_calls import retrain

from aows_core import artifacts as io
from aows_core.artifacts import write_decisions
from aows_core.config import space_from_config, validate
from aows_core.evaluation import wilson_interval
from aows_core.training.retrain import learning_rate

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


def write_decision(cfg, path, channels=None, method="ows", target="range:0.5"):
    space = space_from_config(cfg)
    row = {"method": method, "device": "flops", "target": target, "target_ms": 1.0, "unit": "MMAC",
           "channels": channels or space.max_config, "predicted_latency_ms": 1.0, "objective": 0.0, "gamma": 0.0,
           "dual_bound": 0.0, "gap": 0.0, "exact": True, "unvisited_policy": "exclude", "epoch": 0}
    write_decisions([row], path, {"space_hash": space.hash, "space_name": space.name})
    return path


@pytest.fixture(scope="module")
def decision(tmp_path_factory):
    d = tmp_path_factory.mktemp("retrain")
    cfg = validate(CFG)
    write_decision(cfg, d / "decision.parquet")
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


@pytest.mark.slow
def test_seeds_in_one_process_equal_each_seed_alone_and_a_killed_run_retrains_no_finished_seed(decision, tmp_path,
                                                                                               monkeypatch):
    """D52: `--seed 0 5` trains seed 0 as a run of seed 0 alone does (the same test count, the same weights) and seed
    5 after it, each in out_dir/seed<S>. A run killed during seed 5 leaves seed 0's resume state, so its rerun takes
    no step of seed 0 again and writes the same files."""
    from aows_core.stages import retrain as stage
    from aows_core.training import retrain as training

    cfg, d, full = decision
    steps: dict[int, int] = {}
    real_step = training._Retraining.step

    def counted(self, x, y):
        steps[self.job.seed] = steps.get(self.job.seed, 0) + 1
        if self.job.seed == 5 and steps[5] == 3 and kill:
            raise KeyboardInterrupt  # the job killed
        return real_step(self, x, y)

    monkeypatch.setattr(training._Retraining, "step", counted)
    run = lambda: stage.run(cfg, {"decision": d / "decision.parquet"}, {"out_dir": tmp_path / "out"},  # noqa: E731
                            resume_dir=tmp_path / "resume", seed=[0, 5], progress=False)
    kill = True
    with pytest.raises(KeyboardInterrupt):
        run()
    assert (tmp_path / "out/seed0/result.parquet").exists() and (tmp_path / "resume/seed0/checkpoint.pt").exists()
    first = steps.pop(0)
    kill, steps = False, {}
    r = run()
    assert r["complete"] and [x["seed"] for x in r["runs"]] == [0, 5] and first > 0
    assert 0 not in steps and steps[5] > 0  # seed 0 resumed at its end: no step again
    assert r["runs"][0]["test_correct"] == full["test_correct"] != r["runs"][1]["test_correct"]
    a = torch.load(tmp_path / "out/seed0/model.pt", weights_only=False)["model"]
    b = torch.load(d / "full/model.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "resume").exists() or not any((tmp_path / "resume").rglob("*.pt"))
    with pytest.raises(ValueError, match="given twice"):
        stage.run(cfg, {"decision": d / "decision.parquet"}, {"out_dir": tmp_path / "o"}, resume_dir=tmp_path / "r",
                  seed=[1, 1], progress=False)


def test_retraining_seeds_share_the_splits_but_not_the_batches(tmp_path, monkeypatch):
    """Regression (issue 12, defect 4): a retraining seed reseeded the data split, so the spread over seeds mixed
    training subsets. Now every seed trains on the top-level seed's train / search_val / calibration images, in
    its own batch order and augmentation, from its own initialisation."""
    from aows_core import data
    from aows_core.config import data_spec
    from aows_core.stages import retrain as stage

    cfg = validate({**CFG, "seed": 3})
    decision = write_decision(cfg, tmp_path / "decision.parquet")
    real, seen = data.load_splits, {}

    def spy(spec, **kw):
        seen[spec.batch_seed] = real(spec, **kw)
        return seen[spec.batch_seed]

    monkeypatch.setattr(data, "load_splits", spy)
    for seed in (3, 4):
        r = stage.run(cfg, {"decision": decision}, {"out_dir": tmp_path / f"out{seed}"}, resume_dir=tmp_path / f"r{seed}",
                      seed=seed, progress=False, stop_after=2)
        assert not r["complete"]
    a, b = seen[3], seen[4]
    assert a.spec.seed == b.spec.seed == 3
    for split in ("train", "search_val", "calibration"):
        assert (a.indices[split] == b.indices[split]).all(), split
    (xa, ya), (xb, yb) = (next(iter(s.train_batches(0))) for s in (a, b))
    assert not torch.equal(ya, yb) and not torch.equal(xa, xb)  # another order (and augmentation)
    # the config's own seed: exactly the spec (and provenance) of before the split seed was kept apart
    assert a.spec == data_spec(cfg, "retrain") and "train_seed" not in a.spec.to_dict()
    assert b.spec.to_dict()["train_seed"] == 4
    # each seed resumes only its own checkpoint, initialised by its own seed
    ckpt = lambda s: torch.load(tmp_path / f"r{s}/checkpoint.pt", weights_only=False)
    assert ckpt(3)["run_id"] != ckpt(4)["run_id"]
    w3, w4 = ckpt(3)["model"], ckpt(4)["model"]
    assert any(not torch.equal(w3[k], w4[k]) for k in w3 if w3[k].is_floating_point())


def test_the_run_id_keys_settings_and_seed_but_not_the_process_count():
    """A checkpoint resumes under another `retrain.processes` (D30), never under other settings or another seed."""
    from aows_core.config import resume_settings, settings_hash
    from aows_core.training.retrain import run_id

    cfg = validate({**CFG, "seed": 3})
    resume = resume_settings(cfg, "retrain")
    base = settings_hash({"settings": resume, "channels": [8, 16]})
    assert run_id(resume, [8, 16]) == run_id(resume, [8, 16], 3) == base
    two = validate({**CFG, "seed": 3, "retrain": {**CFG.get("retrain", {}), "processes": 2}})
    assert run_id(resume_settings(two, "retrain"), [8, 16]) == base
    assert "processes" not in resume_settings(two, "retrain")["retrain"]
    longer = validate({**CFG, "seed": 3, "retrain": {**CFG.get("retrain", {}), "epochs": 7}})
    assert run_id(resume_settings(longer, "retrain"), [8, 16]) != base
    # another seed: neither the config's run nor the run that split its data by that seed
    own4 = settings_hash({"settings": resume_settings({**cfg, "seed": 4}, "retrain"), "channels": [8, 16]})
    assert run_id(resume, [8, 16], 4) not in (base, own4)


def test_network_names_round_trip_and_bad_ones_are_refused():
    from aows_core.config import net_key, parse_net_key

    assert net_key([8, 16, 24]) == "8-16-24" and parse_net_key("8-16-24") == parse_net_key("8,16,24") == [8, 16, 24]
    for bad in ("", "8--16", "8-x", "0-8", "-8"):
        with pytest.raises(ValueError, match="malformed network"):
            parse_net_key(bad)


def test_relabel_gives_a_networks_training_to_each_finalist_that_decided_it(tmp_path):
    """Finalists that decided the same widths share one training: `aows relabel` writes it under each one's name."""
    from aows_core.stages import relabel

    cfg = validate(CFG)
    space = space_from_config(cfg)
    net = tmp_path / "nets/x/seed0"
    row = {"method": None, "device": None, "target": None, "channels": space.max_config, "seed": 0, "epochs": 1,
           "train_seconds": 1.0, "final_train_loss": 0.5, "test_correct": 7, "test_n": 10, "test_acc": 0.7,
           "test_acc_low": 0.4, "test_acc_high": 0.9}
    io.write_records([row], net / "result.parquet", "retrain", io.provenance(space, network="x"))
    io.save_torch({"space_hash": space.hash, "channels": space.max_config, "model": {}}, net / "model.pt")
    for method, target in (("ows", "range:0.5"), ("greedy", "range:0.8")):
        dec = write_decision(cfg, tmp_path / f"{method}.parquet", method=method, target=target)
        out = tmp_path / method
        relabel.run(cfg, {"decision": dec, "result": net / "result.parquet", "model": net / "model.pt"},
                    {"out_dir": out})
        table, meta = io.read_table(out / "result.parquet", "retrain")
        assert table.to_pylist() == [{**row, "method": method, "device": "flops", "target": target}]
        assert meta["decision"] == str(dec) and meta["trained"] == str(net / "result.parquet")
        assert (out / "model.pt").read_bytes() == (net / "model.pt").read_bytes()
    other = write_decision(cfg, tmp_path / "other.parquet", channels=space.min_config)
    with pytest.raises(io.ArtifactError, match="decided"):
        relabel.run(cfg, {"decision": other, "result": net / "result.parquet", "model": net / "model.pt"},
                    {"out_dir": tmp_path / "o"})
