"""Results of a device (§7): the joined table, intervals and Pareto flags (aows_core.evaluation)."""

import math

import numpy as np
import pytest

from aows_core.evaluation import join_results, t_interval, training_rows, wilson_interval


def _measure(method, target, ms):
    return {"method": method, "target": target, "target_ms": 5.0, "unit": "ms", "channels": [8, 16],
            "predicted_ms": ms, "measured_ms": ms, "measured_ms_min": ms, "measured_ms_max": ms,
            "meets_target_predicted": True, "meets_target_measured": ms <= 5.0, "too_noisy": False}


def test_join_results_means_seeds_and_flags_the_front():
    measure = [_measure("ows", "a", 3.0), _measure("aows", "a", 2.0)]
    runs = {("ows", "a"): [{"test_acc": 0.8, "test_acc_low": 0.7, "test_acc_high": 0.9, "test_n": 100}],
            ("aows", "a"): [{"test_acc": a, "test_n": 100} for a in (0.84, 0.86, 0.85)]}
    rows = join_results("d", measure, runs, {("aows", "a"): {"sum_delta": 1.5}}, lambda ch: 2e6 * sum(ch))
    ows, aows = rows
    assert (ows["test_acc_low"], ows["test_acc_high"], ows["seeds"]) == (0.7, 0.9, 1) and math.isnan(ows["test_acc_std"])
    lo, hi, std = t_interval([0.84, 0.86, 0.85])
    assert aows["test_acc"] == pytest.approx(0.85) and (aows["test_acc_low"], aows["test_acc_high"]) == (lo, hi)
    assert lo < 0.85 < hi and std == pytest.approx(0.01)
    assert aows["mmacs"] == 48.0 and aows["sum_delta"] == 1.5 and math.isnan(ows["sum_delta"])
    assert [r["pareto_optimal"] for r in rows] == [False, True]
    assert join_results("d", [], {}, {}, sum) == []


def test_wilson_interval_and_training_rows():
    lo, hi = wilson_interval(80, 100)
    assert lo < 0.8 < hi
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
    keys = ("epoch", "sampling", "loss_max", "loss_min", "loss_random", "train_acc_max", "temperature", "images_per_s")
    r = dict.fromkeys(keys, 1) | {"extra": 2}
    assert training_rows({"ows": [r, r]}) == [{"run": "ows", **dict.fromkeys(keys, 1)}] * 2
    assert np.isfinite(lo)
