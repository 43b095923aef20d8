"""Datasets, splits and deterministic, resumable, shardable loaders (§7 and the "prepare data" stage).

Datasets are picked by name (`DATASETS`) from a local root; nothing is downloaded unless the user
sets ``download: true``:

- ``fashion_mnist``: the idx files of Fashion-MNIST (60k train / 10k test, 28×28 grey, 10 classes),
  read directly with numpy. The root may hold ``{train,t10k}-{images-idx3,labels-idx1}-ubyte``
  gzipped (Debian's ``dataset-fashion-mnist``, the default root ``/usr/share/datasets/fashion-mnist``)
  or uncompressed, or torchvision's ``FashionMNIST/raw`` layout.
- ``cifar10``: ``torchvision.datasets.CIFAR10`` (``root/cifar-10-batches-py``), 50k/10k, 32×32 RGB.
- ``imagefolder``: the ImageNet layout ``root/train/<class>/*`` and ``root/val/<class>/*``
  (``torchvision.datasets.ImageFolder``); ``val`` serves as the test split.

Splits (all seeded by `DataSpec.seed`, so deterministic for a seed):

- ``search_val``: ``search_val`` images held out of the official training set; they are never
  trained on and only score configurations during the search (the greedy AutoSlim baseline, §3).
- ``train``: the rest of the training set. ``train_subset = N`` keeps only the first N images of a
  seeded permutation of it (small runs on a laptop); ``None`` keeps all of it.
- ``calibration``: ``calibration`` images drawn from the train split, for recomputing BatchNorm
  statistics of a sub-network (§3, slimmable networks).
- ``test``: the official test split. `load` never reads it; only `test_batches` does, for the
  final evaluation of retrained finalists.

Training batches: the images of an epoch are a permutation derived from (seed, epoch), cut into
``steps_per_epoch`` full global batches (the incomplete last one is dropped), so batch k of epoch
e is always the same images whatever happened before, and an iterator can start at any step
(exact resume after a kill). Augmentation (random crop of the zero-padded image + horizontal
flip) draws its randomness from (seed, epoch, step), per image of the global batch. With
``world_size = w`` ranks, rank r takes images [r·B/w, (r+1)·B/w) of each global batch B (and
their augmentation), so one process and w processes see the same global stream.
In-memory datasets (Fashion-MNIST, CIFAR-10) keep uint8 tensors and augment whole batches;
ImageFolder uses torchvision transforms in a DataLoader whose sampler gives each image its seed.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..config import DATASETS, DEFAULT_ROOTS, DataError, DataSpec  # noqa: F401  (the data settings live in config)

# Per-channel mean and std of the training images (ImageNet's for ImageFolder).
MEAN_STD: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "imagefolder": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
}
PAD = {"fashion_mnist": 2, "cifar10": 4}  # zero padding of the random crop (pixels per side)
IMAGEFOLDER_SIZE = 224  # default crop of ImageFolder images (RandomResizedCrop / CenterCrop)

FMNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
CIFAR10_FILES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch", "batches.meta")

# Tags separating the random streams derived from the one seed.
_SPLIT, _SHUFFLE, _AUGMENT, _CALIBRATION = 0x5EED01, 0x5EED02, 0x5EED03, 0x5EED04


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


def check_space(info: DatasetInfo, space: Any) -> None:
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
            + (" or data.image_size" if info.name == "imagefolder" else "")
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


# -------------------------------------------------------------------------- seeds and splits


def _rng(*key: int) -> np.random.Generator:
    """A numpy generator for one named random stream of the seed."""
    return np.random.default_rng([int(k) for k in key])


def split_indices(n_train: int, spec: DataSpec) -> dict[str, np.ndarray]:
    """Seeded indices (into the official train set) of the train, search_val and calibration splits."""
    if spec.search_val >= n_train:
        raise DataError(f"data.search_val = {spec.search_val} leaves no training images out of {n_train}")
    perm = _rng(spec.seed, _SPLIT).permutation(n_train)
    search_val, train = perm[: spec.search_val], perm[spec.search_val :]
    if spec.train_subset is not None:
        if spec.train_subset > len(train):
            raise DataError(
                f"data.train_subset = {spec.train_subset} exceeds the {len(train)} training images "
                f"({n_train} minus data.search_val = {spec.search_val})"
            )
        train = train[: spec.train_subset]
    if spec.calibration > len(train):
        raise DataError(f"data.calibration = {spec.calibration} exceeds the {len(train)} images of the train split")
    calibration = train[_rng(spec.seed, _CALIBRATION).permutation(len(train))[: spec.calibration]]
    return {"train": train, "search_val": search_val, "calibration": calibration}


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    """The order of the n training images in an epoch (depends on seed and epoch only)."""
    return _rng(seed, _SHUFFLE, epoch).permutation(n)


def _shard(batch_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """The [lo, hi) slice of a global batch that a rank takes."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise DataError(f"rank {rank} is not in [0, world_size = {world_size})")
    if batch_size % world_size:
        raise DataError(f"data.batch_size = {batch_size} is not divisible by world_size = {world_size}")
    per = batch_size // world_size
    return rank * per, (rank + 1) * per


# ----------------------------------------------------------------------- in-memory batches


def augment_params(seed: int, epoch: int, step: int, batch_size: int, pad: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Crop offsets (dy, dx in [0, 2·pad]) and flips of every image of a global batch."""
    rng = _rng(seed, _AUGMENT, epoch, step)
    dy, dx = rng.integers(0, 2 * pad + 1, size=(2, batch_size))
    flip = rng.random(batch_size) < 0.5
    return dy, dx, flip


def crop_flip(x: torch.Tensor, dy: np.ndarray, dx: np.ndarray, flip: np.ndarray, pad: int) -> torch.Tensor:
    """Random crop of the zero-padded images and horizontal flip, per image, in one gather."""
    n, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    ar_h, ar_w = torch.arange(h), torch.arange(w)
    rows = torch.as_tensor(dy).view(n, 1) + ar_h  # (n, h)
    fl = torch.as_tensor(flip).view(n, 1)
    cols = torch.as_tensor(dx).view(n, 1) + torch.where(fl, (w - 1) - ar_w, ar_w)  # (n, w)
    flat = padded.reshape(n, c, -1)
    idx = (rows[:, :, None] * (w + 2 * pad) + cols[:, None, :]).reshape(n, 1, h * w).expand(n, c, h * w)
    return torch.gather(flat, 2, idx).view(n, c, h, w)


class _Normalize:
    """uint8 batch → float32, (x/255 − mean)/std, optionally channels_last."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], channels_last: bool) -> None:
        """Store the per-channel constants."""
        self.scale = (1.0 / (255.0 * torch.tensor(std, dtype=torch.float32))).view(1, -1, 1, 1)
        self.shift = (torch.tensor(mean, dtype=torch.float32) / torch.tensor(std, dtype=torch.float32)).view(1, -1, 1, 1)
        self.channels_last = channels_last

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise one batch."""
        out = x.to(torch.float32).mul_(self.scale).sub_(self.shift)
        return out.contiguous(memory_format=torch.channels_last) if self.channels_last else out


def _eval_chunks(indices: np.ndarray, batch_size: int, rank: int, world_size: int) -> Iterator[np.ndarray]:
    """Fixed-order evaluation batches; rank r takes every w-th image (all images, once, over the ranks)."""
    if batch_size < 1:
        raise DataError(f"batch_size must be ≥ 1, got {batch_size}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise DataError(f"rank {rank} is not in [0, world_size = {world_size})")
    mine = indices[rank::world_size]
    for i in range(0, len(mine), batch_size):
        yield mine[i : i + batch_size]


# --------------------------------------------------------------------------- ImageFolder I/O


class _SeededImages(torch.utils.data.Dataset):
    """ImageFolder samples under a transform whose randomness is seeded per image."""

    def __init__(self, folder: Any, transform: Callable) -> None:
        """Wrap an ImageFolder (its samples and loader) and a transform."""
        self.samples, self.loader, self.transform = folder.samples, folder.loader, transform

    def __len__(self) -> int:
        """Number of images of the folder."""
        return len(self.samples)

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        """Load and transform image `index`; an (index, seed) item seeds the transform's randomness."""
        index, seed = item if isinstance(item, tuple) else (item, None)
        path, label = self.samples[index]
        img = self.loader(path)
        if seed is None:
            return self.transform(img), label
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.transform(img), label


class StepSampler(torch.utils.data.Sampler):
    """(index, augmentation seed) of one rank's images for an epoch, starting at a given step."""

    def __init__(self, indices: np.ndarray, batch_size: int, seed: int, epoch: int, start_step: int = 0, rank: int = 0, world_size: int = 1) -> None:
        """Fix the epoch's permutation, the first step and the rank's slice of each global batch."""
        self.indices, self.batch_size, self.seed, self.epoch = indices, batch_size, seed, epoch
        self.lo, self.hi = _shard(batch_size, rank, world_size)
        self.steps = len(indices) // batch_size
        if not 0 <= start_step <= self.steps:
            raise DataError(f"start_step {start_step} is outside [0, {self.steps}] steps of the epoch")
        self.start_step = start_step

    def __len__(self) -> int:
        """Number of images this rank sees from start_step to the end of the epoch."""
        return (self.steps - self.start_step) * (self.hi - self.lo)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """Yield (index into the folder, per-image seed) in batch order."""
        perm = epoch_permutation(len(self.indices), self.seed, self.epoch)
        for step in range(self.start_step, self.steps):
            seeds = _rng(self.seed, _AUGMENT, self.epoch, step).integers(0, 2**62, size=self.batch_size)
            chosen = self.indices[perm[step * self.batch_size : (step + 1) * self.batch_size]]
            for j in range(self.lo, self.hi):
                yield int(chosen[j]), int(seeds[j])


def _imagefolder_transforms(size: int, mean: Sequence[float], std: Sequence[float]) -> tuple[Callable, Callable]:
    """(train, eval) torchvision transforms: RandomResizedCrop + flip; Resize(size/0.875) + CenterCrop."""
    from torchvision import transforms as T

    norm = [T.ToTensor(), T.Normalize(mean, std)]
    train = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), *norm])
    evalt = T.Compose([T.Resize(int(round(size / 0.875))), T.CenterCrop(size), *norm])
    return train, evalt


def _to_channels_last(it: Iterator[tuple[torch.Tensor, torch.Tensor]], on: bool) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Pass batches through, converted to channels_last when asked."""
    for x, y in it:
        yield (x.contiguous(memory_format=torch.channels_last) if on else x), y


# -------------------------------------------------------------------------------- the splits


class Splits:
    """The train, search_val and calibration splits of a dataset, with their batch iterators (no test)."""

    def __init__(self, spec: DataSpec, info: DatasetInfo, indices: dict[str, np.ndarray], images: torch.Tensor | None, labels: torch.Tensor | None, folder: Any = None) -> None:
        """Hold the spec, info, split indices and either in-memory tensors or an ImageFolder."""
        self.spec, self.info, self.indices = spec, info, indices
        self._images, self._labels, self._folder = images, labels, folder
        self._norm = _Normalize(info.mean, info.std, spec.channels_last)
        self.steps_per_epoch = len(indices["train"]) // spec.batch_size
        if self.steps_per_epoch == 0:
            raise DataError(f"the train split has {len(indices['train'])} images, fewer than data.batch_size = {spec.batch_size}")
        if folder is not None:
            self._train_tf, self._eval_tf = _imagefolder_transforms(info.height, info.mean, info.std)

    @property
    def sizes(self) -> dict[str, int]:
        """Number of images per split (train is the images an epoch can use, before dropping the last batch)."""
        return {k: int(len(v)) for k, v in self.indices.items()}

    def labels(self, split: str) -> np.ndarray:
        """Labels of a split's images, in its order."""
        idx = self.indices[split]
        if self._labels is not None:
            return self._labels[torch.as_tensor(idx)].numpy()
        return np.asarray([self._folder.samples[i][1] for i in idx], dtype=np.int64)

    def manifest(self) -> dict[str, Any]:
        """Provenance of the splits: spec, info and a hash of each split's indices."""
        hashes = {k: hashlib.sha256(np.ascontiguousarray(v, dtype=np.int64).tobytes()).hexdigest()[:16] for k, v in self.indices.items()}
        info = {k: v for k, v in asdict(self.info).items() if k != "class_names"}
        return {"spec": self.spec.to_dict(), "info": info, "sizes": self.sizes, "steps_per_epoch": self.steps_per_epoch, "index_sha256": hashes}

    # -- training

    def train_batches(self, epoch: int, start_step: int = 0, rank: int = 0, world_size: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Augmented, shuffled (x, y) batches of an epoch from start_step; this rank's slice of each global batch."""
        lo, hi = _shard(self.spec.batch_size, rank, world_size)
        if not 0 <= start_step <= self.steps_per_epoch:
            raise DataError(f"start_step {start_step} is outside [0, {self.steps_per_epoch}] steps of the epoch")
        if self._folder is not None:
            return self._folder_train(epoch, start_step, rank, world_size)
        return self._memory_train(epoch, start_step, lo, hi)

    def _memory_train(self, epoch: int, start_step: int, lo: int, hi: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches of the in-memory dataset (crop + flip on the uint8 batch, then normalise)."""
        b, spec, train = self.spec.batch_size, self.spec, self.indices["train"]
        perm = epoch_permutation(len(train), spec.seed, epoch)
        pad = PAD[self.info.name]
        for step in range(start_step, self.steps_per_epoch):
            idx = torch.as_tensor(train[perm[step * b + lo : step * b + hi]])
            x = self._images[idx]
            if spec.augment:
                dy, dx, flip = augment_params(spec.seed, epoch, step, b, pad)
                x = crop_flip(x, dy[lo:hi], dx[lo:hi], flip[lo:hi], pad)
            yield self._norm(x), self._labels[idx]

    def _folder_train(self, epoch: int, start_step: int, rank: int, world_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches of the ImageFolder through a DataLoader and the step sampler."""
        spec = self.spec
        tf = self._train_tf if spec.augment else self._eval_tf
        sampler = StepSampler(self.indices["train"], spec.batch_size, spec.seed, epoch, start_step, rank, world_size)
        loader = torch.utils.data.DataLoader(
            _SeededImages(self._folder, tf),
            batch_size=spec.batch_size // world_size,
            sampler=sampler,
            num_workers=spec.num_workers,
            drop_last=True,
            generator=torch.Generator().manual_seed(spec.seed * 1_000_003 + epoch),
            persistent_workers=False,
        )
        return _to_channels_last(iter(loader), spec.channels_last)

    # -- evaluation (no augmentation, no shuffle)

    def _eval(self, split: str, batch_size: int | None, rank: int, world_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Fixed-order batches of a split."""
        bs = batch_size or self.spec.batch_size
        indices = self.indices[split]
        if self._folder is not None:
            return _folder_eval(self._folder, self._eval_tf, indices, bs, rank, world_size, self.spec)
        return self._memory_eval(indices, bs, rank, world_size)

    def _memory_eval(self, indices: np.ndarray, bs: int, rank: int, world_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Normalised, unaugmented in-memory batches."""
        for chunk in _eval_chunks(indices, bs, rank, world_size):
            idx = torch.as_tensor(chunk)
            yield self._norm(self._images[idx]), self._labels[idx]

    def search_val_batches(self, batch_size: int | None = None, rank: int = 0, world_size: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The held-out search-validation images (scores the greedy baseline), fixed order, no augmentation."""
        return self._eval("search_val", batch_size, rank, world_size)

    def calibration_batches(self, batch_size: int | None = None, rank: int = 0, world_size: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Training images for BatchNorm recalibration, fixed (seeded, class-mixed) order, no augmentation."""
        return self._eval("calibration", batch_size, rank, world_size)


def _folder_eval(folder: Any, tf: Callable, indices: np.ndarray, bs: int, rank: int, world_size: int, spec: DataSpec) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed-order ImageFolder evaluation batches through a DataLoader."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise DataError(f"rank {rank} is not in [0, world_size = {world_size})")
    loader = torch.utils.data.DataLoader(
        _SeededImages(folder, tf),
        batch_size=bs,
        sampler=[int(i) for i in indices[rank::world_size]],
        num_workers=spec.num_workers,
        shuffle=False,
    )
    return _to_channels_last(iter(loader), spec.channels_last)


def load(spec: DataSpec) -> Splits:
    """Check and split the training set of a dataset (the test split is not read)."""
    root = spec.resolved_root
    if spec.name == "imagefolder":
        info = _imagefolder_info(root, spec.image_size)
        train, _ = _imagefolder_pair(str(root.resolve()))
        return Splits(spec, info, split_indices(info.n_train, spec), None, None, folder=train)
    if spec.name == "fashion_mnist":
        x, y = _fmnist_arrays(root, "train", spec.download)
        info = _fmnist_info(root, spec.download)
    else:
        x, y = _cifar_arrays(root, True, spec.download)
        info = _cifar_info(root, spec.download)
    return Splits(spec, info, split_indices(len(x), spec), x, y)


def test_batches(spec: DataSpec, batch_size: int | None = None, rank: int = 0, world_size: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The official test split, fixed order, no augmentation: for the final evaluation only."""
    root = spec.resolved_root
    bs = batch_size or spec.batch_size
    if spec.name == "imagefolder":
        info = _imagefolder_info(root, spec.image_size)
        _, val = _imagefolder_pair(str(root.resolve()))
        _, tf = _imagefolder_transforms(info.height, info.mean, info.std)
        return _folder_eval(val, tf, np.arange(len(val)), bs, rank, world_size, spec)
    if spec.name == "fashion_mnist":
        x, y = _fmnist_arrays(root, "test", spec.download)
    else:
        x, y = _cifar_arrays(root, False, spec.download)
    norm = _Normalize(*MEAN_STD[spec.name], spec.channels_last)

    def gen() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Yield the normalised test batches."""
        for chunk in _eval_chunks(np.arange(len(x)), bs, rank, world_size):
            idx = torch.as_tensor(chunk)
            yield norm(x[idx]), y[idx]

    return gen()


test_batches.__test__ = False  # not a pytest test despite its name


def test_size(spec: DataSpec) -> int:
    """Number of images of the official test split."""
    return dataset_info(spec.name, spec.root, spec.download, spec.image_size).n_test


test_size.__test__ = False
