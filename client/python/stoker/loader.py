"""`stoker.Loader`: a torch DataLoader look-alike fed by a stokerd daemon."""

from __future__ import annotations

import gc
import json
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

if TYPE_CHECKING:
    import torch

from . import _native, _private, _transforms
from .client import SOCKET_ENV, Client

_torch = None  # imported on first use: `import stoker` does not pay for torch


def _torch_module():
    global _torch
    if _torch is None:
        import torch  # noqa: PLC0415

        _torch = torch
    return _torch


Images = Union["torch.Tensor", List["torch.Tensor"]]  # noqa: F821

_DTYPES = ("uint8", "float32", "float16", "bfloat16")
_LAYOUTS = ("nhwc", "nchw", "channels_last")
_PIPELINES = ("train", "eval", "decode")


class BatchView:
    """One batch with its bookkeeping, as `Loader.iter_batches` yields it.

    Attributes:
        images: a torch tensor [n,H,W,3] (NHWC) or [n,3,H,W] (NCHW) viewing the
            ring slot (unless the loader copies), or, for the variable-size
            decode pipeline, a list of per-sample tensors.
        labels: int64 tensor [n].
        indices: int64 ndarray [n], the dataset index of each sample's pixels
            (ImageFolder's sample order), a replacement's for a replaced sample.
        planned_indices: int64 ndarray [n], the index the sampler planned.
        statuses: int32 ndarray [n]: 0 ok, 1 replaced, 2 failed (zero pixels).
        epoch, batch_in_epoch: where the batch lies in the session's order.
        sequence: the batch's number in the session (0, 1, 2, ...).
    """

    __slots__ = ("images", "labels", "indices", "planned_indices", "statuses", "epoch",
                 "batch_in_epoch", "sequence")

    def __init__(self, images: Images, labels: Any, indices: np.ndarray,
                 planned_indices: np.ndarray, statuses: np.ndarray, epoch: int,
                 batch_in_epoch: int, sequence: int) -> None:
        self.images = images
        self.labels = labels
        self.indices = indices
        self.planned_indices = planned_indices
        self.statuses = statuses
        self.epoch = epoch
        self.batch_in_epoch = batch_in_epoch
        self.sequence = sequence

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self):  # so that `images, labels = view` works
        yield self.images
        yield self.labels

    def __repr__(self) -> str:
        return (f"BatchView(epoch={self.epoch}, batch_in_epoch={self.batch_in_epoch}, "
                f"n={len(self.indices)})")


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise _native.InvalidRequestError(f"${name}={v!r} is not an integer") from None


def _size_pair(size: Union[int, Sequence[int], None], pipeline: str) -> Tuple[int, int]:
    if size is None:
        return (0, 0) if pipeline == "decode" else (224, 224)
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        return int(size), int(size)
    try:
        h, w = size  # type: ignore[misc]
        return int(h), int(w)
    except (TypeError, ValueError):
        raise _native.InvalidRequestError(
            f"size must be an int or a (height, width) pair, got {size!r}") from None


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


class Loader:
    """Batches of decoded, augmented images from stokerd, as torch tensors.

    Iterating yields one epoch, like torch's DataLoader: ``len(loader)`` batches
    of ``(images, labels)``, then StopIteration; the next ``iter()`` serves the
    next epoch of the same session (the daemon keeps prefetching across the
    boundary). `iter_batches` yields `BatchView` objects that also carry the
    dataset indices.

    Zero copy: ``images`` is a tensor over a slot of the shared-memory ring.
    It stays valid, and unchanged, for as long as you hold it (even after
    `close`); the slot returns to the daemon when the tensor (and every view
    of it) is garbage-collected. The ring has ``ring_slots`` slots, so holding
    ``ring_slots - 1`` batches already stops prefetching, and asking for a
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
            absolute inside it): an ImageFolder tree or a manifest file. Sample
            i is ``torchvision.datasets.ImageFolder(root).samples[i]``. With a
            private daemon: a path as usual (relative to the working folder).
        socket: the daemon's Unix socket; None: ``$STOKER_SOCKET``; neither:
            a private daemon (see above).
        transform: a torchvision transform (``T.Compose([...])`` or a list) to
            run in the daemon instead of the pipeline arguments below (which
            it then overrides): RandomResizedCrop, RandomHorizontalFlip,
            Resize(int) + CenterCrop, ToTensor or PILToTensor,
            ConvertImageDtype, Normalize. Others are refused with an error.
        batch_size: samples per batch.
        pipeline: 'train' (RandomResizedCrop + RandomHorizontalFlip), 'eval'
            (Resize + CenterCrop) or 'decode' (the whole image).
        size: output size, int or (height, width). None: 224 for train/eval;
            for decode each image's own size (needs ``batch_size=1``).
        resize_size: eval: the shorter side before the crop (None: 256*size/224).
        scale, ratio: train: RandomResizedCrop's ranges.
        flip_prob: train: probability of a horizontal flip.
        interpolation: 'antialias' (PIL-like, torchvision's default) or 'bilinear'.
        dtype: 'uint8' (raw pixels) or 'float32'/'float16'/'bfloat16',
            normalized ``(x/255 - mean) / std`` (bfloat16: rounded from the
            float32 value to nearest even; on the CPU path a cast of the
            daemon's float32).
        layout: 'nhwc' or 'nchw' (the tensor's shape), or 'channels_last': an
            [n, 3, H, W] tensor in torch.channels_last memory format. None:
            'nhwc' for uint8, 'nchw' for floats.
        mean, std: per RGB channel; None: ImageNet's.
        seed: the order of epoch e is a permutation from (seed, e); a sample's
            augmentation is keyed by (seed, epoch, index): the same seed gives
            the same batches whatever the daemon's worker count.
        shuffle: permute each epoch (else dataset order).
        epochs: epochs to serve; None: without end.
        rank, world_size: the global rank and world size, DistributedSampler's:
            each rank reads a disjoint 1/world_size of every epoch. None:
            ``$RANK`` / ``$WORLD_SIZE`` (as torchrun sets them), else 0 / 1.
        drop_last: drop each epoch's last, partial batch.
        ring_slots: the ring's depth in batches (the prefetch depth), >= 2.
        failure_policy: 'skip' (a bad file is replaced by another sample of the
            shard) or 'error' (`SampleError` naming the file).
        timeout_ms: the longest wait for one batch (-1: no limit; a dead daemon
            is noticed within seconds regardless).
        copy: yield private copies instead of views of the ring.
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
            less one). A sidecar daemon has its own ``--workers``; then this is
            ignored.
        data_root: the folder a private daemon may read beneath (None: the
            dataset's folder, or the folder of its manifest or shards). Give a
            wider one when the dataset's files are links into another folder
            or its manifest names ``../`` paths. A sidecar has its own
            ``--data-root``; then this is refused.
    """

    def __init__(
        self,
        dataset: Union[str, "os.PathLike[str]"],
        *,
        socket: Optional[str] = None,
        batch_size: int = 64,
        pipeline: str = "train",
        size: Union[int, Tuple[int, int], None] = None,
        resize_size: Optional[int] = None,
        scale: Tuple[float, float] = (0.08, 1.0),
        ratio: Tuple[float, float] = (3 / 4, 4 / 3),
        flip_prob: float = 0.5,
        interpolation: str = "antialias",
        dtype: str = "uint8",
        layout: Optional[str] = None,
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
        seed: int = 0,
        shuffle: bool = True,
        epochs: Optional[int] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        drop_last: bool = False,
        ring_slots: int = 4,
        failure_policy: str = "skip",
        timeout_ms: int = -1,
        copy: bool = False,
        client_name: Optional[str] = None,
        device: Any = None,
        cpu_fallback: bool = False,
        register_ring: bool = True,
        transform: Any = None,
        num_workers: Optional[int] = None,
        data_root: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> None:
        if transform is not None:
            t = _transforms.loader_options(transform)
            pipeline, dtype, layout = t["pipeline"], t["dtype"], t["layout"]
            size = t.get("size")
            resize_size = t.get("resize_size", resize_size)
            scale, ratio = t.get("scale", scale), t.get("ratio", ratio)
            flip_prob = t.get("flip_prob", flip_prob)
            interpolation = t.get("interpolation", interpolation)
            mean, std = t.get("mean", mean), t.get("std", std)
        pipeline = str(pipeline).lower()
        dtype = str(dtype).lower()
        if pipeline not in _PIPELINES:
            raise _native.InvalidRequestError(
                f"unknown pipeline {pipeline!r}: use one of {', '.join(_PIPELINES)}")
        if dtype not in _DTYPES:
            raise _native.InvalidRequestError(
                f"unknown dtype {dtype!r}: use one of {', '.join(_DTYPES)}")
        if layout is None:
            layout = "nhwc" if dtype == "uint8" else "nchw"
        layout = str(layout).lower()
        if layout not in _LAYOUTS:
            raise _native.InvalidRequestError(
                f"unknown layout {layout!r}: use one of {', '.join(_LAYOUTS)}")
        if epochs is not None and epochs < 1:
            raise _native.InvalidRequestError("epochs must be at least 1 (None: without end)")
        if world_size is None:
            world_size = _env_int("WORLD_SIZE")
        if rank is None:
            rank = _env_int("RANK")
        self.dataset: str = os.fspath(dataset)
        #: The daemon's socket; None until a private daemon is started.
        self.socket: Optional[str] = (os.fspath(socket) if socket
                                      else os.environ.get(SOCKET_ENV) or None)
        self._private_wanted = self.socket is None
        if data_root is not None and not self._private_wanted:
            raise _native.InvalidRequestError(
                "data_root is for a private daemon; a sidecar stokerd has its own --data-root")
        self._private_root: Optional[str] = None if data_root is None else os.fspath(data_root)
        self._private: Optional[_private.PrivateDaemon] = None
        self._private_path = ""  # the dataset as the private daemon sees it
        if num_workers is not None and int(num_workers) < 1:
            raise _native.InvalidRequestError(f"num_workers must be at least 1, got {num_workers}")
        self.num_workers: Optional[int] = num_workers
        self.batch_size: int = batch_size
        self.pipeline: str = pipeline
        self.epochs: Optional[int] = epochs
        self.rank: int = 0 if rank is None else rank
        self.world_size: int = 1 if world_size is None else world_size
        self.timeout_ms: int = timeout_ms
        self.copy: bool = bool(copy)
        # Device copies: what the user asked for; what the daemon serves is
        # decided at attach (_resolve_mode), once CUDA's availability is known.
        self.device: Any = device
        self.cpu_fallback: bool = bool(cpu_fallback)
        self._device_index: Optional[int] = _parse_device(device)
        self._dtype: str = dtype
        self._layout: str = layout
        self._mean = None if mean is None else [float(v) for v in mean]
        self._std = None if std is None else [float(v) for v in std]
        self._mode = "cpu"  # 'cpu', 'cuda' or 'cpu_fallback'; set at attach
        self._staging_warned = False
        height, width = _size_pair(size, pipeline)
        self._options: Dict[str, Any] = dict(
            pipeline=pipeline, height=height, width=width,
            resize_size=resize_size or 0, scale=tuple(scale), ratio=tuple(ratio),
            flip_prob=float(flip_prob), interpolation=interpolation, dtype=dtype,
            layout=layout, mean=None if mean is None else list(mean),
            std=None if std is None else list(std), batch_size=batch_size, seed=seed,
            shuffle=bool(shuffle), epochs=0 if epochs is None else epochs, rank=self.rank,
            world_size=self.world_size, drop_last=bool(drop_last), ring_slots=ring_slots,
            failure_policy=failure_policy, register_ring_with_cuda=bool(register_ring),
            client_name=client_name or _default_client_name(self.rank))
        if pipeline != "train":
            for k in ("scale", "ratio", "flip_prob"):
                self._options.pop(k)
        self._client: Optional[Client] = None
        self._session: Optional[_native.Session] = None
        self._info: Optional[Dict[str, Any]] = None
        self._bpe = 0  # batches per epoch
        self._next_global = 0  # the global batch number the session delivers next
        self._next_epoch = 0  # the epoch the next iter() serves
        self._resume_batch = 0  # ... from this batch of it (load_state_dict)
        # (epoch, next batch) of the epoch being iterated, None between epochs
        self._in_epoch: Optional[Tuple[int, int]] = None
        self._token_dataset_size: Optional[int] = None  # to check after attach
        self._epoch = 0
        self._generation = 0  # bumped by each iter(): older iterators stop
        self._closed = False
        self.last_indices: Optional[np.ndarray] = None
        """Dataset indices of the most recently yielded batch (int64 ndarray)."""

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
        dataset = self.dataset
        if self._private_wanted:
            if self._private is None:
                self._private, self._private_path = _private.acquire(
                    self.dataset, self.num_workers, self._private_root)
                self.socket = self._private.socket
                self._client = None
            dataset = self._private_path
        if self._client is None:
            self._client = Client(self.socket)
        options = dict(self._options)
        options.update(self._daemon_format())
        self._session = self._client.attach(dataset, start_epoch=start_epoch,
                                            start_batch=start_batch, **options)
        info = self._session.info
        try:
            info["effective_pipeline"] = json.loads(info.pop("effective_pipeline_json") or "{}")
        except ValueError:
            info["effective_pipeline"] = {}
        self._info = info
        self._bpe = info["batches_per_epoch"]
        self._next_global = start_epoch * self._bpe + start_batch
        try:
            self._check_token_dataset_size()
        except _native.InvalidRequestError:
            self.close()
            raise
        return self

    def _check_token_dataset_size(self) -> None:
        """Once attached: refuses a loaded state saved with a dataset of another size."""
        assert self._info is not None
        want, self._token_dataset_size = self._token_dataset_size, None
        have = self._info["dataset_size"]
        if want is not None and want != have:
            raise _native.InvalidRequestError(
                f"load_state_dict: the state was saved with a dataset of {want} samples; "
                f"{self.dataset!r} now has {have}, so its order differs")

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
        if epoch != self._next_epoch:
            self._next_epoch = epoch
            self._resume_batch = 0
        self._in_epoch = None
        self._generation += 1  # an iterator still open ends

    def state_dict(self) -> Dict[str, Any]:
        """Where the loader stands: a small JSON-able token for `load_state_dict`.

        Taken inside the loop over an epoch it points at the batch after the
        last one yielded; taken between epochs, at the next epoch's first
        batch. Ranks iterate in step, so rank 0's token restores every rank.
        """
        if self._in_epoch is not None:
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
        self._next_epoch, self._resume_batch = epoch, batch
        self._epoch = epoch
        self._in_epoch = None
        self._generation += 1
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

    def _daemon_format(self) -> Dict[str, str]:
        """The dtype and layout the daemon serves for the current mode."""
        if self._mode == "cuda":
            if self._dtype == "uint8":  # copied as is
                return dict(dtype="uint8",
                            layout="nchw" if self._layout == "nchw" else "nhwc")
            return dict(dtype="uint8", layout="nhwc")  # normalized on the GPU
        return dict(dtype="float32" if self._dtype == "bfloat16" else self._dtype,
                    layout="nhwc" if self._layout == "channels_last" else self._layout)

    @property
    def device_status(self) -> Optional[Dict[str, Any]]:
        """The session's device-copy path: {'mode': 'none' | 'registered' | 'staging',
        'detail', 'copies', 'bytes', 'in_flight', ...}; None before attach."""
        return None if self._session is None else self._session.device_status

    def _to_cuda(self, images: Any) -> "torch.Tensor":
        torch = _torch or _torch_module()
        index = self._device_index
        if index is None or index == _NO_INDEX:
            index = torch.cuda.current_device()
        dev = torch.device("cuda", index)
        stream = torch.cuda.current_stream(dev)
        src = images[0] if isinstance(images, list) else images
        if isinstance(images, list) and len(images) != 1:
            raise _native.InvalidRequestError(
                "device copies of variable-size batches need batch_size=1")
        if self._dtype == "uint8":
            out = torch.empty(src.shape, dtype=torch.uint8, device=dev)
            _native.copy_to_device(images, stream.cuda_stream, out.data_ptr(), out.numel(),
                                   dtype="asis", device=index)
        else:
            n, h, w, _ = src.shape if src.ndim == 4 else (1,) + src.shape
            tdtype = {"float32": torch.float32, "float16": torch.float16,
                      "bfloat16": torch.bfloat16}[self._dtype]
            nchw = self._layout == "nchw"
            out = torch.empty((n, 3, h, w) if nchw else (n, h, w, 3), dtype=tdtype, device=dev)
            # The uint8 pixels land in scratch from torch's caching allocator:
            # freed below, it is reused only by work ordered after ours on
            # this stream.
            scratch = torch.empty(src.nbytes, dtype=torch.uint8, device=dev)
            _native.copy_to_device(images, stream.cuda_stream, out.data_ptr(),
                                   out.numel() * out.element_size(), dtype=self._dtype,
                                   layout="nchw" if nchw else "nhwc", mean=self._mean,
                                   std=self._std, device=index, scratch=scratch.data_ptr(),
                                   scratch_bytes=scratch.numel())
            del scratch
            if src.ndim == 3:
                out = out[0]
        if self._layout == "channels_last" and out.dim() == 4:
            out = out.permute(0, 3, 1, 2)  # [n,3,H,W] over NHWC memory
        if not self._staging_warned and self._session is not None:
            self._staging_warned = True
            st = self._session.device_status
            if st["mode"] == "staging":
                warnings.warn(f"stoker: {st['detail']}", RuntimeWarning, stacklevel=4)
        return out

    def close(self) -> None:
        """Detaches the session (and stops a private daemon that no other
        loader uses). Tensors already yielded stay valid. Idempotent."""
        self._closed = True
        self._generation += 1
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

    def __repr__(self) -> str:
        return (f"stoker.Loader({self.dataset!r}, socket={self.socket or '(private)'!r}, "
                f"batch_size={self.batch_size}, pipeline={self.pipeline!r})")

    # ------------------------------------------------------------------
    # Iteration

    def __iter__(self) -> Iterator[Tuple[Images, Any]]:
        """One epoch of (images, labels)."""
        return _EpochIterator(self, views=False)

    def iter_batches(self) -> Iterator[BatchView]:
        """One epoch of `BatchView` (images, labels, indices, epoch, ...)."""
        return _EpochIterator(self, views=True)

    def _begin_epoch(self) -> Tuple[int, int, int]:
        """Positions the session at the next epoch (at its resume batch);
        returns (epoch, first batch, generation)."""
        if self._closed:
            raise _native.StokerError("the loader is closed")
        self.attach()
        self._generation += 1
        epoch, first = self._next_epoch, self._resume_batch
        self._next_epoch, self._resume_batch = epoch + 1, 0
        if self.epochs is not None and epoch >= self.epochs:
            self._in_epoch = None
            return epoch, first, self._generation
        self._in_epoch = (epoch, first)
        behind = epoch * self._bpe + first - self._next_global
        if behind > 0 and behind <= int(self._info["ring_slots"]) and self._session.held == 0:
            # A previous iteration stopped early: drop what is probably already
            # in the ring. (Not while one of its batches is still alive, as the
            # loop variable is after a `break`: the slots that batch holds
            # would come round before the new epoch's first batches could.)
            for _ in range(behind):
                try:
                    self._next_raw()
                except _native.SampleError:
                    pass  # a failed batch of the abandoned epoch: nobody wants it
        elif behind != 0:
            # Further ahead, or behind (set_epoch / load_state_dict went back):
            # restart the session there.
            self._reattach(epoch, first)
        return epoch, first, self._generation

    def _batches_left(self, epoch: int, first: int) -> int:
        """Batches an epoch yields from batch `first` on (none past the last)."""
        if self.epochs is not None and epoch >= self.epochs:
            return 0
        return max(0, self._bpe - first)

    def _next_raw(self) -> tuple:
        assert self._session is not None
        try:
            raw = self._session.next(self.timeout_ms)
        except _native.RingExhaustedError:
            # Leases may be held only by garbage cycles: collect and retry once.
            gc.collect()
            raw = self._next_retry()
        except _native.SampleError:
            self._next_global += 1  # the failed batch was consumed
            raise
        self._next_global += 1
        return raw

    def _next_retry(self) -> tuple:
        assert self._session is not None
        try:
            return self._session.next(self.timeout_ms)
        except _native.SampleError:
            self._next_global += 1
            raise

    def _make(self, raw: tuple, views: bool) -> Any:
        images, labels, indices, planned, statuses, epoch, batch_in_epoch, sequence = raw
        torch = _torch or _torch_module()
        if self._mode == "cuda":
            images = self._to_cuda(images)  # the ndarray's lease ends with it, after the copy
            labels = torch.from_numpy(labels).to(images.device, non_blocking=True)
            self.last_indices = indices
            self._epoch = epoch
            if views:
                return BatchView(images, labels, indices, planned, statuses, epoch,
                                 batch_in_epoch, sequence)
            return images, labels
        if isinstance(images, list):
            if self.copy:
                images = [torch.from_numpy(a.copy()) for a in images]
            else:
                images = [torch.from_numpy(a) for a in images]
        elif self.copy:
            images = torch.from_numpy(images.copy())
        else:
            images = torch.from_numpy(images)
        if self._dtype == "bfloat16":  # the daemon served float32
            images = ([a.to(torch.bfloat16) for a in images] if isinstance(images, list)
                      else images.to(torch.bfloat16))
        if self._layout == "channels_last":  # the daemon served NHWC
            images = ([a.permute(2, 0, 1) for a in images] if isinstance(images, list)
                      else images.permute(0, 3, 1, 2))
        labels = torch.from_numpy(labels)
        self.last_indices = indices
        self._epoch = epoch
        if views:
            return BatchView(images, labels, indices, planned, statuses, epoch, batch_in_epoch,
                             sequence)
        return images, labels


class _EpochIterator:
    """Iterates one epoch of a Loader; stops early if a newer iter() began."""

    __slots__ = ("_loader", "_views", "_epoch", "_generation", "_left", "_started", "_batch")

    def __init__(self, loader: Loader, views: bool) -> None:
        self._loader = loader
        self._views = views
        self._started = False
        self._left = 0
        self._epoch = 0
        self._batch = 0  # the batch_in_epoch expected next
        self._generation = 0

    def __iter__(self) -> "_EpochIterator":
        return self

    def __next__(self) -> Any:
        ld = self._loader
        if not self._started:
            # Attach and position at the first next(), as DataLoader starts its
            # workers: errors surface inside the for loop.
            self._started = True
            self._epoch, self._batch, self._generation = ld._begin_epoch()
            self._left = ld._batches_left(self._epoch, self._batch)
        if self._left <= 0 or self._generation != ld._generation or ld._session is None:
            if self._generation == ld._generation:
                ld._in_epoch = None  # the epoch is done: state_dict points at the next
            raise StopIteration
        try:
            raw = ld._next_raw()
        except _native.EndOfData:
            self._left = 0
            ld._in_epoch = None
            raise StopIteration from None
        except _native.SampleError:
            self._advance(ld)  # that batch is gone; next() goes on with the following one
            raise
        if raw[5] != self._epoch or raw[6] != self._batch:
            raise _native.DataLossError(
                f"expected batch {self._batch} of epoch {self._epoch}, the ring gave batch "
                f"{raw[6]} of epoch {raw[5]}")
        self._advance(ld)
        return ld._make(raw, self._views)

    def _advance(self, ld: Loader) -> None:
        self._left -= 1
        self._batch += 1
        if self._generation == ld._generation:
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
