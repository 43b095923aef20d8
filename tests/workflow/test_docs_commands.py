"""The docs pages' commands run: Snakemake commands dry-run verbatim on the default configuration, `aows` commands
with a launch plan print it, and the examples that read a finished run's `results/` run on the tiny run (fast
checks of the same snippets, without a run, are in tests/test_docs_snippets.py)."""

import shlex
import subprocess
import sys

import pytest
from test_docs_snippets import PYTHON, SHELL
from test_readme import as_synth, workdir

pytestmark = pytest.mark.slow  # see pyproject: `pytest -m "not slow"` is the quick loop


def _commands() -> list[str]:
    """Every snakemake command of the pages (a `taskset -c N` prefix dropped), and every `aows … --print-launch`."""
    out = []
    for _, _, code in SHELL:
        for line in code.strip().splitlines():
            argv = shlex.split(line)
            if argv[:2] == ["taskset", "-c"]:
                argv = argv[3:]
            if argv[0] == "snakemake" or "--print-launch" in argv:
                out.append(shlex.join(argv))
    return list(dict.fromkeys(out))


COMMANDS = _commands()


def test_the_pages_hold_commands():
    assert any(c.startswith("snakemake") for c in COMMANDS) and any("--print-launch" in c for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_docs_command_dry_runs_on_the_default_configuration(command, tmp_path):
    argv = shlex.split(command)
    if argv[0] == "snakemake":
        argv = [*argv, "-n"]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=workdir(tmp_path / "repo"))
    assert r.returncode == 0, (command, r.stdout[-1500:], r.stderr[-1500:])


def test_the_examples_that_read_results_run_on_a_finished_run(tiny_run):
    """docs/artifacts.md's reading examples on the tiny run (device `synth`); each prints what it reads."""
    codes = [code for _, _, code in PYTHON if "results/" in code]
    assert codes
    for code in codes:
        r = subprocess.run([sys.executable, "-c", as_synth(code)], capture_output=True, text=True, cwd=tiny_run)
        assert r.returncode == 0 and r.stdout.strip(), (code, r.stderr[-1500:])
