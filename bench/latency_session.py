"""Shared by the latency benchmarks: the benchmark config, one profile → fit-lut → validate-lut session, and a refit of
a recorded session's timings with other `lut` settings."""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ContextManager

from aows_core.config import validate
from aows_core.stages import fit_lut, validate_lut
from aows_core.stages.profile import run as profile


def bench_config(quick: bool) -> dict:
    """The default config (or, `quick`, a small space and few networks)."""
    raw: dict = {}
    if quick:
        raw = {"space": {"width_mult": 0.25, "n_choices": 3}, "sampling": {"coverage": 2, "lambda_val": 10, "test": 20},
               "profiling": {"repeats": 5, "retest": 8, "min_time_ms": 5}}
    return validate(raw)


def latency_session(cfg: dict, device: str, name: str, d: Path,
                    during: ContextManager | None = None) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Profile d/configs.parquet on `device` (inside `during`, e.g. a background load), fit and validate the LUT;
    returns (profile result, validation result, profiling wall seconds). Files are d/{name}*.parquet."""
    t0 = time.perf_counter()
    with during or nullcontext():
        res = profile(cfg, {"configs": d / "configs.parquet"}, {"out": d / f"{name}.parquet"}, device=device,
                      resume_dir=d / f"resume_{name}", progress=False)
    wall = time.perf_counter() - t0
    fit_lut.run(cfg, {"latency": d / f"{name}.parquet"},
                {"out": d / f"{name}_lut.parquet", "report": d / f"{name}_fit.parquet"}, device=device)
    v = validate_lut.run(cfg, {"latency": d / f"{name}.parquet", "lut": d / f"{name}_lut.parquet"},
                         {"out": d / f"{name}_val.parquet", "predictions": d / f"{name}_pred.parquet",
                          "plot": d / f"{name}_val.pdf"}, device=device)
    return res, v, wall


def recorded_sets(root: str, device: str, lut_overrides: dict) -> tuple[Any, dict, dict, dict[str, Any]]:
    """A recorded run's timings (root/config.yaml, root/results/latency/<device>.parquet) split as `aows fit-lut`
    splits them under the run's `lut` settings with `lut_overrides`: (space, sets, latency metadata, lut settings)."""
    from aows_core import artifacts
    from aows_core.config import load, space_from_config
    from aows_core.latency import lut

    cfg = load(f"{root}/config.yaml")
    space = space_from_config(cfg)
    table, meta = artifacts.read_latency(f"{root}/results/latency/{device}.parquet", space, device)
    lut_cfg = {**cfg["lut"], **lut_overrides}
    sets = lut.split_sets(space, lut.columns_of(table))
    return space, sets, meta, lut_cfg


def recorded_refit(root: str, device: str, lut_overrides: dict) -> tuple[Any, dict[str, float], float, float, Any]:
    """Fit a recorded run's timings as `aows fit-lut` does with `lut_overrides` (`recorded_sets`); returns (chosen
    fit, held-out test metrics, σ_n, fit seconds, (space, test indices))."""
    from aows_core.config import LutSettings
    from aows_core.latency import fit, lut
    from aows_core.latency.metrics import latency_metrics

    space, sets, meta, lut_cfg = recorded_sets(root, device, lut_overrides)
    idx_te, l_te, _ = sets["test"]
    t0 = time.perf_counter()
    f = fit.fit_table(space, sets, LutSettings.from_mapping(lut_cfg)).fit
    wall = time.perf_counter() - t0
    return f, latency_metrics(lut.predict(space, f.x, idx_te, f.link), l_te), float(meta["sigma_n"]), wall, (space, idx_te)
