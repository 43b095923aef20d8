"""Every latency-side mechanism switched off alone, on fresh profiling sessions of the default space
(docs/experiments.md, "Mechanisms removed, and the measurement that decided each"; bench/README.md, "What the
latency side keeps").

`sessions`: profiles the default config's configurations on each device, `--sessions` times, alternating devices,
under the config's protocol with every mechanism on, and keeps each session's journal (every timing, re-timings
included). Each variant is then computed from the same timings, so variants differ by the mechanism alone, not by the
host's mood:

    default       the config as it is
    no-retime     the first timing of every job (re-timing off: neither disturbed jobs, D27, nor spells, D47)
    no-spell      the jobs timed in one of the host's spells not timed again (D47 off; D27's re-timing kept)
    no-smooth     lut.smoothness [0] (the smoothness prior off, D38)
    no-link       lut.link_knots [] (the link off, D39)

The mechanisms removed on this evidence (rounds, the host stretch, outlier rejection, relative weights, the
exclusion of disturbed timings) were variants of this script at commit af2c3b6, where the table was measured.
Per variant: σ_n, held-out NRMSE, share within ±10 %, Kendall τ and profiling time (the timed jobs' seconds), per
session and as median over sessions with the session-to-session spread (half the range).

`finalists RUN`: the decisions of a run (RUN/results/decisions/<device>/…), each timed as `measure` times it (paired
rounds, disturbed jobs timed again, corrected to the LUT's reference baseline) with the network it decided before
verification (D36, the first row of its trace), in `--sessions` sessions: each session's noise across rounds with
its re-timings merged as aows merges them and left out (no-retime), from the same timings; and the finalists within
5 % of their prediction, verified and unverified.

    python bench/ablation.py sessions --sessions 4 --out /tmp/ablation        # ~20 min on 2 cores, alone
    python bench/ablation.py analyze /tmp/ablation --lean no-retime no-link    # the table again, no timing
    python bench/ablation.py finalists /tmp/run --device cpu --sessions 4      # after a default run in /tmp/run

`settle RUN`: the measuring session timed on until its last rounds are as quiet as the profile (D46), against the
session that stops after its rounds, from the same timings: each of `--sessions` sessions starts right after `--heat`
seconds of a two-thread matrix-product loop (the host as a training leaves it); its first `measure.rounds` rounds are
the session without the rule, the rounds it keeps the session with it. Round noise (no re-timing in either), the
rounds and seconds it took, and the verified finalists within 5 % of their prediction.

    python bench/ablation.py settle /tmp/run --sessions 4 --heat 240          # ~25 min on 2 cores, alone
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from aows_core import artifacts
from aows_core.artifacts import journal
from aows_core.config import LutSettings, ProfilingSettings, load, space_from_config
from aows_core.latency.fit import fit_table
from aows_core.latency.lut import predict, split_sets
from aows_core.latency.metrics import latency_metrics
from aows_core.latency.protocol import (
    QuietTarget,
    correct,
    measure_plan,
    merge_retimed,
    quiet_limit,
    retest_noise,
    retime_jobs,
    round_noise,
    settle_rounds,
    spell_level,
    time_jobs,
)
from aows_core.stages import sample
from aows_core.stages.profile import run as profile

ROOT = Path(__file__).resolve().parents[1]
FIT_VARIANTS = {"no-smooth": {"smoothness": [0.0]}, "no-link": {"link_knots": []}}
TIMING_VARIANTS = {"no-retime": {"retime": False}, "no-spell": {"spell": False}}
VARIANTS = ["default", *TIMING_VARIANTS, *FIT_VARIANTS]
COLUMNS = ("role", "set", "channels", "latency_ms", "config_id")


def run_sessions(cfg: dict, devices: list[str], n: int, out: Path) -> None:
    """`n` sessions per device, alternating devices; each session's latency file and journal kept in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "configs.parquet").exists():
        sample.run(cfg, {}, {"out": out / "configs.parquet"})
    keep = journal.Journal.remove
    journal.Journal.remove = lambda self: None  # the variants are computed from every timing, re-timings included
    try:
        for k in range(n):
            for device in devices:
                name = f"{device}_{k}"
                if (out / f"{name}.parquet").exists():
                    continue
                t0 = time.perf_counter()
                res = profile(cfg, {"configs": out / "configs.parquet"}, {"out": out / f"{name}.parquet"},
                              device=device, resume_dir=out / f"resume_{name}", progress=False)
                print(f"{name}: σ_n {100 * res['sigma_n']:.2f} %, {res['total']} jobs ({res['retimed']} timed "
                      f"again; {res['timed_in_spell']} timed in a spell at first, {res['left_in_spell']} at the end), "
                      f"{time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        journal.Journal.remove = keep


def timings(out: Path, name: str) -> list[dict]:
    """The journal's timings of session `name`, re-timings included."""
    lines = (out / f"resume_{name}" / f"profile_{name.rsplit('_', 1)[0]}.jsonl").read_text().splitlines()
    return [json.loads(s) for s in lines[1:]]


def corrected(raw: list[dict], retime: bool = True, spell: bool = True) -> tuple[list[dict], float]:
    """The session's corrected rows as `aows profile` writes them, re-timing left out unless `retime`, the re-timing
    of spells (D47) unless `spell`; and the seconds its timed jobs took."""
    plain = [dict(r) for r in raw if r["role"] != "retime"]
    level = spell_level(plain) if spell else None  # None: no spell re-timed (off, or a session mostly in spells)
    again = [dict(r) for r in raw
             if retime and r["role"] == "retime" and (level is not None or r.get("cause") != "spell")]
    seconds = sum(r["timed_s"] + r["overhead_s"] for r in plain + again)
    rows, _ = correct(merge_retimed(plain, again, level))
    return rows, seconds


def figures(space, rows: list[dict], lut_cfg: dict, seconds: float) -> dict[str, float]:
    """σ_n, held-out metrics of the table fitted as `fit-lut` fits it, and the profiling seconds."""
    sets = split_sets(space, {k: [r[k] for r in rows] for k in COLUMNS})
    f = fit_table(space, sets, LutSettings.from_mapping(lut_cfg)).fit
    idx, l_te, _ = sets["test"]
    m = latency_metrics(predict(space, f.x, idx, f.link), l_te)
    return {"sigma_n": retest_noise(rows)["sigma_n"], "nrmse": m["nrmse"], "within_10pct": m["within_10pct"],
            "kendall_tau": m["kendall_tau"], "seconds": seconds}


def analyze(cfg: dict, out: Path, lean: list[str]) -> list[dict]:
    """Every variant of every session in `out`: one row each."""
    space = space_from_config(cfg)
    found = []
    for p in sorted(out.glob("*.parquet")):
        if p.stem == "configs":
            continue
        table, _ = artifacts.read_table(p, "latency")  # noqa: F841 (a complete session's file)
        if (out / f"resume_{p.stem}").exists():
            found.append(p.stem)
    out_rows = []
    for name in found:
        raw = timings(out, name)
        device = name.rsplit("_", 1)[0]
        variants = {v: (TIMING_VARIANTS.get(v, {}), FIT_VARIANTS.get(v, {})) for v in VARIANTS}
        if lean:
            t = {k: v for name_ in lean for k, v in TIMING_VARIANTS.get(name_, {}).items()}
            f = {k: v for name_ in lean for k, v in FIT_VARIANTS.get(name_, {}).items()}
            variants["lean"] = (t, f)
        for v, (tv, fv) in variants.items():
            rows, seconds = corrected(raw, **tv)
            out_rows.append({"session": name, "device": device, "variant": v,
                             **figures(space, rows, {**cfg["lut"], **fv}, seconds)})
            r = out_rows[-1]
            print(f"  {name:14s} {v:13s} σ_n {100 * r['sigma_n']:5.2f} %  NRMSE {100 * r['nrmse']:5.2f} %  "
                  f"±10 % {100 * r['within_10pct']:5.1f} %  τ {r['kendall_tau']:.3f}  {r['seconds']:.0f} s", flush=True)
    return out_rows


def table(rows: list[dict]) -> None:
    """Median over sessions and half the session-to-session range, per device and variant; the change against default
    per session (median), which is what decides a mechanism."""
    print("\n| device | variant | sessions | σ_n | held-out NRMSE | within ±10 % | Kendall τ | profiling s | "
          "ΔNRMSE vs default (median, range) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for device in sorted({r["device"] for r in rows}):
        mine = [r for r in rows if r["device"] == device]
        base = {r["session"]: r for r in mine if r["variant"] == "default"}
        for v in dict.fromkeys(r["variant"] for r in mine):
            rs = [r for r in mine if r["variant"] == v]

            def cell(key: str, pct: bool = True, fmt: str = ".2f") -> str:
                a = np.array([r[key] for r in rs]) * (100 if pct else 1)
                return f"{np.median(a):{fmt}} ± {(a.max() - a.min()) / 2:{fmt}}"

            d = np.array([100 * (r["nrmse"] - base[r["session"]]["nrmse"]) for r in rs])
            print(f"| {device} | {v} | {len(rs)} | {cell('sigma_n')} % | {cell('nrmse')} % | "
                  f"{cell('within_10pct', fmt='.1f')} % | {cell('kendall_tau', False, '.3f')} | "
                  f"{cell('seconds', False, '.0f')} | {np.median(d):+.2f} ({d.min():+.2f} … {d.max():+.2f}) |")


def decided_networks(run: Path, device: str) -> list[dict]:
    """Each decision of a run: its finalist's name, and its (channels, prediction) verified and as first decided."""
    decided = []
    for p in sorted((run / "results/decisions" / device).glob("*/*.parquet")):
        table, meta = artifacts.read_table(p, "decisions")
        trace = {v["target"]: v["trace"] for v in (meta.get("verification") or {}).get("targets", [])}
        for r in table.to_pylist():
            t = trace.get(r["target"])
            if t is None:
                continue
            decided.append({"finalist": f"{r['method']} {r['target']}",
                            "verified": (tuple(r["channels"]), r["predicted_latency_ms"]),
                            "unverified": (tuple(t[0]["channels"]), t[0]["predicted_ms"])})
    return decided


def within_5pct(decided: list[dict], rows: list[dict], nets: list[tuple], baseline: float, key: str) -> int:
    """How many decisions' `key` network (verified or unverified) measure within 5 % of their prediction."""
    corrected, _ = correct([dict(r) for r in rows], baseline)
    per: dict[int, list[float]] = {}
    for r in corrected:
        per.setdefault(r["network"], []).append(r["latency_ms"])
    measured = {n: float(np.median(per[i])) for i, n in enumerate(nets)}
    return sum(abs(d[key][1] / measured[d[key][0]] - 1) <= 0.05 for d in decided)


def heat(seconds: float) -> None:
    """A two-thread matrix-product loop for `seconds`: the host's state right after a training."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    a, t0 = torch.randn(1024, 1024), time.time()
    while time.time() - t0 < seconds:
        a = torch.tanh(a @ a / 32)
    torch.set_num_threads(threads)


def settle(run: Path, device: str, sessions: int, heat_s: float, config: Path | None = None) -> None:
    """Each session after `heat_s` seconds of load: the measuring session as `measure` times it, its first rounds
    (without D46) against the rounds D46 keeps, from the same timings."""
    from aows_core.devices import get_device

    cfg = load(config or run / "config.yaml")
    space = space_from_config(cfg)
    _, lmeta = artifacts.read_table(run / "results/latency" / f"{device}.parquet", "latency")
    decided = decided_networks(run, device)
    nets = sorted({d["verified"][0] for d in decided})
    protocol, rounds = ProfilingSettings.from_mapping(cfg["profiling"]), int(cfg["measure"]["rounds"])
    baseline = float(lmeta["reference_baseline"])
    target = QuietTarget(baseline, quiet_limit(float(lmeta["sigma_n"]), float(lmeta["max_noise"])),
                         float(cfg["measure"]["settle_s"]))
    print(f"{device}: profile σ_n {100 * lmeta['sigma_n']:.2f} %, quiet below {100 * target.quiet:.2f} %, "
          f"{len(nets)} networks, {rounds} rounds, settle_s {target.budget_s:g}", flush=True)
    for k in range(sessions):
        heat(heat_s)
        dev = get_device(dict(cfg["devices"][device]), space, int(cfg["seed"]))
        try:
            jobs = measure_plan(nets, rounds, int(cfg["seed"]) + k, False)
            first = time_jobs(dev, jobs, protocol, space)
            _, kept, s = settle_rounds(dev, jobs, first, protocol, space, int(cfg["seed"]) + k, target)
        finally:
            dev.close()
        print(f"session {k}: round noise without D46 {100 * s.noise[0]:.2f} % "
              f"({within_5pct(decided, first, nets, baseline, 'verified')}/{len(decided)} within 5 %), with it "
              f"{100 * s.noise[-1]:.2f} % ({within_5pct(decided, kept, nets, baseline, 'verified')}/{len(decided)}) "
              f"after {s.rounds_timed} rounds, {s.extra_s:.0f} s more; settled {s.settled}", flush=True)


def finalists(run: Path, device: str, rounds: int, sessions: int, config: Path | None = None) -> None:
    """Verified and unverified finalists of a default run timed as `measure` times them (D36), in `sessions` sessions:
    each session's noise across rounds with its re-timings merged as aows does and left out; the finalists within
    5 % of their prediction."""
    from aows_core.devices import get_device

    cfg = load(config or run / "config.yaml")
    space = space_from_config(cfg)
    _, lmeta = artifacts.read_table(run / "results/latency" / f"{device}.parquet", "latency")
    decided = decided_networks(run, device)
    nets = sorted({d[k][0] for d in decided for k in ("verified", "unverified")})
    protocol = ProfilingSettings.from_mapping(cfg["profiling"])
    noise: dict[str, list[float]] = {"default": [], "no-retime": []}
    for k in range(sessions):
        dev = get_device(dict(cfg["devices"][device]), space, int(cfg["seed"]))
        try:
            jobs = measure_plan(nets, rounds, int(cfg["seed"]) + k, False)
            rows = time_jobs(dev, jobs, protocol, space)
            again = retime_jobs(jobs, rows, protocol, False)
            retimed = time_jobs(dev, again, protocol, space)
        finally:
            dev.close()
        retimings = [{**r, "retime_of": j.retime_of} for r, j in zip(retimed, again)]
        per_variant = {}
        for v, merged in (("default", retimings), ("no-retime", [])):
            vrows, _ = correct(merge_retimed(rows, merged), float(lmeta["reference_baseline"]))
            per: dict[int, list[float]] = {}
            for r in vrows:
                per.setdefault(r["network"], []).append(r["latency_ms"])
            noise[v].append(round_noise(per))
            per_variant[v] = per
        print(f"session {k}: round noise " + ", ".join(f"{v} {100 * x[-1]:.2f} %" for v, x in noise.items())
              + f" ({len(again)} of {len(jobs)} jobs timed again)", flush=True)
        measured = {n: float(np.median(per_variant["default"][i])) for i, n in enumerate(nets)}
        counts = {"verified": 0, "unverified": 0}
        for d in decided:
            for key in ("unverified", "verified"):
                ch, pred = d[key]
                counts[key] += abs(pred / measured[ch] - 1) <= 0.05
        print(f"  within 5 % of prediction — unverified {counts['unverified']}/{len(decided)}, "
              f"verified {counts['verified']}/{len(decided)} ({rounds} rounds)", flush=True)
    print(f"{device}: round noise over {sessions} sessions, median (range): " + ", ".join(
        f"{v} {100 * np.median(x):.2f} % ({100 * min(x):.2f}–{100 * max(x):.2f})" for v, x in noise.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("sessions")
    s.add_argument("--sessions", type=int, default=4)
    s.add_argument("--devices", nargs="+", default=["cpu", "onnxruntime"])
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--lean", nargs="*", default=[])
    s.add_argument("--json", type=Path, default=None)
    s.add_argument("--configfile", type=Path, default=ROOT / "config.yaml", help="the config (default: the default's)")
    a = sub.add_parser("analyze")
    a.add_argument("out", type=Path)
    a.add_argument("--lean", nargs="*", default=[])
    a.add_argument("--json", type=Path, default=None)
    a.add_argument("--configfile", type=Path, default=ROOT / "config.yaml", help="the config the sessions used")
    f = sub.add_parser("finalists")
    f.add_argument("run", type=Path)
    f.add_argument("--device", default="cpu")
    f.add_argument("--rounds", type=int, default=5)
    f.add_argument("--sessions", type=int, default=3)
    f.add_argument("--configfile", type=Path, default=None, help="the run's config (default: RUN/config.yaml)")
    t = sub.add_parser("settle")
    t.add_argument("run", type=Path)
    t.add_argument("--device", default="cpu")
    t.add_argument("--sessions", type=int, default=4)
    t.add_argument("--heat", type=float, default=240.0, help="seconds of two-thread load before each session")
    t.add_argument("--configfile", type=Path, default=None, help="the run's config (default: RUN/config.yaml)")
    args = ap.parse_args()
    if args.mode == "finalists":
        finalists(args.run, args.device, args.rounds, args.sessions, args.configfile)
        return
    if args.mode == "settle":
        settle(args.run, args.device, args.sessions, args.heat, args.configfile)
        return
    cfg = load(args.configfile)
    if args.mode == "sessions":
        run_sessions(cfg, args.devices, args.sessions, args.out)
    rows = analyze(cfg, args.out, args.lean)
    table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
