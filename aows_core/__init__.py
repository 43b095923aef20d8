"""aows: hardware-aware network width search (AOWS, Berman et al., CVPR 2020)."""

__version__ = "0.3.0"
