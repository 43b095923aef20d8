#!/usr/bin/env python3
"""The README's result of the default run, generated from a finished run's artifacts (text and data cannot drift).

    python3 scripts/default_result.py RUN_DIR --write   # take a finished default run: refresh docs/default_run/,
                                                        # docs/pareto_cpu.png and README.md's result and time
    python3 scripts/default_result.py RUN_DIR           # print what --write would put in README.md
    python3 scripts/default_result.py --write           # re-render README.md from docs/default_run/ alone
    python3 scripts/default_result.py --check           # README.md holds what docs/default_run/ renders (else exit 1)

RUN_DIR is the working directory of `snakemake --cores 2 results/pareto_cpu.pdf` run from an empty results/. Read
from it: results/pareto_cpu.parquet (the results table), results/lut/cpu/validation.parquet (the latency table's
held-out report, metadata `adequacy`), results/measure/cpu.parquet (the finalists' timing session),
results/pareto_cpu.png (the figure), and Snakemake's own log of the run that made results/pareto_cpu.pdf
(RUN_DIR/.snakemake/log/*.snakemake.log: its first and last timestamps give the wall time). The three tables, and
what the script read from the log (run.json), are copied into docs/default_run/, which is committed: `--check`
needs nothing else. README.md's generated parts lie between `<!-- default-result:start -->` and
`<!-- default-result:end -->` (the table, a few lines on it, a glossary and the one provenance line) and between
`<!-- default-time:start -->` and `<!-- default-time:end -->` (the quick start's stated time).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # aows_core from this checkout, installed or not

from aows_core import artifacts as io  # noqa: E402
from aows_core.config import METHODS  # noqa: E402  (the order of the results tables)
from aows_core.latency.verify import session_margin  # noqa: E402  (the default's verify.margin: auto)
from aows_core.plan import actual  # noqa: E402

README = ROOT / "README.md"
STORE = ROOT / "docs" / "default_run"
FIGURE = ROOT / "docs" / "pareto_cpu.png"
DEVICE = "cpu"
COMMAND = f"snakemake --cores 2 results/pareto_{DEVICE}.pdf"
# (name in docs/default_run/, path in the run, artifact kind)
TABLES = (("pareto.parquet", f"results/pareto_{DEVICE}.parquet", "pareto"),
          ("validation.parquet", f"results/lut/{DEVICE}/validation.parquet", "lut_validation"),
          ("measure.parquet", f"results/measure/{DEVICE}.parquet", "measure"))
BLOCKS = {"default-result": "block", "default-time": "inline"}


class ResultError(RuntimeError):
    """A run that is not a finished default run, or a README without the generated blocks."""


# ------------------------------------------------------------------------------------- reading a run


def snakemake_log(run: Path) -> tuple[Path, str]:
    """The newest Snakemake log of RUN_DIR whose run made results/pareto_cpu.pdf and finished every job."""
    logs = sorted((run / ".snakemake" / "log").glob("*.snakemake.log"), reverse=True)
    made = re.compile(rf"^\s+output: results/pareto_{DEVICE}\.pdf[,\s]", re.M)
    for log in logs:
        text = log.read_text(errors="replace")
        if made.search(text) and re.search(r"steps \(100%\) done", text):
            return log, text
    raise ResultError(f"{run}/.snakemake/log/ holds no log of a finished run that made results/pareto_{DEVICE}.pdf "
                      f"(run `{COMMAND}` in {run} first)")


def wall_time(text: str) -> tuple[datetime, datetime]:
    """First and last timestamps of a Snakemake log (`aows_core.plan.actual.wall_time`)."""
    try:
        return actual.wall_time(text)
    except ValueError as e:
        raise ResultError(str(e)) from None


def git_commit(run: Path) -> str | None:
    """The commit RUN_DIR's own checkout was at (`+changes` when tracked files differ from it); None outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(run), *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != run.resolve():
            return None  # RUN_DIR lies inside another repository: its commit says nothing of the run's code
        sha = git("rev-parse", "--short=7", "HEAD")
        return sha + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


def import_run(run: Path, commit: str | None, store: Path = STORE, figure_to: Path = FIGURE) -> None:
    """Copy a finished default run's tables and figure into the repository, with what its Snakemake log says."""
    log, text = snakemake_log(run)
    if not re.search(r"^(?:local)?rule sample_configs:", text, re.M):
        raise ResultError(f"{log} is a run that reused earlier results (it did not sample and profile): its wall "
                          f"time is not the default's; run `{COMMAND}` from an empty results/")
    start, end = wall_time(text)
    command = re.search(r"^\s*Command: \S*snakemake (.*)$", text, re.M)
    if command and f"snakemake {command.group(1).strip()}" != COMMAND:
        raise ResultError(f"{log} is the log of `snakemake {command.group(1).strip()}`, not of the README's main "
                          f"command `{COMMAND}`: its wall time is not the quick start's")
    cores = re.search(r"^Provided cores: (\d+)", text, re.M)
    version = re.search(r"^\s*Snakemake version: (\S+)", text, re.M)
    for _, src, kind in TABLES:
        io.read_table(run / src, kind)  # refuse a missing or foreign file before anything is copied
    figure = run / f"results/pareto_{DEVICE}.png"
    if not figure.exists():
        raise ResultError(f"{figure}: no such file")
    store.mkdir(parents=True, exist_ok=True)
    for name, src, _ in TABLES:
        shutil.copyfile(run / src, store / name)
    shutil.copyfile(figure, figure_to)
    info = {
        "command": f"snakemake {command.group(1).strip()}" if command else COMMAND,
        "cores": int(cores.group(1)) if cores else None,
        "snakemake": version.group(1) if version else None,
        "log": log.name,
        "start": start.isoformat(sep=" "),
        "end": end.isoformat(sep=" "),
        "wall_s": int((end - start).total_seconds()),
        "commit": commit or git_commit(run),
        "figure_sha256": hashlib.sha256(figure_to.read_bytes()).hexdigest(),
    }
    (store / "run.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")


# ------------------------------------------------------------------------------------------ rendering


def _pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}"


def _duration(seconds: int) -> str:
    return f"{seconds // 60} min {seconds % 60:02d} s"


def _comparison(meta: dict) -> str:
    """Which methods differ beyond their seeds' spread at each target (the results table's own test)."""
    pairs = [c for c in meta.get("comparison") or [] if c.get("separated")]
    if not pairs:
        return "at this budget no two methods differ beyond their seeds' spread at any target"
    by_target: dict[str, list[str]] = {}
    for c in pairs:
        by_target.setdefault(c["target"], []).append(f"{c['better']} over {c['worse']} (+{_pct(c['difference'])})")
    said = "; ".join(f"{t}: {', '.join(v)}" for t, v in by_target.items())
    return f"the differences that resolve beyond the seeds' spread (points of top-1): {said}; no other pair differs"


def render(store: Path = STORE) -> dict[str, str]:
    """The README's generated parts, from docs/default_run/ alone: {block name: text}."""
    ptab, pmeta = io.read_table(store / "pareto.parquet", "pareto")
    _, vmeta = io.read_table(store / "validation.parquet", "lut_validation")
    mtab, mmeta = io.read_table(store / "measure.parquet", "measure")
    run = json.loads((store / "run.json").read_text())
    rows = ptab.to_pylist()
    order = {m: i for i, m in enumerate(METHODS)}
    rows.sort(key=lambda r: (r["target_ms"], order.get(r["method"], len(order))))
    unit = pmeta.get("unit", "ms")
    seeds = max(r["seeds"] for r in rows)
    lines = [f"| target | method | predicted [{unit}] | measured [{unit}] | meets target (pred. / meas.) | "
             f"test top-1 % [95 %] | MMAC |",
             "|---|---|---|---|---|---|---|"]
    shown = None
    for r in rows:
        target = "" if r["target"] == shown else f"`{r['target']}` = {r['target_ms']:.2f} {unit}"
        shown = r["target"]
        acc = _pct(r["test_acc"], 1) + f" [{_pct(r['test_acc_low'])}, {_pct(r['test_acc_high'])}]"
        meets = f"{'✓' if r['meets_target_predicted'] else '✗'} / {'✓' if r['meets_target_measured'] else '✗'}"
        noisy = " ⚠" if r["too_noisy"] else ""
        lines.append(f"| {target} | {r['method']} | {r['predicted_ms']:.3f} | {r['measured_ms']:.3f}{noisy} | "
                     f"{meets} | {acc} | {r['mmacs']:.2f} |")

    a = vmeta["adequacy"]
    spec = mmeta.get("device_spec", {})
    fp = pmeta.get("fingerprint", {})
    n_lut = int(pmeta.get("lut_n", 0))
    measured = mtab.to_pylist()
    within5 = sum(abs(m["rel_error"]) <= 0.05 for m in measured)
    test_n = max(r["test_n"] for r in rows)
    threads = spec.get("threads", 1)
    interval = "a 95 % t-interval" if seeds > 1 else "a 95 % Wilson interval"
    bullets = [
        f"**Cost**: `{run['command']}` ran in **{_duration(run['wall_s'])}** from an empty `results/` on "
        f"{run['cores']} cores, set-up excluded.",
        f"**Latency table** ({spec.get('backend', DEVICE)}, batch {spec.get('batch_size', 1)}, {threads} "
        f"thread{'s' if threads != 1 else ''}): on {n_lut} held-out networks its RMS error is {_pct(a['rel_rms'])} % "
        f"against a timing noise σ_n of {_pct(a['sigma_n'])} % (verdict `{a['verdict']}`); 95 % of them ran within "
        f"{100 * (a['ratio_low'] - 1):+.1f} … {100 * (a['ratio_high'] - 1):+.1f} % of their prediction.",
        f"**Targets**: each decision was verified on the device with a {_pct(session_margin(a['sigma_n']))} % margin "
        f"under its target, what another timing session may move a network by (D36); "
        f"{pmeta.get('targets_met_predicted')} of {len(rows)} finalists meet their target as predicted, "
        f"{pmeta.get('targets_met_measured')} as measured in a separate session (median of {mmeta.get('rounds')} "
        f"rounds); {within5} of {len(measured)} ran within 5 % of their prediction.",
        f"**Accuracy**: top-1 is the mean over {seeds} retraining seed{'s' if seeds > 1 else ''} on the {test_n:,} "
        f"test images with {interval}; {_comparison(pmeta)}.",
    ]
    if pmeta.get("n_too_noisy"):
        bullets.append(
            f"⚠ **A noisy timing session**: in the measure session the finalists' timings varied by "
            f"{_pct(mmeta['round_noise'])} % from round to round, above the {_pct(mmeta['max_noise'], 0)} % gate "
            f"(the table's profiling: σ_n {_pct(a['sigma_n'])} %), so each ⚠ measurement is less certain than its "
            f"prediction; close other programs and rerun `measure` ([docs/timing-protocol.md](docs/timing-protocol.md)).")
    glossary = ("σ_n: a network's test–retest timing noise; MMAC: millions of multiply-accumulates per image; OWS: "
                "the optimal widths on the uniformly trained supernet (§5); AOWS: on a supernet trained further "
                "around each target (§6); greedy: AutoSlim-style slimming; uniform: one width multiplier (§3).")
    cpu = f"{fp.get('cpu_count', '?')}-core {fp.get('machine', '')} ({fp.get('cpu_model', 'unknown CPU')})"
    provenance = (f"Provenance: {run['start'][:10]}, {cpu}, torch {fp.get('torch', '?')}, "
                  f"aows {pmeta.get('aows_version', '?')}.")
    block = "\n".join([*lines, "", *(f"- {b}" for b in bullets), "", glossary, "", provenance])
    return {"default-result": block, "default-time": f"about {round(run['wall_s'] / 60)} minutes"}


# ------------------------------------------------------------------------------------- the README


def apply(text: str, parts: dict[str, str]) -> str:
    """README text with every generated part replaced (a part may appear several times)."""
    for name, body in parts.items():
        pattern = re.compile(rf"(<!-- {name}:start -->).*?(<!-- {name}:end -->)", re.S)
        if not pattern.search(text):
            raise ResultError(f"README.md has no `<!-- {name}:start -->` … `<!-- {name}:end -->` markers")
        inner = f"\n{body}\n" if BLOCKS[name] == "block" else body
        text = pattern.sub(lambda m, inner=inner: m.group(1) + inner + m.group(2), text)
    return text


def check(readme: Path = README) -> int:
    """0 when README.md holds what docs/default_run/ renders and docs/pareto_cpu.png is the stored run's figure."""
    text = readme.read_text()
    want = apply(text, render())
    problems = []
    if want != text:
        diff = difflib.unified_diff(text.splitlines(), want.splitlines(), "README.md", "rendered", lineterm="", n=1)
        problems.append("README.md's default result differs from docs/default_run/:\n" + "\n".join(diff))
    run = json.loads((STORE / "run.json").read_text())
    if not FIGURE.exists() or hashlib.sha256(FIGURE.read_bytes()).hexdigest() != run.get("figure_sha256"):
        problems.append("docs/pareto_cpu.png is not the figure of the run in docs/default_run/")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        print("Run `python3 scripts/default_result.py --write` (README from docs/default_run/), or "
              f"`python3 scripts/default_result.py RUN_DIR --write` after `{COMMAND}` in RUN_DIR.", file=sys.stderr)
        return 1
    print("README.md's default result matches docs/default_run/")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("run", nargs="?", type=Path, help="working directory of a finished default run")
    ap.add_argument("--write", action="store_true", help="copy the run into docs/ and rewrite README.md's blocks")
    ap.add_argument("--check", action="store_true", help="exit 1 unless README.md holds what docs/default_run/ renders")
    ap.add_argument("--commit", help="the commit the run's code was at, when RUN_DIR is not a git checkout")
    ap.add_argument("--readme", type=Path, default=README, help="the README to check (default: README.md)")
    args = ap.parse_args(argv)
    try:
        if args.check:
            if args.run or args.write:
                ap.error("--check takes no RUN_DIR and no --write")
            return check(args.readme)
        if args.run is None and not args.write:
            ap.error("give RUN_DIR, --write or --check")
        if args.run is not None and args.write:
            import_run(args.run, args.commit)
        if args.write:
            README.write_text(apply(README.read_text(), render()))
            print(f"README.md rewritten from {STORE.relative_to(ROOT)}/")
            return 0
        # RUN_DIR alone: show what --write would write, leaving the repository as it is
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            store = Path(tmp) / "default_run"
            import_run(args.run, args.commit, store, Path(tmp) / "pareto.png")
            parts = render(store)
        for name, body in parts.items():
            print(f"<!-- {name} -->\n{body}\n")
        return 0
    except (ResultError, io.ArtifactError, OSError, KeyError) as e:
        print(f"default_result: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
