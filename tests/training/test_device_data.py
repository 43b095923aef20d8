"""In-memory datasets on the training device (§7, docs/method.md D29): the batches cut, cropped, flipped and
normalised where they train are today's (395a16b) CPU batches bit for bit; ImageFolder batches pinned for CUDA."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aows_core import data as D
from aows_core.data.datasets import DatasetInfo
from aows_core.data.splits import Splits, _Normalize, epoch_permutation

cuda = pytest.mark.cuda  # skipped without a GPU (tests/conftest.py); scripts/gpu_check.sh runs these
MEAN, STD = (0.2860,), (0.3530,)


def _splits(device=None, augment=True, channels_last=False) -> Splits:
    """A Fashion-MNIST-shaped in-memory dataset of 400 random images, 64 per batch."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (400, 1, 28, 28), dtype=torch.uint8, generator=g)
    labels = torch.arange(400) % 10
    spec = D.DataSpec(search_val=40, calibration=32, batch_size=64, seed=5, augment=augment,
                      channels_last=channels_last)
    info = DatasetInfo("fashion_mnist", "", 28, 28, 1, 10, 400, 0, MEAN, STD)
    return Splits(spec, info, D.split_indices(400, spec), images, labels, device=device)


def _old_crop_flip(x, dy, dx, flip, pad):
    """crop_flip at 395a16b (host index tensors)."""
    n, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    ar_h, ar_w = torch.arange(h), torch.arange(w)
    rows = torch.as_tensor(dy).view(n, 1) + ar_h
    fl = torch.as_tensor(flip).view(n, 1)
    cols = torch.as_tensor(dx).view(n, 1) + torch.where(fl, (w - 1) - ar_w, ar_w)
    flat = padded.reshape(n, c, -1)
    idx = (rows[:, :, None] * (w + 2 * pad) + cols[:, None, :]).reshape(n, 1, h * w).expand(n, c, h * w)
    return torch.gather(flat, 2, idx).view(n, c, h, w)


def _old_batches(s: Splits, epoch, start, lo, hi):
    """Splits._memory_train at 395a16b: the reference."""
    b, spec, train = s.spec.batch_size, s.spec, s.indices["train"]
    perm = epoch_permutation(len(train), spec.batch_seed, epoch)
    norm = _Normalize(MEAN, STD, spec.channels_last)
    for step in range(start, s.steps_per_epoch):
        idx = torch.as_tensor(train[perm[step * b + lo : step * b + hi]])
        x = s._images[idx]
        if spec.augment:
            dy, dx, flip = D.augment_params(spec.batch_seed, epoch, step, b, 2)
            x = _old_crop_flip(x, dy[lo:hi], dx[lo:hi], flip[lo:hi], 2)
        yield norm(x), s._labels[idx]


@pytest.mark.parametrize("augment", [True, False])
@pytest.mark.parametrize("channels_last", [False, True])
def test_batches_are_the_old_cpu_batches_bit_for_bit(augment, channels_last):
    """The batch code CUDA runs (epoch order placed once, crop offsets and flips in one copy per step, gather and
    normalisation where the data is), on CPU tensors: every batch of two epochs equals the old code's."""
    s = _splits("cpu", augment, channels_last)
    for epoch in (0, 1):
        new = list(s.train_batches(epoch, start_step=1))
        old = list(_old_batches(s, epoch, 1, 0, 64))
        assert len(new) == len(old) == s.steps_per_epoch - 1
        for (x, y), (xr, yr) in zip(new, old):
            assert torch.equal(x, xr) and torch.equal(y, yr) and x.dtype == torch.float32
            assert x.stride() == xr.stride()  # the same memory format


def test_a_rank_shard_is_its_slice_of_the_old_global_batch():
    s = _splits()
    x, y = next(s.train_batches(0, start_step=2, rank=1, world_size=2))
    xr, yr = next(_old_batches(s, 0, 2, 32, 64))
    assert torch.equal(x, xr) and torch.equal(y, yr)


def test_without_a_device_the_data_stays_where_it_is():
    s = _splits()
    assert s.device == torch.device("cpu") and s._data[0] is s._images and not s.pin_memory


@cuda
def test_cuda_batches_are_made_on_the_gpu_and_equal_the_cpu_ones():
    """On CUDA the dataset is held on the GPU once; augmented batches (integer gather, then one multiply and one
    subtract, each rounded once) equal the CPU's exactly, as do evaluation batches; labels stay readable."""
    gpu, cpu = _splits("cuda"), _splits("cpu")
    assert gpu._data[0].is_cuda and gpu.pin_memory
    for (x, y), (xc, yc) in zip(gpu.train_batches(1), cpu.train_batches(1)):
        assert x.is_cuda and y.is_cuda
        assert torch.equal(x.cpu(), xc) and torch.equal(y.cpu(), yc)
    (xe, ye), (xec, yec) = next(gpu.calibration_batches(16)), next(cpu.calibration_batches(16))
    assert torch.equal(xe.cpu(), xec) and torch.equal(ye.cpu(), yec)
    assert np.array_equal(gpu.labels("train"), cpu.labels("train"))
