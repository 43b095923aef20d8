"""Freed memory kept in the process (docs/method.md D51): glibc's malloc told not to hand a forward pass's
activations back to the OS, for the timing devices and for every stage that trains or scores with torch."""

from __future__ import annotations

# glibc's mallopt parameters (malloc.h) and the values that keep freed memory in the process (D51).
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
KEPT_MALLOC = {M_TRIM_THRESHOLD: 1 << 30, M_TOP_PAD: 1 << 28, M_MMAP_THRESHOLD: 1 << 25}


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep what a forward pass frees (no trimming, no mmap for blocks up to 32 MiB, 256 MiB
    of top padding), so that the next pass does not fault its activations back in from the OS (docs/method.md D51);
    False where the C library has no mallopt (not glibc)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    return all(mallopt(k, v) == 1 for k, v in KEPT_MALLOC.items())
