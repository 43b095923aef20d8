"""The device interface: what a backend measures (§4 profiles whole networks on the target) and how it is identified.

A device builds the network of a configuration (`open` → a `Timer`) and times (or counts) it,
returning every per-repeat value, the wall time spent inside the timed forward passes and the
overhead around them (construction, export, session creation, warm-up); `measure_paired` times a
network and the reference network in alternating chunks (docs/method.md D27). Its `fingerprint` records everything that makes two timings
comparable (backend, batch, threads, CPU/GPU model, library versions), so a latency table is never
mixed with timings of another machine or setting. Heavy imports (torch, onnxruntime) happen inside
the backends, so `aows_core.devices` itself imports only numpy.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from ..space import SearchSpace

MAX_REPEAT_FACTOR = 20

# Every device setting the config schema knows, with its default (backends ignore the others').
SPEC_DEFAULTS: dict[str, Any] = {
    "batch_size": 1,
    "threads": 1,
    "inter_op_threads": 1,
    "channels_last": False,
    "graph_optimization": "all",
    "cuda_device": "cuda:0",
    "timing": "graph",
    "precision": "fp32",
    "noise": 0.02,
    "drift": 0.15,
    "nonadditive": 0.02,
    "interference": 0.0,
    "regime_dwell": 3.0,
    "spill": 0.0,
    "spill_at": 0.7,
    "launch_floor": 0.0,
}


@dataclass
class Measurement:
    """Per-repeat values (in the device's unit), seconds inside timed passes, seconds of overhead."""

    samples: np.ndarray
    timed_s: float
    overhead_s: float

    def __post_init__(self) -> None:
        self.samples = np.asarray(self.samples, dtype=np.float64).reshape(-1)


@dataclass
class PairedMeasurement:
    """Per-chunk values of a network and of the reference timed alternately (D27), seconds timed and of overhead."""

    network: list[np.ndarray]
    reference: list[np.ndarray]
    timed_s: float
    overhead_s: float


class Timer:
    """One built network: `timer(repeats, warmup, min_time_s)` → per-repeat values in the device's unit."""

    def __init__(self, run: Callable[[int, int, float], tuple[np.ndarray, float]],
                 close: Callable[[], None] | None = None):
        self._run, self._close, self.timed_s = run, close, 0.0

    def __call__(self, repeats: int, warmup: int, min_time_s: float) -> np.ndarray:
        """Time the network; `run` returns the values and the seconds spent in timed passes."""
        values, timed = self._run(repeats, warmup, min_time_s)
        self.timed_s += float(timed)
        return np.asarray(values, dtype=np.float64).reshape(-1)

    def close(self) -> None:
        """Release the network (a session, a module)."""
        if self._close is not None:
            self._close()
            self._close = None


class Device:
    """A latency (or cost) oracle for the networks of one search space."""

    name: ClassVar[str] = "base"
    unit: ClassVar[str] = "ms"
    analytic: ClassVar[bool] = False
    # Spec keys this backend reads; they (and only they) enter its fingerprint.
    keys: ClassVar[tuple[str, ...]] = ("batch_size",)
    # What a latency file made before a key existed was timed with (its spec lacks the key): the key's value then,
    # when that differs from today's default, so that such a file is refused, not read as today's default.
    legacy: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, spec: Mapping[str, Any], space: SearchSpace, seed: int = 0):
        self.spec = normalise_spec(spec)
        self.space = space
        self.seed = int(seed)
        self.batch_size = int(self.spec["batch_size"])
        if self.batch_size < 1:
            raise ValueError(f"device {self.name!r}: batch_size must be ≥ 1, got {self.batch_size}")

    @classmethod
    def is_available(cls) -> bool:
        """Whether this backend can run on this machine."""
        return True

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        """(B, C, H, W) of the timed input batch."""
        h, w = self.space.resolution
        return (self.batch_size, self.space.in_channels, h, w)

    def fingerprint(self) -> dict[str, Any]:
        """Everything that makes two timings comparable (equal fingerprints ⇒ same target)."""
        return {"backend": self.name, "unit": self.unit, **{k: self.spec[k] for k in self.keys}}

    def open(self, channels: Sequence[int], job: int = 0) -> "Timer":
        """The network of `channels`, built and ready to time (construction is overhead, not timing)."""
        raise NotImplementedError

    def measure(
        self, channels: Sequence[int], repeats: int, warmup: int = 0, job: int = 0, min_time_s: float = 0.0
    ) -> Measurement:
        """Time the network of `channels`: `warmup` untimed, then ≥ `repeats` timed passes lasting ≥ `min_time_s`."""
        repeats, warmup = check_counts(repeats, warmup)
        t0 = time.perf_counter()
        timer = self.open(channels, job)
        try:
            samples = timer(repeats, warmup, min_time_s)
        finally:
            timer.close()
        return Measurement(samples, timer.timed_s, max(time.perf_counter() - t0 - timer.timed_s, 0.0))

    def measure_paired(
        self, channels: Sequence[int], reference: Sequence[int], repeats: int, warmup: int = 0, job: int = 0,
        min_time_s: float = 0.0, chunks: int = 5, reference_share: float = 1.0,
    ) -> "PairedMeasurement":
        """The network and the reference in `chunks` alternating chunks (D27): ⌈repeats/chunks⌉ passes of the
        network and `reference_share` of that for the reference, each chunk after `warmup` untimed passes.

        `min_time_s` is shared among the network's chunks (the references': their share of it).
        Interference that lasts longer than one chunk pair hits both.
        """
        repeats, warmup = check_counts(repeats, warmup)
        if chunks < 1 or not 0 < reference_share <= 1:
            raise ValueError(f"need chunks ≥ 1 and 0 < reference_share ≤ 1, got {chunks} and {reference_share}")
        per, per_time = math.ceil(repeats / chunks), min_time_s / chunks
        counts = [(per, per_time), (max(1, math.ceil(per * reference_share)), per_time * reference_share)]
        t0 = time.perf_counter()
        timers = [self.open(channels, job), self.open(reference, job)]
        try:
            chunked = [[t(n, warmup, s) for t, (n, s) in zip(timers, counts)] for _ in range(chunks)]
        finally:
            for t in timers:
                t.close()
        timed = sum(t.timed_s for t in timers)
        return PairedMeasurement([c[0] for c in chunked], [c[1] for c in chunked], timed,
                                 max(time.perf_counter() - t0 - timed, 0.0))

    def close(self) -> None:
        """Release what the device holds (sessions, pools)."""


def normalise_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec with every default filled; an unknown key is an error naming the known ones."""
    spec = dict(spec)
    spec.pop("backend", None)
    unknown = sorted(set(spec) - set(SPEC_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown device setting(s) {unknown}; known settings: {sorted(SPEC_DEFAULTS)}")
    return {**SPEC_DEFAULTS, **spec}


def spec_differences(device: "Device", spec: Mapping[str, Any], spec_then: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """[(key, then, now)] of the device settings (backend + `device.keys`) that differ from those profiled (§4 same form);
    a key the profiled spec lacks counts as `device.legacy`'s value for it (the form timed before the key existed)."""
    spec_then = dict(spec_then or {})
    then = {"backend": spec_then.get("backend"), **normalise_spec({**device.legacy, **spec_then})}
    now = {"backend": spec.get("backend"), **device.spec}
    return [(k, then.get(k), now.get(k)) for k in ("backend", *device.keys) if then.get(k) != now.get(k)]


def check_counts(repeats: int, warmup: int) -> tuple[int, int]:
    """Validated (repeats ≥ 1, warmup ≥ 0)."""
    repeats, warmup = int(repeats), int(warmup)
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats ≥ 1 and warmup ≥ 0, got repeats={repeats}, warmup={warmup}")
    return repeats, warmup


def timed_loop(call: Callable[[], Any], repeats: int, warmup: int, min_time_s: float) -> np.ndarray:
    """Per-repeat ns of `call`: `warmup` untimed calls, then `repeats` timed ones, extended (up to
    MAX_REPEAT_FACTOR × repeats) until the timed passes add up to `min_time_s`, so that fast networks
    are not dominated by their construction overhead."""
    clock = time.perf_counter_ns
    for _ in range(warmup):
        call()
    cap = repeats * MAX_REPEAT_FACTOR if min_time_s > 0 else repeats
    out = np.empty(cap, dtype=np.float64)
    need = min_time_s * 1e9
    total = 0.0
    r = 0
    while r < cap and (r < repeats or total < need):
        a = clock()
        call()
        out[r] = clock() - a
        total += out[r]
        r += 1
    return out[:r]


def cpu_model() -> str:
    """The CPU model name (/proc/cpuinfo, else platform.processor())."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def host_fingerprint() -> dict[str, Any]:
    """Machine facts shared by the real backends: CPU model, cores, architecture, OS (not the host name or affinity)."""
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "system": platform.system(),
    }
