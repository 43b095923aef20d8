"""Artifacts and resume state written before the library's redesign load after it (tests/fixtures/premove/).

The fixtures were written by the flat-module code (commit 891cc67) on a tiny configuration
(`config.json`): an OWS resume checkpoint after 3 steps, the OWS epoch checkpoint after epoch 1 and the
final model.pt, a decision and a retraining resume checkpoint after 3 steps, and one artifact of every
kind (`artifacts/<kind>.parquet`, from a whole tiny run of `results/pareto_flops.pdf` with that code).
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from stage_calls import retrain, train_supernet

from aows_core import artifacts as io
from aows_core.config import space_from_config, validate

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "premove"
CFG = json.loads((FIX / "config.json").read_text())
# The fixtures' space is the mobilenet_v1_fmnist preset of their time (stride-1 stem); the preset has a stride-2
# stem since issue 12, so the old definition is spelled out.
CFG["space"]["first_stride"] = 1
# The unaries' estimation pass at a tenth of its default size (it is most of a supernet's training time here).
CFG["supernet"].update(estimate_configs=100, estimate_images=256)


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# Kinds whose contract gained columns since the fixtures were written (issue 12: standard errors, the estimator,
# the width signal, AOWS's entropy and sampled latency; issue 13): an old file is refused, naming what it lacks.
GREW = {"unaries": ["delta_se", "estimator"], "decisions": ["width_signal_z"],
        "train_metrics": ["entropy", "sampled_latency", "gamma_zero_share", "width_signal", "width_signal_se",
                          "unaries_r2"],
        # issue 13: paired timing (D27) and the noise gate
        "latency": ["ref_ms_raw", "pair_ratio", "ratio_spread", "retimed"],
        "measure": ["too_noisy"],
        "pareto": ["too_noisy"],
        # issue 13: the smoothness prior's weight per fit (D38) and the link tried (D39)
        "lut_fit": ["mu", "link_knot_ms", "link_slope"]}


def test_every_artifact_kind_written_before_reads_under_its_schema():
    kinds = set()
    for path in sorted((FIX / "artifacts").glob("*.parquet")):
        kinds.add(path.stem)
        if path.stem in GREW:
            with pytest.raises(io.ArtifactError, match=r"lacks columns .*another aows version") as e:
                io.read_table(path, path.stem)
            assert str(GREW[path.stem]) in str(e.value)
            continue
        table, meta = io.read_table(path, path.stem)
        assert table.schema.remove_metadata().equals(io.SCHEMAS[path.stem]) and meta["aows_version"]
    assert kinds == set(io.SCHEMAS)


def test_torch_files_written_before_load_through_the_typed_readers():
    space = space_from_config(validate(CFG))
    assert all(isinstance(v, torch.Tensor) for v in io.read_supernet_state(FIX / "ows_model.pt", space).values())
    assert io.read_epoch_checkpoint(FIX / "ows_after_1.pt", space, 1)["completed_epochs"] == 1
    (row,) = io.read_table(FIX / "decision.parquet")[0].to_pylist()
    assert row["channels"] == space.max_config


@pytest.mark.slow
def test_a_supernet_checkpoint_written_before_is_set_aside_and_training_is_unchanged(tmp_path, capfd):
    """The supernet settings gained keys (the unaries' estimator, issue 12), so an old resume state belongs to another
    run and is set aside: training starts afresh and ends exactly where a run without it ends. (Whether today's code
    trains the old code's weights is the golden test's question, tests/workflow/test_golden.py, on the machine type
    the snapshot was made on: training amplifies another CPU's rounding beyond any bitwise comparison.)"""
    cfg = validate(CFG)
    (tmp_path / "resume").mkdir()
    shutil.copy(FIX / "ows_resume_checkpoint.pt", tmp_path / "resume/checkpoint.pt")
    train_supernet(cfg, tmp_path / "out", tmp_path / "resume", method="ows", progress=False)
    assert "another run" in capfd.readouterr().err
    train_supernet(cfg, tmp_path / "fresh", tmp_path / "resume_fresh", method="ows", progress=False)
    for f in ("model.pt", "checkpoints/after_1.pt"):
        new = torch.load(tmp_path / "out" / f, weights_only=False)["model"]
        assert _same(new, torch.load(tmp_path / "fresh" / f, weights_only=False)["model"])
        old = torch.load(FIX / f"ows_{Path(f).stem}.pt", weights_only=False)["model"]
        assert [v.shape for v in new.values()] == [v.shape for v in old.values()]  # the old file's network, renamed


@pytest.mark.slow
def test_a_retraining_checkpoint_written_before_is_set_aside_and_the_run_ends_like_a_fresh_one(tmp_path, capfd):
    """The space's settings now spell out the old preset's stride (and retraining threads default to 1): the old
    resume state belongs to another run, is set aside, and the retraining ends exactly where a fresh one ends."""
    cfg = validate(CFG)
    # the old decision in today's contract (it gained width_signal_z, null for it); same channels
    table, meta = io.read_table(FIX / "decision.parquet")
    rows = [{**r, "width_signal_z": None} for r in table.to_pylist()]
    io.write_records(rows, tmp_path / "decision.parquet", "decisions", {k: v for k, v in meta.items() if k != "kind"})
    decision = tmp_path / "decision.parquet"
    fresh = retrain(cfg, decision, tmp_path / "fresh", tmp_path / "r0", progress=False)
    (tmp_path / "r1").mkdir()
    shutil.copy(FIX / "retrain_resume_checkpoint.pt", tmp_path / "r1/checkpoint.pt")
    resumed = retrain(cfg, decision, tmp_path / "resumed", tmp_path / "r1", progress=False)
    assert "another run" in capfd.readouterr().err
    assert resumed["test_correct"] == fresh["test_correct"]
    a = torch.load(tmp_path / "fresh/model.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "resumed/model.pt", weights_only=False)["model"]
    assert _same(a, b)
