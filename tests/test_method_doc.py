"""docs/method.md cites code as `aows_core.module:name` (`Class.method` for methods): every reference resolves."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "method.md"
REF = re.compile(r"aows_core(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
REFS = sorted(set(REF.findall(DOC.read_text(encoding="utf-8"))))


def test_the_page_cites_code():
    assert len(REFS) > 50


@pytest.mark.parametrize("ref", REFS)
def test_reference_resolves(ref):
    module, name = ref.split(":", 1)
    obj = importlib.import_module(module)
    for part in name.split("."):
        assert hasattr(obj, part), f"docs/method.md cites {ref}, but {obj!r} has no {part!r}"
        obj = getattr(obj, part)
