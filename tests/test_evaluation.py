"""Results of a device (§7): the joined table, intervals and Pareto flags (aows_core.evaluation)."""

import math

import numpy as np
import pytest

from aows_core.evaluation import (
    join_results,
    kendall_within,
    method_comparison,
    proxy_rows,
    ranking_reliability,
    t_interval,
    training_rows,
    wilson_interval,
)


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


def test_the_size_baseline_says_bigger_is_better():
    """Regression: the baseline a proxy must beat scored −MMAC ("smaller is better"), so a front where bigger
    networks were more accurate gave it τ −1 and any proxy looked better than size."""
    rows = [{"method": "ows", "target": str(k), "sum_delta": 3.0 - k, "supernet_acc": 0.5 + 0.01 * k, "mmacs": 10.0 + k,
             "test_acc": 0.8 + 0.01 * k} for k in range(4)]
    taus = {r["proxy"]: r["kendall_tau"] for r in proxy_rows(rows)}
    assert taus["mmacs"] == pytest.approx(1.0) and taus["-sum_delta"] == pytest.approx(1.0)
    assert [r["score"] for r in proxy_rows(rows) if r["proxy"] == "mmacs"] == [10.0, 11.0, 12.0, 13.0]


def test_method_comparison_says_which_differences_resolve():
    """Welch's t over seeds, Benjamini–Hochberg over all pairs: a 10-point gap at tight seeds separates, a
    0.2-point gap at 1-point spreads does not, and one seed is not tested."""
    def row(method, target, acc, std, seeds=3):
        return {"method": method, "target": target, "test_acc": acc, "test_acc_std": std, "seeds": seeds}

    rows = [row("aows", "a", 0.90, 0.005), row("ows", "a", 0.80, 0.005), row("greedy", "a", 0.899, 0.01),
            row("aows", "b", 0.802, 0.01), row("ows", "b", 0.800, 0.01)]
    pairs, message = method_comparison(rows)
    by = {(q["target"], q["better"], q["worse"]): q for q in pairs}
    assert len(pairs) == 4 and by[("a", "aows", "ows")]["separated"] and by[("a", "greedy", "ows")]["separated"]
    assert not by[("a", "aows", "greedy")]["separated"] and not by[("b", "aows", "ows")]["separated"]
    assert by[("a", "aows", "ows")]["difference"] == pytest.approx(0.10)
    assert all(q["p_adjusted"] >= q["p_value"] for q in pairs)
    assert "a: aows > ows by 10.00 points" in message and "b: no two methods differ" in message
    single, msg = method_comparison([row("aows", "a", 0.9, float("nan"), 1), row("ows", "a", 0.8, 0.01)])
    assert single[0]["separated"] is None and "not tested (one seed)" in msg


def test_kendall_within_counts_only_pairs_of_one_target():
    """Against brute force: one group is scipy's τ; across two groups only the within-group pairs count."""
    from scipy.stats import kendalltau

    rng = np.random.default_rng(1)
    s, a = rng.normal(size=9), rng.normal(size=9)
    assert kendall_within(s, a, ["t"] * 9) == pytest.approx(kendalltau(s, a).statistic)
    # within each target the score orders accuracy; across targets it is reversed
    score, acc = [1, 2, 3, 11, 12, 13], [0.93, 0.94, 0.95, 0.80, 0.81, 0.82]
    assert kendall_within(score, acc, list("aaabbb")) == pytest.approx(1.0)
    assert kendalltau(score, acc).statistic < 0
    assert math.isnan(kendall_within([1, 2], [0.1, 0.2], ["a", "b"]))


def _ranked(acc, std, seeds=3, targets=None):
    return [{"method": "ows", "target": (targets or ["x"] * len(acc))[i], "test_acc": a, "test_acc_std": std,
             "seeds": seeds, "test_acc_low": a - 0.01, "test_acc_high": a + 0.01} for i, a in enumerate(acc)]


def test_ranking_reliability_resolves_only_what_the_seeds_allow():
    """Seeds that spread far less than the finalists' gaps: re-runs reproduce the ranking (τ 1), a proxy equal to the
    accuracy beats a reversed size baseline in every re-run. Spreads far above the gaps: the retest τ is near 0 and
    two proxies that differ by chance do not separate."""
    acc = list(np.linspace(0.80, 0.90, 8))
    good, msg = ranking_reliability(_ranked(acc, 1e-5), {"-sum_delta": acc, "mmacs": acc[::-1]}, draws=200)
    assert good["retest_tau"]["median"] == pytest.approx(1.0) and good["tau_ceiling"]["low"] == pytest.approx(1.0)
    assert good["proxies"]["-sum_delta"]["p_beats_size"] == 1.0 and "-sum_delta ranks above size" in msg
    assert good["proxies"]["mmacs"]["kendall_tau"] == pytest.approx(-1.0)
    noisy, msg = ranking_reliability(_ranked(acc, 0.5), {"-sum_delta": acc, "mmacs": acc[2:] + acc[:2]}, draws=400)
    assert abs(noisy["retest_tau"]["median"]) < 0.2 and noisy["retest_tau"]["low"] < -0.3
    assert 0.05 < noisy["proxies"]["-sum_delta"]["p_beats_size"] < 0.95 and "does not separate from size" in msg
    # one seed: the Wilson half-widths stand for the spread
    one, _ = ranking_reliability(_ranked(acc, float("nan"), seeds=1), {"mmacs": acc}, draws=50)
    assert 0 < one["retest_tau"]["median"] < 1
    assert ranking_reliability(_ranked(acc[:2], 0.01), {"mmacs": acc[:2]}) == ({}, "")


@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_wilson_interval_is_scipys(level):
    """The interval is scipy's binomtest Wilson interval (the reference), bitwise, at every k of small and large n."""
    from scipy.stats import binomtest

    for n in (1, 2, 7, 100, 10_000):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            ci = binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
            assert wilson_interval(k, n, level) == (ci.low, ci.high), (k, n)


def test_wilson_interval_and_training_rows():
    lo, hi = wilson_interval(80, 100)
    assert lo < 0.8 < hi
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
    keys = ("epoch", "sampling", "loss_max", "loss_min", "loss_random", "train_acc_max", "temperature", "images_per_s")
    r = dict.fromkeys(keys, 1) | {"extra": 2}
    assert training_rows({"ows": [r, r]}) == [{"run": "ows", **dict.fromkeys(keys, 1)}] * 2
    assert np.isfinite(lo)
