"""Transforms of whole batches: MixUp, CutMix and RandomChoice of them; and
`pad_to_largest`, how ``Loader(pad_to_multiple=...)`` batches images of
their own sizes.

    import stoker
    mix = stoker.RandomChoice([stoker.MixUp(alpha=0.2, num_classes=1000),
                               stoker.CutMix(alpha=1.0, num_classes=1000)])
    loader = stoker.Loader("imagenet/train", batch_size=128, transform=..., batch_transform=mix)
    for images, soft_labels in loader:  # soft_labels: [n, 1000], each row sums to 1
        loss = torch.sum(-soft_labels * F.log_softmax(model(images), 1), 1).mean()

The semantics are those of torchvision 0.14's classification reference
(references/classification/transforms.py, RandomMixup and RandomCutmix, as
its train.py applies them to each collated batch), with torchvision v2's
names:

* the labels (int64 class indices, [n]) become one-hot rows of
  ``num_classes``, in the images' dtype;
* with probability ``1 - p`` the batch is left as it is (one-hot labels);
* else the batch is mixed with itself rolled by one along the batch: image
  (and label) ``i`` with ``i - 1``, image 0 with the last;
* lambda is drawn from Dirichlet([alpha, alpha])[0], i.e. Beta(alpha, alpha);
* MixUp: ``images = lambda * images + (1 - lambda) * rolled``;
* CutMix: a box centred at ``(r_x, r_y)``, drawn uniformly among the pixel
  positions, of half sides ``int(r * W)`` and ``int(r * H)`` with
  ``r = 0.5 * sqrt(1 - lambda)``, clamped to the image, takes the rolled
  batch's pixels; lambda becomes ``1 - box area / (W * H)``;
* labels = ``lambda * labels + (1 - lambda) * rolled labels``.

Randomness: every parameter (whether to apply, which transform of a
RandomChoice, lambda, the box) is drawn, in the reference's order, from a
CPU ``torch.Generator`` only. `stoker.Loader` seeds one per batch with
`batch_seed` of (seed, epoch, batch index in the epoch, rank), so a resumed
run mixes its batches exactly as the uninterrupted run did, and a CUDA batch
is mixed exactly as the same batch on the CPU (the parameters are drawn on
the CPU, then applied on the batch's device, on its current stream). Called
directly, ``t(images, labels)`` draws from torch's default CPU generator, as
the reference does; pass ``generator=`` to choose.

Images must be floating point (a float dtype, e.g. after Normalize): mixing
uint8 pixels would truncate them, so uint8 is refused.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from . import _native

if TYPE_CHECKING:
    import torch

_MASK64 = (1 << 64) - 1
# Keeps the batch transforms' seeds apart from other uses of the same seed.
_BATCH_TAG = 0x62617463686D6978  # "batchmix"


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def batch_seed(seed: int, epoch: int, batch: int, rank: int = 0) -> int:
    """The seed of the generator that draws a batch's mixing parameters.

    Each of (seed, epoch, batch, rank), taken modulo 2**64, is folded in
    turn by splitmix64: ``h = splitmix64(seed ^ TAG)``, then ``h =
    splitmix64(h ^ v)`` for v = epoch, batch, rank (TAG =
    0x62617463686D6978). Distinct keys give unrelated seeds; the same key,
    the same seed, in any process.
    """
    h = _splitmix64((int(seed) & _MASK64) ^ _BATCH_TAG)
    for v in (epoch, batch, rank):
        h = _splitmix64(h ^ (int(v) & _MASK64))
    return h


def batch_generator(seed: int, epoch: int, batch: int, rank: int = 0) -> "torch.Generator":
    """A CPU torch.Generator seeded with `batch_seed` (seed, epoch, batch, rank)."""
    import torch  # noqa: PLC0415

    g = torch.Generator(device="cpu")
    g.manual_seed(batch_seed(seed, epoch, batch, rank))
    return g


def _layout(layout: str) -> str:
    name = str(layout).lower()
    if name == "channels_last":  # an [n, 3, H, W] tensor
        name = "nchw"
    if name not in ("nchw", "nhwc"):
        raise _native.InvalidRequestError(
            f"layout must be 'nchw' (also for channels_last tensors) or 'nhwc', got {layout!r}")
    return name


class Mix:
    """What one batch transform drew for one batch.

    Attributes:
        transform: the MixUp or CutMix object that drew them (for a
            RandomChoice: the one chosen).
        applied: False when the draw against `p` left the batch unmixed.
        lam: the weight of the batch itself (of its rolled copy: 1 - lam),
            CutMix's corrected for the box; 1.0 when not applied.
        box: CutMix's (y1, y2, x1, x2), rows y1:y2 and columns x1:x2; None
            otherwise.
    """

    __slots__ = ("transform", "applied", "lam", "box")

    def __init__(self, transform: "BatchTransform", applied: bool, lam: float = 1.0,
                 box: Optional[Tuple[int, int, int, int]] = None) -> None:
        self.transform = transform
        self.applied = applied
        self.lam = lam
        self.box = box

    def __repr__(self) -> str:
        return (f"Mix({type(self.transform).__name__}, applied={self.applied}, lam={self.lam}"
                + (f", box={self.box}" if self.box is not None else "") + ")")


class BatchTransform:
    """A transform of a whole batch: (images, labels) -> (images, soft labels).

    `stoker.Loader(batch_transform=...)` calls it with the generator of each
    batch (see `batch_generator`) and the batch's layout.
    """

    num_classes: int

    def draw(self, generator: Optional["torch.Generator"], height: int, width: int) -> Mix:
        """Draws this batch's parameters from `generator` (CPU; None: torch's
        default generator), for images of `height` x `width`."""
        raise NotImplementedError

    def apply(self, images: "torch.Tensor", labels: "torch.Tensor", mix: Mix,
              layout: str = "nchw") -> Tuple["torch.Tensor", "torch.Tensor"]:
        """Applies drawn parameters to a batch, on the batch's device."""
        return mix.transform._mix(images, labels, mix, _layout(layout))

    def __call__(self, images: "torch.Tensor", labels: "torch.Tensor", *,
                 generator: Optional["torch.Generator"] = None,
                 layout: str = "nchw") -> Tuple["torch.Tensor", "torch.Tensor"]:
        """Mixes one batch.

        Args:
            images: floating-point [n, C, H, W] ('nchw', also a channels_last
                tensor) or [n, H, W, C] ('nhwc'), on any device.
            labels: int64 class indices [n], on the images' device.
            generator: a CPU torch.Generator for the draws (None: torch's
                default one).
            layout: the images' dimension order.

        Returns:
            (images, labels): the mixed images (a new tensor; the input
            itself when the draw against p left the batch unmixed) and the
            soft labels [n, num_classes] in the images' dtype.

        Raises:
            InvalidRequestError: not a 4-d floating-point batch, labels not
                int64 [n] of the same n.
        """
        layout = _layout(layout)
        h, w = _check_batch(self, images, labels, layout)
        return self.apply(images, labels, self.draw(generator, h, w), layout)

    def _mix(self, images: Any, labels: Any, mix: Mix, layout: str) -> Tuple[Any, Any]:
        raise NotImplementedError


def _check_batch(t: BatchTransform, images: Any, labels: Any, layout: str) -> Tuple[int, int]:
    name = type(t).__name__
    if not hasattr(images, "is_floating_point") or images.ndim != 4:
        raise _native.InvalidRequestError(
            f"{name}: images must be a 4-d torch tensor (a batch), got "
            f"{getattr(images, 'shape', type(images).__name__)}")
    if not images.is_floating_point():
        raise _native.InvalidRequestError(
            f"{name}: images must be floating point, got {images.dtype}: mixing uint8 pixels "
            "would truncate them. Serve a float dtype (dtype='float32', or end the transform "
            "with ToTensor() or ConvertImageDtype(torch.float) and Normalize)")
    if labels.ndim != 1 or str(labels.dtype) != "torch.int64" or len(labels) != len(images):
        raise _native.InvalidRequestError(
            f"{name}: labels must be int64 class indices [n] of the batch's n={len(images)}, "
            f"got {labels.dtype} {tuple(labels.shape)}")
    return (images.shape[2], images.shape[3]) if layout == "nchw" else (images.shape[1],
                                                                         images.shape[2])


def _check_alpha_classes(name: str, alpha: float, num_classes: int, p: float) -> None:
    if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 1:
        raise _native.InvalidRequestError(
            f"{name}: num_classes must be a positive int, got {num_classes!r}")
    if not alpha > 0 or not math.isfinite(alpha):
        raise _native.InvalidRequestError(f"{name}: alpha must be > 0, got {alpha!r}")
    if not 0.0 <= p <= 1.0:
        raise _native.InvalidRequestError(f"{name}: p must be in [0, 1], got {p!r}")


def _draw_applied_and_lambda(t: Any, generator: Any) -> Tuple[bool, float]:
    """The reference's first draws: the p test, then lambda."""
    import torch  # noqa: PLC0415

    if torch.rand(1, generator=generator).item() >= t.p:
        return False, 1.0
    lam = torch._sample_dirichlet(torch.tensor([t.alpha, t.alpha]), generator=generator)[0]
    return True, float(lam)


def _one_hot(labels: Any, num_classes: int, dtype: Any) -> Any:
    import torch  # noqa: PLC0415

    # (On a GPU, one_hot checks them itself; reading them here would wait.)
    if (labels.device.type == "cpu" and labels.numel()
            and (int(labels.min()) < 0 or int(labels.max()) >= num_classes)):
        raise _native.InvalidRequestError(
            f"labels must be in [0, num_classes={num_classes}), got labels from "
            f"{int(labels.min())} to {int(labels.max())}")
    return torch.nn.functional.one_hot(labels, num_classes=num_classes).to(dtype=dtype)


def _mix_labels(labels: Any, lam: float) -> Any:
    # The reference's arithmetic, operation for operation (same rounding).
    rolled = labels.roll(1, 0)
    rolled.mul_(1.0 - lam)
    return labels.mul_(lam).add_(rolled)


class _PairMix(BatchTransform):
    """What MixUp and CutMix share: the batch mixed with itself rolled by one,
    with probability p, lambda ~ Beta(alpha, alpha)."""

    def __init__(self, *, alpha: float = 1.0, num_classes: int, p: float = 1.0) -> None:
        _check_alpha_classes(type(self).__name__, float(alpha), num_classes, float(p))
        self.alpha = float(alpha)
        self.num_classes = int(num_classes)
        self.p = float(p)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(alpha={self.alpha}, num_classes={self.num_classes}, "
                f"p={self.p})")


class MixUp(_PairMix):
    """MixUp ("mixup: Beyond Empirical Risk Minimization"): each image and
    label is blended with the previous one of the batch, weights lambda and
    1 - lambda, lambda ~ Beta(alpha, alpha). torchvision reference's
    RandomMixup (see the module's description).

    Args:
        alpha: Beta's (Dirichlet's) concentration, > 0.
        num_classes: the labels' classes (the soft labels' width).
        p: the probability that a batch is mixed.
    """

    def draw(self, generator: Optional["torch.Generator"], height: int, width: int) -> Mix:
        applied, lam = _draw_applied_and_lambda(self, generator)
        return Mix(self, applied, lam)

    def _mix(self, images: Any, labels: Any, mix: Mix, layout: str) -> Tuple[Any, Any]:
        target = _one_hot(labels, self.num_classes, images.dtype)
        if not mix.applied:
            return images, target
        rolled = images.roll(1, 0)
        rolled.mul_(1.0 - mix.lam)
        out = images.mul(mix.lam).add_(rolled)
        return out, _mix_labels(target, mix.lam)


class CutMix(_PairMix):
    """CutMix ("CutMix: Regularization Strategy to Train Strong Classifiers
    with Localizable Features"): a box of each image is replaced by the
    previous image's, labels weighted by the areas. torchvision reference's
    RandomCutmix (see the module's description).

    Args:
        alpha: Beta's (Dirichlet's) concentration, > 0.
        num_classes: the labels' classes (the soft labels' width).
        p: the probability that a batch is mixed.
    """

    def draw(self, generator: Optional["torch.Generator"], height: int, width: int) -> Mix:
        import torch  # noqa: PLC0415

        applied, lam = _draw_applied_and_lambda(self, generator)
        if not applied:
            return Mix(self, False)
        r_x = int(torch.randint(width, (1,), generator=generator))
        r_y = int(torch.randint(height, (1,), generator=generator))
        r = 0.5 * math.sqrt(1.0 - lam)
        half_w, half_h = int(r * width), int(r * height)
        x1, y1 = max(r_x - half_w, 0), max(r_y - half_h, 0)
        x2, y2 = min(r_x + half_w, width), min(r_y + half_h, height)
        lam = float(1.0 - (x2 - x1) * (y2 - y1) / (width * height))
        return Mix(self, True, lam, (y1, y2, x1, x2))

    def _mix(self, images: Any, labels: Any, mix: Mix, layout: str) -> Tuple[Any, Any]:
        target = _one_hot(labels, self.num_classes, images.dtype)
        if not mix.applied:
            return images, target
        assert mix.box is not None
        y1, y2, x1, x2 = mix.box
        out = images.clone()
        rolled = images.roll(1, 0)
        if layout == "nchw":
            out[:, :, y1:y2, x1:x2] = rolled[:, :, y1:y2, x1:x2]
        else:
            out[:, y1:y2, x1:x2, :] = rolled[:, y1:y2, x1:x2, :]
        return out, _mix_labels(target, mix.lam)



class RandomChoice(BatchTransform):
    """Applies one of `transforms` to each batch, chosen with probabilities
    `p` (None: equal), drawn from the batch's generator before the chosen
    transform's own draws (torchvision's RandomChoice draws it from Python's
    random module).

    Args:
        transforms: MixUp / CutMix objects (of one num_classes).
        p: one weight per transform (normalized to sum 1), or None.
    """

    def __init__(self, transforms: Sequence[BatchTransform],
                 p: Optional[Sequence[float]] = None) -> None:
        self.transforms: List[BatchTransform] = list(transforms)
        if not self.transforms or not all(isinstance(t, BatchTransform)
                                          for t in self.transforms):
            raise _native.InvalidRequestError(
                f"RandomChoice: transforms must be a non-empty list of stoker batch transforms "
                f"(MixUp, CutMix, RandomChoice), got {transforms!r}")
        classes = {t.num_classes for t in self.transforms}
        if len(classes) != 1:
            raise _native.InvalidRequestError(
                f"RandomChoice: its transforms have different num_classes {sorted(classes)}")
        self.num_classes = classes.pop()
        if p is not None:
            weights = [float(x) for x in p]
            if (len(weights) != len(self.transforms) or any(not (x >= 0 and math.isfinite(x)) for x in weights)
                    or sum(weights) <= 0):
                raise _native.InvalidRequestError(
                    f"RandomChoice: p must be {len(self.transforms)} finite weights >= 0 with "
                    f"a positive sum, got {p!r}")
        else:
            weights = [1.0] * len(self.transforms)
        total = sum(weights)
        self.p = [x / total for x in weights]

    def draw(self, generator: Optional["torch.Generator"], height: int, width: int) -> Mix:
        import torch  # noqa: PLC0415

        u = torch.rand(1, generator=generator).item()
        # u < 1 always; the last transform of positive weight takes what
        # rounding leaves.
        chosen = [t for t, w in zip(self.transforms, self.p) if w > 0][-1]
        acc = 0.0
        for t, w in zip(self.transforms, self.p):
            acc += w
            if u < acc:
                chosen = t
                break
        return chosen.draw(generator, height, width)

    def __repr__(self) -> str:
        return f"RandomChoice({self.transforms!r}, p={self.p})"


def pad_to_largest(images: Sequence["torch.Tensor"], multiple: int = 1, *,
                   channels_last: bool = False,
                   fill: float = 0) -> Tuple["torch.Tensor", List[Tuple[int, int]]]:
    """Images of different sizes as one tensor, as detection and segmentation
    trainers batch them: each image at the top left of a ``fill`` canvas of
    the largest height and width of the list, each rounded up to a multiple
    of ``multiple`` (torchvision's GeneralizedRCNNTransform.batch_images with
    its size_divisible; with multiple 1 and fill 255 for masks, the
    segmentation reference's collate_fn).

    Args:
        images: tensors of one dtype and device, [C, h, w] (or [h, w, C]
            with ``channels_last``, or [h, w] label maps).
        multiple: the padded sides' divisor, >= 1.
        channels_last: the tensors are [h, w, C].
        fill: the value of the padding.

    Returns:
        ([n, C, H, W] (or [n, H, W, C], [n, H, W]), the images' own (h, w)).
    """
    if isinstance(multiple, bool) or int(multiple) < 1:
        raise _native.InvalidRequestError(f"pad_to_multiple must be an int >= 1, got {multiple!r}")
    if len(images) == 0:
        raise _native.InvalidRequestError("pad_to_largest: no images")
    hd, wd = (-3, -2) if channels_last and images[0].dim() == 3 else (-2, -1)
    sizes = [(int(t.shape[hd]), int(t.shape[wd])) for t in images]
    m = int(multiple)
    shape = list(images[0].shape)
    shape[hd] = -(-max(h for h, _ in sizes) // m) * m
    shape[wd] = -(-max(w for _, w in sizes) // m) * m
    # Each byte written once: the image, then the margins below and beside it
    # (a fill of the whole canvas first would write the batch twice). On the
    # CPU into a reused buffer (_native.host_buffer: no page faults).
    shape = [len(images)] + shape
    first = images[0]
    if first.device.type == "cpu":
        import torch  # noqa: PLC0415  (imported by the caller already)
        raw = _native.host_buffer(math.prod(shape) * first.element_size())
        out = torch.from_numpy(raw).view(first.dtype).view(shape)
    else:
        out = first.new_empty(shape)
    for i, (t, (h, w)) in enumerate(zip(images, sizes)):
        o = out[i]
        if hd == -3:  # [h, w, C]: the same slices on channels-first views
            o, t = o.movedim(-1, 0), t.movedim(-1, 0)
        o[..., :h, :w].copy_(t)
        o[..., h:, :].fill_(fill)
        o[..., :h, w:].fill_(fill)
    return out, sizes
