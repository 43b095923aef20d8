"""`aows pareto`: a device's results table and plots, accuracy vs measured latency (§7)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from . import add_config

if TYPE_CHECKING:
    from ..space import SearchSpace

COMMAND = "pareto"
HELP = "a device's results table and plots: accuracy vs measured latency (§7)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("measure", "retrain", "proxy", "lut_validation", "metrics")
OUTPUTS = ("out", "plots_dir")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--measure", required=True, help="the device's measure parquet")
    p.add_argument("--retrain", nargs="+", required=True, help="the finalists' retraining result.parquet files")
    p.add_argument("--proxy", help="the device's proxy parquet")
    p.add_argument("--lut-validation", help="the device's LUT validation.parquet (its held-out quality is recorded)")
    p.add_argument("--metrics", nargs="*", default=[], help="RUN=metrics.parquet of the supernet runs")
    p.add_argument("--out", required=True, help="the Pareto figure (PDF; PNG and parquet beside it)")
    p.add_argument("--plots-dir", required=True, help="folder of the other figures and their tables")


def from_args(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """As `stages.from_args`, with `--metrics RUN=path ...` turned into {RUN: path}."""
    import sys

    from . import from_args as default

    inputs, outputs, options = default(sys.modules[__name__], args)
    inputs["metrics"] = dict(m.split("=", 1) for m in args.metrics)
    return inputs, outputs, options


def results_table(device: str, measure: str | os.PathLike, retrain: Sequence[str | os.PathLike],
                  proxy: str | os.PathLike | None, space: SearchSpace) -> tuple[list[dict[str, Any]], dict]:
    """One row per finalist (§7): decision, measurement, retrained accuracy (mean over seeds), proxies."""
    from .. import artifacts
    from ..devices.flops import network_macs
    from ..evaluation import join_results

    mtable, mmeta = artifacts.read_table(measure, "measure")
    runs = artifacts.read_by_finalist(retrain, "retrain")
    prox = {(r["method"], r["target"]): r for r in artifacts.read_table(proxy, "proxy")[0].to_pylist()} if proxy else {}
    measured = mtable.to_pylist()
    for m in measured:
        key = (m["method"], m["target"])
        if m["device"] != device:
            raise artifacts.ArtifactError(f"{measure} holds measurements of device {m['device']!r}, not {device!r}")
        if key not in runs:
            raise artifacts.ArtifactError(f"no retraining result for {key} of device {device}; retrain that finalist first")
        for r in runs[key]:
            if list(r["channels"]) != list(m["channels"]):
                raise artifacts.ArtifactError(
                    f"retraining {key} trained channels {r['channels']}, but {m['channels']} were measured")
    return join_results(device, measured, runs, prox, lambda ch: network_macs(space, ch)), mmeta


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *,
        device: str) -> list[dict[str, Any]]:
    """The device's results table (`out` parquet), its Pareto figure (`out` as PDF+PNG) and the other plots (§7)."""
    from pathlib import Path

    from .. import artifacts, report
    from ..config import resolve
    from ..evaluation import configuration_rows, method_comparison, proxy_rows, ranking_reliability, training_rows

    measure, lut_validation = inputs["measure"], inputs.get("lut_validation")
    space = resolve(config).space
    rows, mmeta = results_table(device, measure, inputs["retrain"], inputs.get("proxy"), space)
    if not rows:
        raise ValueError(f"{measure} holds no finalists")
    prox = proxy_rows(rows)
    taus = {r["proxy"]: r["kendall_tau"] for r in prox}
    comparison, comparison_message = method_comparison(rows)
    ranking, ranking_message = ranking_reliability(rows, proxy_scores(prox))
    unaries_check = (artifacts.read_table(inputs["proxy"], "proxy")[1].get("unaries_check")
                     if inputs.get("proxy") else None)
    out, plots_dir = Path(outputs["out"]), Path(outputs["plots_dir"])
    lut_quality = {}
    if lut_validation is not None:  # how good the latency model behind the decisions was (held-out networks)
        vt, vmeta = artifacts.read_table(lut_validation, "lut_validation")
        (v,) = [r for r in vt.to_pylist() if r["model"] == "lut"]
        lut_quality = {f"lut_{k}": v[k] for k in ("n", "nrmse", "within_10pct", "kendall_tau")}
        lut_quality["lut_sigma_n"] = vmeta.get("sigma_n")
        lut_quality["lut_too_noisy"] = vmeta.get("too_noisy")
        lut_quality["noise_message"] = vmeta.get("noise_message")
        lut_quality["lut_adequacy"] = vmeta.get("adequacy")  # one report on the table's error (validate-lut)
    meta = artifacts.provenance(space, device, **lut_quality,
                                unit=rows[0]["unit"], fingerprint=mmeta.get("fingerprint"),
                                measured="median over rounds, corrected to the LUT's reference baseline",
                                interval="Wilson score 95 % (one seed) or t-interval over seeds",
                                kendall_tau_sum_delta=taus["-sum_delta"], kendall_tau_supernet_acc=taus["supernet_acc"],
                                kendall_tau_mmacs=taus["mmacs"], unaries_check=unaries_check,
                                comparison=comparison, comparison_message=comparison_message,
                                ranking=ranking, ranking_message=ranking_message,
                                targets_met_measured=int(sum(r["meets_target_measured"] for r in rows)),
                                n_too_noisy=int(sum(r["too_noisy"] for r in rows)),
                                targets_met_predicted=int(sum(r["meets_target_predicted"] for r in rows)), n=len(rows))
    artifacts.write_records(rows, out.with_suffix(".parquet"), "pareto", meta)
    artifacts.save_figure(report.pareto_front(rows, meta), out.with_suffix(".pdf"))
    metrics = {run: artifacts.read_table(path, "train_metrics")[0].to_pylist()
               for run, path in (inputs.get("metrics") or {}).items()}
    tables = {
        "latency": ("pareto", rows, report.predicted_vs_measured),
        "configurations": ("configurations", configuration_rows(rows, space), report.configurations),
        "training": ("training_curves", training_rows(metrics), report.training_curves),
        "proxy": ("proxy_check", prox, report.proxy_check),
    }
    meta["layer_roles"] = space.roles()[1:-1]  # the configuration plot tells stream widths from inner ones (D44)
    for name, (kind, table, draw) in tables.items():
        artifacts.write_records(table, plots_dir / f"{name}.parquet", kind, meta)
        artifacts.save_figure(draw(table, meta), plots_dir / f"{name}.pdf")
    return rows


def proxy_scores(prox: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each proxy's scores over the finalists, in the results table's order (from evaluation.proxy_rows)."""
    out: dict[str, list[float]] = {}
    for r in prox:
        out.setdefault(r["proxy"], []).append(r["score"])
    return out


def shared_networks(rows: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """[(method, its targets)] for every network one method decided for more than one target."""
    by_net: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for r in rows:
        by_net.setdefault((r["method"], tuple(r["channels"])), []).append(r["target"])
    return [(m, ts) for (m, _), ts in by_net.items() if len(ts) > 1]


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from pathlib import Path

    from .. import artifacts
    from ..report import summary_markdown

    print(summary_markdown(rows))
    shared = shared_networks(rows)
    if shared:
        print("One network for several targets (the looser ones do not bind, or a coarse grid: uniform's multipliers): "
              + "; ".join(f"{m} at {', '.join(ts)}" for m, ts in shared))
    meta = artifacts.read_table(Path(args.out).with_suffix(".parquet"), "pareto")[1]
    for message in (meta.get("comparison_message"), meta.get("ranking_message")):
        if message:
            print(message)
