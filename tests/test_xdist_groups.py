"""The tests that read the tiny runs share one pytest-xdist worker, so the runs are made once per suite."""

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import os, sys
import pytest
sys.path.insert(0, {str(TESTS)!r})
from tiny_workflow import group_tiny_run_tests

@pytest.fixture(scope="session")
def tiny_run():
    with open(os.environ["MADE_BY"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.fixture(scope="session")
def pareto_run(tiny_run):
    pass

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    group_tiny_run_tests(items)
"""

MODULE = """
import time

def test_reads(tiny_run): time.sleep(0.3)
def test_reads_the_other(pareto_run): time.sleep(0.3)
def test_reads_nothing(): time.sleep(0.3)
"""


def test_the_tests_that_read_the_tiny_runs_make_them_once_under_two_workers(tmp_path):
    """Regression: under pytest 9 pytest-xdist 3.8's group marks had no effect, and every worker made its own tiny
    runs (the suite took 25 minutes instead of 10)."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for i in range(4):
        (tmp_path / f"test_m{i}.py").write_text(MODULE)
    made = tmp_path / "made_by.txt"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                        "-p", "no:randomly", "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)],
                       capture_output=True, text=True, env={**os.environ, "MADE_BY": str(made)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "12 passed" in r.stdout, r.stdout[-1000:]
    assert len(made.read_text().split()) == 1, made.read_text()  # one worker made it, once
