"""`aows plan`: what a run will cost before it starts (its job graph, each job's seconds from a short calibration
measured here, a schedule on the cores), and after it ran, the same table beside the actual times."""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

COMMAND = "plan"
# malloc keeps what a pass frees: its calibration trains and scores with torch (docs/method.md D51).
KEEPS_FREED_MEMORY = True
HELP = "what a run will cost before it starts (its jobs, a calibration measured here), and what it cost after"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()

# Where the calibration's figures are cached (per unit of work and what it depends on).
CACHE = Path("results") / "plan" / "calibration.json"

# Rules in pipeline order, for the table and to name benchmark files.
RULES = ("targets_feasible", "sample_configs", "profile", "fit_lut", "validate_lut", "check_target", "train_ows",
         "greedy_trajectory", "train_aows", "decode", "decide_baseline", "retrain_net", "retrain", "export", "measure",
         "proxy", "pareto")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("targets", nargs="*", help="what snakemake would make (default: its default target, rule all)")
    p.add_argument("--configfile", nargs="+", default=[],
                   help="the files snakemake would read over config.yaml (the same rule: README)")
    p.add_argument("--cores", type=int, default=2, help="the cores snakemake would run on (default 2)")
    p.add_argument("--actual", action="store_true",
                   help="after a run: each stage's seconds from results/benchmarks/ and the wall time from "
                        "Snakemake's log, beside the plan")
    p.add_argument("--images", type=_images, default=None, metavar="TRAIN,TEST",
                   help="the dataset's training and test images, to plan before its files are here")
    p.add_argument("--recalibrate", action="store_true", help="measure every unit cost again (else cached)")


def _images(text: str) -> tuple[int, int]:
    try:
        train, test = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give two counts, TRAIN,TEST (e.g. 50000,10000)") from None
    if train < 1 or test < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: both counts must be positive")
    return train, test


@dataclass(frozen=True)
class Request:
    """What to plan: Snakemake's `targets` under `configfile` on `cores`; `images` (train, test) for a dataset not
    here yet; `actual`: beside the last run's times; `recalibrate`: every unit cost measured again."""

    targets: tuple[str, ...] = ()
    configfile: tuple[str, ...] = ()
    cores: int = 2
    images: tuple[int, int] | None = None
    actual: bool = False
    recalibrate: bool = False


def from_args(args: argparse.Namespace) -> tuple[dict, dict, dict]:
    """The command line as one Request."""
    return {}, {}, {"request": Request(tuple(args.targets), tuple(args.configfile), args.cores, args.images,
                                       args.actual, args.recalibrate)}


def needs_config(args: argparse.Namespace) -> bool:
    """The config is the workflow's: config.yaml, then each --configfile (read in `run`)."""
    return False


def run(config: Mapping[str, Any] | None, inputs: Mapping[str, Any], outputs: Mapping[str, Any], *,
        request: Request) -> dict[str, Any]:
    """The plan: per rule, jobs and seconds alone; the schedule's wall seconds on `cores`; with `actual`, the run's."""
    from ..config import resolve, workflow_config
    from ..plan import actual as act
    from ..plan.calibrate import Calibration
    from ..plan.costs import Costs, facts
    from ..plan.graph import job_graph
    from ..plan.schedule import schedule

    q = request
    if q.cores < 1:
        raise ValueError(f"--cores {q.cores}: give at least 1")
    settings = resolve(workflow_config(q.configfile))
    rt = settings.retrain
    jobs = job_graph(q.targets, q.configfile, q.cores, int(rt.threads) * int(rt.processes) // int(rt.nodes),
                     seeds_together=bool(rt.seeds_in_one_job))
    finalists: dict[str, int] = defaultdict(int)
    for j in jobs:
        if j.rule == "retrain" and j.wildcards.get("seed") == str(settings.retrain.seeds[0]):
            finalists[j.wildcards["device"]] += 1
    cal = Calibration(CACHE, fresh=q.recalibrate)
    costs = Costs(settings, cal, facts(settings, finalists, q.images))
    seconds = {j.jobid: costs.seconds(j) for j in jobs}
    times = schedule(jobs, seconds, q.cores)
    per_rule: dict[str, list[float]] = defaultdict(list)
    for j in jobs:
        per_rule[j.rule].append(seconds[j.jobid])
    res: dict[str, Any] = {
        "targets": list(q.targets) or ["all"], "cores": q.cores, "configfiles": ["config.yaml", *q.configfile],
        "per_rule": dict(per_rule), "wall_s": max(end for _, end in times.values()),
        "calibration_s": cal.seconds, "calibrated": cal.measured, "cache": str(CACHE),
        "threads": {j.rule: j.threads for j in jobs}, "seeds_together": bool(rt.seeds_in_one_job),
    }
    if q.actual:
        res["actual"] = act.stage_times("results", RULES)
        wall = act.finished_wall(".")
        res["actual_wall_s"] = None if wall is None else wall[0]
    return res


def _minutes(s: float) -> str:
    return f"{s / 60:.1f}" if s < 600 else f"{s / 60:.0f}"


def _clock(s: float) -> str:
    m = round(s / 60)
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{m} min"


def cpu_seconds(res: Mapping[str, Any]) -> dict[str, float]:
    """CPU seconds of each rule: its jobs' seconds × the CPUs each holds."""
    return {r: sum(v) * min(res["threads"][r], res["cores"]) for r, v in res["per_rule"].items()}


def table(res: Mapping[str, Any]) -> str:
    """The plan as a markdown table: per rule, jobs, minutes alone (each, all), share of the CPU time, and with
    the actual times, theirs and the ratio."""
    from ..plan.costs import MOVERS

    per_rule, actual = res["per_rule"], res.get("actual")
    cpu = cpu_seconds(res)
    total_cpu = sum(cpu.values())
    head = "| stage | jobs | longest job [min] | all jobs [min] | CPU share |"
    rule = "|---|---|---|---|---|"
    if actual is not None:
        head += " actual, all jobs [min] | plan ÷ actual |"
        rule += "---|---|"
    lines = [head + " what moves it |", rule + "---|"]
    order = [r for r in RULES if r in per_rule] + sorted(set(per_rule) - set(RULES))
    for r in order:
        v = per_rule[r]
        row = (f"| {r} | {len(v)} | {_minutes(max(v))} | {_minutes(sum(v))} | "
               f"{100 * cpu[r] / max(total_cpu, 1e-9):.0f} % |")
        if actual is not None:
            a = sum(actual.get(r, []))
            row += f" {_minutes(a)} | {sum(v) / a:.2f} |" if a > 0 else " – | – |"
        lines.append(row + f" {MOVERS.get(r, '')} |")
    return "\n".join(lines)


def report(res: dict[str, Any], args: argparse.Namespace) -> None:
    per_rule = res["per_rule"]
    cpu = cpu_seconds(res)
    top = max(cpu, key=cpu.get)
    print(f"aows plan: {' '.join(res['targets'])} from scratch on {res['cores']} cores, config "
          f"{' then '.join(res['configfiles'])}")
    print(table(res))
    print(f"\nWall time: about {_clock(res['wall_s'])} on {res['cores']} cores "
          f"({_clock(sum(cpu.values()))} of CPU time). The largest stage is {top} "
          f"({100 * cpu[top] / sum(cpu.values()):.0f} % of the CPU time).")
    if "retrain_net" in per_rule:
        each = "finalist (all its seeds in one job)" if res.get("seeds_together") else "finalist and seed"
        print(f"Retraining is counted once per {each}: finalists that decide the same widths share one "
              f"training, so it can take less.")
    if res.get("actual") is not None:
        aw = res.get("actual_wall_s")
        print("Actual wall time: " + (f"{_clock(aw)} (plan ÷ actual {res['wall_s'] / aw:.2f})" if aw else
                                      "no finished run in .snakemake/log/"))
    made = f"calibrated now in {res['calibration_s']:.0f} s" if res["calibrated"] else "calibration cached"
    print(f"Unit costs: {made} ({res['cache']}; --recalibrate measures again).")
