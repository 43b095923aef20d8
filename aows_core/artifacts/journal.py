"""The profiling journal (§4 protocol, resume): finished timing jobs, one JSON line each, outside Snakemake's outputs.

A journal whose header is unreadable, or that was written on another device fingerprint or under other
settings, is set aside as `<name>.stale` (its timings kept, a notice printed) and profiling starts afresh.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .atomic import atomic_write
from .resume import set_aside


class Journal:
    """Append-only JSON-lines record of finished jobs; survives a kill (a torn last line is dropped)."""

    def __init__(self, path: Path, header: dict, sync_every: int):
        self.path = path
        self.sync_every = sync_every
        self.rows: list[dict] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            lines = path.read_text().splitlines()
            try:
                old = json.loads(lines[0]) if lines else {}
            except json.JSONDecodeError:
                old = None
            if old is None or not isinstance(old, dict):
                why = "has an unreadable header"
            elif old.get("fingerprint") != header["fingerprint"]:
                why = (f"holds timings from another device fingerprint ({old.get('fingerprint')}; this machine: "
                       f"{header['fingerprint']}), which cannot be mixed with this machine's")
            elif old.get("plan") != header["plan"]:
                why = "was made under other settings (configurations, protocol or space)"
            else:
                why = None
            if why is None:
                for line in lines[1:]:
                    try:
                        self.rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        break  # torn write at the kill: that job is simply redone
                # keep only a clean prefix of consecutive jobs
                self.rows = [r for i, r in enumerate(self.rows) if r["job"] == i]
            elif len(lines) > 1:
                set_aside(path, f"(a profiling journal of {len(lines) - 1} timings) {why}")
        self._rewrite(header)
        self._fh = open(path, "a")
        self._since_sync = 0

    def _rewrite(self, header: dict) -> None:
        text = "".join(json.dumps(r) + "\n" for r in [header, *self.rows])
        atomic_write(self.path, lambda tmp: tmp.write_text(text), fsync=True)

    def append(self, row: dict) -> None:
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()
        self.rows.append(row)
        self._since_sync += 1
        if self._since_sync >= self.sync_every:
            os.fsync(self._fh.fileno())
            self._since_sync = 0

    def close(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()

    def remove(self) -> None:
        """A finished session's journal (and a set-aside one): its timings are in the latency artifact now."""
        for p in (self.path, self.path.with_name(self.path.name + ".stale")):
            p.unlink(missing_ok=True)
