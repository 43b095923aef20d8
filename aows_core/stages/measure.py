"""`aows measure`: time a device's finalists with the profiling protocol (§7)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Mapping

from . import add_config

if TYPE_CHECKING:
    from ..config import ProfilingSettings, Settings
    from ..space import SearchSpace

COMMAND = "measure"
HELP = "time a device's finalists with the profiling protocol (§7)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("decisions", "latency", "lut")
OUTPUTS = ("out",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p, timing=True)
    p.add_argument("--device", required=True)
    p.add_argument("--decisions", nargs="+", required=True, help="the finalists' decisions parquet files")
    p.add_argument("--latency", required=True, help="the device's latency file (reference baseline, fingerprint)")
    p.add_argument("--lut", required=True, help="the device's LUT (predicted latencies)")
    p.add_argument("--out", required=True)
    p.add_argument("--quiet", action="store_true")


def _finalists(space: SearchSpace, device_name: str, inputs: Mapping[str, Any]) -> tuple[Any, dict, Any, dict, list[dict]]:
    """The latency file, the LUT (both of `device_name`, the LUT fitted on that file) and the finalists decided on it."""
    from .. import artifacts
    from ..latency.protocol import MeasureError, check_predictions
    from ..search.link import Link

    latency, lut_path = inputs["latency"], inputs["lut"]
    ltable, lmeta = artifacts.read_latency(latency, space, device_name)
    x, tmeta = artifacts.read_lut(lut_path, space)
    artifacts.require_fitted_on(lut_path, tmeta, latency, lmeta, device_name)
    finalists = artifacts.read_decisions(inputs["decisions"], space, device_name)
    if not finalists:
        raise MeasureError(f"no finalists to measure on device {device_name!r}: the decision files hold no rows")
    check_predictions(space, x, finalists, lut_path, Link.from_meta(tmeta))
    return ltable, lmeta, x, tmeta, finalists


def check_session(device: Any, spec: Mapping[str, Any], lmeta: Mapping[str, Any], protocol: ProfilingSettings,
                   latency: Any, fingerprint: Any, on_mismatch: str) -> bool:
    """Refuse a session whose device settings or timing protocol differ from the profiled ones (§4 same form);
    returns whether the fingerprint matches the LUT's (a mismatch is refused unless `on_mismatch` is "flag")."""
    from ..devices.base import spec_differences
    from ..latency.protocol import MeasureError, protocol_differences

    differ = spec_differences(device, spec, lmeta.get("device_spec") or {})
    if differ:
        raise MeasureError(
            f"the configured settings of this device differ from those {latency} was profiled with: "
            + ", ".join(f"{k} {then!r} → {now!r}" for k, then, now in differ)
            + "; the LUT describes another target — profile and fit it again with these settings"
        )
    differ = protocol_differences(lmeta.get("protocol", {}), protocol)
    if differ:
        raise MeasureError(
            f"the timing protocol differs from the one {latency} was profiled with: "
            + ", ".join(differ)
            + "; finalists must be timed as the LUT's networks were (profile again, or restore these settings)"
        )
    match = fingerprint == lmeta.get("fingerprint")
    if not match and on_mismatch != "flag":
        raise MeasureError(
            f"this machine's device fingerprint differs from the one the LUT was profiled on:\n"
            f"  LUT ({latency}): {lmeta.get('fingerprint')}\n  this machine: {fingerprint}\n"
            f"Timings of two machines are not comparable. Measure on the profiled machine, profile again on this "
            f"one, or set measure.on_fingerprint_mismatch: flag to measure anyway (rows get fingerprint_match false)."
        )
    return match


class _Measurement:
    """One device's measuring session (§7): the finalists decided on its LUT, timed in rounds with the profiling
    protocol, and what the measure artifact records of it."""

    def __init__(self, settings: Settings, device: str, inputs: Mapping[str, Any]):
        self.settings, self.device, self.latency, self.lut = settings, device, inputs["latency"], inputs["lut"]
        self.spec = settings.device(device)
        _, self.lmeta, _, self.tmeta, self.finalists = _finalists(settings.space, device, inputs)
        self.nets = sorted({tuple(int(c) for c in f["channels"]) for f in self.finalists})

    def time(self, progress: bool, job_offset: int | None) -> None:
        """Every distinct finalist timed once per round, paired with the reference, in a seeded order; further rounds
        until the last `measure.rounds` are as quiet as the profile (D46); then the jobs disturbed while timed timed
        again, as profiling does (D27). `job_offset` is the first job index (default: the profiling session's next)."""
        from ..devices import get_device
        from ..latency.protocol import (
            MeasureError,
            QuietTarget,
            measure_plan,
            merge_retimed,
            quiet_limit,
            reference_config,
            retime_jobs,
            settle_rounds,
            time_jobs,
        )
        from ..training.loop import progress_bar

        s, lmeta = self.settings, self.lmeta
        dev = get_device(self.spec, s.space, s.seed)
        try:
            self.analytic, self.fingerprint = dev.analytic, dev.fingerprint()
            self.match = check_session(dev, self.spec, lmeta, s.profiling, self.latency, self.fingerprint,
                                       s.measure.on_fingerprint_mismatch)
            self.ref = reference_config(s.space)
            if not dev.analytic and list(lmeta.get("reference_channels") or []) != self.ref:
                raise MeasureError(f"{self.latency} used reference {lmeta.get('reference_channels')}, not {self.ref}; "
                                   "profile again")
            self.job_offset = int(lmeta["next_job"]) if job_offset is None else job_offset
            jobs = measure_plan(self.nets, int(s.measure.rounds), s.seed, dev.analytic, self.job_offset)
            bar = progress_bar(progress, total=len(jobs), desc=f"measure {self.device}", unit="net")
            try:
                rows = time_jobs(dev, jobs, s.profiling, s.space, on_step=lambda: bar.update(1))
                self.settling = None
                if not dev.analytic:
                    target = QuietTarget(float(lmeta["reference_baseline"]),
                                         quiet_limit(float(lmeta["sigma_n"] or 0.0), float(lmeta["max_noise"])),
                                         float(s.measure.settle_s))
                    jobs, rows, self.settling = settle_rounds(dev, jobs, rows, s.profiling, s.space, s.seed, target,
                                                              on_step=lambda: bar.update(1))
                again = retime_jobs(jobs, rows, s.profiling, dev.analytic)
                timed = len(jobs) if self.settling is None else self.settling.rounds_timed * len(self.nets)
                bar.total = timed + len(again)
                retimed = time_jobs(dev, again, s.profiling, s.space, on_step=lambda: bar.update(1))
            finally:
                bar.close()
            self.rows = merge_retimed(rows, [{**r, "retime_of": j.retime_of} for r, j in zip(retimed, again)])
        finally:
            dev.close()

    def finalist_rows(self) -> tuple[list[dict[str, Any]], float, float]:
        """The finalists' rows corrected to the LUT's reference baseline (`latency.protocol.finalist_rows`)."""
        from ..latency.protocol import FinalistSession, finalist_rows

        lmeta = self.lmeta
        self.baseline = float(lmeta["reference_baseline"]) if not self.analytic else float("nan")
        return finalist_rows(self.finalists, self.rows, self.nets, FinalistSession(
            self.device, self.baseline, self.analytic, self.match, max_noise=float(lmeta["max_noise"]),
            lut_too_noisy=bool(lmeta["too_noisy"])))

    def provenance(self, out_rows: list[dict[str, Any]], session_baseline: float, noise: float) -> dict[str, Any]:
        """The measure artifact's metadata: the session, its protocol, its noise and what it was corrected to."""
        from .. import artifacts

        s, lmeta, analytic = self.settings, self.lmeta, self.analytic
        protocol = s.profiling.to_dict()
        return artifacts.provenance(
            s.space, self.device, device_spec=self.spec, fingerprint=self.fingerprint,
            lut_fingerprint=lmeta.get("fingerprint"), fingerprint_match=bool(self.match), unit=lmeta.get("unit"),
            unit_short=lmeta.get("unit_short"), analytic=analytic, protocol=protocol, statistic=protocol["statistic"],
            rounds=1 if analytic else int(s.measure.rounds), measure=s.measure.to_dict(), seed=s.seed,
            job_offset=self.job_offset, retimed=sum(r["retimed"] for r in self.rows), reference_channels=self.ref,
            reference_baseline=self.baseline,
            session_reference_baseline=session_baseline, pairing="analytic" if analytic else "paired",
            correction=("counted, not timed" if analytic else "corrected = stat(network) / stat(alternating reference) "
                        "× reference_baseline(LUT), as in profiling (D27)"),
            settle=None if self.settling is None else self.settling.to_dict(), round_noise=noise,
            max_noise=float(lmeta["max_noise"]), lut_too_noisy=bool(lmeta["too_noisy"]), too_noisy=bool(out_rows[0]["too_noisy"]),
            noise_message=_noise_message(noise, lmeta, "" if self.settling is None else
                                         self.settling.message(s.measure.settle_s)),
            networks=[list(n) for n in self.nets], decisions=[f["source"] for f in self.finalists],
            latency=str(self.latency), lut=str(self.lut), lut_lambda=self.tmeta.get("lam"), timings=self.rows,
        )


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, device: str,
        progress: bool = True, job_offset: int | None = None) -> list[dict[str, Any]]:
    """Time every finalist of `device` for R rounds, drift-corrected to the LUT's reference (§7, D24); writes "measure".

    `job_offset` is the first job index (the synthetic device's virtual clock); by default the session
    continues the profiling session's clock.
    """
    from .. import artifacts
    from ..config import resolve

    m = _Measurement(resolve(config), device, inputs)
    m.time(progress, job_offset)
    out_rows, session_baseline, noise = m.finalist_rows()
    artifacts.write_records(out_rows, outputs["out"], "measure", m.provenance(out_rows, session_baseline, noise))
    return out_rows


def _noise_message(noise: float, lmeta: Mapping[str, Any], unsettled: str = "") -> str:
    """Why this session's finalists are flagged too noisy (empty when they are not), and whether its rounds never
    became as quiet as the profile (D46)."""
    parts = [unsettled] if unsettled else []
    if lmeta["too_noisy"]:
        parts.append(f"the LUT's profiling session failed the noise gate ({lmeta['noise_message']})")
    if noise > float(lmeta["max_noise"]):
        parts.append(f"this session's timings vary by {100 * noise:.1f} % across rounds, more than the gate "
                     f"{100 * float(lmeta['max_noise']):.1f} %; close other programs and measure again")
    return "; ".join(parts)


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    unit = rows[0]["unit"]
    print(f"wrote {args.out}: {len(rows)} finalists on {args.device} ({unit}; measured = median over "
          f"{rows[0]['rounds']} rounds, drift-corrected to the LUT's reference)")
    print(f"  {'method':8s} {'target':12s} {'predicted':>10s} {'measured':>10s} {'rel.err':>8s}  meets")
    for r in rows:
        print(f"  {r['method']:8s} {r['target']:12s} {r['predicted_ms']:10.4g} {r['measured_ms']:10.4g} "
              f"{100 * r['rel_error']:+7.2f}%  {'yes' if r['meets_target_measured'] else 'NO'}"
              f"{'' if r['fingerprint_match'] else '  (fingerprint differs from the LUT)'}"
              f"{'  (device too noisy)' if r['too_noisy'] else ''}")
