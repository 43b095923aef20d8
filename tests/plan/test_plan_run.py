"""`aows plan` on the tiny workflow: the job graph is Snakemake's own, the counted work is what the stages do, and
after the run the plan stands beside the run's own benchmark files (tests/tiny_workflow.py). Speed itself is not
asserted here: the plan's accuracy on the default run is in bench/README.md."""

import json
import math
import shutil
import subprocess
import sys

import pytest
from tiny_workflow import MAIN, planned, smk

from aows_core import artifacts as io
from aows_core.config import resolve, workflow_config
from aows_core.plan.actual import stage_times
from aows_core.plan.graph import parse_dry_run, with_retraining
from aows_core.stages.plan import RULES


@pytest.fixture(scope="module")
def run_copy(tiny_run, tmp_path_factory):
    """The tiny run's config, benchmark files and Snakemake logs, in a directory of its own (the plan writes its
    calibration cache under results/)."""
    wd = tmp_path_factory.mktemp("plan")
    shutil.copy(tiny_run / "config.yaml", wd / "config.yaml")
    shutil.copytree(tiny_run / "results" / "benchmarks", wd / "results" / "benchmarks")
    shutil.copytree(tiny_run / ".snakemake" / "log", wd / ".snakemake" / "log")
    return wd


def plan(wd, *args):
    r = subprocess.run([sys.executable, "-m", "aows_core.cli", "plan", *args], capture_output=True, text=True, cwd=wd)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_the_job_graph_is_snakemakes_with_the_retraining_it_hides(run_copy):
    r = smk(run_copy, "--dry-run", "--forceall", MAIN)
    jobs = with_retraining(parse_dry_run(r.stdout), threads=1)
    counts = {rule: sum(j.rule == rule for j in jobs) for rule in {j.rule for j in jobs}}
    assert {k: v for k, v in counts.items() if k != "retrain_net"} == planned(r.stdout)  # Snakemake's job table
    assert counts["retrain_net"] == counts["retrain"]
    together = with_retraining(parse_dry_run(r.stdout), threads=1, seeds_together=True)  # D50
    finalists = {tuple(sorted((k, v) for k, v in j.wildcards.items() if k != "seed")) for j in jobs if j.rule == "retrain"}
    assert sum(j.rule == "retrain_net" for j in together) == len(finalists)
    by_id = {j.jobid: j for j in jobs}

    def ancestors(i, seen=None):
        seen = set() if seen is None else seen
        for a in by_id[i].after:
            if a not in seen:
                seen.add(a)
                ancestors(a, seen)
        return seen

    (pareto,) = [j for j in jobs if j.rule == "pareto"]
    assert ancestors(pareto.jobid) == set(by_id) - {pareto.jobid}  # the product waits for every job
    for j in jobs:
        rules = {by_id[a].rule for a in ancestors(j.jobid)}
        if j.rule == "train_aows":
            assert "train_ows" in rules and "fit_lut" in rules
        if j.rule == "retrain_net":
            assert rules & {"decode", "decide_baseline"}


def test_the_counted_work_is_the_stages_own(tiny_run):
    """Training steps per epoch as the data splits cut them; profiling jobs as the profile stage planned them, plus
    the share a profile times again (RETIMED_SHARE, within profiling.retime and profiling.spell_retime, D27, D47)."""
    from aows_core.data import load_splits
    from aows_core.plan.costs import RETIMED_SHARE, facts

    settings = resolve(workflow_config([], root=tiny_run))
    f = facts(settings, {})
    assert f.supernet_steps == load_splits(settings.data_spec("supernet")).steps_per_epoch
    assert f.retrain_steps == load_splits(settings.data_spec("retrain")).steps_per_epoch
    table, meta = io.read_table(tiny_run / "results/latency/synth.parquet")
    n = int(table.to_pandas()["role"].isin(["sample", "retest"]).sum())
    p = settings.profiling
    budget = math.ceil(p.retime * n) + math.ceil(p.spell_retime * n)
    assert f.profile_jobs["synth"] == n + min(budget, math.ceil(RETIMED_SHARE * n))
    assert n <= meta["next_job"] <= n + budget
    assert f.profile_jobs["flops"] == io.read_table(tiny_run / "results/latency/flops.parquet")[0].num_rows


def test_plan_before_and_after_a_run(run_copy):
    """The table names every rule of the run; after it, each rule's actual seconds are its benchmark files' sum;
    a second plan reuses the cached calibration."""
    from aows_core.stages import plan as stage

    out = plan(run_copy, MAIN, "--actual")
    assert "calibrated now" in out
    actual = stage_times(run_copy / "results", RULES)
    rows = {line.split(" | ")[0][2:]: line for line in out.splitlines() if line.startswith("| ")}
    assert {"train_ows", "profile", "retrain_net", "pareto"} <= set(rows) & set(actual)
    for rule in set(rows) & set(actual):  # the tiny run also made more than MAIN: its other rules are not planned
        assert f" {sum(actual[rule]) / 60:.1f} |" in rows[rule]
    assert "Actual wall time:" in out and "no finished run" not in out
    cache = json.loads((run_copy / stage.CACHE).read_text())
    assert cache and all(v >= 0 for v in cache.values())
    assert "calibration cached" in plan(run_copy, MAIN)
