"""`aows decide-baseline`: baseline decisions, the greedy trajectory or uniform multipliers."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from . import add_config

COMMAND = "decide-baseline"
HELP = "baseline decisions: greedy trajectory or uniform multipliers"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("lut", "trajectory", "latency")
OUTPUTS = ("out",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p, timing=True)
    p.add_argument("--device", required=True)
    p.add_argument("--method", choices=["greedy", "uniform"], required=True)
    p.add_argument("--lut", required=True)
    p.add_argument("--trajectory", help="greedy: the greedy_trajectory parquet")
    p.add_argument("--latency", help="the latency file the LUT was fitted on: each decision is verified on the device "
                   "(docs/method.md D36); without it, decided on the LUT alone")
    p.add_argument("--target", action="append", required=True, help="'4.5ms', '325mflops' or 'range:0.3'; repeatable")
    p.add_argument("--out", required=True)


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, device: str, method: str,
        target: list[str]) -> list[dict[str, Any]]:
    """Decisions of a baseline: `greedy` (first trajectory point meeting the target, D22) or `uniform` multipliers,
    each verified on the device when the latency file is given (D36)."""
    from .. import artifacts
    from ..config import resolve
    from ..search.baselines import decide_greedy, decide_uniform
    from ._verify import LutFile, decide_verified

    settings = resolve(config)
    space = settings.space
    lut = LutFile.read(inputs["lut"], space, device)
    tmeta = lut.meta
    extra: dict[str, Any] = {}
    if method == "greedy":
        trajectory = inputs.get("trajectory")
        if trajectory is None:
            raise ValueError("the greedy baseline needs --trajectory (the greedy_trajectory parquet)")
        table, gmeta = artifacts.read_trajectory(trajectory, space)
        configs = table.column("channels").to_pylist()
        extra = {"trajectory_meta": gmeta}

        def decide_one(table, t):
            return decide_greedy(space, configs, table, [t])[0]
    elif method == "uniform":
        def decide_one(table, t):
            return decide_uniform(space, table, [t])[0]
    else:
        raise ValueError(f"unknown baseline {method!r}; expected 'greedy' or 'uniform'")
    rows, verification = decide_verified(settings, lut, inputs.get("latency"), decide_one, target)
    artifacts.write_decisions(rows, outputs["out"], {
        "space_name": space.name, "space_hash": space.hash, "device": device, "fingerprint": tmeta.get("fingerprint"),
        "unit": tmeta.get("unit"), "lut_lambda": tmeta.get("lam"), "verification": verification, **extra,
    })
    return rows


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from ._verify import print_verification

    for r in rows:
        print(f"{r['method']} @ {r['target']} ({r['target_ms']:.4g} {r['unit']}): {r['channels']} predicted "
              f"{r['predicted_latency_ms']:.4g}")
    print_verification(getattr(args, "out", None))
