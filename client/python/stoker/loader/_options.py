"""What Loader's arguments mean before anything is attached: the Attach
defaults, devices, DataLoader's samplers and keywords, folder datasets, the
keyword JSON sent to the daemon."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

import numpy as np

if TYPE_CHECKING:
    import torch

from .. import _native
from ._torch import _torch_module

#: The Attach defaults, one definition for every front end (stoker.proto's
#: AttachDefaults): {"batch_size": 64, "ring_depth": 4, "ring_max_depth": 16}.
ATTACH_DEFAULTS: Dict[str, int] = _native.attach_defaults()

Images = Union["torch.Tensor", List["torch.Tensor"]]  # noqa: F821

#: What Python makes of the daemon's output for the two output names only it
#: knows: bfloat16 is a cast of the daemon's float32, channels_last an
#: [n, 3, H, W] view of its NHWC (torch.channels_last memory format).
_PYTHON_DTYPES = {"bfloat16": "float32"}
_PYTHON_LAYOUTS = {"channels_last": "nhwc"}


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise _native.InvalidRequestError(f"${name}={v!r} is not an integer") from None


# ---------------------------------------------------------------------------
# Device copies (device=...): parsing and availability.

_NO_INDEX = -1  # device='cuda': the current device at each batch


def _parse_device(device: Any) -> Optional[int]:
    """None/'cpu' -> None (CPU tensors); 'cuda' -> _NO_INDEX; 'cuda:N', N, torch.device -> N."""
    if device is None:
        return None
    if isinstance(device, bool):
        raise _native.InvalidRequestError(f"device must be None, 'cuda', 'cuda:N' or an int, "
                                          f"got {device!r}")
    if isinstance(device, (int, np.integer)):
        if device < 0:
            raise _native.InvalidRequestError(f"device index must be >= 0, got {device}")
        return int(device)
    kind, index = None, None
    if isinstance(device, str):
        kind, _, rest = device.strip().lower().partition(":")
        if rest:
            try:
                index = int(rest)
            except ValueError:
                raise _native.InvalidRequestError(f"bad device {device!r}") from None
    elif hasattr(device, "type") and hasattr(device, "index"):  # torch.device
        kind, index = device.type, device.index
    if kind == "cpu" and index is None:
        return None
    if kind != "cuda" or (index is not None and index < 0):
        raise _native.InvalidRequestError(
            f"device must be None, 'cpu', 'cuda', 'cuda:N', an int or a torch.device, got "
            f"{device!r}")
    return _NO_INDEX if index is None else index


def _cuda_unavailable_reason() -> Optional[str]:
    """Why CUDA tensors cannot be made here, or None when they can."""
    status = _native.cuda_status()
    if not status["built_with_cuda"]:
        return ("the stoker module was built without CUDA (no CUDA toolkit at build time, or "
                "-DSTOKER_CUDA=OFF)")
    torch = _torch_module()
    if not torch.cuda.is_available():
        return (f"torch.cuda.is_available() is False (torch {torch.__version__}, built for CUDA "
                f"{torch.version.cuda}; no driver or no GPU?)")
    if status["error"]:
        return status["error"]
    return None


def _default_client_name(rank: int) -> str:
    """'train.py[1234] rank 3 (local 1)': shown in the daemon's status and logs."""
    name = f"{os.path.basename(sys.argv[0] or 'python')}[{os.getpid()}]"
    local = os.environ.get("LOCAL_RANK")
    if os.environ.get("WORLD_SIZE") or rank:
        name += f" rank {rank}" + (f" (local {local})" if local else "")
    return name


class ConcurrentIterationError(_native.StokerError):
    """A Loader serves one iteration at a time: a second one was started from
    another thread while one was live, or an iterator superseded by a newer
    iteration of the same Loader was advanced."""

    code = "FAILED_PRECONDITION"


class ForkedLoaderError(_native.StokerError):
    """A Loader was used in a child forked from the process that made it."""

    code = "FAILED_PRECONDITION"


class _Unset:
    """The default of a keyword that is not sent unless given (see
    _PIPELINE_KEYWORDS)."""

    def __repr__(self) -> str:
        return "<default>"

    def __reduce__(self) -> str:
        return "_UNSET"  # pickles as the module's one instance


_UNSET: Any = _Unset()

#: Loader's pipeline keywords that a transform decides (giving one beside
#: transform= is an error), in the order errors name them. Each one given is
#: sent to the daemon as given, in the keyword JSON of
#: pipeline/pipeline_spec.h, which alone holds their defaults and checks;
#: one not given is not sent.
_PIPELINE_KEYWORDS = ("pipeline", "ops", "size", "resize_size", "scale", "ratio", "flip_prob",
                      "interpolation", "antialias", "dtype", "layout", "mean", "std")
#: Pipeline keywords sent as given beside a transform too.
_DECODE_KEYWORDS = ("exact_decode", "apply_exif_orientation", "mask_dtype", "mask_fill",
                    "box_min_size", "box_min_visibility")
#: ring_slots when neither it nor prefetch_factor is given: the daemon's
#: default, a ring of 4 that deepens for a trainer that consumes in bursts.
_DEFAULT_RING_SLOTS = 0

#: DataLoader keywords that stoker cannot honour: (the value that means
#: "not used", so that it is accepted, and the stoker way).
_DATALOADER_ONLY: Dict[str, Tuple[Any, str]] = {
    "sampler": (None, "the daemon samples each epoch (torch's RandomSampler and "
                "SequentialSampler are read as shuffle=True / False, a DistributedSampler as "
                "its rank, num_replicas, shuffle, seed and set_epoch): use shuffle= and seed= "
                "for the order and rank=/world_size= to shard it"),
    "batch_sampler": (None, "the daemon makes the batches: use batch_size= and drop_last="),
    "collate_fn": (None, "batches come from the ring already collated, (images, labels) "
                   "tensors (iter_batches() adds indices and statuses); no collate_fn runs. "
                   "For mixup/cutmix in a collate_fn (torchvision's reference recipe) give "
                   "batch_transform=stoker.RandomChoice([stoker.MixUp(...), "
                   "stoker.CutMix(...)])"),
    "worker_init_fn": (None, "the daemon's worker processes decode in C++: no Python worker "
                       "runs a worker_init_fn"),
    "generator": (None, "the order and the augmentations are drawn from seed= and the epoch"),
    "timeout": (0, "use timeout_ms= (milliseconds; -1, the default: no limit)"),
    "multiprocessing_context": (None, "no Python worker processes are started (the daemon's "
                                "workers decode), so there is no multiprocessing_context"),
    "pin_memory_device": ("", "use device='cuda' or 'cuda:N': batches are copied to that GPU "
                          "straight from the ring"),
    "in_order": (True, "batches always come in order"),
}


def _is_distributed_sampler(sampler: Any) -> bool:
    return any(c.__name__ == "DistributedSampler" and c.__module__.startswith("torch.")
               for c in type(sampler).__mro__) and hasattr(sampler, "epoch")


def _plain_sampler_shuffle(sampler: Any, dataset: Any) -> Optional[bool]:
    """torch's RandomSampler -> True, SequentialSampler -> False (what torch's
    own reference scripts pass without DDP): the same orders as shuffle=.
    None for any other sampler. A RandomSampler that draws with replacement
    or another number of samples, or one over another dataset, is refused
    by name: the daemon serves each sample once per epoch."""
    names = [c.__name__ for c in type(sampler).__mro__
             if c.__module__.startswith("torch.utils.data")]
    if not names or names[0] not in ("RandomSampler", "SequentialSampler"):
        return None
    kind = names[0]
    source = getattr(sampler, "data_source", dataset)
    if source is not dataset:
        raise _native.InvalidRequestError(
            f"sampler={kind}(...) samples another dataset than the one given to the Loader")
    if kind == "SequentialSampler":
        return False
    if getattr(sampler, "replacement", False):
        raise _native.InvalidRequestError(
            "sampler=RandomSampler(replacement=True) cannot be honoured: the daemon serves "
            "every sample exactly once per epoch; use shuffle=True")
    if getattr(sampler, "_num_samples", None) is not None:
        raise _native.InvalidRequestError(
            f"sampler=RandomSampler(num_samples={sampler._num_samples}) cannot be honoured: "
            "the daemon serves every sample exactly once per epoch; use shuffle=True (a "
            "subset: a manifest of those files)")
    if getattr(sampler, "generator", None) is not None:
        raise _native.InvalidRequestError(
            "sampler=RandomSampler(generator=...) cannot be honoured: the order is drawn from "
            "seed= and the epoch; give seed= instead")
    return True


def _refuse_dataloader_keywords(keywords: Dict[str, Any]) -> None:
    for k, v in keywords.items():
        if k not in _DATALOADER_ONLY:
            raise TypeError(f"Loader() got an unexpected keyword argument {k!r}")
        unused, how = _DATALOADER_ONLY[k]
        if not (v is unused or (unused is not None and v == unused)):
            raise _native.InvalidRequestError(
                f"stoker.Loader: DataLoader's {k}={v!r} cannot be honoured: {how}")


def _folder_dataset(ds: Any, transform: Any) -> Dict[str, Any]:
    """Reads a torchvision ImageFolder / DatasetFolder given as the dataset
    (recognized by class name: torchvision is not imported): its root and
    transform; refuses, naming it, what the daemon cannot do as it would."""
    mro = {c.__name__: c for c in type(ds).__mro__}
    if "DatasetFolder" not in mro:
        raise _native.InvalidRequestError(
            f"dataset: a {type(ds).__module__}.{type(ds).__name__} object: stoker reads image "
            "folders, manifests and WebDataset shards, decoded by its daemon, not items made by "
            "Python code. Pass the folder's path (or a torchvision ImageFolder of it), a "
            "manifest file or a shard pattern")

    def refuse(what: str, why: str) -> "_native.InvalidRequestError":
        return _native.InvalidRequestError(
            f"dataset: {type(ds).__name__}({what}) cannot be honoured: {why}")

    if getattr(ds, "target_transform", None) is not None:
        raise refuse(f"target_transform={ds.target_transform!r}",
                     "labels come from the daemon as class indices; apply it to the labels "
                     "in your loop")
    load = getattr(ds, "loader", None)
    if not (getattr(load, "__module__", "") == "torchvision.datasets.folder"
            and getattr(load, "__name__", "") in ("default_loader", "pil_loader",
                                                  "accimage_loader")):
        raise refuse(f"loader={load!r}", "the daemon opens and decodes the files itself; a "
                     "custom loader cannot run there")
    folder_module = sys.modules.get("torchvision.datasets.folder")
    standard = getattr(folder_module, "IMG_EXTENSIONS", None)
    extensions = getattr(ds, "extensions", None)
    if extensions is None:
        raise refuse("is_valid_file=...", "the daemon chooses the files by their extension, "
                     "as ImageFolder's default does; a custom is_valid_file cannot run there")
    if standard is not None and {e.lower() for e in extensions} != {e.lower() for e in standard}:
        raise refuse(f"extensions={extensions!r}",
                     "the daemon chooses the files by ImageFolder's default extensions")
    base = mro["DatasetFolder"]
    if type(ds).__getitem__ is not base.__getitem__:
        raise refuse("...", f"{type(ds).__name__} has a __getitem__ of its own, which cannot "
                     "run in the daemon")
    own = getattr(ds, "transform", None)
    if own is not None and transform is not None:
        raise _native.InvalidRequestError(
            f"a transform both on the dataset ({type(ds).__name__}(transform={own!r})) and as "
            f"Loader(transform={transform!r}): give it once")
    targets = getattr(ds, "targets", None) or [s[1] for s in ds.samples]
    return {"root": ds.root, "transform": own if own is not None else transform,
            "has_empty_classes": len(set(targets)) < len(ds.classes)}


def _keywords_json(keywords: Dict[str, Any]) -> str:
    """Pipeline keywords as the JSON object the C++ module reads."""

    def plain(v: Any) -> Any:  # numpy scalars and arrays, torch tensors
        if hasattr(v, "tolist"):
            return v.tolist()
        raise TypeError(f"{v!r} ({type(v).__name__}) is not a number, str, list or dict")

    try:
        return json.dumps(keywords, default=plain)
    except (TypeError, ValueError) as e:
        raise _native.InvalidRequestError(f"pipeline keywords {keywords!r}: {e}") from None
