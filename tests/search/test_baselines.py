"""Baseline decisions: uniform multipliers and the first greedy point meeting a target, against brute force."""

import numpy as np
import pytest

from aows_core.devices.flops import variable_macs
from aows_core.search.baselines import decide_greedy, decide_uniform, greedy_search, greedy_trim
from aows_core.search.graph import space_latency_chain
from aows_core.search.results import InfeasibleTarget
from aows_core.search.targets import DeviceTable, check_feasible, latency_range, lut_tables
from aows_core.space import get_space
from aows_core.space import multiplier_configs as uniform_configs


@pytest.fixture(scope="module")
def case():
    space = get_space("mobilenet_v1_fmnist", n_choices=4, width_mult=0.5)
    x = variable_macs(space) / 1e6
    return space, x


def lat(space, x, channels):
    return float(x[space.variable_ids(space.indices(channels))].sum())


def test_uniform_configs_are_nested_and_span_the_space(case):
    space, _ = case
    cands = uniform_configs(space)
    assert cands[0][1] == space.min_config and cands[-1][1] == space.max_config
    for (m0, a), (m1, b) in zip(cands, cands[1:]):
        assert m0 < m1 and all(p <= q for p, q in zip(a, b)) and a != b


def test_uniform_decision_is_the_largest_multiplier_meeting_the_target(case):
    space, x = case
    cands = uniform_configs(space)
    lats = [lat(space, x, c) for _, c in cands]
    for frac in (0.05, 0.3, 0.7, 1.0):
        rows = decide_uniform(space, DeviceTable(x, "MMAC", device="flops"), [f"range:{frac}"])
        (r,) = rows
        want = max(k for k, v in enumerate(lats) if v <= r["target_ms"] + 1e-12)
        assert r["channels"] == cands[want][1]
        assert r["predicted_latency_ms"] == pytest.approx(lats[want])
        assert r["objective"] is None and r["exact"] is False and r["method"] == "uniform"


def test_greedy_decision_is_the_first_trajectory_point_meeting_the_target(case):
    space, x = case
    rng = np.random.default_rng(0)
    idx = np.array([len(c) - 1 for c in space.layer_choices])
    traj = [[c[j] for c, j in zip(space.layer_choices, idx)]]
    while idx.any():
        i = rng.choice(np.flatnonzero(idx))
        idx[i] -= 1
        traj.append([c[j] for c, j in zip(space.layer_choices, idx)])
    lats = [lat(space, x, c) for c in traj]
    (r,) = decide_greedy(space, traj, DeviceTable(x, "MMAC", device="flops"), ["range:0.4"])
    first = next(k for k, v in enumerate(lats) if v <= r["target_ms"])
    assert r["channels"] == traj[first] and r["method"] == "greedy"
    with pytest.raises(InfeasibleTarget, match="greedy trajectory"):
        decide_greedy(space, traj[:3], DeviceTable(x, "MMAC", device="flops"), ["range:0.1"])


class _Scorer:
    """A scorer with the SubnetScorer interface: (errors, summed CE) of a configuration, calls recorded."""

    def __init__(self, space, seed=0):
        rng = np.random.default_rng(seed)
        self.space, self.n, self.calls = space, 40, []
        self.table = [rng.integers(0, 6, len(c)) for c in space.layer_choices]

    def score(self, channels, start_edge=0):
        self.calls.append((list(channels), start_edge))
        idx = [c.index(w) for c, w in zip(self.space.layer_choices, channels)]
        errors = int(sum(t[i] for t, i in zip(self.table, idx)))
        return errors, 0.5 * errors + 1e-3 * sum(idx)


def test_greedy_search_trims_layer_by_layer_with_cached_prefixes(case):
    space, _ = case
    scorer = _Scorer(space)
    seen = []
    rows = greedy_search(scorer, on_step=seen.append)
    assert rows[0]["channels"] == space.max_config and rows[-1]["channels"] == space.min_config
    assert len(rows) == sum(len(c) - 1 for c in space.layer_choices) + 1 and seen == rows[1:]
    assert scorer.calls[0] == (space.max_config, 0)
    for a, b in zip(rows, rows[1:]):
        diff = [i for i, (p, q) in enumerate(zip(a["channels"], b["channels"])) if p != q]
        assert diff == [b["lowered_layer"]] and b["error"] == b["errors"] / 40
    # the same trajectory as the trimming loop driven by the same (errors, CE) score
    ref = greedy_trim([len(c) for c in space.choices], lambda c, _n: scorer.score(space.channels_of(c)))
    assert [r["channels"] for r in rows] == [space.channels_of(c) for c in ref]


def test_latency_chain_and_feasibility(case):
    space, x = case
    chain = space_latency_chain(space, lut_tables(space, x))
    assert chain.n_nodes == space.n_nodes and chain.counts.tolist() == [len(c) for c in space.choices]
    lo, hi, fastest, slowest = latency_range(space, x)
    assert fastest == space.min_config and slowest == space.max_config
    assert check_feasible("range:0.5", space, x, "MMAC", "flops") == (lo + 0.5 * (hi - lo), lo, hi)
    with pytest.raises(InfeasibleTarget, match="below the smallest latency"):
        check_feasible(f"{lo / 2}mflops", space, x, "MMAC", "flops")
