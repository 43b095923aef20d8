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
