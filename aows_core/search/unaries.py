"""Unary statistics δ_i(c) of the chain energy, estimated during supernet training (§5 eq. average_error, §6).

For every training sample t with configuration c^(t), the sandwich step gives ℓ(x^(t), c^(t)) and the
max configuration's ℓ(x^(t), M) from the same step's logits; δ_i(c) = mean over {t : c_i^(t) = c} of
their difference, for every searchable layer i (node i+1 of the chain) and width c. No division by
the number of layers: it shifts every configuration's Σδ by the same amount (docs/method.md D11).

* `fit_additive` (the default, docs/method.md D26): δ from a frozen-weight estimation pass, by least
  squares of the additive model d = Σ_i δ_i(c_i) over uniformly drawn configurations, with the full
  covariance of the estimate (`UnaryFit`: δ, its standard error, the width signal and its z).
* `EpochUnaries` (OWS, §5: the average over the last epoch): float64 sums, sums of squares and int64
  counts, summable across data-parallel ranks (`merge`, `all_reduce(reduce_fn)`).
* `WindowUnaries(window=K)` (AOWS, §6): the mean of each cell's K most recent samples (ring buffer);
  not summable: every rank updates its copy with the gathered batch (`all_gather_update(gather_fn)`).

`update(widths_idx, diffs)` takes CHOICE INDICES of shape (B, n_layers) or (B, n+1), or (R, B, ·) with
diffs (R, B), taken in row-major order. `delta()` is NaN where the count is 0 (D13). The collectives
are passed in (training/distributed.py holds the torch ones); None means this rank alone. Numpy only.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from ..space import SearchSpace, layer_columns, pad_nodes

__all__ = ["EpochUnaries", "UnaryFit", "WindowUnaries", "fit_additive", "layer_sizes", "all_gather_update",
           "node_deltas", "width_signal"]


def layer_sizes(space_or_sizes: SearchSpace | Sequence[int]) -> tuple[int, ...]:
    """Number of width choices of every searchable layer, from a space or given sizes."""
    if isinstance(space_or_sizes, SearchSpace):
        return tuple(len(c) for c in space_or_sizes.layer_choices)
    sizes = tuple(int(k) for k in space_or_sizes)
    if not sizes or min(sizes) < 1:
        raise ValueError(f"layer sizes must be positive integers, got {list(sizes)}")
    return sizes


def _mean_se(sums: np.ndarray, sumsq: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Standard error of a mean from Σx, Σx² and n (sample variance), NaN where n < 2."""
    with np.errstate(invalid="ignore", divide="ignore"):
        m = sums / n
        var = np.maximum(sumsq / n - m * m, 0.0) * n / (n - 1)
        return np.where(n > 1, np.sqrt(var / n), np.nan)


class _Unaries:
    """Shared validation, layout and export of the two estimators."""

    kind = "base"
    estimator = "training"  # the unaries artifact's `estimator` column (D26)

    def __init__(self, space_or_sizes: SearchSpace | Sequence[int]):
        self.sizes = layer_sizes(space_or_sizes)
        self.n_layers = len(self.sizes)
        self.K = max(self.sizes)
        self._valid = np.zeros((self.n_layers, self.K), dtype=bool)
        for i, k in enumerate(self.sizes):
            self._valid[i, :k] = True
        self._sizes_arr = np.asarray(self.sizes, dtype=np.int64)

    # ---- input ------------------------------------------------------------------------------
    def _cells(self, widths_idx, diffs) -> tuple[np.ndarray, np.ndarray]:
        """Flat cell ids (layer·K + choice), shape (N, n_layers), and float64 diffs (N,), validated."""
        w = np.asarray(widths_idx)
        d = np.asarray(diffs, dtype=np.float64)
        L = self.n_layers
        if w.ndim < 2:
            raise ValueError(f"widths_idx must be (B, {L}) or (B, {L + 2}) choice indices, got shape {w.shape}")
        w = layer_columns(w, L, "widths_idx")
        if d.shape != w.shape[:-1]:
            raise ValueError(f"diffs must have shape {w.shape[:-1]} (one per sample), got {d.shape}")
        if not np.issubdtype(w.dtype, np.integer):
            if not np.all(np.equal(np.mod(w, 1), 0)):
                raise ValueError("widths_idx must hold integer choice indices (not channel counts or floats)")
        w = w.reshape(-1, L).astype(np.int64, copy=False)
        d = d.reshape(-1)
        if w.size and ((w < 0).any() or (w >= self._sizes_arr).any()):
            bad = np.argwhere((w < 0) | (w >= self._sizes_arr))[0]
            raise ValueError(
                f"choice index {int(w[bad[0], bad[1]])} at layer {int(bad[1])} is outside 0..{self.sizes[bad[1]] - 1} "
                "(widths_idx takes choice indices, not channel counts)"
            )
        if not np.isfinite(d).all():
            j = int(np.flatnonzero(~np.isfinite(d))[0])
            raise ValueError(f"non-finite loss difference {d[j]} for sample {j}; refusing to poison the unaries")
        return w + (np.arange(L, dtype=np.int64) * self.K)[None, :], d

    # ---- output -----------------------------------------------------------------------------
    def _padded(self) -> tuple[np.ndarray, np.ndarray]:
        """(L, K) float64 δ (NaN where count 0 and on padding) and (L, K) int64 counts."""
        raise NotImplementedError

    def delta(self) -> list[np.ndarray]:
        """δ_i(c) per searchable layer (eq. average_error), float64, NaN where the count is 0."""
        d, _ = self._padded()
        return [d[i, :k].copy() for i, k in enumerate(self.sizes)]

    def counts(self) -> list[np.ndarray]:
        """Number of samples behind each δ_i(c), int64 (for windows: how many the window holds)."""
        _, n = self._padded()
        return [n[i, :k].copy() for i, k in enumerate(self.sizes)]

    def node_unaries(self) -> list[np.ndarray]:
        """δ of every chain node 0..n (zeros on the fixed ends, NaN where unvisited)."""
        return pad_nodes(self.delta())

    def _padded_se(self) -> np.ndarray:
        """(L, K) float64 standard error of δ (NaN where it cannot be estimated)."""
        raise NotImplementedError

    def standard_errors(self) -> list[np.ndarray]:
        """Standard error of every δ_i(c), float64, NaN where the count is < 2."""
        se = self._padded_se()
        return [se[i, :k].copy() for i, k in enumerate(self.sizes)]

    def rows(self, space: SearchSpace, epoch: int) -> list[dict[str, Any]]:
        """Records of the "unaries" schema: layer, width, delta (None iff count 0), delta_se, count, epoch."""
        if layer_sizes(space) != self.sizes:
            raise ValueError(f"space {space.name!r} has layer sizes {list(layer_sizes(space))}, these unaries {list(self.sizes)}")
        d, n = self._padded()
        se = self._padded_se()
        out = []
        for i, widths in enumerate(space.layer_choices):
            for j, w in enumerate(widths):
                cnt = int(n[i, j])
                out.append(
                    {
                        "layer": i,
                        "width": int(w),
                        "delta": float(d[i, j]) if cnt > 0 else None,
                        "delta_se": float(se[i, j]) if cnt > 1 and math.isfinite(se[i, j]) else None,
                        "count": cnt,
                        "epoch": int(epoch),
                        "estimator": self.estimator,
                    }
                )
        return out

    def _check_state(self, state: dict, keys: Sequence[str]) -> None:
        if state.get("kind") != self.kind:
            raise ValueError(f"state of a {state.get('kind')!r} estimator cannot be loaded into a {self.kind!r} one")
        if tuple(int(k) for k in state.get("sizes", ())) != self.sizes:
            raise ValueError(f"state has layer sizes {list(state.get('sizes', ()))}, this estimator {list(self.sizes)}")
        for k in keys:
            if k not in state:
                raise ValueError(f"unaries state lacks {k!r}")


class EpochUnaries(_Unaries):
    """OWS statistics (§5): float64 sums and int64 counts per (layer, width) since the last `reset()`."""

    kind = "epoch"

    def __init__(self, space_or_sizes: SearchSpace | Sequence[int]):
        super().__init__(space_or_sizes)
        self.sums = np.zeros((self.n_layers, self.K), dtype=np.float64)  # raw, summable across ranks
        self.sumsq = np.zeros((self.n_layers, self.K), dtype=np.float64)  # Σ d², for the standard error
        self.n = np.zeros((self.n_layers, self.K), dtype=np.int64)

    def reset(self) -> None:
        """Start a new averaging period (an epoch)."""
        self.sums[:] = 0.0
        self.sumsq[:] = 0.0
        self.n[:] = 0

    def update(self, widths_idx, diffs) -> None:
        """Add samples: widths_idx (B, n_layers) choice indices, diffs (B,) = ℓ(x, c) − ℓ(x, M)."""
        cells, d = self._cells(widths_idx, diffs)
        if d.size == 0:
            return
        size = self.n_layers * self.K
        flat = cells.ravel()
        rep = np.repeat(d, self.n_layers)
        self.sums += np.bincount(flat, weights=rep, minlength=size).reshape(self.sums.shape)
        self.sumsq += np.bincount(flat, weights=rep * rep, minlength=size).reshape(self.sumsq.shape)
        self.n += np.bincount(flat, minlength=size).reshape(self.n.shape)

    def _padded(self) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            d = np.where(self.n > 0, self.sums / np.maximum(self.n, 1), np.nan)
        return d, self.n.copy()

    def _padded_se(self) -> np.ndarray:
        return _mean_se(self.sums, self.sumsq, self.n)

    # ---- data parallel ----------------------------------------------------------------------
    def merge(self, other: "EpochUnaries") -> "EpochUnaries":
        """Add another rank's (or period's) sums and counts into this one."""
        if not isinstance(other, EpochUnaries) or other.sizes != self.sizes:
            raise ValueError("can only merge EpochUnaries of the same layer sizes")
        self.sums += other.sums
        self.sumsq += other.sumsq
        self.n += other.n
        return self

    def all_reduce(self, reduce_fn: Callable[[np.ndarray], np.ndarray] | None = None) -> "EpochUnaries":
        """Sum sums and counts over data-parallel ranks: reduce_fn(array) → the elementwise sum over ranks.

        None (a single process): nothing to do; training/distributed.py passes the torch.distributed one.
        """
        if reduce_fn is None:
            return self
        self.sums = np.asarray(reduce_fn(self.sums), dtype=np.float64).reshape(self.sums.shape).copy()
        self.sumsq = np.asarray(reduce_fn(self.sumsq), dtype=np.float64).reshape(self.sumsq.shape).copy()
        self.n = np.asarray(reduce_fn(self.n), dtype=np.int64).reshape(self.n.shape).copy()
        return self

    # ---- resume -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "sizes": list(self.sizes), "sums": self.sums.copy(), "sumsq": self.sumsq.copy(),
                "n": self.n.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_state(state, ("sums", "n"))
        sums = np.asarray(state["sums"], dtype=np.float64)
        n = np.asarray(state["n"], dtype=np.int64)
        # a state written before standard errors were kept has no Σ d²: its standard errors are unknown (NaN)
        sumsq = np.asarray(state.get("sumsq", np.full(sums.shape, np.nan)), dtype=np.float64)
        if sums.shape != self.sums.shape or n.shape != self.n.shape or sumsq.shape != self.sums.shape:
            raise ValueError(f"unaries state arrays have shapes {sums.shape}, {n.shape}; expected {self.sums.shape}")
        self.sums, self.sumsq, self.n = sums.copy(), sumsq.copy(), n.copy()


class WindowUnaries(_Unaries):
    """AOWS statistics (§6): per (layer, width) the mean of its `window` most recent samples (a ring buffer)."""

    kind = "window"

    def __init__(self, space_or_sizes: SearchSpace | Sequence[int], window: int):
        super().__init__(space_or_sizes)
        window = int(window)
        if window < 1:
            raise ValueError(f"window must be ≥ 1, got {window}")
        self.window = window
        self.buf = np.zeros((self.n_layers * self.K, window), dtype=np.float64)  # cell × slot
        self.pos = np.zeros(self.n_layers * self.K, dtype=np.int64)  # next slot to write
        self.seen = np.zeros(self.n_layers * self.K, dtype=np.int64)  # samples ever received

    def reset(self) -> None:
        self.buf[:] = 0.0
        self.pos[:] = 0
        self.seen[:] = 0

    def update(self, widths_idx, diffs) -> None:
        """Add samples in order: each (layer, width) cell keeps only its `window` most recent differences."""
        cells, d = self._cells(widths_idx, diffs)
        if d.size == 0:
            return
        flat = cells.ravel()  # row-major: sample order first, so arrival order within a cell is sample order
        vals = np.repeat(d, self.n_layers)
        order = np.argsort(flat, kind="stable")
        fc, fv = flat[order], vals[order]
        starts = np.flatnonzero(np.r_[True, fc[1:] != fc[:-1]])
        lengths = np.diff(np.r_[starts, fc.size])
        rank = np.arange(fc.size) - np.repeat(starts, lengths)  # arrival rank within its cell
        total = np.repeat(lengths, lengths)
        keep = rank >= total - self.window  # only the last `window` arrivals of a cell can survive
        fc, fv, rank = fc[keep], fv[keep], rank[keep]
        slot = (self.pos[fc] + rank) % self.window  # distinct within a cell after the filter
        self.buf[fc, slot] = fv
        add = np.bincount(flat, minlength=self.pos.size)
        self.pos = (self.pos + add) % self.window
        self.seen += add

    def _padded(self) -> tuple[np.ndarray, np.ndarray]:
        n = np.minimum(self.seen, self.window)
        s = self.buf.sum(1)  # unused slots hold 0
        with np.errstate(invalid="ignore", divide="ignore"):
            d = np.where(n > 0, s / np.maximum(n, 1), np.nan)
        shape = (self.n_layers, self.K)
        return d.reshape(shape), n.reshape(shape)

    def _padded_se(self) -> np.ndarray:
        n = np.minimum(self.seen, self.window)
        se = _mean_se(self.buf.sum(1), (self.buf * self.buf).sum(1), n)  # unused slots hold 0
        return se.reshape(self.n_layers, self.K)

    def seed_means(self, delta: Sequence[np.ndarray], counts: Sequence[np.ndarray]) -> None:
        """Start from per-(layer, width) means (e.g. OWS's last epoch): min(count, window) copies of each mean."""
        self.reset()
        for i, (d, n) in enumerate(zip(delta, counts)):
            for j, (dj, nj) in enumerate(zip(np.asarray(d, dtype=np.float64), np.asarray(n, dtype=np.int64))):
                k = int(min(nj, self.window))
                if k > 0:
                    cell = i * self.K + j
                    self.buf[cell, :k] = dj
                    self.pos[cell] = k % self.window
                    self.seen[cell] = k

    def total_seen(self) -> list[np.ndarray]:
        """How many samples each (layer, width) received in all (not only those in the window)."""
        s = self.seen.reshape(self.n_layers, self.K)
        return [s[i, :k].copy() for i, k in enumerate(self.sizes)]

    def merge(self, other: Any) -> "WindowUnaries":
        raise TypeError(
            "window means are not summable across ranks; gather each step's (widths_idx, diffs) from every rank and "
            "update each copy with the gathered batch (see all_gather_update)"
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "sizes": list(self.sizes),
            "window": self.window,
            "buf": self.buf.copy(),
            "pos": self.pos.copy(),
            "seen": self.seen.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_state(state, ("window", "buf", "pos", "seen"))
        if int(state["window"]) != self.window:
            raise ValueError(f"state has window {state['window']}, this estimator {self.window}")
        buf = np.asarray(state["buf"], dtype=np.float64)
        if buf.shape != self.buf.shape:
            raise ValueError(f"unaries state buffer has shape {buf.shape}; expected {self.buf.shape}")
        self.buf = buf.copy()
        self.pos = np.asarray(state["pos"], dtype=np.int64).reshape(self.pos.shape).copy()
        self.seen = np.asarray(state["seen"], dtype=np.int64).reshape(self.seen.shape).copy()


def all_gather_update(est: _Unaries, widths_idx, diffs, gather_fn: Callable[[np.ndarray], list[np.ndarray]] | None = None) -> None:
    """Update `est` with the (widths_idx, diffs) of every data-parallel rank, in rank order (§6).

    gather_fn(array) → list of that array from every rank (equal shapes); None: this rank's batch alone
    (training/distributed.py passes the torch.distributed all_gather_object one).
    """
    w = np.asarray(widths_idx)
    d = np.asarray(diffs, dtype=np.float64)
    if gather_fn is None:
        est.update(w, d)
        return
    ws, ds = gather_fn(w), gather_fn(d)
    est.update(np.concatenate([np.asarray(x) for x in ws], axis=-2), np.concatenate([np.asarray(x) for x in ds], axis=-1))


def node_deltas(
    space: SearchSpace, layers: np.ndarray, widths: np.ndarray, counts: np.ndarray, deltas: np.ndarray, where: Any,
    *, epoch: int, error: type[Exception] = ValueError,
) -> list[np.ndarray]:
    """Per-node δ of eq. average_error (NaN where count = 0) from the rows of one epoch of a unaries table.

    `where` names the source in messages; `error` is raised for rows that cannot belong to the space
    (artifacts.read_unaries passes ArtifactError).
    """
    path, chosen = where, epoch
    if (counts < 0).any():
        k = int(np.flatnonzero(counts < 0)[0])
        raise error(f"{path}: layer {int(layers[k])} width {int(widths[k])} has count {int(counts[k])}; a count "
                    f"is never negative: the file is corrupt, rerun the supernet training that wrote it")
    u = pad_nodes([np.full(len(c), np.nan) for c in space.layer_choices])
    seen = [np.zeros(len(c), bool) for c in space.layer_choices]
    for layer, w, n, d in zip(layers, widths, counts, deltas):
        layer, w = int(layer), int(w)
        if not 0 <= layer < space.n_layers or w not in space.layer_choices[layer]:
            raise error(f"{path}: layer {layer} width {w} is not in space {space.name!r}")
        j = space.layer_choices[layer].index(w)
        seen[layer][j] = True
        if n > 0:
            if not math.isfinite(d):
                raise ValueError(f"{path}: visited unary at layer {layer} width {w} is {d} (count {n}); retrain or fix it")
            u[layer + 1][j] = d
    for layer, s in enumerate(seen):
        if not s.all():
            missing = [w for w, ok in zip(space.layer_choices[layer], s) if not ok]
            raise error(f"{path}: epoch {chosen} lacks rows for layer {layer} widths {missing}")
    return u


class UnaryFit(_Unaries):
    """δ_i(c) fitted by least squares of the additive model (D26), with standard errors and the width signal.

    Built by `fit_additive`. δ keeps eq. average_error's scale: each layer's count-weighted mean of δ is
    the mean difference d̄, as it is for the plain averages; Σδ of two configurations differ by the fitted
    difference of their losses. `cov` is the covariance of the visited δ (flattened cell order).
    """

    kind = "fit"
    estimator = "frozen"

    def __init__(self, sizes: Sequence[int], delta: np.ndarray, se: np.ndarray, n: np.ndarray, cov: np.ndarray,
                 r2: float, n_samples: int):
        super().__init__(sizes)
        self._d, self._se, self._n, self.cov = delta, se, n, cov
        self.r2, self.n_samples = float(r2), int(n_samples)

    def _padded(self) -> tuple[np.ndarray, np.ndarray]:
        return self._d.copy(), self._n.copy()

    def _padded_se(self) -> np.ndarray:
        return self._se.copy()

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "sizes": list(self.sizes), "delta": self._d.copy(), "se": self._se.copy(),
                "n": self._n.copy(), "cov": self.cov.copy(), "r2": self.r2, "n_samples": self.n_samples}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "UnaryFit":
        return cls(state["sizes"], np.asarray(state["delta"]), np.asarray(state["se"]), np.asarray(state["n"]),
                   np.asarray(state["cov"]), state["r2"], state["n_samples"])

    def contrast(self, a: Sequence[int], b: Sequence[int]) -> tuple[float, float]:
        """(Σδ(a) − Σδ(b), its standard error) for two configurations given as per-layer choice indices."""
        w = np.zeros((self.n_layers, self.K))
        for i, (ja, jb) in enumerate(zip(a, b)):
            w[i, int(ja)] += 1.0
            w[i, int(jb)] -= 1.0
        w = w.ravel()
        if np.isnan(self._d.ravel()[w != 0]).any():
            return float("nan"), float("nan")
        d = np.nan_to_num(self._d.ravel())
        return float(w @ d), float(math.sqrt(max(w @ self.cov @ w, 0.0)))


def width_signal(est: _Unaries) -> dict[str, float]:
    """Σδ(min) − Σδ(max) (the max network's advantage under the unaries), its standard error and z.

    For a `UnaryFit` the error comes from the fit's covariance; for the running estimators the cells
    are independent means. NaN where a needed cell was never visited.
    """
    lo = [0] * est.n_layers
    hi = [k - 1 for k in est.sizes]
    if isinstance(est, UnaryFit):
        diff, se = est.contrast(lo, hi)
    else:
        d, s = est._padded(), est._padded_se()
        rows = np.arange(est.n_layers)
        diff = float(d[0][rows, lo].sum() - d[0][rows, hi].sum())
        se = float(np.sqrt((s[rows, lo] ** 2).sum() + (s[rows, hi] ** 2).sum()))
    z = diff / se if se > 0 and math.isfinite(se) else float("nan")
    return {"width_signal": diff, "width_signal_se": se, "width_signal_z": z}


def fit_additive(space_or_sizes: SearchSpace | Sequence[int], widths_idx, diffs) -> UnaryFit:
    """δ by least squares of d(c) = a + Σ_i β_i(c_i) over sampled configurations (eq. average_error, D26).

    widths_idx: (N, n_layers) or (N, n+1) choice indices; diffs (N,): ℓ(c) − ℓ(M) of each configuration
    (one number per configuration, e.g. a batch mean). Every other layer's contribution is fitted instead
    of averaged over, which removes the other layers' variance from each δ_i(c) (under independent
    uniform draws both estimate the same differences between widths of a layer). δ_i(c) = β_i(c) −
    Σ_c' (n_ic'/N) β_i(c') + d̄; unvisited cells are NaN. Standard errors from σ̂²(XᵀX)⁻¹ with
    σ̂² = RSS / (N − p); NaN when N ≤ p.
    """
    sizes = layer_sizes(space_or_sizes)
    L, K = len(sizes), max(sizes)
    w = layer_columns(np.asarray(widths_idx), L, "widths_idx").reshape(-1, L).astype(np.int64)
    d = np.asarray(diffs, dtype=np.float64).reshape(-1)
    if w.shape[0] != d.size:
        raise ValueError(f"{w.shape[0]} configurations but {d.size} loss differences")
    if d.size == 0:
        raise ValueError("fit_additive needs at least one configuration")
    if not np.isfinite(d).all():
        raise ValueError("non-finite loss difference; refusing to fit the unaries")
    if (w < 0).any() or (w >= np.asarray(sizes)).any():
        raise ValueError("widths_idx holds a choice index outside its layer's choices")
    N = d.size
    n = np.zeros((L, K), dtype=np.int64)
    for i in range(L):
        n[i, : sizes[i]] = np.bincount(w[:, i], minlength=sizes[i])
    # design: intercept + one column per visited non-reference cell (reference = the layer's first visited)
    cols: list[tuple[int, int]] = []
    for i in range(L):
        seen = np.flatnonzero(n[i, : sizes[i]] > 0)
        cols += [(i, int(j)) for j in seen[1:]]
    X = np.zeros((N, 1 + len(cols)))
    X[:, 0] = 1.0
    for c, (i, j) in enumerate(cols):
        X[:, 1 + c] = w[:, i] == j
    p = X.shape[1]
    xtx_inv = np.linalg.pinv(X.T @ X)
    beta = xtx_inv @ (X.T @ d)
    resid = d - X @ beta
    s2 = float(resid @ resid) / (N - p) if N > p else float("nan")
    tss = float(((d - d.mean()) ** 2).sum())
    r2 = 1.0 - float(resid @ resid) / tss if tss > 0 else float("nan")
    # δ = A·β + d̄ as a linear map of d: M = A (XᵀX)⁻¹ Xᵀ + 1ᵀ/N, so cov(δ) = σ̂² M Mᵀ
    A = np.zeros((L * K, p))
    for c, (i, j) in enumerate(cols):
        A[i * K + j, 1 + c] += 1.0
        A[i * K : i * K + sizes[i], 1 + c] -= n[i, j] / N
    M = A @ xtx_inv @ X.T + 1.0 / N
    delta = (A @ beta + d.mean()).reshape(L, K)
    cov = s2 * (M @ M.T)
    visited = (n > 0).ravel()
    cov[~visited, :] = 0.0
    cov[:, ~visited] = 0.0
    se = np.sqrt(np.maximum(np.diag(cov), 0.0)).reshape(L, K)
    delta = np.where(n > 0, delta, np.nan)
    se = np.where(n > 1, se, np.nan)
    return UnaryFit(sizes, delta, se, n, cov, r2, N)
