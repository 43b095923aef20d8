"""The shared resumable loop and the resume checkpoint: call order, stop/resume, stale state set aside."""

import torch

from aows_core.artifacts.resume import clear_resume, load_resume, save_resume
from aows_core.training.loop import Hooks, Position, Schedule, progress_bar, run_epochs


def _run(pos, log, stop_after=None, epochs=2, steps=5, every=2):
    def batches(epoch, start):
        return [(epoch, k) for k in range(start, steps)]

    def step(x, y):
        log.append(("step", pos.epoch, pos.step, x, y))
        return {"s": str(pos.step)}

    hooks = Hooks(batches=batches, step=step, end_epoch=lambda e: log.append(("end", e)),
                  save=lambda: log.append(("save", pos.epoch, pos.step)), start_epoch=lambda e: log.append(("start", e)))
    return run_epochs(pos, Schedule(epochs, steps, every, stop_after), hooks, progress_bar(False))


def test_a_stopped_and_resumed_loop_takes_the_uninterrupted_steps():
    full: list = []
    assert _run(Position(), full) is True
    steps = [e for e in full if e[0] == "step"]
    assert [(e[1], e[2]) for e in steps] == [(e, k) for e in range(2) for k in range(5)]
    # checkpoints inside an epoch at multiples of `every` (not at its end), then one after each epoch
    assert [e for e in full if e[0] == "save"] == [("save", 0, 2), ("save", 0, 4), ("save", 1, 0),
                                                   ("save", 1, 2), ("save", 1, 4), ("save", 2, 0)]
    assert full.index(("end", 0)) < full.index(("save", 1, 0))
    pos, part = Position(), []
    assert _run(pos, part, stop_after=3) is False and (pos.epoch, pos.step) == (0, 3) and part[-1] == ("save", 0, 3)
    rest: list = []
    assert _run(Position(pos.epoch, pos.step), rest) is True
    assert [e for e in part + rest if e[0] == "step"] == steps


def test_stop_after_zero_stops_after_one_step():
    log: list = []
    assert _run(Position(), log, stop_after=0) is False
    assert sum(e[0] == "step" for e in log) == 1


def test_a_checkpoint_of_another_run_is_set_aside_and_a_finished_job_clears_it(tmp_path, capfd):
    path = tmp_path / "resume" / "checkpoint.pt"
    assert load_resume(path, "a") is None
    save_resume({"run_id": "a", "w": torch.ones(2)}, path)
    assert torch.equal(load_resume(path, "a")["w"], torch.ones(2))
    assert load_resume(path, "b") is None and not path.exists()
    assert path.with_name("checkpoint.pt.stale").exists() and "starting afresh" in capfd.readouterr().err
    path.write_bytes(b"not a checkpoint")
    assert load_resume(path, "a") is None and "cannot be read" in capfd.readouterr().err
    clear_resume(path)
    assert not path.parent.exists()
