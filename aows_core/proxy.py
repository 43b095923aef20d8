"""The proxy check of assumption 1 (§3, Fig. proxy_compare): supernet scores of every finalist.

For each finalist of a device, two proxies of its retrained accuracy computed from the OWS supernet:
Σδ, its summed OWS unaries (eq. unaries: the loss increase a configuration is predicted to cost,
lower is better), and its top-1 accuracy as a sub-network of the supernet with BatchNorm statistics
recalibrated on calibration images (the score the greedy baseline uses). The plot stage ranks them
against retrained accuracy (Kendall τ).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import torch

from . import io

io.SCHEMAS.setdefault(
    "proxy",
    pa.schema(
        [
            ("method", pa.string()),
            ("device", pa.string()),
            ("target", pa.string()),
            ("channels", io.CHANNELS),
            ("sum_delta", pa.float64()),
            ("supernet_errors", pa.int64()),
            ("supernet_n", pa.int64()),
            ("supernet_acc", pa.float64()),
        ]
    ),
)


def sum_delta(unaries: Sequence[np.ndarray], idx: np.ndarray) -> float:
    """Σ_i δ_i(c_i) of a configuration's node indices (§5 eq. unaries; NaN if a width was never visited)."""
    return float(sum(u[int(k)] for u, k in zip(unaries, idx)))


def proxy_scores(config: Mapping[str, Any], device: str, decisions: Sequence[str | os.PathLike],
                 unaries: str | os.PathLike, model: str | os.PathLike, out: str | os.PathLike) -> list[dict[str, Any]]:
    """Stage: Σδ under the OWS unaries and BN-recalibrated OWS-supernet accuracy of every finalist."""
    from .config import space_from_config
    from .data import check_space, load
    from .decode import read_decisions, read_unaries
    from .greedy import GreedyScorer, first_images, load_model_state
    from .supernet import SlimmableMobileNetV1
    from .train import data_spec

    space = space_from_config(config)
    u, _, epoch = read_unaries(unaries, space)
    finalists = read_decisions(decisions, space, device)

    torch.set_num_threads(int(config["supernet"]["threads"]))
    net = SlimmableMobileNetV1(space, channels_last=bool(config["supernet"]["channels_last"]))
    net.load_state_dict(load_model_state(model, space))
    d, bs = config["data"], int(config["greedy"]["batch_size"])
    splits = load(data_spec(config))
    check_space(splits.info, space)
    x_eval, y_eval = first_images(splits.search_val_batches(bs), int(d["search_val"]))
    cal, _ = first_images(splits.calibration_batches(bs), int(d["calibration"]))
    scorer = GreedyScorer(net, cal, x_eval, y_eval, bs)
    scored: dict[tuple[int, ...], int] = {}
    rows, n = [], len(y_eval)
    for r in finalists:
        ch = tuple(int(c) for c in r["channels"])
        if ch not in scored:
            scored[ch] = scorer.score(ch)[0]
        rows.append({"method": r["method"], "device": device, "target": r["target"], "channels": list(ch),
                     "sum_delta": sum_delta(u, space.indices(ch)), "supernet_errors": scored[ch], "supernet_n": n,
                     "supernet_acc": 1.0 - scored[ch] / n})
    meta = io.provenance(space_name=space.name, space_hash=space.hash, device=device, unaries=str(unaries),
                         unaries_epoch=epoch, supernet=str(model), n_eval=len(y_eval), n_cal=len(cal),
                         score="top-1 on the search-validation images, BN recalibrated on the calibration images")
    io.write_records(rows, out, "proxy", meta)
    return rows
