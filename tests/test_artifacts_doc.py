"""docs/artifacts.md is what scripts/artifacts_doc.py prints from the artifact schemas, and what it says exists."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("artifacts_doc", ROOT / "scripts" / "artifacts_doc.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


DOC = _script()


def test_the_committed_page_is_the_generated_one():
    """After a schema change, run `python3 scripts/artifacts_doc.py` and commit docs/artifacts.md."""
    assert (ROOT / "docs" / "artifacts.md").read_text(encoding="utf-8") == DOC.render()


def test_every_kind_and_column_is_described():
    from aows_core.artifacts.schemas import SCHEMAS

    assert set(DOC.KINDS) == set(SCHEMAS)
    for name, schema in SCHEMAS.items():
        assert set(DOC.KINDS[name].columns) == set(schema.names), name


def test_every_path_is_one_the_workflow_writes():
    text = "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "workflow" / "Snakefile",
                                                              *sorted((ROOT / "workflow" / "rules").glob("*.smk"))])
    for kind in DOC.KINDS.values():
        for path, _ in kind.paths:
            folder, name = path.rsplit("/", 1)
            assert path in text or (f'"{folder}/"' in text and f'"{name}"' in text), path


def test_every_metadata_key_is_written_by_the_code():
    """A key the page lists appears in aows_core's sources (the results table's `lut_*` keys as their suffix)."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "aows_core").rglob("*.py"))
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))
    keys = set(DOC.COMMON) | {k for kind in DOC.KINDS.values() for k in kind.metadata}
    missing = [k for k in keys if k not in words and not (k.startswith("lut_") and k[4:] in words)]
    assert not missing, f"docs/artifacts.md lists metadata keys no code writes: {missing}"
