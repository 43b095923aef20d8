"""`aows validate-lut`: the latency table on held-out networks (§7)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Mapping

from . import add_config

if TYPE_CHECKING:
    import numpy as np

    from ..search.link import Link
    from ..space import SearchSpace

COMMAND = "validate-lut"
HELP = "validate the latency table on held-out networks (§7)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("latency", "lut")
OUTPUTS = ("out", "predictions", "plot")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--latency", required=True)
    p.add_argument("--lut", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--predictions", required=True)
    p.add_argument("--plot", required=True)


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, device: str) -> dict[str, Any]:
    """Held-out test metrics of the LUT beside the noise floor and a FLOPs-proportional baseline (§7)."""
    import numpy as np

    from .. import artifacts, report
    from ..config import resolve
    from ..devices.flops import network_macs
    from ..latency import lut
    from ..latency.metrics import SessionNoise, adequacy, validation_rows
    from ..search.link import Link

    latency, lut_path = inputs["latency"], inputs["lut"]
    space = resolve(config).space
    table, lmeta = artifacts.read_latency(latency, space, device)
    x, tmeta = artifacts.read_lut(lut_path, space, device)
    if tmeta.get("fingerprint") != lmeta.get("fingerprint"):
        raise artifacts.ArtifactError(
            f"{lut_path} was fitted on timings from another device fingerprint than {latency}:\n"
            f"  LUT: {tmeta.get('fingerprint')}\n  latency file: {lmeta.get('fingerprint')}\nValidate a table with timings of the same device."
        )
    cols = lut.columns_of(table)
    sets = lut.split_sets(space, cols)
    idx_te, l_te, ids_te = sets["test"]
    idx_tr, l_tr, _ = sets["train"]
    if len(l_te) == 0:
        raise artifacts.ArtifactError(f"{latency}: has no test rows to validate on")
    pred = lut.predict(space, x, idx_te, Link.from_meta(tmeta))
    flops_tr = np.array([network_macs(space, space.channels_of(k)) for k in idx_tr])
    flops_te = np.array([network_macs(space, space.channels_of(k)) for k in idx_te])
    rows, m_lut, m_flops, a, base = validation_rows(pred, l_te, flops_tr, l_tr, flops_te)
    noise = {k: lmeta.get(k) for k in ("sigma_n", "retest_pairs", "retest_within_5pct", "retest_within_10pct",
                                       "retest_nrmse", "max_noise", "too_noisy", "noise_message", "retimed")}
    retested = np.asarray(cols["latency_ms"], dtype=np.float64)[np.asarray(cols["role"]) == "retest"]
    verdict = adequacy(pred, l_te, SessionNoise(float(lmeta["sigma_n"] or 0.0), retested, lmeta.get("noise_message") or ""),
                       unit=lmeta.get("unit_short", "ms"), span=latency_span(space, x, Link.from_meta(tmeta)), device=device)
    meta = artifacts.provenance(
        space,
        device,
        fingerprint=lmeta["fingerprint"],
        unit=lmeta["unit"],
        lam=tmeta.get("lam"),
        link=tmeta.get("link"),
        flops_ms_per_mmac=float(a),
        adequacy=verdict,
        **noise,
    )
    artifacts.write_records(rows, outputs["out"], "lut_validation", meta)
    predictions = {
        "config_id": ids_te.tolist(),
        "channels": [space.channels_of(k) for k in idx_te],
        "measured_ms": l_te.tolist(),
        "predicted_ms": pred.tolist(),
        "flops_baseline_ms": base.tolist(),
    }
    artifacts.write_records(predictions, outputs["predictions"], "lut_predictions", meta)
    artifacts.save_figure(report.lut_validation(l_te, pred, base, meta), outputs["plot"])
    return {"lut": m_lut, "flops_proportional": m_flops, **noise, "adequacy": verdict}


def latency_span(space: SearchSpace, x: np.ndarray, link: Link) -> float:
    """L(max config) ÷ L(min config) as the table predicts them (eq. lat): how far apart the space's widths lie."""
    import numpy as np

    from ..latency import lut

    ends = lut.predict(space, x, np.stack([space.indices(space.max_config), space.indices(space.min_config)]), link)
    return float(ends[0] / ends[1])


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    m, f = r["lut"], r["flops_proportional"]
    print(
        f"test: NRMSE {100 * m['nrmse']:.2f} % (FLOPs-proportional {100 * f['nrmse']:.2f} %), "
        f"{100 * m['within_10pct']:.1f} % within ±10 %, Kendall τ {m['kendall_tau']:.3f}; "
        f"noise floor σ_n {100 * (r['sigma_n'] or 0):.2f} %"
        + ("" if r["retest_nrmse"] is None else f" (as NRMSE: {100 * r['retest_nrmse']:.2f} %)")
        + f", retest pairs within ±10 %: {100 * (r['retest_within_10pct'] or 0):.1f} %"
    )
    word = {"width_unresolved": "WARNING", "too_noisy": "WARNING", "model_limited": "NOTE"}.get(
        r["adequacy"]["verdict"], "")
    print(f"{word + ': ' if word else ''}{r['adequacy']['message']}")
