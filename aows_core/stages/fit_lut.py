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
    """Fit the LUT on the train set, choosing λ, μ and the link on lambda_val only (§4 eq. linear_lat + soft prior,
    D5–D7, D38, D39)."""
    from .. import artifacts
    from ..config import resolve
    from ..latency import fit, lut

    latency = inputs["latency"]
    settings = resolve(config)
    space = settings.space
    table, lmeta = artifacts.read_latency(latency, space, device)
    sets = lut.split_sets(space, lut.columns_of(table))
    l_tr, l_val = sets["train"][1], sets["lambda_val"][1]
    if len(l_tr) == 0 or len(l_val) == 0:
        raise artifacts.ArtifactError(f"{latency}: needs train and lambda_val rows; found {len(l_tr)} and {len(l_val)}")
    exact = None
    if lmeta.get("analytic"):  # FLOPs decompose exactly over layers (§7.2): the table is known
        from ..devices.flops import variable_macs

        exact = variable_macs(space) * lmeta["device_spec"].get("batch_size", 1) / 1e6
    table_fit = fit.fit_table(space, sets, settings.lut, exact=exact)
    chosen, rows, row = table_fit.fit, table_fit.rows, table_fit.row
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
        lam=chosen.lam,
        smoothness=chosen.mu,
        link=chosen.link.to_meta(),
        ridge=settings.lut.ridge,
        n_train=int(len(l_tr)),
        n_lambda_val=int(len(l_val)),
        n_inequalities=int(lut.monotonicity_matrix(space).shape[0]),
        train_rmse_ms=row["train_rmse_ms"],
        val_rmse_ms=row["val_rmse_ms"],
        val_nrmse=row["val_nrmse"],
        formulation=("latency = g(Ax); min ||Ax - l||^2 + lam*||max(Vx, 0)||_1 + mu*||Dx||^2 + ridge*||x||^2 "
                     "s.t. x >= 0 (OSQP, residual form)"),
    )
    artifacts.write_records(lut.lut_records(space, chosen.x, table_fit.n_obs), outputs["out"], "lut", meta)
    artifacts.write_records(rows, outputs["report"], "lut_fit",
                            {k: meta[k] for k in ("space_hash", "device", "unit", "aows_version")})
    return {"lambda": chosen.lam, "link": meta["link"], **{k: row[k] for k in ("train_rmse_ms", "val_rmse_ms", "val_nrmse")}}


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"wrote {args.out}: λ = {r['lambda']:.3g}, lambda_val RMSE {r['val_rmse_ms']:.4g} ({100 * r['val_nrmse']:.2f} %)")
    if r["link"]:
        print(f"  networks above {r['link']['knot_ms']:.4g} (additive) cost {1 + r['link']['slope']:.3g}× their layers' "
              f"sum beyond it: the link g of docs/method.md D39 (lut.link_knots)")
