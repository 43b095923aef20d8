"""The results table and plots of a device: joins, the Pareto set, intervals over seeds, Kendall τ, artifacts."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stage_calls import pareto_stage

from aows_core import artifacts as io
from aows_core import evaluation, report
from aows_core.config import validate
from aows_core.space import get_space
from aows_core.stages import pareto

CONFIG = validate({"space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25}})
SPACE = get_space("mobilenet_v1_fmnist", n_choices=3, width_mult=0.25)
META = {"space_name": SPACE.name, "space_hash": SPACE.hash}


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=12))
@settings(max_examples=200, deadline=None)
def test_pareto_set_matches_brute_force(points):
    lat = np.array([p[0] for p in points], float)
    acc = np.array([p[1] for p in points], float)
    keep = evaluation.pareto_optimal(lat, acc)
    for i in range(len(points)):
        dominated = any(lat[j] <= lat[i] and acc[j] >= acc[i] and (lat[j], acc[j]) != (lat[i], acc[i])
                        for j in range(len(points)))
        assert keep[i] == (not dominated)


def test_kendall_tau_of_perfect_and_reversed_rankings():
    assert evaluation.kendall([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])[0] == pytest.approx(1.0)
    assert evaluation.kendall([1, 2, 3, 4], [0.4, 0.3, 0.2, 0.1])[0] == pytest.approx(-1.0)
    assert math.isnan(evaluation.kendall([1, 2], [1, 2])[0])


def _finalists():
    mid = [c[len(c) // 2] for c in SPACE.layer_choices]
    configs = {"min": SPACE.min_config, "mid": mid, "max": SPACE.max_config}
    rows = []
    for (m, (t, ch)), lat in zip(itertools.product(("aows", "uniform"), configs.items()), itertools.count(1)):
        rows.append({"method": m, "target": t, "channels": ch, "latency": float(lat)})
    return rows


def _write_inputs(tmp_path, seeds=(0,)):
    fin = _finalists()
    mrows, rpaths, prows = [], [], []
    for k, f in enumerate(fin):
        lat = f["latency"]
        mrows.append({"method": f["method"], "device": "cpu", "target": f["target"], "target_ms": lat + 0.5, "unit": "ms",
                      "channels": f["channels"], "predicted_ms": lat, "measured_ms_raw": lat * 1.1, "measured_ms": lat * 1.05,
                      "measured_ms_min": lat, "measured_ms_max": lat * 1.1, "rounds": 5, "meets_target_predicted": True,
                      "meets_target_measured": lat * 1.05 <= lat + 0.5, "rel_error": 1 / 1.05 - 1, "fingerprint_match": True, "too_noisy": False})
        for s in seeds:
            correct = 500 + 50 * k + 7 * s
            lo, hi = evaluation.wilson_interval(correct, 1000)
            path = tmp_path / f"r_{k}_{s}.parquet"
            io.write_records([{"method": f["method"], "device": "cpu", "target": f["target"], "channels": f["channels"], "seed": s,
                               "epochs": 1, "train_seconds": 1.0, "final_train_loss": 1.0, "test_correct": correct,
                               "test_n": 1000, "test_acc": correct / 1000, "test_acc_low": lo, "test_acc_high": hi}],
                             path, "retrain", io.provenance(**META))
            rpaths.append(path)
        prows.append({"method": f["method"], "device": "cpu", "target": f["target"], "channels": f["channels"],
                      "sum_delta": 3.0 - k, "supernet_errors": 100 - k, "supernet_n": 200, "supernet_acc": (100 + k) / 200})
    io.write_records(mrows, tmp_path / "measure.parquet", "measure", io.provenance(**META, fingerprint={"backend": "x"}))
    io.write_records(prows, tmp_path / "proxy.parquet", "proxy", io.provenance(**META))
    metrics = []
    for e in range(3):
        metrics.append({"epoch": e, "steps": 10, "images": 1280, "seconds": 1.0, "images_per_s": 1280.0,
                        "loss_max": 2.0 - 0.3 * e, "loss_min": 2.2 - 0.3 * e, "loss_random": 2.1 - 0.3 * e,
                        "train_acc_max": 0.5 + 0.1 * e, "sampling": "uniform" if e < 2 else "adaptive",
                        "gamma": float("nan"), "temperature": float("nan") if e < 2 else 0.5, "scale": 1.0})
    io.write_records(metrics, tmp_path / "metrics.parquet", "train_metrics", io.provenance(**META))
    return rpaths


def test_pareto_stage_writes_every_table_and_plot(tmp_path):
    rpaths = _write_inputs(tmp_path)
    out = tmp_path / "res" / "pareto_cpu.pdf"
    rows = pareto_stage(CONFIG, "cpu", tmp_path / "measure.parquet", rpaths, tmp_path / "proxy.parquet",
                               {"ows": tmp_path / "metrics.parquet", "aows mid": tmp_path / "metrics.parquet"},
                               out, tmp_path / "res" / "plots")
    assert len(rows) == 6
    table, meta = io.read_table(out.with_suffix(".parquet"), "pareto")
    assert table.schema.remove_metadata().equals(io.SCHEMAS["pareto"])
    # accuracies rise with latency in the synthetic inputs: every point is Pareto-optimal within its method order
    assert meta["kendall_tau_sum_delta"] == pytest.approx(1.0) and meta["kendall_tau_supernet_acc"] == pytest.approx(1.0)
    assert meta["targets_met_measured"] == sum(r["meets_target_measured"] for r in rows)
    assert set(meta["ranking"]["proxies"]) == {"-sum_delta", "supernet_acc", "mmacs"}
    assert -1 <= meta["ranking"]["retest_tau"]["median"] <= 1 and "reproduces at Kendall τ" in meta["ranking_message"]
    assert (out.stat().st_size > 1000) and out.with_suffix(".png").exists()
    for name, kind in (("latency", "pareto"), ("configurations", "configurations"), ("training", "training_curves"),
                       ("proxy", "proxy_check")):
        t, _ = io.read_table(tmp_path / "res" / "plots" / f"{name}.parquet", kind)
        assert t.num_rows > 0 and t.schema.remove_metadata().equals(io.SCHEMAS[kind])
        assert (tmp_path / "res" / "plots" / f"{name}.pdf").stat().st_size > 1000
    conf = io.read_table(tmp_path / "res" / "plots" / "configurations.parquet", "configurations")[0].to_pylist()
    assert len(conf) == 6 * SPACE.n_layers
    assert all(c["ratio"] == pytest.approx(c["width"] / c["base_width"]) for c in conf)
    md = report.summary_markdown(rows)
    assert md.count("\n") == 6 + 1 and "aows" in md


def test_several_seeds_give_a_t_interval_over_seeds(tmp_path):
    rpaths = _write_inputs(tmp_path, seeds=(0, 1, 2))
    rows, _ = pareto.results_table("cpu", tmp_path / "measure.parquet", rpaths, tmp_path / "proxy.parquet", SPACE)
    r = rows[0]
    accs = np.array([0.5, 0.507, 0.514])
    assert r["seeds"] == 3 and r["test_acc"] == pytest.approx(accs.mean())
    from scipy.stats import t

    half = t.ppf(0.975, 2) * accs.std(ddof=1) / math.sqrt(3)
    assert (r["test_acc_low"], r["test_acc_high"]) == pytest.approx((accs.mean() - half, accs.mean() + half))


def test_a_retraining_of_other_channels_is_refused(tmp_path):
    rpaths = _write_inputs(tmp_path)
    table, meta = io.read_table(rpaths[0], "retrain")
    row = table.to_pylist()[0]
    row["channels"] = SPACE.max_config if row["channels"] != SPACE.max_config else SPACE.min_config
    io.write_records([row], rpaths[0], "retrain", meta)
    with pytest.raises(io.ArtifactError, match="were measured"):
        pareto.results_table("cpu", tmp_path / "measure.parquet", rpaths, None, SPACE)


def test_a_missing_finalist_is_named(tmp_path):
    rpaths = _write_inputs(tmp_path)
    with pytest.raises(io.ArtifactError, match="no retraining result"):
        pareto.results_table("cpu", tmp_path / "measure.parquet", rpaths[1:], None, SPACE)


def test_shared_networks_names_the_targets_one_method_decided_alike():
    from aows_core.stages.pareto import shared_networks

    rows = [{"method": "ows", "target": "range:0.1", "channels": [8, 16]},
            {"method": "ows", "target": "range:0.25", "channels": [16, 32]},
            {"method": "ows", "target": "range:0.4", "channels": [16, 32]},
            {"method": "uniform", "target": "range:0.25", "channels": [16, 32]},
            {"method": "uniform", "target": "range:0.4", "channels": [12, 24]}]
    assert shared_networks(rows) == [("ows", ["range:0.25", "range:0.4"])]
