"""`aows space`: print a search space (a preset's, or the configured one)."""

from __future__ import annotations

import argparse
import json as _json
from typing import Any, Mapping

from . import add_config

COMMAND = "space"
HELP = "print a search space"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS: tuple[str, ...] = ()
OUTPUTS: tuple[str, ...] = ()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", help="preset name (default: the config's space)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_config(p)


def needs_config(args: argparse.Namespace) -> bool:
    """The configuration is read only when no preset is named."""
    return not args.preset


def run(config: Mapping[str, Any] | None, inputs: Mapping[str, Any], outputs: Mapping[str, Any], *,
        preset: str | None = None, json: bool = False) -> dict[str, Any]:
    """The space's description (`SearchSpace.describe`) with its multiplier-1.0 network's MACs and parameters."""
    from ..config import resolve
    from ..devices.flops import network_macs, network_params
    from ..space import get_space

    space = get_space(preset) if preset else resolve(config).space
    base = space.base_config
    return {**space.describe(), "base_config": base, "base_macs": network_macs(space, base),
            "base_params": network_params(space, base)}


def report(d: dict[str, Any], args: argparse.Namespace) -> None:
    if args.json:
        print(_json.dumps(d, indent=2))
    else:
        print(f"{d['name']} (hash {d['hash']}): {d['n_layers']} searchable widths, {d['resolution']} input, "
              f"{d['n_variables']} latency variables for {d['n_slots']} slots, {d['size']:.3e} configurations")
        print(f"  multiplier 1.0: {d['base_macs'] / 1e6:.1f} MMAC, {d['base_params'] / 1e6:.3f} M parameters")
        for n in d["nodes"][1:-1]:
            tied = f", tied across blocks {n['written_by_blocks']}" if n["tied"] else ""
            print(f"  layer {n['node'] - 1:2d} ({n['role']}{tied}): {n['choices']}")
