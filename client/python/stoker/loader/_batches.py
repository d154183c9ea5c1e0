"""Loader's batches: from the native session's fields to the tensors it
yields, on the CPU or copied to a CUDA device."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

import numpy as np

if TYPE_CHECKING:
    import torch

from .. import _native
from .. import batch as _batch
from ._options import _NO_INDEX, _cuda_unavailable_reason
from ._torch import _torch_module
from ._video import normalize_clips
from ._views import BatchView, _targets


class _BatchesMixin:
    """Part of Loader (_loader.py): device copies and batch making."""

    # ------------------------------------------------------------------
    # Device copies

    def _resolve_mode(self) -> str:
        """'cpu', 'cuda' or 'cpu_fallback'; raises CudaUnavailableError."""
        if self._device_index is None:
            return "cpu"
        why = _cuda_unavailable_reason()
        if why is None:
            torch = _torch_module()
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

    def _cuda_device(self) -> Tuple[int, Any]:
        """The CUDA device batches go to: (its index, the torch.device); the
        current device when the loader named none."""
        torch = _torch_module()
        index = self._device_index
        if index is None or index == _NO_INDEX:
            index = torch.cuda.current_device()
        return index, torch.device("cuda", index)

    def _to_cuda(self, images: Any) -> Any:
        """The batch copied to the device in the layout the daemon served
        (NHWC or NCHW), normalized there when the daemon served uint8 for it:
        one tensor, or for a list of any-size images a list (one copy a
        sample). The slot goes back once every copy of it completed."""
        torch = _torch_module()
        index, dev = self._cuda_device()
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
        torch = _torch_module()
        output = self.effective_pipeline["output"]  # what the user asked for
        clips = getattr(self, "_clips", False)
        if output["dtype"] == "uint8" or self._erases() or clips:
            # Served as it is (a pipeline that erases its output is served
            # float, normalized by the daemon: bytes copied unchanged).
            tdtype = torch.from_numpy(np.empty(0, dtype=src.dtype)).dtype
            out = torch.empty(src.shape, dtype=tdtype, device=dev)
            if out.numel() != 0:  # a failed any-size sample is 0 x 0
                _native.copy_to_device(owner, stream.cuda_stream, out.data_ptr(),
                                       out.numel() * out.element_size(), dtype="asis",
                                       device=index, sample=sample)
            if clips and self._clip_normalize_on_device():  # served uint8 for the device
                out = normalize_clips(out, output["mean"], output["std"],
                                      self._options["clip_layout"])
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

    def _make_clips(self, raw: tuple, views: bool) -> Any:
        """A video batch: (clips, labels) as the video reference's collate_fn
        gives them (the audio dropped): clips [n, T, 3, h, w] (or [n, 3, T, h,
        w] after ConvertBCHWtoCBHW), float32 or uint8 as the transform makes
        them."""
        fields, indices, planned, statuses, epoch, batch_in_epoch, sequence = raw
        torch = _torch_module()
        clips = fields["clip"][0]
        labels = fields["label"][0].copy()
        if self._mode == "cuda":
            clips = self._to_cuda(clips)
            labels = torch.from_numpy(labels).to(clips.device, non_blocking=True)
        else:
            clips = torch.from_numpy(clips.copy() if self.copy else clips)
            labels = torch.from_numpy(labels)
            if self._pin:
                clips, labels = clips.pin_memory(), labels.pin_memory()
        self.last_indices = indices
        shape = tuple(clips.shape)
        self.last_image_sizes = [(int(shape[-2]), int(shape[-1]))] * len(indices)
        self._epoch = epoch
        if views:
            return BatchView(clips, labels, indices, planned, statuses, epoch, batch_in_epoch,
                             sequence, None, None, self.last_image_sizes)
        if self.output == "dict":
            return {"clip": clips, "label": labels}
        return clips, labels

    def _make_views(self, raw: tuple, views: bool) -> Any:
        """A multi-view batch: (list of view tensors, labels), as DataLoader's
        default collate gives a list of views per sample."""
        fields, indices, planned, statuses, epoch, batch_in_epoch, sequence = raw
        torch = _torch_module()
        arrays = []
        while f"view{len(arrays)}" in fields:
            arrays.append(fields[f"view{len(arrays)}"][0])
        labels = torch.from_numpy(fields["label"][0].copy())
        tensors = [torch.from_numpy(a.copy() if self.copy else a)
                   for a in arrays]
        if self._mode == "cuda":
            dev = self._cuda_device()[1]
            tensors = [t.to(dev, non_blocking=False) for t in tensors]
            labels = labels.to(dev)
        if self._bfloat16:  # the daemon served float32
            tensors = [t.to(torch.bfloat16) for t in tensors]
        if self._channels_last:  # the daemon served NHWC
            tensors = [t.permute(0, 3, 1, 2) for t in tensors]
        if self._pin:
            tensors = [t.pin_memory() for t in tensors]
            labels = labels.pin_memory()
        hw = (0, 1) if self.effective_pipeline["output"]["layout"] == "nhwc" else (1, 2)
        sizes = [(int(a.shape[hw[0] + 1]), int(a.shape[hw[1] + 1])) for a in arrays]
        self.last_indices = indices
        self.last_image_sizes = [sizes[0]] * len(indices)
        self._epoch = epoch
        if views:
            return BatchView(tensors, labels, indices, planned, statuses, epoch, batch_in_epoch,
                             sequence, None, None, [sizes[0]] * len(indices))
        if self.output == "dict":
            out: Dict[str, Any] = {f"view{k}": t for k, t in enumerate(tensors)}
            out["label"] = labels
            return out
        return tensors, labels

    def _make_volumes(self, raw: tuple, views: bool) -> Any:
        """A volume batch as MONAI's list_data_collate gives it: a dict of the
        Compose's image and label keys, [n * num_samples, C, X, Y, Z] each
        (each volume's patches next to each other); with AxialSlicesd,
        slices [n * num_samples, C * (2k + 1), X, Y] and their centre
        slices' labels [n * num_samples, 1, X, Y]."""
        fields, indices, planned, statuses, epoch, batch_in_epoch, sequence = raw
        torch = _torch_module()
        arrays = [fields["volume"][0]]
        if "volume_label" in fields:
            arrays.append(fields["volume_label"][0])
        tensors = []
        k = self._volumes.slice_neighbours
        for n, a in enumerate(arrays):
            a = a.reshape((a.shape[0] * a.shape[1],) + a.shape[2:])
            if k is not None:  # [m, C, X, Y, 2k + 1] -> slices [m, C * (2k + 1), X, Y]
                a = (np.ascontiguousarray(a.transpose(0, 1, 4, 2, 3)).reshape(
                    a.shape[0], -1, a.shape[2], a.shape[3]) if n == 0
                     else np.ascontiguousarray(a[..., k]))
            t = torch.from_numpy(a.copy() if self.copy and k is None else a)
            if self._mode == "cuda":
                t = t.to(self._cuda_device()[1], non_blocking=False)
            elif self._pin:
                t = t.pin_memory()
            tensors.append(t)
        self.last_indices = indices
        self.last_image_sizes = None
        self._epoch = epoch
        compose = self._volumes
        out: Dict[str, Any] = {compose.image_key: tensors[0]}
        if len(tensors) > 1:
            out[compose.label_key or "label"] = tensors[1]
        if views:  # images: the patches, labels: their label patches (or None)
            return BatchView(tensors[0], tensors[1] if len(tensors) > 1 else None, indices,
                             planned, statuses, epoch, batch_in_epoch, sequence, None, None, None)
        return out

    def _make(self, raw: tuple, views: bool) -> Any:
        fields, indices, planned, statuses, epoch, batch_in_epoch, sequence = raw
        if "volume" in fields:
            return self._make_volumes(raw, views)
        if "view0" in fields:
            return self._make_views(raw, views)
        if "clip" in fields:
            return self._make_clips(raw, views)
        images = fields["image"][0]
        labels = fields["label"][0].copy()  # a few bytes, free of the slot's lease
        masks = fields["mask"][0] if "mask" in fields else None  # a segmentation set's
        boxes = None  # a detection set's: (xyxy, labels, flags) padded, and each count
        if "boxes" in fields:
            xyxy, shapes = fields["boxes"]
            boxes = (xyxy, fields["box_labels"][0], fields["box_flags"][0], shapes[:, 0].copy())
        torch = _torch_module()
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
                dev = self._cuda_device()[1]
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
