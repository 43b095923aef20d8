"""`aows greedy`: the AutoSlim greedy trajectory of the OWS supernet (§3); independent of any LUT."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from . import add_config

COMMAND = "greedy"
HELP = "the AutoSlim greedy trajectory of the OWS supernet (§3)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("model",)
OUTPUTS = ("out",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--model", required=True, help="the OWS supernet's model.pt")
    p.add_argument("--out", required=True)
    p.add_argument("--quiet", action="store_true")


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *,
        progress: bool = True) -> list[dict[str, Any]]:
    """Trim the OWS supernet greedily from the max configuration, scoring BN-recalibrated subnets (§3, D22) on
    `train.device` in `train.precision` (D29)."""
    from .. import artifacts
    from ..config import space_from_config
    from ..search.baselines import greedy_search
    from ..training.accelerator import accelerator
    from ..training.loop import progress_bar
    from ._supernet import supernet_scorer

    model_path = inputs["model"]
    space = space_from_config(config)
    g = config["greedy"]
    accel = accelerator(config)
    scorer = supernet_scorer(config, model_path, space, accel, n_eval=int(g["n_eval"]), n_cal=int(g["n_cal"]),
                             batch_size=int(g["batch_size"]))
    bar = progress_bar(progress, total=sum(len(c) - 1 for c in space.layer_choices), desc="greedy", unit="step")

    def on_step(row: dict[str, Any]) -> None:
        bar.update(1)
        bar.set_postfix(err=f"{row['error']:.3f}")

    try:
        with accel.autocast():
            rows = greedy_search(scorer, on_step=on_step)
    finally:
        bar.close()
    meta = artifacts.provenance(space, seed=config["seed"], n_eval=int(g["n_eval"]), n_cal=int(g["n_cal"]),
                                supernet=str(model_path), ranks_widths=ranks_widths(rows),
                                score="top-1 errors on the search-validation images, ties by summed cross-entropy",
                                bn="recalibrated per candidate: exact statistics of the calibration images",
                                train={**config["train"], "resolved_device": str(accel.device)})
    artifacts.write_records(rows, outputs["out"], "greedy_trajectory", meta)
    return rows


def ranks_widths(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Does the supernet rank widths? Spearman between the trajectory's step and its error (max → min network);
    near 1 when trimming steadily costs accuracy, near 0 or negative when the supernet ranks something else."""
    from scipy.stats import spearmanr

    res = spearmanr([r["step"] for r in rows], [r["error"] for r in rows])
    return {"spearman_step_error": float(res.statistic), "p_value": float(res.pvalue)}


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    rho = ranks_widths(rows)["spearman_step_error"]
    print(f"wrote {args.out}: {len(rows)} points from error {rows[0]['error']:.4f} (max) to {rows[-1]['error']:.4f} "
          f"(min); Spearman(step, error) {rho:.2f}")
