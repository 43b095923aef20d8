"""Figures and the results summary, drawn from tables (§7 Figs. latency_correlation, proxy_compare,
channelconf_TRT, pareto).

Every figure function takes the rows (or columns) of the table saved beside it and returns a matplotlib
Figure; the stage saves it with `artifacts.save_figure` (PDF + PNG, atomic). Methods are drawn in the
order of `config.METHODS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from .config import METHODS

if TYPE_CHECKING:
    from matplotlib.figure import Figure


COLORS = {"aows": "tab:red", "ows": "tab:blue", "greedy": "tab:green", "uniform": "tab:gray"}
MARKERS = {"aows": "o", "ows": "s", "greedy": "^", "uniform": "D"}


def _plt():
    """pyplot on the non-interactive Agg backend (figures are only saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _by_method(rows: Sequence[Mapping[str, Any]], key: str = "measured_ms") -> list[tuple[str, list]]:
    """(method, its rows sorted by `key`) in the order aows, ows, greedy, uniform, then any other."""
    out = {}
    for r in rows:
        out.setdefault(r["method"], []).append(r)
    return [(m, sorted(out[m], key=lambda r: r[key])) for m in (*METHODS, *sorted(set(out) - set(METHODS))) if m in out]


def lut_validation(meas: np.ndarray, pred: np.ndarray, base: np.ndarray, meta: Mapping[str, Any]) -> Figure:
    """Predicted vs measured latency of held-out networks, with the identity line (§7 Fig. latency_correlation).

    `meas`, `pred`, `base`: the measured, LUT-predicted and FLOPs-proportional latencies (the columns of the
    `lut_predictions` table); `meta`: its metadata (device, unit, sigma_n, adequacy).
    """
    plt = _plt()
    meas, pred, base = (np.asarray(a, dtype=np.float64) for a in (meas, pred, base))
    lo, hi = float(min(meas.min(), pred.min())), float(max(meas.max(), pred.max()))
    fig, ax = plt.subplots(figsize=(4.6, 4.4))
    grid = np.linspace(lo * 0.95, hi * 1.05, 2)
    ax.fill_between(grid, grid * 0.9, grid * 1.1, color="0.9", label="±10 %")
    ax.plot(grid, grid, color="k", lw=1, label="identity")
    ax.scatter(meas, base, s=8, color="tab:orange", alpha=0.5, label="FLOPs-proportional")
    ax.scatter(meas, pred, s=10, color="tab:blue", label="latency table")
    rel = np.abs(pred - meas) / meas
    unit = meta.get("unit", "ms")
    ax.set_xlabel(f"measured ({unit})", fontsize=8)
    ax.set_ylabel("predicted", fontsize=8)
    sigma = meta.get("sigma_n")
    sig = f", σₙ = {100 * sigma:.1f} %" if sigma else ""
    ax.set_title(
        f"{meta.get('device')}: {len(meas)} held-out networks\n"
        f"RMSE {np.sqrt(np.mean((pred - meas) ** 2)):.3g}, {100 * np.mean(rel <= 0.1):.1f} % within ±10 %{sig}",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper left")
    ax.set_aspect("equal", adjustable="box")
    verdict = (meta.get("adequacy") or {}).get("verdict")
    if verdict == "width_unresolved":  # every width costs about the same on this device (launch-bound, too small)
        ax.text(0.5, 0.02, "WIDTHS UNRESOLVED: the device's latency barely depends on the widths", transform=ax.transAxes,
                ha="center", va="bottom", fontsize=8, color="tab:red", weight="bold")
    elif verdict == "too_noisy":
        _noisy_banner(ax)
    elif verdict == "model_limited":  # quiet timings, but the table errs beyond them
        a = meta["adequacy"]
        ax.text(0.5, 0.02, f"table error beyond the noise: 95 % of networks within "
                f"{100 * (a['ratio_low'] - 1):+.1f} … {100 * (a['ratio_high'] - 1):+.1f} %",
                transform=ax.transAxes, ha="center", va="bottom", fontsize=8, color="tab:red")
    return fig


def _noisy_banner(ax, corner: bool = False) -> None:
    """Mark a plot whose timings failed the noise gate (D27): along the bottom, or (`corner`) in the upper left."""
    where = dict(x=0.02, y=0.98, ha="left", va="top") if corner else dict(x=0.5, y=0.02, ha="center", va="bottom")
    ax.text(s="DEVICE TOO NOISY: timings failed" + ("\n" if corner else " ") + "the noise gate", transform=ax.transAxes,
            fontsize=8, color="tab:red", weight="bold", **where)


def pareto_front(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> Figure:
    """Retrained top-1 against measured latency, one series per method, targets marked (Fig. pareto)."""
    plt = _plt()
    unit = meta.get("unit", "ms")
    fig, ax = plt.subplots(figsize=(5.6, 4.2))
    for t in sorted({r["target_ms"] for r in rows}):
        ax.axvline(t, color="0.6", lw=0.8, ls="--", zorder=0)
    for m, rs in _by_method(rows):
        x = np.array([r["measured_ms"] for r in rs])
        y = np.array([100 * r["test_acc"] for r in rs])
        xerr = np.array([[r["measured_ms"] - r["measured_ms_min"] for r in rs], [r["measured_ms_max"] - r["measured_ms"] for r in rs]])
        yerr = np.array([[100 * (r["test_acc"] - r["test_acc_low"]) for r in rs], [100 * (r["test_acc_high"] - r["test_acc"]) for r in rs]])
        ax.errorbar(x, y, xerr=np.clip(xerr, 0, None), yerr=np.clip(yerr, 0, None), color=COLORS.get(m), marker=MARKERS.get(m, "o"),
                    ms=5, lw=1.2, capsize=2, label=m)
    seeds = max(r["seeds"] for r in rows)
    what = "95 % Wilson interval" if seeds == 1 else f"95 % interval over {seeds} seeds"
    ax.set_xlabel(f"measured latency on {meta.get('device')} ({unit}; dashed: targets)", fontsize=8)
    ax.set_ylabel(f"test top-1 (%), {what}", fontsize=8)
    ax.set_title(f"{meta.get('device')}: retrained finalists; targets met (measured) "
                 f"{meta.get('targets_met_measured')}/{meta.get('n')}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    if any(r["too_noisy"] for r in rows):  # upper left: clear of the legend, and faster-and-better has no networks
        _noisy_banner(ax, corner=True)
    return fig


def predicted_vs_measured(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> Figure:
    """Each finalist's LUT-predicted latency against its measured (corrected) latency, with its target."""
    plt = _plt()
    unit = meta.get("unit", "ms")
    fig, ax = plt.subplots(figsize=(4.6, 4.4))
    vals = [v for r in rows for v in (r["predicted_ms"], r["measured_ms_min"], r["measured_ms_max"], r["target_ms"])]
    grid = np.linspace(min(vals) * 0.9, max(vals) * 1.1, 2)
    ax.fill_between(grid, grid * 0.9, grid * 1.1, color="0.9", label="±10 %")
    ax.plot(grid, grid, color="k", lw=1)
    for m, rs in _by_method(rows):
        ax.errorbar([r["measured_ms"] for r in rs], [r["predicted_ms"] for r in rs],
                    xerr=np.clip([[r["measured_ms"] - r["measured_ms_min"] for r in rs],
                                  [r["measured_ms_max"] - r["measured_ms"] for r in rs]], 0, None),
                    ls="none", marker=MARKERS.get(m, "o"), color=COLORS.get(m), ms=5, capsize=2, label=m)
    ax.scatter([r["target_ms"] for r in rows], [r["target_ms"] for r in rows], marker="x", color="k", s=20, label="targets")
    met = sum(r["meets_target_measured"] for r in rows)
    ax.set_title(f"{meta.get('device')}: {met}/{len(rows)} finalists meet their target measured", fontsize=9)
    ax.set_xlabel(f"measured, corrected to the LUT's reference ({unit})", fontsize=8)
    ax.set_ylabel(f"predicted by the LUT ({unit})", fontsize=8)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_aspect("equal", adjustable="box")
    return fig


def configurations(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> Figure:
    """Found widths per layer relative to the base network, per target and method (Fig. found configurations)."""
    plt = _plt()
    targets = sorted({r["target"] for r in rows})
    fig, axes = plt.subplots(len(targets), 1, figsize=(6.4, 1.9 * len(targets) + 0.4), sharex=True, squeeze=False)
    for ax, t in zip(axes[:, 0], targets):
        rs = [r for r in rows if r["target"] == t]
        methods = list(dict.fromkeys(r["method"] for r in rs))
        width = 0.8 / max(len(methods), 1)
        for k, m in enumerate(methods):
            pts = sorted((r["layer"], r["ratio"]) for r in rs if r["method"] == m)
            x = np.array([p[0] for p in pts]) + (k - (len(methods) - 1) / 2) * width
            ax.bar(x, [p[1] for p in pts], width=width, color=COLORS.get(m), label=m)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_ylabel(f"{t}\nwidth ÷ base", fontsize=7)
        ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7, ncol=4, loc="upper left")
    roles = meta.get("layer_roles")
    if roles and "inner" in roles:  # a residual space: stream widths (tied across a stage's blocks), inner ones (D44)
        ax = axes[-1, 0]
        ax.set_xticks(range(len(roles)), [f"{i}{'s' if r == 'stream' else 'i'}" for i, r in enumerate(roles)], fontsize=6)
        ax.set_xlabel("searchable width (s: a stage's stream, tied across its blocks; i: a block's inner width)", fontsize=8)
    else:
        axes[-1, 0].set_xlabel("layer", fontsize=8)
    axes[0, 0].set_title(f"{meta.get('device')}: found channel configurations (1 = the base network's width)", fontsize=9)
    return fig


def training_curves(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> Figure:
    """Supernet training: per-epoch losses of the max, min and sampled configurations, and AOWS temperature."""
    plt = _plt()
    from matplotlib.lines import Line2D

    runs = list(dict.fromkeys(r["run"] for r in rows))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    cmap = plt.get_cmap("tab10")
    styles = {"loss_max": ("-", "o", "max configuration"), "loss_min": ("--", "v", "min configuration"),
              "loss_random": (":", ".", "sampled configurations")}
    for k, run in enumerate(runs):
        rs = sorted((r for r in rows if r["run"] == run), key=lambda r: r["epoch"])
        e = [r["epoch"] + 1 for r in rs]
        for col, (ls, mk, _) in styles.items():
            a1.plot(e, [r[col] for r in rs], color=cmap(k % 10), ls=ls, marker=mk, ms=3)
        temps = [(x, r["temperature"]) for x, r in zip(e, rs) if r["temperature"] is not None and np.isfinite(r["temperature"])]
        if temps:
            a2.plot(*zip(*temps), color=cmap(k % 10), marker="o", ms=3, label=run)
    handles = [Line2D([], [], color=cmap(k % 10), label=run) for k, run in enumerate(runs)]
    handles += [Line2D([], [], color="k", ls=ls, marker=mk, ms=3, label=lab) for ls, mk, lab in styles.values()]
    a1.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    a1.set_xlabel("epoch", fontsize=8)
    a1.set_ylabel("training loss", fontsize=8)
    a2.set_xlabel("epoch", fontsize=8)
    a2.set_ylabel("AOWS sampling temperature T", fontsize=8)
    if a2.lines:
        a2.set_yscale("log")
    fig.suptitle("supernet training (OWS: uniform sampling; AOWS: adaptive after the warm-up)", fontsize=9)
    fig.subplots_adjust(wspace=0.75)
    return fig


def proxy_check(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> Figure:
    """Assumption 1 (§3, Fig. proxy_compare): supernet proxies against retrained accuracy, with Kendall τ."""
    plt = _plt()
    proxies = list(dict.fromkeys(r["proxy"] for r in rows))
    fig, axes = plt.subplots(1, len(proxies), figsize=(4.2 * len(proxies), 3.8), squeeze=False)
    labels = {"-sum_delta": "−Σδ (OWS unaries)", "supernet_acc": "supernet top-1, BN recalibrated",
              "mmacs": "MMAC (the size baseline: bigger is better)"}
    for ax, p in zip(axes[0], proxies):
        rs = [r for r in rows if r["proxy"] == p]
        for m, sub in _by_method(rs, key="score"):
            ax.scatter([r["score"] for r in sub], [100 * r["test_acc"] for r in sub], color=COLORS.get(m),
                       marker=MARKERS.get(m, "o"), label=m)
        tau = rs[0]["kendall_tau"]
        within = (meta.get("ranking") or {}).get("proxies", {}).get(p, {}).get("kendall_tau_within")
        ax.set_title(f"Kendall τ = {tau:.2f} over {rs[0]['n']} finalists"
                     + (f"; within targets {within:.2f}" if within is not None else ""), fontsize=9)
        ax.set_xlabel(labels.get(p, p), fontsize=8)
        ax.set_ylabel("retrained test top-1 (%)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    ceiling = (meta.get("ranking") or {}).get("tau_ceiling")
    if ceiling:
        fig.suptitle(f"retrained ranking reproduces at τ {meta['ranking']['retest_tau']['median']:.2f}; a proxy equal "
                     f"to the true accuracy would reach τ {ceiling['median']:.2f} "
                     f"[{ceiling['low']:.2f}, {ceiling['high']:.2f}] (D35)", fontsize=9)
        fig.tight_layout()
    return fig


def summary_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The results table as Markdown (for the log and the README)."""
    unit = rows[0]["unit"] if rows else "ms"
    head = (f"| target | method | target [{unit}] | predicted | measured (corrected) | meets (pred / meas) | "
            f"test top-1 [95 % CI] | Σδ | supernet top-1 |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    if any(r["too_noisy"] for r in rows):
        lines = ["**Measured on a device too noisy for its latency table (noise gate, docs/method.md D27): rows "
                 "marked ⚠ are not trustworthy; see the measure file's noise_message.**", "", head]
    order = {m: i for i, m in enumerate(METHODS)}
    for r in sorted(rows, key=lambda r: (r["target_ms"], order.get(r["method"], 9))):
        lines.append(
            f"| {r['target']} | {r['method']} | {r['target_ms']:.3g} | {r['predicted_ms']:.3g} | "
            f"{r['measured_ms']:.3g} [{r['measured_ms_min']:.3g}–{r['measured_ms_max']:.3g}]{' ⚠' if r['too_noisy'] else ''} | "
            f"{'✓' if r['meets_target_predicted'] else '✗'} / {'✓' if r['meets_target_measured'] else '✗'} | "
            f"{100 * r['test_acc']:.2f} % [{100 * r['test_acc_low']:.2f}, {100 * r['test_acc_high']:.2f}] | "
            f"{r['sum_delta']:.3f} | {100 * r['supernet_acc']:.1f} % |")
    return "\n".join(lines)
