"""`aows validate-lut`: the latency table on held-out networks (§7)."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from . import add_config

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
    from ..config import space_from_config
    from ..devices.flops import network_macs
    from ..latency import lut
    from ..latency.calm import held_out
    from ..latency.metrics import latency_metrics, retest_reach, table_adequacy, validation_rows
    from ..latency.protocol import speed_dependent_noise
    from ..search.link import Link

    latency, lut_path = inputs["latency"], inputs["lut"]
    space = space_from_config(config)
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
    disturbed, limit = held_out(cols)
    idx_tr, l_tr, _ = sets["train"]
    if len(l_te) == 0:
        raise artifacts.ArtifactError(f"{latency}: has no test rows to validate on")
    pred = lut.predict(space, x, idx_te, Link.from_meta(tmeta))
    flops_tr = np.array([network_macs(space, space.channels_of(k)) for k in idx_tr])
    flops_te = np.array([network_macs(space, space.channels_of(k)) for k in idx_te])
    rows, m_lut, m_flops, a, base = validation_rows(pred, l_te, flops_tr, l_tr, flops_te)
    noise = {k: lmeta[k] for k in ("sigma_n", "retest_pairs", "retest_within_5pct", "retest_within_10pct", "pairing",
                                   "max_noise", "reference_instability", "too_noisy", "noise_message", "retimed")}
    adequacy = table_adequacy(pred, l_te, float(lmeta["sigma_n"] or 0.0))
    by_speed = lmeta.get("sigma_n_by_speed")  # absent in latency files written before D34
    noise["retest_nrmse"] = lmeta.get("retest_nrmse")  # absent before D39
    adequacy.update(sigma_n_by_speed=by_speed, speed_message=speed_dependent_noise(by_speed))
    retested = np.asarray(cols["role"]) == "retest"
    adequacy.update(retest_reach(pred, l_te, np.asarray(cols["latency_ms"], dtype=np.float64)[retested], lmeta["unit"]))
    calm = ~disturbed
    if disturbed.any() and calm.sum() >= 2:  # the table on the held-out networks timed undisturbed (D43)
        m_calm = latency_metrics(pred[calm], l_te[calm])
        rows.append({"model": "lut_calm", "n": int(calm.sum()), **m_calm})
        c = table_adequacy(pred[calm], l_te[calm], float(lmeta["sigma_n"] or 0.0))
        # the table's own error is judged where the host left the timings alone; the interval stays every network's
        adequacy.update(calm_rel_rms=c["rel_rms"], model_error=c["model_error"], model_limited=c["model_limited"],
                        model_message=(f"on the {int(calm.sum())} held-out networks timed calm, " + c["model_message"]
                                       if c["model_limited"] else ""),
                        disturbed_message=disturbed_note(
                            int(disturbed.sum()), len(l_te), limit, m_calm, c["rel_rms"], float(lmeta["sigma_n"] or 0.0),
                            latency_metrics(pred[disturbed], l_te[disturbed], tau=False)["nrmse"]))
    adequacy.update(test_disturbed=int(disturbed.sum()), disturbed_limit=limit if np.isfinite(limit) else None)
    meta = artifacts.provenance(
        space,
        device,
        fingerprint=lmeta["fingerprint"],
        unit=lmeta["unit"],
        lam=tmeta.get("lam"),
        link=tmeta.get("link"),
        flops_ms_per_mmac=float(a),
        **noise,
        **adequacy,
    )
    artifacts.write_records(rows, outputs["out"], "lut_validation", meta)
    predictions = {
        "config_id": ids_te.tolist(),
        "channels": [space.channels_of(k) for k in idx_te],
        "measured_ms": l_te.tolist(),
        "predicted_ms": pred.tolist(),
        "flops_baseline_ms": base.tolist(),
        "disturbed": disturbed.tolist(),
    }
    artifacts.write_records(predictions, outputs["predictions"], "lut_predictions", meta)
    artifacts.save_figure(report.lut_validation(l_te, pred, base, meta, disturbed), outputs["plot"])
    return {"lut": m_lut, "flops_proportional": m_flops, **noise, **adequacy}


def disturbed_note(n_disturbed: int, n: int, limit: float, m_calm: Mapping[str, float], calm_rms: float,
                   sigma_n: float, nrmse_disturbed: float) -> str:
    """The held-out networks timed while the host disturbed them, and the table on them and on the others (D43)."""
    return (f"{n_disturbed} of {n} held-out networks were timed while the host disturbed them (chunk ratios spread "
            f"> 3× those of the networks of their latency, median limit {100 * limit:.1f} %, after re-timing): NRMSE "
            f"{100 * nrmse_disturbed:.2f} % on them. On the {n - n_disturbed} timed calm: NRMSE "
            f"{100 * m_calm['nrmse']:.2f} %, relative RMS {100 * calm_rms:.2f} % ({calm_rms / max(sigma_n, 1e-12):.2f} "
            f"σ_n), {100 * m_calm['within_10pct']:.1f} % within ±10 %, Kendall τ {m_calm['kendall_tau']:.3f}")


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    m, f = r["lut"], r["flops_proportional"]
    print(
        f"test: NRMSE {100 * m['nrmse']:.2f} % (FLOPs-proportional {100 * f['nrmse']:.2f} %), "
        f"{100 * m['within_10pct']:.1f} % within ±10 %, Kendall τ {m['kendall_tau']:.3f}; "
        f"noise floor σ_n {100 * (r['sigma_n'] or 0):.2f} %"
        + ("" if r["retest_nrmse"] is None else f" (as NRMSE: {100 * r['retest_nrmse']:.2f} %)")
        + f", retest pairs within ±10 %: {100 * (r['retest_within_10pct'] or 0):.1f} %"
    )
    if r["too_noisy"]:
        print(f"WARNING: {r['noise_message']}")
    if r["model_limited"]:
        print(f"NOTE: {r['model_message']}")
    if r["speed_message"]:
        print(f"NOTE: {r['speed_message']}")
    if r["reach_message"]:
        print(f"NOTE: {r['reach_message']}")
    if r.get("disturbed_message"):
        print(f"NOTE: {r['disturbed_message']}")
