"""Parquet artifacts: the schema of their kind, provenance metadata, atomic writes, and `aows inspect`."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..space import SearchSpace
from .atomic import atomic_write
from .schemas import META_KEY, SCHEMAS


class ArtifactError(ValueError):
    """An artifact that is missing, corrupt, of the wrong kind, or from another space or device."""


_UNSET: Any = object()


def provenance(space: SearchSpace | Any = _UNSET, device: str | None | Any = _UNSET, **extra: Any) -> dict[str, Any]:
    """Metadata every artifact carries: aows's version, Python, host platform, plus `extra`.

    `space=` a SearchSpace adds its `space_name` and `space_hash`; any other value of `space` (e.g.
    `space.to_dict()`) is kept under the key "space", and `device=` under "device", as before.
    """
    keys: dict[str, Any] = {}
    if isinstance(space, SearchSpace):
        keys.update(space_name=space.name, space_hash=space.hash)
    elif space is not _UNSET:
        keys["space"] = space
    if device is not _UNSET:
        keys["device"] = device
    return {"aows_version": __version__, "python": platform.python_version(), "platform": platform.platform(),
            **keys, **extra}


def write_table(table: pa.Table, path: str | os.PathLike, kind: str, meta: Mapping[str, Any]) -> None:
    """Write `table` (cast to the `kind` schema) with JSON metadata; atomic: temp file then rename."""
    schema = SCHEMAS[kind]
    table = table.select(schema.names).cast(schema)
    full_meta = {"kind": kind, **meta}
    table = table.replace_schema_metadata({META_KEY: json.dumps(full_meta, sort_keys=True, default=str).encode()})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def write_records(records: Mapping[str, list] | list[dict], path: str | os.PathLike, kind: str, meta: Mapping[str, Any]) -> None:
    """Write python records (dict of columns or list of rows) under the `kind` schema."""
    schema = SCHEMAS[kind]
    if isinstance(records, list):
        table = pa.Table.from_pylist(records, schema=schema)
    else:
        table = pa.Table.from_pydict(dict(records), schema=schema)
    write_table(table, path, kind, meta)


def read_table(path: str | os.PathLike, kind: str | None = None) -> tuple[pa.Table, dict[str, Any]]:
    """Read an artifact and its metadata; a clear error if missing, corrupt or of another kind."""
    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path}: no such file; run the stage that produces it first")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"PAR1":
        raise ArtifactError(f"{path}: not a parquet file{f' (expected a {kind!r} artifact)' if kind else ''}; "
                            f"pass the file the aows stage wrote (results/**/*.parquet)")
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise ArtifactError(f"{path}: not a readable parquet file ({e}); delete it and rerun the stage that produced it") from e
    raw = (table.schema.metadata or {}).get(META_KEY)
    meta = json.loads(raw) if raw else {}
    if kind is not None:
        if meta.get("kind") != kind:
            raise ArtifactError(f"{path}: expected a {kind!r} artifact, found {meta.get('kind')!r}")
        expected = SCHEMAS[kind]
        missing = [n for n in expected.names if n not in table.schema.names]
        if missing:
            raise ArtifactError(f"{path}: {kind} artifact lacks columns {missing}; it is from another aows version or corrupt")
    return table, meta


def inspect(path: str | os.PathLike, rows: int = 5) -> str:
    """Human-readable schema, provenance metadata and first rows of any artifact."""
    table, meta = read_table(path)
    import pandas as pd

    with pd.option_context("display.width", 160, "display.max_columns", 30, "display.max_colwidth", 60):
        head = table.slice(0, rows).to_pandas().to_string()
    return "\n".join(
        [
            f"# {path}: {meta.get('kind', 'unknown kind')}, {table.num_rows} rows",
            "## schema",
            str(table.schema.remove_metadata()),
            "## metadata",
            json.dumps(meta, indent=2, sort_keys=True, default=str),
            f"## first {min(rows, table.num_rows)} rows",
            head,
        ]
    )


def notice(message: str) -> None:
    """A message for the person running the stage (stderr, which the rules' logs keep)."""
    print(f"aows: {message}", file=sys.stderr, flush=True)


def check_writable(paths: list[str | os.PathLike], folders: list[str | os.PathLike] = ()) -> None:
    """Refuse, before any work, output files (or folders) that could not be written."""
    for p, is_dir in [(Path(p), False) for p in paths] + [(Path(f), True) for f in folders]:
        where = p if is_dir else p.parent
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise PermissionError(f"cannot create the folder {where} for {p} ({e.strerror}); run where you can "
                                  f"write, or fix the permissions of its parent") from e
        if not os.access(where, os.W_OK | os.X_OK):
            raise PermissionError(f"cannot write {p}: the folder {where} is not writable; fix its permissions "
                                  f"(e.g. `chmod u+w {where}`) or run where you can write")
