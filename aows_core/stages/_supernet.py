"""The OWS supernet loaded for scoring sub-networks, shared by `aows greedy` and `aows proxy` (§3)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from ..nets.scoring import SubnetScorer
    from ..space import SearchSpace
    from ..training.accelerator import Accelerator


def supernet_scorer(config: Mapping[str, Any], model_path: str | os.PathLike, space: SearchSpace, accel: Accelerator,
                    *, n_eval: int, n_cal: int, batch_size: int) -> SubnetScorer:
    """A scorer of the supernet in `model_path` on `accel`'s device: top-1 errors on the first `n_eval`
    search-validation images, BN recalibrated on the first `n_cal` calibration images (D22). Score under
    `accel.autocast()` (D29)."""
    import torch

    from .. import artifacts
    from ..config import data_spec
    from ..data import check_dataset, first_images, load_splits
    from ..nets.scoring import SubnetScorer
    from ..nets.slimmable import SlimmableMobileNetV1

    torch.set_num_threads(int(config["supernet"]["threads"]))
    model = SlimmableMobileNetV1(space, channels_last=bool(config["supernet"]["channels_last"]))
    model.load_state_dict(artifacts.read_supernet_state(model_path, space))
    model.to(accel.device)
    splits = load_splits(data_spec(config))
    check_dataset(splits.info, space)
    x_eval, y_eval = first_images(splits.search_val_batches(batch_size), n_eval)
    cal, _ = first_images(splits.calibration_batches(batch_size), n_cal)
    d = accel.device
    return SubnetScorer(model, cal.to(d), x_eval.to(d), y_eval.to(d), batch_size)
