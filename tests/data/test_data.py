"""Datasets, splits and loaders: shapes, disjoint seeded splits, shuffling, resume, sharding, errors."""

import gzip
import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aows_core import data as D
from aows_core.data.datasets import _fmnist_arrays
from aows_core.data.splits import _Normalize

FMNIST = Path(D.DEFAULT_ROOTS["fashion_mnist"])
needs_fmnist = pytest.mark.skipif(
    not (FMNIST / "train-images-idx3-ubyte.gz").is_file(), reason="apt-get install dataset-fashion-mnist"
)


def small(**kw) -> D.DataSpec:
    """A light Fashion-MNIST spec (2048 training images, batches of 128)."""
    base = dict(search_val=1000, calibration=256, train_subset=2048, batch_size=128, seed=3)
    return D.DataSpec(**{**base, **kw})


def write_idx(path: Path, arr: np.ndarray, compress: bool = False) -> None:
    """Write a uint8 array as an idx file."""
    head = bytes([0, 0, 8, arr.ndim]) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    (gzip.open if compress else open)(path, "wb").write(head + arr.astype(np.uint8).tobytes())


def fake_fmnist(folder: Path, n_train: int = 300, n_test: int = 50, compress: bool = False) -> None:
    """Tiny random Fashion-MNIST-shaped idx files in folder."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    sfx = ".gz" if compress else ""
    for split, n in (("train", n_train), ("t10k", n_test)):
        write_idx(folder / f"{split}-images-idx3-ubyte{sfx}", rng.integers(0, 256, (n, 28, 28)), compress)
        write_idx(folder / f"{split}-labels-idx1-ubyte{sfx}", np.arange(n) % 10, compress)


def raw_train() -> tuple[torch.Tensor, torch.Tensor]:
    """The official Fashion-MNIST training images and labels."""
    return _fmnist_arrays(FMNIST, "train", False)


# ----------------------------------------------------------------------------- Fashion-MNIST


@needs_fmnist
def test_fashion_mnist_info_and_shapes():
    info = D.dataset_info("fashion_mnist")
    assert (info.n_train, info.n_test, info.height, info.width, info.channels, info.classes) == (60000, 10000, 28, 28, 1, 10)
    x, y = raw_train()
    assert x.shape == (60000, 1, 28, 28) and x.dtype == torch.uint8
    assert sorted(y.unique().tolist()) == list(range(10))
    sp = D.load_splits(small())
    xb, yb = next(sp.train_batches(0))
    assert xb.shape == (128, 1, 28, 28) and xb.dtype == torch.float32 and yb.dtype == torch.int64
    assert sp.steps_per_epoch == 2048 // 128 and sp.sizes == {"train": 2048, "search_val": 1000, "calibration": 256}
    n_test, labels = 0, []
    for xt, yt in D.test_batches(small(), batch_size=5000):
        n_test += len(xt)
        labels.append(yt)
    assert n_test == 10000 and sorted(torch.cat(labels).unique().tolist()) == list(range(10))
    assert D.test_size(small()) == 10000
    # normalised pixels: roughly zero mean, unit std over the search-val images
    xs = torch.cat([b for b, _ in D.load_splits(small()).search_val_batches(1000)])
    assert abs(xs.mean().item()) < 0.1 and abs(xs.std().item() - 1) < 0.1


@needs_fmnist
def test_splits_disjoint_deterministic_and_nested():
    full = D.load_splits(small(train_subset=None))
    tr, sv, cal = (full.indices[k] for k in ("train", "search_val", "calibration"))
    assert len(tr) == 59000 and len(sv) == 1000 and len(cal) == 256
    assert len(np.intersect1d(tr, sv)) == 0 and len(np.union1d(tr, sv)) == 60000  # a partition of train
    assert set(cal) <= set(tr) and len(set(cal)) == 256
    sub = D.load_splits(small())
    assert np.array_equal(sub.indices["search_val"], sv)  # train_subset does not move the hold-out
    assert set(sub.indices["train"]) <= set(tr) and set(sub.indices["calibration"]) <= set(sub.indices["train"])
    again = D.load_splits(small())
    for k in sub.indices:
        assert np.array_equal(sub.indices[k], again.indices[k])
    other = D.load_splits(small(seed=4))
    assert not np.array_equal(other.indices["search_val"], sv)
    # search_val images are the original training images at those indices, in that order, unaugmented
    x, y = raw_train()
    xs, ys = next(sub.search_val_batches(100))
    norm = _Normalize(*D.MEAN_STD["fashion_mnist"], False)
    assert torch.equal(xs, norm(x[torch.as_tensor(sv[:100])])) and torch.equal(ys, y[torch.as_tensor(sv[:100])])
    assert np.array_equal(sub.labels("search_val"), y[torch.as_tensor(sv)].numpy())
    xc, _ = next(sub.calibration_batches(64))
    assert torch.equal(xc, norm(x[torch.as_tensor(sub.indices["calibration"][:64])]))
    assert sub.manifest()["index_sha256"] == again.manifest()["index_sha256"]


@needs_fmnist
def test_every_epoch_shuffles_and_covers_the_split():
    sp = D.load_splits(small(augment=False))
    e0 = [y for _, y in sp.train_batches(0)]
    e1 = [y for _, y in sp.train_batches(1)]
    for y in e0[:3]:
        assert len(y.unique()) >= 8 and not torch.equal(y, y.sort().values)  # class-mixed, not sorted
    assert not all(torch.equal(a, b) for a, b in zip(e0, e1))
    perm0 = D.epoch_permutation(2048, 3, 0)
    assert sorted(perm0.tolist()) == list(range(2048))
    assert torch.equal(torch.cat(e0), sp._labels[torch.as_tensor(sp.indices["train"][perm0])])  # each image once


@needs_fmnist
def test_resume_at_step_gives_the_same_batches():
    sp = D.load_splits(small())
    full = list(sp.train_batches(2))
    resumed = list(D.load_splits(small()).train_batches(2, start_step=5))
    assert len(full) == sp.steps_per_epoch and len(resumed) == sp.steps_per_epoch - 5
    for (xa, ya), (xb, yb) in zip(full[5:], resumed):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert list(sp.train_batches(2, start_step=sp.steps_per_epoch)) == []
    with pytest.raises(D.DataError, match="start_step"):
        sp.train_batches(0, start_step=sp.steps_per_epoch + 1)


@needs_fmnist
def test_two_rank_shards_concatenate_to_the_global_batch():
    sp = D.load_splits(small(channels_last=True))
    one = sp.train_batches(1)
    r0, r1 = sp.train_batches(1, rank=0, world_size=2), sp.train_batches(1, rank=1, world_size=2)
    for _ in range(3):
        (x, y), (x0, y0), (x1, y1) = next(one), next(r0), next(r1)
        assert x0.shape == (64, 1, 28, 28) and x0.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(torch.cat([x0, x1]), x) and torch.equal(torch.cat([y0, y1]), y)
    with pytest.raises(D.DataError, match="divisible"):
        sp.train_batches(0, world_size=3)
    ev = torch.cat([b for r in (0, 1) for b, _ in sp.search_val_batches(300, rank=r, world_size=2)])
    assert ev.shape[0] == 1000  # evaluation shards cover the split once


@needs_fmnist
def test_augmentation_changes_images_deterministically():
    plain = next(D.load_splits(small(augment=False)).train_batches(0, start_step=4))
    aug = next(D.load_splits(small()).train_batches(0, start_step=4))
    aug2 = next(D.load_splits(small()).train_batches(0, start_step=4))
    assert aug[0].shape == plain[0].shape and torch.equal(aug[1], plain[1])
    assert torch.equal(aug[0], aug2[0])
    changed = (aug[0] != plain[0]).flatten(1).any(1).float().mean().item()
    assert changed > 0.8  # P(no shift and no flip) = 1/50
    nxt = next(D.load_splits(small()).train_batches(0, start_step=5))[0]
    assert not torch.equal(nxt, aug[0])


def test_crop_flip_matches_pad_slice_flip():
    x = torch.randint(0, 256, (6, 3, 7, 5), dtype=torch.uint8)
    dy, dx, flip = D.augment_params(0, 1, 2, 6, 2)
    out = D.crop_flip(x, dy, dx, flip, 2)
    padded = F.pad(x, (2, 2, 2, 2))
    for i in range(6):
        ref = padded[i, :, dy[i] : dy[i] + 7, dx[i] : dx[i] + 5]
        assert torch.equal(out[i], ref.flip(-1) if flip[i] else ref)
    assert np.array_equal(D.augment_params(0, 1, 2, 6, 2)[0], dy)


# ------------------------------------------------------------------------ layouts and errors


def test_fashion_mnist_layouts(tmp_path):
    fake_fmnist(tmp_path / "plain")
    fake_fmnist(tmp_path / "tv" / "FashionMNIST" / "raw", compress=True)
    for root in (tmp_path / "plain", tmp_path / "tv"):
        spec = D.DataSpec(root=str(root), search_val=50, calibration=20, batch_size=32)
        info = D.dataset_info("fashion_mnist", root)
        assert (info.n_train, info.n_test) == (300, 50)
        sp = D.load_splits(spec)
        assert sp.sizes == {"train": 250, "search_val": 50, "calibration": 20} and sp.steps_per_epoch == 7
        assert sum(len(x) for x, _ in D.test_batches(spec)) == 50


def test_fashion_mnist_errors(tmp_path):
    with pytest.raises(D.DataError, match="does not exist.*apt-get install dataset-fashion-mnist"):
        D.load_splits(D.DataSpec(root=str(tmp_path / "nowhere")))
    with pytest.raises(D.DataError, match=r"no Fashion-MNIST train files.*train-images-idx3-ubyte.*data\.root"):
        D.dataset_info("fashion_mnist", tmp_path)
    fake_fmnist(tmp_path / "a")
    (tmp_path / "a" / "t10k-images-idx3-ubyte").unlink()
    with pytest.raises(D.DataError, match="no Fashion-MNIST test files"):  # checked early, not read
        D.load_splits(D.DataSpec(root=str(tmp_path / "a"), search_val=50, calibration=20, batch_size=32))
    with pytest.raises(D.DataError, match="no Fashion-MNIST test files"):
        D.test_batches(D.DataSpec(root=str(tmp_path / "a")))
    (tmp_path / "a" / "t10k-images-idx3-ubyte").write_bytes(b"\x00\x00\x0d\x03junk")
    with pytest.raises(D.DataError, match="not an idx file"):
        next(D.test_batches(D.DataSpec(root=str(tmp_path / "a"))))
    with pytest.raises(D.DataError, match="not an idx file"):
        D.load_splits(D.DataSpec(root=str(tmp_path / "a"), search_val=50, calibration=20, batch_size=32))
    fake_fmnist(tmp_path / "b")
    with open(tmp_path / "b" / "train-images-idx3-ubyte", "r+b") as f:  # truncated data
        f.truncate(1000)
    with pytest.raises(D.DataError, match="truncated or corrupt"):
        D.load_splits(D.DataSpec(root=str(tmp_path / "b"), search_val=50, calibration=20, batch_size=32))
    fake_fmnist(tmp_path / "c")
    with pytest.raises(D.DataError, match="train_subset = 1000 exceeds the 250"):
        D.load_splits(D.DataSpec(root=str(tmp_path / "c"), search_val=50, train_subset=1000, calibration=0))
    with pytest.raises(D.DataError, match="fewer than data.batch_size"):
        D.load_splits(D.DataSpec(root=str(tmp_path / "c"), search_val=50, calibration=0, batch_size=512))
    with pytest.raises(D.DataError, match="search_val = 300 leaves no training images"):
        D.load_splits(D.DataSpec(root=str(tmp_path / "c"), search_val=300))


def test_spec_errors():
    with pytest.raises(D.DataError, match="unknown dataset 'mnist'"):
        D.DataSpec(name="mnist")
    with pytest.raises(D.DataError, match=r"unknown key\(s\) \['bacth_size'\]"):
        D.DataSpec.from_mapping({"bacth_size": 3})
    assert D.DataSpec.from_mapping({"batch_size": 64}, seed=5) == D.DataSpec(batch_size=64, seed=5)
    with pytest.raises(D.DataError, match="set data.root"):
        D.dataset_info("imagefolder")


def test_check_space_names_both_sides(tiny_space):
    info = D.DatasetInfo("fashion_mnist", "/r", 28, 28, 1, 10, 60000, 10000, (0.3,), (0.3,))
    with pytest.raises(D.DataError, match=r"resolution \(8, 8\) vs the images' \(28, 28\).*num_classes 4 vs the dataset's 10"):
        D.check_dataset(info, tiny_space)
    D.check_dataset(info, SimpleNamespace(name="ok", resolution=(28, 28), in_channels=1, num_classes=10))


def test_cifar10_missing_root_is_explained(tmp_path):
    with pytest.raises(D.DataError, match=r"CIFAR-10 not found.*cifar-10-batches-py/\{data_batch_1.*data\.root.*download"):
        D.load_splits(D.DataSpec(name="cifar10", root=str(tmp_path)))
    with pytest.raises(D.DataError, match="set data.root"):
        D.load_splits(D.DataSpec(name="cifar10"))
    (tmp_path / "cifar-10-batches-py").mkdir()
    for f in D.CIFAR10_FILES:
        (tmp_path / "cifar-10-batches-py" / f).write_bytes(b"not a pickle")
    with pytest.raises(D.DataError, match="integrity check"):
        D.load_splits(D.DataSpec(name="cifar10", root=str(tmp_path / "cifar-10-batches-py")))


# ------------------------------------------------------------------------------- ImageFolder


def image_folder(root: Path, classes=("ant", "bee", "cat"), n_train: int = 4, n_val: int = 2) -> None:
    """A tiny ImageNet-layout folder of random 12×10 PNGs."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("val", n_val)):
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(root / split / c / f"{i}.png")


def test_imagefolder_loads_and_shards(tmp_path):
    image_folder(tmp_path)
    spec = D.DataSpec(name="imagefolder", root=str(tmp_path), search_val=3, calibration=2, batch_size=4, image_size=8)
    info = D.dataset_info("imagefolder", tmp_path, image_size=8)
    assert (info.classes, info.channels, info.resolution, info.n_train, info.n_test) == (3, 3, (8, 8), 12, 6)
    assert info.class_names == ("ant", "bee", "cat")
    sp = D.load_splits(spec)
    assert sp.sizes == {"train": 9, "search_val": 3, "calibration": 2} and sp.steps_per_epoch == 2
    batches = list(sp.train_batches(0))
    assert len(batches) == 2 and batches[0][0].shape == (4, 3, 8, 8) and batches[0][1].dtype == torch.int64
    resumed = list(sp.train_batches(0, start_step=1))
    assert torch.equal(resumed[0][0], batches[1][0])  # same images, same augmentation
    halves = [next(sp.train_batches(0, rank=r, world_size=2)) for r in (0, 1)]
    assert torch.equal(torch.cat([h[0] for h in halves]), batches[0][0])
    assert sorted(torch.cat([y for _, y in sp.search_val_batches(2)]).tolist()) == sorted(sp.labels("search_val").tolist())
    xt = torch.cat([x for x, _ in D.test_batches(spec, batch_size=4)])
    assert xt.shape == (6, 3, 8, 8)


def _same(a, b) -> bool:
    """Two lists of (x, y) batches hold the same tensors."""
    return len(a) == len(b) and all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b))


def test_imagefolder_workers_persist_prefetch_and_keep_every_batch(tmp_path):
    """Worker processes (kept across epochs, prefetching) read the batches of the single-process loader, also
    from a resumed step, on a rank's shard, and for a second stream read inside an unfinished one."""
    image_folder(tmp_path, n_train=6)
    spec = D.DataSpec(name="imagefolder", root=str(tmp_path), search_val=2, calibration=2, batch_size=4, image_size=8)
    plain = D.load_splits(spec)
    kept = D.load_splits(D.DataSpec(**{**spec.to_dict(), "num_workers": 2, "prefetch_factor": 1}))
    epochs = {e: list(plain.train_batches(e)) for e in (0, 1)}
    assert len(epochs[0]) == 4 and not _same(epochs[0], epochs[1])
    for e in (0, 1):
        assert _same(list(kept.train_batches(e)), epochs[e])
    loader = kept._loaders[(0, 1)]
    assert loader.persistent_workers and loader.prefetch_factor == 1 and not loader.pin_memory
    assert _same(list(kept.train_batches(1, start_step=2)), epochs[1][2:])
    assert kept._loaders[(0, 1)] is loader  # one loader, its workers kept
    outer = kept.train_batches(0)
    first = next(outer)
    assert _same(list(kept.train_batches(0)), epochs[0])  # its own loader while `outer` is unfinished
    assert _same([first, *outer], epochs[0])
    assert _same([next(kept.train_batches(1, rank=1, world_size=2))],
                 [(epochs[1][0][0][2:], epochs[1][0][1][2:])])


def test_imagefolder_layout_errors(tmp_path):
    (tmp_path / "train" / "a").mkdir(parents=True)
    with pytest.raises(D.DataError, match=r"no val/ folder.*ImageNet layout expected"):
        D.dataset_info("imagefolder", tmp_path)
    (tmp_path / "val" / "a").mkdir(parents=True)
    with pytest.raises(D.DataError, match="ImageNet layout expected"):  # class folders without images
        D.dataset_info("imagefolder", tmp_path)
    image_folder(tmp_path / "x", classes=("a", "b"))
    image_folder(tmp_path / "y", classes=("a", "c"))
    (tmp_path / "y" / "train").rename(tmp_path / "z")
    (tmp_path / "x" / "val").rename(tmp_path / "y" / "train")  # train: a, b; val: a, c
    with pytest.raises(D.DataError, match=r"class folders differ \(only in train: \['b'\], only in val: \['c'\]\)"):
        D.dataset_info("imagefolder", tmp_path / "y")
