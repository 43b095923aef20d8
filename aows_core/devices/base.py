"""The device interface: what a backend measures (§4 profiles whole networks on the target) and how it is identified.

A device builds the network of a configuration (`open` → a `Timer`) and times (or counts) it,
returning every per-repeat value, the wall time spent inside the timed forward passes and the
overhead around them (construction, export, session creation, warm-up); `measure_paired` times a
network and the reference network in alternating chunks (docs/method.md D27). Its `fingerprint` records everything that makes two timings
comparable (backend, batch, threads, CPU/GPU model, library versions), so a latency table is never
mixed with timings of another machine or setting. Heavy imports (torch, onnxruntime) happen inside
the backends, so `aows_core.devices` itself imports only numpy.

A device is one file: its class declares its backend name, unit, whether it times on a GPU and its settings (each a
`Setting`: default and schema), and `@register` makes it configurable (the registry, the schema's `backend` enum and
device settings, the units the targets are checked against and `SPEC_DEFAULTS` all derive from these declarations).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

# One timing loop and one description of a machine, shared with the timing worker (the remote side of a device).
from aows_worker import MAX_REPEAT_FACTOR, alternate, cpu_model, host_fingerprint, timed_loop  # noqa: F401

from ..config import Backend, register_backend, unregister_backend
from ..space import SearchSpace


@dataclass(frozen=True)
class Setting:
    """A device setting (config.yaml's `devices.<name>.<key>`): its default and its schema (JSON-schema `type`, bounds,
    choices, description). Backends that read the same key declare the same Setting (base.THREADS, …)."""

    default: Any
    type: str  # integer, number, boolean, string
    description: str
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    exclusive_maximum: float | None = None

    def schema(self) -> dict[str, Any]:
        """The setting's JSON schema."""
        node: dict[str, Any] = {"type": self.type}
        if self.choices:
            node["enum"] = list(self.choices)
        bounds = (("minimum", self.minimum), ("exclusiveMinimum", self.exclusive_minimum),
                  ("maximum", self.maximum), ("exclusiveMaximum", self.exclusive_maximum))
        node.update({k: v for k, v in bounds if v is not None})
        return {**node, "default": self.default, "description": self.description}


BATCH_SIZE = Setting(1, "integer", "Images per forward pass; latencies are ms per forward of a batch.", minimum=1)
THREADS = Setting(1, "integer", "Intra-op threads used for timing (aows sets them itself).", minimum=1)
INTER_OP_THREADS = Setting(1, "integer", "Inter-op threads (torch and ONNX Runtime).", minimum=1)

# The registry (config.yaml's `backend` → class), filled by `register`; aows_core.devices imports every module of
# the package, so that a device file registers itself.
DEVICES: dict[str, type["Device"]] = {}
# Every device setting a registered backend reads, with its default (backends ignore the others'): derived.
SPEC_DEFAULTS: dict[str, Any] = {}


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
        self.run, self._close, self.timed_s = run, close, 0.0

    def __call__(self, repeats: int, warmup: int, min_time_s: float) -> np.ndarray:
        """Time the network; `run` returns the values and the seconds spent in timed passes."""
        values, timed = self.run(repeats, warmup, min_time_s)
        self.timed_s += float(timed)
        return np.asarray(values, dtype=np.float64).reshape(-1)

    def close(self) -> None:
        """Release the network (a session, a module)."""
        if self._close is not None:
            self._close()
            self._close = None


class Device:
    """A latency (or cost) oracle for the networks of one search space."""

    name: ClassVar[str] = "base"  # config.yaml's `devices.<name>.backend`
    unit: ClassVar[str] = "ms"  # of its values: ms per forward of a batch (MMAC for flops)
    gpu: ClassVar[bool] = False  # times on a GPU: cluster profiles place its timing jobs on GPU nodes
    analytic: ClassVar[bool] = False  # counted, not timed (one exact value per network, no reference)
    # The settings this backend reads, in order: they (but `untracked`) enter its fingerprint.
    settings: ClassVar[Mapping[str, Setting]] = {"batch_size": BATCH_SIZE}
    keys: ClassVar[tuple[str, ...]] = ("batch_size",)  # the settings but `untracked`, derived for every subclass
    untracked: ClassVar[tuple[str, ...]] = ()  # settings of how the device is reached, not of what is timed
    # What a latency file made before a key existed was timed with (its spec lacks the key): the key's value then,
    # when that differs from today's default, so that such a file is refused, not read as today's default.
    legacy: ClassVar[Mapping[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.keys = tuple(k for k in cls.settings if k not in cls.untracked)

    @classmethod
    def declaration(cls) -> Backend:
        """What the config layer knows of this backend (its name, unit, GPU, whether counted, the settings it reads)."""
        return Backend(cls.name, cls.unit, bool(cls.gpu), bool(cls.analytic), tuple(cls.settings))

    def __init__(self, spec: Mapping[str, Any], space: SearchSpace, seed: int = 0):
        if spec.get("remote") and "remote" not in type(self).settings:
            remote = sorted(n for n, c in DEVICES.items() if "remote" in c.settings)
            raise ValueError(f"device backend {self.name!r} cannot time on another machine (remote: "
                             f"{spec['remote']!r}): its runtime is not in the timing worker; use one of {remote} "
                             f"(docs/devices.md)")
        self.spec = normalise_spec(spec, type(self).settings)
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
            chunked = self._alternate(timers, counts, warmup, chunks)
        finally:
            for t in timers:
                t.close()
        timed = sum(t.timed_s for t in timers)
        return PairedMeasurement([c[0] for c in chunked], [c[1] for c in chunked], timed,
                                 max(time.perf_counter() - t0 - timed, 0.0))

    def _alternate(self, timers: list["Timer"], counts: list[tuple[int, float]], warmup: int,
                   chunks: int) -> list[list[np.ndarray]]:
        """[[each timer's values] per chunk], the timers in `chunks` alternating chunks."""
        return alternate(timers, counts, warmup, chunks)

    def close(self) -> None:
        """Release what the device holds (sessions, pools)."""


def register(cls: type[Device]) -> type[Device]:
    """Class decorator: `cls` becomes the backend named `cls.name` (config.yaml picks it by that string), its settings
    join SPEC_DEFAULTS and the config layer's schema and unit checks learn its declaration. A key another backend
    reads already must be declared with the same Setting."""
    if not (isinstance(cls, type) and issubclass(cls, Device)) or cls.name in ("", Device.name):
        raise TypeError(f"register takes a Device subclass with its own `name`, got {cls!r}")
    old = DEVICES.get(cls.name)
    if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"device backend {cls.name!r} is registered already, by {old.__module__}.{old.__qualname__}")
    bad = [k for k, v in cls.settings.items() if not isinstance(v, Setting)]
    if bad or "batch_size" not in cls.settings:
        raise TypeError(f"device {cls.name!r}: settings must map keys to Setting, batch_size among them (bad: {bad})")
    for key, setting in cls.settings.items():
        other = next((d for d in DEVICES.values() if d.name != cls.name and d.settings.get(key, setting) != setting),
                     None)
        if other is not None:
            raise ValueError(f"device {cls.name!r} declares setting {key!r} unlike {other.name!r} does; a key means "
                             f"one thing for every backend: reuse {other.__module__}.{other.__qualname__}'s Setting "
                             f"or name yours otherwise")
    DEVICES[cls.name] = cls
    _derive()
    register_backend(cls.declaration(), {k: s.schema() for k, s in cls.settings.items()})
    return cls


def unregister(name: str) -> None:
    """Remove a registered backend (a device defined for one test, say)."""
    DEVICES.pop(name, None)
    _derive()
    unregister_backend(name)


def _derive() -> None:
    """SPEC_DEFAULTS from the registered classes, in registration order."""
    SPEC_DEFAULTS.clear()
    for cls in DEVICES.values():
        for key, setting in cls.settings.items():
            SPEC_DEFAULTS.setdefault(key, setting.default)


def normalise_spec(spec: Mapping[str, Any], own: Mapping[str, Setting] | None = None) -> dict[str, Any]:
    """The spec with every default filled (those of SPEC_DEFAULTS and of `own`, a device's settings); an unknown key
    is an error naming the known ones."""
    spec = dict(spec)
    spec.pop("backend", None)
    defaults = {**SPEC_DEFAULTS, **{k: s.default for k, s in (own or {}).items()}}
    unknown = sorted(set(spec) - set(defaults))
    if unknown:
        raise ValueError(f"unknown device setting(s) {unknown}; known settings: {sorted(defaults)}")
    return {**defaults, **spec}


def spec_differences(device: "Device", spec: Mapping[str, Any], spec_then: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """[(key, then, now)] of the device settings (backend + `device.keys`) that differ from those profiled (§4 same form);
    a key the profiled spec lacks counts as `device.legacy`'s value for it (the form timed before the key existed)."""
    spec_then = dict(spec_then or {})
    then = {"backend": spec_then.get("backend"), **normalise_spec({**device.legacy, **spec_then}, device.settings)}
    now = {"backend": spec.get("backend"), **device.spec}
    return [(k, then.get(k), now.get(k)) for k in ("backend", *device.keys) if then.get(k) != now.get(k)]


def check_counts(repeats: int, warmup: int) -> tuple[int, int]:
    """Validated (repeats ≥ 1, warmup ≥ 0)."""
    repeats, warmup = int(repeats), int(warmup)
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats ≥ 1 and warmup ≥ 0, got repeats={repeats}, warmup={warmup}")
    return repeats, warmup


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


