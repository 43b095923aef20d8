"""Does a later session land on the profile's scale? (§7, docs/method.md D37, D40)

Opens new sessions on a finished run's device (its config, latency file and finalists) and times, paired and in
shuffled rounds as `aows measure` does, the run's finalists and every network its profile retested. Each session's
timings are put on the profile's scale three ways, side by side:

- `paired`: D27 alone (the reference network exact, nothing else);
- `β·h`: the profile's stretch β (D37) applied at this session's host state h, clipped to the profile's range (the
  correction of `measure` and the verified decisions before D40);
- `line` and `origin`: the line log(l / b) = a + s · log(profiled / b), or s alone through the reference network,
  fitted on `--calibration` of the retested networks (chosen as `measure` chooses its recheck networks) and inverted,
  where it resolves at 1 % (the candidates D40 measured and did not adopt).

Reported per session and correction: the held-out retested networks (those not used for the line) against their
profiled latency — RMS of measured ÷ profiled − 1 and its mean over the fastest, middle and slowest third — and the
finalists against their predicted latency (the verified decisions' tables): how many land within 5 %; then, per
correction, the finalists of every two sessions against each other (a verified prediction is one session's timing,
`measure` another's). Timing: run it alone on the machine.

    PYTHONPATH=. python bench/calibration.py --device cpu --sessions 3 --pause 60 RUN_DIR
"""

from __future__ import annotations

import argparse
import glob
import math
import time

import numpy as np

from aows_core import artifacts
from aows_core.config import load, space_from_config, stage_settings
from aows_core.devices import get_device
from aows_core.latency.lut import columns_of
from aows_core.latency.recheck import origin_slope, recheck_networks
from aows_core.latency.protocol import correct, measure_plan, reference_config, time_jobs


def finalists(root: str, device: str) -> dict[tuple[int, ...], float]:
    """The run's decided networks and their predicted latency (the verified decisions' tables)."""
    out = {}
    for path in sorted(glob.glob(f"{root}/results/decisions/{device}/*/*.parquet")):
        for r in artifacts.read_table(path, "decisions")[0].to_pylist():
            out[tuple(int(c) for c in r["channels"])] = float(r["predicted_latency_ms"])
    return out


def stretched(rows: list[dict], stretch: dict, baseline: float) -> list[dict]:
    """The profile's β at each row's host state, h clipped to the profile's range (D37 as `measure` applied it)."""
    if not stretch or not stretch.get("applied"):
        return rows
    for r in rows:
        h = min(max(math.log(r["drift_factor"]), stretch["h_low"]), stretch["h_high"])
        r["latency_ms"] = baseline * (r["latency_ms"] / baseline) ** (1 / (1 + stretch["beta"] * h))
    return rows


def fitted_line(rows: list[dict], cal: list, baseline: float, intercept: bool) -> dict:
    """The line of `cal`'s session medians on their profiled latency (log scale), with whether it resolves at 1 %;
    through the reference it is `origin_slope`, the slope `measure` reports."""
    per: dict[int, list[float]] = {}
    for r in rows:
        if r["role"] == "recheck":
            per.setdefault(r["network"], []).append(r["latency_ms"])
    prof = [cal[k][1] for k in sorted(per)]
    sess = [float(np.median(per[k])) for k in sorted(per)]
    if not intercept:
        s, se = origin_slope(prof, sess, baseline)
        return {"a": 0.0, "s": s, "s_se": se, "applied": ((s - 1) / se) ** 2 >= 6.6349}
    x, y = np.log(np.asarray(prof) / baseline), np.log(np.asarray(sess) / baseline)
    X = np.column_stack([np.ones_like(x), x])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    res = y - X @ coef
    cov = float(res @ res) / (x.size - 2) * np.linalg.inv(X.T @ X)
    d = coef - np.array([0.0, 1.0])
    return {"a": float(coef[0]), "s": float(coef[1]), "s_se": float(np.sqrt(cov[1, 1])),
            "applied": float(d @ np.linalg.solve(cov, d)) >= 9.2103}


def mapped(rows: list[dict], line: dict, baseline: float) -> list[dict]:
    """Every timing through the inverse of `line` where it resolves."""
    if line["applied"]:
        for r in rows:
            r["latency_ms"] = baseline * math.exp((math.log(r["latency_ms"] / baseline) - line["a"]) / line["s"])
    return rows


def session(root: str, device: str, k: int, rounds: int, seed: int) -> tuple[list[str], dict[str, dict]]:
    """One row per correction of one new session, and per correction the finalists' medians."""
    cfg = load(f"{root}/config.yaml")
    space = space_from_config(cfg)
    table, lmeta = artifacts.read_latency(f"{root}/results/latency/{device}.parquet", space, device)
    baseline, protocol = float(lmeta["reference_baseline"]), dict(cfg["profiling"])
    cols = columns_of(table)
    every = recheck_networks(cols, 10**6)
    retested = {c for c, role in zip(map(tuple, cols["channels"]), cols["role"]) if role == "retest"}
    pool = [(c, v) for c, v in every if c in retested]
    cal = recheck_networks(cols, k)
    held = [(c, v) for c, v in pool if c not in {c for c, _ in cal}]
    fin = finalists(root, device)
    nets = [c for c, _ in held] + list(fin)
    dev = get_device(dict(stage_settings(cfg, "measure", device)["devices"][device]), space, seed)
    try:
        jobs = measure_plan(nets, reference_config(space), rounds, seed, False, 10**6 + seed * 10**4, paired=True,
                            recheck=[c for c, _ in cal])
        t0 = time.time()
        raw = time_jobs(dev, jobs, protocol, space)
        wall = time.time() - t0
    finally:
        dev.close()
    rows, session_base = correct(raw, "paired", baseline)
    h = np.log([r["drift_factor"] for r in rows])
    variants = {"paired": [dict(r) for r in rows],
                "β·h": stretched([dict(r) for r in rows], lmeta.get("stretch"), baseline)}
    scales = {"line": fitted_line(rows, cal, baseline, True), "origin": fitted_line(rows, cal, baseline, False)}
    for name, scale in scales.items():
        variants[name] = mapped([dict(r) for r in rows], scale, baseline)
    out, medians = [], {}
    for name, rs in variants.items():
        per: dict[int, list[float]] = {}
        for r in rs:
            if r["role"] == "finalist":
                per.setdefault(r["network"], []).append(r["latency_ms"])
        med = {nets[i]: float(np.median(v)) for i, v in per.items()}
        rel = np.array([med[c] / v - 1 for c, v in held])
        third = len(rel) // 3
        scale = scales.get(name)
        fin_rel = np.array([med[c] / p - 1 for c, p in fin.items()])
        medians[name] = {c: med[c] for c in fin}
        line = (f"s {scale['s']:.3f} ± {scale['s_se']:.3f}, a {scale['a']:+.4f}" + (" (applied)" if scale["applied"]
                                                                                  else "") if scale else "")
        out.append(f"| {time.strftime('%H:%M', time.localtime(t0))} | {device} | h {np.median(h):+.3f} "
                   f"[{h.min():+.2f}, {h.max():+.2f}] | {name} | {line} | {100 * np.sqrt(np.mean(rel**2)):.2f} % | "
                   f"{100 * rel[:third].mean():+.2f} / {100 * rel[third:-third].mean():+.2f} / "
                   f"{100 * rel[-third:].mean():+.2f} % | "
                   f"{int(np.sum(np.abs(fin_rel) <= 0.05))}/{len(fin_rel)} | {100 * np.max(np.abs(fin_rel)):.1f} % | "
                   f"{wall:.0f} s |")
    return out, medians


def reproducibility(sessions: list[dict[str, dict]]) -> list[str]:
    """Per correction, the finalists of every pair of sessions against each other: RMS of the ratio − 1 and the
    share within 5 % (what `measure` against a verified prediction can show at best)."""
    out = []
    for name in sessions[0]:
        diffs = [np.array([a[name][c] / b[name][c] - 1 for c in a[name]])
                 for i, a in enumerate(sessions) for b in sessions[i + 1:]]
        if not diffs:
            continue
        d = np.concatenate(diffs)
        out.append(f"| {name} | {len(diffs)} | {100 * np.sqrt(np.mean(d**2)):.2f} % | "
                   f"{int(np.sum(np.abs(d) <= 0.05))}/{d.size} | {100 * np.abs(d).max():.1f} % |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", required=True)
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--pause", type=float, default=60.0, help="seconds between sessions (the host's state moves)")
    ap.add_argument("--calibration", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("run")
    args = ap.parse_args()
    print("| start | device | host state h (median [range]) | correction | line | held-out RMS | fastest / middle / "
          "slowest third | finalists ≤ 5 % | worst finalist | session wall |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    medians = []
    for s in range(args.sessions):
        if s:
            time.sleep(args.pause)
        lines, med = session(args.run, args.device, args.calibration, args.rounds, seed=s)
        medians.append(med)
        for line in lines:
            print(line, flush=True)
    print("\n| correction | session pairs | finalists' RMS between sessions | within 5 % | worst |")
    print("|---|---|---|---|---|")
    for line in reproducibility(medians):
        print(line)


if __name__ == "__main__":
    main()
