"""Reads a torchvision transform into the pipeline keywords that run it in the daemon.

``Loader(dataset, transform=T.Compose([...]))`` maps the transform one to one
onto an op list (stoker.proto's ``Op``: each op is the torchvision transform
of the same name, PIL backend, with the parameters torchvision stores), then
its tensor conversion onto the output keywords:

* the ops, in any order and number: the keys of `_OPS` below;
* then ``ToTensor()`` (float32 in [0, 1]) or ``PILToTensor()`` (uint8), optionally
  ``ConvertImageDtype(float dtype)`` (``PILToTensor()`` +
  ``ConvertImageDtype(torch.float)`` is ``ToTensor()``, the reference
  recipes' spelling), then optionally ``Normalize(mean, std)`` (1 value each
  is broadcast to the 3 channels, as torchvision does);
* then optionally ``RandomErasing`` (any number), the transform's last steps:
  it erases the output tensor, after the dtype conversion and normalization,
  its value in the output's units, as torchvision's does after Normalize.

An object holding its transforms as a ``transforms`` attribute that is a
``Compose`` and called as a transform (torchvision's reference
``ClassificationPresetTrain``) is read as that Compose.

Multi-view transforms (SimCLR, MoCo, BYOL, DINO: one image in, a list of
views out) are read into ``views``: ``stoker.MultiView([t1, t1, t2, ...])``
declares one, and an object of the recipes' usual shape is recognised by
structure (``TwoCropsTransform``, ``DataAugmentationDINO``: a callable whose
attributes are transforms and whose ``__call__`` returns a list of their
results on the same image). Each view's transform is read as above; the
views must share their tensor conversion (dtype, Normalize).

A recipe's own class in place of an op (DINO's ``GaussianBlur`` and
``Solarization``, MoCo's ``GaussianBlur`` and ``Solarize``: PIL's
ImageFilter.GaussianBlur or ImageOps.solarize behind a random gate) is read
by what it does to a stand-in image (stoker/_recipe_ops.py).

Anything else, or an op after the tensor conversion, is refused with an error
naming the transform and listing what is served: stoker never silently drops
a transform. Whether the parameters are in range is for the daemon's
pipeline module (stoker/pipeline_spec.h) to say, as for every front end.
Objects are recognized by class name, so torchvision is not imported.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Optional, Sequence

from . import _native, _recipe_ops


def _ints(v: Any) -> List[int]:
    """A size (or padding, fill) as torchvision stores it, a number or a
    sequence, as a list of ints (a float fill is truncated, as PIL's pad does)."""
    if isinstance(v, (int, float)):
        return [int(v)]
    return [int(x) for x in v]


def _floats(v: Any) -> List[float]:
    if isinstance(v, (int, float)):
        return [float(v)]
    return [float(x) for x in v]


def _interpolation_name(t: Any, default: str) -> str:
    """A transform's `interpolation`: an InterpolationMode, or PIL's filter
    number (``Image.BICUBIC``, as DINO writes it), which torchvision 0.14
    still accepts."""
    mode = getattr(t, "interpolation", None)
    if isinstance(mode, int) and not isinstance(mode, bool):
        return _PIL_FILTERS.get(mode, str(mode))
    return str(getattr(mode, "value", mode) or default).lower()


def _resampling(t: Any) -> Dict[str, Any]:
    """The interpolation of RandomResizedCrop / Resize: bilinear or bicubic.

    `antialias` is never sent: torchvision 0.14 resizes a PIL image with PIL's
    antialiased resampling whatever its `antialias` says (F.resize ignores
    antialias=False for PIL images, with a warning), and the op's default is
    that same PIL resampling.
    """
    name = _interpolation_name(t, "bilinear")
    if name not in ("bilinear", "bicubic"):
        raise _refuse(f"{type(t).__name__}(interpolation={name}): bilinear and bicubic are "
                      "served (antialiased when downscaling, as torchvision's PIL backend does)")
    return {"interpolation": name}


def _random_resized_crop(t: Any) -> Dict[str, Any]:
    return {"size": _ints(t.size), "scale": _floats(t.scale), "ratio": _floats(t.ratio),
            **_resampling(t)}


def _resize(t: Any) -> Dict[str, Any]:
    op: Dict[str, Any] = {"size": _ints(t.size), **_resampling(t)}
    if getattr(t, "max_size", None) is not None:
        op["max_size"] = int(t.max_size)
    return op


def _random_crop(t: Any) -> Dict[str, Any]:
    op: Dict[str, Any] = {"size": _ints(t.size), "pad_if_needed": bool(t.pad_if_needed),
                          "padding_mode": str(t.padding_mode)}
    if t.padding is not None:
        op["padding"] = _ints(t.padding)
    if t.fill is not None:
        op["fill"] = _ints(t.fill)
    return op


def _color_jitter(t: Any) -> Dict[str, Any]:
    # torchvision keeps each factor as its [min, max] range, None when the
    # adjustment is not made.
    return {k: _floats(getattr(t, k)) for k in ("brightness", "contrast", "saturation", "hue")
            if getattr(t, k) is not None}


#: torchvision's InterpolationMode values; ints are PIL's filter numbers,
#: which torchvision 0.14 still accepts (deprecated).
_PIL_FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def _affine_interpolation(t: Any) -> Dict[str, Any]:
    """The resampling of the geometric ops (RandomRotation, RandomAffine, the
    policies' shears, translations and rotations): nearest or bilinear, as
    PIL's Image.transform / rotate do them."""
    name = _interpolation_name(t, "none")
    if name not in ("nearest", "bilinear"):
        raise _refuse(f"{type(t).__name__}(interpolation={name}): its geometric ops are served "
                      "with nearest or bilinear resampling only")
    return {"interpolation": name}


def _fill(t: Any) -> Dict[str, Any]:
    """The fill of the geometric ops: None is 0 (the op's default: not sent);
    PIL truncates a float fill to an int, as this does."""
    fill = getattr(t, "fill", None)
    return {} if fill is None else {"fill": _ints(fill)}


def _center(t: Any) -> Dict[str, Any]:
    center = getattr(t, "center", None)
    return {} if center is None else {"center": _floats(center)}


def _random_rotation(t: Any) -> Dict[str, Any]:
    op: Dict[str, Any] = {"degrees": _floats(t.degrees), **_affine_interpolation(t),
                          **_center(t), **_fill(t)}
    if t.expand:
        op["expand"] = True  # refused by the pipeline module, naming why
    return op


def _random_affine(t: Any) -> Dict[str, Any]:
    op: Dict[str, Any] = {"degrees": _floats(t.degrees)}
    for key in ("translate", "scale", "shear"):
        if getattr(t, key, None) is not None:
            op[key] = _floats(getattr(t, key))
    op.update(_affine_interpolation(t), **_center(t), **_fill(t))
    return op


def _auto_augment(t: Any) -> Dict[str, Any]:
    policy = getattr(t, "policy", None)
    return {"policy": str(getattr(policy, "value", policy)).lower(),
            **_affine_interpolation(t), **_fill(t)}


def _rand_augment(t: Any) -> Dict[str, Any]:
    return {"num_ops": int(t.num_ops), "magnitude": int(t.magnitude),
            "num_magnitude_bins": int(t.num_magnitude_bins), **_affine_interpolation(t),
            **_fill(t)}


def _trivial_augment_wide(t: Any) -> Dict[str, Any]:
    return {"num_magnitude_bins": int(t.num_magnitude_bins), **_affine_interpolation(t),
            **_fill(t)}


def _aug_mix(t: Any) -> Dict[str, Any]:
    return {"severity": int(t.severity), "mixture_width": int(t.mixture_width),
            "chain_depth": int(t.chain_depth), "alpha": float(t.alpha),
            "all_ops": bool(t.all_ops), **_affine_interpolation(t), **_fill(t)}


def _random_erasing(t: Any) -> Dict[str, Any]:
    # `inplace` makes no difference to a tensor served from the ring.
    value = t.value
    return {"p": float(t.p), "scale": _floats(t.scale), "ratio": _floats(t.ratio),
            "value": "random" if isinstance(value, str) else _floats(value)}


def _composed(t: Any) -> List[Dict[str, Any]]:
    """A composition's transforms as ops. Which ops a composition may hold
    (those that change pixels only, none a composition) is the daemon's to
    check, with the message naming the op."""
    out = []
    for c in list(t.transforms):
        name = type(c).__name__
        recipe = None if name in _OPS else _recipe_ops.read(c)
        if name not in _OPS and recipe is None:
            raise _refuse(f"{type(t).__name__} holds {name}, which is not served")
        out.append(recipe or {name: _OPS[name](c)})
    return out


def _random_choice(t: Any) -> Dict[str, Any]:
    op: Dict[str, Any] = {"transforms": _composed(t)}
    if t.p is not None:  # None: equal chances
        op["p"] = _floats(t.p)
    return op


#: Each torchvision.transforms op's reader: the parameters torchvision stores
#: -> the op's JSON form. Which ops exist, and which of them come from
#: torchvision.transforms, is the op table's to say (pipeline/op_table.h,
#: through _native.op_table()); a row without a reader fails the import.
_READERS: Dict[str, Callable[[Any], Dict[str, Any]]] = {
    "RandomResizedCrop": _random_resized_crop,
    "Resize": _resize,
    "CenterCrop": lambda t: {"size": _ints(t.size)},
    "RandomCrop": _random_crop,
    "RandomHorizontalFlip": lambda t: {"p": float(t.p)},
    "RandomVerticalFlip": lambda t: {"p": float(t.p)},
    "ColorJitter": _color_jitter,
    "Grayscale": lambda t: {"num_output_channels": int(t.num_output_channels)},
    "RandomGrayscale": lambda t: {"p": float(t.p)},
    "GaussianBlur": lambda t: {"kernel_size": _ints(t.kernel_size), "sigma": _floats(t.sigma)},
    "RandomRotation": _random_rotation,
    "RandomAffine": _random_affine,
    "ElasticTransform": lambda t: {"alpha": _floats(t.alpha), "sigma": _floats(t.sigma),
                                   **_affine_interpolation(t), **_fill(t)},
    "RandomPerspective": lambda t: {"distortion_scale": float(t.distortion_scale),
                                    "p": float(t.p), **_affine_interpolation(t), **_fill(t)},
    "RandomPosterize": lambda t: {"bits": int(t.bits), "p": float(t.p)},
    "RandomSolarize": lambda t: {"threshold": float(t.threshold), "p": float(t.p)},
    "RandomAdjustSharpness": lambda t: {"sharpness_factor": float(t.sharpness_factor),
                                        "p": float(t.p)},
    "RandomAutocontrast": lambda t: {"p": float(t.p)},
    "RandomEqualize": lambda t: {"p": float(t.p)},
    "RandomInvert": lambda t: {"p": float(t.p)},
    "AutoAugment": _auto_augment,
    "RandAugment": _rand_augment,
    "TrivialAugmentWide": _trivial_augment_wide,
    "AugMix": _aug_mix,
    "RandomErasing": _random_erasing,
    "Pad": lambda t: {"padding": _ints(t.padding), "fill": _ints(t.fill),
                      "padding_mode": str(t.padding_mode)},
    "RandomApply": lambda t: {"transforms": _composed(t), "p": float(t.p)},
    "RandomChoice": _random_choice,
    "RandomOrder": lambda t: {"transforms": _composed(t)},
}

#: The op table's rows, by name.
_TABLE: Dict[str, Dict[str, Any]] = {r["name"]: r for r in _native.op_table()}

#: The torchvision transforms served as ops: the one list of what is served
#: (errors list its names). An op on the output tensor (RandomErasing) has its
#: place after the tensor conversion (loader_options).
_OPS: Dict[str, Callable[[Any], Dict[str, Any]]] = {
    name: _READERS[name] for name, row in _TABLE.items()
    if row["source"] == "torchvision.transforms"}

#: The ops that work on the output tensor: after the tensor conversion, last.
_TENSOR_OPS = tuple(name for name, row in _TABLE.items() if row["moves"] == "output_tensor")

#: The tensor conversion that ends a transform, in this order.
_TENSOR_STEPS = ("ToTensor or PILToTensor", "ConvertImageDtype", "Normalize")
_TENSOR_NAMES = ("ToTensor", "PILToTensor", "ConvertImageDtype", "Normalize")

_SUPPORTED = (", ".join(k for k in _OPS if k not in _TENSOR_OPS)
              + " (the ops, before the tensor conversion; also a recipe's own class that "
              "blurs with PIL's ImageFilter.GaussianBlur or solarizes with ImageOps.solarize, "
              "as DINO's and MoCo's do), then " + ", ".join(_TENSOR_STEPS)
              + ", then " + ", ".join(_TENSOR_OPS) + " (on the output tensor, last)")


def _refuse(message: str) -> "_native.InvalidRequestError":
    return _native.InvalidRequestError(
        f"transform: {message}. stoker runs these torchvision transforms in the daemon: "
        f"{_SUPPORTED}")


def _flatten(t: Any) -> List[Any]:
    if isinstance(t, (list, tuple)):
        out: List[Any] = []
        for x in t:
            out += _flatten(x)
        return out
    if type(t).__name__ == "Compose" and hasattr(t, "transforms"):
        return _flatten(list(t.transforms))
    inner = getattr(t, "transforms", None)
    if type(inner).__name__ == "Compose" and callable(t):
        # torchvision's reference ClassificationPresetTrain / EvalPreset: a
        # callable whose transforms are one Compose.
        return _flatten(inner)
    return [t]


def _dtype_name(d: Any) -> str:
    name = str(d).replace("torch.", "")
    aliases = {"float": "float32", "half": "float16", "float32": "float32",
               "float16": "float16", "bfloat16": "bfloat16", "uint8": "uint8"}
    if name not in aliases:
        raise _refuse(f"ConvertImageDtype({d}): use float32, float16 or bfloat16")
    return aliases[name]


def channels(values: Any, what: str) -> List[float]:
    """Normalize's per-channel values (a mean or std) as 3 floats: one value
    is broadcast to the three RGB channels, as torchvision's Normalize does.

    Raises:
        InvalidRequestError: not 1 or 3 numbers.
    """
    try:
        v = [float(x) for x in (values if hasattr(values, "__iter__") else [values])]
    except (TypeError, ValueError):
        v = []
    if len(v) == 1:
        return v * 3
    if len(v) != 3:
        raise _native.InvalidRequestError(
            f"{what} must have 1 value (for every channel) or 3 (R, G, B), got {values!r}")
    return v


#: The steps of a transform that decide each pipeline keyword of Loader, the
#: first one present naming it in errors.
_SETTERS: Dict[str, Sequence[str]] = {
    "pipeline": tuple(_OPS),
    "ops": tuple(_OPS),
    "size": ("RandomResizedCrop", "CenterCrop", "RandomCrop", "Resize"),
    "resize_size": ("Resize",),
    "scale": ("RandomResizedCrop",),
    "ratio": ("RandomResizedCrop",),
    "flip_prob": ("RandomHorizontalFlip",),
    "interpolation": ("RandomResizedCrop", "Resize"),
    "antialias": ("RandomResizedCrop", "Resize"),
    "dtype": ("ConvertImageDtype", "ToTensor", "PILToTensor"),
    "layout": ("ToTensor", "PILToTensor"),
    "mean": ("Normalize",),
    "std": ("Normalize",),
}


def step_setting(keyword: str, transform: Any) -> str:
    """Names the step of `transform` that decides the Loader keyword
    `keyword` (e.g. 'RandomResizedCrop(...)' for size), for error messages."""
    names = _SETTERS.get(keyword, ())
    steps = _flatten(transform)
    for want in names:
        for t in steps:
            if type(t).__name__ == want:
                return repr(t) if len(repr(t)) <= 120 else want
    if names:
        return f"the transform as a whole (it has no {' or '.join(names)})"
    return "the transform"


class MultiView:
    """Several views of one image, as self-supervised recipes make them:
    ``MultiView([t1, t1])`` (SimCLR, MoCo v2), ``MultiView([g1, g2] + [l] * 8)``
    (DINO). Called on an image it returns ``[t(image) for t in transforms]``,
    as the recipes' own ``TwoCropsTransform`` does; given to ``stoker.Loader``
    each view runs in the daemon from one decode of the image, and each batch
    is ``(views, labels)`` with ``views`` a list of tensors, one per view
    (what DataLoader's default collate makes of a list).

    A transform object already written that way need not be wrapped: the
    Loader recognises one whose attributes are transforms and whose call
    returns a list of their results on the image it gets.
    """

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)
        if not self.transforms:
            raise _native.InvalidRequestError("MultiView needs at least one transform")

    def __call__(self, image: Any) -> List[Any]:
        return [t(image) for t in self.transforms]

    def __repr__(self) -> str:
        return f"MultiView({self.transforms!r})"


class _ViewResult:
    """What a probed transform attribute returns: which one was called."""

    def __init__(self, transform: Any) -> None:
        self.transform = transform


class _ViewProbe:
    """Stands for a transform attribute while a multi-view object is probed."""

    def __init__(self, transform: Any) -> None:
        self._transform = transform

    def __call__(self, image: Any) -> _ViewResult:
        return _ViewResult(self._transform)


def _is_transform(value: Any) -> bool:
    """Whether an attribute holds a transform this module reads."""
    if isinstance(value, (list, tuple)) or not callable(value) or isinstance(value, type):
        return False
    name = type(value).__name__
    return name == "Compose" or name in _OPS or name in _TENSOR_NAMES


def _probe_image() -> Any:
    try:
        from PIL import Image  # what the recipes' transforms are called on
        return Image.new("RGB", (64, 48))
    except ImportError:
        return object()


def multi_view(transform: Any) -> Optional[List[Any]]:
    """The views of a multi-view transform, one transform per output view in
    order; None for a transform that is not one (a Compose, a single op).

    A ``MultiView`` gives its list. Another object is probed: a copy of it
    whose transform-valued attributes are replaced by stand-ins is called on
    a small image; when it returns a list or tuple of stand-in results, those
    name the views. The transform's own attributes are not touched.
    """
    if isinstance(transform, MultiView):
        return list(transform.transforms)
    if (isinstance(transform, (list, tuple)) or not callable(transform)
            or type(transform).__name__ in _OPS or type(transform).__name__ == "Compose"
            or type(transform).__name__ in _TENSOR_NAMES):
        return None
    if type(getattr(transform, "transforms", None)).__name__ == "Compose":
        return None  # a preset object: read as its Compose (_flatten)
    attrs = getattr(transform, "__dict__", None)
    if not attrs or not any(_is_transform(v) for v in attrs.values()):
        return None
    probe = copy.copy(transform)
    for name, value in attrs.items():
        if _is_transform(value):
            setattr(probe, name, _ViewProbe(value))
    try:
        out = probe(_probe_image())
    except Exception:  # pylint: disable=broad-except
        return None  # not of the recipes' shape: refused as an unknown transform
    if (isinstance(out, (list, tuple)) and out
            and all(isinstance(x, _ViewResult) for x in out)):
        return [x.transform for x in out]
    return None


def views_options(transforms: Sequence[Any]) -> Dict[str, Any]:
    """The pipeline keywords of a multi-view transform's views: ``views``
    (consecutive views by the same transform object are one view with a
    count) and the output keywords the views share.

    Raises:
        InvalidRequestError: a view's transform is not served, or the views'
            tensor conversions differ.
    """
    views: List[Dict[str, Any]] = []
    output: Optional[Dict[str, Any]] = None
    first = ""
    previous: Any = None
    for i, t in enumerate(transforms):
        if views and t is previous:
            views[-1]["count"] += 1
            continue
        try:
            opts = loader_options(t)
        except _native.InvalidRequestError as e:
            raise _native.InvalidRequestError(f"view {i}: {e}") from None
        if "pipeline" in opts:
            raise _refuse(f"view {i} ({t!r}) has no op: a view needs a crop or resize that gives "
                          "it its size")
        out = {k: v for k, v in opts.items() if k != "ops"}
        if output is None:
            output, first = out, repr(t)
        elif out != output:
            raise _refuse(f"the views' tensor conversions differ (view 0 gives {output}, view {i} "
                          f"{out}): the views of one loader share their dtype and Normalize")
        views.append({"ops": opts["ops"], "count": 1})
        previous = t
    assert output is not None, first
    return {"views": views, **output}


def loader_options(transform: Any) -> Dict[str, Any]:
    """The pipeline keywords (stoker/pipeline_spec.h) equivalent to
    `transform`: ``ops`` (or ``pipeline='decode'`` when it has no op: the
    whole image), ``dtype``, ``layout`` and, for floats, ``mean`` and ``std``.

    Raises:
        InvalidRequestError: a transform that is not served, or not in its
            place; the message names it.
    """
    views = multi_view(transform)
    if views is not None:
        return views_options(views)
    ops: List[Dict[str, Any]] = []
    dtype: Optional[str] = None  # after the tensor conversion
    converted_by = ""
    normalized = False
    mean: List[float] = []
    std: List[float] = []
    erased_by = ""  # the first RandomErasing: only more of them may follow
    for t in _flatten(transform):
        name = type(t).__name__
        if erased_by and name not in _TENSOR_OPS:
            raise _refuse(f"{name} after {erased_by}: {erased_by} erases the output tensor (after "
                          "the dtype conversion and Normalize), so it must be the transform's "
                          "last step")
        if name in _TENSOR_OPS:
            if dtype is None:
                raise _refuse(f"{name} before the tensor conversion: it works on the tensor, so "
                              "it must follow ToTensor() or PILToTensor() (and ConvertImageDtype, "
                              "Normalize), as in torchvision")
            ops.append({name: _OPS[name](t)})
            erased_by = erased_by or name
        elif name in _OPS:
            if dtype is not None:
                raise _refuse(f"{name} after {converted_by}: the ops run on the decoded image, "
                              f"so {name} must come before the tensor conversion")
            ops.append({name: _OPS[name](t)})
        elif dtype is None and name not in _TENSOR_NAMES and (recipe := _recipe_ops.read(t)):
            ops.append(recipe)
        elif dtype is None and name in ("ToTensor", "PILToTensor"):
            dtype = "float32" if name == "ToTensor" else "uint8"
            converted_by = f"{name}()"
        elif name == "ConvertImageDtype":
            if dtype is None or normalized:
                raise _refuse("ConvertImageDtype must follow PILToTensor/ToTensor, before "
                              "Normalize")
            dtype = _dtype_name(t.dtype)
        elif name == "Normalize":
            if dtype is None or dtype == "uint8" or normalized:
                raise _refuse("Normalize must follow ToTensor (or a float ConvertImageDtype)")
            normalized = True
            try:
                mean = channels(t.mean, "Normalize's mean")
                std = channels(t.std, "Normalize's std")
            except _native.InvalidRequestError as e:
                raise _refuse(str(e)) from None
        else:
            raise _refuse(f"{name} is not served here, or not in this position")
    if dtype is None:
        raise _refuse("the transform must end in a tensor: add ToTensor() or PILToTensor()")
    opts: Dict[str, Any] = {"ops": ops} if ops else {"pipeline": "decode"}
    opts["dtype"] = dtype
    opts["layout"] = "nchw"  # what ToTensor / PILToTensor give
    if dtype != "uint8":
        opts["mean"], opts["std"] = (mean, std) if normalized else ([0.0] * 3, [1.0] * 3)
    return opts
