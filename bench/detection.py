#!/usr/bin/python3
"""Segmentation and detection recipes: stoker vs DataLoader running
torchvision's reference transforms, side by side, on the same files.

    /usr/bin/python3 bench/detection.py [--quick] [--rounds N] [--batches N]
        [--build build] [--data bench/data] [--out bench]

Writes bench/DETECTION.md (raw numbers in bench/out/detection.json). Uses
bench/make_data.py's ImageNet-like JPEGs (run bench/run.sh or make_data.py
first): textured photos of about 400x320, progressive and optimized ones
among them, which is what VOC's images look like (500x375). Made once under
bench/data/detection/ (and reused while its stamp matches):
  * seg/: the first 400 photos, each with a VOC-style palette PNG mask of
    its size (21 classes in blobs with 255 "ignore" borders, speckle), and a
    manifest with image and mask columns;
  * instances.json: a COCO instances file over the same photos, 1 to 12
    boxes each (categories 1..90, one in 10 a crowd box).

The recipes, 2 workers on both sides, float32 NCHW normalized:
  * segmentation: the segmentation reference's train preset with
    RandomResize(256, 1024), RandomHorizontalFlip, RandomCrop(512) (after
    padding a smaller image, masks with 255), PILToTensor,
    ConvertImageDtype, Normalize; batch 8. stoker: RandomResize(256, 1025)
    (v2's rule excludes the maximum, the reference's includes it),
    RandomHorizontalFlip, RandomCrop(512, pad_if_needed) (torchvision's
    RandomCrop pads both sides of a short axis where the reference pads the
    right and bottom: the same work), masks moved the same way.
  * SSD: the detection reference's SSD train preset (RandomPhotometricDistort,
    RandomZoomOut(fill=mean), RandomIoUCrop, RandomHorizontalFlip,
    PILToTensor, ConvertImageDtype) then Resize(300, 300), which SSD300's
    model does to every image (so that both sides hand over the same
    tensors); batch 32; targets as the reference's ConvertCocoPolysToMask
    makes them (boxes XYXY clamped, degenerate ones dropped).
  * multiscale (Faster R-CNN's): the detection reference's multiscale train
    preset (RandomShortestSize(480..800 step 32, max_size 1333),
    RandomHorizontalFlip, PILToTensor, ConvertImageDtype); images of their
    own sizes, batch 4, handed over as the reference's collate_fn does (a
    list; the model pads them, on the GPU); multiscale-padded: padded to a
    multiple of 32 as GeneralizedRCNNTransform batches them (the DataLoader
    in its collate_fn, in its workers; stoker by pad_to_multiple=32, in the
    trainer's process), one [4, 3, H, W] tensor on both sides.
The DataLoader side's transforms are written here from the references'
published code (references/segmentation/transforms.py and
references/detection/transforms.py are not part of the torchvision
package). Each configuration, in an order rotated each round, is measured
by bench.py's measure() (a warm-up, then --batches timed batches with the
producers' and the consumer's CPU), medians over --rounds rounds.

Nothing here asserts a timing: DETECTION.md says whether the target (stoker
at least 3x DataLoader on the segmentation and SSD recipes) was met on this
machine; the multiscale row is reported beside them.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from typing import Any, Dict, List

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (Daemon, measure, CPU accounting, machine_info, log)

SEG_BATCH = 8
SSD_BATCH = 32
MS_BATCH = 4
MS_SIZES = tuple(range(480, 801, 32))
MS_MAX = 1333
SSD_MEAN = (123.0, 117.0, 104.0)
STAMP = {"version": 1, "photos": 400}


# ---------------------------------------------------------------------------
# Data


def make_data(data: str, quick: bool) -> str:
    base = os.path.join(data, "detection", "quick" if quick else "")
    stamp_path = os.path.join(base, ".stamp.json")
    n = 48 if quick else STAMP["photos"]
    want = dict(STAMP, photos=n)
    if os.path.exists(stamp_path) and json.load(open(stamp_path)) == want:
        return base
    src = os.path.join(data, "imagenet_like")
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(src) for f in fs
                   if f.lower().endswith((".jpg", ".jpeg")))[:n]
    if len(files) < n:
        raise SystemExit(f"{src} has {len(files)} photos, {n} needed: run bench/make_data.py")
    os.makedirs(os.path.join(base, "images"), exist_ok=True)
    os.makedirs(os.path.join(base, "masks"), exist_ok=True)
    rng = np.random.default_rng(19)
    images, anns, lines = [], [], ["#columns: image\tmask"]
    for k, f in enumerate(files):
        name = f"{k:05d}.jpg"
        dst = os.path.join(base, "images", name)
        if not os.path.exists(dst):
            os.link(f, dst) if os.stat(f).st_dev == os.stat(base).st_dev else \
                open(dst, "wb").write(open(f, "rb").read())
        w, h = Image.open(dst).size
        Image.fromarray(voc_mask(rng, h, w), mode="P").save(
            os.path.join(base, "masks", f"{k:05d}.png"))
        lines.append(f"images/{name}\tmasks/{k:05d}.png")
        images.append({"id": k + 1, "file_name": name, "width": w, "height": h})
        for _ in range(int(rng.integers(1, 13))):
            bw, bh = float(rng.uniform(8, w * 0.7)), float(rng.uniform(8, h * 0.7))
            x, y = float(rng.uniform(0, w - bw)), float(rng.uniform(0, h - bh))
            anns.append({"id": len(anns) + 1, "image_id": k + 1,
                         "category_id": int(rng.integers(1, 91)), "bbox": [x, y, bw, bh],
                         "area": bw * bh, "iscrowd": int(rng.random() < 0.1)})
    open(os.path.join(base, "seg.txt"), "w").write("\n".join(lines) + "\n")
    json.dump({"images": images, "annotations": anns,
               "categories": [{"id": c, "name": f"c{c}"} for c in range(1, 91)]},
              open(os.path.join(base, "instances.json"), "w"))
    json.dump(want, open(stamp_path, "w"))
    return base


def voc_mask(rng, h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    m = np.zeros((h, w), np.uint8)
    for _ in range(6):
        cy, cx = rng.integers(0, h), rng.integers(0, w)
        r = rng.integers(max(4, min(h, w) // 10), max(5, min(h, w) // 2))
        d = (yy - cy) ** 2 + (xx - cx) ** 2
        m[d < r * r] = rng.integers(1, 21)
        m[(d < r * r) & (d >= (r - 2) ** 2)] = 255
    speckle = rng.random((h, w)) < 0.01
    m[speckle] = rng.integers(0, 21, int(speckle.sum()))
    return m


# ---------------------------------------------------------------------------
# The DataLoader side: the references' transforms, written from their code.


class SegTrain:
    """references/segmentation presets.SegmentationPresetTrain (RandomResize,
    RandomHorizontalFlip, RandomCrop with pad_if_smaller, PILToTensor,
    ConvertImageDtype, Normalize)."""

    def __init__(self, min_size: int, max_size: int, crop: int) -> None:
        self.min_size, self.max_size, self.crop = min_size, max_size, crop

    def __call__(self, image, target):
        import torch
        import torchvision.transforms as T
        import torchvision.transforms.functional as F
        size = random.randint(self.min_size, self.max_size)
        image = F.resize(image, size, antialias=True)
        target = F.resize(target, size, interpolation=T.InterpolationMode.NEAREST)
        if random.random() < 0.5:
            image, target = F.hflip(image), F.hflip(target)
        image, target = pad_if_smaller(image, self.crop), pad_if_smaller(target, self.crop, 255)
        box = T.RandomCrop.get_params(image, (self.crop, self.crop))
        image, target = F.crop(image, *box), F.crop(target, *box)
        image = F.convert_image_dtype(F.pil_to_tensor(image), torch.float)
        image = F.normalize(image, mean=bench.MEAN, std=bench.STD)
        return image, torch.as_tensor(np.array(target), dtype=torch.int64)


def pad_if_smaller(img, size: int, fill: int = 0):
    import torchvision.transforms.functional as F
    ow, oh = img.size
    if min(ow, oh) < size:
        img = F.pad(img, (0, 0, size - ow if ow < size else 0, size - oh if oh < size else 0),
                    fill=fill)
    return img


class SegSet:
    def __init__(self, base: str, tf) -> None:
        rows = [line.split("\t") for line in open(os.path.join(base, "seg.txt")).read().split("\n")
                if line and not line.startswith("#")]
        self.rows = [(os.path.join(base, i), os.path.join(base, m)) for i, m in rows]
        self.tf = tf

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        img, mask = self.rows[i]
        return self.tf(Image.open(img).convert("RGB"), Image.open(mask))


class CocoSet:
    """torchvision's CocoDetection (images by id, their annotations) with the
    detection reference's ConvertCocoPolysToMask for boxes and labels."""

    def __init__(self, base: str, tf) -> None:
        doc = json.load(open(os.path.join(base, "instances.json")))
        self.images = sorted(doc["images"], key=lambda im: im["id"])
        self.anns: Dict[int, List[Dict[str, Any]]] = {}
        for a in doc["annotations"]:
            self.anns.setdefault(a["image_id"], []).append(a)
        self.base, self.tf = base, tf

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        import torch
        im = self.images[i]
        image = Image.open(os.path.join(self.base, "images", im["file_name"])).convert("RGB")
        w, h = image.size
        anns = [a for a in self.anns.get(im["id"], []) if a.get("iscrowd", 0) == 0]
        boxes = torch.as_tensor([a["bbox"] for a in anns], dtype=torch.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]
        boxes[:, 0::2].clamp_(min=0, max=w)
        boxes[:, 1::2].clamp_(min=0, max=h)
        keep = (boxes[:, 3] > boxes[:, 1]) & (boxes[:, 2] > boxes[:, 0])
        target = {"boxes": boxes[keep],
                  "labels": torch.tensor([a["category_id"] for a in anns], dtype=torch.int64)[keep],
                  "image_id": im["id"]}
        return self.tf(image, target)


class SsdTrain:
    """references/detection presets.DetectionPresetTrain("ssd"), then the
    Resize(300, 300) SSD300's model applies."""

    def __init__(self) -> None:
        import torch
        self.torch = torch
        self.brightness, self.contrast = (0.875, 1.125), (0.5, 1.5)
        self.saturation, self.hue = (0.5, 1.5), (-0.05, 0.05)

    def __call__(self, image, target):
        import torch
        import torchvision.transforms as T
        import torchvision.transforms.functional as F
        from torchvision.ops import box_iou
        # RandomPhotometricDistort (p 0.5).
        r = torch.rand(7)
        if r[0] < 0.5:
            image = T.ColorJitter(brightness=self.brightness)(image)
        contrast_before = r[1] < 0.5
        if contrast_before and r[2] < 0.5:
            image = T.ColorJitter(contrast=self.contrast)(image)
        if r[3] < 0.5:
            image = T.ColorJitter(saturation=self.saturation)(image)
        if r[4] < 0.5:
            image = T.ColorJitter(hue=self.hue)(image)
        if not contrast_before and r[5] < 0.5:
            image = T.ColorJitter(contrast=self.contrast)(image)
        if r[6] < 0.5:
            t = F.convert_image_dtype(F.pil_to_tensor(image), torch.float)
            image = F.to_pil_image(t[torch.randperm(3), :, :])
        # RandomZoomOut(fill=mean, side_range (1, 4), p 0.5).
        w, h = image.size
        if torch.rand(1) < 0.5:
            s = 1.0 + torch.rand(1) * 3.0
            cw, ch = int(w * s), int(h * s)
            u = torch.rand(2)
            left, top = int((cw - w) * u[0]), int((ch - h) * u[1])
            image = F.pad(image, [left, top, cw - left - w, ch - top - h],
                          fill=tuple(int(x) for x in SSD_MEAN))
            target["boxes"][:, 0::2] += left
            target["boxes"][:, 1::2] += top
        # RandomIoUCrop (its defaults), within 64 options as stoker bounds it.
        w, h = image.size
        for _ in range(64):
            opt = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0][int(torch.randint(0, 7, (1,)))]
            if opt >= 1.0:
                break
            done = False
            for _ in range(40):
                sr = 0.3 + 0.7 * torch.rand(2)
                nw, nh = int(w * sr[0]), int(h * sr[1])
                if nh == 0 or not 0.5 <= nw / nh <= 2.0:
                    continue
                u = torch.rand(2)
                left, top = int((w - nw) * u[0]), int((h - nh) * u[1])
                right, bottom = left + nw, top + nh
                if left == right or top == bottom:
                    continue
                b = target["boxes"]
                cx, cy = 0.5 * (b[:, 0] + b[:, 2]), 0.5 * (b[:, 1] + b[:, 3])
                inside = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
                if not inside.any():
                    continue
                kept = b[inside]
                iou = box_iou(kept, torch.tensor([[left, top, right, bottom]],
                                                 dtype=kept.dtype))
                if iou.max() < opt:
                    continue
                kept = kept.clone()
                kept[:, 0::2] = (kept[:, 0::2] - left).clamp(0, nw)
                kept[:, 1::2] = (kept[:, 1::2] - top).clamp(0, nh)
                target["boxes"], target["labels"] = kept, target["labels"][inside]
                image = F.crop(image, top, left, nh, nw)
                done = True
                break
            if done:
                break
        # RandomHorizontalFlip.
        w, h = image.size
        if torch.rand(1) < 0.5:
            image = F.hflip(image)
            target["boxes"][:, [0, 2]] = w - target["boxes"][:, [2, 0]]
        # SSD300's resize, then PILToTensor + ConvertImageDtype.
        image = F.resize(image, [300, 300], antialias=True)
        target["boxes"] = target["boxes"] * torch.tensor([300 / w, 300 / h, 300 / w, 300 / h])
        return F.convert_image_dtype(F.pil_to_tensor(image), torch.float), target


class MultiScaleTrain:
    """references/detection presets.DetectionPresetTrain("multiscale"):
    RandomShortestSize(480..800 step 32, max_size 1333) as v2 computes it,
    RandomHorizontalFlip, PILToTensor, ConvertImageDtype."""

    def __call__(self, image, target):
        import torch
        import torchvision.transforms.functional as F
        w, h = image.size
        s = random.choice(MS_SIZES)
        r = min(s / min(h, w), MS_MAX / max(h, w))
        nh, nw = int(h * r), int(w * r)
        image = F.resize(image, [nh, nw], antialias=True)
        target["boxes"] = target["boxes"] * torch.tensor([nw / w, nh / h, nw / w, nh / h])
        if random.random() < 0.5:
            image = F.hflip(image)
            target["boxes"][:, [0, 2]] = nw - target["boxes"][:, [2, 0]]
        return F.convert_image_dtype(F.pil_to_tensor(image), torch.float), target


def list_collate(batch):
    """The detection reference's collate_fn: tuple(zip(*batch))."""
    images, targets = zip(*batch)
    return list(images), list(targets)


def padded_collate(batch):
    """The detection reference's collate_fn, then GeneralizedRCNNTransform's
    batch_images(size_divisible=32): one zero-padded tensor."""
    import torch
    images, targets = zip(*batch)
    hh = -(-max(im.shape[1] for im in images) // 32) * 32
    ww = -(-max(im.shape[2] for im in images) // 32) * 32
    out = torch.zeros(len(images), 3, hh, ww)
    for i, im in enumerate(images):
        out[i, :, :im.shape[1], :im.shape[2]].copy_(im)
    return out, list(targets)


def ssd_collate(batch):
    import torch
    images, targets = zip(*batch)
    return torch.stack(images), list(targets)


class DataLoaderSource(bench.DataLoaderSource):
    def __init__(self, ds, batch: int, collate=None) -> None:  # noqa: D107
        self._start(ds, batch, shuffle=True, collate_fn=collate)

    def next(self):
        return touchable(next(self.it))


class StokerSource(bench.StokerSource):
    """bench.py's stoker side with a recipe's ops (and annotations) given as
    Loader keywords."""

    def __init__(self, daemon: bench.Daemon, dataset: str, batch: int, name: str,  # noqa: D107
                 **kw: Any) -> None:
        import stoker
        self.daemon = daemon
        self.name = name
        self.loader = stoker.Loader(dataset, socket=daemon.socket, batch_size=batch,
                                    ring_slots=bench.RING_SLOTS, drop_last=True,
                                    timeout_ms=180000, client_name=name, dtype="float32",
                                    layout="nchw", **kw)
        self.loader.attach()
        self.it = self._stream()

    def next(self):
        return touchable(next(self.it))


class Listed:
    """A list of images as bench.touch reads a batch: its count, and the last
    element of the last image."""

    def __init__(self, images) -> None:  # noqa: D107
        self.images, self.shape = images, (len(images),)

    def dim(self) -> int:
        return 1

    def __getitem__(self, _):
        return self.images[-1].reshape(-1)[-1]


def touchable(batch):
    """(images, the last target's last value as a 1-element tensor): what
    bench.touch reads of a batch, for masks and detection targets alike."""
    import torch
    images, targets = batch
    if isinstance(images, list):
        images = Listed(images)
    if isinstance(targets, list):
        last = targets[-1]["labels"]
        return images, (last[-1:] if last.numel() else torch.zeros(1))
    return images, targets.reshape(-1)[-1:]


# ---------------------------------------------------------------------------


RECIPES = ("segmentation", "ssd", "multiscale", "multiscale-padded")


def source(recipe: str, config: str, base: str, data_root: str, daemon: bench.Daemon, r: int):
    rel = os.path.relpath(base, data_root)
    if recipe == "segmentation":
        if config == "dl":
            return DataLoaderSource(SegSet(base, SegTrain(256, 1024, 512)), SEG_BATCH)
        ops = [{"RandomResize": {"min_size": 256, "max_size": 1025}},
               {"RandomHorizontalFlip": {}},
               {"RandomCrop": {"size": [512], "pad_if_needed": True}}]
        return StokerSource(daemon, os.path.join(rel, "seg.txt"), SEG_BATCH, f"seg-{r}",
                            ops=ops, mean=list(bench.MEAN), std=list(bench.STD))
    if recipe.startswith("multiscale"):
        padded = recipe.endswith("padded")
        if config == "dl":
            return DataLoaderSource(CocoSet(base, MultiScaleTrain()), MS_BATCH,
                                    padded_collate if padded else list_collate)
        ops = [{"RandomShortestSize": {"min_size": list(MS_SIZES), "max_size": MS_MAX}},
               {"RandomHorizontalFlip": {}}]
        return StokerSource(daemon, os.path.join(rel, "images"), MS_BATCH, f"ms-{r}", ops=ops,
                            mean=[0, 0, 0], std=[1, 1, 1], pad_to_multiple=32 if padded else None,
                            annotations=os.path.join(rel, "instances.json"))
    if config == "dl":
        return DataLoaderSource(CocoSet(base, SsdTrain()), SSD_BATCH, ssd_collate)
    ops = [{"RandomPhotometricDistort": {}}, {"RandomZoomOut": {"fill": [123, 117, 104]}},
           {"RandomIoUCrop": {}}, {"RandomHorizontalFlip": {}},
           {"Resize": {"size": [300, 300]}}]
    return StokerSource(daemon, os.path.join(rel, "images"), SSD_BATCH, f"ssd-{r}", ops=ops,
                        mean=[0, 0, 0], std=[1, 1, 1],
                        annotations=os.path.join(rel, "instances.json"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=20, help="timed batches per measurement")
    ap.add_argument("--quick", action="store_true", help="1 round, 48 photos, 6 batches")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    if args.quick:
        args.rounds, args.batches = 1, 6
    started = time.time()
    base = os.path.abspath(make_data(os.path.abspath(args.data), args.quick))
    data_root = os.path.abspath(args.data)
    out_dir = os.path.join(args.out, "out")
    os.makedirs(out_dir, exist_ok=True)
    info = bench.machine_info(build)
    daemon = bench.Daemon(build, data_root, bench.WORKERS, os.path.join(out_dir, "detection-stokerd.log"))
    try:
        runs = bench.side_by_side(
            RECIPES, lambda recipe, config, r: source(recipe, config, base, data_root, daemon, r),
            daemon, args.rounds, args.batches)
    finally:
        daemon.stop()
    raw = dict(info=info, runs=runs, rounds=args.rounds, batches=args.batches,
               minutes=(time.time() - started) / 60)
    json.dump(raw, open(os.path.join(out_dir, "detection.json"), "w"), indent=1)
    write(os.path.join(args.out, "DETECTION.md"), raw)
    return 0


def write(path: str, raw: Dict[str, Any]) -> None:
    info, runs = raw["info"], raw["runs"]
    med = lambda rs, k: statistics.median(x[k] for x in rs)  # noqa: E731
    lines = [
        "# Segmentation and detection recipes: stoker vs DataLoader", "",
        f"Generated by `bench/detection.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"in {raw['minutes']:.1f} min ({raw['rounds']} rounds, {raw['batches']} timed batches "
        "each); the module's docstring says what runs on each side.", "",
        f"- CPU: {info['cpu']}, {info['cores']} cores, {info['memory']} RAM; {info['os']}; "
        f"stokerd {info['stokerd']}; load average at the end: {bench.loadavg()}.",
        "- Both sides: 2 workers, float32 NCHW; images/s are medians over the rounds; "
        "producer CPU is the workers' (and stokerd's) cores while timed.", "",
        "| recipe | batch | DataLoader img/s | stoker img/s | stoker / DataLoader (target >= 3x) "
        "| DataLoader producer cores | stoker producer cores |",
        "|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for recipe, batch in (("segmentation", SEG_BATCH), ("ssd", SSD_BATCH),
                          ("multiscale", MS_BATCH), ("multiscale-padded", MS_BATCH)):
        dl, st = runs[recipe]["dl"], runs[recipe]["stoker"]
        ratio = med(st, "images_per_s") / med(dl, "images_per_s")
        lines.append(f"| {recipe} | {batch} | {med(dl, 'images_per_s'):.1f} | "
                     f"{med(st, 'images_per_s'):.1f} | {ratio:.2f}x | "
                     f"{med(dl, 'producer_cores'):.2f} | {med(st, 'producer_cores'):.2f} |")
        verdicts.append(f"- {recipe}: {ratio:.2f}x — **{'met' if ratio >= 3 else 'missed'}**.")
    lines += ["", "## Target", ""] + verdicts + [""]
    open(path, "w").write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
