"""Stages: one module per `aows <stage>` and Snakemake rule (being filled by the redesign)."""

from ._legacy import check_target, decide_baseline, decode, fit_lut, greedy, read_lut, sample, validate_lut  # noqa: F401
