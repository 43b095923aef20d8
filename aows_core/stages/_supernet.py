"""The OWS supernet loaded for scoring sub-networks, shared by `aows greedy` and `aows proxy` (§3).

With greedy.processes = N > 1 both commands relaunch themselves under torchrun; each process scores 1/N of the
evaluation images and the counts are summed (`nets.scoring.SubnetScorer`, docs/method.md D30)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from ..config import Settings
    from ..nets.scoring import SubnetScorer
    from ..training.accelerator import Accelerator
    from ..training.distributed import Dist


def launch_scoring(command: str, config: Mapping[str, Any], args: argparse.Namespace, dests: Sequence[str]) -> bool:
    """With greedy.processes = N > 1 outside torchrun: run `command` as N processes of greedy.threads threads each;
    True if it did."""
    from ..config import GreedySettings
    from . import forward_options, torchrun

    greedy = GreedySettings.from_mapping(config["greedy"])  # the launcher needs no space
    n = int(greedy.processes)
    if not (n > 1 and "RANK" not in os.environ):
        return False
    torchrun(command, config, forward_options(args, dests), n, int(greedy.threads))
    return True


def supernet_scorer(settings: Settings, model_path: str | os.PathLike, accel: Accelerator, *, n_eval: int, n_cal: int,
                    ddp: Dist | None = None) -> SubnetScorer:
    """A scorer of the supernet in `model_path` on `accel`'s device: top-1 errors on the first `n_eval`
    search-validation images, BN recalibrated on the first `n_cal` calibration images (D22), in batches of
    `greedy.batch_size`, with `greedy.threads` threads. Score under
    `accel.autocast()` (D29). Under `ddp` (world N) this process holds every N-th evaluation image and all the
    calibration images; scores are summed over the processes."""
    import torch

    from .. import artifacts
    from ..data import check_dataset, first_images, load_splits
    from ..nets.scoring import SubnetScorer
    from ..nets.supernet import Supernet
    from ..training.distributed import float_sum

    space, batch_size = settings.space, int(settings.greedy.batch_size)
    torch.set_num_threads(int(settings.greedy.threads))
    model = Supernet(space, channels_last=bool(settings.supernet.channels_last))
    model.load_state_dict(artifacts.read_supernet_state(model_path, space))
    model.to(accel.device)
    splits = load_splits(settings.data_spec())
    check_dataset(splits.info, space)
    x_eval, y_eval = first_images(splits.search_val_batches(batch_size), n_eval)
    cal, _ = first_images(splits.calibration_batches(batch_size), n_cal)
    if ddp is not None and ddp.world > 1:
        x_eval, y_eval = x_eval[ddp.rank :: ddp.world].contiguous(), y_eval[ddp.rank :: ddp.world]
    d = accel.device
    return SubnetScorer(model, cal.to(d), x_eval.to(d), y_eval.to(d), batch_size,
                        reduce=None if ddp is None else float_sum(ddp))
