"""Timing on a busy host (docs/method.md D27): paired timing, re-timing of disturbed jobs, the noise gate."""

import math

import numpy as np
import pandas as pd
import pytest
from conftest import write_uniform_configs

from aows_core import artifacts as io
from aows_core.config import ProfilingSettings
from aows_core.devices import get_device
from aows_core.latency.protocol import (
    FinalistSession,
    disturbed_limit,
    finalist_rows,
    merge_retimed,
    noise_gate,
    noise_threshold,
    target_gaps,
)
from aows_core.stages.profile import ProfileJob
from aows_core.stages.profile import profile_session as profile
from aows_core.training.loop import RunControl

BUSY = {"backend": "synthetic", "noise": 0.01, "drift": 0.3, "nonadditive": 0.0, "interference": 0.3,
        "regime_dwell": 3.0}


def protocol(**kw):
    return ProfilingSettings(**{"repeats": 10, "retest": 30, **kw})


def _profile(space, tmp_path, name, p, spec=BUSY, stop_after=None, resume="resume"):
    return profile(ProfileJob(space, "busy", spec, p, 1, ("range:0.2", "range:0.6")), tmp_path / "c.parquet",
                   tmp_path / f"{name}.parquet", RunControl(tmp_path / resume, False, stop_after))


def _log_error(space, path, spec=BUSY):
    """Spread of log(measured / truth) over the sampled networks (a common scale removed)."""
    dev = get_device(spec, space, 1)
    rows = [r for r in io.read_table(path, "latency")[0].to_pylist() if r["role"] == "sample"]
    e = np.log([r["latency_ms"] / dev.true_latency(r["channels"]) for r in rows])
    return float(np.std(e))


def test_regimes_are_seeded_and_absent_without_interference(tiny_space):
    a, b = get_device(BUSY, tiny_space, 4), get_device(BUSY, tiny_space, 4)
    t = np.linspace(0, 200, 801)
    fa = np.array([a.regime_factor(x) for x in t])
    assert np.array_equal(fa, [b.regime_factor(x) for x in t]) and set(np.round(fa, 6)) == {1.0, 1.3}
    # dwell ≈ regime_dwell jobs: about 200/3 switches over 200 jobs
    assert 35 < np.count_nonzero(np.diff(fa)) < 110
    quiet = get_device({**BUSY, "interference": 0.0}, tiny_space, 4)
    assert all(quiet.regime_factor(x) == 1.0 for x in t)


def test_paired_timing_cancels_interference(tiny_space, tmp_path):
    write_uniform_configs(tiny_space, tmp_path / "c.parquet", (80, 10, 60))
    paired = _profile(tiny_space, tmp_path, "paired", protocol())
    # the host is 30 % slower a third of the time, switching every ~3 jobs: the reference timed beside each network
    # sees the same host
    assert paired["sigma_n"] < 0.02 and not paired["too_noisy"] and paired["noise_message"] == ""
    dev = get_device(BUSY, tiny_space, 1)
    rows = [r for r in io.read_table(tmp_path / "paired.parquet", "latency")[0].to_pylist() if r["role"] == "sample"]
    truth = np.array([dev.true_latency(r["channels"]) for r in rows])
    e_raw = float(np.std(np.log([r["latency_ms_raw"] for r in rows] / truth)))
    e_paired = float(np.std(np.log([r["latency_ms"] for r in rows] / truth)))
    assert e_paired < 0.3 * e_raw and e_paired < 0.02


def test_a_session_above_the_gate_is_flagged_and_says_what_to_do(tiny_space, tmp_path):
    write_uniform_configs(tiny_space, tmp_path / "c.parquet", (30, 10, 20))
    with pytest.warns(UserWarning, match="too noisy"):
        r = _profile(tiny_space, tmp_path, "noisy", protocol(max_noise=0.001, retest=10))
    assert r["too_noisy"] and r["sigma_n"] > 0.001
    assert "σ_n" in r["noise_message"] and "taskset" in r["noise_message"]
    _, meta = io.read_table(tmp_path / "noisy.parquet", "latency")
    assert meta["too_noisy"] and meta["pairing"] == "paired" and meta["max_noise"] == pytest.approx(0.001)


def test_jobs_disturbed_while_timed_are_timed_again_and_resume_exactly(tiny_space, tmp_path):
    write_uniform_configs(tiny_space, tmp_path / "c.parquet", (60, 10, 30))
    fast = {**BUSY, "regime_dwell": 0.15}  # switches within one job's chunks
    p = protocol(retest=10, retime=0.2, spell_retime=0.0)  # D27 alone (D47: tests/latency/test_spells.py)
    full = _profile(tiny_space, tmp_path, "full", p, spec=fast, resume="a")
    table, meta = io.read_table(tmp_path / "full.parquet", "latency")
    rows = table.to_pylist()
    n_plan = len(rows)
    assert 0 < full["retimed"] <= math.ceil(0.2 * n_plan) and meta["retimed"] == full["retimed"]
    assert sum(r["retimed"] for r in rows) == full["retimed"] and meta["next_job"] == n_plan + full["retimed"]
    assert full["total"] == n_plan + full["retimed"]
    # interrupted inside the re-timing phase, then resumed: the same file
    part = _profile(tiny_space, tmp_path, "part", p, spec=fast, resume="b", stop_after=n_plan + 1)
    assert not part["complete"] and part["done"] == n_plan + 1
    _profile(tiny_space, tmp_path, "part", p, spec=fast, resume="b")
    again = io.read_table(tmp_path / "part.parquet", "latency")[0].drop(["t_start_s"]).to_pandas()
    pd.testing.assert_frame_equal(again, table.drop(["t_start_s"]).to_pandas())  # NaN columns compare equal
    # the budget bounds the work: none re-timed with retime 0
    none = _profile(tiny_space, tmp_path, "none", protocol(retest=10, retime=0.0, spell_retime=0.0), spec=fast,
                    resume="c")
    assert none["retimed"] == 0


def test_noise_threshold_from_the_targets():
    assert target_gaps([1.0, 2.0, 1.5]) == pytest.approx(1 / 3)
    assert target_gaps([1.0]) == math.inf
    assert noise_threshold("auto", [1.0, 1.5, 2.0]) == pytest.approx(0.05)  # capped
    assert noise_threshold("auto", [1.0, 1.05, 2.0]) == pytest.approx(0.025)  # targets 5 % apart: 2.5 % noise
    assert noise_threshold(0.1, [1.0, 1.05]) == 0.1
    gate = noise_gate(0.03, 0.025)
    assert gate["too_noisy"] and "3.0 %" in gate["noise_message"] and "2.5 %" in gate["noise_message"]
    assert noise_gate(0.02, 0.025) == {"max_noise": 0.025, "too_noisy": False, "noise_message": ""}


def test_retest_nrmse_is_the_floor_of_a_perfect_table():
    """σ_n over retest pairs, and the same noise in NRMSE's terms: slow networks that vary more weigh more there."""
    from aows_core.latency.protocol import retest_noise

    def rows(spread):
        out = []
        for i in range(30):
            lat = 1.0 + i / 10
            out.append({"config_id": i, "role": "sample", "latency_ms": lat})
            out.append({"config_id": i, "role": "retest", "latency_ms": lat * (1 + spread(i) * (-1) ** i)})
        return out

    grows = retest_noise(rows(lambda i: 0.005 if i < 20 else 0.06))
    flat = retest_noise(rows(lambda i: 0.02))
    assert flat["sigma_n"] == pytest.approx(0.02 / np.sqrt(2), rel=1e-3) and flat["retest_pairs"] == 30
    # the floor in NRMSE's terms (D39): a perfect table's NRMSE against noisy timings, by brute force over noise draws
    for r in (grows, flat):
        assert r["retest_nrmse"] > 0
    assert grows["retest_nrmse"] > 1.3 * grows["sigma_n"]  # slow networks weigh more in NRMSE: σ_n understates it
    assert flat["retest_nrmse"] == pytest.approx(flat["sigma_n"], rel=0.1)
    truth = 1.0 + np.arange(30) / 10
    sd = np.where(np.arange(30) < 20, 0.005, 0.06) / np.sqrt(2)
    noisy = truth * (1 + sd * np.random.default_rng(0).standard_normal((4000, 30)))
    perfect = np.sqrt(np.mean((noisy - truth) ** 2)) / truth.mean()
    assert grows["retest_nrmse"] == pytest.approx(perfect, rel=0.1)


def _rows(values):
    """Paired measure rows: network k has the chunk ratios `values[k]` over its rounds."""
    out, job = [], 0
    for k, vs in enumerate(values):
        for v in vs:
            out.append({"job": job, "round": job, "role": "finalist", "network": k, "latency_ms_raw": v,
                        "ref_ms_raw": 1.0, "pair_ratio": v, "ratio_spread": 0.0})
            job += 1
    return out


def test_finalists_are_flagged_when_the_lut_or_the_session_was_too_noisy():
    nets = [(1,), (2,)]
    fin = [{"method": "ows", "target": "t", "target_ms": 5.0, "unit": "ms", "channels": list(n), "predicted_ms": 1.0}
           for n in nets]
    quiet = _rows([[1.0, 1.01, 0.99], [2.0, 2.02, 1.98]])
    out, _, noise = finalist_rows(fin, quiet, nets, FinalistSession("d", 1.0, max_noise=0.05))
    assert noise < 0.02 and not any(r["too_noisy"] for r in out)
    assert [r["measured_ms"] for r in out] == pytest.approx([1.0, 2.0])
    out, _, _ = finalist_rows(fin, _rows([[1.0, 1.01, 0.99], [2.0, 2.02, 1.98]]), nets,
                              FinalistSession("d", 1.0, max_noise=0.05, lut_too_noisy=True))
    assert all(r["too_noisy"] for r in out)
    busy = _rows([[1.0, 1.3, 0.8], [2.0, 2.6, 1.7]])
    out, _, noise = finalist_rows(fin, busy, nets, FinalistSession("d", 1.0, max_noise=0.05))
    assert noise > 0.05 and all(r["too_noisy"] for r in out)


def test_the_reference_takes_its_share_of_every_chunk(tiny_space):
    dev = get_device(BUSY, tiny_space, 3)
    m = dev.measure_paired(tiny_space.max_config, tiny_space.min_config, repeats=30, warmup=1, job=5, chunks=5,
                           reference_share=0.5)
    assert [len(c) for c in m.network] == [6] * 5 and [len(c) for c in m.reference] == [3] * 5
    with pytest.raises(ValueError, match="reference_share"):
        dev.measure_paired(tiny_space.max_config, tiny_space.min_config, repeats=30, reference_share=0.0)


def test_a_measuring_row_keeps_its_place_and_the_less_disturbed_timing():
    """A re-timing replaces what was timed, never which job, round or network it was (JOB_KEYS)."""
    rows = [{"job": j, "round": j // 3, "role": "finalist", "network": j % 3, "latency_ms_raw": 2.0, "ref_ms_raw": 1.0,
             "ratio_spread": 0.05} for j in range(12)]
    rows[4]["ratio_spread"], rows[7]["ratio_spread"] = 0.9, 0.4
    again = [{"job": 12, "round": 1, "role": "retime", "network": 1, "retime_of": 4, "latency_ms_raw": 2.1,
              "ref_ms_raw": 1.0, "ratio_spread": 0.1},
             {"job": 13, "round": 2, "role": "retime", "network": 1, "retime_of": 7, "latency_ms_raw": 2.5,
              "ref_ms_raw": 1.0, "ratio_spread": 0.5}]
    merged = merge_retimed(rows, again)
    assert [(r["job"], r["round"], r["role"], r["network"]) for r in merged] == \
        [(r["job"], r["round"], r["role"], r["network"]) for r in rows]
    assert merged[4]["latency_ms_raw"] == 2.1 and merged[4]["own_reference"] and merged[4]["retimed"]
    assert merged[7]["latency_ms_raw"] == 2.0 and "own_reference" not in merged[7] and merged[7]["retimed"]
    assert sum(r["retimed"] for r in merged) == 2


def test_the_measuring_session_times_its_disturbed_jobs_again_as_profiling_does(tiny_space):
    """§7 timed with §4's protocol (D27): on a busy host switching within jobs, the disturbed finalist timings are
    timed again after the rounds, within the budget, each keeping the less disturbed of its two timings."""
    from aows_core.latency.protocol import measure_plan, retime_jobs, time_jobs

    dev = get_device({**BUSY, "regime_dwell": 0.3}, tiny_space, 2)
    nets = [tuple(tiny_space.min_config), tuple(tiny_space.max_config), tuple(tiny_space.middle_config)]
    p = protocol(retime=0.1)
    jobs = measure_plan(nets, 10, 0, False, job_offset=100)
    rows = time_jobs(dev, jobs, p, tiny_space)
    again = retime_jobs(jobs, rows, p, analytic=False)
    assert 0 < len(again) <= math.ceil(0.1 * len(jobs))
    assert [j.job for j in again] == list(range(130, 130 + len(again)))
    limit = disturbed_limit([r["ratio_spread"] for r in rows])
    spread = {r["job"]: r["ratio_spread"] for r in rows}
    assert all(spread[j.retime_of] > limit and j.channels == jobs[j.retime_of - 100].channels for j in again)
    assert [spread[j.retime_of] for j in again] == sorted((spread[j.retime_of] for j in again), reverse=True)
    retimed = time_jobs(dev, again, p, tiny_space)
    merged = merge_retimed(rows, [{**r, "retime_of": j.retime_of} for r, j in zip(retimed, again)])
    assert len(merged) == len(rows) and sum(r["retimed"] for r in merged) == len(again)
    assert [(r["job"], r["round"], r["network"]) for r in merged] == [(r["job"], r["round"], r["network"]) for r in rows]
    assert retime_jobs(jobs, rows, p, analytic=True) == [] and retime_jobs(jobs, rows, protocol(retime=0.0), False) == []
