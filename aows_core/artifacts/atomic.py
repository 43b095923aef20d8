"""The one atomic writer: every project file (parquet, json, text, onnx, figures, torch files, the journal).

A file is written to a temporary name beside its target (same folder, so `os.replace` is atomic), with
the mode any new file gets under the umask, optionally fsync'ed, then renamed over the target. A write
that fails or is killed leaves the previous file intact and no temporary file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None], *, fsync: bool = False) -> None:
    """Call `write(tmp)` on a temporary file beside `path`, then rename it over `path` (atomic)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the temporary name keeps the extension: matplotlib and onnx pick the format from it
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    tmp = Path(name)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; an artifact gets the mode any new file gets
    try:
        write(tmp)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def copy_file(src: str | os.PathLike, path: str | os.PathLike) -> None:
    """Copy a file byte for byte, atomically (an artifact that is another's, under a second name)."""
    import shutil

    atomic_write(path, lambda tmp: shutil.copyfile(src, tmp))


def write_text(text: str, path: str | os.PathLike, *, fsync: bool = False) -> None:
    """Write a text file atomically."""
    atomic_write(path, lambda tmp: tmp.write_text(text), fsync=fsync)


def write_json(obj: Any, path: str | os.PathLike, **dumps_kwargs: Any) -> None:
    """Write `json.dumps(obj, **dumps_kwargs)` atomically."""
    write_text(json.dumps(obj, **dumps_kwargs), path)


def save_onnx(proto: Any, path: str | os.PathLike) -> None:
    """Write an ONNX model atomically (onnx imported here only)."""
    import onnx

    atomic_write(path, lambda tmp: onnx.save(proto, str(tmp)))


def save_figure(fig: Any, path: str | os.PathLike) -> None:
    """Save a matplotlib Figure as `path` (PDF) plus a PNG beside it for the README, each atomic; closes it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        for target in (path, path.with_suffix(".png")):
            atomic_write(target, lambda tmp: fig.savefig(tmp, dpi=150, bbox_inches="tight"))
    finally:
        plt.close(fig)
