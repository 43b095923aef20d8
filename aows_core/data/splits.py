"""Seeded splits and deterministic, resumable, shardable loaders (§7).

Splits of `DataSpec.seed`: ``search_val`` (held out of the official training set, only scores
configurations during the search, §3), ``train`` (the rest; ``train_subset = N`` keeps the first N
of a seeded permutation), ``calibration`` (drawn from train, for BatchNorm recalibration, §3) and
``test`` (the official test split, read only by `test_batches`, never by `load_splits`).

Training batches: epoch e is a permutation of (batch seed, epoch) cut into ``steps_per_epoch`` full
global batches, so batch k of epoch e is always the same images and an iterator can start at any step
(exact resume). Augmentation (random crop of the zero-padded image + horizontal flip) draws from
(batch seed, epoch, step) per image of the global batch. The batch seed is `DataSpec.batch_seed`:
``seed`` itself unless ``train_seed`` is set (a retraining seed), which reseeds the batches and never
the splits. With ``world_size = w`` rank r takes images [r·B/w, (r+1)·B/w) of each global batch
(`shard_bounds`), so one process and w processes see the same global stream. In-memory datasets
augment whole uint8 batches; ImageFolder uses torchvision transforms in a DataLoader whose sampler
gives each image its seed, so worker count and prefetching change nothing but speed. With workers the
training DataLoader of a (rank, world) is kept and its workers persist across epochs (the sampler is
moved to each epoch's start); it prefetches ``prefetch_factor`` batches per worker and pins memory when
the training device is CUDA (``load_splits(spec, pin_memory=True)``).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..config import DataError, DataSpec
from .datasets import (
    IMAGEFOLDER_INTERPOLATION,
    MEAN_STD,
    PAD,
    DatasetInfo,
    _cifar_arrays,
    _cifar_info,
    _fmnist_arrays,
    _fmnist_info,
    _imagefolder_info,
    _imagefolder_pair,
    dataset_info,
    imagefolder_resize,
)

# Tags separating the random streams derived from the one seed.
_SPLIT, _SHUFFLE, _AUGMENT, _CALIBRATION = 0x5EED01, 0x5EED02, 0x5EED03, 0x5EED04


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


def shard_bounds(batch_size: int, rank: int, world_size: int) -> tuple[int, int]:
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


def crop_flip(x: torch.Tensor, dy, dx, flip, pad: int) -> torch.Tensor:
    """Random crop of the zero-padded images and horizontal flip, per image, in one gather on x's device.

    dy, dx, flip: numpy arrays or tensors (moved to x's device); integer indexing, so the result is the same
    on every device, bit for bit."""
    n, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    ar_h, ar_w = torch.arange(h, device=x.device), torch.arange(w, device=x.device)
    rows = torch.as_tensor(dy, device=x.device).view(n, 1) + ar_h  # (n, h)
    fl = torch.as_tensor(flip, device=x.device).view(n, 1)
    cols = torch.as_tensor(dx, device=x.device).view(n, 1) + torch.where(fl, (w - 1) - ar_w, ar_w)  # (n, w)
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
        """Normalise one batch on its device (a multiply then a subtract, each rounded once: the same on every device)."""
        if self.scale.device != x.device:
            self.scale, self.shift = self.scale.to(x.device), self.shift.to(x.device)
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
        """Fix the rank's slice of each global batch, then the epoch and first step (`at`)."""
        self.indices, self.batch_size, self.seed = indices, batch_size, seed
        self.lo, self.hi = shard_bounds(batch_size, rank, world_size)
        self.steps = len(indices) // batch_size
        self.at(epoch, start_step)

    def at(self, epoch: int, start_step: int = 0) -> None:
        """Move to an epoch and its first step (read when an iteration starts)."""
        if not 0 <= start_step <= self.steps:
            raise DataError(f"start_step {start_step} is outside [0, {self.steps}] steps of the epoch")
        self.epoch, self.start_step = epoch, start_step

    def __len__(self) -> int:
        """Number of images this rank sees from start_step to the end of the epoch."""
        return (self.steps - self.start_step) * (self.hi - self.lo)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """Yield (index into the folder, per-image seed) in batch order, for the epoch and step set now."""
        return _step_items(self.indices, self.batch_size, self.seed, self.epoch, self.start_step, self.lo, self.hi)


def _step_items(indices: np.ndarray, batch_size: int, seed: int, epoch: int, start_step: int, lo: int,
                hi: int) -> Iterator[tuple[int, int]]:
    """(index, seed) of images [lo, hi) of every global batch of an epoch from start_step."""
    perm = epoch_permutation(len(indices), seed, epoch)
    for step in range(start_step, len(indices) // batch_size):
        seeds = _rng(seed, _AUGMENT, epoch, step).integers(0, 2**62, size=batch_size)
        chosen = indices[perm[step * batch_size : (step + 1) * batch_size]]
        for j in range(lo, hi):
            yield int(chosen[j]), int(seeds[j])


class _Stream:
    """The batches of one DataLoader iteration (channels_last when asked); `release` runs when it ends or is dropped."""

    def __init__(self, it: Iterator[tuple[torch.Tensor, torch.Tensor]], channels_last: bool, release: Callable[[], None] | None = None) -> None:
        """Wrap a started DataLoader iterator."""
        self.it, self.channels_last, self._release = it, channels_last, release

    def __iter__(self) -> "_Stream":
        """The stream itself."""
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next (x, y) batch."""
        try:
            x, y = next(self.it)
        except StopIteration:
            self.release()
            raise
        return (x.contiguous(memory_format=torch.channels_last) if self.channels_last else x), y

    def release(self) -> None:
        """Hand the loader back (once)."""
        release, self._release = self._release, None
        if release is not None:
            release()

    def __del__(self) -> None:
        """An abandoned stream hands its loader back too."""
        self.release()


def _loader(dataset: torch.utils.data.Dataset, sampler: Any, batch_size: int, spec: DataSpec, pin_memory: bool, *,
            persistent: bool = False, drop_last: bool = False, generator: torch.Generator | None = None) -> torch.utils.data.DataLoader:
    """A DataLoader with the spec's workers and, with workers, its prefetch depth (and persistent workers if asked)."""
    workers = spec.num_workers
    extra = {"prefetch_factor": spec.prefetch_factor, "persistent_workers": persistent} if workers else {}
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                                       drop_last=drop_last, pin_memory=pin_memory, generator=generator, **extra)


def _imagefolder_transforms(size: int, mean: Sequence[float], std: Sequence[float]) -> tuple[Callable, Callable]:
    """(train, eval) torchvision transforms: RandomResizedCrop + flip; Resize(`imagefolder_resize`) + CenterCrop."""
    from torchvision import transforms as T

    norm = [T.ToTensor(), T.Normalize(mean, std)]
    train = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), *norm])
    resize = T.Resize(imagefolder_resize(size), interpolation=T.InterpolationMode(IMAGEFOLDER_INTERPOLATION))
    evalt = T.Compose([resize, T.CenterCrop(size), *norm])
    return train, evalt


# -------------------------------------------------------------------------------- the splits


class Splits:
    """The train, search_val and calibration splits of a dataset, with their batch iterators (no test)."""

    def __init__(self, spec: DataSpec, info: DatasetInfo, indices: dict[str, np.ndarray], images: torch.Tensor | None, labels: torch.Tensor | None, folder: Any = None, pin_memory: bool = False, device: torch.device | str | None = None) -> None:
        """Hold the spec, info, split indices and either in-memory tensors (a copy on `device` for the batches) or an
        ImageFolder (pinned batches: CUDA)."""
        self.spec, self.info, self.indices = spec, info, indices
        self._images, self._labels, self._folder = images, labels, folder
        self.device = torch.device("cpu" if device is None else device)
        self.pin_memory = pin_memory or self.device.type == "cuda"
        self._data = _on_device(images, labels, self.device)  # what in-memory batches are cut from
        self._loaders: dict[tuple[int, int], torch.utils.data.DataLoader] = {}  # persistent training loaders
        self._reading: set[tuple[int, int]] = set()  # those an unfinished stream is reading
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
        lo, hi = shard_bounds(self.spec.batch_size, rank, world_size)
        if not 0 <= start_step <= self.steps_per_epoch:
            raise DataError(f"start_step {start_step} is outside [0, {self.steps_per_epoch}] steps of the epoch")
        if self._folder is not None:
            return self._folder_train(epoch, start_step, rank, world_size)
        return self._memory_train(epoch, start_step, lo, hi)

    def _memory_train(self, epoch: int, start_step: int, lo: int, hi: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches of the in-memory dataset on `device` (crop + flip on the uint8 batch, then normalise, there): the
        epoch's order goes to the device once, each step's crop offsets and flips in one non-blocking copy."""
        b, spec, train = self.spec.batch_size, self.spec, self.indices["train"]
        images, labels = self._data
        perm = epoch_permutation(len(train), spec.batch_seed, epoch)
        order = _to_device(torch.as_tensor(train[perm]), self.device)
        pad = PAD[self.info.name]
        for step in range(start_step, self.steps_per_epoch):
            idx = order[step * b + lo : step * b + hi]
            x = images[idx]
            if spec.augment:
                dy, dx, flip = augment_params(spec.batch_seed, epoch, step, b, pad)
                p = _to_device(torch.as_tensor(np.stack([dy[lo:hi], dx[lo:hi], flip[lo:hi]])), self.device)
                x = crop_flip(x, p[0], p[1], p[2].bool(), pad)
            yield self._norm(x), labels[idx]

    def _folder_train(self, epoch: int, start_step: int, rank: int, world_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches of the ImageFolder through a DataLoader and the step sampler.

        With workers, the (rank, world) loader is kept and its workers persist; a second stream read while
        one is unfinished (the supernet's estimation pool inside an epoch) gets a loader of its own."""
        key = (rank, world_size)
        keep = self.spec.num_workers > 0 and key not in self._reading
        loader = self._loaders.get(key) if keep else None
        if loader is None:
            loader = self._train_loader(rank, world_size, keep)
            if keep:
                self._loaders[key] = loader
        loader.sampler.at(epoch, start_step)
        if not keep:
            return _Stream(iter(loader), self.spec.channels_last)
        self._reading.add(key)
        return _Stream(iter(loader), self.spec.channels_last, lambda: self._reading.discard(key))

    def _train_loader(self, rank: int, world_size: int, persistent: bool) -> torch.utils.data.DataLoader:
        """A training DataLoader of this rank's shards (its position is set by `StepSampler.at`)."""
        spec = self.spec
        tf = self._train_tf if spec.augment else self._eval_tf
        sampler = StepSampler(self.indices["train"], spec.batch_size, spec.batch_seed, 0, 0, rank, world_size)
        # The generator only seeds worker processes (each image's transform is seeded by its sampler seed);
        # it keeps the loader off torch's global RNG.
        return _loader(_SeededImages(self._folder, tf), sampler, spec.batch_size // world_size, spec, self.pin_memory,
                       persistent=persistent, drop_last=True, generator=torch.Generator().manual_seed(spec.batch_seed))

    # -- evaluation (no augmentation, no shuffle)

    def _eval(self, split: str, batch_size: int | None, rank: int, world_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Fixed-order batches of a split."""
        bs = batch_size or self.spec.batch_size
        indices = self.indices[split]
        if self._folder is not None:
            return _folder_eval(self._folder, self._eval_tf, indices, bs, rank, world_size, self.spec, self.pin_memory)
        return self._memory_eval(indices, bs, rank, world_size)

    def _memory_eval(self, indices: np.ndarray, bs: int, rank: int, world_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Normalised, unaugmented in-memory batches, on `device`."""
        images, labels = self._data
        for chunk in _eval_chunks(indices, bs, rank, world_size):
            idx = _to_device(torch.as_tensor(chunk), self.device)
            yield self._norm(images[idx]), labels[idx]

    def search_val_batches(self, batch_size: int | None = None, rank: int = 0, world_size: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The held-out search-validation images (scores the greedy baseline), fixed order, no augmentation."""
        return self._eval("search_val", batch_size, rank, world_size)

    def calibration_batches(self, batch_size: int | None = None, rank: int = 0, world_size: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Training images for BatchNorm recalibration, fixed (seeded, class-mixed) order, no augmentation."""
        return self._eval("calibration", batch_size, rank, world_size)


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host tensor on `device`: page-locked and copied without waiting for the stream (CUDA)."""
    if device.type == "cpu":
        return t
    return (t.pin_memory() if device.type == "cuda" else t).to(device, non_blocking=True)


def _on_device(images: torch.Tensor | None, labels: torch.Tensor | None,
               device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The in-memory dataset on the training device, copied once (uint8 images: 47 MB for Fashion-MNIST, 154 MB for
    CIFAR-10); the CPU tensors themselves on the CPU."""
    if images is None or device.type == "cpu":
        return images, labels
    return images.to(device), labels.to(device)


def _folder_eval(folder: Any, tf: Callable, indices: np.ndarray, bs: int, rank: int, world_size: int, spec: DataSpec, pin_memory: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Fixed-order ImageFolder evaluation batches through a DataLoader."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise DataError(f"rank {rank} is not in [0, world_size = {world_size})")
    loader = _loader(_SeededImages(folder, tf), [int(i) for i in indices[rank::world_size]], bs, spec, pin_memory)
    return _Stream(iter(loader), spec.channels_last)


def load_splits(spec: DataSpec, pin_memory: bool = False, device: torch.device | str | None = None) -> Splits:
    """Check and split the training set of a dataset (the test split is not read). `device`: the training device;
    an in-memory dataset is held there and its batches cut, augmented and normalised there; ImageFolder batches
    are pinned (page-locked) for a CUDA device, as with `pin_memory`."""
    root = spec.resolved_root
    if spec.name == "imagefolder":
        info = _imagefolder_info(root, spec.image_size)
        train, _ = _imagefolder_pair(str(root.resolve()))
        return Splits(spec, info, split_indices(info.n_train, spec), None, None, folder=train, pin_memory=pin_memory,
                      device=device)
    if spec.name == "fashion_mnist":
        x, y = _fmnist_arrays(root, "train", spec.download)
        info = _fmnist_info(root, spec.download)
    else:
        x, y = _cifar_arrays(root, True, spec.download)
        info = _cifar_info(root, spec.download)
    return Splits(spec, info, split_indices(len(x), spec), x, y, pin_memory=pin_memory, device=device)


def test_batches(spec: DataSpec, batch_size: int | None = None, rank: int = 0, world_size: int = 1, pin_memory: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The official test split, fixed order, no augmentation: for the final evaluation only (rank r: every
    world_size-th image; ImageFolder batches pinned with `pin_memory`)."""
    root = spec.resolved_root
    bs = batch_size or spec.batch_size
    if spec.name == "imagefolder":
        info = _imagefolder_info(root, spec.image_size)
        _, val = _imagefolder_pair(str(root.resolve()))
        _, tf = _imagefolder_transforms(info.height, info.mean, info.std)
        return _folder_eval(val, tf, np.arange(len(val)), bs, rank, world_size, spec, pin_memory)
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


def first_images(batches, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first n (images, labels) of a batch iterator; a clear error if the split holds fewer."""
    xs, ys, got = [], [], 0
    for x, y in batches:
        xs.append(x)
        ys.append(y)
        got += len(y)
        if got >= n:
            break
    x, y = torch.cat(xs)[:n], torch.cat(ys)[:n]
    if len(y) < n:
        raise ValueError(f"asked for {n} images but the split holds {len(y)}; lower greedy.n_eval / greedy.n_cal "
                         f"or raise data.search_val / data.calibration")
    return x.contiguous(), y
