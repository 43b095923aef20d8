"""Each decision of a finished run, from its first pick to its measured latency (docs/method.md D36).

Per decision (method, target) on a device: the first pick's error (predicted on the profiled table ÷ its verification
timing − 1: where the decoder lands before verification), the networks timed and refits made, how far under the
target the last decision aimed, the verified network's median and its upper bound against the target, and what the
run's `measure` session (a separate session, after the retraining) found: its error against the verified prediction
and whether it meets the target. Reads RUN/results/decisions/<device>/*/*.parquet and RUN/results/measure/<device>.parquet;
times nothing.

    python bench/decisions.py RUN --device cpu
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # aows_core from this checkout

from aows_core import artifacts  # noqa: E402


def rows_of(run: Path, device: str) -> list[dict]:
    """One row per verified decision, joined with its finalist's row of the measure session."""
    measured = {(r["method"], r["target"]): r
                for r in artifacts.read_table(run / "results/measure" / f"{device}.parquet", "measure")[0].to_pylist()}
    out = []
    for p in sorted((run / "results/decisions" / device).glob("*/*.parquet")):
        table, meta = artifacts.read_table(p, "decisions")
        verified = {v["target"]: v for v in (meta.get("verification") or {}).get("targets", [])}
        for r in table.to_pylist():
            v, m = verified.get(r["target"]), measured.get((r["method"], r["target"]))
            if v is None or m is None:
                continue
            first, last = v["trace"][0], v["trace"][-1]
            out.append({"method": r["method"], "target": r["target"], "target_ms": r["target_ms"],
                        "first_error": first["rel_error"], "timed": v["networks_timed"], "refits": len(v["trace"]) - 1,
                        "aim_under": 1 - last.get("aim_ms", r["target_ms"]) / r["target_ms"],
                        "verified_ms": last["measured_ms"], "verified_upper_ms": last.get("measured_upper_ms", last["measured_ms"]),
                        "converged": v["converged"], "measured_ms": m["measured_ms"], "measure_error": m["rel_error"],
                        "meets": m["meets_target_measured"]})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a finished run's working directory")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    rows = rows_of(args.run, args.device)
    if not rows:
        raise SystemExit(f"no verified decisions with a measured finalist in {args.run}/results (device {args.device})")
    print("| method | target | first pick's error | networks timed / refits | aimed under | verified median / "
          "upper bound ÷ target | measure's error | measured ÷ target |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        t = r["target_ms"]
        print(f"| {r['method']} | `{r['target']}` | {100 * r['first_error']:+.1f} % | {r['timed']} / {r['refits']} | "
              f"{100 * r['aim_under']:.1f} % | {r['verified_ms'] / t:.3f} / {r['verified_upper_ms'] / t:.3f} | "
              f"{100 * r['measure_error']:+.1f} % | {r['measured_ms'] / t:.3f}{'' if r['meets'] else ' ✗'} |")
    first = np.abs([r["first_error"] for r in rows])
    print(f"\nfirst picks: median |error| {100 * np.median(first):.1f} %, {int(np.sum(first <= 0.05))} of {len(rows)} "
          f"within 5 %; converged {sum(r['converged'] for r in rows)} of {len(rows)}; in measure "
          f"{sum(abs(r['measure_error']) <= 0.05 for r in rows)} of {len(rows)} within 5 % of prediction, "
          f"{sum(r['meets'] for r in rows)} of {len(rows)} meeting their target")


if __name__ == "__main__":
    main()
