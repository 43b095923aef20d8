"""The one resumable epoch/step loop shared by supernet training and retraining.

Every random choice of step k of epoch e derives from (seed, e, k) (data order, augmentation,
configurations), so a run stopped after any step and resumed from its last checkpoint ends exactly
where an uninterrupted run ends (docs/method.md, D9). Per step: `step(x, y)`, position + 1, the
progress bar; then a checkpoint every `checkpoint_every` steps inside the epoch, or the last one
before stopping after `stop_after` steps of this invocation (`>=`: `--stop-after 0` stops after one
step). After an epoch's batches: `end_epoch(epoch)`, next epoch, save.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping


@dataclass
class Position:
    """Where a run stands: `step` steps of epoch `epoch` are done."""

    epoch: int = 0
    step: int = 0


class _NoBar:
    """The progress bar of a run without one."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(enabled: bool, **tqdm_kwargs: Any) -> Any:
    """A tqdm bar, or a no-op bar when `enabled` is false (tqdm is then not imported)."""
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(**tqdm_kwargs)


@dataclass(frozen=True)
class RunControl:
    """How a resumable job runs (the stage's options): where its resume state lives (outside the declared outputs),
    whether it shows a progress bar, and whether it stops after `stop_after` steps of this invocation (resume later)."""

    resume_dir: Path
    progress: bool = True
    stop_after: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "resume_dir", Path(self.resume_dir))


@dataclass(frozen=True)
class Schedule:
    """The loop's extent: `epochs` of `steps` steps, a checkpoint every `checkpoint_every` steps inside an epoch, and
    a stop after `stop_after` steps of this invocation (None: run to the end)."""

    epochs: int
    steps: int
    checkpoint_every: int
    stop_after: int | None = None


@dataclass(frozen=True)
class Hooks:
    """What the loop calls: `batches(epoch, start_step)` yields the (x, y) batches of an epoch from a step on;
    `step(x, y)` trains on one (reading the position for its epoch and step) and returns the bar's postfix;
    `end_epoch(epoch)` after an epoch's batches; `save()` writes the resume checkpoint; `start_epoch(epoch)` runs
    before an epoch's first batch."""

    batches: Callable[[int, int], Iterable]
    step: Callable[[Any, Any], Mapping[str, Any] | None]
    end_epoch: Callable[[int], None]
    save: Callable[[], None]
    start_epoch: Callable[[int], None] | None = None


def run_epochs(pos: Position, schedule: Schedule, hooks: Hooks, bar: Any) -> bool:
    """Run epochs from `pos` to `schedule.epochs`; False if stopped after `stop_after` steps (resume later), True when
    done."""
    done, stop_after = 0, schedule.stop_after
    while pos.epoch < schedule.epochs:
        if hooks.start_epoch is not None:
            hooks.start_epoch(pos.epoch)
        for x, y in hooks.batches(pos.epoch, pos.step):
            postfix = hooks.step(x, y)
            pos.step += 1
            done += 1
            bar.update(1)
            if postfix:
                bar.set_postfix(**postfix)
            stop = stop_after is not None and done >= stop_after
            if (pos.step % schedule.checkpoint_every == 0 and pos.step < schedule.steps) or stop:
                hooks.save()
                if stop:
                    bar.close()
                    return False
        hooks.end_epoch(pos.epoch)
        pos.epoch += 1
        pos.step = 0
        hooks.save()
    bar.close()
    return True
