"""Timing-protocol math (§4, §7): measuring plans, drift correction to the LUT's baseline, protocol checks, metrics."""

import numpy as np
import pytest

from aows_core.config import ProfilingSettings
from aows_core.devices.base import PairedMeasurement
from aows_core.devices.flops import variable_macs
from aows_core.latency import fit, lut, metrics
from aows_core.latency.protocol import (
    FinalistSession,
    MeasureError,
    check_predictions,
    finalist_rows,
    measure_plan,
    protocol_differences,
    time_jobs,
)
from aows_core.space import get_space

PROTOCOL = ProfilingSettings(statistic="median", repeats=3, warmup=1, min_time_ms=0.0, chunks=5, reference_share=0.5)
REF = (2, 2)


class _Device:
    """Latency = sum of the widths, times a drift that grows with the job index; timed paired with REF (D27)."""

    analytic = False

    def measure_paired(self, channels, reference, repeats, warmup=0, job=0, min_time_s=0.0, chunks=5, share=1.0):
        def chunk(ch):
            return [np.full(repeats, sum(ch) * (1 + 0.01 * job))] * chunks

        return PairedMeasurement(chunk(channels), chunk(reference), 0.0, 0.0)


def test_protocol_differences_name_each_changed_setting():
    paired = {"pairing": "paired"}
    assert protocol_differences({**paired, "repeats": 3, "warmup": 1}, PROTOCOL) == []
    assert protocol_differences({**paired, "repeats": 5, "statistic": "min", "other": 1}, PROTOCOL) == [
        "statistic 'min' → 'median'", "repeats 5 → 3"]
    # a session recorded before paired timing interpolated its reference: measuring it paired is refused
    assert protocol_differences({"repeats": 3, "warmup": 1}, PROTOCOL) == ["pairing 'interpolated' → 'paired'"]
    assert protocol_differences({**paired, "chunks": 3}, PROTOCOL) == ["chunks 3 → 5"]
    # a setting recorded by an older session and since removed (D41's large reference) is no difference
    assert protocol_differences({**PROTOCOL.to_dict(), **paired, "large_reference_share": 0.0}, PROTOCOL) == []


def test_finalists_are_corrected_to_the_lut_baseline(monkeypatch):
    nets = [(1, 2), (3, 4)]
    monkeypatch.setattr("aows_core.latency.protocol.reference_config", lambda space: list(REF))
    jobs = measure_plan(nets, rounds=2, seed=0, analytic=False, job_offset=10)
    assert [j.job for j in jobs] == list(range(10, 10 + len(jobs))) and {j.role for j in jobs} == {"finalist"}
    steps = []
    rows = time_jobs(_Device(), jobs, PROTOCOL, None, on_step=lambda: steps.append(1))
    assert len(steps) == len(rows) == len(jobs)
    fin = [{"method": "ows", "target": "t", "target_ms": 5.0, "unit": "ms", "channels": list(n), "predicted_ms": 4.0}
           for n in nets]
    out, session, _ = finalist_rows(fin, rows, nets, FinalistSession("d", baseline=4.0))
    # the drift hits network and reference alike: paired timing at the undrifted reference (4) removes it (up to the
    # running median of the neighbouring jobs' references that a steady host's job is divided by)
    assert [r["measured_ms"] for r in out] == pytest.approx([3.0, 7.0], rel=1e-3)
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
    t = fit.fit_table(space, sets, exact=x)
    assert t.fit.status == "exact" and t.rows == [t.row]
    assert t.row["val_rmse_ms"] == pytest.approx(0.0, abs=1e-9) and t.n_obs.shape == (space.n_variables,) and (t.n_obs > 0).all()
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
