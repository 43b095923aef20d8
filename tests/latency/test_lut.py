"""Latency model (§4): design matrix, monotonicity prior, QP fit, λ scan, LUT artifact, metrics.

Ground truth tables are synthetic (MAC-proportional plus a constant per layer kind: positive and
monotone in c_in, c_out and input size). The system A x = l is rank deficient (only path sums are
identifiable), so fits are judged on whole-network latencies of held-out configurations, never on
individual table entries.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import shortest_path

from aows_core import artifacts as io
from aows_core.latency import fit, lut, metrics
from aows_core.space import Theta, get_space, mobilenet_v1_space

KIND_CONST = {"conv": 0.05, "dwsep": 0.08, "linear": 0.03}


def small_space():
    """152 variables, 4 widths per layer, overlapping channel sets (so the size direction exists)."""
    return mobilenet_v1_space(
        "small", resolution=16, in_channels=3, num_classes=5, first_stride=1, n_choices=4, min_mult=0.25, max_mult=1.0
    )


def macs(key) -> float:
    t, ci, co = key
    if t.kind == "linear":
        return ci * co + ci * t.in_h * t.in_w
    oh, ow = t.out_hw()
    if t.kind == "conv":
        return ci * co * oh * ow * t.kernel**2
    return ci * oh * ow * t.kernel**2 + ci * co * oh * ow


def truth(space, per_mmac: float = 0.02) -> np.ndarray:
    """Positive, monotone ground truth: per_mmac ms per MMAC plus a constant per kind."""
    return np.array([per_mmac * macs(k) * 1e-6 + KIND_CONST[k[0].kind] for k in space.variables])


def sample_idx(space, n: int, rng) -> np.ndarray:
    return np.stack([rng.integers(0, len(c), n) for c in space.choices], axis=1)


def covering_idx(space, n: int, rng) -> np.ndarray:
    """n random configurations plus, for each variable still unobserved, one configuration using it."""
    idx = sample_idx(space, n, rng)
    seen = np.zeros(space.n_variables, bool)
    seen[space.variable_ids(idx).ravel()] = True
    extra = []
    for i, tab in enumerate(space.edge_tables):
        for a, b in zip(*np.nonzero(~seen[tab])):
            if seen[tab[a, b]]:
                continue
            row = sample_idx(space, 1, rng)[0]
            row[i], row[i + 1] = a, b
            seen[space.variable_ids(row)] = True
            extra.append(row)
    return np.vstack([idx, *extra]) if extra else idx


@pytest.fixture(scope="module")
def small():
    return small_space()


@pytest.fixture(scope="module")
def fmnist():
    return get_space("mobilenet_v1_fmnist")


@pytest.fixture(scope="module")
def imagenet():
    return get_space("mobilenet_v1_imagenet")


# ---- design matrix --------------------------------------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 60), preset=st.sampled_from(["small", "mobilenet_v1_fmnist"]))
def test_design_matrix_counts_edges_per_variable(seed, n, preset):
    space = small_space() if preset == "small" else get_space(preset)
    idx = sample_idx(space, n, np.random.default_rng(seed))
    A = lut.design_matrix(space, idx)
    assert A.shape == (n, space.n_variables)
    np.testing.assert_array_equal(np.asarray(A.sum(axis=1)).ravel(), space.n_edges)
    vids = space.variable_ids(idx)
    for p in range(n):
        row = A.getrow(p)
        assert dict(zip(row.indices.tolist(), row.data.tolist())) == dict(Counter(vids[p].tolist()))
    # observation counts: networks using each variable, not edge counts
    expected = np.zeros(space.n_variables, int)
    for p in range(n):
        expected[np.unique(vids[p])] += 1
    np.testing.assert_array_equal(lut.observation_counts(A), expected)


def test_shared_variables_are_counted_more_than_once(imagenet):
    # layers 8-12 (edges 7..11) share one table: the uniform configuration uses its variable 5 times
    idx = imagenet.indices(imagenet.max_config)
    A = lut.design_matrix(imagenet, idx)
    v = imagenet.edge_tables[7][-1, -1]
    assert A[0, v] == 5 and A.sum() == imagenet.n_edges


def test_design_matrix_is_fast_at_paper_scale(imagenet):
    idx = sample_idx(imagenet, 9500, np.random.default_rng(0))
    best = min(_timed(lambda: lut.design_matrix(imagenet, idx)) for _ in range(3))
    assert best < 0.1


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


# ---- monotonicity prior ---------------------------------------------------------------------------
def test_pairs_are_genuine_and_imagenet_has_all_three_directions(small, fmnist, imagenet):
    for space in (small, fmnist, imagenet):
        pairs = lut.monotonicity_pairs(space)
        counts = lut.check_pairs(space, pairs)  # raises on any pair that is not genuine
        assert sum(counts.values()) == len(pairs) == len({tuple(p) for p in pairs.tolist()})
    for space in (imagenet, fmnist):  # a chain has no one-width layers (depthwise, residual add): no "width" pairs
        counts = lut.check_pairs(space, lut.monotonicity_pairs(space))
        assert counts.pop("width") == 0 and all(v > 0 for v in counts.values())


@settings(max_examples=10, deadline=None)
@given(
    res=st.sampled_from([8, 16, 28, 32]),
    n_choices=st.integers(2, 5),
    first_stride=st.sampled_from([1, 2]),
    min_mult=st.sampled_from([0.2, 0.25, 0.5]),
)
def test_pairs_are_genuine_on_random_spaces(res, n_choices, first_stride, min_mult):
    space = mobilenet_v1_space("h", resolution=res, n_choices=n_choices, first_stride=first_stride, min_mult=min_mult, max_mult=1.0)
    lut.check_pairs(space, lut.monotonicity_pairs(space))


def test_pairs_are_adjacent_and_complete_by_transitivity(small):
    pairs = lut.monotonicity_pairs(small)
    keys = small.variables
    n = small.n_variables
    # adjacency: nothing of the same group lies strictly between the two ends of a pair
    for a, b in pairs:
        d = lut.pair_direction(keys[a], keys[b])
        for c in range(n):
            if c not in (a, b) and lut.pair_direction(keys[a], keys[c]) == d and lut.pair_direction(keys[c], keys[b]) == d:
                pytest.fail(f"pair {keys[a]} ≤ {keys[b]} is not adjacent: {keys[c]} lies between")
    # completeness: every genuine relation (any distance) is implied by a chain of pairs
    graph = np.zeros((n, n))
    graph[pairs[:, 0], pairs[:, 1]] = 1
    reach = np.isfinite(shortest_path(graph, directed=True, unweighted=True))
    for a in range(n):
        for b in range(n):
            if a != b and lut.pair_direction(keys[a], keys[b]) is not None:
                assert reach[a, b], f"{keys[a]} ≤ {keys[b]} is not implied by the generated pairs"


def test_pair_checker_rejects_colliding_keys(fmnist):
    # the published code's bug: L(16→96) ≤ L(24→16) across groupings; and a decreasing pair
    t = fmnist.thetas[3]
    bad = [((t, 16, 96), (t, 24, 16)), ((t, 24, 16), (t, 16, 16)), ((t, 16, 16), (fmnist.thetas[5], 16, 16))]
    for small_key, large_key in bad:
        assert lut.pair_direction(small_key, large_key) is None
    index = {k: v for v, k in enumerate(fmnist.variables)}
    a = index[(fmnist.thetas[3], fmnist.choices[3][1], fmnist.choices[4][0])]
    b = index[(fmnist.thetas[3], fmnist.choices[3][0], fmnist.choices[4][1])]
    with pytest.raises(ValueError, match="not a genuine"):
        lut.check_pairs(fmnist, np.array([[a, b]]))


def test_monotonicity_matrix_encodes_smaller_le_larger(small, imagenet):
    for space in (small, imagenet):
        pairs = lut.monotonicity_pairs(space)
        V = lut.monotonicity_matrix(space)
        assert V.shape == (len(pairs), space.n_variables)
        dense_rows = V[:50].toarray()
        for row, (a, b) in zip(dense_rows, pairs[:50]):
            assert row[a] == 1 and row[b] == -1 and np.count_nonzero(row) == 2
        assert np.all(V @ truth(space) <= 1e-12)  # the synthetic truth satisfies the prior


# ---- the fit --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def clean_problem(small):
    rng = np.random.default_rng(1)
    x_true = truth(small)
    idx_tr = covering_idx(small, 500, rng)
    idx_te = sample_idx(small, 300, rng)
    A_tr = lut.design_matrix(small, idx_tr)
    V = lut.monotonicity_matrix(small)
    return dict(space=small, x_true=x_true, idx_tr=idx_tr, idx_te=idx_te, A_tr=A_tr, V=V, l_tr=A_tr @ x_true)


def test_noise_free_fit_recovers_held_out_path_sums(clean_problem):
    p = clean_problem
    space = p["space"]
    res = fit.fit_osqp(p["A_tr"], p["l_tr"], p["V"], [0.0, 1e-2, 1.0], space=space)
    meas = lut.predict(space, p["x_true"], p["idx_te"])
    for r in res:
        assert r.status == "solved" and np.all(r.x >= 0)
        rel = np.abs(lut.predict(space, r.x, p["idx_te"]) - meas) / meas
        assert rel.max() < 1e-3, (r.lam_rel, rel.max())
        assert r.n_violated == 0 or r.lam_rel == 0.0


def test_noise_free_fit_on_the_default_space(fmnist):
    rng = np.random.default_rng(2)
    x_true = truth(fmnist)
    idx_tr = covering_idx(fmnist, 1500, rng)
    idx_te = sample_idx(fmnist, 200, rng)
    A = lut.design_matrix(fmnist, idx_tr)
    (r,) = fit.fit_osqp(A, A @ x_true, lut.monotonicity_matrix(fmnist), [1.0], space=fmnist)
    meas = lut.predict(fmnist, x_true, idx_te)
    assert np.max(np.abs(lut.predict(fmnist, r.x, idx_te) - meas) / meas) < 1e-3


def test_noisy_fit_error_is_close_to_the_injected_noise(small):
    rng = np.random.default_rng(3)
    sigma = 0.02
    x_true = truth(small)
    idx_tr, idx_val, idx_te = covering_idx(small, 800, rng), sample_idx(small, 150, rng), sample_idx(small, 500, rng)
    A_tr, A_val, A_te = (lut.design_matrix(small, i) for i in (idx_tr, idx_val, idx_te))
    noisy = lambda A: (A @ x_true) * (1 + sigma * rng.standard_normal(A.shape[0]))  # noqa: E731
    best, results, rows = fit.lambda_scan((A_tr, noisy(A_tr)), (A_val, noisy(A_val)), lut.monotonicity_matrix(small),
                                          space=small)
    x = results[best].x
    clean_te = A_te @ x_true
    meas_te = clean_te * (1 + sigma * rng.standard_normal(len(clean_te)))
    pred = A_te @ x
    rel_truth = np.sqrt(np.mean(((pred - clean_te) / clean_te) ** 2))
    rel_meas = np.sqrt(np.mean(((pred - meas_te) / meas_te) ** 2))
    assert rel_truth < 0.6 * sigma  # the model is closer to the truth than a single measurement
    assert 0.85 * sigma < rel_meas < 1.25 * sigma  # against measurements: about the noise floor


def test_osqp_matches_cvxpy_scs_objective(clean_problem):
    p = clean_problem
    rng = np.random.default_rng(4)
    l = p["l_tr"] * (1 + 0.03 * rng.standard_normal(len(p["l_tr"])))
    A_te = lut.design_matrix(p["space"], p["idx_te"])
    for lam in (0.0, 0.05):
        ref = fit.fit_cvxpy(p["A_tr"], l, p["V"], lam, solver="SCS", eps_abs=1e-9, eps_rel=1e-9, max_iters=200_000)
        (ours,) = fit.fit_osqp(p["A_tr"], l, p["V"], [lam])  # default tolerances (eps 1e-4)
        assert ours.objective == pytest.approx(ref.objective, rel=1e-3)
        np.testing.assert_allclose(A_te @ ours.x, A_te @ ref.x, rtol=1e-3)
        assert ours.lam == pytest.approx(ref.lam) and ours.lam == pytest.approx(lam * np.median(l))
        (tight,) = fit.fit_osqp(p["A_tr"], l, p["V"], [lam], eps_abs=1e-9, eps_rel=1e-9, polishing=True)
        assert tight.objective == pytest.approx(ref.objective, rel=1e-7)
        np.testing.assert_allclose(A_te @ tight.x, A_te @ ref.x, rtol=1e-5)


def test_fit_is_reproducible(clean_problem):
    p = clean_problem
    l = p["l_tr"] * (1 + 0.02 * np.random.default_rng(5).standard_normal(len(p["l_tr"])))
    a = fit.fit_osqp(p["A_tr"], l, p["V"], [0.0, 0.1])
    b = fit.fit_osqp(p["A_tr"], l, p["V"], [0.0, 0.1])
    for ra, rb in zip(a, b):
        np.testing.assert_allclose(ra.x, rb.x, rtol=0, atol=1e-12)


def test_missing_variable_is_refused_and_named(small):
    rng = np.random.default_rng(6)
    idx = covering_idx(small, 400, rng)
    v = int(small.edge_tables[4][2, 1])
    keep = ~np.any(small.variable_ids(idx) == v, axis=1)
    A = lut.design_matrix(small, idx[keep])
    t, ci, co = small.variables[v]
    with pytest.raises(lut.LUTFitError, match=rf"1 of {small.n_variables} .*c_in={ci}, c_out={co}"):
        fit.fit_osqp(A, A @ truth(small), lut.monotonicity_matrix(small), [0.0], space=small)
    with pytest.raises(lut.LUTFitError, match=rf"c_in={ci}, c_out={co}"):
        lut.check_coverage(small, lut.observation_counts(A))
    lut.check_coverage(small, lut.observation_counts(lut.design_matrix(small, idx)))


def test_solver_failure_is_an_error_naming_lambda_and_status(clean_problem):
    p = clean_problem
    with pytest.raises(lut.LUTFitError, match=r"λ = 0\.5 .*maximum iterations"):
        fit.fit_osqp(p["A_tr"], p["l_tr"], p["V"], [0.5], max_iter=1)


def test_lambda_scan_chooses_by_validation_error_only(small):
    rng = np.random.default_rng(7)
    x_true = truth(small)
    idx_tr, idx_val = covering_idx(small, 300, rng), sample_idx(small, 100, rng)
    A_tr, A_val = lut.design_matrix(small, idx_tr), lut.design_matrix(small, idx_val)
    l_tr = (A_tr @ x_true) * (1 + 0.1 * rng.standard_normal(A_tr.shape[0]))
    V = lut.monotonicity_matrix(small)
    grid = [10.0, 0.0, 1e-2, 1.0]  # unsorted on purpose: results follow the given order
    fits = fit.fit_osqp(A_tr, l_tr, V, sorted(grid))
    by_lam = {f.lam_rel: f for f in fits}
    # validation latencies that exactly match the fit with the *worst* training error
    train_rmse = {lam: np.sqrt(np.mean((A_tr @ f.x - l_tr) ** 2)) for lam, f in by_lam.items()}
    target = max(train_rmse, key=train_rmse.get)
    assert np.max(np.abs(A_val @ by_lam[target].x - A_val @ by_lam[min(train_rmse, key=train_rmse.get)].x)) > 1e-6
    best, results, rows = fit.lambda_scan((A_tr, l_tr), (A_val, A_val @ by_lam[target].x), V, grid)
    assert grid[best] == target and results[best].lam_rel == target
    assert [r.lam_rel for r in results] == grid
    assert [r["chosen"] for r in rows].count(True) == 1 and rows[best]["chosen"]
    assert rows[best]["val_rmse_ms"] == min(r["val_rmse_ms"] for r in rows)
    assert set(rows[0]) == set(io.SCHEMAS["lut_fit"].names)


def test_lut_fit_rows_write_under_the_schema(tmp_path, clean_problem):
    p = clean_problem
    A_te = lut.design_matrix(p["space"], p["idx_te"])
    best, results, rows = fit.lambda_scan((p["A_tr"], p["l_tr"]), (A_te, A_te @ p["x_true"]), p["V"], [0.0, 0.1])
    io.write_records(rows, tmp_path / "fit.parquet", "lut_fit", {})
    table, _ = io.read_table(tmp_path / "fit.parquet", "lut_fit")
    assert table.num_rows == 2 and table.column("lam").to_pylist()[1] == pytest.approx(0.1 * results[0].scale)


# ---- prediction and the LUT artifact --------------------------------------------------------------
def test_predict_is_the_design_matrix_product(small):
    rng = np.random.default_rng(8)
    x = rng.random(small.n_variables)
    idx = sample_idx(small, 40, rng)
    np.testing.assert_allclose(lut.predict(small, x, idx), lut.design_matrix(small, idx) @ x, rtol=1e-14)
    assert lut.predict(small, x, idx[3]) == pytest.approx((lut.design_matrix(small, idx[3]) @ x)[0])
    with pytest.raises(ValueError):
        lut.predict(small, x[:-1], idx)


def test_lut_roundtrip_and_refusals(tmp_path, small, fmnist):
    x = truth(small)
    n_obs = np.arange(small.n_variables)
    rec = lut.lut_records(small, x, n_obs)
    assert len(rec["latency_ms"]) == small.n_variables
    io.write_records(rec, tmp_path / "lut.parquet", "lut", {})
    table, _ = io.read_table(tmp_path / "lut.parquet", "lut")
    np.testing.assert_array_equal(lut.lut_vector(small, table), x)
    np.testing.assert_array_equal(lut.lut_vector(small, table.to_pandas()), x)
    # a row missing
    short = {k: v[1:] for k, v in rec.items()}
    with pytest.raises(lut.LUTFitError, match="lacks 1 variables"):
        lut.lut_vector(small, short)
    # a table of another space
    with pytest.raises(lut.LUTFitError, match="not variables of space"):
        lut.lut_vector(fmnist, rec)
    # a duplicated row
    dup = {k: v + v[:1] for k, v in rec.items()}
    with pytest.raises(lut.LUTFitError, match="two rows"):
        lut.lut_vector(small, dup)
    # a missing latency
    bad = {**rec, "latency_ms": [None] + rec["latency_ms"][1:]}
    with pytest.raises(lut.LUTFitError, match="non-finite"):
        lut.lut_vector(small, bad)


# ---- metrics --------------------------------------------------------------------------------------
def test_adequacy_separates_model_error_from_timing_noise():
    """Held-out errors at the noise floor are noise; errors well above it are the device's non-additivity,
    estimated as sqrt(RMS² − σ_n²), with the interval of measured ÷ predicted that 95 % of networks fell in."""
    rng = np.random.default_rng(0)
    pred = rng.uniform(1.0, 3.0, 400)
    noise_only = pred * (1 + 0.01 * rng.standard_normal(400))
    a = metrics.adequacy(pred, noise_only, metrics.SessionNoise(0.01, pred))
    assert a["verdict"] == "at_noise" and "as good as the timings allow" in a["message"] and a["model_error"] < 0.004
    structured = pred * (1 + 0.01 * rng.standard_normal(400) + 0.04 * np.sign(np.sin(7 * pred)))
    b = metrics.adequacy(pred, structured, metrics.SessionNoise(0.01, pred))
    assert b["verdict"] == "model_limited" and "non-additivity" in b["message"] and "(verify)" in b["message"]
    assert b["model_error"] == pytest.approx(np.sqrt(0.04**2 + 0.01**2 - 0.01**2), rel=0.1)
    inside = np.mean((structured / pred >= b["ratio_low"]) & (structured / pred <= b["ratio_high"]))
    assert 0.94 <= inside <= 0.96 and b["ratio_low"] < 0.96 < 1.04 < b["ratio_high"]
    # a session that failed the noise gate says so first, whatever its error, with the gate's own advice
    c = metrics.adequacy(pred, structured, metrics.SessionNoise(0.01, pred, "too noisy: close programs."))
    assert c["verdict"] == "too_noisy" and c["message"].startswith("too noisy: close programs.")


def test_adequacy_says_when_the_error_sits_beyond_every_retested_network():
    """Held-out networks slower than every retested one have no measured noise; when they carry a quarter of the
    held-out squared error, the report says so (count, reach, share). Regression: the ONNX Runtime tables of
    2026-11-26, where 5–11 such networks carried 26–78 % of it and the report called all of it non-additivity."""
    rng = np.random.default_rng(1)
    meas = np.sort(rng.uniform(0.1, 0.5, 200))
    pred = meas * (1 + 0.01 * rng.standard_normal(200))
    slow = np.arange(200) >= 180
    noisy = np.where(slow, meas * (1 + 0.08 * rng.standard_normal(200)), pred)  # the 20 slowest spread 8 %
    retested = np.r_[meas[:179:4], meas[179]]  # retest pairs reach the 180th network
    r = metrics.adequacy(noisy, meas, metrics.SessionNoise(0.01, retested))
    sq = (noisy - meas) ** 2
    assert r["retest_reach_ms"] == meas[179] and r["beyond_retest"] == 20 and r["verdict"] == "model_limited"
    assert r["error_beyond_retest"] == pytest.approx(sq[slow].sum() / sq.sum()) and r["error_beyond_retest"] > 0.5
    assert "20 held-out networks slower than every retested one" in r["message"]
    covered = metrics.adequacy(noisy, meas, metrics.SessionNoise(0.01, np.r_[meas[::4], meas[-1]]))  # retests up to the slowest: no note
    assert covered["beyond_retest"] == 0 and "retested" not in covered["message"]
    even = metrics.adequacy(pred, meas, metrics.SessionNoise(0.01, retested))  # the error spread evenly: no note
    assert even["error_beyond_retest"] < metrics.REACH_SHARE and "retested" not in even["message"]
    assert metrics.adequacy(pred, meas, metrics.SessionNoise(0.01, []))["retest_reach_ms"] is None


def test_latency_metrics_on_a_hand_computed_example():
    meas = np.array([100.0, 200.0, 400.0])
    pred = np.array([104.0, 200.0, 370.0])  # relative errors 0.04, 0, 0.075
    m = metrics.latency_metrics(pred, meas)
    rmse = np.sqrt((16 + 0 + 900) / 3)
    assert m["rmse_ms"] == pytest.approx(rmse)
    assert m["nrmse"] == pytest.approx(rmse / (700 / 3))
    assert m["mape"] == pytest.approx((0.04 + 0 + 0.075) / 3)
    assert m["within_5pct"] == pytest.approx(2 / 3) and m["within_10pct"] == 1.0
    assert m["kendall_tau"] == pytest.approx(1.0)
    assert metrics.latency_metrics(pred[::-1], meas)["kendall_tau"] == pytest.approx(-1.0)
    assert set(m) | {"model", "n"} == set(io.SCHEMAS["lut_validation"].names)


def test_flops_baseline_is_least_squares_through_the_origin():
    assert metrics.flops_baseline([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(2.0)
    assert metrics.flops_baseline([1.0, 2.0], [1.0, 3.0]) == pytest.approx(7 / 5)
    with pytest.raises(ValueError):
        metrics.flops_baseline([0.0], [1.0])


def test_theta_keys_in_messages_are_readable(small):
    v = small.variables[0]
    assert isinstance(v[0], Theta)
    assert f"c_in={v[1]}" in lut._key_str(v)
