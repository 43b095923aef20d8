"""The README's commands and examples: each runs verbatim on a finished tiny run, or dry-runs."""

import json
import re
import shlex
import subprocess
import sys

import pytest

from tiny_workflow import ROOT

pytestmark = pytest.mark.slow  # see pyproject: `pytest -m "not slow"` is the quick loop


README = (ROOT / "README.md").read_text()


def readme_commands():
    """Every shell command the README shows (indented blocks and inline code), in order."""
    found = re.findall(r"^    ((?:snakemake|aows|python3?|bash) .*)$", README, re.M)
    found += re.findall(r"`((?:snakemake|aows|python3?|bash) [^`]*)`", README)
    return list(dict.fromkeys(c.strip() for c in found))


def _workdir(tmp_path, config=None):
    """A folder laid out like the repository for commands run verbatim: workflow/, configs/, config.yaml."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name in ("workflow", "configs", "envs", "bench"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "config.yaml").write_text(config or (ROOT / "config.yaml").read_text())
    return tmp_path


def test_readme_commands_run_verbatim_or_dry_run(tiny_run, tmp_path):
    """Fast commands run verbatim; the long ones (the default run, the ImageNet preset, the cluster profiles)
    dry-run; `aows` stage templates name real subcommands. The setup script is CI's own first step and the test
    command is this suite."""
    default = _workdir(tmp_path / "default")
    finished = tiny_run
    for name in ("workflow", "bench"):
        if not (finished / name).exists():
            (finished / name).symlink_to(ROOT / name)
    ran = []
    for cmd in readme_commands():
        for part in (p.strip() for p in cmd.split("&&")):
            if part == "bash scripts/setup.sh" or part.startswith("python3 -m pytest"):
                continue
            argv = shlex.split(part)
            if argv[0] == "aows":
                if argv[1] == "<stage>":
                    continue
                if argv[1] == "space":  # verbatim, for every preset NAME
                    for name in ("mobilenet_v1_fmnist", "mobilenet_v1_imagenet"):
                        r = subprocess.run([a.replace("NAME", name) for a in argv], capture_output=True, text=True)
                        assert r.returncode == 0 and json.loads(r.stdout)["name"], (part, r.stderr)
                # the stages table's templates (`aows profile --device D`): the subcommand exists
                r = subprocess.run(["aows", argv[1], "--help"], capture_output=True, text=True)
            elif argv[0].startswith("python"):  # bench/stage_times.py over a finished run's benchmarks
                r = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=finished)
            elif "--report" in argv:  # fast: verbatim, on a finished run
                r = subprocess.run(argv, capture_output=True, text=True, cwd=finished)
            elif "--rulegraph" in argv:  # fast: verbatim, on the default config (plans, runs nothing)
                r = subprocess.run(argv, capture_output=True, text=True, cwd=default)
            else:  # a run of minutes to days: planned, not run
                argv = ["2" if a == "N" else a for a in argv]
                r = subprocess.run([*argv, "-n"], capture_output=True, text=True, cwd=default)
            assert r.returncode == 0, (part, r.stdout[-1500:], r.stderr[-1500:])
            ran.append(part)
    assert any("--report" in p for p in ran) and any("imagenet_paper" in p for p in ran)
    assert any("profiles/slurm" in p for p in ran) and "snakemake --cores 2 results/pareto_cpu.pdf" in ran
    assert (finished / "results/report.html").exists()


def test_readme_python_examples_run(tiny_run):
    """The README's pandas examples, on the tiny run (its devices are `synth` and `flops`, not `cpu`)."""
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks
    for code in blocks:
        code = code.replace("cpu", "synth")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tiny_run)
        assert r.returncode == 0, (code, r.stderr[-1500:])
