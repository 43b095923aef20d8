"""Decisions verified on their device (docs/method.md D36): the loop of aows_core.latency.verify and its refit.

The device is the synthetic one with a strong non-additive term, so the profiled table errs where the decoder
looks; its noise-free `true_latency` stands for a timing, so every property is exact.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from aows_core.config import resolve, validate
from aows_core.devices import get_device
from aows_core.latency import fit, lut
from aows_core.latency.sampling import config_rows
from aows_core.latency.verify import LEVEL, Timing, refit_with, session_margin, upper_rank, verify_decision
from aows_core.search.decisions import decide
from aows_core.search.targets import DeviceTable, resolve_target

RAW = {"seed": 1, "space": {"resolution": 8, "n_choices": 3, "width_mult": 0.25},
       "devices": {"synth": {"backend": "synthetic", "noise": 0.0, "drift": 0.0, "nonadditive": 0.15}},
       "sampling": {"coverage": 3, "lambda_val": 20, "test": 5}}


@pytest.fixture(scope="module")
def table():
    """The space, the noise-free device, the training and λ-validation sets and the table fitted on them."""
    cfg = resolve(validate(RAW))
    # eq. lat's additive table: these tests are about verification (D36), not the link
    cfg = replace(cfg, lut=cfg.lut.replace(link_knots=[]))
    space = cfg.space
    dev = get_device(cfg.device("synth"), space, cfg.seed)
    rows, _ = config_rows(space, cfg.seed, cfg.sampling)
    cols = {"role": ["sample"] * len(rows), "set": [r["set"] for r in rows], "channels": [r["channels"] for r in rows],
            "latency_ms": [dev.true_latency(r["channels"]) for r in rows], "config_id": [r["config_id"] for r in rows]}
    sets = lut.split_sets(space, cols)
    chosen = fit.fit_table(space, sets, cfg.lut).fit
    # refits keep the table's smoothness weight, as the verified decisions do (D38)
    cfg = replace(cfg, lut=cfg.lut.replace(smoothness=[chosen.mu]))
    return cfg, space, dev, sets, chosen.x


def _ows(space):
    """The decoder (eq. lagrange) under unaries where wider is better: it seeks the fastest-looking networks."""
    rng = np.random.default_rng(0)
    u = [(len(c) - np.arange(len(c))) * 0.1 + rng.normal(0, 0.02, len(c)) for c in space.choices]
    return lambda x, aim: decide(space, u, DeviceTable(x, "ms", device="synth"), [f"{aim:.12f}ms"], method="ows")[0]


def _target(space, x0, r):
    return resolve_target(f"range:{r}", space, x0, "ms")


def _verify(table, target, spread=0.0, **kw):
    """verify_decision with timings of three rounds at the true latency × (1 − spread, 1, 1 + spread)."""
    cfg, space, dev, sets, x0 = table
    timings = []

    def time_network(c):
        timings.append(list(c))
        return Timing.of([dev.true_latency(c) * (1 + s) for s in (-spread, 0.0, spread)])

    refit = lambda timed: refit_with(space, sets, timed, cfg.lut, 20)  # noqa: E731
    row, x, trace = verify_decision(_ows(space), time_network, refit, x0, target_ms=target, **kw)
    return row, x, trace, timings


def test_the_refit_honours_the_verified_network(table):
    """A network the additive table mispredicts by several percent is predicted within 1 % once it counts 20 times."""
    cfg, space, dev, sets, x0 = table
    cands = [r["channels"] for r in config_rows(space, 5, cfg.sampling.replace(coverage=1))[0]][:40]
    errs = [lut.predict(space, x0, space.indices(c)) / dev.true_latency(c) - 1 for c in cands]
    worst = cands[int(np.argmax(np.abs(errs)))]
    assert abs(max(errs, key=abs)) > 0.03
    x = refit_with(space, sets, {tuple(worst): dev.true_latency(worst)}, cfg.lut, 20)
    assert abs(lut.predict(space, x, space.indices(worst)) / dev.true_latency(worst) - 1) < 0.01


def test_verification_ends_on_a_network_whose_timing_confirms_its_prediction(table):
    """Every target: the final decision's network was timed and lands within the tolerance, the trace says so, and
    the decision is the decoder's on the final table; without verification some target misses by more."""
    cfg, space, dev, sets, x0 = table
    missed = []
    for r in (0.3, 0.5, 0.7, 0.9):
        target = _target(space, x0, r)
        first = _ows(space)(x0, target)
        missed.append(abs(first["predicted_latency_ms"] / dev.true_latency(first["channels"]) - 1))
        row, x, trace, timings = _verify(table, target, tolerance=0.025, max_rounds=6)  # verify.tolerance's default
        last = trace[-1]
        assert last["channels"] == row["channels"] and abs(last["rel_error"]) <= 0.025
        assert last["meets_target"] and dev.true_latency(row["channels"]) <= target
        assert row["predicted_latency_ms"] == pytest.approx(last["predicted_ms"])
        assert last["measured_ms"] == pytest.approx(dev.true_latency(row["channels"]))
        assert row == _ows(space)(x, last["aim_ms"])
        assert len(timings) == len({tuple(c) for c in timings}) == sum(t["timed"] for t in trace)
    assert max(missed) > 0.025


def test_a_decision_is_accepted_only_when_its_upper_bound_meets_the_target(table):
    """Timings that spread ±2 % over 3 rounds (the bound is then the slowest): a decision ends accepted (predicted
    within the tolerance) only on a network whose bound meets the target; the aim drops only after a pick predicted
    within the tolerance had its bound over the target, to its prediction × target ÷ bound. Accepting on the
    prediction alone (the bound ignored, as before) would have kept a network with rounds over the target."""
    cfg, space, dev, sets, x0 = table
    over, accepted = 0, 0
    for r in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        target = _target(space, x0, r)
        row, x, trace, _ = _verify(table, target, spread=0.02, tolerance=0.025, max_rounds=8)
        last = trace[-1]
        assert last["measured_upper_ms"] == last["measured_hi_ms"] == pytest.approx(dev.true_latency(row["channels"]) * 1.02)
        assert last["meets_target"] == (last["measured_upper_ms"] <= target)
        accepted += abs(last["rel_error"]) <= 0.025
        if abs(last["rel_error"]) <= 0.025:
            assert last["meets_target"] and "stopped" not in last
        if "stopped" not in last:
            assert row == _ows(space)(x, last["aim_ms"])
        for a, b in zip(trace, trace[1:]):
            lowered = abs(a["rel_error"]) <= 0.025 and not a["meets_target"]
            aim = min(a["aim_ms"], a["predicted_ms"] * target / a["measured_upper_ms"]) if lowered else a["aim_ms"]
            assert b["aim_ms"] == pytest.approx(aim)
        blind = next((t for t in trace if abs(t["rel_error"]) <= 0.025), None)  # where the bound-blind loop stops
        over += blind is not None and blind["measured_hi_ms"] > target
    assert accepted >= 4 and over > 0


def test_a_margin_keeps_the_verified_median_that_far_under_the_target(table):
    """With a session margin m, a decision first aims at target ÷ (1 + m) and is judged by the larger of its upper
    bound and its median × (1 + m): every accepted decision's median lies m under the target, and the aim drops by
    the overshoot of that bound. Without the margin, some accepted median lies within m of the target."""
    cfg, space, dev, sets, x0 = table
    m, close = 0.03, 0
    for r in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        target = _target(space, x0, r)
        row, x, trace, _ = _verify(table, target, spread=0.01, tolerance=0.025, max_rounds=8, margin=m)
        assert trace[0]["aim_ms"] == pytest.approx(target / (1 + m))
        for t in trace:
            assert t["bound_ms"] == pytest.approx(max(t["measured_upper_ms"], t["measured_ms"] * (1 + m)))
            assert t["meets_target"] == (t["bound_ms"] <= target)
        for a, b in zip(trace, trace[1:]):
            lowered = abs(a["rel_error"]) <= 0.025 and not a["meets_target"]
            assert b["aim_ms"] == pytest.approx(min(a["aim_ms"], a["predicted_ms"] * target / a["bound_ms"]) if lowered
                                                else a["aim_ms"])
        last = trace[-1]
        if abs(last["rel_error"]) <= 0.025 and "stopped" not in last:
            assert dev.true_latency(row["channels"]) * (1 + m) <= target * (1 + 1e-9)
        row0, _, trace0, _ = _verify(table, target, spread=0.01, tolerance=0.025, max_rounds=8)
        close += trace0[-1]["meets_target"] and dev.true_latency(row0["channels"]) * (1 + m) > target
    assert close > 0


def test_a_margin_no_network_meets_aims_at_the_target_itself(table):
    """A target so near the fastest network that nothing runs a margin under it is decided at the target itself,
    judged as before; with no margin the decoder's own refusal stands."""
    from aows_core.search.results import InfeasibleTarget
    from aows_core.search.targets import latency_range

    cfg, space, dev, sets, x0 = table
    fastest = float(latency_range(space, x0)[0])
    row, x, trace, _ = _verify(table, fastest * 1.01, tolerance=0.5, max_rounds=0, margin=0.05)
    assert trace[0]["aim_ms"] == pytest.approx(fastest * 1.01)
    with pytest.raises(InfeasibleTarget):
        _verify(table, fastest * 0.99, tolerance=0.5, max_rounds=0, margin=0.0)


def test_the_session_margin_holds_a_median_at_its_bound_at_level_2_to_the_minus_5():
    """session_margin(σ) against simulation: two sessions whose medians err by independent N(0, σ²) in log time; a
    median verified exactly at target ÷ (1 + m) is timed over the target again in LEVEL of draws."""
    rng = np.random.default_rng(0)
    for sigma in (0.01, 0.025, 0.05):
        m = session_margin(sigma)
        e = rng.normal(0.0, sigma, (2, 400_000))
        # verified median v = truth·e^{e0} at target/(1+m); measured truth·e^{e1} = v·e^{e1−e0}
        miss = np.mean(e[1] - e[0] > np.log(1 + m))
        assert miss == pytest.approx(LEVEL, rel=0.05)


def test_verification_stops_after_max_rounds_and_says_it_did_not_converge(table):
    """A device that never agrees with the table: max_rounds refits, max_rounds + 1 timings at most, and the last
    trace row carries the error left."""
    cfg, space, dev, sets, x0 = table
    calls = []

    def slow(c):
        calls.append(c)
        return Timing.of([2.0 * dev.true_latency(c)])

    target = _target(space, x0, 0.5)
    row, x, trace = verify_decision(_ows(space), slow, lambda timed: x0, x0, target_ms=target, tolerance=0.01,
                                    max_rounds=3)
    assert len(trace) == 4 and len(calls) == 1 and [t["timed"] for t in trace] == [True, False, False, False]
    assert trace[-1]["rel_error"] == pytest.approx(row["predicted_latency_ms"] / (2 * dev.true_latency(row["channels"])) - 1)
    assert trace[-1]["rel_error"] < -0.3
    row0, _, trace0 = verify_decision(_ows(space), slow, lambda timed: x0, x0, target_ms=target, tolerance=0.01,
                                      max_rounds=0)
    assert len(trace0) == 1 and row0 == row


def test_a_target_the_device_cannot_meet_keeps_the_last_decision_and_says_why(table):
    """Near the bottom of the range the device is slower than the table: after a refit no network meets the pinned
    target; the decision before that refit stands, timed, and the trace says why verification stopped."""
    cfg, space, dev, sets, x0 = table
    target = _target(space, x0, 0.2)
    row, x, trace, timings = _verify(table, target, tolerance=0.01, max_rounds=6)
    assert "no network meets the target" in trace[-1]["stopped"]
    assert trace[-1]["channels"] == row["channels"] and np.array_equal(x, x0) == (len(trace) == 1)
    assert row == _ows(space)(x, trace[-1]["aim_ms"])


def test_a_timing_is_the_median_of_its_rounds_with_their_range():
    """The interval a decision is accepted on (D36): the rounds' range around their median."""
    t = Timing.of([1.0, 1.1, 0.98, 1.02, 1.3])
    assert (t.ms, t.lo, t.hi, t.rounds) == (1.02, 0.98, 1.3, 5)
    assert t.half_width == pytest.approx(0.32 / 2.04)
    assert Timing.of([2.0]).half_width == 0.0


def test_the_upper_bound_is_the_order_statistic_of_the_binomial_tail():
    """Timing.upper is the k-th smallest of n rounds with k the least whose binomial tail P(Bin(n, ½) ≥ k) is at most
    LEVEL (2^-5), counted here with exact integers; under 5 rounds, the slowest; 5 rounds, the slowest; 15 rounds of
    which 3 are spikes (a disturbed session), the bound ignores the spikes."""
    from math import comb

    for n in range(1, 31):
        tail = lambda k: sum(comb(n, j) for j in range(k, n + 1)) / 2 ** n  # noqa: E731
        k = upper_rank(n)
        if n < 5:
            assert k == n and tail(n) > LEVEL
        else:
            assert tail(k) <= LEVEL < tail(k - 1)
    assert upper_rank(5) == 5 and upper_rank(15) == 12
    t = Timing.of([1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0, 1.02, 1.01, 1.0, 1.3, 1.25, 1.4])
    assert t.hi == 1.4 and t.upper == 1.02 and t.rounds == 15
