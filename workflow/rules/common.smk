"""Helpers shared by the rules: per-stage settings, their hashes, and input functions.

Nothing heavy is imported here (aows_core.config needs only PyYAML and jsonschema).
"""

import json

from aows_core.config import settings_hash, stage_settings


def settings(stage, device=None):
    """Params of a rule: the JSON settings its stage reads (its hash reruns it on change)."""
    return lambda wildcards: json.dumps(
        stage_settings(config, stage, device or wildcards.get("device")),
        sort_keys=True,
    )


def stamp(stage, device=None):
    """Hash of a stage's settings and aows's version (Snakemake does not track package code)."""
    return lambda wildcards: settings_hash(
        stage_settings(config, stage, device or wildcards.get("device"))
    )


def unaries_of(wildcards):
    """OWS: one supernet for every device and target; AOWS: one per (device, target)."""
    if wildcards.method == "ows":
        return "results/supernet/ows/unaries.parquet"
    return (
        f"results/supernet/aows/{wildcards.device}/{wildcards.target}/unaries.parquet"
    )
