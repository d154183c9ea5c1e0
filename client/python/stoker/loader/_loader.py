"""`stoker.Loader`: a torch DataLoader look-alike fed by a stokerd daemon."""

from __future__ import annotations

import json
import logging
import os
import threading
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _native, _private, _transforms
from .. import volume as _volume
from ..client import SOCKET_ENV, Client
from ._batches import _BatchesMixin
from ._epochs import _EpochIterator, _EpochsMixin
from ._options import (ATTACH_DEFAULTS, _DECODE_KEYWORDS, _DEFAULT_RING_SLOTS,
                       _PIPELINE_KEYWORDS, _UNSET, ForkedLoaderError, _default_client_name,
                       _env_int, _folder_dataset, _is_distributed_sampler, _parse_device,
                       _plain_sampler_shuffle, _refuse_dataloader_keywords)
from ._pipeline import _PipelineMixin
from ._resume import _ResumeMixin
from ._torch import _torch_module
from ._video import clip_sampler_options, is_clip_sampler, is_video_dataset, video_request
from ._views import DatasetView


class Loader(_PipelineMixin, _EpochsMixin, _ResumeMixin, _BatchesMixin):
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
    layout, and copied to the device as it is. Float video clips are served
    uint8 in their layout and made float there by torch's ops
    (``_video.normalize_clips``: within 0.5 / 255 / std of the CPU path,
    whose resize stays float).

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
            Resize (bilinear or bicubic), CenterCrop, RandomCrop,
            RandomHorizontalFlip, RandomVerticalFlip, ColorJitter, Grayscale, RandomGrayscale,
            GaussianBlur, RandomRotation, RandomAffine, RandomPerspective,
            ElasticTransform (nearest or bilinear), Pad, RandomApply,
            RandomChoice and RandomOrder of pixel ops, RandomPosterize,
            RandomSolarize, RandomAdjustSharpness, RandomAutocontrast,
            RandomEqualize, RandomInvert, the policies AutoAugment,
            RandAugment, TrivialAugmentWide and AugMix (nearest or bilinear),
            then ToTensor or PILToTensor, ConvertImageDtype,
            Normalize (a 1-value mean/std is broadcast), then RandomErasing
            (on the output tensor, last, as torchvision applies it after
            Normalize). torchvision's reference ``ClassificationPresetTrain``
            (any callable whose ``transforms`` is a Compose) is read as its
            Compose; DINO's and MoCo's own blur and solarize classes (PIL's
            ImageFilter.GaussianBlur, ImageOps.solarize) are read by what
            they do. A multi-view transform (``stoker.MultiView``, or an
            object such as MoCo's TwoCropsTransform or DINO's
            DataAugmentationDINO whose call returns a list of its transforms'
            results) gives each sample's views: batches are then ``(views,
            labels)``, ``views`` a list of tensors (README, "Multi-view
            samples"). Others, and an op out of its place, are refused with an
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
            or with ``ops`` the size every image must come out at; with a
            ``transform`` that sizes nothing (no crop, no Resize: an HDF5
            array's images, all one size), the size every image has, so
            that they stack (others fail as samples). Each image's own size
            (no size, no fixed-size op) is batched by ``pad_to_multiple``
            (or as a list: see there).
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
        record_images, record_labels, record_labels_key: for a record file
            (`dataset` an HDF5 file, .h5/.hdf5, or an LMDB's folder):
            record_images is the HDF5 dataset of N x H x W [x C] uint8 images
            (default "x", PatchCamelyon's), record_labels a file of labels
            (an HDF5 file, its dataset record_labels_key, default "y":
            PatchCamelyon's y file; or a text file of one integer a line),
            by default the HDF5 file's own "y" if it has one, else -1. An
            LMDB's values are encoded images keyed "0", "1", ... (README,
            Records), or with record_shape=(H, W[, C]) raw uint8 pixels of
            that shape (numpy's tobytes() of an H x W x C array).
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
        record_images: Optional[str] = None,
        record_labels: Optional[Union[str, "os.PathLike[str]"]] = None,
        record_labels_key: Optional[str] = None,
        record_shape: Optional[Sequence[int]] = None,
        box_min_size: Any = _UNSET,
        box_min_visibility: Any = _UNSET,
        pad_to_multiple: Optional[int] = None,
        allow_empty: Optional[bool] = None,
        skip_unsupported_formats: bool = False,
        output: str = "tuple",
        frames_per_clip: Optional[int] = None,
        step_between_clips: Optional[int] = None,
        frame_rate: Optional[int] = None,
        clip_layout: Optional[str] = None,
        extensions: Optional[List[str]] = None,
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
        clip_options: Dict[str, Any] = {}
        if self._sampler is not None and is_clip_sampler(self._sampler):
            # RandomClipSampler / UniformClipSampler: the daemon's clip sampler.
            clip_options = clip_sampler_options(
                self._sampler, None if isinstance(dataset, (str, bytes, os.PathLike)) else dataset)
            self._sampler = None
            shuffle = False  # the sampler's order (RandomClipSampler's is drawn per epoch)
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
        # A video dataset (a Kinetics object, or frames_per_clip=): its
        # clips, transform and samplers become the daemon's clip request.
        self._dataset_object: Any = None
        # A volume dataset: stoker.volume's Compose (MONAI's transforms)
        # becomes the daemon's volume request.
        self._volumes: Optional[_volume.Compose] = None
        if isinstance(transform, _volume.Compose):
            self._volumes, transform = transform, None
            if not isinstance(dataset, (str, bytes, os.PathLike)):
                raise _native.InvalidRequestError(
                    "a volume dataset is a path: a Decathlon dataset.json, or a manifest "
                    "'#columns: image label' of volume files")
        self._clips = is_video_dataset(dataset) or frames_per_clip is not None
        video: Optional[Dict[str, Any]] = None
        if clip_options and not self._clips:
            raise _native.InvalidRequestError(
                "sampler= is a clip sampler (RandomClipSampler, UniformClipSampler): give a "
                "video dataset (torchvision's Kinetics, or a folder with frames_per_clip=)")
        if self._clips:
            video = video_request(dataset, transform, frames_per_clip, step_between_clips,
                                  frame_rate, clip_layout, extensions)
            if not isinstance(dataset, (str, bytes, os.PathLike)):
                self._dataset_object = dataset
            dataset, transform = video["root"], None
            allow_empty = bool(allow_empty)
        elif extensions is not None or clip_layout is not None:
            raise _native.InvalidRequestError(
                "extensions= and clip_layout= are for video datasets (give frames_per_clip=)")
        elif not isinstance(dataset, (str, bytes, os.PathLike)):
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
            # size= beside a transform that sizes nothing is the images' own
            # size (an HDF5 array's: every image must be it), which lets
            # them be stacked; any other keyword is the transform's to say.
            own_size = given.get("size") if (
                "size" in given
                and _transforms.step_setting("size", transform).startswith("the transform")
            ) else None
            for k, v in [kv for kv in given.items() if kv[0] != "size" or own_size is None][:1]:
                where = _transforms.step_setting(k, transform)
                by = where if where.startswith("the transform") else f"the transform's {where}"
                raise _native.InvalidRequestError(
                    f"transform= and {k}={v!r} both given: {k} is decided by {by}. Drop {k}=, "
                    "or change the transform")
            given = _transforms.loader_options(transform)
            if own_size is not None:
                given["size"] = own_size
        if video is not None:
            if given:
                raise _native.InvalidRequestError(
                    f"{sorted(given)} with a video dataset: a clip's pipeline comes from its "
                    "transform (torchvision's video presets)")
            given = dict(video["pipeline"])
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
        if record_labels is not None:
            self._options["record_labels"] = os.fspath(record_labels)
        if record_images is not None:
            self._options["record_images"] = record_images
        if record_labels_key is not None:
            self._options["record_labels_key"] = record_labels_key
        if record_shape is not None:
            self._options["record_shape"] = [int(d) for d in record_shape]
        if video is not None:
            self._options.update(video["options"])
            self._options.update(clip_options)
        if self._volumes is not None:
            self._options["volumes_json"] = self._volumes.to_json()
        #: A volume session's transforms as the daemon runs them (every
        #: default filled in); None before attach and for other sessions.
        self.effective_volumes: Optional[Dict[str, Any]] = None
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
            for key in ("annotations", "masks", "record_labels"):
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
        if info.get("effective_volumes_json"):
            self.effective_volumes = json.loads(info["effective_volumes_json"])
        if self._clips and info["effective_pipeline"]:
            asked = self.effective_pipeline["output"]
            self.effective_pipeline = info["effective_pipeline"]  # the daemon's clip planner's
            if self._clip_normalize_on_device():  # what the device makes of its uint8
                self.effective_pipeline["output"].update(
                    dtype=asked["dtype"], mean=asked["mean"], std=asked["std"])
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
        torch = _torch_module()
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
        if self._clips:  # a video dataset: its clips (Kinetics' len), or the sampler's
            want = (len(ds) if "clip_sampler" not in self._options else have[0], want[1])
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
