"""`synthetic`: a simulated device with a hidden ground truth, so profile → fit → validate is testable exactly.

The truth follows the latency model of §4 (eq. lat) plus what breaks it on real machines:

- an additive table, one value per latency variable (Θ, c_in, c_out) (shared variables share it):
  a_kind·MMAC + m·(activations + weights)/10⁶ + b_kind, times a per-variable factor exp(N(0, 0.05²))
  and a small penalty for widths that are not multiples of 16 — mostly, not exactly, monotone;
- a launch floor: each layer costs at least `launch_floor` ms (whatever the batch), as on a GPU whose kernels are
  shorter than their launch — above most layers' cost, every width costs about the same (validate-lut's
  width-resolution check, docs/latency-model.md);
- a cache spill (docs/method.md D39): the additive sum s becomes s + spill·max(0, s − s₀), s₀ at `spill_at` of the
  way from the smallest to the largest configuration's sum — the link the fit can recover;
- a non-additive term: total × nonadditive · sin(2π·1.5·u + φ), u = MACs / MACs(max config);
- multiplicative drift over the virtual clock `job` (the profiling job index):
  1 + drift·(0.7·sin(2π·job/P₁ + φ₁) + 0.3·sin(2π·job/P₂ + φ₂)), a fast wave and a slow trend;
- interference: the host flips between a fast and a slow state (× (1 + interference)) with
  exponentially distributed dwell times of mean `regime_dwell` jobs — a busy shared machine, whose
  disturbances last longer than one network's timing but are shorter than the reference spacing;
- multiplicative log-normal noise per repeat, exp(noise·z) (median 1).

Every random choice derives from the seed: the table from `default_rng([seed, 2**32-1, 7])`, the
regime switches from `default_rng([seed, 2**32-1, 11])`, the noise of the k-th timing call of job j
from `default_rng([seed, j])` (k = 0) or `default_rng([seed, j, k])`, so a resumed run reproduces
every sample. The k-th call of job j sits at virtual time j + k/TICKS for the regime. Values
are ms per forward of a batch (batch B scales the truth by B^0.9). `timed_s` is the virtual time
the samples represent. Imports numpy only.
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from typing import Any, Mapping, Sequence

import numpy as np

from ..kinds import kind_of
from ..space import SearchSpace
from .base import Device, Setting, Timer, register
from .flops import network_macs, variable_macs

GENERATOR_VERSION = 1
TICKS = 64  # virtual-time resolution of the timing calls within one job (regime switches)
# A layer kind's cost family (`LayerKind.cost_family`): its ms per MMAC and per layer (drawn in this order).
COST_FAMILIES = ("conv", "dwsep", "linear")


@register
class Synthetic(Device):
    """Hidden ground-truth latencies with a non-additive term, drift and noise (ms per forward of a batch)."""

    name = "synthetic"
    unit = "ms"
    settings = {
        **Device.settings,
        "noise": Setting(0.02, "number", "Log-normal noise per timed repeat (relative).", minimum=0),
        "drift": Setting(0.15, "number", "Amplitude of the multiplicative drift over the session (relative).",
                         minimum=0),
        "nonadditive": Setting(0.02, "number", "Size of the non-additive term (relative to the additive latency).",
                               minimum=0),
        "interference": Setting(0.0, "number", (
            "A busy host: the device flips between a fast state and a slow one that is (1 + interference) times "
            "slower (0: no interference)."), minimum=0),
        "regime_dwell": Setting(3.0, "number", "Mean number of jobs the host stays in one state (exponential dwell).",
                                exclusive_minimum=0),
        "spill": Setting(0.0, "number", (
            "Networks whose additive latency s exceeds the knot cost spill·(s − knot) more, as when a network's "
            "weights outgrow the cache (docs/method.md D39); 0: eq. lat's additive sum."), minimum=0),
        "spill_at": Setting(0.7, "number", (
            "The knot of `spill` as a share of the way from the smallest to the largest uniform network's additive "
            "latency."), exclusive_minimum=0, exclusive_maximum=1),
        "launch_floor": Setting(0.0, "number", (
            "The least a layer costs (ms), as on a GPU whose kernels are shorter than their launch: layers cheaper "
            "than it cost it, so a floor above most layers' cost leaves the widths barely visible (validate-lut's "
            "width-resolution check); 0: none."), minimum=0),
    }

    def __init__(self, spec: Mapping[str, Any], space: SearchSpace, seed: int = 0):
        super().__init__(spec, space, seed)
        self.noise = float(self.spec["noise"])
        self.drift = float(self.spec["drift"])
        self.nonadditive = float(self.spec["nonadditive"])
        self.interference = float(self.spec["interference"])
        self.regime_dwell = float(self.spec["regime_dwell"])
        self.spill, self.spill_at = float(self.spec["spill"]), float(self.spec["spill_at"])
        if self.spill < 0 or not 0 < self.spill_at < 1:
            raise ValueError(f"synthetic: spill must be ≥ 0 and spill_at in (0, 1), got {self.spill}, {self.spill_at}")
        if self.regime_dwell <= 0:
            raise ValueError(f"synthetic: regime_dwell must be > 0 jobs, got {self.regime_dwell}")
        self.launch_floor = float(self.spec["launch_floor"])
        for k in ("noise", "drift", "nonadditive", "interference", "launch_floor"):
            if getattr(self, k) < 0:
                raise ValueError(f"synthetic: {k} must be ≥ 0, got {getattr(self, k)}")
        if self.drift >= 0.95:
            raise ValueError(f"synthetic: drift must be < 0.95 (a multiplicative amplitude), got {self.drift}")
        if self.seed < 0:
            raise ValueError(f"synthetic: the seed must be ≥ 0, got {self.seed}")
        rng = np.random.default_rng([self.seed, 2**32 - 1, 7])
        self._a = {k: rng.uniform(0.025, 0.035) * s for k, s in zip(COST_FAMILIES, (1.0, 1.1, 1.5))}  # ms per MMAC
        self._b = {k: b * rng.uniform(0.8, 1.2) for k, b in zip(COST_FAMILIES, (0.03, 0.06, 0.02))}  # ms per layer
        self._m = rng.uniform(0.8, 1.2)  # ms per 10⁶ elements moved
        self._jitter = rng.normal(0.0, 0.05, size=space.n_variables)
        self._misalign = rng.uniform(0.02, 0.06)
        self._phi = rng.uniform(0, 2 * np.pi, size=3)
        self._periods = (rng.uniform(240, 375), rng.uniform(2400, 3750))
        self._macs_max = network_macs(space, space.max_config)
        self._regime_rng = np.random.default_rng([self.seed, 2**32 - 1, 11])
        self._switches = np.zeros(0)
        self._ticks: dict[int, int] = {}

    # ---- ground truth ------------------------------------------------------------------
    @cached_property
    def _table(self) -> np.ndarray:
        """The hidden per-variable latencies (ms per forward of a batch), none below the launch floor."""
        macs = variable_macs(self.space).astype(np.float64)
        out = np.empty(self.space.n_variables)
        for v, (t, ci, co) in enumerate(self.space.variables):
            kind = kind_of(t.kind)
            family = kind.cost_family
            base = self._a[family] * macs[v] / 1e6 + self._m * kind.moved(t, ci, co) / 1e6 + self._b[family]
            penalty = 1.0 + (self._misalign if co % 16 else 0.0)
            out[v] = base * penalty * np.exp(self._jitter[v])
        out *= self.batch_size**0.9
        out = np.maximum(out, self.launch_floor)
        out.setflags(write=False)
        return out

    def true_table(self) -> np.ndarray:
        """The hidden per-variable latencies, aligned with `space.variables` (ms)."""
        return self._table.copy()

    def additive_latency(self, channels: Sequence[int]) -> float:
        """Sum of the true table along the configuration's path (eq. lat)."""
        ids = self.space.variable_ids(self.space.indices(channels))
        return float(self._table[ids].sum())

    @cached_property
    def spill_knot(self) -> float:
        """s₀ of the cache spill: `spill_at` of the way from the min to the max configuration's additive sum (ms)."""
        lo, hi = self.additive_latency(self.space.min_config), self.additive_latency(self.space.max_config)
        return lo + self.spill_at * (hi - lo)

    def true_latency(self, channels: Sequence[int]) -> float:
        """Noise-free, drift-free latency of a configuration, cache spill and non-additive term included (ms)."""
        add = self.additive_latency(channels)
        add += self.spill * max(0.0, add - self.spill_knot)
        u = network_macs(self.space, channels) / self._macs_max
        return add * (1.0 + self.nonadditive * np.sin(2 * np.pi * 1.5 * u + self._phi[0]))

    def drift_factor(self, job: int) -> float:
        """Multiplicative drift of the virtual clock at profiling job `job`."""
        p1, p2 = self._periods
        wave = 0.7 * np.sin(2 * np.pi * job / p1 + self._phi[1]) + 0.3 * np.sin(2 * np.pi * job / p2 + self._phi[2])
        return float(1.0 + self.drift * wave)

    def regime_factor(self, t: float) -> float:
        """The interference state at virtual time t (jobs): 1 (fast) or 1 + interference (slow), switching after
        exponential dwell times of mean `regime_dwell`."""
        if self.interference == 0:
            return 1.0
        while not self._switches.size or self._switches[-1] <= t:
            last = self._switches[-1] if self._switches.size else 0.0
            more = np.cumsum(self._regime_rng.exponential(self.regime_dwell, size=256))
            self._switches = np.concatenate([self._switches, last + more])
        return 1.0 + self.interference if int(np.searchsorted(self._switches, t, side="right")) % 2 == 1 else 1.0

    # ---- device interface --------------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        """Settings, seed and a hash of the hidden table (no machine: synthetic timings travel)."""
        digest = hashlib.sha256(self._table.tobytes()).hexdigest()[:16]
        return {**super().fingerprint(), "seed": self.seed, "generator": GENERATOR_VERSION, "table_hash": digest}

    def open(self, channels: Sequence[int], job: int = 0) -> Timer:
        """Noisy samples of job `job` under drift and the interference state (warm-up has no effect); the
        timed seconds are the virtual time the samples represent."""
        job = int(job)
        if job < 0:
            raise ValueError(f"synthetic: job must be ≥ 0, got {job}")
        truth = self.true_latency(channels)
        drift = self.drift_factor(job)

        def run(repeats: int, warmup: int, min_time_s: float) -> tuple[np.ndarray, float]:
            k = self._ticks.get(job, 0)
            self._ticks[job] = k + 1
            rng = np.random.default_rng([self.seed, job] if k == 0 else [self.seed, job, k])
            t = job + min(k, TICKS - 1) / TICKS
            f = drift * self.regime_factor(t)
            level = truth * f
            samples = level * np.exp(self.noise * rng.standard_normal(repeats))
            return samples, float(samples.sum()) / 1e3

        return Timer(run)
