"""What a run's evaluation does to a test image, as data: what export writes beside the network (export.json and
model.onnx's metadata key `PREPROCESSING_KEY`), so a deployment can prepare its images the same way.

An image file becomes the network's input in this order: converted to PIL mode ``channel_order`` (``RGB``, or ``L``
for one grey channel); where ``resize`` is set, its shorter side resized to ``resize`` pixels (the longer one
``int(resize · long / short)``; PIL's ``interpolation`` filter, antialiased when shrinking, as torchvision's
``Resize`` applies it to a PIL image), then centre-cropped to ``center_crop`` = [height, width] (offsets
``round((size − crop) / 2)``); its pixels (0..255) multiplied by ``scale``, less ``mean``, divided by ``std``, per
channel; laid out as ``layout`` (``NCHW``) in ``dtype``, each image of shape ``input_shape`` = [C, H, W].
``classes`` names the network's outputs in label order.
"""

from __future__ import annotations

from typing import Any

from ..config import DataSpec
from .datasets import IMAGEFOLDER_INTERPOLATION, dataset_info, imagefolder_resize

PREPROCESSING_KEY = "aows.preprocessing"  # model.onnx's metadata_props key; its value is the description as JSON text


def describe_preprocessing(spec: DataSpec) -> dict[str, Any]:
    """The preprocessing that the evaluation of a run on `spec`'s dataset applies to a test image (module docstring)."""
    info = dataset_info(spec.name, spec.root, spec.download, spec.image_size)
    folder = spec.name == "imagefolder"
    return {
        "layout": "NCHW",
        "dtype": "float32",
        "input_shape": [info.channels, info.height, info.width],
        "channel_order": "RGB" if info.channels == 3 else "L",
        "resize": imagefolder_resize(info.height) if folder else None,
        "interpolation": IMAGEFOLDER_INTERPOLATION if folder else None,
        "center_crop": [info.height, info.width] if folder else None,
        "scale": 1 / 255,
        "mean": list(info.mean),
        "std": list(info.std),
        "classes": list(info.class_names),
    }
