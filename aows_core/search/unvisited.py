"""Unvisited widths (δ = NaN, count 0, eq. average_error) resolved by an explicit policy (docs/method.md D13)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

UNVISITED_POLICIES = ("exclude", "pessimistic", "error")


def _choice_name(widths: Sequence[Sequence[int]] | None, node: int, choice: int) -> str:
    """"choice j (width w)" when the widths are known, else "choice j"."""
    if widths is not None:
        try:
            return f"choice {choice} (width {widths[node][choice]})"
        except (IndexError, TypeError):
            pass
    return f"choice {choice}"


def apply_unvisited(
    unaries: Sequence[np.ndarray], policy: str, *, widths: Sequence[Sequence[int]] | None = None
) -> list[np.ndarray]:
    """Resolve unvisited widths (NaN δ, count 0, eq. average_error) by policy: exclude | pessimistic | error.

    * "exclude": the choice becomes +inf (forbidden); a node left with no allowed choice is an error.
    * "pessimistic": the choice gets the largest visited δ of the same node (as bad as the worst
      visited width of that layer); a node with no visited choice is an error.
    * "error": any unvisited choice is an error naming node and width.
    ±inf in a visited unary is always an error (NaN is the only marker of "unvisited").
    """
    if policy not in UNVISITED_POLICIES:
        raise ValueError(f"unknown unvisited policy {policy!r}; valid: {list(UNVISITED_POLICIES)}")
    resolved: list[np.ndarray] = []
    for node, unary in enumerate(unaries):
        delta = np.array(unary, dtype=np.float64, copy=True).reshape(-1)
        if delta.size == 0:
            raise ValueError(f"node {node} has no choices")
        infinite = np.flatnonzero(np.isinf(delta))
        if infinite.size:
            j = int(infinite[0])
            raise ValueError(f"node {node} {_choice_name(widths, node, j)}: visited unary is {delta[j]} "
                             "(must be finite)")
        unvisited = np.isnan(delta)
        if unvisited.any():
            if policy == "error":
                j = int(np.flatnonzero(unvisited)[0])
                raise ValueError(f"node {node} {_choice_name(widths, node, j)} was never visited (δ is NaN) and the "
                                 "unvisited policy is 'error'")
            if unvisited.all():
                raise ValueError(f"node {node}: no choice was visited; policy {policy!r} leaves it without an allowed "
                                 "choice")
            delta[unvisited] = np.inf if policy == "exclude" else float(delta[~unvisited].max())
        resolved.append(delta)
    return resolved


__all__ = ["UNVISITED_POLICIES", "apply_unvisited"]
