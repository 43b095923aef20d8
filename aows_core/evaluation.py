"""The results of a device (§7, Fig. pareto) as pure functions: intervals, Pareto flags, the joined table, proxies.

Per finalist (method × target) the decision's predicted latency, the device measurement (corrected to
the LUT's reference baseline), the retrained top-1 with its Wilson interval (one seed) or t-interval
over seeds, and the supernet proxies are joined into one row (docs/method.md D24, D25); the proxy
check of §3 assumption 1 uses Kendall τ. Numpy and scipy only; the stage reads and writes the files.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np


def wilson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n: Newcombe's (1998) form, exactly as scipy's
    `binomtest(k, n).proportion_ci(method="wilson")` computes it (tests/test_evaluation.py compares the two), with
    scipy.special's normal quantile: importing scipy.stats cost every retraining job 1.4 s (bench/README.md)."""
    from scipy.special import ndtri

    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 ≤ k ≤ n and n > 0, got k={k}, n={n}")
    p = k / n
    z = ndtri(0.5 + 0.5 * level)
    denom = 2 * (n + z**2)
    center = (2 * n * p + z**2) / denom
    delta = z / denom * math.sqrt(4 * n * p * (1 - p) + z**2)
    return float(0.0 if k == 0 else center - delta), float(1.0 if k == n else center + delta)


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean ± 95 % t-interval over seeds (two or more): (low, high, sample standard deviation)."""
    from scipy.stats import t

    accs = np.asarray(values)
    std = float(accs.std(ddof=1))
    half = float(t.ppf(0.975, len(accs) - 1)) * std / math.sqrt(len(accs))
    return float(accs.mean()) - half, float(accs.mean()) + half, std


def pareto_optimal(latency: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """Points no other point dominates (no slower-or-equal latency with strictly better accuracy, or vice versa)."""
    n = len(latency)
    keep = np.ones(n, bool)
    for i in range(n):
        better = (latency <= latency[i]) & (acc >= acc[i]) & ((latency < latency[i]) | (acc > acc[i]))
        keep[i] = not better.any()
    return keep


def join_results(device: str, measure_rows: Sequence[Mapping[str, Any]],
                 runs: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
                 proxies: Mapping[tuple[str, str], Mapping[str, Any]],
                 macs_of: Callable[[Sequence[int]], float]) -> list[dict[str, Any]]:
    """One row per measured finalist (§7): measurement, retrained accuracy (mean over seeds), proxies, Pareto flag.

    `runs` and `proxies` are keyed by (method, target); the stage has checked that every measured finalist
    has runs of its channels. `macs_of(channels)` gives a network's MACs (devices.flops.network_macs).
    """
    rows = []
    for m in measure_rows:
        key = (m["method"], m["target"])
        rs = runs[key]
        accs = np.array([r["test_acc"] for r in rs])
        if len(rs) == 1:
            lo, hi, std = rs[0]["test_acc_low"], rs[0]["test_acc_high"], float("nan")
        else:  # several seeds: mean ± t-interval over seeds
            lo, hi, std = t_interval(accs)
        p = proxies.get(key, {})
        rows.append({
            "method": m["method"], "device": device, "target": m["target"], "target_ms": m["target_ms"],
            "unit": m["unit"], "channels": list(m["channels"]), "mmacs": macs_of(m["channels"]) / 1e6,
            "predicted_ms": m["predicted_ms"], "measured_ms": m["measured_ms"],
            "measured_ms_min": m["measured_ms_min"], "measured_ms_max": m["measured_ms_max"],
            "meets_target_predicted": m["meets_target_predicted"], "meets_target_measured": m["meets_target_measured"],
            "too_noisy": m["too_noisy"], "seeds": len(rs), "test_acc": float(accs.mean()), "test_acc_low": lo, "test_acc_high": hi,
            "test_acc_std": std, "test_n": int(rs[0]["test_n"]),
            "sum_delta": p.get("sum_delta", float("nan")), "supernet_acc": p.get("supernet_acc", float("nan")),
        })
    lat = np.array([r["measured_ms"] for r in rows])
    acc = np.array([r["test_acc"] for r in rows])
    for r, k in zip(rows, pareto_optimal(lat, acc) if rows else []):
        r["pareto_optimal"] = bool(k)
    return rows


def method_comparison(rows: Sequence[Mapping[str, Any]], alpha: float = 0.05) -> tuple[list[dict[str, Any]], str]:
    """Which methods' retrained accuracies differ at each target (§7, Fig. pareto; docs/method.md D25).

    Every pair of methods at a target: the difference of mean top-1 over seeds, Welch's t-test on the seeds'
    means and standard deviations (scipy), and p-values adjusted over all pairs of the table by
    Benjamini–Hochberg (scipy's false_discovery_control); `separated` when the adjusted p < alpha. A finalist
    retrained with one seed cannot be tested (None). Returns the pairs and a sentence that says, per target,
    which differences resolve and that the others do not."""
    from scipy.stats import false_discovery_control, ttest_ind_from_stats

    pairs: list[dict[str, Any]] = []
    for target in dict.fromkeys(r["target"] for r in rows):
        at = sorted((r for r in rows if r["target"] == target), key=lambda r: -r["test_acc"])
        for i, a in enumerate(at):
            for b in at[i + 1:]:
                p = None
                if a["seeds"] > 1 and b["seeds"] > 1:
                    sa, sb = max(a["test_acc_std"], 1e-12), max(b["test_acc_std"], 1e-12)
                    p = float(ttest_ind_from_stats(a["test_acc"], sa, a["seeds"], b["test_acc"], sb, b["seeds"],
                                                   equal_var=False).pvalue)
                pairs.append({"target": target, "better": a["method"], "worse": b["method"],
                              "difference": float(a["test_acc"] - b["test_acc"]), "p_value": p})
    tested = [q for q in pairs if q["p_value"] is not None]
    adjusted = false_discovery_control([q["p_value"] for q in tested]) if tested else []
    for q, adj in zip(tested, adjusted):
        q["p_adjusted"] = float(adj)
        q["separated"] = bool(adj < alpha)
    for q in pairs:
        q.setdefault("p_adjusted", None)
        q.setdefault("separated", None)
    parts = []
    for target in dict.fromkeys(q["target"] for q in pairs):
        at = [q for q in pairs if q["target"] == target]
        sep = [f"{q['better']} > {q['worse']} by {100 * q['difference']:.2f} points" for q in at if q["separated"]]
        if any(q["separated"] is None for q in at):
            parts.append(f"{target}: not tested (one seed)")
        elif sep:
            parts.append(f"{target}: " + "; ".join(sep) + "; the other differences do not resolve")
        else:
            parts.append(f"{target}: no two methods differ beyond their seeds' spread")
    message = ("" if not parts else "Methods at equal target (Welch's t over seeds, Benjamini–Hochberg "
               f"adjusted p < {alpha:g}): " + ". ".join(parts) + ".")
    return pairs, message


def kendall(score: Sequence[float], acc: Sequence[float]) -> tuple[float, float]:
    """Kendall τ-b between a proxy and retrained accuracy (scipy), and its p-value; NaN if undefined."""
    from scipy.stats import kendalltau

    s, a = np.asarray(score, float), np.asarray(acc, float)
    ok = np.isfinite(s) & np.isfinite(a)
    if ok.sum() < 3:
        return float("nan"), float("nan")
    res = kendalltau(s[ok], a[ok])
    return float(res.statistic), float(res.pvalue)


def proxy_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The proxy check (§3 assumption 1): −Σδ and supernet accuracy vs retrained accuracy, with Kendall τ, beside
    MMAC itself, "bigger is better", the baseline a proxy must beat to say more than the network's size."""
    out = []
    acc = [r["test_acc"] for r in rows]
    for name, scores in (("-sum_delta", [-r["sum_delta"] for r in rows]),
                         ("supernet_acc", [r["supernet_acc"] for r in rows]),
                         ("mmacs", [r["mmacs"] for r in rows])):
        tau, p = kendall(scores, acc)
        out += [{"proxy": name, "method": r["method"], "target": r["target"], "score": s, "test_acc": r["test_acc"],
                 "kendall_tau": tau, "p_value": p, "n": len(rows)} for r, s in zip(rows, scores)]
    return out


def kendall_within(score: Sequence[float], acc: Sequence[float], group: Sequence[Any]) -> float:
    """Kendall τ over pairs of the same group only (finalists at one target, i.e. of nearly equal latency, the
    comparison of Fig. proxy_compare): (concordant − discordant) ÷ (pairs not tied in either); NaN without pairs."""
    s, a, g = np.asarray(score, float), np.asarray(acc, float), np.asarray(group, object)
    i, j = np.triu_indices(len(a), 1)
    same = g[i] == g[j]
    sign = np.sign(s[i] - s[j]) * np.sign(a[i] - a[j])
    sign = sign[same & np.isfinite(sign)]
    untied = np.count_nonzero(sign)
    return float(sign.sum() / untied) if untied else float("nan")


def ranking_reliability(rows: Sequence[Mapping[str, Any]], proxies: Mapping[str, Sequence[float]], *,
                        draws: int = 2000, seed: int = 0) -> tuple[dict[str, Any], str]:
    """How far the finalists' retrained ranking can resolve a proxy (docs/method.md D35).

    Re-runs of the retraining are simulated from the seeds' spread (pooled standard error of a finalist's mean,
    or its Wilson half-width ÷ 1.96 with one seed): `retest_tau` is τ between two re-runs, `tau_ceiling` τ of the
    observed means against a re-run (what a proxy equal to the true accuracy would show), each as median and
    95 % range. Per proxy: τ within targets (kendall_within) and `p_beats_size`, the share of re-runs in which
    its τ exceeds MMAC's. Returns the summary and a sentence for the results table."""
    from scipy.stats import kendalltau

    acc = np.array([r["test_acc"] for r in rows], float)
    seeds = np.array([r["seeds"] for r in rows])
    if len(acc) < 3:
        return {}, ""
    if (seeds > 1).all():
        var = np.array([r["test_acc_std"] for r in rows], float) ** 2
        se = np.sqrt(np.nanmean(var) / seeds)
    else:
        se = np.array([(r["test_acc_high"] - r["test_acc_low"]) / (2 * 1.959964) for r in rows], float)
    rng = np.random.default_rng(seed)
    rerun = lambda: acc + rng.standard_normal(len(acc)) * se  # noqa: E731
    band = lambda x: {"median": float(np.median(x)), "low": float(np.quantile(x, 0.025)),  # noqa: E731
                      "high": float(np.quantile(x, 0.975))}
    retest, ceiling, taus = [], [], {p: [] for p in proxies}
    for _ in range(draws):
        a, b = rerun(), rerun()
        retest.append(kendalltau(a, b).statistic)
        ceiling.append(kendalltau(acc, a).statistic)
        for p, score in proxies.items():
            taus[p].append(kendalltau(score, a).statistic)
    targets = [r["target"] for r in rows]
    out: dict[str, Any] = {"retest_tau": band(retest), "tau_ceiling": band(ceiling), "proxies": {}}
    for p, score in proxies.items():
        out["proxies"][p] = {"kendall_tau": kendall(score, acc)[0], "kendall_tau_within": kendall_within(score, acc, targets)}
        if p != "mmacs" and "mmacs" in proxies:
            out["proxies"][p]["p_beats_size"] = float(np.mean(np.array(taus[p]) > np.array(taus["mmacs"])))
    r, c = out["retest_tau"], out["tau_ceiling"]
    parts = []
    for p, v in out["proxies"].items():
        if "p_beats_size" not in v:
            continue
        pb = v["p_beats_size"]
        verdict = ("ranks above size" if pb >= 0.95 else "ranks below size" if pb <= 0.05
                   else "does not separate from size")
        parts.append(f"{p} {verdict} (τ {v['kendall_tau']:.2f}, within targets {v['kendall_tau_within']:.2f}; "
                     f"above MMAC's τ in {100 * pb:.0f} % of re-runs)")
    mm = out["proxies"].get("mmacs")
    message = (f"The retrained ranking of these {len(acc)} finalists reproduces at Kendall τ {r['median']:.2f} "
               f"[{r['low']:.2f}, {r['high']:.2f}] between two re-runs of the retraining (simulated from the seeds' "
               f"spread); a proxy equal to the true accuracy would reach τ {c['median']:.2f} [{c['low']:.2f}, "
               f"{c['high']:.2f}]. " + (f"MMAC: τ {mm['kendall_tau']:.2f}, within targets "
                                         f"{mm['kendall_tau_within']:.2f}. " if mm else "") + "; ".join(parts) + ".")
    return out, message


def configuration_rows(rows: Sequence[Mapping[str, Any]], space) -> list[dict[str, Any]]:
    """Found widths relative to the base network's (Fig. found configurations)."""
    base = space.base[:-1]
    return [{"method": r["method"], "target": r["target"], "layer": i, "width": int(w), "base_width": int(b),
             "ratio": int(w) / int(b)} for r in rows for i, (w, b) in enumerate(zip(r["channels"], base))]


def training_rows(rows_by_run: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Per-epoch supernet training metrics of the OWS run and each AOWS run (rows of their train_metrics files)."""
    out = []
    for run, rows in rows_by_run.items():
        for r in rows:
            out.append({"run": run, **{k: r[k] for k in ("epoch", "sampling", "loss_max", "loss_min", "loss_random",
                                                          "train_acc_max", "temperature", "images_per_s")}})
    return out
