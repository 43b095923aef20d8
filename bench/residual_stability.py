"""Is a latency table's error timing noise or a property of the networks? (§4, docs/method.md D34)

Fits each run's table as `aows fit-lut` does and compares the relative residuals, log(measured ÷ predicted), of
the networks the runs share (the same seed profiles the same networks): noise is independent between sessions,
a stable non-additivity is not. It then asks whether cheap non-additive features of the widths explain the
residual averaged over the runs (fitted on the training and λ-validation networks, scored on the test networks),
and how much the nearest profiled networks predict it.

    PYTHONPATH=. python bench/residual_stability.py --device onnxruntime RUN_DIR RUN_DIR [RUN_DIR ...]

RUN_DIR is a run's root: its config.yaml and results/latency/<device>.parquet.
"""

from __future__ import annotations

import argparse

import numpy as np

from aows_core import artifacts
from aows_core.config import LutSettings, load, space_from_config
from aows_core.latency import fit, lut

SETS = ("train", "lambda_val", "test")


def residuals(root: str, device: str) -> tuple[dict, float, object]:
    """{(set, width indices): log(measured / predicted)} of one run's table, its σ_n and the space."""
    cfg = load(f"{root}/config.yaml")
    space = space_from_config(cfg)
    table, meta = artifacts.read_latency(f"{root}/results/latency/{device}.parquet", space, device)
    sets = lut.split_sets(space, lut.columns_of(table))
    chosen = fit.fit_table(space, sets, LutSettings.from_mapping(cfg["lut"])).fit
    out = {}
    for name in SETS:
        configs, measured = sets[name][:2]
        predicted = chosen.predict(lut.design_matrix(space, configs))
        for c, m, p in zip(configs, measured, predicted):
            out[(name, tuple(int(i) for i in c))] = float(np.log(m / p))
    return out, float(meta["sigma_n"]), space


def ridge_rms(f_fit: np.ndarray, r_fit: np.ndarray, f_test: np.ndarray, r_test: np.ndarray, lam: float = 0.1) -> float:
    """RMS of the test residual left after a ridge regression on the features (with an intercept)."""
    a = np.column_stack([f_fit, np.ones(len(f_fit))])
    b = np.column_stack([f_test, np.ones(len(f_test))])
    w = np.linalg.solve(a.T @ a + lam * np.eye(a.shape[1]), a.T @ r_fit)
    return float(np.sqrt(np.mean((r_test - b @ w) ** 2)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", required=True)
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    if len(args.runs) < 2:
        ap.error("give at least two runs (sessions) of the same space and seed")

    runs = [residuals(r, args.device) for r in args.runs]
    space = runs[0][2]
    shared = set.intersection(*(set(r[0]) for r in runs))
    print(f"device {args.device}; {len(args.runs)} sessions, σ_n " + ", ".join(f"{100 * r[1]:.2f} %" for r in runs)
          + f"; {len(shared)} networks profiled in every session")
    print("\n| set | networks | RMS relative residual per session | correlation between sessions (min–max) |")
    print("|---|---|---|---|")
    for name in SETS:
        keys = sorted(k for k in shared if k[0] == name)
        r = np.array([[run[0][k] for run in runs] for k in keys])
        c = np.corrcoef(r.T)[np.triu_indices(len(runs), 1)]
        rms = ", ".join(f"{100 * v:.2f} %" for v in np.sqrt((r ** 2).mean(0)))
        print(f"| {name} | {len(keys)} | {rms} | {c.min():.2f}–{c.max():.2f} |")

    n_choices = np.array([len(c) for c in space.choices])
    searchable = np.flatnonzero(n_choices > 1)

    def data(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        keys = sorted(k for k in shared if k[0] in names)
        w = np.array([np.array(k[1]) / np.maximum(n_choices - 1, 1) for k in keys])[:, searchable]
        return w, np.array([np.mean([run[0][k] for run in runs]) for k in keys])

    w_fit, r_fit = data(("train", "lambda_val"))
    w_test, r_test = data(("test",))
    base = float(np.sqrt(np.mean(r_test ** 2)))

    def pairs(w: np.ndarray, dists: set[int]) -> np.ndarray:
        cols = [w[:, i] * w[:, j] for i in range(w.shape[1]) for j in range(i + 1, w.shape[1]) if j - i in dists]
        return np.column_stack(cols)

    def global_stats(w: np.ndarray) -> np.ndarray:
        s = w.sum(1)
        return np.column_stack([s, s ** 2, w.max(1), w.min(1), w.std(1)])

    features = {
        "products of widths two layers apart": lambda w: pairs(w, {2}),
        "products two and three layers apart": lambda w: pairs(w, {2, 3}),
        "all products of non-adjacent layers": lambda w: pairs(w, set(range(2, w.shape[1]))),
        "global: sum, sum², max, min, spread of the widths": global_stats,
    }
    print(f"\nSession-averaged residual of the {len(r_test)} test networks: RMS {100 * base:.2f} %.")
    print("\n| features (ridge, fitted on training + λ-validation networks) | test RMS left |")
    print("|---|---|")
    for name, f in features.items():
        print(f"| {name} | {100 * ridge_rms(f(w_fit), r_fit, f(w_test), r_test):.2f} % |")
    idx_fit = np.rint(w_fit * (n_choices[searchable] - 1))
    idx_test = np.rint(w_test * (n_choices[searchable] - 1))
    dist = np.abs(idx_test[:, None, :] - idx_fit[None, :, :]).sum(-1)
    for k in (1, 5, 20):
        near = np.argsort(dist, 1)[:, :k]
        corr = np.corrcoef(r_fit[near].mean(1), r_test)[0, 1]
        print(f"| mean residual of the {k} nearest profiled networks (L1 on width indices) | correlation {corr:.2f} |")


if __name__ == "__main__":
    main()
