"""AOWS adaptive sampling (§6, supplementary B): temperature schedule, energy scale and the sampler.

After the uniform warm-up, each iteration samples the batch's configurations from the relaxed min-sum
(§6) of E_γ(c) = Σ_i δ_i(c_i) + γ Σ_i L_i(c_i, c_{i+1}) (eq. viterbi), with γ the Lagrange multiplier
of the constrained decode (eq. lagrange) at the current unaries and target, and T annealed per
iteration: log-linear through (u, T) = (0, 1), (1/15, 1e-2), (1/3, 1e-3), (1, 5e-4), u = (epochs
elapsed − W) / (E − W) (supplementary B; docs/method.md D19). A target that does not bind (γ = 0: the unconstrained optimum is
faster than the target) is, by default, met from above instead: γ < 0 is the multiplier of
min Σδ s.t. ΣL ≥ L_T, so sampling stays centred on the target's latency (`unbound="target"`, D31);
`unbound="optimum"` samples around the unconstrained optimum as §6 reads literally. T applies to E/s: with scale "auto",
s is calibrated so that T = 1 gives nearly uniform marginals (mean normalised entropy
UNIFORM_ENTROPY), the paper's starting point, whatever the unaries' units (`calibrate_scale`, D18).
Sampling "per_node" (default) or "joint" (D20). The uniform samplers of the warm-up and of OWS are
here too. Numpy only.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..config import AowsSettings
from ..space import SearchSpace, pad_nodes
from .chain import Chain
from .graph import SpaceChain, SpaceMarginals, space_chain, space_latency_chain
from .marginals import Marginals
from .results import DecodeResult, InfeasibleTarget
from .targets import lut_tables
from .unvisited import apply_unvisited

# (u, T) anchors of supplementary B, u = (epochs elapsed − W) / (E − W).
ANCHORS: tuple[tuple[float, float], ...] = ((0.0, 1.0), (1.0 / 15.0, 1e-2), (1.0 / 3.0, 1e-3), (1.0, 5e-4))
MODES = ("per_node", "joint")
# Where a target that does not bind centres the sampling (D31).
UNBOUND = ("target", "optimum")
# Mean normalised marginal entropy at T = 1 under the "auto" scale (D18): nearly uniform, as in §6.
UNIFORM_ENTROPY = 0.9


def temperature_at(u: float, anchors: Sequence[tuple[float, float]] = ANCHORS) -> float:
    """T(u): piecewise log-linear through the anchors, constant beyond the first and last (supp. B)."""
    us = np.array([a for a, _ in anchors], dtype=np.float64)
    ts = np.log(np.array([t for _, t in anchors], dtype=np.float64))
    if (np.diff(us) <= 0).any():
        raise ValueError("temperature anchors must have increasing u")
    return float(np.exp(np.interp(float(u), us, ts)))


class TemperatureSchedule:
    """T as a function of (fractional) epochs elapsed, for `warmup` uniform epochs out of `epochs` (supp. B)."""

    def __init__(self, warmup: float, epochs: float, anchors: Sequence[tuple[float, float]] = ANCHORS):
        if not epochs > warmup >= 0:
            raise ValueError(f"need epochs > warmup ≥ 0, got warmup={warmup}, epochs={epochs}")
        self.warmup, self.epochs = float(warmup), float(epochs)
        self.anchors = tuple((float(u), float(t)) for u, t in anchors)
        temperature_at(0.0, self.anchors)  # validates

    def u(self, epochs_elapsed: float) -> float:
        """Progress of the adaptive phase: 0 at the end of warm-up, 1 at the last epoch."""
        return (float(epochs_elapsed) - self.warmup) / (self.epochs - self.warmup)

    def __call__(self, epochs_elapsed: float) -> float:
        return temperature_at(self.u(epochs_elapsed), self.anchors)

    def at_step(self, epoch: int, step: int, steps_per_epoch: int) -> float:
        """T at iteration `step` (0-based) of epoch `epoch` (0-based): epochs elapsed = epoch + step/steps."""
        return self(epoch + step / float(steps_per_epoch))


def uniform_paths(space_or_chain: SearchSpace | Chain | SpaceChain, size: int, rng: np.random.Generator) -> np.ndarray:
    """(size, n+1) choice indices drawn uniformly (the warm-up and OWS sampler); a chain's forbidden choices are avoided."""
    u = rng.random((int(size), space_or_chain.n_nodes))
    return _map_uniform(space_or_chain, u)


def _map_uniform(obj: SearchSpace | Chain | SpaceChain, u: np.ndarray) -> np.ndarray:
    """Map uniform floats u (P, n+1) to choice indices, uniform over each node's allowed choices."""
    if isinstance(obj, SearchSpace):
        counts = np.array([len(c) for c in obj.choices], dtype=np.int64)
        return np.minimum((u * counts).astype(np.int64), counts - 1)
    out = np.empty(u.shape, dtype=np.int64)
    for i, k in enumerate(obj.counts):
        allowed = np.flatnonzero(obj.allowed[i, :k])
        out[:, i] = allowed[np.minimum((u[:, i] * allowed.size).astype(np.int64), allowed.size - 1)]
    return out


def calibrate_scale(chain: Chain | SpaceChain, gamma: float, entropy: float = UNIFORM_ENTROPY) -> float:
    """s such that the marginals of exp(−E_γ/s) have mean normalised entropy `entropy` (D18).

    The entropy rises with s (a hotter chain), so s is found by bisection in log s. A flat energy (every
    s gives the uniform marginals) gives s = 1.
    """
    if not 0.0 < entropy < 1.0:
        raise ValueError(f"entropy must lie in (0, 1), got {entropy}")
    lo, hi = -30.0, 30.0  # log s
    if chain.marginals(gamma, math.exp(lo)).mean_entropy() >= entropy:
        return 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if chain.marginals(gamma, math.exp(mid)).mean_entropy() < entropy:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-3:
            break
    return math.exp(0.5 * (lo + hi))


def sampling_gamma(chain: Chain | SpaceChain, decoded: DecodeResult, unbound: str = "target") -> tuple[float, bool]:
    """(γ to sample at, whether the target binds) from the constrained decode of the target (D21, D31).

    A binding target samples at its dual optimum γ* ≥ 0 (§6). A target that does not bind (γ* = 0, the
    unconstrained optimum faster than the target) samples, with unbound="target", at γ = −γ' where γ' ≥ 0 is
    the dual optimum of min Σδ s.t. ΣL ≥ L_T (the same breakpoint search on the chain with −L): the
    Lagrangian optimum then sits at the target's latency from the slow side, so the run specialises to the
    target rather than reinforcing whichever fast path it samples. unbound="optimum" keeps γ = 0.
    """
    if decoded.method != "unconstrained" or decoded.latency >= decoded.target - chain.ftol:
        return float(decoded.gamma), True
    if unbound == "optimum" or decoded.target >= chain.latency(chain.max_latency()) - chain.ftol:
        return 0.0, False  # (every network meets a target at or above the slowest one: nothing to centre on)
    return -float(chain.negated().decode(-decoded.target).gamma), False


def _resolve_nodes(space: SearchSpace, unaries) -> list[np.ndarray]:
    """Node unaries (n+1 arrays) from an estimator (`node_unaries()`), per-node or per-layer arrays."""
    if hasattr(unaries, "node_unaries"):
        u = unaries.node_unaries()
    else:
        u = [np.asarray(x, dtype=np.float64).reshape(-1) for x in unaries]
        if len(u) == space.n_layers:
            u = pad_nodes(u)
    if len(u) != space.n_nodes:
        raise ValueError(f"expected unaries of {space.n_layers} layers or {space.n_nodes} nodes, got {len(u)}")
    for i, (x, c) in enumerate(zip(u, space.choices)):
        if x.size != len(c):
            raise ValueError(f"node {i}: {x.size} unaries for {len(c)} width choices")
    return u


class AOWSSampler:
    """Per-iteration configuration sampler of AOWS (§6): γ from the constrained decode, marginals at T·s, samples.

    `sample(unaries, temperature, size, rng)` → (size, n+1) choice indices. Each call:
    1. resolves unvisited widths (NaN δ) with `policy` (`aows.unvisited`, unvisited.apply_unvisited; default
       "pessimistic", so a width that has not been seen stays reachable, unlike "exclude");
    2. every `refresh` calls (the first included): γ ← `Chain.decode(target).gamma` at the current
       unaries — where that is 0 (the target does not bind) and `aows.unbound` is "target", γ ← −(the
       multiplier of min Σδ s.t. ΣL ≥ target) (`sampling_gamma`, D31) — and with `aows.temperature_scale` auto
       s ← `calibrate_scale` at that γ;
    3. marginals of exp(−E_γ/(T·s)) by the relaxed min-sum (`Chain.marginals(γ, T·s)`);
    4. draws `size` configurations, "per_node" (default) or "joint" (`aows.sampling`).
    `last` records step, γ, T, s, T·s, mode, whether γ was refreshed, whether the target binds, the
    decoded path's latency and objective, the marginals' mean normalised entropy and the mean LUT latency of the drawn
    configurations; `state_dict()` holds what a resume needs (step, γ, s, the draws' seed).
    """

    def __init__(self, space: SearchSpace, lut_x: np.ndarray, target_ms: float, settings: AowsSettings = AowsSettings(),
                 *, refresh: int = 1, seed: int = 0):
        """`settings`: the `aows:` section (its unvisited policy, sampling mode, temperature scale and unbound rule)."""
        policy, mode, scale, unbound = settings.unvisited, settings.sampling, settings.temperature_scale, settings.unbound
        if mode not in MODES:
            raise ValueError(f"unknown sampling mode {mode!r}; valid: {list(MODES)}")
        if unbound not in UNBOUND:
            raise ValueError(f"unknown unbound-target rule {unbound!r}; valid: {list(UNBOUND)}")
        if not (scale == "auto" or (isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale > 0)):
            raise ValueError(f"scale must be 'auto' or a positive number, got {scale!r}")
        if int(refresh) < 1:
            raise ValueError(f"refresh must be ≥ 1 (steps between γ updates), got {refresh}")
        apply_unvisited([np.zeros(1)], policy)  # validates the policy name
        self.space = space
        self.latency = lut_tables(space, lut_x)
        self.target = float(target_ms)
        self.policy = policy
        self.mode = mode
        self.scale = scale
        self.refresh = int(refresh)
        self.seed = int(seed)
        self.unbound = unbound
        # Fail early on a target below the fastest configuration (D14).
        space_latency_chain(space, self.latency).check_target(self.target)
        self.step = 0
        self.gamma: float | None = None
        self.binding = True
        self.s: float | None = None if scale == "auto" else float(scale)
        self.last: dict[str, Any] = {}

    def chain(self, unaries) -> Chain | SpaceChain:
        """The chain of the current unaries (unvisited widths resolved by the policy) and the LUT (D44: a residual
        space compiled to one)."""
        u = apply_unvisited(_resolve_nodes(self.space, unaries), self.policy, widths=self.space.choices)
        return space_chain(self.space, u, self.latency)

    def marginals(self, unaries, temperature: float) -> Marginals | SpaceMarginals:
        """Relaxed min-sum marginals at T·s for the current unaries (refreshing γ and s when due)."""
        T = float(temperature)
        if not (T > 0 and math.isfinite(T)):
            raise ValueError(f"temperature must be positive and finite, got {temperature}")
        ch = self.chain(unaries)
        refreshed = self.gamma is None or self.step % self.refresh == 0
        info: dict[str, Any] = {}
        if refreshed:
            res = ch.decode(self.target)
            self.gamma, self.binding = sampling_gamma(ch, res, self.unbound)
            info = {"decoded_latency": float(res.latency), "decoded_objective": float(res.objective)}
            self._decoded = res.path
            if self.scale == "auto":
                self.s = calibrate_scale(ch, self.gamma)
        mg = ch.marginals(self.gamma, T * self.s)
        self.last = {
            "step": self.step,
            "gamma": self.gamma,
            "temperature": T,
            "scale": self.s,
            "effective_temperature": T * self.s,
            "mode": self.mode,
            "refreshed": bool(refreshed),
            "binding": self.binding,
            "entropy": mg.mean_entropy(),
            **info,
        }
        return mg

    def sample(self, unaries, temperature: float, size: int, rng: np.random.Generator) -> np.ndarray:
        """(size, n+1) choice indices for the next batch (§6 steps 1 and 4 of each iteration)."""
        mg = self.marginals(unaries, temperature)
        out = mg.sample(int(size), rng, self.mode)
        self.last["sampled_latency"] = float(np.mean(mg.chain.latency(out)))
        self.step += 1
        return out

    @property
    def decoded_path(self) -> np.ndarray | None:
        """Choice indices of the constrained decode at the last γ refresh."""
        return getattr(self, "_decoded", None)

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "gamma": self.gamma, "s": self.s, "seed": self.seed, "binding": self.binding,
                "refresh": self.refresh, "mode": self.mode, "policy": self.policy, "target": self.target,
                "unbound": self.unbound}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k in ("seed", "refresh", "mode", "policy", "target", "unbound"):
            if k in state and state[k] != getattr(self, k):
                raise ValueError(f"sampler state has {k}={state[k]!r}, this sampler {getattr(self, k)!r}")
        self.step = int(state["step"])
        self.gamma = None if state["gamma"] is None else float(state["gamma"])
        self.s = None if state["s"] is None else float(state["s"])
        self.binding = bool(state.get("binding", True))


def uniform_layer_indices(space: SearchSpace, size: int, rng: np.random.Generator) -> np.ndarray:
    """(size, n_layers) choice indices, each layer uniform over its widths (§5 per-sample sampling)."""
    return np.stack([rng.integers(0, len(c), size) for c in space.layer_choices], axis=1)


__all__ = [
    "ANCHORS",
    "MODES",
    "AOWSSampler",
    "InfeasibleTarget",
    "TemperatureSchedule",
    "UNIFORM_ENTROPY",
    "calibrate_scale",
    "temperature_at",
    "uniform_layer_indices",
    "uniform_paths",
]
