"""The estimation work of an AOWS run (§6; docs/method.md D26), before and after, side by side in one run.

From a finished default run (its OWS checkpoint after the warm-up epochs and its device's latency table), trains
the AOWS supernet of one target under two estimation settings and reports, for each: the run's wall seconds,
the seconds inside its frozen-weight estimation passes, the number of configurations those passes scored, the
width signal of the unaries that decide (Σδ(min) − Σδ(max), its standard error and z) and the last epoch's mean
sampled latency ÷ the target (AOWS follows its target when it is near 1). Both runs use the same threads, seed
and weights, so the ratio is the estimation settings' alone. The baseline is the previous defaults:
aows.refresh 26, aows.estimate_configs 200, a final pass of 800 configurations.

    python3 bench/bench_estimation.py RUN [--target range:0.25] [--device cpu] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

BASELINE = {"refresh": 26, "estimate_configs": 200, "final_configs": 800}


def one_run(config: dict, run: Path, device: str, target: str, threads: int, out: Path) -> dict:
    """Train the AOWS supernet of `target` from `run`'s OWS checkpoint under `config`; its figures."""
    from aows_core import artifacts
    from aows_core.config import resolve, resume_settings, settings_hash
    from aows_core.search.link import Link
    from aows_core.search.targets import resolve_target
    from aows_core.training.loop import RunControl
    from aows_core.training.supernet import SupernetJob, make_sampler, train_supernet

    config = copy.deepcopy(config)
    config["aows"]["threads"] = threads
    settings = resolve(config)
    space = settings.space
    x, meta = artifacts.read_lut(run / f"results/lut/{device}/lut.parquet", space, device)
    link = Link.from_meta(meta)
    value = resolve_target(target, space, x, meta["unit_short"], link)
    W = int(config["aows"]["warmup_epochs"])
    sampler = make_sampler(settings, x, link.inverse(value))
    job = SupernetJob(settings_hash(resume_settings(config, "train_aows")), "aows", device, target, sampler,
                      run / f"results/supernet/ows/checkpoints/after_{W}.pt", value)
    t0 = time.perf_counter()
    res = train_supernet(settings, out / "out", job, RunControl(out / "resume", progress=False))
    wall = time.perf_counter() - t0
    last = res.metrics[-1]
    aw = config["aows"]
    refreshes = -(-sum(m["steps"] for m in res.metrics[W:]) // int(aw["refresh"]))  # at adaptive steps 0, r, 2r, …
    return {"wall_s": wall, "estimation_s": res.estimation_seconds,
            "configs": refreshes * int(aw["estimate_configs"]) + int(aw["final_configs"]),
            "z": last["width_signal"] / last["width_signal_se"], "width_signal": last["width_signal"],
            "se": last["width_signal_se"], "sampled_over_target": last["sampled_latency"] / sampler.target,
            "gamma": last["gamma"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a finished default run (its results/ folder's parent)")
    p.add_argument("--target", default="range:0.25")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2, help="torch threads of both runs")
    a = p.parse_args()

    from aows_core.config import load

    after = load("config.yaml")  # this checkout's defaults (the run must be of the same space and data)
    before = copy.deepcopy(after)
    before["aows"].update(BASELINE)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in (("before (baseline)", before), ("after (defaults)", after)):
            rows[name] = one_run(cfg, a.run, a.device, a.target, a.threads, Path(tmp) / name.split()[0])
    print(f"AOWS {a.device} {a.target}, {a.threads} threads, from {a.run}'s OWS checkpoint")
    print("| settings | refresh / configs / final | configs scored | estimation s | run s | Σδ(min)−Σδ(max) ± se | z "
          "| sampled ÷ target | γ |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, r), cfg in zip(rows.items(), (before, after)):
        aw = cfg["aows"]
        print(f"| {name} | {aw['refresh']} / {aw['estimate_configs']} / {aw['final_configs']} | {r['configs']} | "
              f"{r['estimation_s']:.1f} | {r['wall_s']:.1f} | {r['width_signal']:.3f} ± {r['se']:.3f} | {r['z']:.1f} | "
              f"{r['sampled_over_target']:.3f} | {r['gamma']:.3g} |")
    b, f = rows["before (baseline)"], rows["after (defaults)"]
    print(f"estimation time ratio before/after: {b['estimation_s'] / f['estimation_s']:.2f}x; "
          f"run time ratio: {b['wall_s'] / f['wall_s']:.2f}x")


if __name__ == "__main__":
    main()
