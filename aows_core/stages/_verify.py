"""Decisions verified on their device (docs/method.md D36), shared by `aows decode` and `aows decide-baseline`:
the device session, the pinned targets and the refit around `aows_core.latency.verify:verify_decision`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    from ..space import SearchSpace


def decide_verified(config: Mapping[str, Any], latency: Any, lut_path: Any, device_name: str, space: SearchSpace,
                    x0: np.ndarray, tmeta: Mapping[str, Any], decide_one: Callable[[np.ndarray, str], dict[str, Any]],
                    targets: Sequence[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One decision per target, each verified on the device when `latency` (the file the LUT was fitted on) is given,
    `verify.max_rounds` > 0 and the device is not analytic; returns the rows and the decisions' `verification`
    metadata (per target: converged, its verified table `lut`, and the trace of verify_decision)."""
    from .. import artifacts
    from ..latency.lut import columns_of, split_sets
    from ..latency.protocol import MeasureError
    from ..search.link import Link
    from ..search.targets import resolve_target

    settings = dict(config["verify"])
    unit, link = tmeta["unit_short"], Link.from_meta(tmeta)
    plain = {"settings": settings, "verified": False}
    if latency is None:
        return [decide_one(x0, t) for t in targets], {**plain, "reason": "no latency file given (--latency)"}
    ltable, lmeta = artifacts.read_latency(latency, space, device_name)
    artifacts.require_fitted_on(lut_path, tmeta, latency, lmeta, device_name)
    if lmeta.get("analytic") or settings["max_rounds"] == 0:
        reason = "analytic device: its table is exact" if lmeta.get("analytic") else "verify.max_rounds is 0"
        return [decide_one(x0, t) for t in targets], {**plain, "reason": reason}

    from ..devices import get_device
    from ..latency.verify import refit_with, verify_decision
    from .measure import check_session

    sets = split_sets(space, columns_of(ltable))  # the rows `fit-lut` fitted on
    # the LUT's own smoothness weight (D38) and link (D39): a refit moves the table around the verified networks, not
    # its prior
    lut_cfg = {**config["lut"], "smoothness": [float(tmeta.get("smoothness", 0.0))]}
    spec, protocol = dict(config["devices"][device_name]), dict(config["profiling"])
    dev = get_device(spec, space, int(config["seed"]))
    rows, per_target = [], []
    try:
        try:
            check_session(dev, spec, lmeta, protocol, latency, dev.fingerprint(), "error")
        except MeasureError as e:
            raise MeasureError(f"{e}\n(verifying decisions on the device; verify.max_rounds: 0 decides on the "
                               f"profiled table alone)") from None
        time_network = _timer(dev, space, protocol, lmeta, int(config["seed"]), int(settings["rounds"]))
        for t in targets:
            value = resolve_target(t, space, x0, unit, link)  # pinned: a refit moves L_min and L_max of `range:` targets
            pinned = f"{value:.12f}ms"

            def decide(x: np.ndarray, t: str = t, pinned: str = pinned) -> dict[str, Any]:
                return {**decide_one(x, pinned), "target": t}

            row, x, trace = verify_decision(
                decide, time_network,
                lambda timed: refit_with(space, sets, timed, lut_cfg, int(settings["weight"]), link),
                x0, tolerance=float(settings["tolerance"]), max_rounds=int(settings["max_rounds"]))
            rows.append(row)
            per_target.append({"target": t, "converged": abs(trace[-1]["rel_error"]) <= settings["tolerance"],
                               "networks_timed": sum(r["timed"] for r in trace), "lut": [float(v) for v in x],
                               "trace": trace})
    finally:
        dev.close()
    return rows, {"settings": settings, "verified": True, "targets": per_target}


def _timer(dev: Any, space: SearchSpace, protocol: Mapping[str, Any], lmeta: Mapping[str, Any], seed: int,
           rounds: int) -> Callable[[Sequence[int]], float]:
    """A network's latency as `measure` gives it: median over `rounds` of the profiling protocol's timing, corrected
    to the LUT's reference baseline (§7, D24, D27)."""
    from ..latency.protocol import correct, measure_plan, time_jobs

    baseline, first = float(lmeta["reference_baseline"]), [int(lmeta["next_job"])]

    def time_network(channels: Sequence[int]) -> float:
        jobs = measure_plan([channels], rounds, seed, False, first[0])
        first[0] = jobs[-1].job + 1
        timed, _ = correct(time_jobs(dev, jobs, protocol, space), baseline)
        return float(np.median([r["latency_ms"] for r in timed if r["role"] == "finalist"]))

    return time_network


def print_verification(path: Any) -> None:
    """Print the verification of a decisions file (`aows decode` and `aows decide-baseline`); nothing without one."""
    from .. import artifacts

    if path is None:
        return
    for line in verification_note(artifacts.read_table(path, "decisions")[1].get("verification") or {}):
        print(line)


def verification_note(meta: Mapping[str, Any]) -> list[str]:
    """Lines for the CLI: per target, how many networks were timed and where the decision landed."""
    if not meta.get("verified"):
        return [f"not verified on the device: {meta.get('reason')}"]
    out = []
    for v in meta["targets"]:
        last = v["trace"][-1]
        out.append(f"{v['target']}: verified on the device in {len(v['trace'])} rounds ({v['networks_timed']} networks "
                   f"timed): measured {last['measured_ms']:.4g}, predicted {last['predicted_ms']:.4g} "
                   f"({100 * last['rel_error']:+.1f} %)"
                   + ("" if v["converged"] else f" — NOT within the tolerance {100 * meta['settings']['tolerance']:.1f} % "
                      f"after verify.max_rounds refits; raise it, or see the trace in the decisions file"))
    return out
