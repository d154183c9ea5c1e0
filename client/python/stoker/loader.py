"""`stoker.Loader`: a torch DataLoader look-alike fed by a stokerd daemon."""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

if TYPE_CHECKING:
    import torch

from . import _native, _private, _transforms
from . import batch as _batch
from .client import SOCKET_ENV, Client

_torch = None  # imported on first use: `import stoker` does not pay for torch

#: The Attach defaults, one definition for every front end (stoker.proto's
#: AttachDefaults): {"batch_size": 64, "ring_depth": 4, "ring_max_depth": 16}.
ATTACH_DEFAULTS: Dict[str, int] = _native.attach_defaults()


def _torch_module():
    global _torch
    if _torch is None:
        with _interrupts_deferred():
            import torch  # noqa: PLC0415

        _torch = torch
    return _torch


class _interrupts_deferred:
    """Holds Ctrl-C back for the duration of a block that must not be cut in
    two: a KeyboardInterrupt inside a first ``import torch`` leaves torch
    half-imported for good (``name '_C' is not defined`` at the next import).
    On the main thread, SIGINT's Python handler is swapped for one that only
    notes it; the interrupt is raised (or the handler called) when the block
    ends. (Masking the signal would not do: any other thread may take it.)"""

    def __enter__(self) -> "_interrupts_deferred":
        self._caught: List[Any] = []
        self._old: Any = None
        if threading.current_thread() is threading.main_thread():
            try:
                self._old = signal.signal(signal.SIGINT,
                                          lambda *a: self._caught.append(a))
            except ValueError:  # not the main interpreter
                self._old = None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._old is None:
            return
        signal.signal(signal.SIGINT, self._old)
        if self._caught and exc[0] is None:
            if self._old is signal.default_int_handler:
                raise KeyboardInterrupt
            if callable(self._old):
                self._old(*self._caught[0])


Images = Union["torch.Tensor", List["torch.Tensor"]]  # noqa: F821

#: What Python makes of the daemon's output for the two output names only it
#: knows: bfloat16 is a cast of the daemon's float32, channels_last an
#: [n, 3, H, W] view of its NHWC (torch.channels_last memory format).
_PYTHON_DTYPES = {"bfloat16": "float32"}
_PYTHON_LAYOUTS = {"channels_last": "nhwc"}


class BatchView:
    """One batch with its bookkeeping, as `Loader.iter_batches` yields it.

    Attributes:
        images: a torch tensor [n,H,W,3] (NHWC) or [n,3,H,W] (NCHW) viewing the
            ring slot (unless the loader copies), or, for the variable-size
            decode pipeline, a list of per-sample tensors; with a
            batch_transform, the images it returns.
        labels: int64 tensor [n]; with a batch_transform, what it returns
            (MixUp / CutMix: soft labels [n, num_classes]).
        indices: int64 ndarray [n], the dataset index of each sample's pixels
            (ImageFolder's sample order), a replacement's for a replaced sample.
        planned_indices: int64 ndarray [n], the index the sampler planned.
        statuses: int32 ndarray [n]: 0 ok, 1 replaced, 2 failed (zero pixels).
        epoch, batch_in_epoch: where the batch lies in the session's order.
        sequence: the batch's number in the session (0, 1, 2, ...).
        masks: for a dataset with masks (a segmentation set), a uint8 (or,
            for mask_dtype 'uint16', int32: torch has no uint16) tensor
            [n,H,W] moved with its images (a
            list for the variable-size pipeline; a failed sample's is all
            mask_fill), else None. `images, masks = view` then.
        targets: for a dataset with boxes (COCO), a list of n dicts as
            torchvision's detection reference has them ("boxes" float32
            [k, 4] XYXY, "labels" int64 [k], "iscrowd" int64 [k],
            "image_id"; with masks also "masks" [H, W]), else None.
            `images, targets = view` then.
        image_sizes: each image's own (height, width), before any padding
            (pad_to_multiple); a failed any-size sample's is (0, 0).
    """

    __slots__ = ("images", "labels", "indices", "planned_indices", "statuses", "epoch",
                 "batch_in_epoch", "sequence", "masks", "targets", "image_sizes")

    def __init__(self, images: Images, labels: Any, indices: np.ndarray,
                 planned_indices: np.ndarray, statuses: np.ndarray, epoch: int,
                 batch_in_epoch: int, sequence: int, masks: Any = None,
                 targets: Any = None,
                 image_sizes: Optional[List[Tuple[int, int]]] = None) -> None:
        self.images = images
        self.masks = masks
        self.targets = targets
        self.image_sizes = image_sizes
        self.labels = labels
        self.indices = indices
        self.planned_indices = planned_indices
        self.statuses = statuses
        self.epoch = epoch
        self.batch_in_epoch = batch_in_epoch
        self.sequence = sequence

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self):  # `images, labels = view` (or images, masks / targets) works
        yield self.images
        yield (self.targets if self.targets is not None
               else self.labels if self.masks is None else self.masks)

    def __repr__(self) -> str:
        return (f"BatchView(epoch={self.epoch}, batch_in_epoch={self.batch_in_epoch}, "
                f"n={len(self.indices)})")


def _targets(torch: Any, boxes: tuple, labels: np.ndarray, masks: Any) -> List[Dict[str, Any]]:
    """A detection batch's targets, one dict per sample as torchvision's
    detection reference builds them (copies of the slot's box arrays)."""
    xyxy, box_labels, flags, counts = boxes
    out = []
    for i in range(len(counts)):
        k = int(counts[i])
        t = {"boxes": torch.from_numpy(xyxy[i, :k].copy()),
             "labels": torch.from_numpy(box_labels[i, :k].copy()),
             "iscrowd": torch.from_numpy(flags[i, :k].astype(np.int64)),
             "image_id": int(labels[i])}
        if masks is not None:
            t["masks"] = masks[i]
        out.append(t)
    return out


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
    torch = _torch or _torch_module()
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


class DatasetView:
    """`Loader.dataset` when the loader was given a path: the dataset the
    daemon serves, with torchvision ImageFolder's attributes.

    ``len()``, `classes` and `class_to_idx` come from the session (attaching
    if needed); `samples` (``(path, class_index)`` in dataset index order, the
    paths joined to `root`), `targets` and `imgs` are listed by the daemon on
    first use and kept.
    """

    def __init__(self, loader: "Loader") -> None:
        self._loader = weakref.ref(loader)
        #: The dataset's path as given to the Loader (ImageFolder's root).
        self.root: str = loader.dataset_path
        self._samples: Optional[List[Tuple[str, int]]] = None

    def _attached(self) -> "Loader":
        ld = self._loader()
        if ld is None:
            raise _native.StokerError("the Loader of this dataset is gone")
        ld.attach()
        return ld

    def __len__(self) -> int:
        return int(self._attached().info["dataset_size"])

    @property
    def classes(self) -> List[str]:
        """Class names, index = label (ImageFolder's sorted folder names)."""
        return self._attached().class_names

    @property
    def class_to_idx(self) -> Dict[str, int]:
        return {c: i for i, c in enumerate(self.classes)}

    @property
    def samples(self) -> List[Tuple[str, int]]:
        """``[(path, class_index)]``, sample i being the dataset's index i."""
        if self._samples is None:
            ld = self._attached()
            n = int(ld.info["dataset_size"])
            out: List[Tuple[str, int]] = []
            while len(out) < n:
                assert ld._session is not None
                paths, labels = ld._session.list_samples(len(out), min(65536, n - len(out)))
                if not paths:
                    break
                out += [(os.path.join(self.root, p), int(c)) for p, c in zip(paths, labels)]
            self._samples = out
        return self._samples

    @property
    def imgs(self) -> List[Tuple[str, int]]:
        return self.samples

    @property
    def targets(self) -> List[int]:
        return [c for _, c in self.samples]

    def __repr__(self) -> str:
        return f"stoker.DatasetView(root={self.root!r})"


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


class Loader:
    """Batches of decoded, augmented images from stokerd, as torch tensors.

    A drop-in for torch's DataLoader over an image folder: ``Loader(dataset,
    batch_size, shuffle, ...)`` takes DataLoader's first three arguments in
    its order, a path or a torchvision ``ImageFolder`` (whose transform it
    runs in the daemon), and DataLoader's ``pin_memory``,
    ``persistent_workers``, ``prefetch_factor`` and ``num_workers``, and a
    torch ``DistributedSampler`` as ``sampler`` (its num_replicas, rank,
    shuffle and seed become world_size, rank, shuffle and seed; its
    ``set_epoch(e)`` is followed as `set_epoch` at the next iteration; its
    drop_last is not used: the daemon shards each epoch disjointly itself).
    DataLoader's other keywords (other samplers, ``batch_sampler``,
    ``collate_fn``, ``worker_init_fn``, ``generator``, ``timeout``,
    ``multiprocessing_context``, ``pin_memory_device``) are accepted at their
    "unused" defaults and otherwise refused with the stoker way named.

    Iterating yields one epoch, like torch's DataLoader: ``len(loader)`` batches
    of ``(images, labels)``, then StopIteration; the next ``iter()`` serves the
    next epoch of the same session (the daemon keeps prefetching across the
    boundary). `iter_batches` yields `BatchView` objects that also carry the
    dataset indices.

    Every ``for`` over the loader yields a whole epoch. An iteration that stops
    before its epoch's end (a peek with ``next(iter(loader))``, a ``break``) is
    undone: the next ``iter()`` serves that same epoch again, whole, from where
    the stopped iteration began (its first batch, or a restored state's), and
    `state_dict` points there. An epoch counts as served once all its batches
    were yielded, StopIteration or not (``zip``). A loop that stops early
    every epoch should call `set_epoch` each epoch, as with
    DistributedSampler (a RuntimeWarning says so when one epoch is stopped
    early twice).

    One iteration at a time: starting a second one from another thread while
    one is live raises `ConcurrentIterationError` (give each thread its own
    Loader; they may share a daemon), and so does advancing an iterator that a
    newer ``iter()`` on the same thread superseded. `set_epoch`,
    `load_state_dict` and `close` end an open iterator (StopIteration).

    Processes: a Loader belongs to the process that made it; used in a forked
    child it raises `ForkedLoaderError` at once. It pickles (multiprocessing
    'spawn', mp.spawn) as its arguments as given and its position
    (`state_dict`): the copy attaches a session of its own, to the same
    socket, or to a private daemon of its own when none was given, and yields
    the batches the original would have yielded next.

    ``loader.dataset`` is, as DataLoader's, the ImageFolder given, else a
    `DatasetView` with ImageFolder's attributes (``len()``, ``root``,
    ``classes``, ``class_to_idx``, ``samples``, ``targets``, ``imgs``) read
    from the daemon; ``loader.dataset_path`` is the path.

    Zero copy: ``images`` is a tensor over a slot of the shared-memory ring.
    It stays valid, and unchanged, for as long as you hold it (even after
    `close`); the slot returns to the daemon when the tensor (and every view
    of it) is garbage-collected. The ring is ``ring_slots`` deep (4 by
    default, perhaps deeper later), so holding ``ring_slots - 1`` batches
    already stops prefetching, and asking for a
    batch while holding all of them raises `RingExhaustedError` rather than
    waiting forever. Pass ``copy=True`` for private tensors (the slot returns
    at once), or move the tensor to the GPU and drop it.

    CUDA tensors: with ``device='cuda'`` (or ``'cuda:N'``) the daemon serves
    uint8 NHWC (the fewest bytes through PCIe), and each batch is DMA'd from
    its ring slot (pinned once per session with cudaHostRegister) into a
    tensor allocated by torch's caching allocator on that device, then
    normalized there by a CUDA kernel, all on
    ``torch.cuda.current_stream(device)``: the tensor is ready for any work
    on that stream with no synchronize. The slot goes back to the daemon once
    the copy has completed on the GPU. Labels are copied to the device too.
    A pipeline that ends in RandomErasing (whose values are in the output's
    normalized units) is instead served by the daemon in its output dtype and
    layout, and copied to the device as it is.

    The session attaches lazily, at the first iteration, ``len()``, ``info``
    or `attach`. `close` (or leaving a ``with`` block) detaches.

    No daemon given (``socket=None`` and ``$STOKER_SOCKET`` unset): the loader
    starts a private stokerd for this process, with the dataset's folder as
    its data root and ``num_workers`` workers, and stops it when the last
    loader using it closes (or at exit; a daemon whose trainer was killed
    stops by itself). The same script attaches to a sidecar when given its
    socket.

    Resume: `state_dict` returns a small token (seed, epoch, batch) and
    `load_state_dict` restores it, in this process or a new one, with any
    daemon and any worker count: the batches that follow are the same, pixel
    for pixel, as those an uninterrupted run would have yielded. Like
    DistributedSampler, `set_epoch` picks the epoch the next iteration serves.

    Args:
        dataset: the dataset, relative to the daemon's ``--data-root`` (or
            absolute inside it): an ImageFolder tree, a manifest file or a
            WebDataset shard pattern. Sample i is
            ``torchvision.datasets.ImageFolder(root).samples[i]``. With a
            private daemon: a path as usual (relative to the working folder).
            Or a ``torchvision.datasets.ImageFolder`` (or DatasetFolder with
            ImageFolder's extensions): its root is the path, its transform the
            transform, and after attach the daemon's classes and size must be
            the object's. Refused, naming it: a target_transform, a custom
            loader or is_valid_file, a subclass's own __getitem__, a transform
            both on it and as ``transform=``, and any other Dataset (stoker
            reads image folders, manifests and WebDataset shards).
        batch_size: samples per batch (DataLoader's second argument).
        shuffle: permute each epoch (else dataset order). DataLoader's third
            argument; note the default: True here, False in DataLoader.
        socket: the daemon's Unix socket; None: ``$STOKER_SOCKET``; neither:
            a private daemon (see above).
        transform: a torchvision transform (``T.Compose([...])`` or a list) to
            run in the daemon, read one to one into ``ops``: RandomResizedCrop,
            Resize (bilinear), CenterCrop, RandomCrop, RandomHorizontalFlip,
            RandomVerticalFlip, ColorJitter, Grayscale, RandomGrayscale,
            GaussianBlur, RandomRotation, RandomAffine (nearest or bilinear),
            RandomPosterize, RandomSolarize, RandomAdjustSharpness,
            RandomAutocontrast, RandomEqualize, RandomInvert, the policies
            AutoAugment, RandAugment, TrivialAugmentWide and AugMix (nearest
            or bilinear), then ToTensor or PILToTensor, ConvertImageDtype,
            Normalize (a 1-value mean/std is broadcast), then RandomErasing
            (on the output tensor, last, as torchvision applies it after
            Normalize). torchvision's reference ``ClassificationPresetTrain``
            (any callable whose ``transforms`` is a Compose) is read as its
            Compose. Others, and an op out of its place, are refused with an
            error naming them. It decides every pipeline argument from
            ``pipeline`` to ``std`` below: giving one of them too is an error
            naming both. Without a fixed-size crop or resize the images cannot
            be stacked: see ``pad_to_multiple``.
        batch_transform: None, or a transform of whole batches applied to the
            (images, labels) of each batch before it is yielded (in
            `iter_batches` too: BatchView's images and labels are the
            results): `stoker.MixUp`, `stoker.CutMix`, or
            `stoker.RandomChoice` of them (torchvision's reference recipes'
            mixup / cutmix), which yield mixed images and soft labels [n,
            num_classes]. They need floating-point images of one size (a
            uint8 output is refused here) and draw their parameters from a
            CPU generator seeded from (seed, epoch, batch in the epoch,
            rank) (`stoker.batch.batch_seed`): a resumed loader mixes each
            batch as the uninterrupted run did, and CUDA batches are mixed on
            their device exactly as on the CPU. Any other callable
            ``f(images, labels) -> (images, labels)`` is called as it is.

        The pipeline arguments, from ``pipeline`` to ``std`` and
        ``exact_decode``, ``apply_exif_orientation``: each one given is sent
        to the daemon as given; one not given is not sent, and the daemon's
        pipeline module (pipeline/pipeline_spec.h, the one place that
        holds the defaults and the checks) decides it. `effective_pipeline`
        shows the result, before attach.

        pipeline: the preset: 'train' (RandomResizedCrop + RandomHorizontalFlip),
            'eval' (Resize + CenterCrop) or 'decode' (the whole image).
        ops: the op list as data instead of a preset: a list of
            ``{"TorchvisionName": {parameters}}`` as stoker.proto's JSON
            mapping spells them, e.g. ``[{"RandomCrop": {"size": [32],
            "padding": [4]}}, {"RandomHorizontalFlip": {}}]``. Not with
            ``transform`` (which is read into ops) or the preset's keywords.
        size: the output size, an int or (height, width): the preset's crop,
            or with ``ops`` the size every image must come out at. Each
            image's own size (no size, no fixed-size op) is batched by
            ``pad_to_multiple`` (or as a list: see there).
        resize_size: the eval preset's Resize (its shorter side).
        scale, ratio: the train preset's RandomResizedCrop ranges.
        flip_prob: the train preset's RandomHorizontalFlip probability.
        interpolation: the preset's resampling: 'bilinear'.
        antialias: the preset's resampling: True (PIL's antialiased resize, as
            torchvision's PIL backend) or False (plain 2-tap bilinear).
        dtype: 'uint8' (raw pixels) or 'float32'/'float16'/'bfloat16',
            normalized ``(x/255 - mean) / std`` (bfloat16: rounded from the
            float32 value to nearest even; on the CPU path a cast of the
            daemon's float32).
        layout: 'nhwc' or 'nchw' (the tensor's shape), or 'channels_last': an
            [n, 3, H, W] tensor in torch.channels_last memory format (the
            daemon serves NHWC).
        mean, std: per RGB channel, 3 values or 1 for all.
        seed: the order of epoch e is a permutation from (seed, e); a sample's
            augmentation is keyed by (seed, epoch, index): the same seed gives
            the same batches whatever the daemon's worker count, and
            `load_state_dict` resumes exactly. None (the default), as
            DataLoader's RandomSampler: one seed drawn from torch's global
            RNG at the first attach, so ``torch.manual_seed`` reproduces a
            run and an unseeded run differs from process to process (a
            resumed run does not replay the first run's epoch 0); with more
            than one rank, 0, as DistributedSampler's default (every rank
            must shard the same permutation). `state_dict` records the seed
            in use.
        epochs: epochs to serve; None: without end.
        rank, world_size: the global rank and world size, DistributedSampler's:
            each rank reads a disjoint 1/world_size of every epoch. None:
            ``$RANK`` / ``$WORLD_SIZE`` (as torchrun sets them), else 0 / 1.
        drop_last: drop each epoch's last, partial batch.
        ring_slots: the ring's depth in batches, >= 2: the batch in use and
            ``ring_slots - 1`` prefetched. Default: 4, deepened by the daemon
            (up to 16, within its shared-memory budget) while the trainer
            consumes in bursts and waits between them.
        failure_policy: 'skip' (a bad file is replaced by another sample of the
            shard) or 'error' (`SampleError` naming the file).
        timeout_ms: the longest wait for one batch (-1: no limit; a dead daemon
            is noticed within seconds regardless).
        copy: yield private copies instead of views of the ring.
        output: 'tuple' (DataLoader's shape: ``(images, labels)``, ``(images,
            masks)`` for a segmentation set, ``(images, targets)`` for a
            detection set) or 'dict': each batch a dict of every field of the
            samples by name (``loader.fields`` lists them: "image", "label",
            then "mask" or "boxes", "box_labels", "box_flags"): a field of
            one shape for every sample is one tensor ``[n, ...]``, any other
            a list of each sample's tensor of its own shape (any-size images
            and masks; each sample's boxes ``[k, 4]``, their labels and
            flags ``[k]``).
        client_name: shown in the daemon's status and logs.
        device: None (CPU tensors), 'cuda' (the current CUDA device at each
            batch), 'cuda:N', N or a torch.device: yield CUDA tensors, copied
            and normalized on the GPU (see above). Without CUDA (torch without
            it, no driver or GPU, or stoker built without it) iterating raises
            `CudaUnavailableError`, unless ``cpu_fallback``.
        cpu_fallback: with ``device`` set and CUDA unavailable, yield CPU
            tensors (normalized by the daemon) instead of raising, with one
            RuntimeWarning.
        register_ring: pin the ring with cudaHostRegister for device copies
            (False: copy through pinned staging buffers; for diagnosis).
        num_workers: decode processes of a private daemon (None: this rank's
            share of the CPUs this process may use, by ``LOCAL_WORLD_SIZE``,
            less one; 0, DataLoader's "in the main process", means one: the
            daemon always decodes). A sidecar daemon has its own
            ``--workers``; then this is ignored.
        data_root: the folder a private daemon may read beneath. None: any
            file this process's user may read (the private daemon runs as
            that user, on an owner-only socket), so a dataset of links into
            another tree, a manifest naming ``../`` paths and an
            ``annotations=`` or ``masks=`` path anywhere all work; paths are
            relative to the working folder. Give one to confine the daemon.
            With a sidecar (``socket=`` or ``$STOKER_SOCKET``), which has its
            own ``--data-root``: accepted when that root holds this folder
            (the dataset is then sent as its absolute path; said once at
            info level), refused naming both roots when it does not.
        pin_memory: DataLoader's: each CPU batch is copied into page-locked
            memory (``tensor.pin_memory()``) for faster, asynchronous copies to
            the GPU; the copy frees the ring slot at once. Without CUDA, one
            RuntimeWarning and no pinning, as DataLoader. Ignored with
            ``device='cuda'``, the zero-copy path (the ring itself is pinned).
        persistent_workers: DataLoader's; accepted, no effect: the daemon's
            workers always persist across epochs.
        prefetch_factor: DataLoader's: batches prefetched ahead of the one in
            use; sets ``ring_slots = prefetch_factor + 1`` (giving both is an
            error). Stoker's prefetch is for the whole loader, not per worker.
        apply_exif_orientation: rotate and flip each image as its EXIF
            orientation says (torchvision's ImageFolder does not, nor does the
            daemon unless asked).
        exact_decode: decode every image at full size before resizing (no
            reduced-size DCT decode): slower, closest to PIL's pixels.
        mask_dtype, mask_fill: for a dataset with masks (a manifest whose
            "#columns:" line names a mask column): the masks' dtype, 'uint8'
            (the default) or 'uint16', and their value where an op pads or
            moves the image past its edge (default 255, "ignore", as
            torchvision's segmentation reference pads its targets). The
            loader then yields (images, masks): masks [n,H,W] moved with
            their images by the same ops (NEAREST), the labels in
            `iter_batches()`'s views.
        annotations: a COCO instances JSON (relative to the data root);
            `dataset` is then its images folder, as torchvision's
            CocoDetection(root, annFile) takes them. The loader yields
            (images, targets), targets a list of dicts as torchvision's
            detection reference has them: "boxes" float32 [k, 4] (XYXY in
            pixels of the output, moved with the image by the same ops),
            "labels" int64 [k] (category ids), "iscrowd" int64 [k] and
            "image_id" (the COCO id). A sample whose boxes are not boxes
            (NaN, a negative width) fails as a sample, counted.
        masks, image_suffix, mask_suffix: a masks folder beside the images
            folder given as `dataset` (VOC's SegmentationClass beside
            JPEGImages, Cityscapes' gtFine beside leftImg8bit): each image
            <key><image_suffix>.<ext> pairs with the mask
            <key><mask_suffix>.png at the same path in the masks folder
            (Cityscapes: image_suffix="_leftImg8bit",
            mask_suffix="_gtFine_labelIds"); images without a mask are left
            out. The loader yields (images, masks) as for a manifest with a
            mask column.
        box_min_size, box_min_visibility: for a dataset with boxes: after
            the ops, a box is kept when its width and height are > 0 and at
            least box_min_size pixels (default 0; torchvision v2's
            SanitizeBoundingBoxes uses 1) and at least box_min_visibility
            of its area is left inside the image (default 0).
        pad_to_multiple: for images whose sizes vary (RandomResize,
            RandomShortestSize, Resize(int), no crop): each batch is one
            tensor [n, 3, H, W], every image at its top left over zeros, H and
            W the batch's largest height and width rounded up to a multiple
            of this (32 as torchvision's detection models pad; 1 as its
            segmentation reference's collate_fn, which pads the masks with
            255: masks are padded with mask_fill). Each image's own size is in
            ``last_image_sizes`` and BatchView.image_sizes. Without it such
            images come as a list of tensors for a COCO set (annotations=, as
            the detection reference's collate_fn gives them) and are refused
            otherwise (unless batch_size=1, a list of one). Padding makes one
            copy of the batch (on the device for device='cuda', after one
            copy a sample).
        allow_empty: ImageFolder's allow_empty: keep class folders with no
            image file as classes with no samples (otherwise attach fails
            naming them). None: False, or, for an ImageFolder object given,
            whether it has such classes.
        skip_unsupported_formats: accepted and ignored (stoker 0.1 read JPEG
            only and this left the other formats out; every format of
            torchvision's IMG_EXTENSIONS is read now).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = ATTACH_DEFAULTS["batch_size"],
        shuffle: bool = True,
        *,
        socket: Optional[str] = None,
        pipeline: Any = _UNSET,
        size: Any = _UNSET,
        resize_size: Any = _UNSET,
        scale: Any = _UNSET,
        ratio: Any = _UNSET,
        flip_prob: Any = _UNSET,
        interpolation: Any = _UNSET,
        antialias: Any = _UNSET,
        ops: Any = _UNSET,
        dtype: Any = _UNSET,
        layout: Any = _UNSET,
        mean: Any = _UNSET,
        std: Any = _UNSET,
        seed: Optional[int] = None,
        epochs: Optional[int] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        drop_last: bool = False,
        ring_slots: Any = _UNSET,
        failure_policy: str = "skip",
        timeout_ms: int = -1,
        copy: bool = False,
        client_name: Optional[str] = None,
        device: Any = None,
        cpu_fallback: bool = False,
        register_ring: bool = True,
        transform: Any = None,
        batch_transform: Any = None,
        num_workers: Optional[int] = None,
        data_root: Optional[Union[str, "os.PathLike[str]"]] = None,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: Optional[int] = None,
        apply_exif_orientation: Any = _UNSET,
        exact_decode: Any = _UNSET,
        mask_dtype: Any = _UNSET,
        mask_fill: Any = _UNSET,
        annotations: Optional[Union[str, "os.PathLike[str]"]] = None,
        masks: Optional[Union[str, "os.PathLike[str]"]] = None,
        image_suffix: str = "",
        mask_suffix: str = "",
        box_min_size: Any = _UNSET,
        box_min_visibility: Any = _UNSET,
        pad_to_multiple: Optional[int] = None,
        allow_empty: Optional[bool] = None,
        skip_unsupported_formats: bool = False,
        output: str = "tuple",
        **dataloader_keywords: Any,
    ) -> None:
        # The arguments as given (before anything below rebinds them): what a
        # pickled loader is rebuilt from.
        self._init_args: Dict[str, Any] = {k: v for k, v in locals().items()
                                           if k not in ("self", "dataloader_keywords")}
        self._init_args.update(dataloader_keywords)
        self._pid = os.getpid()
        # DataLoader's sampler: a DistributedSampler maps onto rank/world_size/
        # shuffle/seed, and its set_epoch is followed (_follow_sampler).
        self._sampler = dataloader_keywords.pop("sampler", None)
        if self._sampler is not None:
            order = _plain_sampler_shuffle(self._sampler, dataset)
            if order is not None:  # RandomSampler / SequentialSampler: an order, nothing more
                shuffle, self._sampler = order, None
            elif not _is_distributed_sampler(self._sampler):
                dataloader_keywords["sampler"], self._sampler = self._sampler, None  # refused
            else:
                sm = self._sampler
                for k, theirs, ours in (("num_replicas", sm.num_replicas, world_size),
                                        ("rank", sm.rank, rank)):
                    if ours is not None and int(ours) != int(theirs):
                        raise _native.InvalidRequestError(
                            f"sampler=DistributedSampler({k}={theirs}) and "
                            f"{'world_size' if k == 'num_replicas' else k}={ours} disagree")
                if getattr(sm, "dataset", dataset) is not dataset:
                    raise _native.InvalidRequestError(
                        "sampler=DistributedSampler(...) samples another dataset than the "
                        "one given to the Loader")
                world_size, rank = int(sm.num_replicas), int(sm.rank)
                shuffle, seed = bool(sm.shuffle), int(sm.seed)
        self._sampler_epoch = None if self._sampler is None else self._sampler.epoch
        _refuse_dataloader_keywords(dataloader_keywords)
        # A torchvision ImageFolder: its root, transform and classes.
        self._dataset_object: Any = None
        if not isinstance(dataset, (str, bytes, os.PathLike)):
            folder = _folder_dataset(dataset, transform)
            self._dataset_object = dataset
            dataset, transform = folder["root"], folder["transform"]
            if allow_empty is None:
                allow_empty = folder["has_empty_classes"]
        args = locals()
        given = {k: args[k] for k in _PIPELINE_KEYWORDS if args[k] is not _UNSET}
        if transform is not None:
            if "ops" in given:
                raise _native.InvalidRequestError(
                    f"transform= and ops= both given: both are the op list (transform= is read "
                    f"into ops: {_transforms.step_setting('ops', transform)}). Give one")
            for k, v in list(given.items())[:1]:
                raise _native.InvalidRequestError(
                    f"transform= and {k}={v!r} both given: {k} is decided by the transform's "
                    f"{_transforms.step_setting(k, transform)}. Drop {k}=, or change the "
                    "transform")
            given = _transforms.loader_options(transform)
        given.update((k, args[k]) for k in _DECODE_KEYWORDS if args[k] is not _UNSET)
        if prefetch_factor is not None:
            if ring_slots is not _UNSET:
                raise _native.InvalidRequestError(
                    f"prefetch_factor={prefetch_factor!r} and ring_slots={ring_slots!r} both "
                    "given: both set the prefetch depth (ring_slots = prefetch_factor + 1); "
                    "give one")
            if isinstance(prefetch_factor, bool) or int(prefetch_factor) < 1:
                raise _native.InvalidRequestError(
                    f"prefetch_factor must be at least 1, got {prefetch_factor!r}")
            ring_slots = int(prefetch_factor) + 1
        elif ring_slots is _UNSET:
            ring_slots = _DEFAULT_RING_SLOTS
        if batch_size is None or isinstance(batch_size, bool):
            raise _native.InvalidRequestError(
                f"batch_size={batch_size!r}: stoker yields batches; give an int >= 1 "
                "(batch_size=1 for single samples)")
        if isinstance(batch_size, int) and batch_size < 1:
            raise _native.InvalidRequestError(f"batch_size must be at least 1, not {batch_size}")
        self._pipeline_request(given, batch_size, transform, pad_to_multiple,
                               annotations is not None)
        self.batch_transform = batch_transform
        if epochs is not None and epochs < 1:
            raise _native.InvalidRequestError("epochs must be at least 1 (None: without end)")
        if world_size is None:
            world_size = _env_int("WORLD_SIZE")
        if rank is None:
            rank = _env_int("RANK")
        #: The dataset's path, as given (for an ImageFolder object, its root).
        self.dataset_path: str = os.fspath(dataset)
        if isinstance(self.dataset_path, bytes):
            self.dataset_path = os.fsdecode(self.dataset_path)
        self._dataset_view: Optional[DatasetView] = None
        #: The daemon's socket; None until a private daemon is started.
        self.socket: Optional[str] = (os.fspath(socket) if socket
                                      else os.environ.get(SOCKET_ENV) or None)
        self._private_wanted = self.socket is None
        self._private_root: Optional[str] = None if data_root is None else os.fspath(data_root)
        # data_root= with a sidecar: the dataset as it reads it, once checked.
        self._sidecar_path: Optional[str] = None
        self._private: Optional[_private.PrivateDaemon] = None
        self._private_path = ""  # the dataset as the private daemon sees it
        if num_workers is not None and int(num_workers) < 0:
            raise _native.InvalidRequestError(f"num_workers must be >= 0, got {num_workers}")
        # DataLoader's 0 (load in the main process) has no equivalent: the
        # daemon's worker processes decode. 0 means one of them.
        self.num_workers: Optional[int] = (None if num_workers is None
                                           else max(1, int(num_workers)))
        self.batch_size: int = batch_size
        self.epochs: Optional[int] = epochs
        self.rank: int = 0 if rank is None else rank
        self.world_size: int = 1 if world_size is None else world_size
        self.timeout_ms: int = timeout_ms
        self.copy: bool = bool(copy)
        if output not in ("tuple", "dict"):
            raise _native.InvalidRequestError(
                f"output={output!r}: use 'tuple' (DataLoader's (images, labels)) or 'dict' "
                f"(every field of the samples by name)")
        self.output: str = output
        self.pin_memory: bool = bool(pin_memory)
        self.persistent_workers: bool = bool(persistent_workers)  # the daemon's always are
        self._pin: Optional[bool] = None  # pin_memory and CUDA present; known at iteration
        # Device copies: what the user asked for; what the daemon serves is
        # decided at attach (_resolve_mode), once CUDA's availability is known.
        self.device: Any = device
        self.cpu_fallback: bool = bool(cpu_fallback)
        self._device_index: Optional[int] = _parse_device(device)
        self._mode = "cpu"  # 'cpu', 'cuda' or 'cpu_fallback'; set at attach
        self._staging_warned = False
        # seed=None: drawn from torch's global RNG at the first attach
        # (_draw_seed), unless sharded across ranks.
        if seed is None and self.world_size > 1:
            seed = 0
        self._seed_known = seed is not None
        self._options: Dict[str, Any] = dict(
            batch_size=batch_size, seed=0 if seed is None else int(seed), shuffle=bool(shuffle),
            epochs=0 if epochs is None else epochs, rank=self.rank,
            world_size=self.world_size, drop_last=bool(drop_last), ring_slots=ring_slots,
            failure_policy=failure_policy, register_ring_with_cuda=bool(register_ring),
            client_name=client_name or _default_client_name(self.rank),
            allow_empty=bool(allow_empty), skip_unsupported_formats=bool(skip_unsupported_formats))
        if annotations is not None:
            self._options["annotations"] = os.fspath(annotations)
        if masks is not None:
            self._options.update(masks=os.fspath(masks), image_suffix=image_suffix,
                                 mask_suffix=mask_suffix)
        self._client: Optional[Client] = None
        self._session: Optional[_native.Session] = None
        self._info: Optional[Dict[str, Any]] = None
        self._bpe = 0  # batches per epoch
        # The global batch number the session began at; the one it delivers
        # next is this plus the native session's count (_next_global), which
        # no interrupt can get out of step with what the ring handed out.
        self._session_origin = 0
        # Where the next iteration begins: an epoch is left only once all its
        # batches were yielded (an iteration stopped early is served again).
        self._next_epoch = 0
        self._resume_batch = 0
        # (epoch, next batch) of the iteration begun and not yet through its
        # epoch (live or abandoned); None between epochs.
        self._in_epoch: Optional[Tuple[int, int]] = None
        self._live: Optional["weakref.ReferenceType[_EpochIterator]"] = None
        self._abandoned: Dict[int, int] = {}  # epoch -> iterations that stopped early
        self._abandon_warned = False
        # Re-entrant: a garbage collection inside may finalize objects whose
        # teardown reaches back here.
        self._lock = threading.RLock()
        self._token_dataset_size: Optional[int] = None  # to check after attach
        self._epoch = 0
        self._generation = 0  # bumped by set_epoch, load_state_dict, close: open iterators end
        self._closed = False
        self.last_indices: Optional[np.ndarray] = None
        """Dataset indices of the most recently yielded batch (int64 ndarray)."""
        self.last_image_sizes: Optional[List[Tuple[int, int]]] = None
        """The (height, width) of each image of the most recently yielded
        batch, before padding (pad_to_multiple)."""

    # ------------------------------------------------------------------
    # The pipeline

    def _pipeline_request(self, given: Dict[str, Any], batch_size: int, transform: Any,
                          pad_to_multiple: Optional[int], detection: bool) -> None:
        """Takes the pipeline keywords `given` (those of Loader, or what a
        transform was read into): what attach sends, and the output they give
        after defaults, from the daemon's own pipeline module run here
        (_native.effective_pipeline): no pipeline default lives in Python.
        Then how a batch of images whose sizes vary is given: one padded
        tensor (pad_to_multiple), a list for a detection set (annotations=,
        as the detection reference's collate_fn), else refused.

        Raises InvalidRequestError naming a bad keyword or op, or saying how
        to batch images whose sizes vary.
        """
        if pad_to_multiple is not None and (isinstance(pad_to_multiple, bool)
                                            or not isinstance(pad_to_multiple, int)
                                            or not 1 <= pad_to_multiple <= 4096):
            raise _native.InvalidRequestError(
                f"pad_to_multiple must be an int within 1..4096 (32 for torchvision's detection "
                f"models, 1 to pad to the largest image only), got {pad_to_multiple!r}")
        self._pad_to_multiple = pad_to_multiple
        request = dict(given)
        dtype, layout = request.get("dtype"), request.get("layout")
        self._bfloat16 = isinstance(dtype, str) and dtype.lower() in _PYTHON_DTYPES
        if self._bfloat16:
            request["dtype"] = _PYTHON_DTYPES[dtype.lower()]
        self._channels_last = isinstance(layout, str) and layout.lower() in _PYTHON_LAYOUTS
        if self._channels_last:
            request["layout"] = _PYTHON_LAYOUTS[layout.lower()]
        self._request = request
        effective = json.loads(_native.effective_pipeline(_keywords_json(request)))
        self._mask_fill = effective["mask_fill"]  # Effective fills it in
        if (not effective.get("size") and batch_size != 1 and pad_to_multiple is None
                and not detection):
            # Each image keeps a size of its own: stacked, they would not fit
            # (DataLoader's default collate raises at the first batch).
            if transform is not None:
                raise _native.InvalidRequestError(
                    f"transform={transform!r} has no fixed-size crop or resize, so its images "
                    f"keep their own sizes and cannot be stacked (batch_size={batch_size}): add "
                    "RandomResizedCrop(size) (training) or Resize(int) + CenterCrop(size) "
                    "(evaluation), or RandomCrop(size) or Resize((h, w)), to the transform, or "
                    "give pad_to_multiple= (each batch padded to its largest image), or use "
                    "batch_size=1")
            raise _native.InvalidRequestError(
                f"the pipeline {given!r} gives images of their own sizes, which cannot be "
                f"stacked (batch_size={batch_size}): give pad_to_multiple= (each batch padded "
                "to its largest image, rounded up to a multiple: 32 for torchvision's "
                "detection models, 1 for its segmentation reference), or use a preset with a "
                "crop ('train', 'eval'), or add a fixed-size op to ops= (RandomResizedCrop, "
                "CenterCrop, RandomCrop, Resize([h, w])), or give size= (every image must then "
                "come out at that size; others fail as samples), or use batch_size=1")
        #: The effective pipeline of this loader's request (the preset's
        #: name, the ops, size and output after defaults), as the daemon
        #: reports it in info['effective_pipeline'] on the CPU path.
        self.effective_pipeline: Dict[str, Any] = effective
        #: The preset's name ('train', 'eval', 'decode'), or '' for an op list.
        self.pipeline: str = str(effective.get("preset") or "")

    @property
    def batch_transform(self) -> Any:
        """The transform of whole batches (MixUp, CutMix, ...), or None. May be
        set (checked as the keyword is), e.g. once `class_names` is known;
        it applies from the next batch yielded."""
        return self._batch_transform

    @batch_transform.setter
    def batch_transform(self, bt: Any) -> None:
        self._check_batch_transform(bt)
        self._batch_transform = bt

    def _check_batch_transform(self, bt: Any) -> None:
        """Refuses a batch transform that cannot work on this loader's batches."""
        if bt is None:
            return
        if not callable(bt):
            raise _native.InvalidRequestError(
                f"batch_transform={bt!r} is not callable: give stoker.MixUp, stoker.CutMix, "
                "stoker.RandomChoice of them, or a function (images, labels) -> (images, labels)")
        if not isinstance(bt, _batch.BatchTransform):
            return
        if not self.effective_pipeline.get("size"):
            raise _native.InvalidRequestError(
                f"batch_transform={bt!r} mixes whole batches, which need images of one size: "
                "add a fixed-size crop or resize")
        if self.effective_pipeline["output"]["dtype"] == "uint8":
            raise _native.InvalidRequestError(
                f"batch_transform={bt!r} needs floating-point images, and this loader serves "
                "uint8 (mixing pixels would truncate them): use dtype='float32' (or float16, "
                "bfloat16), or end the transform with ToTensor() or "
                "ConvertImageDtype(torch.float) and Normalize")
        info = getattr(self, "_info", None)  # known once attached
        if info is not None:
            self._check_batch_classes(bt, info)

    def _check_batch_classes(self, bt: Any, info: Dict[str, Any]) -> None:
        """A batch transform's one-hot labels must hold every class served."""
        classes = len(info["class_names"])
        if isinstance(bt, _batch.BatchTransform) and bt.num_classes < classes:
            raise _native.InvalidRequestError(
                f"batch_transform={bt!r}: num_classes={bt.num_classes}, and the dataset "
                f"{self.dataset_path!r} has {classes} classes: give num_classes={classes} "
                "(len(loader.class_names))")

    def _erases(self) -> bool:
        """Whether the pipeline erases its output (RandomErasing): its values are
        in the output's units, so the daemon must serve the output itself."""
        return any("RandomErasing" in op for op in self.effective_pipeline.get("ops", ()))

    def _daemon_request(self) -> str:
        """The pipeline keywords the daemon is sent for the current mode: as
        given on the CPU; uint8 to be normalized on the GPU for device copies
        (unless the pipeline erases its output: then the output as given)."""
        request = dict(self._request)
        if self._mode == "cuda" and not self._erases():
            out = self.effective_pipeline["output"]
            if out["dtype"] != "uint8":  # normalized on the GPU from uint8 NHWC
                request.update(dtype="uint8", layout="nhwc")
                request.pop("mean", None)
                request.pop("std", None)
        return _keywords_json(request)

    # ------------------------------------------------------------------
    # Pickling: the configuration as given and the position

    def __getstate__(self) -> Dict[str, Any]:
        # The batch transform as it is now (it may have been set since).
        args = dict(self._init_args, batch_transform=self._batch_transform)
        return {"stoker_loader_args": args, "state": self.state_dict()}

    def __setstate__(self, d: Dict[str, Any]) -> None:
        args = dict(d["stoker_loader_args"])
        self.__init__(args.pop("dataset"), **args)  # type: ignore[misc]
        self.load_state_dict(d["state"])

    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise ForkedLoaderError(
                f"this stoker.Loader was made in process {self._pid} and is used in the child "
                f"{os.getpid()} that process forked: its session and its gRPC channel belong "
                "to the parent. Create a Loader in the child, or pass the loader to a spawned "
                "process (multiprocessing 'spawn', mp.spawn): it pickles, and the copy attaches "
                "a session of its own at the same position")

    # ------------------------------------------------------------------
    # Session management

    def attach(self, start_epoch: Optional[int] = None, start_batch: int = 0) -> "Loader":
        """Attaches now (otherwise the first iteration does). Returns self.

        Args:
            start_epoch, start_batch: where the session starts (None: where the
                next iteration begins: epoch 0, or what `set_epoch` or
                `load_state_dict` said). Ignored when already attached.

        Raises InvalidRequestError, DaemonUnavailableError, ResourceExhaustedError.
        """
        self._check_process()
        if self._closed:
            raise _native.StokerError("the loader is closed")
        if self._session is not None:
            return self
        if start_epoch is None:
            start_epoch, start_batch = self._next_epoch, self._resume_batch
        if self.epochs is not None and start_epoch >= self.epochs:
            # A token saved after the last epoch: nothing is left to read, yet
            # len() and info still need a session. The daemon refuses a start
            # past the end, so the session starts at the last epoch (iteration
            # yields nothing).
            start_epoch, start_batch = self.epochs - 1, 0
        self._mode = self._resolve_mode()
        if not self._seed_known:
            self._draw_seed()
        dataset = self.dataset_path
        if self._private_wanted:
            if self._private is None:
                self._private, self._private_path = _private.acquire(
                    self.dataset_path, self.num_workers, self._private_root)
                self.socket = self._private.socket
                self._client = None
            dataset = self._private_path
        if self._client is None:
            self._client = Client(self.socket)
        options = dict(self._options)
        if self._private_wanted:
            # Paths the caller named are the caller's: relative to the working
            # folder (the private daemon's root is "/" or data_root).
            for key in ("annotations", "masks"):
                if key in options and os.path.exists(options[key]):
                    options[key] = os.path.abspath(options[key])
        elif self._private_root is not None:
            dataset = self._sidecar_dataset()
        self._session = self._client.attach(dataset, pipeline=self._daemon_request(),
                                            start_epoch=start_epoch, start_batch=start_batch,
                                            **options)
        info = self._session.info
        try:
            info["effective_pipeline"] = json.loads(info.pop("effective_pipeline_json") or "{}")
        except ValueError:
            info["effective_pipeline"] = {}
        self._info = info
        self._bpe = info["batches_per_epoch"]
        self._session_origin = start_epoch * self._bpe + start_batch
        try:
            self._check_token_dataset_size()
            self._check_dataset_object()
            self._check_batch_classes(self._batch_transform, info)
        except _native.InvalidRequestError:
            self.close()
            raise
        return self

    def _sidecar_dataset(self) -> str:
        """data_root= given while a sidecar serves: the dataset as the sidecar
        should read it, if its --data-root holds data_root; else refused
        naming both roots. Asked of the sidecar once (reattaches reuse it)."""
        if self._sidecar_path is not None:
            return self._sidecar_path
        assert self._client is not None and self._private_root is not None
        theirs = str(self._client.status().get("config", {}).get("data_root") or "")
        ours = os.path.realpath(self._private_root)
        if not theirs or os.path.commonpath([os.path.realpath(theirs), ours]) != \
                os.path.realpath(theirs):
            raise _native.InvalidRequestError(
                f"data_root={self._private_root!r} is for a private daemon, and this loader "
                f"attaches to the stokerd at {self.socket!r}, whose --data-root is "
                f"{theirs or '(unknown)'!r} and does not hold {ours!r}: start that stokerd "
                "with a --data-root that holds it, or drop data_root= and give the dataset "
                "relative to the sidecar's root")
        path = self.dataset_path
        if not os.path.isabs(path) and os.path.exists(path):
            path = os.path.abspath(path)
        logging.getLogger("stoker").info(
            "stoker.Loader: data_root=%r is served by the sidecar stokerd at %s, whose "
            "--data-root %r holds it; reading %r", self._private_root, self.socket, theirs, path)
        self._sidecar_path = path
        return path

    def _draw_seed(self) -> None:
        """seed=None: one seed from torch's global RNG, drawn as RandomSampler
        draws its own (a 63-bit int64)."""
        torch = _torch or _torch_module()
        self._options["seed"] = int(torch.empty((), dtype=torch.int64).random_().item())
        self._seed_known = True

    def _check_dataset_object(self) -> None:
        """Once attached: the daemon must see the dataset an ImageFolder given
        as the dataset describes."""
        ds = self._dataset_object
        if ds is None:
            return
        assert self._info is not None
        have = (int(self._info["dataset_size"]), list(self._info["class_names"]))
        want = (len(ds.samples), list(ds.classes))
        if have != want:
            raise _native.InvalidRequestError(
                f"dataset: the {type(ds).__name__} object has {want[0]} samples in classes "
                f"{want[1]}, the daemon finds {have[0]} samples in classes {have[1]} in "
                f"{self.dataset_path!r}: the folder changed since the object was made, or the "
                "object was made with other extensions or an is_valid_file of its own")

    def _check_token_dataset_size(self) -> None:
        """Once attached: refuses a loaded state saved with a dataset of another size."""
        assert self._info is not None
        want, self._token_dataset_size = self._token_dataset_size, None
        have = self._info["dataset_size"]
        if want is not None and want != have:
            raise _native.InvalidRequestError(
                f"load_state_dict: the state was saved with a dataset of {want} samples; "
                f"{self.dataset_path!r} now has {have}, so its order differs")

    # ------------------------------------------------------------------
    # Epochs and resume

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration serve `epoch` (DistributedSampler.set_epoch).

        Iterating already serves epochs 0, 1, 2, ... in turn, so calling this
        each epoch is harmless. Setting the epoch that a `load_state_dict`
        is about to resume keeps the resume position; any other epoch starts
        at its first batch.
        """
        epoch = int(epoch)
        if epoch < 0:
            raise _native.InvalidRequestError(f"epoch must be >= 0, got {epoch}")
        with self._lock:
            if epoch != self._next_epoch:
                self._next_epoch = epoch
                self._resume_batch = 0
            self._end_iteration()  # an iterator still open ends

    def state_dict(self) -> Dict[str, Any]:
        """Where the loader stands: a small JSON-able token for `load_state_dict`.

        Taken inside the loop over an epoch it points at the batch after the
        last one yielded; taken between epochs, at the next epoch's first
        batch; after an iteration stopped early (a ``break``, a peek), where
        the next iteration starts: that epoch again, from where the stopped
        iteration began. Ranks iterate in step, so rank 0's token restores
        every rank.
        """
        if not self._seed_known:
            self._draw_seed()  # the token must name the seed the run will use
        if self._in_epoch is not None and self._live_iterator() is not None:
            epoch, batch = self._in_epoch
        else:
            epoch, batch = self._next_epoch, self._resume_batch
        if self._bpe and batch >= self._bpe:
            epoch, batch = epoch + 1, 0
        o = self._options
        return {"stoker_loader": 1, "seed": int(o["seed"]), "epoch": int(epoch),
                "batch": int(batch), "batch_size": int(o["batch_size"]),
                "world_size": int(o["world_size"]), "shuffle": bool(o["shuffle"]),
                "drop_last": bool(o["drop_last"]),
                "dataset_size": None if self._info is None else int(self._info["dataset_size"])}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores a `state_dict` token: the next iteration continues exactly
        where the saved loader stood (the rest of that epoch, then the next
        ones), the same batches pixel for pixel.

        Raises InvalidRequestError if the token does not fit this loader
        (another batch size, world size, shuffle or drop_last; or, at attach,
        a dataset whose size changed).
        """
        if not isinstance(state, dict) or state.get("stoker_loader") != 1:
            raise _native.InvalidRequestError(
                f"load_state_dict: not a stoker.Loader state: {state!r}")
        o = self._options
        for key in ("batch_size", "world_size", "shuffle", "drop_last"):
            if key in state and state[key] != o[key]:
                raise _native.InvalidRequestError(
                    f"load_state_dict: the state was saved with {key}={state[key]!r}, this "
                    f"loader has {key}={o[key]!r}")
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if epoch < 0 or batch < 0:
            raise _native.InvalidRequestError(f"load_state_dict: bad position {epoch}/{batch}")
        if int(state["seed"]) != o["seed"] and self._session is not None:
            self._drop_session()  # the order depends on the seed: attach anew
        o["seed"] = int(state["seed"])
        self._seed_known = True
        with self._lock:
            self._next_epoch, self._resume_batch = epoch, batch
            self._epoch = epoch
            self._end_iteration()
        self._token_dataset_size = state.get("dataset_size")
        if self._session is not None:
            self._check_token_dataset_size()

    # ------------------------------------------------------------------
    # Device copies

    def _resolve_mode(self) -> str:
        """'cpu', 'cuda' or 'cpu_fallback'; raises CudaUnavailableError."""
        if self._device_index is None:
            return "cpu"
        why = _cuda_unavailable_reason()
        if why is None:
            torch = _torch or _torch_module()
            count = torch.cuda.device_count()
            if self._device_index != _NO_INDEX and self._device_index >= count:
                raise _native.InvalidRequestError(
                    f"device={self.device!r}: this process sees {count} CUDA device(s)")
            return "cuda"
        if not self.cpu_fallback:
            raise _native.CudaUnavailableError(
                f"stoker.Loader(device={self.device!r}) needs CUDA: {why}. Pass "
                "cpu_fallback=True to get CPU tensors instead.")
        if self._mode != "cpu_fallback":
            warnings.warn(f"stoker.Loader(device={self.device!r}): {why}; yielding CPU tensors "
                          "(cpu_fallback=True)", RuntimeWarning, stacklevel=4)
        return "cpu_fallback"

    @property
    def device_status(self) -> Optional[Dict[str, Any]]:
        """The session's device-copy path: {'mode': 'none' | 'registered' | 'staging',
        'detail', 'copies', 'bytes', 'in_flight', ...}; None before attach."""
        return None if self._session is None else self._session.device_status

    def _to_cuda(self, images: Any) -> Any:
        """The batch copied to the device in the layout the daemon served
        (NHWC or NCHW), normalized there when the daemon served uint8 for it:
        one tensor, or for a list of any-size images a list (one copy a
        sample). The slot goes back once every copy of it completed."""
        torch = _torch or _torch_module()
        index = self._device_index
        if index is None or index == _NO_INDEX:
            index = torch.cuda.current_device()
        dev = torch.device("cuda", index)
        stream = torch.cuda.current_stream(dev)
        if isinstance(images, list):
            out: Any = [self._copy_to_cuda(images, a, i, dev, index, stream)
                        for i, a in enumerate(images)]
        else:
            out = self._copy_to_cuda(images, images, -1, dev, index, stream)
        if not self._staging_warned and self._session is not None:
            self._staging_warned = True
            st = self._session.device_status
            if st["mode"] == "staging":
                warnings.warn(f"stoker: {st['detail']}", RuntimeWarning, stacklevel=4)
        return out

    def _copy_to_cuda(self, owner: Any, src: np.ndarray, sample: int, dev: Any, index: int,
                      stream: Any) -> "torch.Tensor":
        """One copy: the batch `owner` (sample -1) or its sample `sample`,
        whose host array is `src`."""
        torch = _torch or _torch_module()
        output = self.effective_pipeline["output"]  # what the user asked for
        if output["dtype"] == "uint8" or self._erases():
            # Served as it is (a pipeline that erases its output is served
            # float, normalized by the daemon: bytes copied unchanged).
            tdtype = torch.from_numpy(np.empty(0, dtype=src.dtype)).dtype
            out = torch.empty(src.shape, dtype=tdtype, device=dev)
            if out.numel() != 0:  # a failed any-size sample is 0 x 0
                _native.copy_to_device(owner, stream.cuda_stream, out.data_ptr(),
                                       out.numel() * out.element_size(), dtype="asis",
                                       device=index, sample=sample)
            return out.to(torch.bfloat16) if self._bfloat16 else out  # the daemon served float32
        single = src.ndim == 3  # one sample, [h, w, 3] uint8
        n, h, w, _ = (1,) + src.shape if single else src.shape
        dtype = "bfloat16" if self._bfloat16 else output["dtype"]
        tdtype = {"float32": torch.float32, "float16": torch.float16,
                  "bfloat16": torch.bfloat16}[dtype]
        nchw = output["layout"] == "nchw"
        out = torch.empty((n, 3, h, w) if nchw else (n, h, w, 3), dtype=tdtype, device=dev)
        if out.numel() != 0:
            # The uint8 pixels land in scratch from torch's caching allocator:
            # freed below, it is reused only by work ordered after ours on
            # this stream.
            scratch = torch.empty(src.nbytes, dtype=torch.uint8, device=dev)
            _native.copy_to_device(owner, stream.cuda_stream, out.data_ptr(),
                                   out.numel() * out.element_size(), dtype=dtype,
                                   layout=output["layout"], mean=output["mean"],
                                   std=output["std"], device=index, scratch=scratch.data_ptr(),
                                   scratch_bytes=scratch.numel(), sample=sample)
            del scratch
        return out[0] if single else out

    def close(self) -> None:
        """Detaches the session (and stops a private daemon that no other
        loader uses). Tensors already yielded stay valid. Idempotent."""
        self._closed = True
        self._generation += 1
        self._live = None
        s, self._session = self._session, None
        p, self._private = self._private, None
        try:
            if s is not None:
                s.detach()
        finally:
            if p is not None:
                _private.release(p)

    def __del__(self) -> None:
        if getattr(self, "_private", None) is not None:
            try:
                self.close()
            except Exception:  # noqa: BLE001 (interpreter shutdown, dead daemon)
                pass

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.close()
        except _native.StokerError:
            if exc_type is None:
                raise  # else keep the exception that ended the block

    def _drop_session(self) -> None:
        s, self._session = self._session, None
        if s is not None:
            try:
                s.detach()
            except _native.StokerError:
                pass

    def _reattach(self, epoch: int, batch: int) -> None:
        self._drop_session()
        self.attach(start_epoch=epoch, start_batch=batch)

    # ------------------------------------------------------------------
    # Properties

    @property
    def info(self) -> Dict[str, Any]:
        """The session as the daemon describes it (attaches if needed): dataset_size,
        shard_size, batches_per_epoch, height, width, dtype, layout, ring_slots,
        class_names, effective_pipeline, ..."""
        self.attach()
        assert self._info is not None
        return self._info

    @property
    def fields(self) -> List[Tuple[str, str, Tuple[int, ...], bool]]:
        """Every field of the samples, in the ring's order (attaches if
        needed): (name, dtype, max_shape, fixed_shape); a max_shape entry 0
        is unbounded (an any-size image's height and width). What
        ``output='dict'`` yields by name."""
        return [tuple(f) for f in self.info["fields"]]

    @property
    def class_names(self) -> List[str]:
        """Class names, index = label (sorted folder names for an ImageFolder)."""
        return list(self.info["class_names"])

    @property
    def epoch(self) -> int:
        """The epoch of the most recently yielded batch (before any: the first epoch)."""
        return self._epoch

    def __len__(self) -> int:
        """Batches per epoch of this rank (attaches if needed)."""
        return int(self.info["batches_per_epoch"])

    @property
    def dataset(self) -> Any:
        """The dataset, as DataLoader's: the ImageFolder object given, else a
        `DatasetView` with ImageFolder's attributes (len, root, classes,
        class_to_idx, samples, targets, imgs). The path: `dataset_path`."""
        if self._dataset_object is not None:
            return self._dataset_object
        if self._dataset_view is None:
            self._dataset_view = DatasetView(self)
        return self._dataset_view

    def __repr__(self) -> str:
        return (f"stoker.Loader({self.dataset_path!r}, socket={self.socket or '(private)'!r}, "
                f"batch_size={self.batch_size}, pipeline={self.pipeline or 'ops'!r})")

    # ------------------------------------------------------------------
    # Iteration

    def __iter__(self) -> Iterator[Tuple[Images, Any]]:
        """One epoch of (images, labels)."""
        self._check_process()
        return _EpochIterator(self, views=False)

    def iter_batches(self) -> Iterator[BatchView]:
        """One epoch of `BatchView` (images, labels, indices, epoch, ...)."""
        self._check_process()
        return _EpochIterator(self, views=True)

    def _live_iterator(self) -> Optional["_EpochIterator"]:
        """The iterator of the iteration under way, if it is still referenced
        and neither through its epoch nor ended by set_epoch and the like."""
        it = None if self._live is None else self._live()
        if it is None or it._ended or it._superseded or it._generation != self._generation:
            return None
        return it

    def _end_iteration(self) -> None:
        """set_epoch / load_state_dict: an open iterator ends (StopIteration)
        and the next iteration starts where they say."""
        self._in_epoch = None
        self._live = None
        self._generation += 1

    def _epoch_served(self, epoch: int) -> None:
        """All of `epoch`'s batches were yielded: the next iteration serves the next."""
        self._next_epoch, self._resume_batch = epoch + 1, 0
        self._in_epoch = None
        self._live = None

    def _begin_epoch(self, it: "_EpochIterator") -> Tuple[int, int, int]:
        """Makes `it` the iteration under way and positions the session at the
        epoch it serves; returns (epoch, first batch, generation)."""
        with self._lock:
            if self._closed:
                raise _native.StokerError("the loader is closed")
            prev = self._live_iterator()
            if prev is not None and prev is not it:
                if prev._thread is not threading.current_thread() and prev._thread.is_alive():
                    raise ConcurrentIterationError(
                        f"stoker.Loader: thread {prev._thread.name!r} is iterating this Loader "
                        f"and thread {threading.current_thread().name!r} started another "
                        "iteration. A Loader serves one iteration at a time: give each "
                        "thread its own Loader (they may share one daemon: the same socket=)")
                prev._superseded = True
            if self._in_epoch is not None:
                self._count_abandoned(self._in_epoch[0])
            self._follow_sampler()
            self.attach()
            self._generation += 1
            epoch, first = self._next_epoch, self._resume_batch
            if self.epochs is not None and epoch >= self.epochs:
                self._in_epoch = None
                self._live = None
                return epoch, first, self._generation
            if self._pin is None:
                self._pin = self._pinning()
            self._in_epoch = (epoch, first)
            self._live = weakref.ref(it)
            behind = epoch * self._bpe + first - self._next_global
            if behind > 0 and behind <= int(self._info["ring_slots"]) and self._session.held == 0:
                # set_epoch / load_state_dict went a little ahead: drop what is
                # probably already in the ring. (Not while one of its batches is
                # still alive: the slots that batch holds would come round
                # before the new epoch's first batches could.)
                for _ in range(behind):
                    try:
                        self._next_raw()
                    except _native.SampleError:
                        pass  # a failed batch nobody wants
            elif behind != 0:
                # Further ahead, or behind (an iteration stopped early and its
                # epoch is served again; set_epoch / load_state_dict went
                # back): restart the session there.
                self._reattach(epoch, first)
            return epoch, first, self._generation

    def _follow_sampler(self) -> None:
        """A DistributedSampler given: its set_epoch(e) since the last
        iteration is this loader's set_epoch(e)."""
        if self._sampler is None:
            return
        epoch = self._sampler.epoch
        if epoch != self._sampler_epoch:
            self._sampler_epoch = epoch
            self.set_epoch(epoch)

    def _count_abandoned(self, epoch: int) -> None:
        n = self._abandoned[epoch] = self._abandoned.get(epoch, 0) + 1
        if n >= 2 and not self._abandon_warned:
            self._abandon_warned = True
            warnings.warn(
                f"stoker.Loader: an iteration over epoch {epoch} stopped before the epoch's end "
                "again, so the next one serves epoch {epoch} again from where it began (a "
                "partly read epoch is not lost). A loop that stops early every epoch sees the "
                "same first batches each time: call loader.set_epoch(epoch) at the start of "
                "each epoch, as with DistributedSampler".replace("{epoch}", str(epoch)),
                RuntimeWarning, stacklevel=4)

    def _pinning(self) -> bool:
        """pin_memory=True: whether batches are copied to pinned memory (CUDA is
        present and batches are CPU tensors); warns once when it is not."""
        if not self.pin_memory or self._mode == "cuda":
            return False  # device='cuda' copies straight from the ring
        torch = _torch or _torch_module()
        if torch.cuda.is_available():
            return True
        warnings.warn(
            "stoker.Loader(pin_memory=True): no accelerator is found "
            "(torch.cuda.is_available() is False), so pinned memory is not used. With a GPU, "
            "device='cuda' copies each batch from the ring to the GPU with no pinned copy",
            RuntimeWarning, stacklevel=4)
        return False

    def _batches_left(self, epoch: int, first: int) -> int:
        """Batches an epoch yields from batch `first` on (none past the last)."""
        if self.epochs is not None and epoch >= self.epochs:
            return 0
        return max(0, self._bpe - first)

    def _wait(self) -> tuple:
        """The native wait for the next batch; under the PyTorch profiler it is
        the range "stoker.wait", so a trace shows data stalls where users look
        (a record_function costs ~15 us: entered only while profiling)."""
        assert self._session is not None
        torch = _torch or _torch_module()
        if torch.autograd._profiler_enabled():
            with torch.profiler.record_function("stoker.wait"):
                return self._session.next(self.timeout_ms)
        return self._session.next(self.timeout_ms)

    @property
    def _next_global(self) -> int:
        """The global batch number the session delivers next. Counted by the
        native session: a Ctrl-C that lands after it handed a batch out and
        before Python got it (the batch is lost with its lease) still counts
        it, so the next iteration sees it must reattach (_begin_epoch)."""
        s = self._session
        return self._session_origin + (0 if s is None else int(s.delivered))

    def _next_raw(self) -> tuple:
        assert self._session is not None
        try:
            return self._wait()
        except _native.RingExhaustedError:
            # Leases may be held only by garbage cycles: collect and retry once.
            gc.collect()
            return self._wait()

    def _make(self, raw: tuple, views: bool) -> Any:
        fields, indices, planned, statuses, epoch, batch_in_epoch, sequence = raw
        images = fields["image"][0]
        labels = fields["label"][0].copy()  # a few bytes, free of the slot's lease
        masks = fields["mask"][0] if "mask" in fields else None  # a segmentation set's
        boxes = None  # a detection set's: (xyxy, labels, flags) padded, and each count
        if "boxes" in fields:
            xyxy, shapes = fields["boxes"]
            boxes = (xyxy, fields["box_labels"][0], fields["box_flags"][0], shapes[:, 0].copy())
        torch = _torch or _torch_module()
        if (masks is not None or boxes is not None) and self.batch_transform is not None:
            raise _native.InvalidRequestError(
                "batch_transform (MixUp, CutMix) with a dataset that has masks or boxes: they "
                "mix the images and their labels, not targets; drop batch_transform for "
                "segmentation and detection")
        if masks is not None:
            def tensor(m: np.ndarray) -> "torch.Tensor":
                if m.dtype == np.uint16:  # torch has no uint16 tensors: int32, a copy
                    return torch.from_numpy(m.astype(np.int32))
                return torch.from_numpy(m.copy() if self.copy or self._pin else m)
            masks = [tensor(m) for m in masks] if isinstance(masks, list) else tensor(masks)
        targets = None
        if boxes is not None:  # copies: a few bytes a box, free of the slot's lease
            targets = _targets(torch, boxes, labels, masks)
        nhwc = self.effective_pipeline["output"]["layout"] == "nhwc"  # as served
        if self._mode == "cuda":
            if masks is not None or targets is not None:
                # Before the images: their copy ends the slot's lease.
                index = self._device_index
                if index is None or index == _NO_INDEX:
                    index = torch.cuda.current_device()
                dev = torch.device("cuda", index)
                # On the current stream, as the images' copy (a pageable
                # source: the copy is done when .to returns).
                if masks is not None:
                    masks = [m.to(dev) for m in masks] if isinstance(masks, list) else masks.to(dev)
                if targets is not None:
                    targets = [{k: (v.to(dev) if isinstance(v, torch.Tensor) else v)
                                for k, v in t.items()} for t in targets]
            images = self._to_cuda(images)  # the ndarray's lease ends with it, after the copy
            labels = torch.from_numpy(labels).to(images[0].device if isinstance(images, list)
                                                 else images.device, non_blocking=True)
        else:
            if isinstance(images, list):
                images = [torch.from_numpy(a.copy() if self.copy else a) for a in images]
            else:
                images = torch.from_numpy(images.copy() if self.copy else images)
            if self._bfloat16:  # the daemon served float32
                images = ([a.to(torch.bfloat16) for a in images] if isinstance(images, list)
                          else images.to(torch.bfloat16))
            labels = torch.from_numpy(labels)
        # Each image's own size; with pad_to_multiple one tensor of them all.
        hw = (0, 1) if nhwc else (1, 2)
        if isinstance(images, list):
            sizes = [(int(a.shape[hw[0]]), int(a.shape[hw[1]])) for a in images]
        else:
            sizes = [(int(images.shape[hw[0] + 1]), int(images.shape[hw[1] + 1]))] * len(indices)
        if self._pad_to_multiple is not None:
            images = _batch.pad_to_largest(list(images), self._pad_to_multiple,
                                           channels_last=nhwc)[0]
            if masks is not None:
                masks = _batch.pad_to_largest(list(masks), self._pad_to_multiple,
                                              fill=self._mask_fill)[0]
        if self._channels_last:  # the daemon served NHWC
            images = ([a.permute(2, 0, 1) for a in images] if isinstance(images, list)
                      else images.permute(0, 3, 1, 2))
        if self.batch_transform is not None:  # before pinning: the results are pinned
            images, labels = self._transform_batch(images, labels, epoch, batch_in_epoch)
        if self._pin:  # pin_memory=True: a pinned copy, as DataLoader's (the slot returns)
            images = ([a.pin_memory() for a in images] if isinstance(images, list)
                      else images.pin_memory())
            labels = labels.pin_memory()
            if masks is not None:
                masks = ([m.pin_memory() for m in masks] if isinstance(masks, list)
                         else masks.pin_memory())
        self.last_indices = indices
        self.last_image_sizes = sizes
        self._epoch = epoch
        if views:
            return BatchView(images, labels, indices, planned, statuses, epoch, batch_in_epoch,
                             sequence, masks, targets, sizes)
        if self.output == "dict":
            return self._as_dict(torch, fields, images, labels, masks, targets)
        if targets is not None:
            return images, targets
        return images, (labels if masks is None else masks)

    @staticmethod
    def _as_dict(torch: Any, fields: Dict[str, tuple], images: Any, labels: Any, masks: Any,
                 targets: Any) -> Dict[str, Any]:
        """output='dict': every field by name (see Loader's `output`). The
        image, label and mask as the tuple output gives them (moved, padded,
        pinned alike); the boxes as each sample's own rows."""
        out: Dict[str, Any] = {"image": images, "label": labels}
        if masks is not None:
            out["mask"] = masks
        if targets is not None:
            out["boxes"] = [t["boxes"] for t in targets]
            out["box_labels"] = [t["labels"] for t in targets]
            out["box_flags"] = [t["iscrowd"].to(torch.uint8) for t in targets]
        for name, (values, shapes) in fields.items():  # any other field: copies, by its rule
            if name in out or name in ("boxes", "box_labels", "box_flags"):
                continue
            if isinstance(values, list):
                out[name] = [torch.from_numpy(np.array(v)) for v in values]
            else:
                out[name] = torch.from_numpy(np.array(values))
        return out

    def _transform_batch(self, images: Any, labels: Any, epoch: int,
                         batch_in_epoch: int) -> Tuple[Any, Any]:
        """batch_transform= on one batch: stoker's own with the batch's
        generator and layout; any other callable as it is."""
        bt = self.batch_transform
        if not isinstance(bt, _batch.BatchTransform):
            return bt(images, labels)
        layout = ("nhwc" if self.effective_pipeline["output"]["layout"] == "nhwc"
                  and not self._channels_last else "nchw")
        g = _batch.batch_generator(self._options["seed"], epoch, batch_in_epoch, self.rank)
        return bt(images, labels, generator=g, layout=layout)


class _EpochIterator:
    """Iterates one epoch of a Loader (see Loader._begin_epoch)."""

    __slots__ = ("_loader", "_views", "_epoch", "_generation", "_left", "_started", "_batch",
                 "_thread", "_ended", "_superseded", "__weakref__")

    def __init__(self, loader: Loader, views: bool) -> None:
        self._loader = loader
        self._views = views
        self._started = False
        self._ended = False  # through its epoch, or ended by set_epoch and the like
        self._superseded = False  # a newer iteration of the loader began
        self._left = 0
        self._epoch = 0
        self._batch = 0  # the batch_in_epoch expected next
        self._generation = 0
        self._thread: Optional[threading.Thread] = None

    def __iter__(self) -> "_EpochIterator":
        return self

    def __next__(self) -> Any:
        ld = self._loader
        ld._check_process()
        if not self._started:
            # Attach and position at the first next(), as DataLoader starts its
            # workers: errors surface inside the for loop.
            self._thread = threading.current_thread()
            self._epoch, self._batch, self._generation = ld._begin_epoch(self)
            self._started = True
            self._left = ld._batches_left(self._epoch, self._batch)
        if self._superseded:
            raise ConcurrentIterationError(
                "stoker.Loader: this iterator was superseded by a newer iteration of the same "
                "Loader (iter() was called again before it was through its epoch). A Loader "
                "serves one iteration at a time; the newer one serves this epoch again")
        if (self._ended or self._left <= 0 or self._generation != ld._generation
                or ld._session is None):
            self._ended = True
            raise StopIteration
        try:
            raw = ld._next_raw()
        except _native.EndOfData:
            self._ended = True
            if self._generation == ld._generation:
                ld._epoch_served(self._epoch)
            raise StopIteration from None
        except _native.SampleError:
            self._advance(ld)  # that batch is gone; next() goes on with the following one
            raise
        if raw[4] != self._epoch or raw[5] != self._batch:
            raise _native.DataLossError(
                f"expected batch {self._batch} of epoch {self._epoch}, the ring gave batch "
                f"{raw[5]} of epoch {raw[4]}")
        self._advance(ld)
        return ld._make(raw, self._views)

    def _advance(self, ld: Loader) -> None:
        self._left -= 1
        self._batch += 1
        if self._generation != ld._generation:
            return
        with ld._lock:
            if self._left <= 0:  # the epoch's last batch: served, StopIteration or not
                self._ended = True
                ld._epoch_served(self._epoch)
            else:
                ld._in_epoch = (self._epoch, self._batch)

    def __len__(self) -> int:
        # Before the first next(): what this epoch will yield (attaching if
        # needed, as len(loader) does): the batches per epoch, less those a
        # restored state_dict skips; then what is left of it.
        if self._started:
            return self._left
        ld = self._loader
        ld.attach()  # for the batches per epoch, as len(loader)
        return ld._batches_left(ld._next_epoch, ld._resume_batch)
