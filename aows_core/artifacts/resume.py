"""Resume state of a job (a training checkpoint, a profiling journal), kept outside the declared outputs.

A job resumes from `resume_dir/checkpoint.pt` only if the checkpoint carries this job's run id (the
space, settings, method, target or channels; §4.2 of the house plan); any other checkpoint, or one
that does not load, is set aside as `<name>.stale` and the job starts afresh. A finished job clears
its resume state. Files are written and read through `artifacts` (atomic, on the CPU).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .parquet import notice
from .torchfiles import load_torch, save_torch


def set_aside(path: Path, why: str) -> Path:
    """Keep resume state that cannot be resumed from as `<name>.stale` (said on stderr); the job starts afresh."""
    stale = path.with_name(path.name + ".stale")
    try:
        os.replace(path, stale)
    except FileNotFoundError:  # another rank of this run set it aside first
        pass
    notice(f"{path} {why}: kept as {stale}, starting afresh")
    return stale


def load_resume(path: Path, run_id: str) -> dict | None:
    """The resume checkpoint at `path` if it belongs to this run; one from another run (other space, settings,
    method, target or channels) or an unreadable one is set aside as `<name>.stale` and the job starts afresh."""
    if not path.exists():
        return None
    try:
        state = load_torch(path)
        why = None if state.get("run_id") == run_id else "belongs to another run (the space, settings, method, target or channels differ)"
    except Exception as e:  # a checkpoint that does not load cannot be resumed from
        state, why = None, f"cannot be read ({e})"
    if why is None:
        return state
    set_aside(path, f"(a resume checkpoint) {why}")
    return None


def save_resume(state: dict[str, Any], path: Path) -> None:
    """Write the resume state atomically (tensors moved to the CPU)."""
    save_torch(state, path)


def clear_resume(path: Path) -> None:
    """Remove a finished job's resume checkpoint (and a set-aside one), then its folder if that is left empty."""
    for p in (path, path.with_name(path.name + ".stale")):
        p.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass  # not empty, or already gone
