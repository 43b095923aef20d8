"""A host state that slows small and large networks unequally (docs/method.md D37): the stretch β is recovered from
retest pairs, applied only when it resolves, and removes the error it causes through profiling and measuring."""

import numpy as np
import pytest

from aows_core import artifacts as io
from aows_core.config import validate
from aows_core.devices import get_device
from aows_core.latency.protocol import correct, correct_profile
from aows_core.latency.stretch import MIN_PAIRS, apply_stretch, estimate_stretch
from aows_core.stages.profile import profile_session as profile, stretch_note
from conftest import write_uniform_configs

BASE = 2.0


def _session(beta, n=60, noise=0.005, seed=0, states=0.4, sizes=(-0.7, 0.7), ref_noise=0.0):
    """Paired rows as `correct_paired` leaves them: ratio₀ raised to 1 + β·h in host state h (uniform within
    ±`states`), with timing noise, and the reference's own noise e (it enters h and divides every ratio); the true
    ratios are returned beside them."""
    rng = np.random.default_rng(seed)
    r0 = np.exp(rng.uniform(*sizes, n))
    rows, truth = [], {}
    for i in range(n):
        truth[i] = r0[i]
        for role in ("sample", "retest"):
            h, e = rng.uniform(-states, states), ref_noise * rng.standard_normal()
            ratio = r0[i] ** (1 + beta * h) * np.exp(noise * rng.standard_normal() - e)
            rows.append({"config_id": i, "role": role, "drift_factor": float(np.exp(h + e)),
                         "latency_ms": BASE * ratio, "latency_ms_raw": BASE * ratio * np.exp(h + e)})
    return rows, truth


def _error(rows, truth):
    return float(np.std([np.log(r["latency_ms"] / BASE / truth[r["config_id"]]) for r in rows]))


def test_a_known_stretch_is_recovered_and_removed():
    rows, truth = _session(-0.5)
    s = estimate_stretch(rows, BASE)
    assert s["applied"] and s["pairs"] == 60 and abs(s["beta"] + 0.5) < 3 * s["beta_se"] and s["beta_se"] < 0.05
    assert s["h_low"] == pytest.approx(min(np.log(r["drift_factor"]) for r in rows))
    before = _error(rows, truth)
    after = _error(apply_stretch([dict(r) for r in rows], s, BASE), truth)
    assert before > 0.04 and after < 0.01  # down to the timing noise (0.5 %)


def test_no_stretch_is_not_applied_and_changes_nothing():
    rows, _ = _session(0.0, seed=3)
    s = estimate_stretch(rows, BASE)
    assert not s["applied"] and abs(s["beta"]) < 2 * s["beta_se"]
    assert apply_stretch([dict(r) for r in rows], s, BASE) == rows
    wild = _session(-3.0, seed=4)[0]  # resolves, but would more than halve the scale within the session
    assert not estimate_stretch(wild, BASE)["applied"]
    few = estimate_stretch(_session(-0.5, n=MIN_PAIRS - 1)[0], BASE)  # too few pairs to resolve anything
    assert not few["applied"] and few["pairs"] == MIN_PAIRS - 1


def test_the_references_own_noise_is_not_read_as_a_stretch():
    """Regression (2026-11-26, an ONNX Runtime session): the host barely moved (h within ±1 %), the reference's own
    timing noise did, and every ratio fell where it ran slow; β alone read that as β ≈ −1 ÷ mean log ratio = −2.2
    (it resolved) and the stretch raised the held-out error from 3.8 to 5.7 %. Beside γ it does not resolve."""
    rows, truth = _session(0.0, noise=0.002, states=0.005, sizes=(0.2, 0.9), ref_noise=0.02, seed=5)
    s = estimate_stretch(rows, BASE)
    assert abs(s["gamma"] + 1) < 3 * s["gamma_se"] and abs(s["gamma"]) > 5 * s["gamma_se"]
    assert not s["applied"] and abs(s["beta"]) < 2.5 * s["beta_se"]
    h = np.log([r["drift_factor"] for r in rows]).reshape(-1, 2)  # (sample, retest) of each network
    m = np.log([r["latency_ms"] / BASE for r in rows]).reshape(-1, 2)
    x, y = (h[:, 1] - h[:, 0]) * m.mean(1), m[:, 1] - m[:, 0]
    alone = x @ y / (x @ x)  # what β alone reads: about −1 ÷ mean log ratio, far beyond its standard error
    assert abs(alone + 1 / m.mean()) < 0.3 and abs(alone) > 2.5 * np.sqrt((y - alone * x) @ (y - alone * x) / 59 / (x @ x))
    # a real stretch beside the reference's noise is still recovered and removed
    rows, truth = _session(-0.5, ref_noise=0.02, seed=6)
    s = estimate_stretch(rows, BASE)
    assert s["applied"] and abs(s["beta"] + 0.5) < 3 * s["beta_se"] and -0.05 < s["gamma"] < 0.02
    assert _error(apply_stretch([dict(r) for r in rows], s, BASE), truth) < 0.6 * _error(rows, truth)


def test_a_stretch_that_would_invert_the_scale_is_refused():
    s = {"beta": -10.0, "beta_se": 0.01, "applied": True, "h_low": -0.1, "h_high": 1.0, "pairs": 50}
    row = {"drift_factor": float(np.exp(0.6)), "latency_ms": BASE * 2.0, "latency_ms_raw": 0.0}
    with pytest.raises(ValueError, match="profiling.stretch: false"):
        apply_stretch([row], s, BASE)


def test_correct_leaves_the_host_state_to_the_profile():
    """Later sessions are not stretched with the profile's β (it does not transfer between sessions; D40 maps them
    onto the profile's scale instead): `correct` is the paired correction alone, drift_factor the host's state."""
    rows = [{"job": j, "role": "finalist", "latency_ms_raw": 3.0, "ref_ms_raw": 1.5} for j in range(5)]
    plain, _ = correct([dict(r) for r in rows], "paired", 1.0)
    assert plain[0]["latency_ms"] == pytest.approx(2.0) and plain[0]["drift_factor"] == pytest.approx(1.5)
    _, _, none = correct_profile([dict(r, role="sample", config_id=0) for r in rows], "paired", estimate=False)
    assert none is None


SPEC = {"backend": "synthetic", "noise": 0.005, "drift": 0.4, "nonadditive": 0.0, "interference": 0.3,
        "regime_dwell": 3.0, "stretch": -0.5}


def _profile(space, tmp_path, name, spec, **kw):
    p = {**validate({})["profiling"], "repeats": 10, "retest": 40, **kw}
    return profile(space, "synthetic", spec, tmp_path / "c.parquet", tmp_path / f"{name}.parquet", tmp_path / name, p,
                   seed=2, progress=False, targets=["range:0.2", "range:0.6"])


def _log_error(space, path, spec):
    dev = get_device(spec, space, 2)
    rows = [r for r in io.read_table(path, "latency")[0].to_pylist() if r["role"] == "sample"]
    return float(np.std(np.log([r["latency_ms"] / dev.true_latency(r["channels"]) for r in rows])))


def test_profiling_on_a_stretching_host(tiny_space, tmp_path):
    """The synthetic device's host stretches the scale: profiling finds β, says so in the latency file, and its
    timings track the truth far better than without; on a host that slows every network alike it applies nothing."""
    write_uniform_configs(tiny_space, tmp_path / "c.parquet", (80, 10, 40))
    on = _profile(tiny_space, tmp_path, "on", SPEC)
    off = _profile(tiny_space, tmp_path, "off", SPEC, stretch=False)
    s = io.read_table(tmp_path / "on.parquet", "latency")[1]["stretch"]
    assert s["applied"] and on["stretch"] == s and abs(s["beta"] + 0.5) < max(3 * s["beta_se"], 0.1)
    assert off["stretch"] is None and io.read_table(tmp_path / "off.parquet", "latency")[1]["stretch"] is None
    e_on, e_off = _log_error(tiny_space, tmp_path / "on.parquet", SPEC), _log_error(tiny_space, tmp_path / "off.parquet", SPEC)
    assert e_on < 0.5 * e_off and on["sigma_n"] < 0.5 * off["sigma_n"]
    assert "expressed at the baseline's host state" in stretch_note(s)
    alike = {**SPEC, "stretch": 0.0}
    plain = _profile(tiny_space, tmp_path, "alike", alike)
    assert not plain["stretch"]["applied"] and "does not resolve" in stretch_note(plain["stretch"])
