"""Loader's pipeline: its keywords (or a transform read into them) as the
request the daemon gets, and batch_transform."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional


from .. import _native
from .. import batch as _batch
from ._options import _PYTHON_DTYPES, _PYTHON_LAYOUTS, _keywords_json


class _PipelineMixin:
    """Part of Loader (_loader.py): what the daemon is asked to run."""

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
        if getattr(self, "_clips", False):
            # A clip's pipeline is the daemon's clip planner's
            # (pipeline/clip_pipeline.h); what it made replaces this at attach.
            self._mask_fill = 0
            self.effective_pipeline = {
                "ops": request.get("ops", []), "size": [],
                "output": {"dtype": request.get("dtype", "float32"), "layout": "nchw",
                           "mean": request.get("mean", []), "std": request.get("std", [])}}
            self.pipeline = ""
            return
        effective = json.loads(_native.effective_pipeline(_keywords_json(request)))
        self._mask_fill = effective["mask_fill"]  # Effective fills it in
        if effective.get("views") and (pad_to_multiple is not None or detection):
            raise _native.InvalidRequestError(
                "a multi-view transform with " + ("pad_to_multiple=" if pad_to_multiple
                                                  is not None else "annotations=")
                + ": views have fixed sizes and serve images with labels")
        if (not effective.get("size") and not effective.get("views") and batch_size != 1
                and pad_to_multiple is None and not detection):
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
        if self._has_views():
            raise _native.InvalidRequestError(
                f"batch_transform={bt!r} with a multi-view transform: MixUp and CutMix mix one "
                "image per sample, and each sample here is several views; drop batch_transform")
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
        ops = list(self.effective_pipeline.get("ops", ()))
        for view in self.effective_pipeline.get("views", ()):
            ops += view.get("ops", ())
        return any("RandomErasing" in op for op in ops)

    def _has_views(self) -> bool:
        """Whether each sample is several views (PipelineSpec.views)."""
        return bool(self.effective_pipeline.get("views"))

    def _clip_normalize_on_device(self) -> bool:
        """Whether float clips are served uint8 and converted on the GPU."""
        return (getattr(self, "_clips", False) and self._mode == "cuda"
                and self._request.get("dtype", "float32") == "float32")

    def _daemon_request(self) -> str:
        """The pipeline keywords the daemon is sent for the current mode: as
        given on the CPU; uint8 to be normalized on the GPU for device copies
        (unless the pipeline erases its output: then the output as given)."""
        request = dict(self._request)
        if self._clip_normalize_on_device():
            # A float clip's /255 and Normalize run on the device (the
            # daemon rounds its resized clip to uint8: _video.normalize_clips).
            request["dtype"] = "uint8"
            request.pop("mean", None)
            request.pop("std", None)
            return _keywords_json(request)
        # Views are served as asked: each is copied to the device as it is.
        if (self._mode == "cuda" and not self._erases() and not self._has_views()
                and not getattr(self, "_clips", False)):
            out = self.effective_pipeline["output"]
            if out["dtype"] != "uint8":  # normalized on the GPU from uint8 NHWC
                request.update(dtype="uint8", layout="nhwc")
                request.pop("mean", None)
                request.pop("std", None)
        return _keywords_json(request)
