"""Unary statistics (§5 eq. average_error), their window variant, and the AOWS sampler and schedule (§6, supp. B)."""

import numpy as np
import pytest

from aows_core import artifacts as io
from aows_core.artifacts import read_unaries
from aows_core.config import AowsSettings
from aows_core.devices.flops import variable_macs
from aows_core.search.chain import Chain
from aows_core.search.results import InfeasibleTarget
from aows_core.search.sampler import (
    UNIFORM_ENTROPY,
    AOWSSampler,
    TemperatureSchedule,
    calibrate_scale,
    sampling_gamma,
    temperature_at,
)
from aows_core.search.targets import latency_range, lut_tables
from aows_core.search.unaries import EpochUnaries, WindowUnaries, all_gather_update, fit_additive, width_signal

SIZES = (3, 4, 5, 4, 3)


def draws(n, rng, sizes=SIZES):
    return np.stack([rng.integers(0, k, n) for k in sizes], 1)


# ---- eq. average_error ---------------------------------------------------------------------------
@pytest.mark.parametrize("est", ["epoch", "window"])
def test_additive_losses_are_recovered_up_to_a_layer_constant(est):
    rng = np.random.default_rng(0)
    f = [rng.normal(0, 1, k) for k in SIZES]
    N = 40_000
    idx = draws(N, rng)
    diff = sum(f[i][idx[:, i]] for i in range(len(SIZES))) + rng.normal(0, 0.2, N)
    u = EpochUnaries(SIZES) if est == "epoch" else WindowUnaries(SIZES, window=N)
    for chunk in np.array_split(np.arange(N), 7):
        u.update(idx[chunk], diff[chunk])
    means = [fi.mean() for fi in f]
    for i, d in enumerate(u.delta()):
        assert d.dtype == np.float64
        const = sum(means) - means[i]  # the mean effect of the other layers under uniform sampling
        # standard error ≈ sqrt(Σ var f_j + noise²) / sqrt(N / k) ≈ 0.025; allow 5 of them
        np.testing.assert_allclose(d - f[i], const, atol=0.12)
        np.testing.assert_allclose((d - f[i]) - (d - f[i]).mean(), 0, atol=0.12)
    assert sum(c.sum() for c in u.counts()) == N * len(SIZES)


def test_epoch_unaries_exact_means_nan_and_reset():
    u = EpochUnaries((2, 3))
    u.update([[0, 2], [1, 2], [0, 0]], [1.0, 2.0, 4.0])
    d, n = u.delta(), u.counts()
    np.testing.assert_array_equal(n[0], [2, 1])
    np.testing.assert_array_equal(n[1], [1, 0, 2])
    np.testing.assert_allclose(d[0], [2.5, 2.0])
    assert d[1][0] == 4.0 and np.isnan(d[1][1]) and d[1][2] == 1.5
    assert u.sums.dtype == np.float64 and u.n.dtype == np.int64
    nodes = u.node_unaries()
    assert len(nodes) == 4 and nodes[0].tolist() == [0.0] and nodes[-1].tolist() == [0.0]
    u.reset()
    assert all(np.isnan(x).all() for x in u.delta())


def test_float64_accumulation():
    u = EpochUnaries((1,))
    for _ in range(5):
        u.update(np.zeros((200_000, 1), int), np.full(200_000, 0.1) + 1e4)
    assert u.delta()[0][0] == pytest.approx(1e4 + 0.1, rel=1e-9)  # float32 sums would be off by ~1e-5 or worse


def test_window_keeps_the_last_k_in_order_and_stale_widths_keep_their_estimate():
    u = WindowUnaries((2,), window=3)
    u.update([[0], [0], [1]], [1.0, 2.0, 10.0])
    u.update([[0], [0], [0]], [3.0, 4.0, 5.0])  # width 0 saw 1..5: the window holds 3, 4, 5
    np.testing.assert_allclose(u.delta()[0], [4.0, 10.0])  # width 1 was not sampled again: keeps 10
    np.testing.assert_array_equal(u.counts()[0], [3, 1])
    np.testing.assert_array_equal(u.total_seen()[0], [5, 1])
    u.update([[0]] * 7, np.arange(7.0))  # more than the window in one batch: the last 3 win
    assert u.delta()[0][0] == pytest.approx(5.0)


@pytest.mark.parametrize("est", ["epoch", "window"])
def test_batched_update_equals_one_sample_at_a_time(est):
    rng = np.random.default_rng(1)
    idx = draws(300, rng)
    d = rng.normal(size=300)
    make = (lambda: EpochUnaries(SIZES)) if est == "epoch" else (lambda: WindowUnaries(SIZES, window=7))
    a, b = make(), make()
    a.update(idx, d)
    for k in range(300):
        b.update(idx[k : k + 1], d[k : k + 1])
    for x, y in zip(a.delta(), b.delta()):
        np.testing.assert_allclose(x, y, rtol=1e-12)
    # (R, B, ·) input and (B, n+1) chain-node input are accepted
    c = make()
    nodes = np.c_[np.zeros(300, int), idx, np.zeros(300, int)]
    c.update(nodes.reshape(3, 100, -1), d.reshape(3, 100))
    for x, y in zip(a.delta(), c.delta()):
        np.testing.assert_allclose(x, y, rtol=1e-12)


@pytest.mark.parametrize("est", ["epoch", "window"])
def test_state_dict_resume_is_exact(est):
    rng = np.random.default_rng(2)
    make = (lambda: EpochUnaries(SIZES)) if est == "epoch" else (lambda: WindowUnaries(SIZES, window=5))
    a = make()
    a.update(draws(50, rng), rng.normal(size=50))
    b = make()
    b.load_state_dict(a.state_dict())
    more = draws(20, rng), rng.normal(size=20)
    a.update(*more)
    b.update(*more)
    for x, y in zip(a.delta(), b.delta()):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError):
        EpochUnaries((2, 2)).load_state_dict(a.state_dict())


def test_data_parallel_merge_and_gather():
    rng = np.random.default_rng(3)
    parts = [(draws(40, rng), rng.normal(size=40)) for _ in range(3)]
    whole = EpochUnaries(SIZES)
    for p in parts:
        whole.update(*p)
    ranks = []
    for p in parts:
        r = EpochUnaries(SIZES)
        r.update(*p)
        ranks.append(r)
    merged = EpochUnaries(SIZES)
    for r in ranks:
        merged.merge(r)
    reduced = EpochUnaries(SIZES)
    reduced.update(*parts[0])
    # what an all-reduce (SUM) over the three ranks returns for each raw array
    reduced.all_reduce(lambda a: sum(r.sums for r in ranks) if a.dtype == np.float64 else sum(r.n for r in ranks))
    for x, y, z in zip(whole.delta(), merged.delta(), reduced.delta()):
        np.testing.assert_allclose(x, y, rtol=1e-12)
        np.testing.assert_allclose(x, z, rtol=1e-12)
    # windows: gather the step's updates from every rank, in rank order
    w1, w2 = WindowUnaries(SIZES, 4), WindowUnaries(SIZES, 4)
    w1.update(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    calls = iter([[p[0] for p in parts], [p[1] for p in parts]])
    all_gather_update(w2, parts[0][0], parts[0][1], gather_fn=lambda a: next(calls))
    for x, y in zip(w1.delta(), w2.delta()):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(TypeError, match="not summable"):
        w1.merge(w2)


def test_invalid_inputs_are_refused():
    u = EpochUnaries(SIZES)
    with pytest.raises(ValueError, match="choice indices"):
        u.update([[16, 0, 0, 0, 0]], [0.0])  # a channel count, not an index
    with pytest.raises(ValueError, match="non-finite"):
        u.update([[0] * 5], [np.nan])
    with pytest.raises(ValueError, match="columns"):
        u.update([[0] * 4], [0.0])


def test_rows_round_trip_through_the_artifact(tmp_path, tiny_space):
    rng = np.random.default_rng(4)
    sizes = [len(c) for c in tiny_space.layer_choices]
    u = EpochUnaries(tiny_space)
    idx = draws(30, rng, sizes)
    idx[:, 0] = 0  # width index 1.. of layer 0 never visited
    u.update(idx, rng.normal(size=30))
    rows = u.rows(tiny_space, epoch=3)
    assert len(rows) == sum(sizes)
    assert all((r["delta"] is None) == (r["count"] == 0) for r in rows)
    path = tmp_path / "unaries.parquet"
    io.write_records(rows, path, "unaries", io.provenance(space_name=tiny_space.name, space_hash=tiny_space.hash))
    back, _, epoch = read_unaries(path, tiny_space)
    assert epoch == 3
    for a, b in zip(back, u.node_unaries()):
        np.testing.assert_array_equal(a, b)


# ---- supplementary B: temperature schedule ---------------------------------------------------------
def test_temperature_schedule_anchors():
    sch = TemperatureSchedule(warmup=5, epochs=20)
    for epoch, T in [(5, 1.0), (6, 1e-2), (10, 1e-3), (20, 5e-4), (0, 1.0), (3.5, 1.0), (25, 5e-4)]:
        assert sch(epoch) == pytest.approx(T, rel=1e-12)
    assert sch(5.5) == pytest.approx(1e-1, rel=1e-12)  # log-linear between anchors
    assert sch(8) == pytest.approx(10 ** -2.5, rel=1e-12)
    ts = [sch(e) for e in np.linspace(5, 20, 301)]
    assert all(a >= b for a, b in zip(ts, ts[1:]))
    assert sch.at_step(5, 50, 100) == pytest.approx(1e-1, rel=1e-12)
    assert temperature_at(1 / 15) == pytest.approx(1e-2)
    with pytest.raises(ValueError):
        TemperatureSchedule(warmup=5, epochs=5)


# ---- §6: the AOWS sampler -------------------------------------------------------------------------
@pytest.fixture
def setting(tiny_space):
    rng = np.random.default_rng(5)
    x = variable_macs(tiny_space) / 1e6
    lo, hi, _, _ = latency_range(tiny_space, x)
    # δ falls with width (wider is better), plus noise: a genuine trade-off against latency
    delta = [np.linspace(0.5, 0.0, len(c)) * (1 + i % 3) + rng.normal(0, 0.05, len(c)) for i, c in enumerate(tiny_space.layer_choices)]
    return tiny_space, x, lo, hi, delta


def test_auto_scale_makes_t1_nearly_uniform_and_the_schedule_end_a_single_path(setting):
    """D18: s is set so that T = 1 gives mean normalised entropy UNIFORM_ENTROPY whatever the unaries' units,
    and the end of the supplementary-B schedule (T = 5e-4) leaves a near-single path."""
    space, x, lo, hi, delta = setting
    u = [np.zeros(1)] + delta + [np.zeros(1)]
    ch = Chain(u, lut_tables(space, x))
    s = calibrate_scale(ch, gamma=0.3)
    assert ch.marginals(0.3, s).mean_entropy() == pytest.approx(UNIFORM_ENTROPY, abs=2e-3)
    assert ch.marginals(0.3, 5e-4 * s).mean_entropy() < 0.05
    # the entropy falls monotonically along the schedule
    ts = [temperature_at(v) for v in np.linspace(0, 1, 12)]
    hs = [ch.marginals(0.3, t * s).mean_entropy() for t in ts]
    assert all(b <= a + 1e-12 for a, b in zip(hs, hs[1:]))
    # units do not matter: energies ×3 give s ×3
    scaled = Chain([3 * a for a in u], [3 * t for t in lut_tables(space, x)])
    assert calibrate_scale(scaled, gamma=0.3) == pytest.approx(3 * s, rel=5e-3)
    # a flat energy: every scale is uniform
    flat = Chain([np.zeros(len(c)) for c in space.choices], [0 * t for t in lut_tables(space, x)])
    assert calibrate_scale(flat, gamma=0.0) == 1.0


@pytest.mark.parametrize("mode", ["per_node", "joint"])
def test_low_temperature_concentrates_on_the_lagrangian_minimiser(setting, mode):
    space, x, lo, hi, delta = setting
    target = lo + 0.4 * (hi - lo)
    smp = AOWSSampler(space, x, target, AowsSettings(sampling=mode))
    rng = np.random.default_rng(6)
    out = smp.sample(delta, 1e-4, 4000, rng)
    g = smp.last["gamma"]
    ch = smp.chain(delta)
    assert g == pytest.approx(ch.decode(target).gamma) and g > 0
    lows, highs = ch.solve(g, tie="low"), ch.solve(g, tie="high")  # the minimisers tied at γ*
    if mode == "joint":
        hit = (out == lows).all(1) | (out == highs).all(1)
        assert hit.mean() >= 0.99
    else:
        assert (((out == lows) | (out == highs)).mean(0) >= 0.99).all()
    # with a target at the slowest network every network meets it: γ = 0 and the minimiser is unique here
    smp0 = AOWSSampler(space, x, hi, AowsSettings(sampling=mode))
    out0 = smp0.sample(delta, 1e-4, 2000, rng)
    assert smp0.last["gamma"] == 0.0
    assert ((out0 == smp0.decoded_path).all(1)).mean() >= 0.99


def _brute(chain):
    """Every path of a small chain with its Σδ and latency."""
    import itertools
    paths = np.array(list(itertools.product(*[range(k) for k in chain.counts])))
    return paths, chain.objective(paths), chain.latency(paths)


@pytest.fixture
def slack_chain():
    """A small chain whose unconstrained optimum is neither the fastest nor the slowest path."""
    rng = np.random.default_rng(11)
    k = [1, 3, 3, 3, 3, 3, 1]
    lat = [rng.uniform(0.5, 1.5) * np.add.outer(np.arange(a) + 1.0, np.arange(b) + 1.0) for a, b in zip(k, k[1:])]
    u = [np.zeros(1)] + [rng.normal(0, 0.3, 3) + np.array([0.4, 0.0, 0.3]) for _ in range(5)] + [np.zeros(1)]
    ch = Chain(u, lat)
    paths, D, L = _brute(ch)
    top = ch.unconstrained()
    assert L.min() < ch.latency(top) < L.max()
    return ch, paths, D, L


def test_sampling_gamma_meets_a_slack_target_from_the_slow_side(slack_chain):
    """D31: a target above the unconstrained optimum samples at γ = −γ', γ' the exact dual optimum of
    min Σδ s.t. L ≥ T (checked against brute force), whose Lagrangian minimisers bracket the target."""
    ch, paths, D, L = slack_chain
    L_top = ch.latency(ch.unconstrained())
    for T in np.linspace(L_top + 0.2, L.max() - 0.2, 5):
        res = ch.decode(T)
        assert res.gamma == 0.0 and res.method == "unconstrained"
        g, binding = sampling_gamma(ch, res)
        assert not binding and g < 0
        dual = lambda gp: float(np.min(D - gp * (L - T)))  # noqa: E731 - the slow side's dual function
        grid = np.linspace(0, 4 * -g + 1, 2001)
        assert dual(-g) >= max(dual(v) for v in grid) - 1e-9
        E = D + g * L  # the Lagrangian at γ < 0: its minimisers bracket the target
        tied = np.abs(E - E.min()) <= 1e-9
        assert L[tied].max() >= T - 1e-9 and L[tied].min() <= T + 1e-9
        assert sampling_gamma(ch, res, "optimum") == (0.0, False)
    # a binding target keeps the paper's γ* ≥ 0
    T = 0.5 * (L.min() + L_top)
    res = ch.decode(T)
    assert sampling_gamma(ch, res) == (res.gamma, True) and res.gamma > 0
    # a target at or above the slowest path: nothing to centre on
    assert sampling_gamma(ch, ch.decode(L.max() + 1.0)) == (0.0, False)


def test_slack_target_sampling_centres_on_the_target(setting):
    """D31 regression (the former default's `range:0.4` run sampled a 1.6 ms path for a 2.04 ms target, γ = 0
    throughout): with unaries that prefer a middle width, low-temperature samples sit at the target's latency
    under unbound="target", at the faster unconstrained optimum under "optimum"."""
    space, x, lo, hi, _ = setting
    delta = [np.array([0.3, 0.0, 0.2])[: len(c)] for c in space.layer_choices]
    ch0 = AOWSSampler(space, x, hi).chain(delta)
    L_top = ch0.latency(ch0.unconstrained())
    target = L_top + 0.5 * (hi - L_top)
    rng = np.random.default_rng(12)
    centred = AOWSSampler(space, x, target, AowsSettings(temperature_scale=1.0))
    out = centred.sample(delta, 1e-3, 500, rng)
    assert centred.last["binding"] is False and centred.gamma < 0
    lat = ch0.latency(out)
    assert abs(lat.mean() / target - 1) < 0.15
    literal = AOWSSampler(space, x, target, AowsSettings(temperature_scale=1.0, unbound="optimum"))
    lat0 = ch0.latency(literal.sample(delta, 1e-3, 500, rng))
    assert literal.gamma == 0.0 and abs(lat0.mean() / L_top - 1) < 0.02
    assert literal.state_dict()["unbound"] == "optimum"
    with pytest.raises(ValueError, match="unbound"):
        AOWSSampler(space, x, target, AowsSettings(unbound="paper"))
    other = AOWSSampler(space, x, target)
    with pytest.raises(ValueError, match="unbound"):
        other.load_state_dict(literal.state_dict())


def test_marginals_are_the_chain_marginals_at_t_times_s_and_uniform_at_high_t(setting):
    space, x, lo, hi, delta = setting
    smp = AOWSSampler(space, x, lo + 0.5 * (hi - lo))
    mg = smp.marginals(delta, 0.7)
    ch = smp.chain(delta)
    ref = ch.marginals(smp.gamma, 0.7 * smp.s)
    for a, b in zip(mg.probs, ref.probs):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert smp.last["effective_temperature"] == pytest.approx(0.7 * smp.s)
    hot = smp.marginals(delta, 1e3)
    for p in hot.probs:
        np.testing.assert_allclose(p, 1.0 / p.size, atol=2e-3)


def test_refresh_policy_and_state(setting):
    space, x, lo, hi, delta = setting
    smp = AOWSSampler(space, x, lo + 0.5 * (hi - lo), AowsSettings(temperature_scale=0.5), refresh=3)
    rng = np.random.default_rng(7)
    seen = []
    for k in range(6):
        d = [a * (1 + k) for a in delta]  # unaries change every step; γ only at refreshes
        smp.sample(d, 0.1, 8, rng)
        seen.append((smp.last["refreshed"], smp.last["gamma"], smp.last["scale"]))
    assert [r for r, _, _ in seen] == [True, False, False, True, False, False]
    assert seen[0][1] == seen[1][1] == seen[2][1] != seen[3][1]
    assert all(s == 0.5 for _, _, s in seen)
    other = AOWSSampler(space, x, lo + 0.5 * (hi - lo), AowsSettings(temperature_scale=0.5), refresh=3)
    other.load_state_dict(smp.state_dict())
    assert other.step == 6 and other.gamma == smp.gamma


def test_unvisited_policies_and_infeasible_target(setting):
    space, x, lo, hi, delta = setting
    d = [a.copy() for a in delta]
    d[1][-1] = np.nan  # never visited
    rng = np.random.default_rng(8)
    ex = AOWSSampler(space, x, hi, AowsSettings(unvisited="exclude")).sample(d, 10.0, 2000, rng)
    assert not (ex[:, 2] == len(d[1]) - 1).any()
    pes = AOWSSampler(space, x, hi, AowsSettings(unvisited="pessimistic")).sample(d, 10.0, 2000, rng)
    assert (pes[:, 2] == len(d[1]) - 1).any()
    with pytest.raises(InfeasibleTarget):
        AOWSSampler(space, x, lo * 0.5)
    with pytest.raises(ValueError, match="mode"):
        AOWSSampler(space, x, hi, AowsSettings(sampling="product"))


# ---- D26: the additive least-squares fit of the frozen-weight estimate ------------------------------
def test_additive_fit_recovers_known_unaries_with_calibrated_standard_errors():
    rng = np.random.default_rng(11)
    sizes = [3, 4, 2]
    true = [np.array([0.3, 0.1, 0.0]), np.array([0.5, 0.2, 0.1, 0.0]), np.array([0.2, 0.0])]
    w = np.stack([rng.integers(0, k, 3000) for k in sizes], 1)

    def draw():
        return sum(t[w[:, i]] for i, t in enumerate(true)) + rng.normal(0, 0.1, len(w))

    d = draw()
    fit = fit_additive(sizes, w, d)
    plain = EpochUnaries(sizes)
    plain.update(w, d)
    for i, t in enumerate(true):
        # the differences between widths of a layer are the true ones, within 4 standard errors
        got = fit.delta()[i] - fit.delta()[i][-1]
        assert np.all(np.abs(got - (t - t[-1])) < 4 * np.hypot(fit.standard_errors()[i], fit.standard_errors()[i][-1]))
        # eq. average_error's level: each layer's count-weighted mean is the mean difference
        assert np.average(fit.delta()[i], weights=fit.counts()[i]) == pytest.approx(d.mean())
        # fitting the other layers instead of averaging over them: smaller standard errors
        assert (fit.standard_errors()[i] < plain.standard_errors()[i]).all()
    # the standard error matches the spread of the estimate over repeated noise draws
    spread = np.std([fit_additive(sizes, w, draw()).delta()[1][0] for _ in range(150)])
    assert spread == pytest.approx(fit.standard_errors()[1][0], rel=0.2)
    sig = width_signal(fit)
    assert sig["width_signal"] == pytest.approx(1.0, abs=0.05) and sig["width_signal_z"] > 50
    assert fit.r2 > 0.8


def test_additive_fit_unvisited_cells_and_round_trip(tmp_path, tiny_space):
    rng = np.random.default_rng(12)
    sizes = [len(c) for c in tiny_space.layer_choices]
    w = np.stack([rng.integers(0, k, 200) for k in sizes], 1)
    w[:, 0] = 0  # layer 0's other widths never drawn
    fit = fit_additive(tiny_space, w, rng.normal(size=200))
    assert np.isnan(fit.delta()[0][1:]).all() and np.isnan(fit.standard_errors()[0][1:]).all()
    assert np.isfinite(fit.delta()[1]).all() and np.isnan(width_signal(fit)["width_signal_z"])
    rows = fit.rows(tiny_space, epoch=2)
    assert {r["estimator"] for r in rows} == {"frozen"}
    path = tmp_path / "u.parquet"
    io.write_records(rows + EpochUnaries(tiny_space).rows(tiny_space, epoch=2), path, "unaries",
                     io.provenance(space_name=tiny_space.name, space_hash=tiny_space.hash))
    back, meta, _ = read_unaries(path, tiny_space)  # the frozen estimate is read where both exist
    assert meta["estimator"] == "frozen"
    for a, b in zip(back, fit.node_unaries()):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="non-finite"):
        fit_additive(tiny_space, w, np.full(200, np.nan))
    with pytest.raises(ValueError, match="configurations but"):
        fit_additive(tiny_space, w, np.zeros(3))


def test_running_estimators_keep_standard_errors_of_their_means():
    rng = np.random.default_rng(13)
    w = rng.integers(0, 3, (500, 2))
    d = rng.normal(size=500)
    e = EpochUnaries([3, 3])
    e.update(w, d)
    for i in range(2):
        for c in range(3):
            x = d[w[:, i] == c]
            assert e.standard_errors()[i][c] == pytest.approx(x.std(ddof=1) / np.sqrt(len(x)))
    win = WindowUnaries([3, 3], window=10)
    win.update(w, d)
    x = d[w[:, 0] == 1][-10:]
    assert win.standard_errors()[0][1] == pytest.approx(x.std(ddof=1) / np.sqrt(10))
