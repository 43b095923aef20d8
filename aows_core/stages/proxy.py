"""`aows proxy`: supernet proxies of a device's finalists, Σδ and BN-recalibrated accuracy (§3)."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from . import add_config

COMMAND = "proxy"
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


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *,
        device: str) -> list[dict[str, Any]]:
    """Σδ under the OWS unaries (§5, eq. average_error) and BN-recalibrated OWS-supernet accuracy of every finalist (D25)."""
    from .. import artifacts
    from ..config import space_from_config
    from ..search.decisions import sum_delta
    from ._supernet import supernet_scorer

    unaries, model = inputs["unaries"], inputs["model"]
    space = space_from_config(config)
    u, _, epoch = artifacts.read_unaries(unaries, space)
    finalists = artifacts.read_decisions(inputs["decisions"], space, device)
    d = config["data"]
    scorer = supernet_scorer(config, model, space, n_eval=int(d["search_val"]), n_cal=int(d["calibration"]),
                             batch_size=int(config["greedy"]["batch_size"]))
    scored: dict[tuple[int, ...], int] = {}
    rows, n = [], len(scorer.y)
    for r in finalists:
        ch = tuple(int(c) for c in r["channels"])
        if ch not in scored:
            scored[ch] = scorer.score(ch)[0]
        rows.append({"method": r["method"], "device": device, "target": r["target"], "channels": list(ch),
                     "sum_delta": sum_delta(u, space.indices(ch)), "supernet_errors": scored[ch], "supernet_n": n,
                     "supernet_acc": 1.0 - scored[ch] / n})
    meta = artifacts.provenance(space, device, unaries=str(unaries), unaries_epoch=epoch, supernet=str(model),
                                n_eval=n, n_cal=len(scorer.cal),
                                score="top-1 on the search-validation images, BN recalibrated on the calibration images")
    artifacts.write_records(rows, outputs["out"], "proxy", meta)
    return rows


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"wrote {args.out}: {len(rows)} finalists")
