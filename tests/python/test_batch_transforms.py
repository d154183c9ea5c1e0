"""stoker.MixUp / CutMix / RandomChoice: torchvision 0.14's reference recipes'
RandomMixup / RandomCutmix (references/classification/transforms.py).

Directly on the batch transform objects (no daemon): lambda is Beta(alpha,
alpha) (a KS test over many (seed, epoch, batch) keys), CutMix's box has the
area its corrected lambda says, soft labels sum to 1, p is the rate of mixed
batches, image i is mixed with image i - 1, a (seed, epoch, batch) key gives
the same mix in any process, uint8 is refused, and the results equal the
reference's arithmetic (written here from its description, run on torch's
global generator seeded as ours) bit for bit, on the CPU and on CUDA.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
stats = pytest.importorskip("scipy.stats")


@pytest.fixture(scope="module")
def sb(stoker):
    import stoker.batch as sb  # noqa: PLC0415

    return sb


def images_and_labels(n=6, c=3, h=12, w=16, classes=5, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g).to(dtype)
    y = torch.randint(classes, (n,), generator=g)
    return x, y


def keyed_draws(sb, t, n, h=32, w=48):
    """n draws of `t`, each from the generator of its own (seed, epoch, batch) key."""
    return [t.draw(sb.batch_generator(seed, epoch, batch), h, w)
            for seed in (0, 7) for epoch in range(n // 100) for batch in range(50)]


# ---------------------------------------------------------------------------
# The reference's arithmetic (torchvision 0.14 references/classification/
# transforms.py), from its description: one-hot targets in the batch's dtype;
# torch.rand(1) >= p leaves the batch; batch and targets rolled by 1 along
# dim 0; lambda = Dirichlet([alpha, alpha])[0]; mixup: rolled *= 1 - lambda,
# batch = batch * lambda + rolled; cutmix: r_x = randint(W), r_y = randint(H),
# r = 0.5 sqrt(1 - lambda), half sides int(r W), int(r H), the box clamped to
# the image takes the rolled pixels, lambda = 1 - area / (W H); targets mixed
# as mixup's. All draws from torch's global generator.


def reference_mixup(batch, target, num_classes, p, alpha):
    batch = batch.clone()
    target = torch.nn.functional.one_hot(target, num_classes=num_classes).to(dtype=batch.dtype)
    if torch.rand(1).item() >= p:
        return batch, target
    batch_rolled = batch.roll(1, 0)
    target_rolled = target.roll(1, 0)
    lam = float(torch._sample_dirichlet(torch.tensor([alpha, alpha]))[0])
    batch_rolled.mul_(1.0 - lam)
    batch.mul_(lam).add_(batch_rolled)
    target_rolled.mul_(1.0 - lam)
    target.mul_(lam).add_(target_rolled)
    return batch, target


def reference_cutmix(batch, target, num_classes, p, alpha):
    batch = batch.clone()
    target = torch.nn.functional.one_hot(target, num_classes=num_classes).to(dtype=batch.dtype)
    if torch.rand(1).item() >= p:
        return batch, target
    batch_rolled = batch.roll(1, 0)
    target_rolled = target.roll(1, 0)
    lam = float(torch._sample_dirichlet(torch.tensor([alpha, alpha]))[0])
    H, W = batch.shape[-2:]
    r_x = torch.randint(W, (1,))
    r_y = torch.randint(H, (1,))
    r = 0.5 * math.sqrt(1.0 - lam)
    r_w_half, r_h_half = int(r * W), int(r * H)
    x1 = int(torch.clamp(r_x - r_w_half, min=0))
    y1 = int(torch.clamp(r_y - r_h_half, min=0))
    x2 = int(torch.clamp(r_x + r_w_half, max=W))
    y2 = int(torch.clamp(r_y + r_h_half, max=H))
    batch[:, :, y1:y2, x1:x2] = batch_rolled[:, :, y1:y2, x1:x2]
    lam = float(1.0 - (x2 - x1) * (y2 - y1) / (W * H))
    target_rolled.mul_(1.0 - lam)
    target.mul_(lam).add_(target_rolled)
    return batch, target


REFERENCES = {"MixUp": reference_mixup, "CutMix": reference_cutmix}


# ---------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.2, 1.0])
def test_lambda_is_beta_alpha_alpha(sb, alpha):
    lams = np.array([m.lam for m in keyed_draws(sb, sb.MixUp(alpha=alpha, num_classes=3), 2000)])
    assert len(lams) == 2000 and len(set(lams.tolist())) > 1900  # distinct keys, distinct draws
    assert stats.kstest(lams, stats.beta(alpha, alpha).cdf).pvalue > 1e-3
    # The test can tell: the other alpha's Beta is rejected.
    other = 1.0 if alpha == 0.2 else 0.2
    assert stats.kstest(lams, stats.beta(other, other).cdf).pvalue < 1e-6


def test_cutmix_box_area_is_the_corrected_lambda(sb):
    h, w = 24, 40
    draws = keyed_draws(sb, sb.CutMix(alpha=1.0, num_classes=3), 600, h, w)
    assert all(d.applied for d in draws)
    boxes = set()
    for d in draws:
        y1, y2, x1, x2 = d.box
        assert 0 <= y1 <= y2 <= h and 0 <= x1 <= x2 <= w
        assert d.lam == pytest.approx(1.0 - (y2 - y1) * (x2 - x1) / (h * w), abs=1e-12)
        boxes.add(d.box)
    assert len(boxes) > 300
    # Applied: exactly the box's pixels come from the rolled batch, and the
    # labels carry lambda and 1 - lambda.
    t = sb.CutMix(alpha=1.0, num_classes=4)
    x = torch.arange(3, dtype=torch.float32).view(3, 1, 1, 1).expand(3, 3, h, w).clone()
    y = torch.tensor([0, 1, 3])
    for key in range(20):
        g = sb.batch_generator(5, 0, key)
        mix = t.draw(sb.batch_generator(5, 0, key), h, w)
        out, soft = t(x, y, generator=g)
        y1, y2, x1, x2 = mix.box
        for i in range(3):
            rolled = (i - 1) % 3
            from_rolled = (out[i] == rolled).all(0)
            assert int(from_rolled.sum()) == (y2 - y1) * (x2 - x1) or i == rolled
            assert bool(from_rolled[y1:y2, x1:x2].all())
            assert soft[i, y[i]] == pytest.approx(mix.lam, abs=1e-6)
            assert soft[i, y[rolled]] == pytest.approx(1 - mix.lam, abs=1e-6)


@pytest.mark.parametrize("name", ["MixUp", "CutMix"])
def test_soft_labels_sum_to_one_and_roll_by_one(sb, name):
    t = getattr(sb, name)(alpha=0.7, num_classes=5)
    x, y = images_and_labels()
    g = sb.batch_generator(1, 2, 3)
    mix = t.draw(sb.batch_generator(1, 2, 3), x.shape[2], x.shape[3])
    out, soft = t(x, y, generator=g)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert soft.shape == (6, 5) and soft.dtype == torch.float32
    torch.testing.assert_close(soft.sum(1), torch.ones(6))
    assert 0 < mix.lam < 1
    for i in range(6):
        want = torch.zeros(5)
        want[y[i]] += mix.lam
        want[y[i - 1]] += 1 - mix.lam  # i - 1: image 0 with the last
        torch.testing.assert_close(soft[i], want)
        if name == "MixUp":
            torch.testing.assert_close(out[i], mix.lam * x[i] + (1 - mix.lam) * x[i - 1])


def test_p_is_the_rate_of_mixed_batches(sb):
    for name in ("MixUp", "CutMix"):
        t = getattr(sb, name)(alpha=1.0, num_classes=3, p=0.3)
        applied = [d.applied for d in keyed_draws(sb, t, 2000)]
        rate = sum(applied) / len(applied)
        assert abs(rate - 0.3) < 4 * math.sqrt(0.3 * 0.7 / len(applied)), (name, rate)
    # Unmixed: the images as they are, one-hot labels.
    t = sb.MixUp(alpha=1.0, num_classes=5, p=0.0)
    x, y = images_and_labels()
    out, soft = t(x, y, generator=sb.batch_generator(0, 0, 0))
    assert torch.equal(out, x)
    assert torch.equal(soft, torch.nn.functional.one_hot(y, 5).float())


def test_random_choice_picks_by_p_from_the_batch_generator(sb):
    mixup, cutmix = sb.MixUp(alpha=0.2, num_classes=3), sb.CutMix(alpha=1.0, num_classes=3)
    t = sb.RandomChoice([mixup, cutmix], p=[1, 3])
    draws = keyed_draws(sb, t, 2000)
    rate = sum(d.transform is cutmix for d in draws) / len(draws)
    assert abs(rate - 0.75) < 4 * math.sqrt(0.75 * 0.25 / len(draws))
    # The choice is the generator's first draw; the chosen one's draws follow.
    g = torch.Generator().manual_seed(11)
    u = torch.rand(1, generator=g).item()
    want = (cutmix if u >= 0.25 else mixup).draw(g, 32, 48)
    got = t.draw(torch.Generator().manual_seed(11), 32, 48)
    assert (got.transform, got.lam, got.box) == (want.transform, want.lam, want.box)
    with pytest.raises(ValueError, match="num_classes"):
        sb.RandomChoice([mixup, sb.CutMix(num_classes=4)])
    for bad in ([float("inf"), 1], [float("nan"), 1], [-1, 2], [0, 0], [1]):
        with pytest.raises(ValueError, match="finite weights"):
            sb.RandomChoice([mixup, cutmix], p=bad)


def splitmix64(x):
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def test_the_mix_is_a_function_of_seed_epoch_batch(sb, build_dir):
    # The documented seed: splitmix64 folds of (seed ^ tag), epoch, batch, rank.
    for key in [(0, 0, 0, 0), (3, 1, 7, 0), (2**40, 5, 123, 2)]:
        h = splitmix64(key[0] ^ 0x62617463686D6978)
        for v in key[1:]:
            h = splitmix64(h ^ v)
        assert sb.batch_seed(*key) == h
    t = sb.RandomChoice([sb.MixUp(alpha=0.2, num_classes=5), sb.CutMix(num_classes=5)])
    x, y = images_and_labels()
    a = t(x, y, generator=sb.batch_generator(4, 2, 9))
    b = t(x, y, generator=sb.batch_generator(4, 2, 9))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    lams = {t.draw(sb.batch_generator(*k), 12, 16).lam
            for k in [(4, 2, 9), (5, 2, 9), (4, 3, 9), (4, 2, 10), (4, 2, 9, 1)]}
    assert len(lams) == 5
    # Another process, the same key: the same draws.
    code = ("import stoker.batch as sb; m = sb.CutMix(num_classes=3).draw("
            "sb.batch_generator(4, 2, 9), 12, 16); print(m.lam, m.box)")
    env = dict(os.environ, PYTHONPATH=os.path.join(build_dir, "python"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True).stdout.strip()
    m = sb.CutMix(num_classes=3).draw(sb.batch_generator(4, 2, 9), 12, 16)
    assert out == f"{m.lam} {m.box}"


@pytest.mark.parametrize("name", ["MixUp", "CutMix"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_the_reference_arithmetic(sb, name, dtype):
    ref = REFERENCES[name]
    for k, (alpha, p) in enumerate([(0.2, 1.0), (1.0, 1.0), (1.0, 0.5), (3.0, 0.8)] * 3):
        x, y = images_and_labels(n=5, h=10 + k, w=20 - k, seed=k, dtype=dtype)
        t = getattr(sb, name)(alpha=alpha, num_classes=5, p=p)
        torch.manual_seed(100 + k)
        want = ref(x, y, 5, p, alpha)
        got = t(x, y, generator=torch.Generator().manual_seed(100 + k))
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (alpha, p, k)
        # NHWC: the same mix over the other dimension order.
        nhwc = t(x.permute(0, 2, 3, 1).contiguous(), y,
                 generator=torch.Generator().manual_seed(100 + k), layout="nhwc")
        assert torch.equal(nhwc[0].permute(0, 3, 1, 2), want[0])
        assert torch.equal(nhwc[1], want[1])


def test_refuses_uint8_and_bad_batches(sb):
    t = sb.MixUp(num_classes=5)
    x, y = images_and_labels()
    with pytest.raises(ValueError, match="floating point.*uint8.*float dtype"):
        t((x * 40).clamp(0, 255).to(torch.uint8), y)
    with pytest.raises(ValueError, match="int64 class indices"):
        t(x, y.float())
    with pytest.raises(ValueError, match="4-d"):
        t(x[0], y)
    with pytest.raises(ValueError, match="labels must be in"):
        t(x, y + 5)
    with pytest.raises(ValueError, match="alpha"):
        sb.CutMix(alpha=0.0, num_classes=3)
    with pytest.raises(ValueError, match="num_classes"):
        sb.MixUp(num_classes=0)
    with pytest.raises(ValueError, match="layout"):
        t(x, y, layout="chw")


def test_loader_refuses_a_batch_transform_on_uint8(stoker):
    with pytest.raises(stoker.InvalidRequestError, match="needs floating-point images.*uint8"):
        stoker.Loader("/nonexistent", batch_size=4, pipeline="train", size=32, dtype="uint8",
                      batch_transform=stoker.MixUp(num_classes=3))
    with pytest.raises(stoker.InvalidRequestError, match="not callable"):
        stoker.Loader("/nonexistent", batch_size=4, pipeline="train", size=32,
                      dtype="float32", batch_transform=3)
    ld = stoker.Loader("/nonexistent", batch_size=4, pipeline="train", size=32)  # uint8
    with pytest.raises(stoker.InvalidRequestError, match="needs floating-point images"):
        ld.batch_transform = stoker.CutMix(num_classes=3)
    assert ld.batch_transform is None
    with pytest.raises(stoker.InvalidRequestError, match="images of one size"):
        stoker.Loader("/nonexistent", batch_size=1, pipeline="decode", dtype="float32",
                      batch_transform=stoker.MixUp(num_classes=3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name", ["MixUp", "CutMix"])
def test_cuda_gives_the_cpu_result(sb, name):
    t = sb.RandomChoice([getattr(sb, name)(alpha=0.5, num_classes=7, p=0.9)])
    for k in range(8):
        x, y = images_and_labels(n=8, h=64, w=48, classes=7, seed=k)
        cpu = t(x, y, generator=sb.batch_generator(1, 0, k))
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            gpu = t(x.cuda(), y.cuda(), generator=sb.batch_generator(1, 0, k))
        stream.synchronize()
        assert gpu[0].is_cuda and gpu[1].is_cuda
        assert torch.equal(gpu[0].cpu(), cpu[0]) and torch.equal(gpu[1].cpu(), cpu[1])


def test_pad_to_largest_is_the_references_batching(sb):
    """pad_to_largest: each image at the top left of a fill canvas of the
    largest sides rounded up to the multiple (GeneralizedRCNNTransform's
    batch_images; the segmentation reference's cat_list with fill 255)."""
    g = torch.Generator().manual_seed(1)
    imgs = [torch.randint(1, 255, (3, h, w), generator=g, dtype=torch.uint8)
            for h, w in ((5, 7), (9, 4), (0, 0), (8, 8))]  # (0, 0): a failed any-size sample
    out, sizes = sb.pad_to_largest(imgs, 4)
    assert tuple(out.shape) == (4, 3, 12, 8) and sizes == [(5, 7), (9, 4), (0, 0), (8, 8)]
    for t, (h, w), o in zip(imgs, sizes, out):
        # The reference: a zero canvas, the image copied into its top left.
        ref = torch.zeros(3, 12, 8, dtype=torch.uint8)
        ref[:, :h, :w].copy_(t)
        assert torch.equal(o, ref)
    # Channels last: [h, w, 3]; masks: [h, w] over 255, multiple 1 (cat_list).
    out, _ = sb.pad_to_largest([t.permute(1, 2, 0) for t in imgs], 4, channels_last=True)
    assert torch.equal(out.permute(0, 3, 1, 2), sb.pad_to_largest(imgs, 4)[0])
    masks = [t[0] for t in imgs]
    out, _ = sb.pad_to_largest(masks, 1, fill=255)
    assert tuple(out.shape) == (4, 9, 8)
    assert torch.equal(out[1, :, 4:], torch.full((9, 4), 255, dtype=torch.uint8))
    assert torch.equal(out[0, :5, :7], masks[0]) and bool((out[0, 5:] == 255).all())
    for bad in (0, True, -3):
        with pytest.raises(Exception, match="pad_to_multiple must be an int"):
            sb.pad_to_largest(imgs, bad)


def test_host_buffers_are_reused_only_once_freed(stoker):
    """_native.host_buffer: a freed buffer serves the next request it fits
    (within 2x); one still referenced (by a view too) is never handed out."""
    native = stoker._native
    a = native.host_buffer(1 << 20)
    ptr = a.ctypes.data
    view = torch.from_numpy(a)[16:]
    del a
    b = native.host_buffer(1 << 20)
    assert b.ctypes.data != ptr  # the view still holds the first
    del view
    c = native.host_buffer(900 << 10)
    assert c.ctypes.data == ptr and c.nbytes == 900 << 10  # reused, its pages faulted in
    d = native.host_buffer(100 << 10)  # far smaller than any freed one: a new buffer
    assert d.ctypes.data not in (ptr, b.ctypes.data)
    assert native.host_buffer(0).nbytes == 0
