"""Reads a torchvision transform and says which stoker pipeline does the same.

``Loader(dataset, transform=T.Compose([...]))`` accepts the transforms of the
usual ImageNet recipes, as torchvision (PIL backend) names and parameterizes
them, and runs them in the daemon:

* train: ``RandomResizedCrop(size, scale, ratio)`` and ``RandomHorizontalFlip(p)``
* eval:  ``Resize(int)`` then ``CenterCrop(size)``
* then:  ``ToTensor()`` (float32 in [0, 1]) or ``PILToTensor()`` (uint8), optionally
  ``ConvertImageDtype(float dtype)``, then optionally ``Normalize(mean, std)`` (1 value
  each is broadcast to the 3 channels, as torchvision does).

Anything else is refused with the list above: stoker never silently drops a
transform. Objects are recognized by class name, so torchvision is not imported.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from . import _native

_SUPPORTED = ("RandomResizedCrop, RandomHorizontalFlip, Resize(int) + CenterCrop, ToTensor, "
              "PILToTensor, ConvertImageDtype, Normalize (in that order)")


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
    return [t]


def _size(v: Any, what: str) -> Sequence[int]:
    if isinstance(v, int):
        return (v, v)
    v = list(v)
    if len(v) == 1:
        return (int(v[0]), int(v[0]))
    if len(v) == 2:
        return (int(v[0]), int(v[1]))
    raise _refuse(f"{what} size {v!r} is not an int or (height, width)")


def _interpolation(t: Any) -> str:
    mode = getattr(t, "interpolation", None)
    name = str(getattr(mode, "value", mode) or "bilinear").lower()
    if name != "bilinear":
        raise _refuse(f"{type(t).__name__}(interpolation={name}): only bilinear is supported "
                      "(antialiased when downscaling, as torchvision's PIL backend does)")
    return "antialias"


def _dtype_name(d: Any) -> str:
    name = str(d).replace("torch.", "")
    aliases = {"float": "float32", "half": "float16", "float32": "float32",
               "float16": "float16", "bfloat16": "bfloat16", "uint8": "uint8"}
    if name not in aliases:
        raise _refuse(f"ConvertImageDtype({d}): use float32, float16 or bfloat16")
    return aliases[name]


def channels(values: Any, what: str) -> List[float]:
    """Per-channel values (a mean or std) as 3 floats: one value is broadcast
    to the three RGB channels, as torchvision's Normalize does.

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
    "pipeline": ("RandomResizedCrop", "Resize", "CenterCrop"),
    "size": ("RandomResizedCrop", "CenterCrop"),
    "resize_size": ("Resize",),
    "scale": ("RandomResizedCrop",),
    "ratio": ("RandomResizedCrop",),
    "flip_prob": ("RandomHorizontalFlip",),
    "interpolation": ("RandomResizedCrop", "Resize"),
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


def loader_options(transform: Any) -> Dict[str, Any]:
    """The Loader keyword arguments equivalent to `transform` (pipeline, size,
    resize_size, scale, ratio, flip_prob, interpolation, dtype, layout, mean, std)."""
    steps = _flatten(transform)
    opts: Dict[str, Any] = {}
    geometry: Optional[str] = None  # 'train' or 'eval'
    resize: Optional[int] = None
    flip: Optional[float] = None
    dtype: Optional[str] = None  # after the tensor conversion
    normalized = False
    for t in steps:
        name = type(t).__name__
        if dtype is None and name == "RandomResizedCrop":
            if geometry is not None:
                raise _refuse("one RandomResizedCrop, and not with Resize/CenterCrop")
            geometry = "train"
            opts.update(size=_size(t.size, name), scale=tuple(float(x) for x in t.scale),
                        ratio=tuple(float(x) for x in t.ratio), interpolation=_interpolation(t))
        elif dtype is None and name == "RandomHorizontalFlip":
            if flip is not None:
                raise _refuse("one RandomHorizontalFlip")
            flip = float(t.p)
        elif dtype is None and name == "Resize":
            if geometry is not None or resize is not None:
                raise _refuse("Resize after another crop or resize")
            if not isinstance(t.size, int) and not (len(t.size) == 1):
                raise _refuse(f"Resize({list(t.size)}): only Resize(int), the shorter side, "
                              "followed by CenterCrop")
            if getattr(t, "max_size", None) is not None:
                raise _refuse("Resize(max_size=...) is not supported")
            resize = int(t.size if isinstance(t.size, int) else t.size[0])
            opts.update(interpolation=_interpolation(t))
        elif dtype is None and name == "CenterCrop":
            if resize is None or geometry is not None:
                raise _refuse("CenterCrop must follow Resize(int)")
            geometry = "eval"
            opts.update(size=_size(t.size, name), resize_size=resize)
        elif dtype is None and name == "ToTensor":
            dtype = "float32"
        elif dtype is None and name == "PILToTensor":
            dtype = "uint8"
        elif name == "ConvertImageDtype":
            if dtype is None or normalized:
                raise _refuse("ConvertImageDtype must follow PILToTensor/ToTensor, before Normalize")
            dtype = _dtype_name(t.dtype)
        elif name == "Normalize":
            if dtype is None or dtype == "uint8" or normalized:
                raise _refuse("Normalize must follow ToTensor (or a float ConvertImageDtype)")
            normalized = True
            try:
                opts.update(mean=channels(t.mean, "Normalize's mean"),
                            std=channels(t.std, "Normalize's std"))
            except _native.InvalidRequestError as e:
                raise _refuse(str(e)) from None
        else:
            raise _refuse(f"{name} is not supported here, or not in this position")
    if resize is not None and geometry is None:
        raise _refuse("Resize(int) without CenterCrop gives images of varying size")
    if flip is not None and geometry != "train":
        raise _refuse("RandomHorizontalFlip needs RandomResizedCrop (the train pipeline)")
    if dtype is None:
        raise _refuse("the transform must end in a tensor: add ToTensor() or PILToTensor()")
    opts["pipeline"] = geometry or "decode"
    if geometry == "train":
        opts["flip_prob"] = 0.0 if flip is None else flip
    opts["dtype"] = dtype
    opts["layout"] = "nchw"  # what ToTensor / PILToTensor give
    if dtype != "uint8" and not normalized:
        opts.update(mean=[0.0, 0.0, 0.0], std=[1.0, 1.0, 1.0])  # plain x / 255
    return opts
