"""Timings disturbed for their latency: reported apart, and left out of the fit only by choice (§4, docs/method.md D43).

A paired job whose chunk ratios spread more than `protocol.local_limits` (3× those of the networks of its latency) was
timed while the host's state changed under it, and the re-timing of D27 kept its less disturbed timing; some stay
disturbed on a host that is busy for minutes. `fit_sets` can leave them out of the train and lambda_val sets
(`lut.exclude_disturbed`, off by default) while every latency variable stays timed; `held_out` tells the test
networks timed calm from those timed disturbed.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..space import SearchSpace
from .lut import design_matrix, observation_counts, set_rows, split_sets
from .protocol import disturbed_mask


def fit_sets(space: SearchSpace, columns: Mapping[str, Sequence],
             lut_cfg: Mapping[str, Any]) -> tuple[dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], dict[str, Any]]:
    """`lut.split_sets` without the disturbed train and lambda_val rows when `lut_cfg["exclude_disturbed"]` and every
    variable stays timed (else with them, and why), and what was left out: (sets, info)."""
    disturbed, limit = disturbed_mask(columns)
    counts = {name: int(disturbed[set_rows(columns, name)].sum()) for name in ("train", "lambda_val")}
    info: dict[str, Any] = {"disturbed_limit": limit if np.isfinite(limit) else None, "disturbed": counts,
                            "excluded": {"train": 0, "lambda_val": 0}, "kept_because": None}
    if not lut_cfg["exclude_disturbed"] or not any(counts.values()):
        return split_sets(space, columns), info
    fitted = np.zeros_like(disturbed)
    for name in ("train", "lambda_val"):
        fitted[set_rows(columns, name)] = True
    calm = split_sets(space, columns, exclude=disturbed & fitted)  # the test networks stay: they judge (held_out)
    idx_tr, l_val = calm["train"][0], calm["lambda_val"][1]
    if len(l_val) == 0 or not np.all(observation_counts(design_matrix(space, idx_tr)) > 0):
        info["kept_because"] = ("without them some latency variable has no calm timing left, or no lambda_val "
                                "network does")
        return split_sets(space, columns), info
    info["excluded"] = counts
    return calm, info


def held_out(columns: Mapping[str, Sequence]) -> tuple[np.ndarray, float]:
    """Per test network, in `split_sets` order: was its timing disturbed? With the session's limit."""
    disturbed, limit = disturbed_mask(columns)
    return disturbed[set_rows(columns, "test")], limit


def exclusion_note(info: Mapping[str, Any]) -> str:
    """One line on the disturbed timings of a fit (D43)."""
    n = info["disturbed"]
    if not any(n.values()):
        return "no training or lambda_val timing was disturbed"
    what = f"{n['train']} training and {n['lambda_val']} lambda_val timings were disturbed (chunk ratios spread " \
           f"> 3× those of the networks of their latency, median limit {100 * info['disturbed_limit']:.1f} %)"
    if any(info["excluded"].values()):
        return f"{what}: left out of the fit (docs/method.md D43)"
    return f"{what}: kept, " + (info["kept_because"] or "lut.exclude_disturbed is false")
