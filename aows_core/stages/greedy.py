"""`aows greedy`: the AutoSlim greedy trajectory of the OWS supernet (§3); independent of any LUT.

With greedy.processes = N > 1 the command relaunches itself under torchrun (`launch`, docs/method.md D30)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Mapping

from . import add_config

if TYPE_CHECKING:
    from ..config import Settings

COMMAND = "greedy"
# malloc keeps what a pass frees: it scores with torch (docs/method.md D51).
KEEPS_FREED_MEMORY = True
HELP = "the AutoSlim greedy trajectory of the OWS supernet (§3)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("model",)
OUTPUTS = ("out",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--model", required=True, help="the OWS supernet's model.pt")
    p.add_argument("--out", required=True)
    p.add_argument("--quiet", action="store_true")


def launch(config: Mapping[str, Any], args: argparse.Namespace) -> bool:
    """With greedy.processes = N > 1 outside torchrun: run this command as N processes; True if it did."""
    from ._supernet import launch_scoring

    return launch_scoring(COMMAND, config, args, ("model", "out", "quiet"))


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *,
        progress: bool = True) -> list[dict[str, Any]]:
    """Trim the OWS supernet greedily from the max configuration, scoring BN-recalibrated subnets (§3, D22) on
    `train.device` in `train.precision` (D29); under torchrun each process scores its share of the images and
    rank 0 writes."""
    from ..config import resolve
    from ..training.distributed import process_group

    settings = resolve(config)
    with process_group(int(settings.greedy.processes), str(settings.train.device), "greedy.processes",
                       deterministic=bool(settings.train.deterministic)) as ddp:
        return _run(settings, inputs, outputs, ddp, progress=progress)


def _run(settings: Settings, inputs: Mapping[str, Any], outputs: Mapping[str, Any], ddp: Any, *,
         progress: bool) -> list[dict[str, Any]]:
    """`run` in this process's place of the (data-parallel) scoring `ddp`."""
    from .. import artifacts
    from ..search.baselines import greedy_search
    from ..training.accelerator import accelerator
    from ..training.loop import progress_bar
    from ._supernet import supernet_scorer

    model_path = inputs["model"]
    space, g = settings.space, settings.greedy
    accel = accelerator(settings.train, ddp.device)
    scorer = supernet_scorer(settings, model_path, accel, n_eval=int(g.n_eval), n_cal=int(g.n_cal), ddp=ddp)
    bar = progress_bar(progress and ddp.main, total=sum(len(c) - 1 for c in space.layer_choices), desc="greedy",
                       unit="step")

    def on_step(row: dict[str, Any]) -> None:
        bar.update(1)
        bar.set_postfix(err=f"{row['error']:.3f}")

    try:
        with accel.autocast():
            rows = greedy_search(scorer, on_step=on_step)
    finally:
        bar.close()
    if not ddp.main:  # rank 0 writes
        return rows
    meta = artifacts.provenance(space, seed=settings.seed, n_eval=scorer.n, n_cal=int(g.n_cal), processes=ddp.world,
                                supernet=str(model_path), ranks_widths=ranks_widths(rows),
                                score="top-1 errors on the search-validation images, ties by summed cross-entropy",
                                bn="recalibrated per candidate: exact statistics of the calibration images",
                                train={**settings.train.to_dict(), "resolved_device": str(accel.device)})
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
