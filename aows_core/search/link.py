"""The latency link (docs/method.md D39): a network's latency is g(Σ_i L_i) with g(s) = s + κ·max(0, s − s₀), κ ≥ 0.

Eq. lat is the identity link (κ = 0). g is increasing, so the constraint g(Σ_i L_i) ≤ T of eq. lagrange is the
additive constraint Σ_i L_i ≤ g⁻¹(T): every decoder keeps its chain and decodes the budget g⁻¹(T). Numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np


@dataclass(frozen=True)
class Link:
    """g(s) = s + slope·max(0, s − knot_ms): whole-network latency from the LUT's additive sum (D39)."""

    knot_ms: float = math.inf
    slope: float = 0.0

    def __post_init__(self) -> None:
        if not (self.slope >= 0 and math.isfinite(self.slope)):
            raise ValueError(f"the link's slope must be finite and ≥ 0; got {self.slope}")
        if not self.knot_ms > 0:
            raise ValueError(f"the link's knot must be > 0 ms; got {self.knot_ms}")

    @property
    def identity(self) -> bool:
        """Eq. lat as printed: no correction."""
        return self.slope == 0 or math.isinf(self.knot_ms)

    def __call__(self, s: Any) -> Any:
        """Predicted latency g(s) of additive sums s (a float for a float)."""
        if self.identity:
            return s
        out = np.asarray(s, dtype=np.float64)
        out = out + self.slope * np.maximum(0.0, out - self.knot_ms)
        return float(out) if out.ndim == 0 else out

    def inverse(self, t: float) -> float:
        """The additive budget g⁻¹(t): Σ_i L_i ≤ g⁻¹(t) exactly when g(Σ_i L_i) ≤ t."""
        t = float(t)
        if self.identity or t <= self.knot_ms:
            return t
        return self.knot_ms + (t - self.knot_ms) / (1.0 + self.slope)

    def to_meta(self) -> dict[str, float] | None:
        """The LUT's `link` metadata (None for the identity)."""
        return None if self.identity else {"knot_ms": float(self.knot_ms), "slope": float(self.slope)}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> "Link":
        """The link a LUT's metadata records (the identity where it records none: eq. lat, or an older LUT)."""
        d = meta.get("link")
        return IDENTITY if not d else cls(float(d["knot_ms"]), float(d["slope"]))


IDENTITY = Link()
