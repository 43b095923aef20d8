"""The docs pages' snippets run or validate, and every config key they name exists (fast: no training, no timing run).

- ```yaml blocks are configurations: each validates with `aows_core.config.validate` (the example backend of
  docs/extending.md, `matmul-proxy`, registered as that page says).
- ```python blocks run, a page's blocks in order in one namespace, except those that read a finished run's
  `results/` (tests/workflow runs those on a tiny run).
- ```sh blocks and `aows …` / `snakemake …` code spans name real `aows` subcommands and options (the help snapshot)
  or Snakemake targets of the workflow; the workflow tests dry-run them.
- (`section.key` in backticks is a key of the schema: tests/test_configuration_doc.py.)
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "docs" / n for n in ("timing-protocol.md", "latency-model.md", "training.md", "artifacts.md",
                                     "extending.md", "method.md", "experiments.md", "devices.md")] + [ROOT / "bench" / "README.md"]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(lang: str) -> list[tuple[str, int, str]]:
    """(page, index, code) of every fenced block in `lang`."""
    out = []
    for page in PAGES:
        found = [code for kind, code in FENCE.findall(page.read_text(encoding="utf-8")) if kind == lang]
        out += [(page.name, i, code) for i, code in enumerate(found)]
    return out


def _id(item):
    return f"{item[0]}#{item[1]}"


def inline_commands() -> list[tuple[str, int, str]]:
    """(page, index, command) of every `aows …` or `snakemake …` command in a code span."""
    out = []
    for page in PAGES:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        found = re.findall(r"`((?:aows|snakemake) [^`]*)`", text)
        out += [(f"{page.name} inline", i, " ".join(c.split())) for i, c in enumerate(found)]
    return out


YAML = blocks("yaml")
PYTHON = blocks("python")
SHELL = blocks("sh") + inline_commands()


def test_the_pages_hold_snippets():
    assert YAML and PYTHON and blocks("sh")


@contextlib.contextmanager
def registered_here():
    """Device backends a snippet registers (docs/extending.md's example) are unregistered after it."""
    from aows_core.devices import DEVICES, unregister

    before = set(DEVICES)
    try:
        yield
    finally:
        for name in set(DEVICES) - before:
            unregister(name)


@pytest.mark.parametrize("item", YAML, ids=[_id(i) for i in YAML])
def test_yaml_snippets_validate(item):
    from aows_core import config

    raw = yaml.safe_load(item[2])
    with registered_here():
        if "matmul-proxy" in item[2]:  # docs/extending.md's example backend: its class, registered as the page says
            code = next(code for page, _, code in PYTHON if page == item[0] and "@register" in code)
            exec(compile(code, f"{item[0]} snippet", "exec"), {"__name__": "docs_device"})
        config.validate(raw)


@pytest.mark.parametrize("page", sorted({p for p, _, code in PYTHON if "results/" not in code}))
def test_python_snippets_run(page, capsys):
    namespace: dict = {"__name__": f"docs_{page}"}
    with registered_here():
        for name, _, code in PYTHON:
            if name == page and "results/" not in code:
                exec(compile(code, f"{page} snippet", "exec"), namespace)
    assert capsys.readouterr().out.strip()  # each runnable page prints what it shows


def _help() -> dict:
    return json.loads((ROOT / "tests" / "snapshots" / "help.json").read_text(encoding="utf-8"))["help"]


def _workflow_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "workflow" / "Snakefile",
                                                              *sorted((ROOT / "workflow" / "rules").glob("*.smk"))])


def _target_exists(target: str, text: str) -> bool:
    """A rule name, or a path some rule's output pattern produces."""
    if re.search(rf"^rule {re.escape(target)}:", text, re.M):
        return True
    patterns = re.findall(r'"(results/[^"]+)"', text)
    for p in patterns:
        rx = re.escape(p)
        rx = re.sub(r"\\\{[^}]*\\\}", r"[^/]+", rx)
        if re.fullmatch(rx, target):
            return True
    return False


@pytest.mark.parametrize("item", SHELL, ids=[_id(i) for i in SHELL])
def test_shell_snippets_name_real_commands(item):
    helps, text = _help(), _workflow_text()
    for line in item[2].strip().splitlines():
        argv = [a for a in shlex.split(line) if a != "…"]
        if argv[:2] == ["taskset", "-c"]:
            argv = argv[3:]
        if argv[0] == "aows":
            usage = "\n".join(helps[f"aows {argv[1]}"])
            for opt in (a for a in argv[2:] if a.startswith("--")):
                assert opt in usage, (line, opt)
        elif argv[0] == "snakemake":
            targets = [a for i, a in enumerate(argv[1:], 1)  # not an option's value (--configfile F, --set-threads r=n)
                       if not a.startswith("-") and not argv[i - 1].startswith("--c") and "=" not in a]
            assert targets, line
            for t in targets:
                assert _target_exists(t, text), (line, t)
        elif argv[0] == "ssh":  # installing the timing worker on a device: the command its own file documents
            import aows_worker

            assert line.strip() in aows_worker.__doc__, line
        else:
            raise AssertionError(f"{item[0]}: a shell snippet the test does not know: {line}")


DEFINED = re.compile(r"^#### D(\d+)\.|^- \*\*D(\d+)[,.:]", re.M)


def test_every_cited_deviation_is_defined_in_method_md():
    """A `D<n>` cited anywhere (code, workflow, docs, bench, configs) has its entry in docs/method.md: a heading, or
    one line under "What was removed"."""
    method = (ROOT / "docs" / "method.md").read_text(encoding="utf-8")
    defined = {int(a or b) for a, b in DEFINED.findall(method)}
    cited: dict[int, str] = {}
    for folder in ("aows_core", "bench", "workflow", "docs", "tests", "configs", "scripts"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".md", ".yaml", ".smk", ".rst"} or path.name == "Snakefile":
                for n in re.findall(r"\bD(\d+)\b", path.read_text(encoding="utf-8", errors="replace")):
                    cited.setdefault(int(n), str(path.relative_to(ROOT)))
    for path in (ROOT / "README.md", ROOT / "config.yaml"):
        for n in re.findall(r"\bD(\d+)\b", path.read_text(encoding="utf-8")):
            cited.setdefault(int(n), path.name)
    missing = {n: where for n, where in cited.items() if n not in defined}
    assert not missing, f"deviations cited but not defined in docs/method.md: {missing}"


# Settings and phrases of mechanisms that were removed or never held (docs/method.md, "What was removed").
STALE = ("exclude_disturbed", "ratio of the two medians", "round_coverage", "min_improvement", "outlier_threshold",
         "large_reference_share", "reference_every", "lut.weighting", "profiling.stretch", "measure.recheck",
         "profiling.max_rounds", "profiling.pairing")


def test_no_page_mentions_a_removed_setting():
    pages = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             ROOT / "aows_core" / "schemas" / "config.schema.yaml"]
    found = [(p.name, s) for p in pages for s in STALE if s in p.read_text(encoding="utf-8")]
    assert not found, f"removed settings or stale phrases: {found}"


# ----------------------------------------------------------------------------- links

MARKDOWN = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    heads = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text(encoding="utf-8")), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page):
    """Every relative link of the README, bench/README.md and docs/ names a file that exists, and its #anchor a
    heading of that file."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for link in LINK.findall(text):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: {link} names no file"
        if anchor and target.suffix == ".md":
            assert anchor in anchors(target), f"{page.name}: {link}: no heading #{anchor} in {target.name}"
