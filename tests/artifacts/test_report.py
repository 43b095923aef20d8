"""Figures drawn from tables return matplotlib Figures; the summary orders methods as config.METHODS."""

import math

import numpy as np
import pytest

from aows_core import report
from aows_core.config import METHODS

pytest.importorskip("matplotlib")


def _rows():
    rows = []
    for k, m in enumerate(METHODS):
        for t, target in enumerate(("1ms", "2ms")):
            lat = 0.9 + t + 0.05 * k
            rows.append({"method": m, "device": "cpu", "target": target, "target_ms": 1.0 + t, "unit": "ms",
                         "channels": [8, 16], "predicted_ms": lat, "measured_ms": lat, "measured_ms_min": lat - 0.01,
                         "measured_ms_max": lat + 0.02, "meets_target_predicted": True,
                         "meets_target_measured": t == 1, "too_noisy": False, "seeds": 1, "test_acc": 0.5 + 0.1 * t,
                         "test_acc_low": 0.45 + 0.1 * t, "test_acc_high": 0.55 + 0.1 * t, "sum_delta": 0.1 * k,
                         "supernet_acc": 0.4})
    return rows


def _figure(fig, tmp_path):
    from matplotlib.figure import Figure

    from aows_core import artifacts

    assert isinstance(fig, Figure)
    artifacts.save_figure(fig, tmp_path / "f.pdf")
    assert (tmp_path / "f.pdf").exists() and (tmp_path / "f.png").exists()


def test_colours_and_markers_name_every_method():
    assert set(report.COLORS) == set(METHODS) and set(report.MARKERS) == set(METHODS)


def test_lut_validation_figure(tmp_path):
    meas = np.array([1.0, 2.0, 3.0])
    _figure(report.lut_validation(meas, meas * 1.05, meas * 0.9, {"device": "cpu", "unit": "ms", "sigma_n": 0.01}), tmp_path)
    noisy = report.lut_validation(meas, meas, meas, {"device": "cpu", "unit": "ms", "sigma_n": 0.2,
                                                     "adequacy": {"verdict": "too_noisy"}})
    assert any("TOO NOISY" in t.get_text() for t in noisy.axes[0].texts)
    limited = report.lut_validation(meas, meas * 1.1, meas, {"device": "cpu", "unit": "ms", "sigma_n": 0.01, "adequacy": {
        "verdict": "model_limited", "ratio_low": 0.9, "ratio_high": 1.2}})
    assert any("beyond the noise" in t.get_text() and "+20.0" in t.get_text() for t in limited.axes[0].texts)


def test_a_too_noisy_measurement_is_said_in_the_results():
    rows = _rows()
    rows[0]["too_noisy"] = True
    md = report.summary_markdown(rows)
    assert "too noisy" in md.splitlines()[0] and md.count("⚠") == 2  # the banner and the one row
    assert "⚠" not in report.summary_markdown(_rows())


def test_result_figures(tmp_path):
    rows = _rows()
    meta = {"device": "cpu", "unit": "ms", "targets_met_measured": 4, "n": len(rows)}
    _figure(report.pareto_front(rows, meta), tmp_path)
    _figure(report.predicted_vs_measured(rows, meta), tmp_path)
    conf = [{"method": r["method"], "target": r["target"], "layer": i, "width": 8, "base_width": 16, "ratio": 0.5}
            for r in rows for i in range(2)]
    _figure(report.configurations(conf, meta), tmp_path)
    curves = [{"run": run, "epoch": e, "sampling": "uniform", "loss_max": 1.0 / (e + 1), "loss_min": 2.0 / (e + 1),
               "loss_random": 1.5 / (e + 1), "train_acc_max": 0.5, "temperature": 1.0 if run == "aows" else math.nan,
               "images_per_s": 10.0} for run in ("ows", "aows") for e in range(3)]
    _figure(report.training_curves(curves, meta), tmp_path)
    proxy = [{"proxy": p, "method": r["method"], "target": r["target"], "score": r["sum_delta"],
              "test_acc": r["test_acc"], "kendall_tau": 0.3, "p_value": 0.5, "n": len(rows)}
             for p in ("-sum_delta", "supernet_acc") for r in rows]
    _figure(report.proxy_check(proxy, meta), tmp_path)


def test_the_pareto_figure_s_noise_banner_clears_its_legend_and_points():
    """Regression (issue 42): the "too noisy" banner lay under the legend, both in the lower right."""
    rows = [{**r, "too_noisy": True} for r in _rows()]
    fig = report.pareto_front(rows, {"device": "cpu", "unit": "ms", "targets_met_measured": 4, "n": len(rows)})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    (banner,) = [t for t in ax.texts if "TOO NOISY" in t.get_text()]
    box = banner.get_window_extent(renderer)
    assert not box.overlaps(ax.get_legend().get_window_extent(renderer))
    points = ax.transData.transform([(r["measured_ms"], 100 * r["test_acc"]) for r in rows])
    assert not any(box.contains(x, y) for x, y in points)


def test_methods_are_drawn_and_listed_in_the_order_of_config_methods():
    rows = list(reversed(_rows())) + [{**_rows()[0], "method": "zz_other"}]
    assert [m for m, _ in report._by_method(rows)] == [*METHODS, "zz_other"]
    table = report.summary_markdown(_rows()).splitlines()
    assert table[0].startswith("| target | method | target [ms]")
    assert [line.split(" | ")[1] for line in table[2:6]] == list(METHODS)
