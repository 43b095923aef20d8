"""`aows fit-lut`: fit a device's latency table (§4 eq. linear_lat)."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from . import add_config

COMMAND = "fit-lut"
HELP = "fit the latency table (§4)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("latency",)
OUTPUTS = ("out", "report")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--device", required=True)
    p.add_argument("--latency", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--report", required=True)


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, device: str) -> dict[str, Any]:
    """Fit the LUT on the train set, choosing λ on lambda_val only (§4 eq. linear_lat + soft prior, D5–D8)."""
    from .. import artifacts
    from ..config import space_from_config
    from ..latency import fit, lut
    from ..latency.calm import exclusion_note, fit_sets

    latency = inputs["latency"]
    space = space_from_config(config)
    table, lmeta = artifacts.read_latency(latency, space, device)
    sets, calm = fit_sets(space, lut.columns_of(table), config["lut"])
    l_tr, l_val = sets["train"][1], sets["lambda_val"][1]
    if len(l_tr) == 0 or len(l_val) == 0:
        raise artifacts.ArtifactError(f"{latency}: needs train and lambda_val rows; found {len(l_tr)} and {len(l_val)}")
    exact = None
    if lmeta.get("analytic"):  # FLOPs decompose exactly over layers (§7.2): the table is known
        from ..devices.flops import variable_macs

        exact = variable_macs(space) * lmeta["device_spec"].get("batch_size", 1) / 1e6
    best, results, rows, keep, n_obs = fit.fit_table(space, sets, config["lut"], exact=exact)
    chosen = results[best]
    meta = artifacts.provenance(
        space,
        device,
        fingerprint=lmeta["fingerprint"],
        unit=lmeta["unit"],
        unit_short=lmeta["unit_short"],
        statistic=lmeta["statistic"],
        protocol=lmeta["protocol"],
        reference_channels=lmeta["reference_channels"],
        reference_baseline=lmeta["reference_baseline"],
        sigma_n=lmeta["sigma_n"],
        pairing=lmeta["pairing"],
        too_noisy=lmeta["too_noisy"],
        rounds=lmeta["rounds"],
        rounds_stopped=lmeta["rounds_stopped"],
        lam=chosen.lam,
        smoothness=chosen.mu,
        link=chosen.link.to_meta(),
        ridge=config["lut"]["ridge"],
        n_train=int(len(l_tr)),
        n_outliers=int((~keep).sum()),
        outlier_threshold=config["lut"]["outlier_threshold"],
        n_lambda_val=int(len(l_val)),
        disturbed=calm,
        disturbed_note=exclusion_note(calm),
        n_inequalities=int(lut.monotonicity_matrix(space).shape[0]),
        train_rmse_ms=rows[best]["train_rmse_ms"],
        val_rmse_ms=rows[best]["val_rmse_ms"],
        val_nrmse=rows[best]["val_nrmse"],
        weighting=config["lut"]["weighting"],
        formulation=("min ||W(Ax - l)||^2 + lam*||max(Vx, 0)||_1 + ridge*||x||^2 s.t. x >= 0 (OSQP, residual form; "
                     + ("W = diag(median(l)/l))" if config["lut"]["weighting"] == "relative" else "W = I)")),
    )
    artifacts.write_records(lut.lut_records(space, chosen.x, n_obs), outputs["out"], "lut", meta)
    artifacts.write_records(rows, outputs["report"], "lut_fit",
                            {k: meta[k] for k in ("space_hash", "device", "unit", "aows_version", "rounds", "rounds_stopped")})
    return {"lambda": chosen.lam, "link": meta["link"],
            **{k: rows[best][k] for k in ("train_rmse_ms", "val_rmse_ms", "val_nrmse")},
            "rounds": meta["rounds"], "rounds_stopped": meta["rounds_stopped"], "disturbed_note": meta["disturbed_note"]}


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"wrote {args.out}: λ = {r['lambda']:.3g}, lambda_val RMSE {r['val_rmse_ms']:.4g} ({100 * r['val_nrmse']:.2f} %)")
    if r["link"]:
        print(f"  networks above {r['link']['knot_ms']:.4g} (additive) cost {1 + r['link']['slope']:.3g}× their layers' "
              f"sum beyond it: the link g of docs/method.md D39 (lut.link_knots)")
    print(f"  {r['disturbed_note']}")
    if r["rounds"]:
        print(f"  profiled in {len(r['rounds'])} rounds (" + ", ".join(
            f"{h['train_networks']} networks" + ("" if h["val_nrmse"] is None else f": {100 * h['val_nrmse']:.2f} %")
            for h in r["rounds"]) + f"); {r['rounds_stopped']}")
