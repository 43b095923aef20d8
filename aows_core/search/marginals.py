"""Relaxed min-sum (§6 eq. 13, corrected: docs/method.md D17) and sampling from it (D20): Gibbs marginals, FFBS."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _finite_max(M: np.ndarray, axis: int) -> np.ndarray:
    """M.max(axis) with 0 where a slice is all −inf (so M − max stays −inf, not NaN)."""
    m = M.max(axis)
    return np.where(np.isfinite(m), m, 0.0)


def _log_forward(log_unaries: np.ndarray, log_pairwise: np.ndarray) -> np.ndarray:
    """log forward messages −α/T: node i's unary included."""
    out = np.empty(log_unaries.shape)
    out[0] = log_unaries[0]
    for i in range(len(out) - 1):
        M = out[i][:, None] + log_pairwise[i]
        m = _finite_max(M, 0)
        out[i + 1] = log_unaries[i + 1] + m + np.log(np.exp(M - m).sum(0))
    return out


def _log_backward(log_unaries: np.ndarray, log_pairwise: np.ndarray) -> np.ndarray:
    """log backward messages −β/T: node i's unary excluded, 0 at the last node."""
    out = np.empty(log_unaries.shape)
    out[-1] = 0.0
    for i in range(len(out) - 2, -1, -1):
        M = log_pairwise[i] + (log_unaries[i + 1] + out[i + 1])[None, :]
        m = _finite_max(M, 1)
        out[i] = m + np.log(np.exp(M - m[:, None]).sum(1))
    return out


def relaxed_min_sum(chain, gamma: float, temperature: float) -> "Marginals":
    """Gibbs marginals of exp(−E_γ/T) of a `Chain` by forward–backward in the log domain (§6, D17); any finite γ.

    Forbidden choices and transitions are −inf: an all −inf column or row stays −inf, never NaN.
    """
    T, gamma = float(temperature), float(gamma)
    if not (T > 0 and np.isfinite(T)):
        raise ValueError(f"temperature must be finite and > 0, got {temperature}")
    if not np.isfinite(gamma):
        raise ValueError(f"gamma must be finite, got {gamma}")
    log_unaries = chain.padded_unaries * (-1.0 / T)  # −δ/T, −inf on forbidden / padded choices
    log_pairwise = chain.padded_latency * (-gamma / T)  # −γL/T
    if chain.has_forbid:
        log_pairwise = log_pairwise - chain.forbidden_inf
    with np.errstate(divide="ignore"):
        forward = _log_forward(log_unaries, log_pairwise)
        backward = _log_backward(log_unaries, log_pairwise)
        m = forward[-1].max()
        log_z = float(m + np.log(np.exp(forward[-1] - m).sum()))
        log_probs = forward + backward
        log_probs = log_probs - log_probs.max(1, keepdims=True)  # shift first: the mode gets exactly 0 at any scale
        log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))  # then normalise in log space
    return Marginals(chain, gamma, T, forward, backward, log_pairwise, log_probs, np.exp(log_probs), log_z)


class NodeMarginals:
    """Per-node marginals p_i (padded `_probs`, `_log_probs` over `chain.counts`) and the samplers on them (§6)."""

    chain: Any
    _probs: np.ndarray
    _log_probs: np.ndarray

    @property
    def probs(self) -> list[np.ndarray]:
        """p_i(c) per node (ragged), each summing to 1."""
        return [self._probs[i, :k].copy() for i, k in enumerate(self.chain.counts)]

    @property
    def log_probs(self) -> list[np.ndarray]:
        """log p_i(c) per node (ragged); −inf on forbidden choices."""
        return [self._log_probs[i, :k].copy() for i, k in enumerate(self.chain.counts)]

    def mean_entropy(self) -> float:
        """Mean over nodes with several allowed choices of H(p_i) / log(#allowed): 1 uniform, 0 a single path."""
        entropies = []
        for i, k in enumerate(self.chain.counts):
            p = self._probs[i, :k]
            n_allowed = int((self.chain.allowed[i, :k]).sum())
            if n_allowed > 1:
                q = p[p > 0]
                entropies.append(float(-(q * np.log(q)).sum() / np.log(n_allowed)))
        return float(np.mean(entropies)) if entropies else 0.0

    def sample_per_node(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """(size, n+1) configurations, each node drawn independently from p_i (the paper's §6 reading)."""
        cdf = np.cumsum(self._probs, axis=1)
        cdf /= cdf[:, -1:]
        u = rng.random((self.chain.n_nodes, int(size)))
        idx = (cdf[:, :, None] <= u[:, None, :]).sum(1)
        return np.minimum(idx, (self.chain.counts - 1)[:, None]).T.astype(np.int64)

    def sample(self, size: int, rng: np.random.Generator, mode: str = "per_node") -> np.ndarray:
        """Sample configurations (§6): mode "per_node" (product of marginals, default) or "joint" (FFBS)."""
        if mode == "per_node":
            return self.sample_per_node(size, rng)
        if mode == "joint":
            return self.sample_joint(size, rng)
        raise ValueError(f"unknown sampling mode {mode!r}; valid: 'per_node', 'joint'")


@dataclass
class Marginals(NodeMarginals):
    """Output of the relaxed min-sum (§6) on a `Chain`: per-node Gibbs marginals, messages, log Z, and samplers."""

    chain: Any  # the Chain
    gamma: float
    temperature: float
    _log_forward: np.ndarray  # −α/T, padded (n+1, K)
    _log_backward: np.ndarray  # −β/T
    _log_pairwise: np.ndarray  # −γL/T, padded (−inf on forbidden transitions)
    _log_probs: np.ndarray  # normalised log marginals, padded (−inf on padding / forbidden)
    _probs: np.ndarray
    log_z: float  # log Σ_c exp(−E_γ(c)/T)
    _backward_cdf: np.ndarray | None = field(default=None, repr=False)  # [i, c_{i+1}, c_i]: CDF of p(c_i | c_{i+1})

    @property
    def alpha(self) -> list[np.ndarray]:
        """Forward messages α_i(c) in energy units (D17), δ_i(c) included."""
        return [-self.temperature * self._log_forward[i, :k] for i, k in enumerate(self.chain.counts)]

    @property
    def beta(self) -> list[np.ndarray]:
        """Backward messages β_i(c) in energy units (D17), δ_i(c) excluded; β_n = 0."""
        return [-self.temperature * self._log_backward[i, :k] for i, k in enumerate(self.chain.counts)]

    def pairwise(self, i: int) -> np.ndarray:
        """Joint marginal p(c_i, c_{i+1}) of edge i, shape (k_i, k_{i+1})."""
        ch = self.chain
        log_next = -ch.padded_unaries[i + 1] / self.temperature
        M = self._log_forward[i][:, None] + self._log_pairwise[i] + (log_next + self._log_backward[i + 1])[None, :]
        M = M - M.max()
        P = np.exp(M)
        P /= P.sum()
        return P[: ch.counts[i], : ch.counts[i + 1]]

    def _conditional_cdfs(self) -> np.ndarray:
        """[i, c_{i+1}, c_i]: the CDF over c_i of p(c_i | c_{i+1}) (FFBS's backward step)."""
        M = self._log_forward[:-1, :, None] + self._log_pairwise  # [i, c_i, c_{i+1}] ∝ log p(c_i | c_{i+1}) + const
        if self.chain.has_forbid:  # a state no predecessor reaches: its (never used) row stays finite
            m = M.max(1, keepdims=True)
            M = np.exp(M - np.where(np.isfinite(m), m, 0.0))
            cdf = np.cumsum(M, axis=1)
            cdf /= np.where(cdf[:, -1:, :] > 0, cdf[:, -1:, :], 1.0)
        else:
            M = np.exp(M - M.max(1, keepdims=True))
            cdf = np.cumsum(M, axis=1)
            cdf /= cdf[:, -1:, :]
        return np.ascontiguousarray(cdf.transpose(0, 2, 1))

    def sample_joint(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """(size, n+1) configurations drawn jointly from exp(−E_γ/T) by forward-filtering backward-sampling (D20)."""
        ch = self.chain
        n, B = ch.n_nodes, int(size)
        if self._backward_cdf is None and n > 1:
            self._backward_cdf = self._conditional_cdfs()
        u = rng.random((n, B))
        out = np.empty((n, B), dtype=np.int64)
        last = self._log_forward[n - 1]
        w = np.exp(last - last.max())
        cdf = np.cumsum(w)
        cdf /= cdf[-1]
        out[n - 1] = (cdf[:, None] <= u[n - 1][None, :]).sum(0)
        for i in range(n - 2, -1, -1):
            rows = self._backward_cdf[i][out[i + 1]]  # (B, K)
            out[i] = (rows <= u[i][:, None]).sum(1)
        np.minimum(out, (ch.counts - 1)[:, None], out=out)
        return out.T.copy()


__all__ = ["Marginals", "NodeMarginals", "relaxed_min_sum"]
