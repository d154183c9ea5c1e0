"""MONAI's dictionary transforms, as stoker serves them.

A MONAI training script switches by changing its import::

    from stoker.volume import (Compose, LoadImaged, EnsureChannelFirstd, Orientationd,
                               Spacingd, ScaleIntensityRanged, CropForegroundd,
                               RandCropByPosNegLabeld)

    train = Compose([LoadImaged(keys=["image", "label"]), EnsureChannelFirstd(keys=["image", "label"]),
                     Orientationd(keys=["image", "label"], axcodes="RAS"),
                     Spacingd(keys=["image", "label"], pixdim=(1.5, 1.5, 2.0), mode=("bilinear", "nearest")),
                     ScaleIntensityRanged(keys=["image"], a_min=-57, a_max=164, b_min=0.0, b_max=1.0, clip=True),
                     CropForegroundd(keys=["image", "label"], source_key="image"),
                     RandCropByPosNegLabeld(keys=["image", "label"], label_key="label",
                                            spatial_size=(96, 96, 96), pos=1, neg=1, num_samples=4)])
    loader = stoker.Loader("Task09_Spleen/dataset.json", transform=train, batch_size=2)
    for batch in loader:            # {"image": [8, 1, 96, 96, 96], "label": [8, 1, 96, 96, 96]}
        ...

These classes only name the transforms and their parameters (as MONAI
does, keys included) and check what stoker would do differently; the daemon
(pipeline/volume_pipeline.h) fills the defaults and checks the values. The
deterministic transforms run once per volume and are kept in the daemon's
volume cache (stokerd --prepared-cache); the patch op and the random ones run
per patch, drawn from (seed, epoch, volume): the same batches whatever the
number of workers, not MONAI's random stream.

What differs from MONAI, and why: Spacingd resamples the image trilinearly
and the label by nearest neighbour (its ``mode`` must say so); a sample's
image and label keys are the two a dataset entry has (a dataset.json's
"image" and "label"); a volume's channels are ``Compose(channels=...)``'s
(default 1, checked per volume); LoadImaged, EnsureChannelFirstd,
EnsureTyped and ToTensord are what stoker always does and take no options
that change it.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _native

__all__ = [
    "Compose", "LoadImaged", "EnsureChannelFirstd", "EnsureTyped", "ToTensord", "Orientationd",
    "Spacingd", "ScaleIntensityRanged", "NormalizeIntensityd", "CropForegroundd",
    "RandCropByPosNegLabeld", "AxialSlicesd", "RandSpatialCropd", "RandFlipd", "RandRotate90d", "RandAffined",
    "RandScaleIntensityd", "RandShiftIntensityd", "RandGaussianNoised", "RandAdjustContrastd",
]


def _bad(msg: str) -> "_native.InvalidRequestError":
    return _native.InvalidRequestError(f"stoker.volume: {msg}")


def _keys(keys: Any) -> Tuple[str, ...]:
    if isinstance(keys, str):
        return (keys,)
    return tuple(str(k) for k in keys)


def _seq(v: Any) -> List[Any]:
    if isinstance(v, (list, tuple)):
        return list(v)
    return [v]


class _Transform:
    """One of MONAI's dictionary transforms: its name in the VolumeSpec and
    the parameters stoker sends (None: the daemon's default, MONAI's)."""

    name = ""
    #: What a transform may be given as `keys`: "image" (the image only),
    #: "both" (image and label), "any".
    applies_to = "both"

    def __init__(self, keys: Any, **params: Any) -> None:
        self.keys = _keys(keys)
        self.params = {k: v for k, v in params.items() if v is not None}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}(keys={list(self.keys)!r}{', ' if args else ''}{args})"

    def op(self) -> Optional[Dict[str, Any]]:
        return {self.name: dict(self.params)}


class _Implicit(_Transform):
    """What stoker always does: reading, channel first, tensors."""

    applies_to = "any"

    def __init__(self, keys: Any = ("image", "label"), **options: Any) -> None:
        super().__init__(keys)
        self.options = options

    def op(self) -> Optional[Dict[str, Any]]:
        return None


class LoadImaged(_Implicit):
    """The daemon reads NIfTI (.nii, .nii.gz) and NumPy (.npy, .npz) volumes by
    their content, values as MONAI's LoadImage gets them (nibabel's scaling).
    ``npz_keys`` (MONAI's NumpyReader's) names the .npz arrays to read for
    these keys, stacked as channels when more than one (default: all of
    them), e.g. ``LoadImaged(["image"], npz_keys=["data"])`` and
    ``LoadImaged(["label"], npz_keys=["seg"])`` for nnU-Net's cases."""

    def __init__(self, keys: Any = ("image", "label"), npz_keys: Any = None,
                 **options: Any) -> None:
        super().__init__(keys, **options)
        self.npz_keys = None if npz_keys is None else [str(k) for k in _seq(npz_keys)]


class EnsureChannelFirstd(_Implicit):
    """Volumes are served channel-first: [C, X, Y, Z]."""


class EnsureTyped(_Implicit):
    """Patches are tensors of Loader(dtype=...)'s dtype."""


class ToTensord(_Implicit):
    """Patches are tensors already."""


class Orientationd(_Transform):
    name = "Orientation"

    def __init__(self, keys: Any, axcodes: Optional[str] = None, **kw: Any) -> None:
        if kw.get("as_closest_canonical"):
            raise _bad("Orientationd(as_closest_canonical=True) is not served; give axcodes")
        super().__init__(keys, axcodes=axcodes)


class Spacingd(_Transform):
    name = "Spacing"

    def __init__(self, keys: Any, pixdim: Any, mode: Any = ("bilinear", "nearest"),
                 **kw: Any) -> None:
        super().__init__(keys, pixdim=[float(x) for x in _seq(pixdim)])
        modes = _seq(mode)
        if len(self.keys) == 2 and [str(m).lower() for m in modes] not in (
                ["bilinear", "nearest"], ["trilinear", "nearest"]):
            raise _bad(f"Spacingd(mode={mode!r}): stoker resamples the image (bi/trilinear) "
                       "and the label (nearest); give mode=('bilinear', 'nearest')")
        for k, v in kw.items():
            if k in ("padding_mode", "align_corners", "dtype", "diagonal", "allow_missing_keys"):
                continue  # MONAI's defaults are what the daemon does
            raise _bad(f"Spacingd({k}=...) is not served")


class ScaleIntensityRanged(_Transform):
    name = "ScaleIntensityRange"
    applies_to = "image"

    def __init__(self, keys: Any, a_min: float, a_max: float, b_min: Optional[float] = None,
                 b_max: Optional[float] = None, clip: bool = False, **kw: Any) -> None:
        super().__init__(keys, a_min=float(a_min), a_max=float(a_max),
                         b_min=None if b_min is None else float(b_min),
                         b_max=None if b_max is None else float(b_max), clip=bool(clip))


class NormalizeIntensityd(_Transform):
    name = "NormalizeIntensity"
    applies_to = "image"

    def __init__(self, keys: Any, subtrahend: Any = None, divisor: Any = None,
                 nonzero: bool = False, channel_wise: bool = False, **kw: Any) -> None:
        super().__init__(keys, subtrahend=None if subtrahend is None else [float(x) for x in _seq(subtrahend)],
                         divisor=None if divisor is None else [float(x) for x in _seq(divisor)],
                         nonzero=bool(nonzero), channel_wise=bool(channel_wise))


class CropForegroundd(_Transform):
    name = "CropForeground"

    def __init__(self, keys: Any, source_key: str, margin: Any = 0, allow_smaller: bool = False,
                 k_divisible: Any = 1, **kw: Any) -> None:
        if "select_fn" in kw or "channel_indices" in kw:
            raise _bad("CropForegroundd(select_fn=/channel_indices=) is not served: the "
                       "foreground is every voxel > 0 of every channel (MONAI's default)")
        super().__init__(keys, margin=[int(x) for x in _seq(margin)],
                         allow_smaller=bool(allow_smaller),
                         k_divisible=[int(x) for x in _seq(k_divisible)])
        self.source_key = source_key


class RandCropByPosNegLabeld(_Transform):
    name = "RandCropByPosNegLabel"

    def __init__(self, keys: Any, label_key: str, spatial_size: Any, pos: float = 1.0,
                 neg: float = 1.0, num_samples: int = 1, image_key: Optional[str] = None,
                 image_threshold: float = 0.0, **kw: Any) -> None:
        if kw.get("fg_indices_key") or kw.get("bg_indices_key"):
            raise _bad("RandCropByPosNegLabeld(fg_indices_key=...): the daemon keeps each "
                       "volume's foreground and background lists in its cache")
        if kw.get("allow_smaller"):
            raise _bad("RandCropByPosNegLabeld(allow_smaller=True) is not served: a batch's "
                       "patches share one size")
        super().__init__(keys, spatial_size=[int(x) for x in _seq(spatial_size)], pos=float(pos),
                         neg=float(neg), num_samples=int(num_samples),
                         image_threshold=float(image_threshold))
        self.label_key = label_key
        self.image_key = image_key


class AxialSlicesd(RandCropByPosNegLabeld):
    """2.5-D training: axial slices of the prepared volumes with their
    ``neighbours`` slices on each side as channels. Each of ``num_samples``
    slices a volume gives is centred, in-plane and in z, on a foreground
    voxel with probability pos / (pos + neg) (RandCropByPosNegLabel's draw
    over a [roi_size[0], roi_size[1], 2 * neighbours + 1] block), so a
    batch is image [n * num_samples, C * (2 * neighbours + 1), X, Y] (the
    neighbours of channel 0, then of channel 1, ...) and label [n *
    num_samples, 1, X, Y] (the centre slice's). Not a MONAI transform: the
    slices MONAI users cut from 3-D patches by hand."""

    name = "RandCropByPosNegLabel"

    def __init__(self, keys: Any, label_key: str, roi_size: Any, neighbours: int = 0,
                 pos: float = 1.0, neg: float = 1.0, num_samples: int = 1,
                 image_key: Optional[str] = None, image_threshold: float = 0.0) -> None:
        size = [int(x) for x in _seq(roi_size)]
        if len(size) == 1:
            size = size * 2
        if len(size) != 2 or int(neighbours) < 0:
            raise _bad(f"AxialSlicesd(roi_size={roi_size!r}, neighbours={neighbours!r}): an "
                       "in-plane size (X, Y) and neighbours >= 0")
        self.neighbours = int(neighbours)
        super().__init__(keys, label_key, size + [2 * self.neighbours + 1], pos=pos, neg=neg,
                         num_samples=num_samples, image_key=image_key,
                         image_threshold=image_threshold)


class RandSpatialCropd(_Transform):
    name = "RandSpatialCrop"

    def __init__(self, keys: Any, roi_size: Any, max_roi_size: Any = None,
                 random_center: bool = True, random_size: bool = False, **kw: Any) -> None:
        if random_size or max_roi_size is not None:
            raise _bad("RandSpatialCropd(random_size=True) is not served: a batch's patches "
                       "share one size")
        super().__init__(keys, roi_size=[int(x) for x in _seq(roi_size)],
                         random_center=bool(random_center))


class RandFlipd(_Transform):
    name = "RandFlip"

    def __init__(self, keys: Any, prob: float = 0.1, spatial_axis: Any = None, **kw: Any) -> None:
        super().__init__(keys, prob=float(prob),
                         spatial_axis=None if spatial_axis is None else [int(x) for x in _seq(spatial_axis)])


class RandRotate90d(_Transform):
    name = "RandRotate90"

    def __init__(self, keys: Any, prob: float = 0.1, max_k: int = 3,
                 spatial_axes: Tuple[int, int] = (0, 1), **kw: Any) -> None:
        super().__init__(keys, prob=float(prob), max_k=int(max_k),
                         spatial_axes=[int(x) for x in spatial_axes])


class RandAffined(_Transform):
    name = "RandAffine"

    def __init__(self, keys: Any, mode: Any = ("bilinear", "nearest"), prob: float = 0.1,
                 rotate_range: Any = None, scale_range: Any = None,
                 padding_mode: str = "reflection", **kw: Any) -> None:
        for k in ("shear_range", "translate_range", "spatial_size"):
            if kw.get(k) is not None:
                raise _bad(f"RandAffined({k}=...) is not served (rotations and scales are)")
        for name, rng in (("rotate_range", rotate_range), ("scale_range", scale_range)):
            if rng is not None and any(isinstance(r, (list, tuple)) for r in _seq(rng)):
                raise _bad(f"RandAffined({name}={rng!r}): one number an axis (MONAI's "
                           "(-r, r)); (min, max) pairs are not served")
        super().__init__(keys, prob=float(prob),
                         rotate_range=None if rotate_range is None else [float(r) for r in _seq(rotate_range)],
                         scale_range=None if scale_range is None else [float(r) for r in _seq(scale_range)],
                         padding_mode=str(padding_mode))
        modes = [str(m).lower() for m in _seq(mode)]
        if len(self.keys) == 2 and modes != ["bilinear", "nearest"]:
            raise _bad(f"RandAffined(mode={mode!r}): stoker samples the image trilinearly and the "
                       "label by nearest voxel; give mode=('bilinear', 'nearest')")


class RandScaleIntensityd(_Transform):
    name = "RandScaleIntensity"
    applies_to = "image"

    def __init__(self, keys: Any, factors: Any, prob: float = 0.1, channel_wise: bool = False,
                 **kw: Any) -> None:
        if channel_wise:
            raise _bad("RandScaleIntensityd(channel_wise=True) is not served")
        super().__init__(keys, factors=[float(x) for x in _seq(factors)], prob=float(prob))


class RandShiftIntensityd(_Transform):
    name = "RandShiftIntensity"
    applies_to = "image"

    def __init__(self, keys: Any, offsets: Any, prob: float = 0.1, channel_wise: bool = False,
                 **kw: Any) -> None:
        if channel_wise or kw.get("safe") or kw.get("factor_key"):
            raise _bad("RandShiftIntensityd(channel_wise=/safe=/factor_key=) is not served")
        super().__init__(keys, offsets=[float(x) for x in _seq(offsets)], prob=float(prob))


class RandGaussianNoised(_Transform):
    name = "RandGaussianNoise"
    applies_to = "image"

    def __init__(self, keys: Any, prob: float = 0.1, mean: float = 0.0, std: float = 0.1,
                 **kw: Any) -> None:
        if kw.get("sample_std") is False:
            raise _bad("RandGaussianNoised(sample_std=False) is not served")
        super().__init__(keys, prob=float(prob), mean=float(mean), std=float(std))


class RandAdjustContrastd(_Transform):
    name = "RandAdjustContrast"
    applies_to = "image"

    def __init__(self, keys: Any, prob: float = 0.1, gamma: Any = (0.5, 4.5), **kw: Any) -> None:
        if kw.get("invert_image") or kw.get("retain_stats"):
            raise _bad("RandAdjustContrastd(invert_image=/retain_stats=) is not served")
        super().__init__(keys, prob=float(prob), gamma=[float(x) for x in _seq(gamma)])


class Compose:
    """MONAI's Compose of the transforms above: what a volume session runs.
    ``channels`` is each volume's channel count (a 4-D file's fourth
    dimension); ``dtype`` the patches' ("float32", "float16", "bfloat16");
    ``label_dtype`` the label patches' ("uint8", or "int64"); ``spacing``
    the voxel spacing (mm) of NumPy .npy volumes, which hold none (default
    1 mm: their affine is diag(spacing))."""

    def __init__(self, transforms: Sequence[Any], channels: int = 1, dtype: str = "float32",
                 label_dtype: str = "uint8", spacing: Optional[Sequence[float]] = None) -> None:
        self.transforms = list(transforms)
        self.channels = int(channels)
        self.spacing = None if spacing is None else [float(x) for x in spacing]
        self.dtype = dtype
        self.label_dtype = label_dtype
        for t in self.transforms:
            if not isinstance(t, _Transform):
                raise _bad(f"{t!r} is not one of stoker.volume's transforms ({', '.join(__all__[1:])})")
        self.image_key, self.label_key = self._keys()
        #: AxialSlicesd's neighbours: batches are slices (None: 3-D patches).
        self.slice_neighbours: Optional[int] = next(
            (t.neighbours for t in self.transforms if isinstance(t, AxialSlicesd)), None)
        if self.slice_neighbours is not None and any(
                isinstance(t, (RandRotate90d, RandAffined)) for t in self.transforms):
            raise _bad("RandRotate90d and RandAffined move voxels across slices: not with "
                       "AxialSlicesd")

    def _keys(self) -> Tuple[str, Optional[str]]:
        image, label = "image", None
        for t in self.transforms:
            if isinstance(t, RandCropByPosNegLabeld):
                label = t.label_key
                image = t.image_key or next((k for k in t.keys if k != label), image)
            if isinstance(t, CropForegroundd):
                image = t.source_key
        if label is None:
            for t in self.transforms:
                if t.applies_to == "both" and len(t.keys) == 2:
                    label = next((k for k in t.keys if k != image), None)
                    break
        for t in self.transforms:
            wrong = [k for k in t.keys if k not in (image, label)]
            if wrong and not isinstance(t, _Implicit):
                raise _bad(f"{t!r}: key {wrong[0]!r} is neither the image ({image!r}) nor the "
                           f"label ({label!r}) key")
            if t.applies_to == "image" and label in t.keys:
                raise _bad(f"{t!r}: stoker applies {type(t).__name__} to the image only")
            if (t.applies_to == "both" and label is not None and set(t.keys) != {image, label}
                    and not isinstance(t, _Implicit)):
                raise _bad(f"{t!r}: give keys=[{image!r}, {label!r}] (stoker moves the label "
                           "with the image)")
        return image, label

    def spec(self) -> Dict[str, Any]:
        """The VolumeSpec as a dict (the daemon's JSON form)."""
        ops = [op for op in (t.op() for t in self.transforms) if op is not None]
        spec = {"ops": ops, "channels": self.channels, "dtype": self.dtype,
                "label_dtype": self.label_dtype}
        if self.spacing is not None:
            spec["spacing"] = self.spacing
        for t in self.transforms:
            if isinstance(t, LoadImaged) and t.npz_keys is not None:
                if self.image_key in t.keys:
                    spec["array_keys"] = t.npz_keys
                if self.label_key is not None and self.label_key in t.keys:
                    spec["label_array_keys"] = t.npz_keys
        return spec

    def to_json(self) -> str:
        return json.dumps(self.spec())

    def __repr__(self) -> str:
        return "Compose([" + ", ".join(repr(t) for t in self.transforms) + "])"

    def __call__(self, data: Any) -> Any:
        raise _bad("this Compose runs in stoker's daemon: give it to stoker.Loader(transform=...)")
