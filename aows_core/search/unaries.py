"""Unary statistics δ_i(c) of the chain energy, estimated during supernet training (§5 eq. average_error, §6).

For every training sample t with configuration c^(t), the sandwich step gives ℓ(x^(t), c^(t)) and the
max configuration's ℓ(x^(t), M) from the same step's logits; δ_i(c) = mean over {t : c_i^(t) = c} of
their difference, for every searchable layer i (node i+1 of the chain) and width c. No division by
the number of layers: it shifts every configuration's Σδ by the same amount (docs/method.md D11).

* `EpochUnaries` (OWS, §5: the average over the last epoch): float64 sums and int64 counts, summable
  across data-parallel ranks (`merge`, `all_reduce(reduce_fn)`).
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

__all__ = ["EpochUnaries", "WindowUnaries", "layer_sizes", "all_gather_update", "node_deltas"]


def layer_sizes(space_or_sizes: SearchSpace | Sequence[int]) -> tuple[int, ...]:
    """Number of width choices of every searchable layer, from a space or given sizes."""
    if isinstance(space_or_sizes, SearchSpace):
        return tuple(len(c) for c in space_or_sizes.layer_choices)
    sizes = tuple(int(k) for k in space_or_sizes)
    if not sizes or min(sizes) < 1:
        raise ValueError(f"layer sizes must be positive integers, got {list(sizes)}")
    return sizes


class _Unaries:
    """Shared validation, layout and export of the two estimators."""

    kind = "base"

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

    def rows(self, space: SearchSpace, epoch: int) -> list[dict[str, Any]]:
        """Records of the "unaries" schema: layer, width, delta (None iff count 0), count, epoch."""
        if layer_sizes(space) != self.sizes:
            raise ValueError(f"space {space.name!r} has layer sizes {list(layer_sizes(space))}, these unaries {list(self.sizes)}")
        d, n = self._padded()
        out = []
        for i, widths in enumerate(space.layer_choices):
            for j, w in enumerate(widths):
                cnt = int(n[i, j])
                out.append(
                    {
                        "layer": i,
                        "width": int(w),
                        "delta": float(d[i, j]) if cnt > 0 else None,
                        "count": cnt,
                        "epoch": int(epoch),
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
        self.n = np.zeros((self.n_layers, self.K), dtype=np.int64)

    def reset(self) -> None:
        """Start a new averaging period (an epoch)."""
        self.sums[:] = 0.0
        self.n[:] = 0

    def update(self, widths_idx, diffs) -> None:
        """Add samples: widths_idx (B, n_layers) choice indices, diffs (B,) = ℓ(x, c) − ℓ(x, M)."""
        cells, d = self._cells(widths_idx, diffs)
        if d.size == 0:
            return
        size = self.n_layers * self.K
        flat = cells.ravel()
        self.sums += np.bincount(flat, weights=np.repeat(d, self.n_layers), minlength=size).reshape(self.sums.shape)
        self.n += np.bincount(flat, minlength=size).reshape(self.n.shape)

    def _padded(self) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            d = np.where(self.n > 0, self.sums / np.maximum(self.n, 1), np.nan)
        return d, self.n.copy()

    # ---- data parallel ----------------------------------------------------------------------
    def merge(self, other: "EpochUnaries") -> "EpochUnaries":
        """Add another rank's (or period's) sums and counts into this one."""
        if not isinstance(other, EpochUnaries) or other.sizes != self.sizes:
            raise ValueError("can only merge EpochUnaries of the same layer sizes")
        self.sums += other.sums
        self.n += other.n
        return self

    def all_reduce(self, reduce_fn: Callable[[np.ndarray], np.ndarray] | None = None) -> "EpochUnaries":
        """Sum sums and counts over data-parallel ranks: reduce_fn(array) → the elementwise sum over ranks.

        None (a single process): nothing to do; training/distributed.py passes the torch.distributed one.
        """
        if reduce_fn is None:
            return self
        self.sums = np.asarray(reduce_fn(self.sums), dtype=np.float64).reshape(self.sums.shape).copy()
        self.n = np.asarray(reduce_fn(self.n), dtype=np.int64).reshape(self.n.shape).copy()
        return self

    # ---- resume -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "sizes": list(self.sizes), "sums": self.sums.copy(), "n": self.n.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_state(state, ("sums", "n"))
        sums = np.asarray(state["sums"], dtype=np.float64)
        n = np.asarray(state["n"], dtype=np.int64)
        if sums.shape != self.sums.shape or n.shape != self.n.shape:
            raise ValueError(f"unaries state arrays have shapes {sums.shape}, {n.shape}; expected {self.sums.shape}")
        self.sums, self.n = sums.copy(), n.copy()


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
