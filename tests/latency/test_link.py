"""The latency link g (docs/method.md D39): its algebra, decoding under it against brute force, and its recovery by
the fit from a device whose slowest networks cost more than their layers' sum."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aows_core.config import resolve, validate
from aows_core.devices import get_device
from aows_core.latency import fit, lut
from aows_core.latency.metrics import latency_metrics
from aows_core.latency.sampling import config_rows
from aows_core.latency.verify import refit_with
from aows_core.search.baselines import decide_uniform
from aows_core.search.decisions import decide
from aows_core.search.link import IDENTITY, Link
from aows_core.search.targets import DeviceTable, latency_range, resolve_target
from aows_core.space import SearchSpace, Theta, multiplier_configs


@settings(max_examples=200, deadline=None)
@given(knot=st.floats(1e-3, 1e3), slope=st.floats(0, 10), t=st.floats(1e-4, 1e4), s=st.floats(0, 1e4))
def test_the_budget_is_the_inverse_of_an_increasing_link(knot, slope, t, s):
    g = Link(knot, slope)
    assert g(g.inverse(t)) == pytest.approx(t, rel=1e-12)
    assert (g(s) <= t) == (s <= g.inverse(t) * (1 + 1e-12)) or abs(g(s) - t) <= 1e-9 * t
    assert g(s) >= s and g(s + 1.0) > g(s)


def test_identity_metadata_and_bad_links():
    assert IDENTITY.identity and IDENTITY(3.0) == 3.0 and IDENTITY.inverse(3.0) == 3.0 and IDENTITY.to_meta() is None
    assert Link.from_meta({}) == IDENTITY and Link.from_meta({"link": None}) == IDENTITY
    g = Link(0.25, 0.6)
    assert Link.from_meta({"link": g.to_meta()}) == g
    assert np.allclose(g(np.array([0.1, 0.25, 0.35])), [0.1, 0.25, 0.41])
    with pytest.raises(ValueError, match="slope"):
        Link(1.0, -0.1)
    with pytest.raises(ValueError, match="knot"):
        Link(0.0, 0.5)


@pytest.fixture(scope="module")
def chain():
    """A four-layer chain small enough to enumerate, with a random non-negative table and unaries."""
    choices = ((3,), (8, 16, 24), (8, 16, 32), (16, 24, 32), (8, 24), (10,))
    thetas = (Theta(16, 16, 2, 3, "conv"), Theta(8, 8, 1, 3, "dwsep"), Theta(8, 8, 2, 3, "dwsep"),
              Theta(4, 4, 1, 3, "dwsep"), Theta(4, 4, 1, 1, "linear"))
    space = SearchSpace("tiny", choices, thetas, base=(16, 16, 24, 24, 10))
    rng = np.random.default_rng(3)
    x = rng.uniform(0.01, 0.2, space.n_variables)
    u = [rng.normal(0, 1, len(c)) for c in space.choices]
    configs = [list(c) for c in itertools.product(*space.layer_choices)]
    return space, x, u, configs


def test_decoding_under_a_link_is_the_brute_force_optimum(chain):
    """min Σδ s.t. g(ΣL) ≤ T, enumerated, equals the decoder's answer on the budget g⁻¹(T); rows report g(ΣL) and T."""
    space, x, u, configs = chain
    add = np.array([lut.predict(space, x, space.indices(c)) for c in configs])
    g = Link(float(np.quantile(add, 0.5)), 0.8)
    lat = g(add)
    obj = np.array([sum(ui[k] for ui, k in zip(u, space.indices(c))) for c in configs])
    lo, hi, _, _ = latency_range(space, x, g)
    assert lo == pytest.approx(lat.min()) and hi == pytest.approx(lat.max())
    for frac in (0.1, 0.3, 0.5, 0.7, 0.9):
        (row,) = decide(space, u, DeviceTable(x, "ms", g, "d"), [f"range:{frac}"], method="ows")
        t = resolve_target(f"range:{frac}", space, x, "ms", g)
        assert t == pytest.approx(lo + frac * (hi - lo)) and row["target_ms"] == pytest.approx(t)
        ok = lat <= t * (1 + 1e-12)
        best = np.flatnonzero(ok)[np.argmin(obj[ok])]
        assert row["objective"] == pytest.approx(obj[best])
        assert row["predicted_latency_ms"] == pytest.approx(g(add[configs.index(row["channels"])]))
        assert row["predicted_latency_ms"] <= t * (1 + 1e-9)
    # the same target on the additive table alone overshoots it somewhere above the knot: the link is not cosmetic
    over = []
    for t in np.linspace(g.knot_ms, hi, 12)[1:]:
        (plain,) = decide(space, u, DeviceTable(x, "ms", device="d"), [f"{t:.9f}ms"], method="ows")
        (linked,) = decide(space, u, DeviceTable(x, "ms", g, "d"), [f"{t:.9f}ms"], method="ows")
        assert linked["predicted_latency_ms"] <= t * (1 + 1e-9)
        over.append(g(plain["predicted_latency_ms"]) > t * (1 + 1e-9))
    assert any(over)


def test_uniform_baseline_meets_the_linked_target(chain):
    space, x, _, _ = chain
    g = Link(0.3, 1.5)
    (row,) = decide_uniform(space, DeviceTable(x, "ms", g, "d"), ["range:0.5"])
    lats = [g(lut.predict(space, x, space.indices(c))) for _, c in multiplier_configs(space)]
    want = max(k for k, v in enumerate(lats) if v <= row["target_ms"])
    assert row["channels"] == multiplier_configs(space)[want][1]
    assert row["predicted_latency_ms"] == pytest.approx(lats[want])


RAW = {"seed": 2, "space": {"resolution": 8, "n_choices": 3, "width_mult": 0.25},
       "devices": {"spill": {"backend": "synthetic", "noise": 0.0, "drift": 0.0, "nonadditive": 0.0, "spill": 0.6,
                             "spill_at": 0.45},
                   "plain": {"backend": "synthetic", "noise": 0.0, "drift": 0.0, "nonadditive": 0.0}},
       "sampling": {"coverage": 16, "lambda_val": 60, "test": 80}}


def _sets(name):
    s = resolve(validate(RAW))
    space = s.space
    dev = get_device(s.device(name), space, s.seed)
    rows, _ = config_rows(space, s.seed, s.sampling)
    cols = {"role": ["sample"] * len(rows), "set": [r["set"] for r in rows], "channels": [r["channels"] for r in rows],
            "latency_ms": [dev.true_latency(r["channels"]) for r in rows], "config_id": [r["config_id"] for r in rows]}
    return s, space, dev, lut.split_sets(space, cols)


def _test_error(space, sets, f):
    idx, l, _ = sets["test"]
    return latency_metrics(lut.predict(space, f.x, idx, f.link), l)["nrmse"]


def test_the_fit_recovers_a_cache_spill():
    """A device whose networks above a knot cost 1.6× their sum beyond it: the additive table cannot follow it; the
    linked fit is chosen on lambda_val, finds the knot and the slope and predicts the held-out networks better. (The
    additive part absorbs some of the spill into the widest layers' entries: the recovery is partial.)"""
    s, space, dev, sets = _sets("spill")
    plain = fit.fit_table(space, sets, s.lut.replace(link_knots=[])).fit
    t = fit.fit_table(space, sets, s.lut)
    f = t.fit
    assert not f.link.identity and t.row["link_slope"] == f.link.slope
    assert sum(r["chosen"] for r in t.rows) == 1
    assert 0.3 < f.link.slope < 0.9 and f.link.knot_ms == pytest.approx(dev.spill_knot, rel=0.1)
    e_plain, e_link = _test_error(space, sets, plain), _test_error(space, sets, f)
    assert e_link < 0.9 * e_plain
    # a verified decision's refit keeps the link (D36, D39)
    timed = {tuple(space.max_config): dev.true_latency(space.max_config)}
    x = refit_with(space, sets, timed, s.lut.replace(smoothness=[f.mu]), 20, f.link)
    assert lut.predict(space, x, space.indices(space.max_config), f.link) == pytest.approx(
        timed[tuple(space.max_config)], rel=0.01)


def test_a_fixed_link_is_kept_even_when_the_table_does_not_move():
    """Regression: a refit under a given link (D36's verified decisions) returned the identity when no step lowered
    the loss — its table then predicted without the link its decisions were made with."""
    s, space, _, sets = _sets("spill")
    first = fit.fit_table(space, sets, s.lut).fit
    g = first.link
    again = fit.fit_table(space, sets, s.lut.replace(smoothness=[first.mu]), link=g)
    assert again.fit.link == g and again.row["link_slope"] == g.slope
    idx, l, _ = sets["test"]
    assert np.allclose(lut.predict(space, again.fit.x, idx, g), lut.predict(space, first.x, idx, g), rtol=0.02)
    # a link whose knot no training network reaches: nothing to move, and still the given link
    far = Link(1e3, 0.5)
    assert fit.fit_table(space, sets, s.lut.replace(smoothness=[first.mu]), link=far).fit.link == far
    # and the identity stays the identity
    assert fit.fit_table(space, sets, s.lut.replace(link_knots=[]), link=IDENTITY).fit.link.identity


def test_an_additive_device_keeps_the_additive_sum():
    """Noise-free eq. lat: the link adds nothing, and whatever lambda_val keeps predicts as the additive table does."""
    s, space, _, sets = _sets("plain")
    chosen = fit.fit_table(space, sets, s.lut).fit
    plain = fit.fit_table(space, sets, s.lut.replace(link_knots=[])).fit
    idx, _, _ = sets["test"]
    a = lut.predict(space, chosen.x, idx, chosen.link)
    b = lut.predict(space, plain.x, idx)
    assert chosen.link.identity or chosen.link.slope < 0.02
    assert np.max(np.abs(a / b - 1)) < 0.01
