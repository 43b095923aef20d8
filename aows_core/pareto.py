"""The results of a device (§7, Fig. pareto): finalists' retrained accuracy against measured latency.

Joins, per finalist (method × target), the decision's predicted latency, the device measurement
(corrected to the LUT's reference baseline), the retrained top-1 with its Wilson interval and the
supernet proxies, into one table; draws from it the Pareto front, predicted vs measured latency,
the found configurations relative to the base network, the supernet training curves and the proxy
check of assumption 1 (Kendall τ). Every figure's table is saved beside it as parquet.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from . import io

METHODS = ("aows", "ows", "greedy", "uniform")

io.SCHEMAS.setdefault(
    "pareto",
    pa.schema(
        [
            ("method", pa.string()),
            ("device", pa.string()),
            ("target", pa.string()),
            ("target_ms", pa.float64()),
            ("unit", pa.string()),
            ("channels", io.CHANNELS),
            ("mmacs", pa.float64()),
            ("predicted_ms", pa.float64()),
            ("measured_ms", pa.float64()),
            ("measured_ms_min", pa.float64()),
            ("measured_ms_max", pa.float64()),
            ("meets_target_predicted", pa.bool_()),
            ("meets_target_measured", pa.bool_()),
            ("seeds", pa.int32()),
            ("test_acc", pa.float64()),
            ("test_acc_low", pa.float64()),
            ("test_acc_high", pa.float64()),
            ("test_acc_std", pa.float64()),
            ("test_n", pa.int64()),
            ("sum_delta", pa.float64()),
            ("supernet_acc", pa.float64()),
            ("pareto_optimal", pa.bool_()),
        ]
    ),
)
io.SCHEMAS.setdefault(
    "configurations",
    pa.schema(
        [
            ("method", pa.string()),
            ("target", pa.string()),
            ("layer", pa.int32()),
            ("width", pa.int32()),
            ("base_width", pa.int32()),
            ("ratio", pa.float64()),
        ]
    ),
)
io.SCHEMAS.setdefault(
    "training_curves",
    pa.schema(
        [
            ("run", pa.string()),
            ("epoch", pa.int32()),
            ("sampling", pa.string()),
            ("loss_max", pa.float64()),
            ("loss_min", pa.float64()),
            ("loss_random", pa.float64()),
            ("train_acc_max", pa.float64()),
            ("temperature", pa.float64()),
            ("images_per_s", pa.float64()),
        ]
    ),
)
io.SCHEMAS.setdefault(
    "proxy_check",
    pa.schema(
        [
            ("proxy", pa.string()),
            ("method", pa.string()),
            ("target", pa.string()),
            ("score", pa.float64()),
            ("test_acc", pa.float64()),
            ("kendall_tau", pa.float64()),
            ("p_value", pa.float64()),
            ("n", pa.int64()),
        ]
    ),
)


def _rows_by_finalist(paths: Sequence[str | os.PathLike], kind: str) -> dict[tuple[str, str], list[dict]]:
    """Rows of `kind` artifacts keyed by (method, target)."""
    out: dict[tuple[str, str], list[dict]] = {}
    for p in paths:
        for r in io.read_table(p, kind)[0].to_pylist():
            out.setdefault((r["method"], r["target"]), []).append(r)
    return out


def pareto_optimal(latency: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """Points no other point dominates (no slower-or-equal latency with strictly better accuracy, or vice versa)."""
    n = len(latency)
    keep = np.ones(n, bool)
    for i in range(n):
        better = (latency <= latency[i]) & (acc >= acc[i]) & ((latency < latency[i]) | (acc > acc[i]))
        keep[i] = not better.any()
    return keep


def results_table(device: str, measure: str | os.PathLike, retrain: Sequence[str | os.PathLike],
                  proxy: str | os.PathLike | None, space) -> tuple[list[dict[str, Any]], dict]:
    """One row per finalist: decision, measurement, retrained accuracy (mean over seeds), proxies."""
    from . import measure as _  # noqa: F401  (registers the measure schema)
    from . import proxy as _p  # noqa: F401
    from . import retrain as _r  # noqa: F401
    from .devices.flops import network_macs

    mtable, mmeta = io.read_table(measure, "measure")
    runs = _rows_by_finalist(retrain, "retrain")
    prox = {(r["method"], r["target"]): r for r in io.read_table(proxy, "proxy")[0].to_pylist()} if proxy else {}
    rows = []
    for m in mtable.to_pylist():
        key = (m["method"], m["target"])
        if m["device"] != device:
            raise io.ArtifactError(f"{measure} holds measurements of device {m['device']!r}, not {device!r}")
        if key not in runs:
            raise io.ArtifactError(f"no retraining result for {key} of device {device}; retrain that finalist first")
        rs = runs[key]
        for r in rs:
            if list(r["channels"]) != list(m["channels"]):
                raise io.ArtifactError(f"retraining {key} trained channels {r['channels']}, but {m['channels']} were measured")
        accs = np.array([r["test_acc"] for r in rs])
        if len(rs) == 1:
            lo, hi, std = rs[0]["test_acc_low"], rs[0]["test_acc_high"], float("nan")
        else:  # several seeds: mean ± t-interval over seeds
            from scipy.stats import t

            std = float(accs.std(ddof=1))
            half = float(t.ppf(0.975, len(rs) - 1)) * std / math.sqrt(len(rs))
            lo, hi = float(accs.mean()) - half, float(accs.mean()) + half
        p = prox.get(key, {})
        rows.append({
            "method": m["method"], "device": device, "target": m["target"], "target_ms": m["target_ms"],
            "unit": m["unit"], "channels": list(m["channels"]), "mmacs": network_macs(space, m["channels"]) / 1e6,
            "predicted_ms": m["predicted_ms"], "measured_ms": m["measured_ms"],
            "measured_ms_min": m["measured_ms_min"], "measured_ms_max": m["measured_ms_max"],
            "meets_target_predicted": m["meets_target_predicted"], "meets_target_measured": m["meets_target_measured"],
            "seeds": len(rs), "test_acc": float(accs.mean()), "test_acc_low": lo, "test_acc_high": hi,
            "test_acc_std": std, "test_n": int(rs[0]["test_n"]),
            "sum_delta": p.get("sum_delta", float("nan")), "supernet_acc": p.get("supernet_acc", float("nan")),
        })
    lat = np.array([r["measured_ms"] for r in rows])
    acc = np.array([r["test_acc"] for r in rows])
    for r, k in zip(rows, pareto_optimal(lat, acc) if rows else []):
        r["pareto_optimal"] = bool(k)
    return rows, mmeta


def kendall(score: Sequence[float], acc: Sequence[float]) -> tuple[float, float]:
    """Kendall τ-b between a proxy and retrained accuracy (scipy), and its p-value; NaN if undefined."""
    from scipy.stats import kendalltau

    s, a = np.asarray(score, float), np.asarray(acc, float)
    ok = np.isfinite(s) & np.isfinite(a)
    if ok.sum() < 3:
        return float("nan"), float("nan")
    res = kendalltau(s[ok], a[ok])
    return float(res.statistic), float(res.pvalue)


def proxy_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The proxy check (§3 assumption 1): −Σδ and supernet accuracy vs retrained accuracy, with Kendall τ."""
    out = []
    acc = [r["test_acc"] for r in rows]
    for name, scores in (("-sum_delta", [-r["sum_delta"] for r in rows]),
                         ("supernet_acc", [r["supernet_acc"] for r in rows])):
        tau, p = kendall(scores, acc)
        out += [{"proxy": name, "method": r["method"], "target": r["target"], "score": s, "test_acc": r["test_acc"],
                 "kendall_tau": tau, "p_value": p, "n": len(rows)} for r, s in zip(rows, scores)]
    return out


def configuration_rows(rows: Sequence[Mapping[str, Any]], space) -> list[dict[str, Any]]:
    """Found widths relative to the base network's (Fig. found configurations)."""
    base = space.base[:-1]
    return [{"method": r["method"], "target": r["target"], "layer": i, "width": int(w), "base_width": int(b),
             "ratio": int(w) / int(b)} for r in rows for i, (w, b) in enumerate(zip(r["channels"], base))]


def training_rows(metrics: Mapping[str, str | os.PathLike]) -> list[dict[str, Any]]:
    """Per-epoch supernet training metrics of the OWS run and each AOWS run."""
    from . import train as _  # noqa: F401  (registers the train_metrics schema)

    out = []
    for run, path in metrics.items():
        for r in io.read_table(path, "train_metrics")[0].to_pylist():
            out.append({"run": run, **{k: r[k] for k in ("epoch", "sampling", "loss_max", "loss_min", "loss_random",
                                                          "train_acc_max", "temperature", "images_per_s")}})
    return out


def pareto_stage(config: Mapping[str, Any], device: str, measure: str | os.PathLike,
                 retrain: Sequence[str | os.PathLike], proxy: str | os.PathLike | None,
                 metrics: Mapping[str, str | os.PathLike], out: str | os.PathLike,
                 plots_dir: str | os.PathLike, lut_validation: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Stage: the device's results table (`out` parquet), its Pareto figure (`out` as PDF+PNG) and the other plots."""
    from . import plots
    from .config import space_from_config

    space = space_from_config(config)
    rows, mmeta = results_table(device, measure, retrain, proxy, space)
    if not rows:
        raise ValueError(f"{measure} holds no finalists")
    prox = proxy_rows(rows)
    taus = {r["proxy"]: r["kendall_tau"] for r in prox}
    out, plots_dir = Path(out), Path(plots_dir)
    lut_quality = {}
    if lut_validation is not None:  # how good the latency model behind the decisions was (held-out networks)
        vt, vmeta = io.read_table(lut_validation, "lut_validation")
        (v,) = [r for r in vt.to_pylist() if r["model"] == "lut"]
        lut_quality = {f"lut_{k}": v[k] for k in ("n", "nrmse", "within_10pct", "kendall_tau")}
        lut_quality["lut_sigma_n"] = vmeta.get("sigma_n")
    meta = io.provenance(**lut_quality, space_name=space.name, space_hash=space.hash, device=device,
                         unit=rows[0]["unit"], fingerprint=mmeta.get("fingerprint"),
                         measured="median over rounds, corrected to the LUT's reference baseline",
                         interval="Wilson score 95 % (one seed) or t-interval over seeds",
                         kendall_tau_sum_delta=taus["-sum_delta"], kendall_tau_supernet_acc=taus["supernet_acc"],
                         targets_met_measured=int(sum(r["meets_target_measured"] for r in rows)),
                         targets_met_predicted=int(sum(r["meets_target_predicted"] for r in rows)), n=len(rows))
    io.write_records(rows, out.with_suffix(".parquet"), "pareto", meta)
    plots.pareto_front(rows, meta, out.with_suffix(".pdf"))
    tables = {
        "latency": ("pareto", rows, plots.predicted_vs_measured),
        "configurations": ("configurations", configuration_rows(rows, space), plots.configurations),
        "training": ("training_curves", training_rows(metrics), plots.training_curves),
        "proxy": ("proxy_check", prox, plots.proxy_check),
    }
    for name, (kind, table, draw) in tables.items():
        io.write_records(table, plots_dir / f"{name}.parquet", kind, meta)
        draw(table, meta, plots_dir / f"{name}.pdf")
    return rows


def summary_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The results table as Markdown (for the log and the README)."""
    unit = rows[0]["unit"] if rows else "ms"
    head = (f"| target | method | target [{unit}] | predicted | measured (corrected) | meets (pred / meas) | "
            f"test top-1 [95 % CI] | Σδ | supernet top-1 |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    order = {m: i for i, m in enumerate(METHODS)}
    for r in sorted(rows, key=lambda r: (r["target_ms"], order.get(r["method"], 9))):
        lines.append(
            f"| {r['target']} | {r['method']} | {r['target_ms']:.3g} | {r['predicted_ms']:.3g} | "
            f"{r['measured_ms']:.3g} [{r['measured_ms_min']:.3g}–{r['measured_ms_max']:.3g}] | "
            f"{'✓' if r['meets_target_predicted'] else '✗'} / {'✓' if r['meets_target_measured'] else '✗'} | "
            f"{100 * r['test_acc']:.2f} % [{100 * r['test_acc_low']:.2f}, {100 * r['test_acc_high']:.2f}] | "
            f"{r['sum_delta']:.3f} | {100 * r['supernet_acc']:.1f} % |")
    return "\n".join(lines)
