"""The latency model of §4: design matrix (eq. linear_lat), monotonicity prior, prediction and the LUT table.

The latency of a network is a sum of per-layer terms (eq. lat), one *latency variable* per key
(Θ, c_in, c_out) of the space (eq. lat_variables). Timing P networks gives A x = l (eq. linear_lat):
row p of the sparse design matrix A counts how many edges of network p use each variable. The fit
itself is in `latency.fit` (x ≥ 0, soft L1 hinge prior and ridge: docs/method.md D5–D7).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from ..search.link import IDENTITY, Link
from ..space import SearchSpace, Theta, VarKey
from .sampling import SETS

DIRECTIONS = ("c_in", "c_out", "size")


class LUTFitError(RuntimeError):
    """A latency table that cannot be fitted or used: unobserved variables, failed solve, bad table."""


# ---- design matrix (eq. linear_lat) -------------------------------------------------------------
def design_matrix(space: SearchSpace, idx: np.ndarray) -> sp.csr_matrix:
    """A of eq. linear_lat: A[p, v] = number of edges of network p (node choice indices idx[p]) using variable v."""
    idx = np.asarray(idx, dtype=np.int64)
    if idx.ndim == 1:
        idx = idx[None, :]
    if idx.ndim != 2 or idx.shape[1] != space.n_nodes:
        raise ValueError(f"idx must be (P, {space.n_nodes}) node choice indices; got shape {idx.shape}")
    n_rows = idx.shape[0]
    vids = space.variable_ids(idx)  # (P, n_edges)
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), space.n_edges)
    A = sp.csr_matrix(
        (np.ones(vids.size, dtype=np.float64), (rows, vids.ravel())), shape=(n_rows, space.n_variables)
    )
    A.sum_duplicates()
    return A


def observation_counts(A: sp.spmatrix) -> np.ndarray:
    """n_obs of the LUT file: how many networks (rows of A, eq. linear_lat) use each variable."""
    A = sp.csc_matrix(A, copy=True)
    A.sum_duplicates()
    A.eliminate_zeros()
    return np.diff(A.indptr).astype(np.int64)


def _missing_message(space: SearchSpace | None, missing: np.ndarray, n_total: int) -> str:
    show = missing[:5]
    if space is not None:
        names = ", ".join(_key_str(space.variables[v]) for v in show)
    else:
        names = ", ".join(f"variable {v}" for v in show)
    more = f" (and {len(missing) - len(show)} more)" if len(missing) > len(show) else ""
    return (
        f"{len(missing)} of {n_total} latency variables were never observed in the fitted networks: {names}{more}. "
        "Every (Θ, c_in, c_out) of the space must appear in at least one profiled network (§4, eq. lat_variables); "
        "sample configurations that cover them (coverage-biased sampling) and profile again."
    )


def _key_str(key: VarKey) -> str:
    t, ci, co = key
    return f"(Θ=({t.in_h}, {t.in_w}, s{t.stride}, k{t.kernel}, {t.kind}), c_in={ci}, c_out={co})"


def check_coverage(space: SearchSpace, n_obs: np.ndarray) -> None:
    """Refuse a fit in which a variable of eq. lat_variables was never observed (LUTFitError naming it)."""
    n_obs = np.asarray(n_obs)
    if n_obs.shape != (space.n_variables,):
        raise LUTFitError(f"n_obs has shape {n_obs.shape}; the space has {space.n_variables} variables")
    missing = np.flatnonzero(n_obs == 0)
    if len(missing):
        raise LUTFitError(_missing_message(space, missing, space.n_variables))


# ---- monotonicity prior (§4, V x ≤ 0) -----------------------------------------------------------
def _adjacent(values_to_var: dict[int, int]) -> list[tuple[int, int]]:
    keys = sorted(values_to_var)
    return [(values_to_var[a], values_to_var[b]) for a, b in zip(keys[:-1], keys[1:])]


def _one_width_pairs(space: SearchSpace) -> list[tuple[int, int]]:
    """Adjacent widths of every layer that has one width only (depthwise layers and residual adds, D44)."""
    one_width: dict[Theta, dict[int, int]] = defaultdict(dict)
    two_widths: set[Theta] = set()
    for v, (t, ci, co) in enumerate(space.variables):
        if ci == co:
            one_width[t][ci] = v
        else:
            two_widths.add(t)
    return [p for t, group in one_width.items() if t not in two_widths for p in _adjacent(group)]


def _covering(group: dict[tuple[int, int], int]) -> list[tuple[int, int]]:
    """(a, b) for sizes b ≥ a with nothing strictly between them: the covering pairs of the size order."""
    sizes, out = list(group), []
    for a in sizes:
        ups = [b for b in sizes if b != a and b[0] >= a[0] and b[1] >= a[1]]
        for b in ups:  # keep b only if nothing lies strictly between a and b
            if not any(c != b and b[0] >= c[0] and b[1] >= c[1] for c in ups):
                out.append((group[a], group[b]))
    return out


def monotonicity_pairs(space: SearchSpace, directions: Sequence[str] = DIRECTIONS) -> np.ndarray:
    """(K, 2) pairs (smaller, larger) of variables with L(smaller) ≤ L(larger) expected (§4 monotonicity prior)."""
    unknown = set(directions) - set(DIRECTIONS)
    if unknown:
        raise ValueError(f"unknown directions {sorted(unknown)}; expected a subset of {DIRECTIONS}")
    by_cout: dict[tuple[Theta, int], dict[int, int]] = defaultdict(dict)
    by_cin: dict[tuple[Theta, int], dict[int, int]] = defaultdict(dict)
    by_shape: dict[tuple[int, int, str, int, int], dict[tuple[int, int], int]] = defaultdict(dict)
    for v, (t, ci, co) in enumerate(space.variables):
        by_cout[(t, co)][ci] = v
        by_cin[(t, ci)][co] = v
        by_shape[(t.stride, t.kernel, t.kind, ci, co)][(t.in_h, t.in_w)] = v
    pairs: list[tuple[int, int]] = []
    if "c_in" in directions and "c_out" in directions:  # a layer of one width: adjacent widths
        pairs += _one_width_pairs(space)
    if "c_in" in directions:  # same Θ and c_out; adjacent c_in values
        for group in by_cout.values():
            pairs += _adjacent(group)
    if "c_out" in directions:  # same Θ and c_in; adjacent c_out values
        for group in by_cin.values():
            pairs += _adjacent(group)
    if "size" in directions:  # same stride, kernel, kind, c_in, c_out; covering pairs of the size order
        for group in by_shape.values():
            pairs += _covering(group)
    out = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return out[np.lexsort((out[:, 1], out[:, 0]))] if len(out) else out


def monotonicity_matrix(space: SearchSpace, pairs: np.ndarray | None = None) -> sp.csr_matrix:
    """V of §4: row k has +1 at the smaller and −1 at the larger variable of pair k, so V x ≤ 0 ⇔ L(small) ≤ L(large)."""
    if pairs is None:
        pairs = monotonicity_pairs(space)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    k = len(pairs)
    rows = np.repeat(np.arange(k), 2)
    data = np.tile([1.0, -1.0], k)
    return sp.csr_matrix((data, (rows, pairs.ravel())), shape=(k, space.n_variables))


def smoothness_matrix(space: SearchSpace) -> sp.csr_matrix:
    """D of the smoothness prior (docs/method.md D38): one row per three consecutive widths of one layer shape Θ
    along c_in (c_out fixed) or along c_out (c_in fixed), the divided second difference times half the span, so
    (D x)_k = 0 wherever the table is linear in that width and ‖D x‖ is in the table's units (ms)."""
    index = {v: i for i, v in enumerate(space.variables)}
    lines: dict[tuple, list[tuple[int, int]]] = {}
    for (theta, c_in, c_out), i in index.items():
        lines.setdefault(("c_in", theta, c_out), []).append((c_in, i))
        lines.setdefault(("c_out", theta, c_in), []).append((c_out, i))
    rows, cols, data = [], [], []
    for line in lines.values():
        line.sort()
        for (a, ia), (b, ib), (c, ic) in zip(line, line[1:], line[2:]):
            k, half = len(rows) // 3, (c - a) / 2
            rows += [k, k, k]
            cols += [ia, ib, ic]
            data += [half / (b - a), -half * (1 / (c - b) + 1 / (b - a)), half / (c - b)]
    return sp.csr_matrix((data, (rows, cols)), shape=(len(rows) // 3, space.n_variables))


def pair_direction(small: VarKey, large: VarKey) -> str | None:
    """The one field in which `large` exceeds `small` ("c_in", "c_out" or "size"), or None if the pair is not genuine."""
    (ta, ia, oa), (tb, ib, ob) = small, large
    same_op = (ta.stride, ta.kernel, ta.kind) == (tb.stride, tb.kernel, tb.kind)
    same_size = (ta.in_h, ta.in_w) == (tb.in_h, tb.in_w)
    if not same_op:
        return None
    if same_size and oa == ob and ib > ia:
        return "c_in"
    if same_size and ia == ib and ob > oa:
        return "c_out"
    if ia == ib and oa == ob and tb.in_h >= ta.in_h and tb.in_w >= ta.in_w and not same_size:
        return "size"
    if same_size and ta == tb and ia == oa and ib == ob and ib > ia:  # a one-width layer (dw, add): both grow
        return "width"
    return None


def check_pairs(space: SearchSpace, pairs: np.ndarray) -> dict[str, int]:
    """Check that every (smaller, larger) pair of the §4 prior differs in exactly one field, which increases; counts per direction."""
    counts = dict.fromkeys((*DIRECTIONS, "width"), 0)
    keys = space.variables
    for a, b in np.asarray(pairs, dtype=np.int64).reshape(-1, 2):
        d = pair_direction(keys[a], keys[b])
        if d is None:
            raise ValueError(f"not a genuine monotonicity pair: {_key_str(keys[a])} ≤ {_key_str(keys[b])}")
        counts[d] += 1
    return counts


# ---- prediction and the LUT artifact ------------------------------------------------------------
def predict(space: SearchSpace, x: np.ndarray, idx: np.ndarray, link: Link = IDENTITY) -> np.ndarray:
    """Whole-network latency g(Σ_i L_{Θ_i}(c_i, c_{i+1})) = g((A x)_p) of eq. lat and the table's link (D39), for node
    choice indices idx ((n+1,) or (P, n+1))."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape != (space.n_variables,):
        raise ValueError(f"x has shape {x.shape}; space {space.name!r} has {space.n_variables} variables")
    return np.asarray(link(x[space.variable_ids(np.asarray(idx, dtype=np.int64))].sum(axis=-1)), dtype=np.float64)


def lut_records(space: SearchSpace, x: np.ndarray, n_obs: np.ndarray) -> dict[str, list]:
    """Columns of the "lut" artifact: one row per variable (Θ, c_in, c_out) of eq. lat_variables, with latency_ms and n_obs."""
    x = np.asarray(x, dtype=np.float64)
    n_obs = np.asarray(n_obs, dtype=np.int64)
    if x.shape != (space.n_variables,) or n_obs.shape != (space.n_variables,):
        raise ValueError(f"x and n_obs must have one entry per variable ({space.n_variables}); got {x.shape}, {n_obs.shape}")
    keys = space.variables
    return {
        "in_h": [t.in_h for t, _, _ in keys],
        "in_w": [t.in_w for t, _, _ in keys],
        "stride": [t.stride for t, _, _ in keys],
        "kernel": [t.kernel for t, _, _ in keys],
        "kind": [t.kind for t, _, _ in keys],
        "c_in": [ci for _, ci, _ in keys],
        "c_out": [co for _, _, co in keys],
        "latency_ms": x.tolist(),
        "n_obs": n_obs.tolist(),
    }


def columns_of(table: Any) -> dict[str, list]:
    """Columns of a pyarrow Table, a pandas DataFrame or a column dict, as lists (imports neither library)."""
    if isinstance(table, Mapping):
        return {k: list(v) for k, v in table.items()}
    if hasattr(table, "to_pydict"):  # pyarrow
        return table.to_pydict()
    if hasattr(table, "to_dict"):  # pandas
        return {k: list(v) for k, v in table.to_dict(orient="list").items()}
    raise TypeError(f"cannot read a latency table from {type(table).__name__}")


def lut_vector(space: SearchSpace, table: Any) -> np.ndarray:
    """x of eq. lat from a "lut" table (pyarrow, pandas or column dict); refused unless its rows are exactly the space's variables."""
    cols = columns_of(table)
    need = ("in_h", "in_w", "stride", "kernel", "kind", "c_in", "c_out", "latency_ms")
    lacking = [c for c in need if c not in cols]
    if lacking:
        raise LUTFitError(f"the latency table lacks columns {lacking}")
    index = {k: v for v, k in enumerate(space.variables)}
    x = np.full(space.n_variables, np.nan)
    seen = np.zeros(space.n_variables, dtype=bool)
    foreign: list[str] = []
    for h, w, s, k, kind, ci, co, lat in zip(*(cols[c] for c in need)):
        key = (Theta(int(h), int(w), int(s), int(k), str(kind)), int(ci), int(co))
        v = index.get(key)
        if v is None:
            foreign.append(_key_str(key))
            continue
        if seen[v]:
            raise LUTFitError(f"the latency table has two rows for {_key_str(key)}")
        seen[v] = True
        x[v] = float(lat) if lat is not None else np.nan
    if foreign:
        raise LUTFitError(
            f"the latency table has {len(foreign)} rows that are not variables of space {space.name!r}, e.g. "
            f"{', '.join(foreign[:3])}; it was fitted for another space"
        )
    missing = np.flatnonzero(~seen)
    if len(missing):
        names = ", ".join(_key_str(space.variables[v]) for v in missing[:5])
        raise LUTFitError(f"the latency table lacks {len(missing)} variables of space {space.name!r}: {names}")
    bad = np.flatnonzero(~np.isfinite(x))
    if len(bad):
        raise LUTFitError(f"the latency table has {len(bad)} non-finite latencies, e.g. {_key_str(space.variables[bad[0]])}")
    neg = np.flatnonzero(x < 0)
    if len(neg):  # the fit constrains x ≥ 0: a negative entry would decode into a negative latency
        raise LUTFitError(f"the latency table has {len(neg)} negative latencies, e.g. {x[neg[0]]:.4g} at "
                          f"{_key_str(space.variables[neg[0]])}; a latency is never negative")
    return x


def set_rows(columns: Mapping[str, Sequence], name: str) -> np.ndarray:
    """Row numbers of the `sample` rows of set `name` (supplementary A), in table order."""
    role = np.asarray(list(columns["role"]))
    sets = np.asarray(list(columns["set"]), dtype=object)
    return np.flatnonzero((role == "sample") & (sets == name))


def split_sets(space: SearchSpace, columns: Mapping[str, Sequence],
               exclude: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per set of supplementary A: node indices, drift-corrected latencies and config ids of the `sample` rows,
    without the rows `exclude` marks."""
    chans = list(columns["channels"])
    lat = np.asarray(columns["latency_ms"], dtype=np.float64)
    ids = np.asarray(columns["config_id"])
    out = {}
    for name in SETS:
        sel = set_rows(columns, name)
        if exclude is not None:
            sel = sel[~np.asarray(exclude, dtype=bool)[sel]]
        idx = np.stack([space.indices(chans[i]) for i in sel]) if len(sel) else np.zeros((0, space.n_nodes), int)
        out[name] = (idx, lat[sel], ids[sel])
    return out
