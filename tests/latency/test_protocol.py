"""Timing-protocol math (§4, §7): measuring plans, drift correction to the LUT's baseline, protocol checks, metrics."""

import numpy as np
import pytest

from aows_core.devices.base import Measurement
from aows_core.devices.flops import variable_macs
from aows_core.latency import fit, lut, metrics
from aows_core.latency.protocol import (
    MeasureError,
    check_predictions,
    finalist_rows,
    measure_plan,
    protocol_differences,
    time_jobs,
)
from aows_core.space import get_space

PROTOCOL = {"statistic": "median", "repeats": 3, "warmup": 1, "min_time_ms": 0.0, "pairing": "interpolated", "chunks": 5, "reference_share": 0.5}


class _Device:
    """Latency = sum of the widths, times a drift that grows with the job index."""

    analytic = False

    def measure(self, channels, repeats, warmup=0, job=0, min_time_s=0.0):
        return Measurement(np.full(repeats, sum(channels) * (1 + 0.01 * job)), 0.0, 0.0)


def test_protocol_differences_name_each_changed_setting():
    assert protocol_differences({"repeats": 3, "warmup": 1}, PROTOCOL) == []
    assert protocol_differences({"repeats": 5, "statistic": "min", "other": 1}, PROTOCOL) == [
        "statistic 'min' → 'median'", "repeats 5 → 3"]
    paired = {**PROTOCOL, "pairing": "paired"}
    # a session recorded before pairing existed interpolated its reference: measuring it paired is refused
    assert protocol_differences({"repeats": 3, "warmup": 1}, paired) == ["pairing 'interpolated' → 'paired'"]
    assert protocol_differences({**paired, "chunks": 3}, paired) == ["chunks 3 → 5"]
    assert protocol_differences({**PROTOCOL, "chunks": 3}, PROTOCOL) == []  # chunks mean nothing interpolated


def test_finalists_are_corrected_to_the_lut_baseline():
    nets, ref = [(1, 2), (3, 4)], (2, 2)
    jobs = measure_plan(nets, ref, rounds=2, seed=0, analytic=False, job_offset=10)
    assert [j.job for j in jobs] == list(range(10, 10 + len(jobs))) and jobs[0].role == jobs[-1].role == "reference"
    steps = []
    rows = time_jobs(_Device(), jobs, PROTOCOL, None, on_step=lambda: steps.append(1))
    assert len(steps) == len(rows) == len(jobs)
    fin = [{"method": "ows", "target": "t", "target_ms": 5.0, "unit": "ms", "channels": list(n), "predicted_ms": 4.0}
           for n in nets]
    out, session, _, _ = finalist_rows(fin, rows, nets, baseline=4.0, analytic=False, device_name="d", match=True)
    # the drift is linear in the job index: correcting to the undrifted reference (4) removes it
    # (up to the running median's shrunken windows at the ends of the series)
    assert [r["measured_ms"] for r in out] == pytest.approx([3.0, 7.0], rel=1e-2)
    assert [r["meets_target_measured"] for r in out] == [True, False] and all(r["rounds"] == 2 for r in out)
    assert session > 4.0


def test_predictions_must_come_from_this_lut():
    space = get_space("mobilenet_v1_fmnist", n_choices=3, width_mult=0.25)
    x = variable_macs(space) / 1e6
    ch = space.max_config
    pred = float(lut.predict(space, x, space.indices(ch)))
    f = {"source": "d.parquet", "method": "ows", "target": "t", "channels": ch, "predicted_latency_ms": pred}
    check_predictions(space, x, [f], "lut.parquet")
    assert f["predicted_ms"] == pred
    f["predicted_latency_ms"] = pred * 1.01
    with pytest.raises(MeasureError, match="decided on another LUT"):
        check_predictions(space, x, [f], "lut.parquet")


def test_split_sets_and_an_exact_table_fit():
    space = get_space("mobilenet_v1_fmnist", n_choices=2, width_mult=0.25)
    x = variable_macs(space) / 1e6
    rng = np.random.default_rng(0)
    cols = {"role": [], "set": [], "channels": [], "latency_ms": [], "config_id": []}
    for k, name in enumerate(["train"] * 60 + ["lambda_val"] * 5 + ["test"] * 5 + ["train"]):
        ch = [int(rng.choice(c)) for c in space.layer_choices]
        cols["role"].append("reference" if k == 70 else "sample")
        cols["set"].append(name)
        cols["channels"].append(ch)
        cols["latency_ms"].append(float(lut.predict(space, x, space.indices(ch))))
        cols["config_id"].append(k)
    sets = lut.split_sets(space, lut.columns_of(cols))
    assert {k: len(v[1]) for k, v in sets.items()} == {"train": 60, "lambda_val": 5, "test": 5}
    best, results, rows, keep, n_obs = fit.fit_table(space, sets, {}, exact=x)
    assert best == 0 and results[0].status == "exact" and rows[0]["chosen"] and keep.all()
    assert rows[0]["val_rmse_ms"] == pytest.approx(0.0, abs=1e-9) and n_obs.shape == (space.n_variables,) and (n_obs > 0).all()
    idx_te, l_te, _ = sets["test"]
    macs = lambda idx: np.array([variable_macs(space)[space.variable_ids(k)].sum() for k in idx])  # noqa: E731
    vrows, m_lut, m_flops, a, base = metrics.validation_rows(
        lut.predict(space, x, idx_te), l_te, macs(sets["train"][0]), sets["train"][1], macs(idx_te))
    assert [r["model"] for r in vrows] == ["lut", "flops_proportional"] and vrows[0]["n"] == 5
    assert m_lut["rmse_ms"] == pytest.approx(0.0, abs=1e-9) and a == pytest.approx(1e-6)
    assert base == pytest.approx(l_te)


def test_latency_modules_import_numpy_and_scipy_only():
    import subprocess
    import sys

    for module in ("sampling", "protocol", "lut", "fit", "metrics"):
        code = (
            f"import sys, aows_core.latency.{module}; "
            "bad = [m for m in ('torch', 'pyarrow', 'pandas', 'matplotlib', 'osqp', 'cvxpy', 'tqdm') if m in sys.modules]; "
            "assert not bad, bad"
        )
        subprocess.run([sys.executable, "-c", code], check=True)
