"""Datasets by name (`config.DATASETS`) from a local root, read here and nowhere else (§7, "prepare data").

- ``fashion_mnist``: the idx files of Fashion-MNIST (60k/10k, 28×28 grey, 10 classes), gzipped
  (Debian's ``dataset-fashion-mnist``, default root ``/usr/share/datasets/fashion-mnist``) or not,
  or torchvision's ``FashionMNIST/raw`` layout, read with numpy.
- ``cifar10``: ``root/cifar-10-batches-py`` (torchvision's layout), 50k/10k, 32×32 RGB.
- ``imagefolder``: the ImageNet layout ``root/train/<class>/*`` and ``root/val/<class>/*``
  (``val`` serves as the test split).

Nothing is downloaded unless the user sets ``download: true``. `dataset_info` describes a dataset
without loading it; `check_dataset` refuses a search space that does not fit its images.
"""

from __future__ import annotations

import gzip
import os
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import DATASETS, DEFAULT_ROOTS, DataError, DataSpec  # noqa: F401  (the data settings live in config)

# Per-channel mean and std of the training images (ImageNet's for ImageFolder).
MEAN_STD: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "imagefolder": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
PAD = {"fashion_mnist": 2, "cifar10": 4}  # zero padding of the random crop (pixels per side)
IMAGEFOLDER_SIZE = 224  # default crop of ImageFolder images (RandomResizedCrop / CenterCrop)
IMAGEFOLDER_CROP_FRACTION = 0.875  # a test image's centre crop: this share of its resized shorter side
IMAGEFOLDER_INTERPOLATION = "bilinear"  # torchvision's InterpolationMode of that resize

FMNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
CIFAR10_FILES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch", "batches.meta")


# --------------------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class DatasetInfo:
    """Shape of a dataset's images and its class and split counts."""

    name: str
    root: str
    height: int
    width: int
    channels: int
    classes: int
    n_train: int  # official training images (before the search_val hold-out)
    n_test: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    class_names: tuple[str, ...] = field(default=(), repr=False)

    @property
    def resolution(self) -> tuple[int, int]:
        """(height, width) of the network input."""
        return (self.height, self.width)


def check_dataset(info: DatasetInfo, space: Any) -> None:
    """Refuse a search space whose input size, channels or class count differ from the dataset's."""
    problems = []
    if tuple(space.resolution) != info.resolution:
        problems.append(f"resolution {tuple(space.resolution)} vs the images' {info.resolution}")
    if int(space.in_channels) != info.channels:
        problems.append(f"in_channels {space.in_channels} vs the images' {info.channels}")
    if int(space.num_classes) != info.classes:
        problems.append(f"num_classes {space.num_classes} vs the dataset's {info.classes}")
    if problems:
        raise DataError(
            f"search space {getattr(space, 'name', '?')!r} does not match dataset {info.name!r} at {info.root}: "
            + "; ".join(problems)
            + " (set space.resolution / space.in_channels / space.num_classes, or pick another space.preset"
            + (f"; an imagefolder is read as {IMAGEFOLDER_SIZE}×{IMAGEFOLDER_SIZE} crops" if info.name == "imagefolder" else "")
            + ")"
        )


# ------------------------------------------------------------------------------ Fashion-MNIST


def _fmnist_help(root: Path) -> str:
    """How to provide Fashion-MNIST."""
    names = ", ".join(f"{a}[.gz], {b}[.gz]" for a, b in FMNIST_FILES.values())
    return (
        f"Fashion-MNIST expected in {root} (or {root}/FashionMNIST/raw): the idx files {names}. "
        "Install them with `apt-get install dataset-fashion-mnist` (default root "
        f"{DEFAULT_ROOTS['fashion_mnist']}), set data.root to the folder holding them, "
        "or set data.download: true with a writable data.root"
    )


def _fmnist_paths(root: Path, split: str) -> tuple[Path, Path] | None:
    """The (images, labels) files of a split under root, or None."""
    for d in (root, root / "FashionMNIST" / "raw", root / "raw"):
        found = []
        for stem in FMNIST_FILES[split]:
            hit = next((d / (stem + s) for s in ("", ".gz") if (d / (stem + s)).is_file()), None)
            if hit is None:
                break
            found.append(hit)
        if len(found) == 2:
            return found[0], found[1]
    return None


def _fmnist_files(spec_root: Path, split: str, download: bool) -> tuple[Path, Path]:
    """Locate (downloading only if asked) the idx files of a Fashion-MNIST split."""
    if not spec_root.is_dir() and not download:
        raise DataError(f"data root {spec_root} does not exist. " + _fmnist_help(spec_root))
    paths = _fmnist_paths(spec_root, split)
    if paths is None and download:
        from torchvision.datasets import FashionMNIST

        spec_root.mkdir(parents=True, exist_ok=True)
        FashionMNIST(str(spec_root), train=split == "train", download=True)
        paths = _fmnist_paths(spec_root, split)
    if paths is None:
        raise DataError(f"no Fashion-MNIST {split} files in {spec_root}. " + _fmnist_help(spec_root))
    return paths


def _open(path: Path):
    """Open a possibly gzipped file for binary reading."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _idx_header(path: Path) -> tuple[int, ...]:
    """Dimensions from an idx file's header (uint8 data only)."""
    try:
        with _open(path) as f:
            head = f.read(4)
            raw = f.read(4 * head[3]) if len(head) == 4 else b""
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: unreadable ({e}); reinstall the dataset files") from e
    if len(head) < 4 or head[:3] != b"\x00\x00\x08":
        raise DataError(f"{path} is not an idx file of unsigned bytes (bad magic {head!r})")
    ndim = head[3]
    if len(raw) != 4 * ndim:
        raise DataError(f"{path}: truncated idx header")
    return struct.unpack(">" + "I" * ndim, raw)


def _read_idx(path: str) -> np.ndarray:
    """The read-only uint8 array of an idx file, gzipped or not."""
    try:
        with _open(Path(path)) as f:
            data = f.read()
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise DataError(f"{path}: unreadable ({e}); reinstall the dataset files") from e
    if len(data) < 4 or data[:3] != b"\x00\x00\x08":
        raise DataError(f"{path} is not an idx file of unsigned bytes")
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    offset = 4 + 4 * ndim
    if len(data) - offset != int(np.prod(dims)):
        raise DataError(f"{path}: {len(data) - offset} data bytes, header says {dims} (truncated or corrupt; reinstall it)")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def _fmnist_arrays(root: Path, split: str, download: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N,1,28,28) uint8 and labels (N,) int64 of a Fashion-MNIST split (shared, never modify)."""
    img_path, lab_path = _fmnist_files(root, split, download)
    key = [(str(p.resolve()), p.stat().st_mtime_ns, p.stat().st_size) for p in (img_path, lab_path)]
    return _fmnist_tensors(*key[0], *key[1])


@lru_cache(maxsize=4)
def _fmnist_tensors(img: str, img_mtime: int, img_size: int, lab: str, lab_mtime: int, lab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoded and checked tensors of one pair of idx files (cached by path, time and size)."""
    img_path, lab_path = Path(img), Path(lab)
    images, labels = _read_idx(img), _read_idx(lab)
    if images.ndim != 3 or images.shape[1:] != (28, 28) or labels.ndim != 1 or len(labels) != len(images):
        raise DataError(f"{img_path} / {lab_path}: shapes {images.shape} / {labels.shape} are not N×28×28 / N")
    if labels.size and labels.max() > 9:
        raise DataError(f"{lab_path}: labels outside 0..9 (corrupt file)")
    x = torch.from_numpy(images.copy()).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


def _fmnist_info(root: Path, download: bool) -> DatasetInfo:
    """Info of Fashion-MNIST read from the idx headers."""
    tr = _fmnist_files(root, "train", download)
    te = _fmnist_files(root, "test", download)
    n_tr, h, w = _idx_header(tr[0])
    (n_te, *_) = _idx_header(te[0])
    names = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
    m, s = MEAN_STD["fashion_mnist"]
    return DatasetInfo("fashion_mnist", str(root), h, w, 1, 10, n_tr, n_te, m, s, names)


# ----------------------------------------------------------------------------------- CIFAR-10


def _cifar_root(root: Path, download: bool) -> Path:
    """The parent folder of cifar-10-batches-py, checking its files (downloading only if asked)."""
    if root.name == "cifar-10-batches-py":
        root = root.parent
    folder = root / "cifar-10-batches-py"
    missing = [f for f in CIFAR10_FILES if not (folder / f).is_file()]
    if missing and download:
        from torchvision.datasets import CIFAR10

        root.mkdir(parents=True, exist_ok=True)
        CIFAR10(str(root), train=True, download=True)
        missing = [f for f in CIFAR10_FILES if not (folder / f).is_file()]
    if missing:
        where = "does not exist" if not root.is_dir() else f"lacks {folder.name}/{{{', '.join(missing)}}}"
        raise DataError(
            f"CIFAR-10 not found: data root {root} {where}. Expected torchvision's layout "
            f"{root}/cifar-10-batches-py/{{{', '.join(CIFAR10_FILES)}}} (the python version of CIFAR-10). "
            "Set data.root to the folder that contains cifar-10-batches-py, or set data.download: true "
            "with a writable data.root (no Debian package ships CIFAR-10)"
        )
    return root


def _cifar_arrays(root: Path, train: bool, download: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N,3,32,32) uint8 and labels (N,) int64 of a CIFAR-10 split."""
    root = _cifar_root(root, download)
    from torchvision.datasets import CIFAR10

    try:
        ds = CIFAR10(str(root), train=train, download=False)
    except RuntimeError as e:  # torchvision's integrity check
        raise DataError(f"CIFAR-10 at {root} failed torchvision's integrity check ({e}); re-extract cifar-10-python.tar.gz there") from e
    x = torch.from_numpy(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)))
    return x, torch.as_tensor(ds.targets, dtype=torch.int64)


def _cifar_info(root: Path, download: bool) -> DatasetInfo:
    """Info of CIFAR-10 (sizes are fixed; the files are checked)."""
    root = _cifar_root(root, download)
    names = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
    m, s = MEAN_STD["cifar10"]
    return DatasetInfo("cifar10", str(root), 32, 32, 3, 10, 50000, 10000, m, s, names)


# -------------------------------------------------------------------------------- ImageFolder


def _imagefolder(root: Path, split: str, scan: bool = True) -> Any:
    """torchvision ImageFolder of root/<split> (no transform), with layout errors made clear."""
    from torchvision.datasets import ImageFolder

    layout = (
        f"ImageNet layout expected: {root}/train/<class>/<image> and {root}/val/<class>/<image> "
        "with the same class folders in both (val is the test split); set data.root to that folder"
    )
    folder = root / split
    if not root.is_dir():
        raise DataError(f"data root {root} does not exist. {layout}")
    if not folder.is_dir():
        raise DataError(f"{root} has no {split}/ folder. {layout}")
    if not scan:
        return None
    try:
        return ImageFolder(str(folder))
    except (FileNotFoundError, RuntimeError) as e:
        raise DataError(f"{folder}: {e}. {layout}") from e


@lru_cache(maxsize=4)
def _imagefolder_pair(root: str) -> tuple[Any, Any]:
    """(train, val) ImageFolders of a root, with identical class lists checked."""
    r = Path(root)
    for split in ("train", "val"):
        _imagefolder(r, split, scan=False)
    train, val = _imagefolder(r, "train"), _imagefolder(r, "val")
    if train.classes != val.classes:
        only_t = sorted(set(train.classes) - set(val.classes))[:5]
        only_v = sorted(set(val.classes) - set(train.classes))[:5]
        raise DataError(
            f"{r}: train/ and val/ class folders differ (only in train: {only_t}, only in val: {only_v}); "
            "both must hold the same <class> folders"
        )
    return train, val


def imagefolder_resize(size: int) -> int:
    """The shorter side, in pixels, an ImageFolder test image is resized to before its centre crop of `size`."""
    return int(round(size / IMAGEFOLDER_CROP_FRACTION))


def _imagefolder_info(root: Path, image_size: int | None) -> DatasetInfo:
    """Info of an ImageFolder dataset (RGB, the crop size, the class folders)."""
    train, val = _imagefolder_pair(str(root.resolve()) if root.exists() else str(root))
    size = image_size or IMAGEFOLDER_SIZE
    m, s = MEAN_STD["imagefolder"]
    return DatasetInfo("imagefolder", str(root), size, size, 3, len(train.classes), len(train), len(val), m, s, tuple(train.classes))


def dataset_info(name: str, root: str | os.PathLike | None = None, download: bool = False, image_size: int | None = None) -> DatasetInfo:
    """Image size, channels, classes and split counts of a dataset (checks that its files are there)."""
    spec = DataSpec(name=name, root=None if root is None else str(root), download=download, image_size=image_size)
    r = spec.resolved_root
    if name == "fashion_mnist":
        return _fmnist_info(r, download)
    if name == "cifar10":
        return _cifar_info(r, download)
    return _imagefolder_info(r, image_size)
