"""Export records the test images' preprocessing: the description is what the run's own test loader does, and the
README's deployment snippet, which reads it from model.onnx alone, classifies images as PyTorch does in the run.

Tolerance: 1e-6 on the network's inputs. The run computes in float32 in its own order of operations (ImageFolder:
ToTensor's /255, then Normalize's − mean, / std; in memory: x · 1/(255·std) − mean/std), within about 1.5 ulps of the
exact value; the description's formula, here and in the README, runs in float64 and is rounded to float32 once. The
inputs lie within ±2.7 (ulp 2.4e-7), so they differ by at most 2 ulps, 4.8e-7, as measured. The resize and crop are
bit-identical (torchvision resizes a PIL image with PIL itself), so nothing larger than rounding remains."""

import ast
import json
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
import torch
from PIL import Image
from stage_calls import export
from tiny_workflow import ROOT

from aows_core.config import resolve, space_from_config, validate
from aows_core.data import PREPROCESSING_KEY, DataSpec, describe_preprocessing, test_batches
from aows_core.data.datasets import _fmnist_arrays
from aows_core.nets.network import Network

TOLERANCE = 1e-6
FMNIST = {"space": {"preset": "mobilenet_v1_fmnist", "n_choices": 3, "width_mult": 0.25}}
FMNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                  "Ankle boot"]
# (width, height, PIL mode) of the test images: wider, taller, square, smaller than the crop, grey, with alpha
IMAGES = [(37, 23, "RGB"), (23, 37, "RGB"), (16, 16, "RGB"), (9, 13, "RGB"), (50, 41, "L"), (300, 200, "RGBA")]
CLASSES = ("bee", "ant", "Cat")  # torchvision's ImageFolder sorts them: Cat, ant, bee


def by_description(desc: dict, img: Image.Image) -> np.ndarray:
    """An image as the network's [C, H, W] input, by the description alone (PIL and numpy)."""
    img = img.convert(desc["channel_order"])
    if desc["resize"] is not None:
        w, h = img.size
        short = min(w, h)
        size = (int(desc["resize"] * w / short), int(desc["resize"] * h / short))
        img = img.resize(size, Image.Resampling[desc["interpolation"].upper()])
    if desc["center_crop"] is not None:
        (w, h), (ch, cw) = img.size, desc["center_crop"]
        left, top = round((w - cw) / 2), round((h - ch) / 2)
        img = img.crop((left, top, left + cw, top + ch))
    x = np.asarray(img, dtype=np.float64).reshape(img.height, img.width, -1).transpose(2, 0, 1) * desc["scale"]
    mean, std = (np.asarray(desc[k]).reshape(-1, 1, 1) for k in ("mean", "std"))
    return ((x - mean) / std).astype(desc["dtype"])


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    """A tiny ImageNet-layout tree: three classes, random images of several sizes and modes in train/ and val/."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in CLASSES:
            (root / split / c).mkdir(parents=True)
            for i, (w, h, mode) in enumerate(IMAGES):
                pixels = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
                Image.fromarray(pixels, "RGBA").convert(mode).save(root / split / c / f"{i}.png")
    return root


def val_images(root) -> list:
    """The val/ image files in the order of the run's test loader."""
    from torchvision.datasets import ImageFolder

    return [path for path, _ in ImageFolder(str(root / "val")).samples]


def loader_inputs(spec: DataSpec) -> torch.Tensor:
    """The whole test split as the run's own test loader gives it."""
    return torch.cat([x for x, _ in test_batches(spec, batch_size=500)])


@pytest.mark.parametrize("image_size", [None, 16])
def test_the_description_is_what_the_imagefolder_test_loader_does(image_root, image_size):
    spec = DataSpec(name="imagefolder", root=str(image_root), image_size=image_size)
    desc = describe_preprocessing(spec)
    size = image_size or 224
    assert desc["input_shape"] == [3, size, size] and desc["center_crop"] == [size, size]
    assert desc["classes"] == ["Cat", "ant", "bee"]
    want = loader_inputs(spec).numpy()
    got = np.stack([by_description(desc, Image.open(p)) for p in val_images(image_root)])
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.abs(got - want).max() <= TOLERANCE


def test_the_description_is_what_the_fashion_mnist_test_loader_does():
    spec = DataSpec()
    desc = describe_preprocessing(spec)
    assert desc["resize"] is None and desc["center_crop"] is None and desc["channel_order"] == "L"
    assert desc["classes"] == FMNIST_CLASSES and desc["input_shape"] == [1, 28, 28]
    raw, _ = _fmnist_arrays(spec.resolved_root, "test", False)
    want = loader_inputs(spec).numpy()
    got = np.stack([by_description(desc, Image.fromarray(a[0].numpy(), "L")) for a in raw])
    assert got.shape == want.shape and np.abs(got - want).max() <= TOLERANCE


# ---------------------------------------------------------------------------- the README's snippet


def readme_snippet() -> str:
    """The README's Python block that runs the exported network."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (code,) = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M) if "InferenceSession" in b]
    return code


def finalist(config: dict, folder, x: torch.Tensor) -> tuple[dict, Network]:
    """An untrained network of the config's space, its BatchNorm statistics those of `x` (so its logits depend on the
    image) and its BatchNorm scales varied (so folding matters), saved as retrain saves one."""
    cfg = validate(config)
    space = space_from_config(cfg)
    channels = [c[1] for c in space.layer_choices]
    torch.manual_seed(0)
    net = Network(space, channels)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.momentum = None  # running statistics: the plain mean over the forward passes
        net.train()(x)
    torch.save({"space_hash": space.hash, "channels": channels, "model": net.state_dict()}, folder / "model.pt")
    return cfg, net.eval()


def run_snippet(code: str, images: list, wd, monkeypatch, capsys) -> tuple[list[str], dict]:
    """Run the snippet in `wd` on image files as its command line; (the class names it prints, its namespace)."""
    monkeypatch.chdir(wd)
    monkeypatch.setattr(sys, "argv", ["snippet.py", *map(str, images)])
    namespace = {"__name__": "__main__"}
    exec(compile(code, "README.md snippet", "exec"), namespace)
    return ast.literal_eval(capsys.readouterr().out.strip().splitlines()[-1]), namespace


def deploy(config: dict, tmp_path) -> tuple[str, Network, DataSpec, Path]:
    """The README snippet's code, with the files it reads in `tmp_path` (the run's table and an export of a finalist),
    the finalist, the run's test data and the export's folder."""
    code = readme_snippet()
    table = tmp_path / re.search(r'read_parquet\("([^"]+)"\)', code).group(1)
    out = (tmp_path / re.search(r'InferenceSession\("([^"]+)"\)', code).group(1)).parent
    table.parent.mkdir(parents=True)
    pd.DataFrame({"target": ["range:0.25"], "method": ["aows"], "test_acc": [0.8]}).to_parquet(table)
    spec = resolve(validate(config)).data_spec(None)
    cfg, net = finalist(config, tmp_path, loader_inputs(spec)[:500])
    export(cfg, tmp_path / "model.pt", out)
    return code, net, spec, out


def check_classified_as_in_pytorch(config: dict, images: list, tmp_path, monkeypatch, capsys) -> None:
    """Exported, the network carries the description in export.json and model.onnx; the README snippet's classes of
    the image files are PyTorch's on the run's own test inputs, and its logits too."""
    code, net, spec, out = deploy(config, tmp_path)
    metadata = {p.key: p.value for p in onnx.load(out / "model.onnx").metadata_props}
    desc = describe_preprocessing(spec)
    assert json.loads(metadata[PREPROCESSING_KEY]) == json.loads((out / "export.json").read_text())["preprocessing"]
    assert json.loads(metadata[PREPROCESSING_KEY]) == desc
    x = loader_inputs(spec)[: len(images)]
    with torch.no_grad():
        logits = net(x).numpy()
    classes, namespace = run_snippet(code, images, tmp_path, monkeypatch, capsys)
    assert len(set(logits.argmax(1))) > 1  # the finalist tells these images apart
    assert classes == [desc["classes"][k] for k in logits.argmax(1)]
    assert np.abs(namespace["logits"] - logits).max() < 1e-4


def test_the_readme_snippet_classifies_imagefolder_images_as_pytorch_does(image_root, tmp_path, monkeypatch, capsys):
    config = {"data": {"dataset": "imagefolder", "root": str(image_root)},
              "space": {**FMNIST["space"], "in_channels": 3, "resolution": 224, "num_classes": len(CLASSES)}}
    check_classified_as_in_pytorch(config, val_images(image_root), tmp_path, monkeypatch, capsys)


def test_the_readme_snippet_classifies_fashion_mnist_images_as_pytorch_does(tmp_path, monkeypatch, capsys):
    raw, _ = _fmnist_arrays(DataSpec().resolved_root, "test", False)
    images = [tmp_path / f"{i}.png" for i in range(16)]
    for a, path in zip(raw, images):  # the first test images as files
        Image.fromarray(a[0].numpy(), "L").save(path)
    check_classified_as_in_pytorch(FMNIST, images, tmp_path, monkeypatch, capsys)
