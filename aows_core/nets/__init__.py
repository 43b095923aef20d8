"""Torch networks of any search space: the fixed network (`network`), the slimmable supernet (`supernet`), the
batched and sliced scoring passes and the ONNX graphs, every layer built and run by its kind (`aows_core.kinds`).

This file imports nothing heavy: `devices.onnxruntime` imports `nets.onnx` and `devices` promises
numpy only. The constants below are shared by the torch timing networks (`nets.network.TimingFactory`) and the
ONNX timing graphs (`devices.onnxruntime`).
"""

from __future__ import annotations

# Initial std of the timing weights: small enough that 1536-wide layers stay finite, and with
# non-zero biases activations never decay towards denormals.
TIMING_WEIGHT_STD = 0.05
WEIGHT_ALIGN = 16  # floats (64 bytes) between consecutive weight views of the pool


def check_blocks(space) -> None:
    """Refuse spaces the networks cannot build (D44): the classifier (`linear`) is the last edge and only there, and
    the blocks run in sequence (each reads the node the previous one wrote), covering every edge once."""
    from ..kinds import kind_of

    last = space.n_edges - 1
    for i, t in enumerate(space.thetas):
        if kind_of(t.kind).classifier != (i == last):
            raise ValueError(f"space {space.name!r}: edge {i} is {t.kind!r}; a network needs a classifier kind "
                             f"('linear') as its last edge and only there")
    node, seen = 0, []
    for j, b in enumerate(space.blocks):
        if b.src != node:
            raise ValueError(f"space {space.name!r}: block {j} reads node {b.src}, but the previous block wrote {node}")
        seen += [*b.edges, *(e for e in (b.shortcut, b.add) if e >= 0)]
        node = b.dst
    if sorted(seen) != list(range(space.n_edges)):
        raise ValueError(f"space {space.name!r}: its blocks must cover every edge exactly once")
