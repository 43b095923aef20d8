"""The smoothness prior along widths (docs/method.md D38): D is zero exactly where the table is linear in each width,
its weight μ is chosen with λ on lambda_val, and on a smooth device it recovers the table from fewer networks."""

from __future__ import annotations

import numpy as np
import pytest

from aows_core.config import SamplingSettings, resolve, space_from_config, validate
from aows_core.latency import fit, lut
from aows_core.latency.metrics import latency_metrics
from aows_core.latency.sampling import config_rows

RAW = {"seed": 3, "space": {"resolution": 8, "n_choices": 4, "width_mult": 0.5}}


@pytest.fixture(scope="module")
def space():
    return space_from_config(validate(RAW))


def _bilinear(space, seed=0):
    """A table linear in c_in for every c_out and in c_out for every c_in, per layer shape (conv MACs ∝ c_in·c_out)."""
    rng = np.random.default_rng(seed)
    coef = {}
    x = []
    for theta, c_in, c_out in space.variables:
        a, b, c, d = coef.setdefault(theta, rng.uniform(0.5, 1.5, 4) * [1e-4, 1e-3, 1e-3, 0.02])
        x.append(a * c_in * c_out + b * c_in + c * c_out + d)
    return np.array(x)


def test_D_is_zero_on_linear_widths_and_sees_curvature(space):
    D = lut.smoothness_matrix(space)
    x = _bilinear(space)
    assert D.shape[1] == space.n_variables and D.shape[0] > 0
    assert np.abs(D @ x).max() < 1e-12 * np.abs(x).max()
    bumped = x.copy()
    bumped[len(x) // 2] *= 1.1  # one entry off the plane
    assert np.abs(D @ bumped).max() > 1e-3 * x[len(x) // 2]
    # every row is one line of three consecutive widths of one layer shape, with the second-difference signs
    dense = D.toarray()
    assert all(np.count_nonzero(r) == 3 and (r > 0).sum() == 2 for r in dense)
    assert np.allclose(dense.sum(axis=1), 0.0)


def _sets(space, truth, coverage, seed, noise=0.02):
    """Coverage-biased training networks, uniform lambda_val and test networks, timed on `truth` with noise."""
    rows, _ = config_rows(space, seed, SamplingSettings(coverage=coverage, lambda_val=40, test=200, anchors=True))
    cols = {"role": ["sample"] * len(rows), "set": [r["set"] for r in rows], "channels": [r["channels"] for r in rows],
            "config_id": [r["config_id"] for r in rows]}
    idx = np.stack([space.indices(c) for c in cols["channels"]])
    rng = np.random.default_rng(seed)
    cols["latency_ms"] = lut.design_matrix(space, idx) @ truth * np.exp(rng.normal(0, noise, len(rows)))
    return lut.split_sets(space, cols)


def test_mu_zero_is_the_papers_fit(space):
    """μ = 0 solves eq. 7 with the monotonicity prior as before, to the solver's tolerance, whatever D is."""
    idx, l, _ = _sets(space, _bilinear(space), 3, 1)["train"]
    A = lut.design_matrix(space, idx)
    V = lut.monotonicity_matrix(space)
    plain = fit.fit_osqp(A, l, V, [0.0, 0.1], space=space)
    zero = fit.fit_osqp(A, l, V, [0.0, 0.1], fit.Prior(D=lut.smoothness_matrix(space), mu=0.0), space=space)
    for a, b in zip(plain, zero):
        assert b.mu == 0.0 and np.allclose(a.x, b.x, rtol=1e-6, atol=1e-9)
    smooth = fit.fit_osqp(A, l, V, [0.1], fit.Prior(D=lut.smoothness_matrix(space), mu=10.0), space=space)[0]
    D = lut.smoothness_matrix(space)
    assert smooth.mu == 10.0 and np.sum((D @ smooth.x) ** 2) < np.sum((D @ plain[1].x) ** 2)
    assert smooth.objective == pytest.approx(fit.objective(A, l, V, smooth.x, smooth.lam, fit._ridge_abs(A, 1e-6), D, 10.0))
    with pytest.raises(ValueError, match="smoothness weight"):
        fit.fit_osqp(A, l, V, [0.1], fit.Prior(D=D, mu=-1.0), space=space)


def test_a_smooth_device_is_recovered_from_fewer_networks(space):
    """Few noisy networks per variable: the grid picks μ > 0 on lambda_val and the held-out test error falls well
    below the paper's fit's; the test networks decide nothing."""
    sets = _sets(space, _bilinear(space, seed=4), 1, 2)
    cfg = resolve(validate(RAW)).lut
    errs = {}
    for grid in ([0.0], [0.0, 1.0, 10.0, 100.0]):
        t = fit.fit_table(space, sets, cfg.replace(smoothness=grid, link_knots=[]))
        idx, l, _ = sets["test"]
        errs[len(grid)] = latency_metrics(lut.predict(space, t.fit.x, idx), l)["nrmse"], t.fit.mu
        assert len(t.rows) == len(grid) * len(cfg.lambdas) and sum(r["chosen"] for r in t.rows) == 1
    (paper, mu0), (smooth, mu) = errs[1], errs[4]
    assert mu0 == 0.0 and mu > 0.0 and smooth < 0.75 * paper
