"""Decisions verified on their device (docs/method.md D36), shared by `aows decode` and `aows decide-baseline`:
the device session, the pinned targets and the refit around `aows_core.latency.verify:verify_decision`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:
    from ..config import Settings
    from ..latency.verify import Timing
    from ..search.targets import DeviceTable
    from ..space import SearchSpace

# A decided network is timed in at most this many times `verify.rounds` rounds while they disagree (D36).
MAX_ROUNDS_FACTOR = 3


@dataclass(frozen=True, eq=False)
class LutFile:
    """A device's LUT as read from its file (`artifacts.read_lut`): the path, the device, the table and its metadata."""

    path: Any
    device: str
    x: np.ndarray
    meta: Mapping[str, Any]

    @classmethod
    def read(cls, path: Any, space: SearchSpace, device: str) -> "LutFile":
        from .. import artifacts

        x, meta = artifacts.read_lut(path, space, device)
        return cls(path, device, x, meta)

    @property
    def table(self) -> DeviceTable:
        """The table as the decoders read it: its unit and link (D39), labelled with the device."""
        from ..search.link import Link
        from ..search.targets import DeviceTable

        return DeviceTable(self.x, self.meta["unit_short"], Link.from_meta(self.meta), self.device)


def decide_verified(settings: Settings, lut: LutFile, latency: Any, decide_one: Callable[[DeviceTable, str], dict[str, Any]],
                    targets: Sequence[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One decision per target, each verified on the device when `latency` (the file the LUT was fitted on) is given,
    `verify.max_rounds` > 0 and the device is not analytic; returns the rows and the decisions' `verification`
    metadata (per target: converged, its verified table `lut`, and the trace of verify_decision)."""
    from .. import artifacts
    from ..devices import get_device
    from ..latency.protocol import MeasureError
    from .measure import check_session

    space, verify, table = settings.space, settings.verify, lut.table
    plain = {"settings": verify.to_dict(), "verified": False}
    if latency is None:
        return [decide_one(table, t) for t in targets], {**plain, "reason": "no latency file given (--latency)"}
    ltable, lmeta = artifacts.read_latency(latency, space, lut.device)
    artifacts.require_fitted_on(lut.path, lut.meta, latency, lmeta, lut.device)
    if lmeta.get("analytic") or verify.max_rounds == 0:
        reason = "analytic device: its table is exact" if lmeta.get("analytic") else "verify.max_rounds is 0"
        return [decide_one(table, t) for t in targets], {**plain, "reason": reason}

    spec = settings.device(lut.device)
    dev = get_device(spec, space, settings.seed)
    try:
        try:
            check_session(dev, spec, lmeta, settings.profiling, latency, dev.fingerprint(), "error")
        except MeasureError as e:
            raise MeasureError(f"{e}\n(verifying decisions on the device; verify.max_rounds: 0 decides on the "
                               f"profiled table alone)") from None
        rows, per_target = _verify_targets(settings, lut, (ltable, lmeta), _timer(dev, settings, lmeta), decide_one,
                                           targets)
    finally:
        dev.close()
    return rows, {"settings": verify.to_dict(), "verified": True, "targets": per_target}


def _verify_targets(settings: Settings, lut: LutFile, latency: tuple[Any, Mapping[str, Any]],
                    time_network: Callable[[Sequence[int]], float], decide_one: Callable[[DeviceTable, str], dict],
                    targets: Sequence[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`verify_decision` of each target on the table refitted with the timings of its decided networks (D36)."""
    from ..latency.lut import columns_of, split_sets
    from ..latency.verify import Timing, refit_with, session_margin, verify_decision

    space, verify, table = settings.space, settings.verify, lut.table
    sets = split_sets(space, columns_of(latency[0]))  # the rows `fit-lut` fitted on
    # the LUT's own smoothness weight (D38) and link (D39): a refit moves the table around the verified networks, not
    # its prior
    lut_settings = settings.lut.replace(smoothness=[float(lut.meta.get("smoothness", 0.0))])
    margin = session_margin(float(latency[1]["sigma_n"])) if verify.margin == "auto" else float(verify.margin)
    rows, per_target = [], []
    for t in targets:
        # pinned: a refit moves L_min and L_max of `range:` targets (as written to 12 decimals, the decoder's target)
        value = table.resolve(f"{table.resolve(t, space):.12f}ms", space)

        def decide(x: np.ndarray, aim: float, t: str = t, value: float = value) -> dict[str, Any]:
            return {**decide_one(table.with_x(x), f"{aim:.12f}ms"), "target": t, "target_ms": value}

        row, x, trace = verify_decision(
            decide, time_network,
            lambda timed: refit_with(space, sets, timed, lut_settings, int(verify.weight), table.link),
            lut.x, target_ms=value, tolerance=float(verify.tolerance), max_rounds=int(verify.max_rounds), margin=margin)
        rows.append(row)
        last = trace[-1]
        interval = Timing(last["measured_ms"], last["measured_lo_ms"], last["measured_hi_ms"], last["timing_rounds"],
                          last["measured_upper_ms"]).half_width
        converged = abs(last["rel_error"]) <= verify.tolerance and interval <= verify.tolerance and last["meets_target"]
        per_target.append({"target": t, "target_ms": value, "margin": margin, "converged": converged, "interval": interval,
                           "meets_target": last["meets_target"], "networks_timed": sum(r["timed"] for r in trace),
                           "lut": [float(v) for v in x], "trace": trace})
    return rows, per_target


def _timer(dev: Any, settings: Settings, lmeta: Mapping[str, Any]) -> Callable[[Sequence[int]], Timing]:
    """A network's latency as `measure` gives it: the median over `verify.rounds` of the profiling protocol's timing,
    corrected to the LUT's reference baseline (§7, D24, D27), and their range; two rounds more at a time while that
    range is wider than ±`verify.tolerance`, up to MAX_ROUNDS_FACTOR × `verify.rounds` (D36). Jobs are numbered on
    from the profiling session's."""
    from ..latency.protocol import correct, measure_plan, time_jobs
    from ..latency.verify import Timing

    baseline = float(lmeta["reference_baseline"])
    first = [int(lmeta["next_job"])]
    space, protocol, seed, verify = settings.space, settings.profiling, settings.seed, settings.verify

    def time_network(channels: Sequence[int]) -> Timing:
        values: list[float] = []
        while True:
            jobs = measure_plan([channels], int(verify.rounds) if not values else 2, seed, False, first[0])
            first[0] = jobs[-1].job + 1
            timed, _ = correct(time_jobs(dev, jobs, protocol, space), baseline)
            values += [r["latency_ms"] for r in timed]
            t = Timing.of(values)
            if t.half_width <= verify.tolerance or t.rounds >= MAX_ROUNDS_FACTOR * verify.rounds:
                return t

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
    tolerance = meta["settings"]["tolerance"]
    for v in meta["targets"]:
        last = v["trace"][-1]
        line = (f"{v['target']}: verified on the device in {len(v['trace'])} rounds ({v['networks_timed']} networks "
                f"timed): measured {last['measured_ms']:.4g} ({last['measured_lo_ms']:.4g}–{last['measured_hi_ms']:.4g} "
                f"over {last['timing_rounds']} timings), predicted {last['predicted_ms']:.4g} "
                f"({100 * last['rel_error']:+.1f} %)")
        if last["aim_ms"] < v["target_ms"]:
            line += (f", aimed {100 * (1 - last['aim_ms'] / v['target_ms']):.1f} % under the target (margin "
                     f"{100 * v['margin']:.1f} %)")
        if abs(last["rel_error"]) > tolerance:
            line += (f" — NOT within the tolerance {100 * tolerance:.1f} % after verify.max_rounds refits; raise it, "
                     f"or see the trace in the decisions file")
        elif not v["meets_target"]:
            line += (f" — its bound {last['bound_ms']:.4g} is over the target "
                     f"{v['target_ms']:.4g}: it may not meet it when measured" + (f" ({last['stopped']})" if "stopped" in last else ""))
        elif not v["converged"]:
            line += (f" — its timings spread ±{100 * v['interval']:.1f} %, more than the tolerance: the host was "
                     f"not steady; decide again with the machine idle")
        out.append(line)
    return out
