"""Is a network's latency one number on this device? (§4, docs/method.md D34, D39)

Takes a finished run's held-out test networks (results/lut/<device>/predictions.parquet): the `--networks` slowest
and as many around the median latency. Every network is visited `--visits` times in shuffled order over one session,
each visit timed as profiling times a chunk (the config's repeats, warm-up and min_time_ms; the minimum of the
passes, D42) twice — in a session opened once and kept (`same`) and in one opened for the visit (`fresh`) — and
the reference network right after (D27). Reported per group and per slow network: the spread of the visits'
minima, raw and divided by the reference's, over the network's prediction. If the slowest networks spread far more
than the median ones, their held-out error is the device's, not the table's. Run it alone on the machine.

    PYTHONPATH=. python bench/large_network_stability.py --device onnxruntime RUN_DIR
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from aows_core.config import load, space_from_config, stage_settings
from aows_core.devices import get_device
from aows_core.latency.protocol import reference_config


def pick(pred: pd.DataFrame, k: int) -> pd.DataFrame:
    """The k slowest predicted held-out networks and k around the median, labelled by group."""
    pred = pred.sort_values("predicted_ms").reset_index(drop=True)
    mid = len(pred) // 2
    return pd.concat([pred.iloc[mid - k // 2: mid - k // 2 + k].assign(group="median"),
                      pred.iloc[-k:].assign(group="slowest")], ignore_index=True)


def spread(x: np.ndarray) -> str:
    """Standard deviation and p90 ÷ p10 of a network's visit ratios, in %."""
    return f"{100 * np.std(x):.1f} % / {100 * (np.quantile(x, 0.9) / np.quantile(x, 0.1) - 1):.1f} %"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", required=True)
    ap.add_argument("--networks", type=int, default=6)
    ap.add_argument("--visits", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("run")
    args = ap.parse_args()
    cfg = load(f"{args.run}/config.yaml")
    space = space_from_config(cfg)
    prof = cfg["profiling"]
    nets = pick(pd.read_parquet(f"{args.run}/results/lut/{args.device}/predictions.parquet"), args.networks)
    dev = get_device(dict(stage_settings(cfg, "profile", args.device)["devices"][args.device]), space, args.seed)
    chunk = (int(prof["repeats"]), int(prof["warmup"]), float(prof["min_time_ms"]) / 1e3)
    ref_ch = list(reference_config(space))
    rows, t0 = [], time.time()
    try:
        ref, kept = dev.open(ref_ch), [dev.open(list(c)) for c in nets.channels]
        order = [(v, i) for v in range(args.visits) for i in range(len(nets))]
        np.random.default_rng(args.seed).shuffle(order)
        for v, i in order:
            same = float(np.min(kept[i](*chunk)))
            fresh_timer = dev.open(list(nets.channels[i]))
            fresh = float(np.min(fresh_timer(*chunk)))
            fresh_timer.close()
            r = float(np.min(ref(*chunk)))
            rows.append({"i": i, "visit": v, "same": same, "fresh": fresh, "ref": r})
    finally:
        for t in [ref, *kept]:
            t.close()
        dev.close()
    d = pd.DataFrame(rows).merge(nets[["group", "config_id", "predicted_ms", "measured_ms"]], left_on="i",
                                 right_index=True)
    ref_med = d.ref.median()
    for col in ("same", "fresh"):
        d[col + "_raw"] = d[col] / d.predicted_ms
        d[col + "_paired"] = d[col] / d.ref * ref_med / d.predicted_ms
    print(f"{args.device}, {args.run}: {len(nets)} networks × {args.visits} visits, {time.time() - t0:.0f} s, "
          f"reference {100 * np.std(d.ref / ref_med):.1f} % std over the visits\n")
    print("| group | predicted ms | std over visits, same session: raw / ÷ reference | fresh session: raw / ÷ reference |"
          " median visit ÷ predicted | profile ÷ predicted (RMS) |")
    print("|---|---|---|---|---|---|")
    for g, x in d.groupby("group", sort=False):
        per = x.groupby("i")
        cell = {c: float(np.sqrt(np.mean(per[c].apply(lambda s: np.var(s.values))))) for c in
                ("same_raw", "same_paired", "fresh_raw", "fresh_paired")}
        prof_rms = np.sqrt(np.mean((per.measured_ms.first() / per.predicted_ms.first() - 1) ** 2))
        print(f"| {g} | {x.predicted_ms.min():.3f}–{x.predicted_ms.max():.3f} | {100 * cell['same_raw']:.1f} / "
              f"{100 * cell['same_paired']:.1f} % | {100 * cell['fresh_raw']:.1f} / {100 * cell['fresh_paired']:.1f} % |"
              f" {np.median(x.same_paired):.3f} | {100 * prof_rms:.1f} % |")
    print("\n| config | group | predicted ms | profile ÷ predicted | same ÷ ref: median (std / p90÷p10) | fresh ÷ ref |")
    print("|---|---|---|---|---|---|")
    for i, x in d.groupby("i"):
        print(f"| {int(x.config_id.iloc[0])} | {x.group.iloc[0]} | {x.predicted_ms.iloc[0]:.3f} | "
              f"{x.measured_ms.iloc[0] / x.predicted_ms.iloc[0]:.3f} | {np.median(x.same_paired):.3f} "
              f"({spread(x.same_paired.values)}) | {np.median(x.fresh_paired):.3f} ({spread(x.fresh_paired.values)}) |")


if __name__ == "__main__":
    main()
