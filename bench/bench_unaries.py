"""Which unaries explain the supernet? The training-time estimate of eq. average_error against the frozen-weight
estimate (docs/method.md D26), on one trained OWS supernet, side by side in one run.

A. Spearman between Σδ and the BN-recalibrated cross-entropy of 100 random configurations on the
   search-validation images (the check `aows proxy` records), for the training-time unaries of the last
   epoch and for the frozen estimate; with the width signal Σδ(min) − Σδ(max) ± its standard error of each.
B. The mixed-batch BatchNorm bias (issue 12, defect 6): the same configurations' per-sample cross-entropy in
   a mixed batch (per-sample masking, train-mode BN over the active samples, as in training) and alone in a
   batch (sliced network, train-mode BN over that batch), on the same images; the difference regressed on
   the configuration's mean width fraction (positive slope: mixed batches penalise wide widths).
C. The cost of the frozen estimate: seconds for --configs configurations.

    PYTHONPATH=. python bench/bench_unaries.py --config config.yaml --run results/supernet/ows
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import linregress

from aows_core import artifacts
from aows_core.artifacts.readers import node_deltas
from aows_core.config import data_spec, load, space_from_config
from aows_core.data import first_images, load_splits
from aows_core.nets.estimation import frozen_differences
from aows_core.nets.supernet import Supernet
from aows_core.nets.widths import widths_tensor
from aows_core.search.sampler import uniform_layer_indices
from aows_core.search.unaries import fit_additive, width_signal
from aows_core.stages._supernet import supernet_scorer
from aows_core.stages.proxy import unaries_check
from aows_core.training.accelerator import Accelerator


def training_unaries(path: Path, space):
    """Node unaries and per-cell standard errors of the last epoch's training-time rows."""
    t = artifacts.read_table(path, "unaries")[0].to_pandas()
    t = t[(t.estimator == "training") & (t.epoch == t.epoch.max())]
    u = node_deltas(space, t.layer.values, t.width.values, t["count"].values, t.delta.values, path, epoch=0)
    se = np.zeros((space.n_layers, max(len(c) for c in space.layer_choices)))
    for r in t.itertuples():
        se[r.layer, space.layer_choices[r.layer].index(r.width)] = r.delta_se
    return u, se


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--run", default="results/supernet/ows", help="folder of the OWS run (model.pt, unaries.parquet)")
    ap.add_argument("--configs", type=int, default=800, help="configurations of the frozen estimate")
    ap.add_argument("--mixed", type=int, default=16, help="mixed batches of part B")
    args = ap.parse_args()
    cfg = load(args.config)
    space = space_from_config(cfg)
    run = Path(args.run)
    torch.set_num_threads(int(cfg["supernet"]["threads"]))
    d = cfg["data"]
    cpu = Accelerator(torch.device("cpu"), "fp32")  # the figures in docs/method.md D26: CPU, float32
    scorer = supernet_scorer(cfg, run / "model.pt", space, cpu, n_eval=int(d["search_val"]), n_cal=int(d["calibration"]),
                             batch_size=250)
    model: Supernet = scorer.model
    splits = load_splits(data_spec(cfg))
    x, y = first_images(splits.train_batches(int(cfg["supernet"]["epochs"]) - 1), int(cfg["supernet"]["estimate_images"]))
    out: dict = {}

    # A: both estimates against the supernet itself
    u_train, se_train = training_unaries(run / "unaries.parquet", space)
    idx = uniform_layer_indices(space, args.configs, np.random.default_rng([int(cfg["seed"]), 0xBE]))
    t = time.perf_counter()
    diffs = frozen_differences(model, x, y, [space.layer_channels(i) for i in idx], int(cfg["supernet"]["estimate_batch"]))
    fit = fit_additive(space, idx, diffs)
    out["C_frozen_estimate_seconds"] = time.perf_counter() - t
    lo, hi = [0] * space.n_layers, [len(c) - 1 for c in space.layer_choices]
    rows = np.arange(space.n_layers)
    train_sig = float(sum(u_train[i + 1][0] - u_train[i + 1][-1] for i in rows))
    train_se = float(np.sqrt((se_train[rows, lo] ** 2).sum() + (se_train[rows, hi] ** 2).sum()))
    for name, u, sig in (("training", u_train, {"width_signal": train_sig, "width_signal_se": train_se}),
                         ("frozen", fit.node_unaries(), width_signal(fit))):
        chk = unaries_check(space, u, scorer, cfg, cpu)
        out[f"A_{name}"] = {"spearman": chk["spearman_sum_delta_vs_supernet_ce"], **sig}

    # B: mixed-batch vs single-configuration BatchNorm, same images and configurations
    model.train()
    B = int(cfg["supernet"]["batch_size"])
    gaps, frac = [], []
    with torch.no_grad():
        for k in range(args.mixed):
            xb, yb = x[(k * B) % (len(x) - B):][:B], y[(k * B) % (len(y) - B):][:B]
            bidx = uniform_layer_indices(space, B, np.random.default_rng([int(cfg["seed"]), 0xB6, k]))
            mixed = F.cross_entropy(model(xb, widths_tensor(space, bidx)), yb, reduction="none")
            for j in range(0, B, max(1, B // 8)):  # 8 configurations per batch, each alone on the same batch
                ch = space.layer_channels(bidx[j])
                alone = F.cross_entropy(model.forward_sliced(xb, ch, update_stats=False), yb, reduction="none")
                gaps.append(float(mixed[j] - alone[j]))
                frac.append(float(np.mean([bidx[j][i] / (len(c) - 1) for i, c in enumerate(space.layer_choices)])))
    reg = linregress(frac, gaps)
    out["B_mixed_minus_alone"] = {"mean": float(np.mean(gaps)), "slope_per_width_fraction": float(reg.slope),
                                  "slope_se": float(reg.stderr), "n": len(gaps)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
