"""The large reference of paired timing (docs/method.md D41): contention for the host's cache, measured per job."""

import copy
import math

import numpy as np
import pytest

from aows_core import artifacts as io
from aows_core.config import validate
from aows_core.devices import get_device
from aows_core.latency.protocol import (UNPAIRED, Pairing, correct_large, correct_paired, large_ratio_of,
                                        large_reference_config, pairing_of, reference_config, time_network)
from aows_core.stages.profile import profile_session as profile
from conftest import write_uniform_configs

CONTENDED = {"backend": "synthetic", "noise": 0.01, "drift": 0.0, "nonadditive": 0.0, "contention": 0.3,
             "regime_dwell": 3.0}


def _pairing(space, large_share=0.25):
    return Pairing(tuple(reference_config(space)), 5, 0.4,
                   tuple(large_reference_config(space)) if large_share else None, large_share)


def _timed(space, spec, pairing, n=60, seed=0):
    """n random networks timed as profiling times them, each row carrying its true latency."""
    dev, rng, rows = get_device(spec, space, 1), np.random.default_rng(seed), []
    for j in range(n):
        c = [int(rng.choice(ch)) for ch in space.layer_choices]
        r = time_network(dev, c, j, (30, 1, 0.0), "median", pairing)
        rows.append({**r, "job": j, "role": "sample", "channels": c, "truth": dev.true_latency(c)})
    return rows


def _spread(rows):
    """RMS of log(corrected / truth) with the common scale removed."""
    e = np.log([r["latency_ms"] / r["truth"] for r in rows])
    return float(np.sqrt(np.mean((e - np.median(e)) ** 2)))


def test_the_large_reference_is_timed_in_every_chunk(tiny_space):
    dev = get_device({"backend": "synthetic"}, tiny_space, 0)
    m = dev.measure_paired(tiny_space.min_config, tiny_space.middle_config, repeats=30, chunks=5, reference_share=0.4,
                           large=tiny_space.max_config, large_share=0.25)
    assert [a.size for a in m.network] == [6] * 5 and [a.size for a in m.reference] == [3] * 5
    assert [a.size for a in m.large] == [2] * 5 and np.median(np.concatenate(m.large)) > np.median(m.reference[0])
    assert dev.measure_paired(tiny_space.min_config, tiny_space.middle_config, repeats=30).large == []
    with pytest.raises(ValueError, match="large_share"):
        dev.measure_paired(tiny_space.min_config, tiny_space.middle_config, repeats=30, large=tiny_space.max_config)


def test_pairing_of_the_protocol(tiny_space):
    dev = get_device({"backend": "synthetic"}, tiny_space, 0)
    p = validate({})["profiling"]
    assert pairing_of(dev, p, tiny_space) == Pairing(tuple(tiny_space.middle_config), 5, 0.4)  # off by default
    assert pairing_of(dev, {**p, "large_reference_share": 0.25}, tiny_space) == Pairing(
        tuple(tiny_space.middle_config), 5, 0.4, tuple(tiny_space.max_config), 0.25)
    assert pairing_of(dev, {**p, "pairing": "interpolated"}, tiny_space) == UNPAIRED
    flops = get_device({"backend": "flops"}, tiny_space, 0)
    assert pairing_of(flops, p, tiny_space) == UNPAIRED


def test_contention_is_seeded_and_slows_only_networks_larger_than_the_reference(tiny_space):
    a, b = get_device(CONTENDED, tiny_space, 4), get_device(CONTENDED, tiny_space, 4)
    t = np.linspace(0, 200, 801)
    top = a.true_latency(tiny_space.max_config)
    fa = np.array([a.contention_factor(top, x) for x in t])
    assert np.array_equal(fa, [b.contention_factor(top, x) for x in t])
    assert set(np.round(fa, 6)) == {1.0, round(math.exp(0.3), 6)} and 35 < np.count_nonzero(np.diff(fa)) < 110
    ref, small = a.true_latency(tiny_space.middle_config), a.true_latency(tiny_space.min_config)
    assert all(a.contention_factor(ref, x) == 1.0 and a.contention_factor(small, x) == 1.0 for x in t)
    quiet = get_device({**CONTENDED, "contention": 0.0}, tiny_space, 4)
    assert all(quiet.contention_factor(top, x) == 1.0 for x in t)


def test_the_large_reference_removes_contention_the_reference_cannot_see(tiny_space):
    rows = _timed(tiny_space, CONTENDED, _pairing(tiny_space))
    plain = [{**r, "large_ref_ms_raw": math.nan} for r in copy.deepcopy(rows)]
    with_large, _ = correct_paired(rows)
    without, _ = correct_paired(plain)
    # large networks run up to exp(0.3) slower in about half the jobs; the reference is not slowed
    assert _spread(without) > 0.06 and _spread(with_large) < 0.025
    # on a host without contention it costs little: the large reference's own noise, scaled by w ≤ 1
    quiet = _timed(tiny_space, {**CONTENDED, "contention": 0.0}, _pairing(tiny_space))
    q_plain = [{**r, "large_ref_ms_raw": math.nan} for r in copy.deepcopy(quiet)]
    assert _spread(correct_paired(quiet)[0]) < 1.5 * _spread(correct_paired(q_plain)[0]) + 0.005


def test_correct_large_maps_the_jobs_scale_onto_the_sessions():
    base, q0, q = 1.0, 4.0, 4.0 * 1.1
    rows = [{"latency_ms": lat, "ref_ms_raw": 1.0, "large_ref_ms_raw": q} for lat in (0.5, 1.0, 2.0, q, 8.0)]
    rows.append({"latency_ms": 2.0, "ref_ms_raw": 1.0, "large_ref_ms_raw": math.nan})
    got = [r["latency_ms"] for r in correct_large(copy.deepcopy(rows), base, q0)]
    # at or below the reference: unchanged; the large reference itself lands on q₀; beyond it: ÷ q/q₀; in between
    # the position on the log scale is kept: log m ÷ log q = log x ÷ log q₀
    assert got[:2] == [0.5, 1.0] and got[5] == 2.0
    assert got[3] == pytest.approx(q0) and got[4] == pytest.approx(8.0 / 1.1)
    assert math.log(got[2]) / math.log(q0) == pytest.approx(math.log(2.0) / math.log(q))
    # continuous and increasing in the paired latency
    lat = np.linspace(0.5, 10, 200)
    out = [r["latency_ms"] for r in correct_large([{"latency_ms": v, "ref_ms_raw": 1.0, "large_ref_ms_raw": q}
                                                   for v in lat], base, q0)]
    assert np.all(np.diff(out) > 0) and np.max(np.abs(np.diff(out))) < 0.1
    # the session's own ratio when none is given; nothing without large references
    assert large_ratio_of(rows) == pytest.approx(q)
    assert correct_large(copy.deepcopy(rows), base)[3]["latency_ms"] == pytest.approx(q)
    assert large_ratio_of(rows[5:]) is None and correct_large(rows[5:], base) == rows[5:]


def test_a_later_session_uses_the_profiles_ratio(tiny_space):
    """measure and the verified decisions pass the LUT's q₀: a session in contention throughout is still corrected."""
    rows = _timed(tiny_space, {**CONTENDED, "contention": 0.0}, _pairing(tiny_space), n=20)
    q0 = large_ratio_of(rows)
    slowed = [{**r, "large_ref_ms_raw": r["large_ref_ms_raw"] * 1.2} for r in copy.deepcopy(rows)]
    own, _ = correct_paired(copy.deepcopy(slowed))
    lut, _ = correct_paired(copy.deepcopy(slowed), large_ratio=q0)
    # against its own ratio a uniformly slowed large reference changes nothing but the noise's weight
    assert [r["latency_ms"] for r in own] == pytest.approx([r["latency_ms"] for r in correct_paired(rows)[0]],
                                                           rel=5e-3)
    big = max(range(len(rows)), key=lambda k: rows[k]["latency_ms"])
    assert lut[big]["latency_ms"] < own[big]["latency_ms"] / 1.05


def test_profiling_on_a_contended_host(tiny_space, tmp_path):
    write_uniform_configs(tiny_space, tmp_path / "c.parquet", (80, 10, 60))
    p = {**validate({})["profiling"], "repeats": 10, "retest": 30, "stretch": False}
    dev = get_device(CONTENDED, tiny_space, 1)
    errors = {}
    for name, share in (("plain", 0.0), ("large", 0.25)):
        profile(tiny_space, "contended", CONTENDED, tmp_path / "c.parquet", tmp_path / f"{name}.parquet",
                tmp_path / "resume", {**p, "large_reference_share": share}, seed=1, progress=False)
        table, meta = io.read_table(tmp_path / f"{name}.parquet", "latency")
        rows = [r for r in table.to_pylist() if r["role"] == "sample"]
        errors[name] = _spread([{**r, "truth": dev.true_latency(r["channels"])} for r in rows])
        if share:
            assert meta["large_reference_channels"] == tiny_space.max_config
            assert meta["large_reference_ratio"] == pytest.approx(large_ratio_of(table.to_pylist()))
            assert all(math.isfinite(r["large_ref_ms_raw"]) for r in rows)
        else:
            assert meta["large_reference_channels"] is None and meta["large_reference_ratio"] is None
    assert errors["large"] < 0.5 * errors["plain"]
