"""Video clips: what Loader makes of torchvision's Kinetics (or a folder of
class folders of videos with frames_per_clip=), its clip samplers and the
video reference's transforms, as the daemon's clip request (AttachRequest.
clips: the daemon indexes the videos, cuts the clips as VideoClips does and
decodes them in its workers; server/video/).

The transform is read as torchvision's video classification reference
writes it (VideoClassificationPresetTrain / Eval): ConvertImageDtype(float32),
Resize((h, w), antialias=False), RandomHorizontalFlip(p), Normalize(mean,
std), RandomCrop((h, w)) or CenterCrop((h, w)), and the reference's
ConvertBCHWtoCBHW last (the CTHW layout). Anything else is refused, named,
with what the daemon can do instead: the op table's clip rows decide
(pipeline/clip_pipeline.h), and the daemon gives the final word."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from .. import _native

#: torchvision's clip samplers, by class name: the attribute holding their
#: clips_per_video, and the daemon's sampler name.
_CLIP_SAMPLERS = {"RandomClipSampler": ("max_clips_per_video", "random"),
                  "UniformClipSampler": ("num_clips_per_video", "uniform")}


def _refuse(what: str) -> "_native.InvalidRequestError":
    return _native.InvalidRequestError(f"video transform: {what}")


def is_clip_sampler(sampler: Any) -> bool:
    return type(sampler).__name__ in _CLIP_SAMPLERS


def is_video_dataset(dataset: Any) -> bool:
    """A torchvision video dataset object (Kinetics; anything holding a
    VideoClips as video_clips)."""
    return hasattr(dataset, "video_clips") and hasattr(dataset, "split_folder")


def clip_sampler_options(sampler: Any, dataset: Any) -> Dict[str, Any]:
    attr, name = _CLIP_SAMPLERS[type(sampler).__name__]
    clips = getattr(sampler, "video_clips", None)
    if dataset is not None and clips is not None and clips is not getattr(dataset, "video_clips",
                                                                          clips):
        raise _native.InvalidRequestError(
            f"sampler={type(sampler).__name__}(...) samples another dataset's video_clips than "
            "the one given to the Loader")
    return {"clip_sampler": name, "clips_per_video": int(getattr(sampler, attr))}


def _pair(size: Any, what: str) -> List[int]:
    if isinstance(size, int):
        return [size, size]
    size = list(size)
    if len(size) == 1:
        return [int(size[0]), int(size[0])]
    if len(size) != 2:
        raise _refuse(f"{what}({size!r}): give (h, w)")
    return [int(size[0]), int(size[1])]


def _steps(transform: Any) -> List[Any]:
    if transform is None:
        return []
    if type(transform).__name__ == "Compose":
        out: List[Any] = []
        for t in transform.transforms:
            out += _steps(t)
        return out
    inner = getattr(transform, "transforms", None)  # the reference's preset classes
    if inner is not None and type(transform).__name__.startswith("VideoClassificationPreset"):
        return _steps(inner)
    return [transform]


def transform_keywords(transform: Any) -> Tuple[Dict[str, Any], str]:
    """The pipeline keywords (ops, dtype, mean, std) and the clip layout
    ("TCHW" or "CTHW") of a video transform."""
    ops: List[Dict[str, Any]] = []
    kw: Dict[str, Any] = {"dtype": "uint8"}
    layout = "TCHW"
    float_seen = False
    for k, t in enumerate(_steps(transform)):
        name = type(t).__name__
        if layout == "CTHW":
            raise _refuse(f"{name} after ConvertBCHWtoCBHW: it must be the last step")
        if name == "ConvertImageDtype":
            dtype = str(getattr(t, "dtype", "")).replace("torch.", "")
            if dtype not in ("float32", "float") or k != 0:
                raise _refuse(f"ConvertImageDtype({t.dtype}): clips take ConvertImageDtype("
                              "torch.float32), first")
            kw["dtype"] = "float32"
            float_seen = True
        elif name == "Resize":
            antialias = getattr(t, "antialias", None)
            if antialias is True:
                raise _refuse("Resize(antialias=True): clips are resized as video tensors are "
                              "(antialias=False, as the reference's preset does)")
            if getattr(t, "max_size", None) is not None:
                raise _refuse("Resize(max_size=...) on clips")
            interp = str(getattr(t, "interpolation", "bilinear")).lower()
            if "bilinear" not in interp:
                raise _refuse(f"Resize(interpolation={interp}): clips take bilinear")
            ops.append({"Resize": {"size": _pair(t.size, "Resize"), "antialias": False}})
        elif name == "RandomHorizontalFlip":
            ops.append({"RandomHorizontalFlip": {"p": float(t.p)}})
        elif name in ("RandomCrop", "CenterCrop"):
            if name == "RandomCrop" and (getattr(t, "padding", None) or getattr(t, "pad_if_needed",
                                                                                 False)):
                raise _refuse("RandomCrop with padding on clips")
            ops.append({name: {"size": _pair(t.size, name)}})
        elif name == "Normalize":
            if not float_seen:
                raise _refuse("Normalize needs ConvertImageDtype(torch.float32) before it")
            kw["mean"] = [float(v) for v in t.mean]
            kw["std"] = [float(v) for v in t.std]
        elif name == "ConvertBCHWtoCBHW":
            layout = "CTHW"
        else:
            raise _refuse(
                f"{t!r} cannot run in the daemon: clips take ConvertImageDtype(torch.float32), "
                "Resize((h, w), antialias=False), RandomHorizontalFlip, Normalize, RandomCrop or "
                "CenterCrop, and ConvertBCHWtoCBHW (torchvision's video classification presets)")
    if ops:
        kw["ops"] = ops
    return kw, layout


def normalize_clips(clips: Any, mean: List[float], std: List[float], layout: str) -> Any:
    """A batch of uint8 clips as the reference's float transform gives them:
    ``x / 255``, then ``(x - mean) / std`` per channel when mean and std are
    given, in torch's float32 arithmetic on the tensor's own device (the
    CUDA path's normalize: the daemon served uint8 for it).

    `clips` is [n, T, 3, h, w] (layout "TCHW") or [n, 3, T, h, w] ("CTHW").
    Against the daemon's float32 clip, the one difference is the daemon's
    rounding of its resized values to uint8: at most 0.5 / 255 / std."""
    from ._torch import _torch_module
    torch = _torch_module()
    out = clips.to(torch.float32).div_(255)
    if mean:
        shape = [1, 1, 3, 1, 1] if layout.upper() == "TCHW" else [1, 3, 1, 1, 1]
        m = torch.tensor(mean, dtype=torch.float32, device=out.device).view(shape)
        d = torch.tensor(std, dtype=torch.float32, device=out.device).view(shape)
        out.sub_(m).div_(d)
    return out


def video_request(dataset: Any, transform: Any, frames_per_clip: Optional[int],
                  step_between_clips: Optional[int], frame_rate: Optional[int],
                  clip_layout: Optional[str], extensions: Any) -> Dict[str, Any]:
    """What Loader sends for a video dataset: {"root", "options" (attach
    keywords), "pipeline" (keywords)}; `dataset` a Kinetics object or a path."""
    output_format = None
    if not isinstance(dataset, (str, bytes, os.PathLike)):
        vc = dataset.video_clips
        if getattr(dataset, "target_transform", None) is not None:
            raise _native.InvalidRequestError(
                "dataset: target_transform cannot run in the daemon; apply it to the labels")
        if transform is not None and getattr(dataset, "transform", None) is not None:
            raise _native.InvalidRequestError(
                "transform= and the dataset's own transform both given: give one")
        transform = transform if transform is not None else getattr(dataset, "transform", None)
        for k, mine, theirs in (("frames_per_clip", frames_per_clip, vc.num_frames),
                                ("step_between_clips", step_between_clips, vc.step),
                                ("frame_rate", frame_rate, vc.frame_rate)):
            if mine is not None and mine != theirs:
                raise _native.InvalidRequestError(
                    f"{k}={mine} and the dataset's {theirs} disagree; give one")
        frames_per_clip, step_between_clips, frame_rate = vc.num_frames, vc.step, vc.frame_rate
        output_format = getattr(vc, "output_format", "THWC")
        extensions = extensions if extensions is not None else getattr(dataset, "extensions", None)
        root = dataset.split_folder
    else:
        root = dataset
    if frames_per_clip is None:
        raise _native.InvalidRequestError("a video dataset needs frames_per_clip=")
    kw, layout = transform_keywords(transform)
    if output_format == "THWC" and transform is not None:
        raise _native.InvalidRequestError(
            "dataset: Kinetics(output_format='THWC') with a tensor transform: the reference's "
            "transforms take TCHW clips; give output_format='TCHW'")
    if clip_layout is not None:
        if transform is not None and clip_layout.upper() != layout:
            raise _native.InvalidRequestError(
                f"clip_layout={clip_layout!r} and the transform's layout {layout} disagree")
        layout = clip_layout.upper()
    options: Dict[str, Any] = {"frames_per_clip": int(frames_per_clip),
                               "step_between_clips": int(step_between_clips or 1),
                               "frame_rate": int(frame_rate or 0), "clip_layout": layout}
    if extensions is not None:
        options["extensions"] = [str(e) for e in extensions]
    return {"root": root, "options": options, "pipeline": kw}
