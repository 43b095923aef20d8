"""Profiling in rounds (supplementary A, docs/method.md D28): fit between rounds, stop at the floor or a plateau."""

import numpy as np
import pandas as pd
import pytest

from aows_core import artifacts as io
from aows_core.config import space_from_config, validate
from aows_core.latency.rounds import FLOOR_FACTOR, next_round, stop_reason
from aows_core.latency.sampling import coverage_counts
from aows_core.stages.profile import profile_session as profile
from stage_calls import fit_lut, sample

RAW = {"seed": 2, "space": {"resolution": 8, "n_choices": 4, "width_mult": 0.25},
       "devices": {"synth": {"backend": "synthetic", "noise": 0.01, "drift": 0.1, "nonadditive": 0.0}},
       "sampling": {"coverage": 1, "lambda_val": 40, "test": 40},
       "profiling": {"repeats": 5, "retest": 10, "max_rounds": 4, "round_coverage": 2, "min_improvement": 0.05}}


def test_stop_rules():
    h = [{"val_nrmse": 0.10}]
    assert stop_reason(h, 0.01, 3, 0.05) is None
    assert "noise floor" in stop_reason([{"val_nrmse": FLOOR_FACTOR * 0.02}], 0.02, 3, 0.05)
    assert "no improvement" in stop_reason([{"val_nrmse": 0.10}, {"val_nrmse": 0.097}], 0.01, 3, 0.05)
    assert stop_reason([{"val_nrmse": 0.10}, {"val_nrmse": 0.09}], 0.01, 3, 0.05) is None
    assert "maximum" in stop_reason([{"val_nrmse": 0.1}, {"val_nrmse": 0.08}, {"val_nrmse": 0.06}], 0.01, 3, 0.05)
    assert stop_reason([{"val_nrmse": None}], 0.01, 3, 0.05) is None  # not fittable yet: the next round covers it


def test_a_round_adds_the_requested_coverage():
    space = space_from_config(validate(RAW))
    rng = np.random.default_rng(0)
    timed = [[int(rng.choice(c)) for c in space.layer_choices] for _ in range(5)]
    start = coverage_counts(space, np.stack([space.indices(c) for c in timed])).min()
    new = next_round(space, timed, 2, seed=0, k=1)
    both = np.concatenate([np.stack([space.indices(c) for c in timed]), new])
    assert coverage_counts(space, both).min() >= start + 2
    assert np.array_equal(new, next_round(space, timed, 2, seed=0, k=1))  # seeded


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    d = tmp_path_factory.mktemp("rounds")
    cfg = validate(RAW)
    space = space_from_config(cfg)
    sample(cfg, d / "configs.parquet")

    def go(out, resume, stop_after=None):
        return profile(space, "synth", cfg["devices"]["synth"], d / "configs.parquet", d / out, d / resume,
                       cfg["profiling"], cfg["seed"], progress=False, stop_after=stop_after, lut_cfg=cfg["lut"])

    return d, cfg, go


def test_rounds_time_more_networks_until_the_table_validates(rounds):
    d, cfg, go = rounds
    res = go("full.parquet", "a")
    h = res["rounds"]
    assert 2 <= len(h) <= 4 and res["rounds_stopped"]
    assert h[1]["val_nrmse"] < h[0]["val_nrmse"] and h[1]["train_networks"] > h[0]["train_networks"]
    table, meta = io.read_table(d / "full.parquet", "latency")
    rows = table.to_pylist()
    configs = io.read_table(d / "configs.parquet", "configs")[0].to_pylist()
    later = [r for r in rows if r["round"] > 0]
    assert later and all(r["role"] == "sample" and r["set"] == "train" for r in later)
    assert min(r["config_id"] for r in later) == len(configs)  # new ids after the sampled ones
    assert all(r["round"] == 0 for r in rows if r["set"] in ("test", "lambda_val"))  # held-out sets never grow
    assert meta["rounds"] == h and meta["rounds_stopped"] == res["rounds_stopped"]
    # the fit report says how profiling went
    fit_lut(cfg, "synth", d / "full.parquet", d / "lut.parquet", d / "fit.parquet")
    assert io.read_table(d / "fit.parquet", "lut_fit")[1]["rounds"] == h


def test_a_session_killed_in_a_later_round_resumes_to_the_same_file(rounds):
    d, cfg, go = rounds
    full = io.read_table(d / "full.parquet", "latency")[0].drop(["t_start_s"]).to_pandas()
    n0 = int((full["round"] == 0).sum())
    part = go("part.parquet", "b", stop_after=n0 + 3)
    assert not part["complete"]
    go("part.parquet", "b")
    again = io.read_table(d / "part.parquet", "latency")[0].drop(["t_start_s"]).to_pandas()
    pd.testing.assert_frame_equal(again, full)  # NaN columns (no large reference) compare equal
