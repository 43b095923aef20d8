"""`aows check-target`: refuse a target no network of the space meets on a device."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from . import add_config

COMMAND = "check-target"
HELP = "refuse a target no network of the space meets on a device"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("lut",)
OUTPUTS = ("out",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--lut", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--out", required=True)


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, device: str,
        target: str) -> float:
    """Resolve one target against a device's LUT; refuse it, naming the minimum, if no network meets it (D14)."""
    from .. import artifacts
    from ..config import resolve
    from ..search.link import Link
    from ..search.targets import check_feasible

    space = resolve(config).space
    x, meta = artifacts.read_lut(inputs["lut"], space, device)
    unit = meta["unit_short"]
    value, lo, hi = check_feasible(target, space, x, unit, device, Link.from_meta(meta))
    artifacts.write_json({"device": device, "target": target, "target_value": value, "unit": unit, "min": lo, "max": hi},
                         outputs["out"])
    return value


def report(value: float, args: argparse.Namespace) -> None:
    print(f"{args.device}: target {args.target} = {value:.4g} is feasible")
