"""`aows proxy`: supernet proxies of a device's finalists, Σδ and BN-recalibrated accuracy (§3).

With greedy.processes = N > 1 the command relaunches itself under torchrun (`launch`, docs/method.md D30)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Mapping

from . import add_config

if TYPE_CHECKING:
    from ..config import Settings
    from ..training.accelerator import Accelerator

COMMAND = "proxy"
# malloc keeps what a pass frees: it scores with torch (docs/method.md D51).
KEEPS_FREED_MEMORY = True
HELP = "supernet proxies of a device's finalists: Σδ and BN-recalibrated accuracy (§3)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("decisions", "unaries", "model")
OUTPUTS = ("out",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--decisions", nargs="+", required=True, help="the finalists' decisions parquet files")
    p.add_argument("--unaries", required=True, help="the OWS supernet's unaries.parquet")
    p.add_argument("--model", required=True, help="the OWS supernet's model.pt")
    p.add_argument("--out", required=True)


def launch(config: Mapping[str, Any], args: argparse.Namespace) -> bool:
    """With greedy.processes = N > 1 outside torchrun: run this command as N processes; True if it did."""
    from ._supernet import launch_scoring

    return launch_scoring(COMMAND, config, args, ("device", "decisions", "unaries", "model", "out"))


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *,
        device: str) -> list[dict[str, Any]]:
    """Σδ under the OWS unaries (§5, eq. average_error) and BN-recalibrated OWS-supernet accuracy of every finalist (D25),
    scored on `train.device` in `train.precision` (D29); under torchrun each process scores its share of the
    images and rank 0 writes."""
    from ..config import resolve
    from ..training.distributed import process_group

    settings = resolve(config)
    with process_group(int(settings.greedy.processes), str(settings.train.device), "greedy.processes",
                       deterministic=bool(settings.train.deterministic)) as ddp:
        return _run(settings, inputs, outputs, ddp, device=device)


def _run(settings: Settings, inputs: Mapping[str, Any], outputs: Mapping[str, Any], ddp: Any, *,
         device: str) -> list[dict[str, Any]]:
    """`run` in this process's place of the (data-parallel) scoring `ddp`."""
    from .. import artifacts
    from ..search.decisions import sum_delta
    from ..training.accelerator import accelerator
    from ._supernet import supernet_scorer

    unaries, model = inputs["unaries"], inputs["model"]
    space = settings.space
    u, _, epoch = artifacts.read_unaries(unaries, space)
    finalists = artifacts.read_decisions(inputs["decisions"], space, device)
    d = settings.data
    accel = accelerator(settings.train, ddp.device)
    scorer = supernet_scorer(settings, model, accel, n_eval=int(d.search_val), n_cal=int(d.calibration), ddp=ddp)
    distinct = list(dict.fromkeys(tuple(int(c) for c in r["channels"]) for r in finalists))
    with accel.autocast():  # batched on CUDA, one at a time on the CPU (scorer.batched)
        scored = {ch: s[0] for ch, s in zip(distinct, scorer.score_many(distinct))}
    rows, n = [], scorer.n
    for r in finalists:
        ch = tuple(int(c) for c in r["channels"])
        rows.append({"method": r["method"], "device": device, "target": r["target"], "channels": list(ch),
                     "sum_delta": sum_delta(u, space.indices(ch)), "supernet_errors": scored[ch], "supernet_n": n,
                     "supernet_acc": 1.0 - scored[ch] / n})
    check = unaries_check(space, u, scorer, settings.seed, accel)  # every rank scores its share
    if not ddp.main:  # rank 0 writes
        return rows
    meta = artifacts.provenance(space, device, unaries=str(unaries), unaries_epoch=epoch, supernet=str(model),
                                n_eval=n, n_cal=len(scorer.cal), unaries_check=check, processes=ddp.world,
                                train={**settings.train.to_dict(), "resolved_device": str(accel.device)},
                                score="top-1 on the search-validation images, BN recalibrated on the calibration images")
    artifacts.write_records(rows, outputs["out"], "proxy", meta)
    return rows


def unaries_check(space, u, scorer, seed: int, accel: Accelerator) -> dict[str, Any]:
    """Does Σδ explain the supernet? Spearman between Σδ and the BN-recalibrated cross-entropy of SUM_DELTA_CHECKS random
    configurations (a seeded stream no training or estimation pass draws from), on the search-validation images."""
    import numpy as np
    from scipy.stats import spearmanr

    from ..search.decisions import SUM_DELTA_CHECKS, check_configs, sum_delta

    idx = check_configs(space, seed)
    n = scorer.n
    with accel.autocast():
        ce = [s[1] / n for s in scorer.score_many([space.layer_channels(i) for i in idx])]
    sd = [sum_delta(u, np.r_[0, i, 0]) for i in idx]
    rho = spearmanr(sd, ce)
    return {"n_configs": SUM_DELTA_CHECKS, "spearman_sum_delta_vs_supernet_ce": float(rho.statistic),
            "p_value": float(rho.pvalue), "loss": "cross-entropy on the search-validation images, BN recalibrated"}


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"wrote {args.out}: {len(rows)} finalists")
