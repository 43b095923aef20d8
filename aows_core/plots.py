"""Figures, each drawn from a parquet table saved beside it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from . import io


def _save(fig, path: str | os.PathLike) -> None:
    """Save as the requested format (PDF) plus a PNG beside it for the README; atomic."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for target in (path, path.with_suffix(".png")):
        tmp = target.with_name(f".{target.name}.tmp{target.suffix}")
        fig.savefig(tmp, dpi=150, bbox_inches="tight")
        os.replace(tmp, target)


def lut_validation(predictions: str | os.PathLike, out: str | os.PathLike) -> None:
    """Predicted vs measured latency of held-out networks, with the identity line (Fig. latency_correlation)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table, meta = io.read_table(predictions, "lut_predictions")
    meas = table.column("measured_ms").to_numpy()
    pred = table.column("predicted_ms").to_numpy()
    base = table.column("flops_baseline_ms").to_numpy()
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
    _save(fig, out)
    plt.close(fig)
