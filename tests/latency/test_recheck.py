"""Profiled networks timed again in `measure` (docs/method.md D40): they say how far a session sits from the profile —
within noise on the profile's own host state, beyond it where the host stretches the scale — and correct nothing."""

import math

import numpy as np
import pytest

from aows_core import artifacts as io
from aows_core.config import validate
from aows_core.devices import get_device
from aows_core.latency.lut import columns_of
from aows_core.latency.protocol import finalist_rows, measure_plan, reference_config, time_jobs
from aows_core.latency.recheck import (
    MIN_NETWORKS, agreement_note, origin_slope, recheck_networks, session_agreement,
)
from aows_core.stages.profile import profile_session as profile
from conftest import write_uniform_configs

BASE = 2.0


def test_recheck_networks_prefer_retested_ones_and_span_the_range():
    chans = [[i, i] for i in range(30)]
    lat = list(np.exp(np.linspace(-1, 1, 30)))
    table = {"channels": chans + chans[:12] + [[99, 99]], "latency_ms": lat + [v * 1.1 for v in lat[:12]] + [BASE],
             "role": ["sample"] * 30 + ["retest"] * 12 + ["reference"]}
    nets = recheck_networks(table, 6)
    assert len(nets) == 6 and all(c[0] < 12 for c, _ in nets)  # only retested networks
    assert nets[0][0] == (0, 0) and nets[-1][0] == (11, 11)  # the fastest and the slowest of them
    assert nets[0][1] == pytest.approx(math.sqrt(lat[0] * lat[0] * 1.1))  # geometric mean of its two timings
    wide = recheck_networks(table, 40)  # more than were retested: every profiled network, never the reference
    assert len(wide) == 30 and wide[0][0] == (0, 0) and wide[-1][0] == (29, 29)
    assert recheck_networks(table, 0) == []


def test_origin_slope_is_exact_on_a_noiseless_line():
    prof = BASE * np.exp(np.linspace(-0.8, 0.8, 9))
    s, se = origin_slope(prof, BASE * (prof / BASE) ** 0.9, BASE)
    assert s == pytest.approx(0.9, abs=1e-12) and se < 1e-9


def _rows(prof, factor):
    return [{"role": "recheck", "network": k, "latency_ms": float(p * f)} for k, p in enumerate(prof)
            for f in factor(k)]


def test_agreement_within_noise_and_beyond_it():
    rng = np.random.default_rng(0)
    prof = BASE * np.exp(np.linspace(-0.7, 0.7, 16))
    nets = [((k,), float(p)) for k, p in enumerate(prof)]
    same = session_agreement(_rows(prof, lambda k: np.exp(0.01 * rng.standard_normal(5))), nets, BASE, 0.015, 0.01, 5)
    assert not same["departs"] and same["rms"] < same["noise_rms"] * 1.5 and abs(same["slope"] - 1) < 3 * same["slope_se"]
    assert "agrees with the profile" in agreement_note(same)
    # the slowest networks run 6 % faster than profiled: beyond the noise, and in the slowest third
    slow = session_agreement(_rows(prof, lambda k: [0.94 if k >= 11 else 1.0] * 5), nets, BASE, 0.015, 0.01, 5)
    assert slow["departs"] and slow["by_third"][2] < -0.05 and slow["by_third"][0] == 0.0 and slow["slope"] < 1
    assert "departs from the profile beyond timing noise" in agreement_note(slow)
    few = session_agreement(_rows(prof[: MIN_NETWORKS - 1], lambda k: [1.0]), nets, BASE, 0.01, 0.01, 1)
    assert few["networks"] == MIN_NETWORKS - 1 and not few["departs"] and "too few" in agreement_note(few)
    assert "measure.recheck is 0" in agreement_note(None)


# Symmetric log-normal noise per pass: the minimum of 10 passes is about 1.5× as noisy as their median for it (a real
# host's noise is one-sided, where the minimum is the steadier, D42), so the noise is small enough for either.
SPEC = {"backend": "synthetic", "noise": 0.002, "drift": 0.4, "nonadditive": 0.0, "interference": 0.0,
        "stretch": -0.5}


@pytest.mark.parametrize("statistic", ["min", "median"])
def test_a_session_in_another_host_state_is_said_to_depart(tiny_space, tmp_path, statistic):
    """The profile sees the stretching host near its baseline. A later session where the host runs ≥ 20 % away is
    stretched (the profile's β is not transferred, D40): its profiled networks say so, and the finalists' timings are
    left as paired timing gives them; a session in the profile's own state agrees. Under either statistic."""
    write_uniform_configs(tiny_space, tmp_path / "c.parquet", (80, 10, 40))
    p = {**validate({})["profiling"], "repeats": 10, "retest": 40, "statistic": statistic}
    profile(tiny_space, "synthetic", SPEC, tmp_path / "c.parquet", tmp_path / "l.parquet", tmp_path / "r", p, seed=2,
            progress=False, targets=["range:0.2", "range:0.6"])
    table, lmeta = io.read_table(tmp_path / "l.parquet", "latency")
    base = float(lmeta["reference_baseline"])
    dev = get_device(SPEC, tiny_space, 2)
    ref = reference_config(tiny_space)
    f_base = base / dev.true_latency(ref)  # the host state the profile's timings are expressed at
    nets = [tuple(int(min(c)) for c in tiny_space.layer_choices), tuple(int(max(c)) for c in tiny_space.layer_choices)]
    re = recheck_networks(columns_of(table), 16)
    fin = [{"method": "m", "target": f"t{k}", "target_ms": 1.0, "unit": "ms", "channels": list(n), "predicted_ms": 1.0}
           for k, n in enumerate(nets)]

    def session(away):
        offset = next(o for o in range(0, 40000, 11)
                      if all((abs(math.log(dev.drift_factor(j) / f_base)) > 0.2) == away for j in range(o, o + 54)))
        jobs = measure_plan(nets, ref, 3, 0, False, offset, paired=True, recheck=[c for c, _ in re])
        rows = time_jobs(dev, jobs, p, tiny_space)
        return finalist_rows(fin, rows, nets, base, False, "s", True, pairing="paired", recheck=re,
                             sigma_n=float(lmeta["sigma_n"]))

    out, _, noise, away = session(True)
    _, _, _, home = session(False)
    assert away["departs"] and away["networks"] == 16 and abs(away["slope"] - 1) > 5 * away["slope_se"]
    assert not home["departs"] and home["rms"] < 0.01
    # the smallest finalist is off its profile-scale truth by what the session's scale says: the session's share
    truth = base * (dev.true_latency(nets[0]) / dev.true_latency(ref)) ** (1 + SPEC["stretch"] * math.log(f_base))
    err = out[0]["measured_ms"] / truth - 1
    assert abs(err) > 0.015 and err == pytest.approx(math.exp((away["slope"] - 1) * math.log(truth / base)) - 1,
                                                     abs=0.005)
