"""Stages as plain Python functions: read artifacts, run the algorithm, write artifacts.

`aows <stage>` and the Snakemake rules call these; each checks that its inputs belong to the
configured space and device before computing anything.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from .. import io
from ..config import space_from_config
from ..profiling import read_latency
from ..space import SearchSpace, multiplier_configs

SETS = ("train", "lambda_val", "test")


def sample(config: Mapping[str, Any], out: str | os.PathLike) -> dict[str, int]:
    """Write the profiling configurations: train (coverage-biased), lambda_val and test (uniform) (§4, supp. A)."""
    from ..sampling import config_sets, coverage_lower_bound

    space = space_from_config(config)
    s = config["sampling"]
    sets = config_sets(space, config["seed"], s["coverage"], s["lambda_val"], s["test"])
    rows, counts = [], {}
    for name in SETS:
        idx = sets[name]
        counts[name] = len(idx)
        sampler = "biased" if name == "train" else "uniform"
        for k in idx:
            rows.append({"config_id": len(rows), "channels": space.channels_of(k), "set": name, "sampler": sampler})
        if name == "train" and s["anchors"]:  # the uniform multipliers, min and max included, if not sampled already
            seen = {tuple(r["channels"]) for r in rows}
            for _, ch in multiplier_configs(space):
                if tuple(ch) not in seen:
                    rows.append({"config_id": len(rows), "channels": list(ch), "set": "train", "sampler": "anchor"})
                    seen.add(tuple(ch))
                    counts["anchors"] = counts.get("anchors", 0) + 1
    meta = io.provenance(
        space_name=space.name,
        space_hash=space.hash,
        space=space.to_dict(),
        seed=config["seed"],
        sampling=dict(s),
        sampler="train: coverage-biased (supplementary A) plus, if sampling.anchors, the uniform multipliers "
        "(sampler 'anchor'); lambda_val, test: uniform",
        coverage_lower_bound=int(coverage_lower_bound(space, s["coverage"])),
    )
    io.write_records(rows, out, "configs", meta)
    return counts


def _sets(space: SearchSpace, table) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per set: node indices, drift-corrected latencies and config ids of the `sample` rows."""
    role = np.asarray(table.column("role").to_pylist())
    sets = np.asarray(table.column("set").to_pylist(), dtype=object)
    chans = table.column("channels").to_pylist()
    lat = table.column("latency_ms").to_numpy()
    ids = table.column("config_id").to_numpy()
    out = {}
    for name in SETS:
        sel = np.flatnonzero((role == "sample") & (sets == name))
        idx = np.stack([space.indices(chans[i]) for i in sel]) if len(sel) else np.zeros((0, space.n_nodes), int)
        out[name] = (idx, lat[sel], ids[sel])
    return out


def fit_lut(
    config: Mapping[str, Any], device: str, latency: str | os.PathLike, out: str | os.PathLike, report: str | os.PathLike
) -> dict[str, Any]:
    """Fit the LUT on the train set, choosing λ on lambda_val only (§4 eq. linear_lat + soft prior)."""
    from .. import lut

    space = space_from_config(config)
    table, lmeta = read_latency(latency, space, device)
    sets = _sets(space, table)
    idx_tr, l_tr, _ = sets["train"]
    idx_val, l_val, _ = sets["lambda_val"]
    if len(l_tr) == 0 or len(l_val) == 0:
        raise io.ArtifactError(f"{latency}: needs train and lambda_val rows; found {len(l_tr)} and {len(l_val)}")
    A_tr = lut.design_matrix(space, idx_tr)
    A_val = lut.design_matrix(space, idx_val)
    V = lut.monotonicity_matrix(space)
    n_obs = lut.observation_counts(A_tr)
    lut.check_coverage(space, n_obs)
    if lmeta.get("analytic"):
        # FLOPs decompose exactly over layers (§7.2): the table is known, nothing to fit; the λ scan
        # report still says how well it reproduces the profiled networks.
        from ..devices.flops import variable_macs

        exact = variable_macs(space) * lmeta["device_spec"].get("batch_size", 1) / 1e6
        fit = lut.exact_result(exact)
        best, results, rows = 0, [fit], [lut.scan_row(fit, A_tr, l_tr, A_val, l_val, chosen=True)]
        keep = np.ones(len(l_tr), dtype=bool)
    else:
        best, results, rows, keep = lut.robust_lambda_scan(
            A_tr, l_tr, A_val, l_val, V, config["lut"]["lambdas"], ridge=config["lut"]["ridge"],
            threshold=config["lut"]["outlier_threshold"],
        )
    n_obs = lut.observation_counts(A_tr[keep])
    chosen = results[best]
    meta = io.provenance(
        space_name=space.name,
        space_hash=space.hash,
        device=device,
        fingerprint=lmeta["fingerprint"],
        unit=lmeta["unit"],
        unit_short=lmeta["unit_short"],
        statistic=lmeta["statistic"],
        protocol=lmeta["protocol"],
        reference_channels=lmeta["reference_channels"],
        reference_baseline=lmeta["reference_baseline"],
        sigma_n=lmeta["sigma_n"],
        lam=chosen.lam,
        ridge=config["lut"]["ridge"],
        n_train=int(len(l_tr)),
        n_outliers=int((~keep).sum()),
        outlier_threshold=config["lut"]["outlier_threshold"],
        n_lambda_val=int(len(l_val)),
        n_inequalities=int(V.shape[0]),
        train_rmse_ms=rows[best]["train_rmse_ms"],
        val_rmse_ms=rows[best]["val_rmse_ms"],
        val_nrmse=rows[best]["val_nrmse"],
        formulation="min ||Ax - l||^2 + lam*||max(Vx, 0)||_1 + ridge*||x||^2 s.t. x >= 0 (OSQP, residual form)",
    )
    io.write_records(lut.lut_records(space, chosen.x, n_obs), out, "lut", meta)
    io.write_records(rows, report, "lut_fit", {k: meta[k] for k in ("space_hash", "device", "unit", "aows_version")})
    return {"lambda": chosen.lam, **{k: rows[best][k] for k in ("train_rmse_ms", "val_rmse_ms", "val_nrmse")}}


def read_lut(path: str | os.PathLike, space: SearchSpace, device: str | None = None) -> tuple[np.ndarray, dict]:
    """A LUT artifact as a vector over the space's variables; refused if from another space or (given) device."""
    from .. import lut

    table, meta = io.read_table(path, "lut")
    if meta.get("space_hash") != space.hash:
        raise io.ArtifactError(
            f"{path} is a latency table of space {meta.get('space_name')!r} (hash {meta.get('space_hash')}), "
            f"not of the configured {space.name!r} (hash {space.hash}); fit a table for this space"
        )
    if device is not None and meta.get("device") != device:
        raise io.ArtifactError(
            f"{path} is the latency table of device {meta.get('device')!r}, not {device!r}; pass "
            f"results/lut/{device}/lut.parquet"
        )
    try:
        return lut.lut_vector(space, table), meta
    except lut.LUTFitError as e:
        raise io.ArtifactError(f"{path}: {e}; refit the table with `aows fit-lut`") from e


def validate_lut(
    config: Mapping[str, Any],
    device: str,
    latency: str | os.PathLike,
    lut_path: str | os.PathLike,
    out: str | os.PathLike,
    predictions: str | os.PathLike,
    plot: str | os.PathLike,
) -> dict[str, Any]:
    """Held-out test metrics of the LUT beside the noise floor and a FLOPs-proportional baseline (§7)."""
    from .. import lut, plots
    from ..devices.flops import network_macs

    space = space_from_config(config)
    table, lmeta = read_latency(latency, space, device)
    x, tmeta = read_lut(lut_path, space, device)
    if tmeta.get("fingerprint") != lmeta.get("fingerprint"):
        raise io.ArtifactError(
            f"{lut_path} was fitted on timings from another device fingerprint than {latency}:\n"
            f"  LUT: {tmeta.get('fingerprint')}\n  latency file: {lmeta.get('fingerprint')}\nValidate a table with timings of the same device."
        )
    sets = _sets(space, table)
    idx_te, l_te, ids_te = sets["test"]
    idx_tr, l_tr, _ = sets["train"]
    if len(l_te) == 0:
        raise io.ArtifactError(f"{latency}: has no test rows to validate on")
    pred = lut.predict(space, x, idx_te)
    flops_tr = np.array([network_macs(space, space.channels_of(k)) for k in idx_tr])
    flops_te = np.array([network_macs(space, space.channels_of(k)) for k in idx_te])
    a = lut.flops_baseline(flops_tr, l_tr)
    base = a * flops_te
    m_lut = lut.latency_metrics(pred, l_te)
    m_flops = lut.latency_metrics(base, l_te)
    rows = [{"model": "lut", "n": len(l_te), **m_lut}, {"model": "flops_proportional", "n": len(l_te), **m_flops}]
    noise = {k: lmeta.get(k) for k in ("sigma_n", "retest_pairs", "retest_within_5pct", "retest_within_10pct")}
    meta = io.provenance(
        space_name=space.name,
        space_hash=space.hash,
        device=device,
        fingerprint=lmeta["fingerprint"],
        unit=lmeta["unit"],
        lam=tmeta.get("lam"),
        flops_ms_per_mmac=float(a),
        **noise,
    )
    io.write_records(rows, out, "lut_validation", meta)
    io.write_records(
        {
            "config_id": ids_te.tolist(),
            "channels": [space.channels_of(k) for k in idx_te],
            "measured_ms": l_te.tolist(),
            "predicted_ms": pred.tolist(),
            "flops_baseline_ms": base.tolist(),
        },
        predictions,
        "lut_predictions",
        meta,
    )
    plots.lut_validation(predictions, plot)
    return {"lut": m_lut, "flops_proportional": m_flops, **noise}


def decode(
    config: Mapping[str, Any],
    device: str,
    method: str,
    unaries: str | os.PathLike,
    lut_path: str | os.PathLike,
    targets: list[str],
    out: str | os.PathLike,
    epoch: int | None = None,
) -> list[dict[str, Any]]:
    """Decisions of `method` for each target from a unaries artifact and a device's LUT (§5 eq. lagrange)."""
    from ..decode import decide, read_unaries, write_decisions

    space = space_from_config(config)
    x, tmeta = read_lut(lut_path, space, device)
    u, umeta, chosen = read_unaries(unaries, space, epoch)
    d = config["decode"]
    rows = decide(space, u, x, targets, method=method, device=device, unit=tmeta["unit_short"],
                  policy=d["unvisited"], exact=d["exact"], epoch=chosen)
    write_decisions(rows, out, {
        "space_name": space.name, "space_hash": space.hash, "device": device, "fingerprint": tmeta.get("fingerprint"),
        "unit": tmeta.get("unit"), "lut_lambda": tmeta.get("lam"), "unaries_meta": umeta, "decode": dict(d),
    })
    return rows


def check_target(config: Mapping[str, Any], device: str, lut_path: str | os.PathLike, target: str, out: str | os.PathLike) -> float:
    """Resolve one target against a device's LUT and refuse it, naming the minimum, if no network meets it."""
    import json

    from ..chain import InfeasibleTarget
    from ..decode import latency_range, resolve_target

    space = space_from_config(config)
    x, meta = read_lut(lut_path, space, device)
    value = resolve_target(target, space, x, meta["unit_short"])
    lo, hi, fastest, _ = latency_range(space, x)
    unit = meta["unit_short"]
    if value < lo:
        raise InfeasibleTarget(
            f"target {target!r} = {value:.4g} {unit} is below the smallest latency any network of the space reaches on "
            f"device {device!r}: {lo:.4g} {unit} (configuration {fastest}); choose a target ≥ {lo:.4g}"
            f"{'ms' if unit == 'ms' else 'mflops'} "
            f"or a relative one such as 'range:0.2'",
            lo,
        )
    tmp = f"{out}.tmp"
    with open(tmp, "w") as fh:
        json.dump({"device": device, "target": target, "target_value": value, "unit": unit, "min": lo, "max": hi}, fh)
    os.replace(tmp, out)
    return value


def greedy(config: Mapping[str, Any], model: str | os.PathLike, out: str | os.PathLike, progress: bool = True) -> list[dict]:
    """The AutoSlim greedy trajectory of the OWS supernet (§3); independent of any LUT."""
    from ..greedy import greedy_trajectory

    return greedy_trajectory(config, model, out, progress=progress)


def decide_baseline(
    config: Mapping[str, Any],
    device: str,
    method: str,
    lut_path: str | os.PathLike,
    targets: list[str],
    out: str | os.PathLike,
    trajectory: str | os.PathLike | None = None,
) -> list[dict[str, Any]]:
    """Decisions of a baseline: `greedy` (first trajectory point meeting the target) or `uniform` multipliers."""
    from ..baselines import decide_greedy, decide_uniform
    from ..decode import write_decisions

    space = space_from_config(config)
    x, tmeta = read_lut(lut_path, space, device)
    unit = tmeta["unit_short"]
    extra: dict[str, Any] = {}
    if method == "greedy":
        if trajectory is None:
            raise ValueError("the greedy baseline needs --trajectory (the greedy_trajectory parquet)")
        from .. import greedy as _  # noqa: F401  (registers the greedy_trajectory schema)

        table, gmeta = io.read_table(trajectory, "greedy_trajectory")
        if gmeta.get("space_hash") != space.hash:
            raise io.ArtifactError(f"{trajectory} belongs to space {gmeta.get('space_hash')}, not {space.hash}")
        rows = decide_greedy(space, table.column("channels").to_pylist(), x, targets, device=device, unit=unit)
        extra = {"trajectory_meta": gmeta}
    elif method == "uniform":
        rows = decide_uniform(space, x, targets, device=device, unit=unit)
    else:
        raise ValueError(f"unknown baseline {method!r}; expected 'greedy' or 'uniform'")
    write_decisions(rows, out, {
        "space_name": space.name, "space_hash": space.hash, "device": device, "fingerprint": tmeta.get("fingerprint"),
        "unit": tmeta.get("unit"), "lut_lambda": tmeta.get("lam"), **extra,
    })
    return rows
