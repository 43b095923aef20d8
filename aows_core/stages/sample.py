"""`aows sample`: the configurations to profile (§4, supplementary A)."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from . import add_config

COMMAND = "sample"
HELP = "sample the configurations to profile (§4, supplementary A)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS: tuple[str, ...] = ()
OUTPUTS = ("out",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--out", required=True)


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, int]:
    """Write the profiling configurations: train (coverage-biased), lambda_val and test (uniform) (§4, supp. A)."""
    from .. import artifacts
    from ..config import resolve
    from ..latency.sampling import config_rows, coverage_lower_bound

    settings = resolve(config)
    space, s = settings.space, settings.sampling
    rows, counts = config_rows(space, settings.seed, s)
    meta = artifacts.provenance(
        space.to_dict(),
        space_name=space.name,
        space_hash=space.hash,
        seed=settings.seed,
        sampling=s.to_dict(),
        sampler="train: coverage-biased (supplementary A) plus, if sampling.anchors, the uniform multipliers "
        "(sampler 'anchor'); lambda_val, test: uniform",
        coverage_lower_bound=int(coverage_lower_bound(space, s.coverage)),
    )
    artifacts.write_records(rows, outputs["out"], "configs", meta)
    return counts


def report(counts: dict[str, int], args: argparse.Namespace) -> None:
    print(f"wrote {args.out}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
