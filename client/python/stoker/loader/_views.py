"""What a Loader hands out besides plain tensors: BatchView (a batch with its
indices and statuses) and DatasetView (the dataset as DataLoader's)."""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from .. import _native

from ._options import Images

if TYPE_CHECKING:
    from ._loader import Loader


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
