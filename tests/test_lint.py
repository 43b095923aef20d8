"""The linter as a habit (issue 39): ruff's rules of pyproject.toml ([tool.ruff]) hold on the library, the tests,
the benchmarks and the scripts, and no public function of the library is longer than 60 lines."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 60


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.fail("ruff is not installed: it is in the test extra (pip install -e '.[test]', scripts/setup.sh)")
    r = subprocess.run([ruff, "check", "--no-cache", "aows_core", "tests", "bench", "scripts"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_no_library_function_is_longer_than_60_lines():
    """From `def` to its last line; ruff counts statements, this counts what a reader scrolls."""
    long = []
    for path in sorted((ROOT / "aows_core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, long
