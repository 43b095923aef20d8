"""The sandwich step without host waits (§3, §5; docs/method.md D29): the same step as at 395a16b bit for bit on the
CPU, the device-side non-finite guard (the step undone, raised on read; fp16: skipped), widths placed once."""

import copy
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from aows_core.nets.sandwich import NonFiniteLoss, sandwich_step, step_unless
from aows_core.nets.supernet import Supernet
from aows_core.nets.widths import DeviceWidths, place_widths, widths_tensor
from aows_core.space import mobilenet_v1_space

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_sandwich", ROOT / "bench" / "bench_sandwich.py")
bench = sys.modules["bench_sandwich"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)  # the 395a16b step, kept there as the benchmark's named baseline
cuda = pytest.mark.cuda  # skipped without a GPU (tests/conftest.py); scripts/gpu_check.sh runs these


@pytest.fixture(scope="module")
def space():
    return mobilenet_v1_space("small", resolution=16, in_channels=3, num_classes=5, width_mult=0.25, n_choices=4)


def _idx(space, n, seed):
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, len(c), n) for c in space.layer_choices], 1)


def _batches(space, steps, B=8, R=2, seed=0):
    """(x, y, (R, B, L) widths) of a few steps."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(steps):
        x, y = torch.randn(B, 3, 16, 16, generator=g), torch.randint(0, 5, (B,), generator=g)
        out.append((x, y, widths_tensor(space, _idx(space, R * B, seed + k)).reshape(R, B, space.n_layers)))
    return out


def _pair(space, seed=0, channels_last=False):
    """Two identical supernets, each with its own Nesterov SGD with weight decay (the supernet stage's)."""
    torch.manual_seed(seed)
    a = Supernet(space, channels_last=channels_last)
    b = copy.deepcopy(a)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=4e-5, nesterov=True) for m in (a, b)]
    return (a, opts[0]), (b, opts[1])


def _same_state(m1, o1, m2, o2) -> bool:
    """Weights, BN buffers and momentum buffers equal bit for bit."""
    s1, s2 = m1.state_dict(), m2.state_dict()
    if not all(torch.equal(s1[k], s2[k]) for k in s1):
        return False
    b1 = [o1.state[p].get("momentum_buffer") for p in m1.parameters()]
    b2 = [o2.state[p].get("momentum_buffer") for p in m2.parameters()]
    return all((u is None and v is None) or torch.equal(u, v) for u, v in zip(b1, b2))


@pytest.mark.parametrize("defer", [False, True], ids=["checked-now", "deferred"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_the_step_is_the_395a16b_step_bit_for_bit(space, defer, channels_last):
    """Same seed, same batches: after 3 steps the weights, momentum, losses, accuracy and per-sample differences of
    the new step (checked now, or the device path run on the CPU) equal the old code path's exactly."""
    (old, o_old), (new, o_new) = _pair(space, channels_last=channels_last)
    for k, (x, y, w) in enumerate(_batches(space, 3)):
        ref = bench.baseline_sandwich_step(old, x, y, w, o_old, 2, label_smoothing=0.1, step=k)
        rec = sandwich_step(new, x, y, w, o_new, 2, label_smoothing=0.1, step=k, defer=defer).record()
        assert rec.check() and not rec.nonfinite
        assert np.array_equal(rec.diffs, ref.diffs())
        assert rec.losses == [ref.loss_max, ref.loss_min, *ref.loss_random]
        assert rec.summary() == (ref.loss_max, ref.loss_min, float(np.mean(ref.loss_random)), ref.acc_max)
        assert rec.loss == ref.loss
    assert _same_state(old, o_old, new, o_new)


def test_a_nonfinite_deferred_step_is_undone_and_raised_when_read(space):
    """D29: the device-side flag undoes the optimizer step (weights and momentum as before it); nothing is raised
    until the step's record is read, which names the step."""
    (m, opt), (ref, ref_opt) = _pair(space)
    (x, y, w), (x2, y2, w2) = _batches(space, 2)
    sandwich_step(m, x, y, w, opt, 2, defer=True)
    sandwich_step(ref, x, y, w, ref_opt, 2, defer=True)
    bad_x = x2.clone()
    bad_x[0, 0, 0, 0] = float("nan")
    res = sandwich_step(m, bad_x, y2, w2, opt, 2, step=7, defer=True)  # no exception, no host read
    assert bool(res.nonfinite)
    assert _same_state(m, opt, ref, ref_opt)  # the step was not applied
    with pytest.raises(NonFiniteLoss, match=r"at step 7: max \(labels\)=nan"):
        res.record().check()


def test_a_first_nonfinite_step_leaves_a_momentum_buffer_that_continues_as_none(space):
    """step_unless on the first step: the momentum buffers it created are zeroed; the next step then equals a fresh
    optimizer's first step."""
    (m, opt), (ref, ref_opt) = _pair(space)
    x, y, w = _batches(space, 1)[0]
    bad_x = x.clone()
    bad_x[:, 0] = float("inf")
    assert bool(sandwich_step(m, bad_x, y, w, opt, 2, defer=True).nonfinite)
    assert all(torch.count_nonzero(opt.state[p]["momentum_buffer"]) == 0 for p in m.parameters() if p in opt.state)
    sandwich_step(m, x, y, w, opt, 2, defer=True)
    sandwich_step(ref, x, y, w, ref_opt, 2, defer=False)
    assert _same_state(m, opt, ref, ref_opt)


def test_step_unless_applies_or_restores_exactly():
    """The guard alone: a False flag is optimizer.step(); a True flag leaves parameters and state as they were."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    q = torch.nn.Parameter(p.detach().clone())
    op = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    oq = torch.optim.SGD([q], lr=0.1, momentum=0.9)
    for t in (p, q):
        t.grad = torch.tensor([0.5, 0.25, -1.0])
    step_unless(op, torch.tensor(False))
    oq.step()
    assert torch.equal(p, q) and torch.equal(op.state[p]["momentum_buffer"], oq.state[q]["momentum_buffer"])
    before, buf = p.detach().clone(), op.state[p]["momentum_buffer"].clone()
    p.grad = torch.tensor([float("nan"), 1.0, 1.0])
    step_unless(op, torch.tensor(True))
    assert torch.equal(p, before) and torch.equal(op.state[p]["momentum_buffer"], buf)


@pytest.mark.parametrize("defer", [False, True], ids=["checked-now", "deferred"])
def test_an_fp16_scaler_skips_a_nonfinite_step_instead_of_raising(space, defer):
    """fp16 (D29): with a GradScaler the non-finite step is skipped by the scaler's rule, not raised; its record
    counts for nothing (check() is False) and the scale backs off."""
    (m, opt), _ = _pair(space)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    x, y, w = _batches(space, 1)[0]
    x[0, 0, 0, 0] = float("nan")
    before = copy.deepcopy(m.state_dict())
    res = sandwich_step(m, x, y, w, opt, 2, scaler=scaler, defer=defer, step=3)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items() if k in dict(m.named_parameters()))
    assert res.record().check() is False
    assert scaler.get_scale() < 2.0**8


def test_placed_widths_mask_exactly_like_host_widths(space):
    """place_widths: the per-layer range is read on the host once; the masked pass computes the same logits."""
    torch.manual_seed(0)
    m = Supernet(space).train()
    x = torch.randn(6, 3, 16, 16)
    w = widths_tensor(space, _idx(space, 12, 4)).reshape(2, 6, space.n_layers)
    placed = place_widths(w, "cpu")
    assert all(isinstance(p, DeviceWidths) for p in placed)
    assert list(placed[0].widest) == w[0].amax(0).tolist() and list(placed[1].lowest) == w[1].amin(0).tolist()
    for r in range(2):
        assert torch.equal(m(x, placed[r]), m(x, w[r]))
    bad = DeviceWidths(w[0], tuple([0] * space.n_layers), placed[0].widest)
    with pytest.raises(ValueError, match="layer 0"):
        m(x, bad)


@cuda
def test_a_cuda_step_reads_nothing_back():
    """On CUDA the deferred step and its record start no synchronising operation (torch's sync debug mode raises on
    one): widths placed once, losses and the non-finite flag on the device, the record copied without waiting."""
    space = mobilenet_v1_space("small", resolution=16, in_channels=3, num_classes=5, width_mult=0.25, n_choices=4)
    torch.manual_seed(0)
    m = Supernet(space).cuda()
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    (x, y, w), (x2, y2, w2) = _batches(space, 2)
    sandwich_step(m, x.cuda(), y.cuda(), w, opt, 2)  # warm-up: lazy initialisation may synchronise
    x2, y2 = x2.cuda(), y2.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        rec = sandwich_step(m, x2, y2, w2, opt, 2, step=1).record()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert rec.check() and rec.diffs.shape == (2, 8)


@cuda
def test_a_cuda_nonfinite_step_is_undone_on_the_device():
    """The CUDA path: a NaN batch leaves the weights as they were and raises when its record is read."""
    space = mobilenet_v1_space("small", resolution=16, in_channels=3, num_classes=5, width_mult=0.25, n_choices=4)
    torch.manual_seed(0)
    m = Supernet(space).cuda()
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    (x, y, w), (x2, y2, w2) = _batches(space, 2)
    sandwich_step(m, x.cuda(), y.cuda(), w, opt, 2)
    before = copy.deepcopy(m.state_dict())
    x2[1] = float("nan")
    rec = sandwich_step(m, x2.cuda(), y2.cuda(), w2, opt, 2, step=1).record()
    params = dict(m.named_parameters())
    assert all(torch.equal(before[k], params[k].detach()) for k in params)
    with pytest.raises(NonFiniteLoss, match="at step 1"):
        rec.check()
