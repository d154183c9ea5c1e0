"""Detection boxes through their image's geometry, end to end: a COCO
instances file over PNG images (decoded exactly), served by the real daemon,
the targets compared with torchvision's published box arithmetic.

The reference: torchvision's detection reference transforms
(references/detection/transforms.py: RandomHorizontalFlip's
`boxes[:, [0, 2]] = width - boxes[:, [2, 0]]`, ConvertCocoPolysToMask's
XYWH -> XYXY and clamp to the image) and its v2 box kernels
(transforms/v2/functional: crop = shift then clamp, resize = scale, pad =
shift, affine and rotate = the four corners through
_get_inverse_affine_matrix(..., inverted=False) about (w/2, h/2), the box
holding them, clamped), reproduced below in float64 from torchvision 0.14's
own _get_inverse_affine_matrix. The random parameters are forced: each
sample's steps are drawn by `stoker-image-tool render` for the same key.
Boxes agree within 1e-4 px; labels and crowd flags follow their boxes."""

import json
import os
import subprocess

import numpy as np
import pytest

PIL = pytest.importorskip("PIL.Image")
F = pytest.importorskip("torchvision.transforms.functional")
torch = pytest.importorskip("torch")


def make_coco(root, sizes, boxes_of, missing=(), extra_annotations=()):
    """PNG images of `sizes` (textured; the red channel names the image) and
    instances.json: image ids 100 + k (listed in reverse), boxes_of(k, h, w)
    -> [(x, y, w, h, category, iscrowd)]."""
    rng = np.random.default_rng(5)
    (root / "images").mkdir(parents=True, exist_ok=True)
    images, anns = [], []
    for k, (h, w) in enumerate(sizes):
        if k not in missing:
            img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            img[:, :, 0] = k * 7
            PIL.fromarray(img).save(root / "images" / f"{k}.png")
        images.append({"id": 100 + k, "file_name": f"{k}.png", "width": w, "height": h})
        for (x, y, bw, bh, cat, crowd) in boxes_of(k, h, w):
            anns.append({"id": len(anns) + 1, "image_id": 100 + k, "category_id": cat,
                         "bbox": [x, y, bw, bh], "iscrowd": crowd, "area": bw * bh,
                         "segmentation": [[x, y, x + bw, y, x + bw, y + bh]]})
    anns.extend(extra_annotations)
    doc = {"images": images[::-1], "annotations": anns,
           "categories": [{"id": c, "name": f"c{c}"} for c in range(1, 91)]}
    # Python's json writes NaN bare, as real pipelines that made such files do.
    (root / "instances.json").write_text(json.dumps(doc))
    return doc


def xyxy_by_image(doc):
    """{image id: [[x1, y1, x2, y2], ...]} from a COCO document's XYWH bboxes."""
    by_image = {}
    for a in doc["annotations"]:
        x, y, bw, bh = a["bbox"]
        by_image.setdefault(a["image_id"], []).append([x, y, x + bw, y + bh])
    return by_image


def random_boxes(seed):
    def boxes_of(k, h, w):
        rng = np.random.default_rng(seed * 1000 + k)
        out = []
        for _ in range(int(rng.integers(0, 9))):
            x, y = float(rng.uniform(-5, w - 2)), float(rng.uniform(-5, h - 2))
            bw, bh = float(rng.uniform(0.5, w / 2)), float(rng.uniform(0.5, h / 2))
            out.append((x, y, bw, bh, int(rng.integers(1, 91)), int(rng.random() < 0.2)))
        return out
    return boxes_of


def steps_of(build_dir, tmp_path, image, seed, epoch, index, keywords, boxes=None):
    tool = os.path.join(build_dir, "bin", "stoker-image-tool")
    steps_file = str(tmp_path / "steps.json")
    extra = ["--boxes", json.dumps(boxes)] if boxes is not None else []
    r = subprocess.run([tool, "render", "--input", str(image), "--out", str(tmp_path / "o.raw"),
                        "--keywords", json.dumps(keywords), "--seed", str(seed),
                        "--epoch", str(epoch), "--index", str(index), "--steps-out", steps_file]
                       + extra, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(open(steps_file).read())


def f32(v):
    return float(np.float32(v))


def reference_boxes(boxes, steps, h, w):
    """boxes (n, 4) XYXY, float64, through `steps` as torchvision moves
    BoundingBoxes; returns the boxes and the mask of those with area."""
    b = np.array(boxes, np.float64).reshape(-1, 4)
    b[:, [0, 2]] = b[:, [0, 2]].clip(0, w)  # ConvertCocoPolysToMask's clamp
    b[:, [1, 3]] = b[:, [1, 3]].clip(0, h)
    alive = np.ones(len(b), bool)
    for s in steps:
        k = s["kind"]
        if k == "crop":
            if s.get("box_centers"):  # RandomIoUCrop: centers strictly inside, or dropped
                cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
                right, bottom = s["left"] + s["width"], s["top"] + s["height"]
                alive &= (s["left"] < cx) & (cx < right) & (s["top"] < cy) & (cy < bottom)
            b -= [s["left"], s["top"], s["left"], s["top"]]
            h, w = s["height"], s["width"]
            b[:, [0, 2]] = b[:, [0, 2]].clip(0, w)
            b[:, [1, 3]] = b[:, [1, 3]].clip(0, h)
        elif k == "pad":
            left, top, right, bottom = s["padding"]
            b += [left, top, left, top]
            h, w = h + top + bottom, w + left + right
        elif k == "resize":
            b *= [s["width"] / w, s["height"] / h, s["width"] / w, s["height"] / h]
            h, w = s["height"], s["width"]
        elif k == "hflip":
            b[:, [0, 2]] = w - b[:, [2, 0]]
        elif k == "vflip":
            b[:, [1, 3]] = h - b[:, [3, 1]]
        elif k in ("affine", "rotate"):
            center = [w * 0.5, h * 0.5]
            if k == "affine":
                m = F._get_inverse_affine_matrix(center, f32(s["angle"]),
                                                 [float(t) for t in s["translate"]],
                                                 f32(s["scale"]), [float(x) for x in s["shear"]],
                                                 inverted=False)
            else:  # v2's rotate: affine by -angle about the center
                m = F._get_inverse_affine_matrix(center, -f32(s["angle"]), [0.0, 0.0], 1.0,
                                                 [0.0, 0.0], inverted=False)
            mt = np.array([[m[0], m[3]], [m[1], m[4]], [m[2], m[5]]], np.float64)
            pts = b[:, [[0, 1], [2, 1], [0, 3], [2, 3]]].reshape(-1, 2)
            pts = np.concatenate([pts, np.ones((len(pts), 1))], axis=1) @ mt
            pts = pts.reshape(-1, 4, 2)
            b = np.concatenate([pts.min(axis=1), pts.max(axis=1)], axis=1)
            b[:, [0, 2]] = b[:, [0, 2]].clip(0, w)
            b[:, [1, 3]] = b[:, [1, 3]].clip(0, h)
        # colour and erase steps: nothing
    keep = alive & (b[:, 2] - b[:, 0] > 0) & (b[:, 3] - b[:, 1] > 0)
    return b, keep


SIZES = [(48, 64), (64, 48), (50, 50), (40, 90), (72, 56), (60, 60), (45, 70), (80, 40)]

GEOMETRY = [
    {"RandomAffine": {"degrees": [-25, 25], "translate": [0.1, 0.1], "scale": [0.8, 1.2],
                      "shear": [-8, 8, -4, 4]}},
    {"RandomRotation": {"degrees": [-30, 30]}},
    {"RandomCrop": {"size": [36, 40], "padding": [3, 4], "pad_if_needed": True}},
    {"Pad": {"padding": [5, 2, 0, 6], "padding_mode": "reflect"}},
    {"RandomVerticalFlip": {"p": 0.5}},
    {"ColorJitter": {"brightness": 0.3}},
    {"Resize": {"size": [32, 32]}},
]


@pytest.mark.parametrize("keywords", [{"size": 32}, {"ops": GEOMETRY, "size": 32}],
                         ids=["train", "affine-rotate-crop-flip"])
def test_boxes_move_with_their_images(stoker, daemon_factory, build_dir, tmp_path, keywords):
    root = tmp_path / "data"
    doc = make_coco(root, SIZES, random_boxes(1))
    by_image = {}
    for a in doc["annotations"]:
        x, y, bw, bh = a["bbox"]
        by_image.setdefault(a["image_id"], []).append(
            ([x, y, x + bw, y + bh], a["category_id"], a["iscrowd"]))
    d = daemon_factory(workers=2, data_root=str(root))
    kw = {k: v for k, v in keywords.items() if k != "size"}
    with stoker.Loader("images", socket=d.socket, batch_size=4, size=32, seed=11, epochs=2,
                       annotations="instances.json", **kw) as ld:
        assert ld.info["box_stride"] == max(len(v) for v in by_image.values())
        compared = boxes_seen = 0
        for _ in range(2):
            for view in ld.iter_batches():
                images, targets = view  # a detection set yields (images, targets)
                assert targets is view.targets and len(targets) == len(view)
                assert view.statuses.tolist() == [0] * len(view)
                for i, index in enumerate(view.indices.tolist()):
                    t = targets[i]
                    assert t["image_id"] == 100 + index  # ids by ascending id: index k
                    if "ops" not in keywords:  # (affine fill and jitter change the corner)
                        assert int(images[i, 0, 0, 0]) == index * 7  # the sample's image
                    given = by_image.get(100 + index, [])
                    h, w = SIZES[index]
                    steps = steps_of(build_dir, tmp_path, root / "images" / f"{index}.png", 11,
                                     view.epoch, index, keywords)
                    want, keep = reference_boxes([g[0] for g in given], steps, h, w)
                    assert t["boxes"].dtype.is_floating_point and t["boxes"].shape[1] == 4
                    got = t["boxes"].numpy().astype(np.float64)
                    assert got.shape[0] == int(keep.sum()), (index, steps)
                    assert np.abs(got - want[keep]).max(initial=0) <= 1e-4, (index, steps)
                    assert t["labels"].tolist() == [g[1] for g, k in zip(given, keep) if k]
                    assert t["iscrowd"].tolist() == [g[2] for g, k in zip(given, keep) if k]
                    # Every box lies in the output image.
                    assert (got[:, :2] >= 0).all() and (got[:, 2] <= 32).all()
                    assert (got[:, 3] <= 32).all()
                    compared += 1
                    boxes_seen += got.shape[0]
        assert compared == 2 * len(SIZES) and boxes_seen > 10


def test_box_counts_from_none_to_thousands_and_bad_annotations(stoker, daemon_factory,
                                                               tmp_path):
    """0, 1 and 3000 boxes in one sample; a crowd box; a missing image; a NaN
    box and a negative width: the bad ones are sample failures, counted and
    named, never a refused dataset or a dead daemon."""
    sizes = [(40, 40)] * 7

    def boxes_of(k, h, w):
        if k == 1:
            return [(2, 3, 10, 12, 5, 1)]
        if k == 2:
            rng = np.random.default_rng(2)
            return [(float(x), float(y), 3.0, 3.0, int(c), 0)
                    for x, y, c in zip(rng.uniform(0, 36, 3000), rng.uniform(0, 36, 3000),
                                       rng.integers(1, 91, 3000))]
        if k == 4:
            return [(1, 1, 5, 5, 3, 0), (float("nan"), 1, 2, 2, 3, 0)]
        if k == 5:
            return [(10, 10, -4, 5, 3, 0)]
        return []

    root = tmp_path / "data"
    make_coco(root, sizes, boxes_of, missing=(3,))
    d = daemon_factory(workers=2, data_root=str(root))
    eval_kw = dict(pipeline="eval", size=40, resize_size=40)  # identity geometry
    with stoker.Loader("images", socket=d.socket, batch_size=7, shuffle=False, epochs=1,
                       annotations="instances.json", **eval_kw) as ld:
        view = next(ld.iter_batches())
        status = dict(zip(view.planned_indices.tolist(), view.statuses.tolist()))
        assert status == {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1, 6: 0}
        t = view.targets
        by_index = {int(i): t[k] for k, i in enumerate(view.indices.tolist())}
        assert by_index[0]["boxes"].shape == (0, 4) and by_index[6]["labels"].numel() == 0
        assert by_index[1]["boxes"].tolist() == [[2.0, 3.0, 12.0, 15.0]]
        assert by_index[1]["labels"].tolist() == [5] and by_index[1]["iscrowd"].tolist() == [1]
        assert by_index[2]["boxes"].shape == (3000, 4)
        assert len(t) == 7
        [session] = stoker.Client(d.socket).status()["sessions"]
        # Counted: 3, 4 and 5 (a replacement drawn from the bad ones fails again).
        assert int(session["samples_failed"]) >= 3
    log = d.log()
    assert "3.png" in log  # the missing image
    failed = [line for line in log.splitlines() if "failed:" in line]
    assert any("box 1 (nan, 1, nan, 3) is not a box" in line for line in failed), failed
    assert any("box 0 (10, 10, 6, 15) is not a box" in line for line in failed), failed
    with stoker.Loader("images", socket=d.socket, batch_size=7, shuffle=False, epochs=1,
                       annotations="instances.json", failure_policy="error", **eval_kw) as ld:
        with pytest.raises(stoker.SampleError, match="is not a box|3.png"):
            next(iter(ld))


def test_exactly_once_and_resume_with_boxes(stoker, daemon_factory, tmp_path):
    root = tmp_path / "data"
    make_coco(root, SIZES * 2, random_boxes(2))
    d = daemon_factory(workers=2, data_root=str(root))
    opts = dict(socket=d.socket, batch_size=4, size=32, seed=5, annotations="instances.json")

    def targets_of(view):
        return [(int(i), t["boxes"].numpy().round(4).tolist(), t["labels"].tolist())
                for i, t in zip(view.indices.tolist(), view.targets)]

    with stoker.Loader("images", epochs=2, **opts) as ld:
        seen = []
        batches = []
        for _ in range(2):
            epoch = []
            for view in ld.iter_batches():
                epoch += view.indices.tolist()
                batches.append(targets_of(view))
            assert sorted(epoch) == list(range(len(SIZES) * 2))  # each sample once
            seen.append(epoch)
        assert seen[0] != seen[1]  # shuffled per epoch
    with stoker.Loader("images", epochs=2, **opts) as ld:
        it = ld.iter_batches()
        for _ in range(3):
            next(it)
        state = ld.state_dict()
    with stoker.Loader("images", epochs=2, **opts) as ld:
        ld.load_state_dict(state)
        again = [targets_of(v) for v in ld.iter_batches()]
    assert again == batches[3:len(again) + 3]


def test_box_rules_drop_small_and_hidden_boxes(stoker, daemon_factory, tmp_path):
    def boxes_of(k, h, w):  # areas 4, 100 and 300 at input
        return [(5, 5, 2, 2, 1, 0), (10, 10, 10, 10, 2, 0), (30, 0, 30, 10, 3, 0)]

    root = tmp_path / "data"
    make_coco(root, [(40, 80)] * 4, boxes_of)
    d = daemon_factory(workers=1, data_root=str(root))
    ops = [{"RandomCrop": {"size": [40, 40]}}]  # a 40x40 window of the 80-wide image
    opts = dict(socket=d.socket, batch_size=4, shuffle=False, epochs=1, seed=0,
                annotations="instances.json", ops=ops, size=40)
    with stoker.Loader("images", **opts) as ld:
        base = next(ld.iter_batches()).targets
    with stoker.Loader("images", box_min_size=3, box_min_visibility=0.5, **opts) as ld:
        ruled = next(ld.iter_batches()).targets
    area_in = {1: 4.0, 2: 100.0, 3: 300.0}
    for b, r in zip(base, ruled):
        want = []
        for (x1, y1, x2, y2), label in zip(b["boxes"].tolist(), b["labels"].tolist()):
            if x2 - x1 >= 3 and y2 - y1 >= 3 and (x2 - x1) * (y2 - y1) / area_in[label] >= 0.5:
                want.append(label)
        assert r["labels"].tolist() == want
        assert 1 not in want  # 2x2: below box_min_size wherever the window fell
    with pytest.raises(stoker.InvalidRequestError, match="box_min_visibility must be within"):
        stoker.Loader("images", socket=d.socket, batch_size=2, annotations="instances.json",
                      box_min_visibility=2)
    with pytest.raises(stoker.InvalidRequestError, match="leave apply_exif_orientation off"):
        stoker.Loader("images", socket=d.socket, batch_size=2, annotations="instances.json",
                      apply_exif_orientation=True).info


SSD = [  # references/detection presets' SSD train transforms, as stoker ops
    {"RandomPhotometricDistort": {}},
    {"RandomZoomOut": {"fill": [123, 117, 104]}},
    {"RandomIoUCrop": {}},
    {"RandomHorizontalFlip": {"p": 0.5}},
    {"Resize": {"size": [48, 48]}},
]


def reference_image(path, steps):
    """The steps on the PIL image with torchvision's functional ops, as the
    detection reference's transforms run them on a PIL image."""
    import torch
    img = PIL.open(path).convert("RGB")
    adjust = {"brightness": F.adjust_brightness, "contrast": F.adjust_contrast,
              "saturation": F.adjust_saturation, "hue": F.adjust_hue}
    for s in steps:
        k = s["kind"]
        if k == "color_jitter":
            for name in s["order"]:
                img = adjust[name](img, f32(s[name]))
        elif k == "permute":  # RandomPhotometricDistort's PIL -> float -> PIL round trip
            t = F.convert_image_dtype(F.pil_to_tensor(img), torch.float)
            img = F.to_pil_image(t[s["permutation"], :, :])
        elif k == "pad":
            img = F.pad(img, s["padding"], fill=tuple(s["fill"]), padding_mode=s["padding_mode"])
        elif k == "crop":
            img = F.crop(img, s["top"], s["left"], s["height"], s["width"])
        elif k == "hflip":
            img = F.hflip(img)
        elif k == "resize":
            img = F.resize(img, [s["height"], s["width"]], antialias=s["antialias"])
        else:
            raise AssertionError(f"no reference for step {k}")
    return np.array(img)


def test_the_ssd_recipe_moves_boxes_and_pixels_as_the_reference(stoker, daemon_factory,
                                                                 build_dir, tmp_path):
    root = tmp_path / "data"
    doc = make_coco(root, SIZES, random_boxes(3))
    by_image = {}
    for a in doc["annotations"]:
        x, y, bw, bh = a["bbox"]
        xyxy = [float(np.float32(x)), float(np.float32(y)), float(np.float32(x + bw)),
                float(np.float32(y + bh))]
        by_image.setdefault(a["image_id"], []).append((xyxy, a["category_id"], a["iscrowd"]))
    d = daemon_factory(workers=2, data_root=str(root))
    keywords = {"ops": SSD}
    kinds = set()
    with stoker.Loader("images", socket=d.socket, batch_size=4, ops=SSD, seed=4, epochs=2,
                       annotations="instances.json") as ld:
        for _ in range(2):
            for view in ld.iter_batches():
                images, targets = view
                for i, index in enumerate(view.indices.tolist()):
                    given = by_image.get(100 + index, [])
                    path = root / "images" / f"{index}.png"
                    steps = steps_of(build_dir, tmp_path, path, 4, view.epoch, index, keywords,
                                     boxes=[g[0] for g in given])
                    kinds |= {st["kind"] + ("/iou" if st.get("box_centers") else "")
                              for st in steps}
                    assert np.array_equal(images[i].numpy(), reference_image(path, steps)), steps
                    h, w = SIZES[index]
                    want, keep = reference_boxes([g[0] for g in given], steps, h, w)
                    got = targets[i]["boxes"].numpy().astype(np.float64)
                    assert got.shape[0] == int(keep.sum()), (index, steps)
                    assert np.abs(got - want[keep]).max(initial=0) <= 1e-4, (index, steps)
                    assert targets[i]["labels"].tolist() == [g[1] for g, k in zip(given, keep) if k]
    # The recipe's every kind of step ran at least once over the two epochs.
    assert {"color_jitter", "permute", "pad", "crop/iou", "resize"} <= kinds, kinds


def test_iou_crop_needs_boxes(stoker, daemon_factory, tmp_path):
    root = tmp_path / "data"
    (root / "cls").mkdir(parents=True)
    for k in range(4):
        PIL.fromarray(np.zeros((20, 20, 3), np.uint8)).save(root / "cls" / f"{k}.png")
    d = daemon_factory(workers=1, data_root=str(root))
    with pytest.raises(stoker.InvalidRequestError, match="RandomIoUCrop needs each sample's boxes"):
        stoker.Loader(".", socket=d.socket, batch_size=2, ops=SSD).info


def write_shard(root, loose, samples=6):
    """A WebDataset shard (root/shard.tar, each member also in `loose`) whose
    sample k holds a jpg image of SIZES[k], a png mask and a json with k boxes,
    their labels 0..k-1 and the sample's label k; returns each one's boxes."""
    import io
    import tarfile
    root.mkdir()
    loose.mkdir()
    rng = np.random.default_rng(8)
    boxes = {}
    with tarfile.open(root / "shard.tar", "w") as tar:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            (loose / name).write_bytes(data)
        for k in range(samples):
            h, w = SIZES[k]
            buf = io.BytesIO()
            PIL.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
                buf, "JPEG", quality=90)
            add(f"{k:03d}.jpg", buf.getvalue())
            buf = io.BytesIO()
            m = ((np.arange(h)[:, None] // 5 + np.arange(w)[None, :] // 3) % 21).astype(np.uint8)
            PIL.fromarray(m, mode="L").save(buf, "PNG")
            add(f"{k:03d}.seg.png", buf.getvalue())
            bx = [[float(x), float(y), float(x + 9), float(y + 7)]
                  for x, y in zip(rng.uniform(0, w - 10, k), rng.uniform(0, h - 8, k))]
            boxes[k] = bx
            add(f"{k:03d}.json", json.dumps({"label": k, "boxes": bx,
                                             "labels": list(range(k))}).encode())
    return boxes


def test_output_dict_gives_every_field_by_name(stoker, daemon_factory, tmp_path):
    """output='dict': the same batches as the tuple output, each field by its
    ring name: one tensor for a field of one shape, else each sample's own."""
    root = tmp_path / "data"
    boxes = write_shard(root, tmp_path / "loose")
    d = daemon_factory(workers=2, data_root=str(root))
    kw = dict(socket=d.socket, batch_size=3, size=32, seed=6, epochs=1)
    with stoker.Loader("shard.tar", **kw) as ld:
        tuples = [(images.clone(), [{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                     for k, v in t.items()} for t in targets])
                  for images, targets in ld]
        assert [f[0] for f in ld.fields] == ["image", "label", "mask", "boxes", "box_labels",
                                             "box_flags"]
        most = max(len(b) for b in boxes.values())
        assert ld.fields[3] == ("boxes", "float32", (most, 4), False)
        assert ld.fields[2] == ("mask", "uint8", (32, 32), True)
    with stoker.Loader("shard.tar", output="dict", **kw) as ld:
        dicts = list(ld)
    assert len(dicts) == len(tuples) == 2
    for got, (images, targets) in zip(dicts, tuples):
        assert set(got) == {"image", "label", "mask", "boxes", "box_labels", "box_flags"}
        assert torch.equal(got["image"], images)
        assert got["mask"].shape == (3, 32, 32) and got["mask"].dtype == torch.uint8
        assert got["label"].tolist() == [t["image_id"] for t in targets]
        for i, t in enumerate(targets):
            assert torch.equal(got["mask"][i], t["masks"])
            assert torch.equal(got["boxes"][i], t["boxes"]) and got["boxes"][i].shape[1] == 4
            assert torch.equal(got["box_labels"][i], t["labels"])
            assert got["box_flags"][i].tolist() == t["iscrowd"].tolist()
            assert got["box_flags"][i].dtype == torch.uint8
    with pytest.raises(stoker.InvalidRequestError, match="output='list'.*'tuple'.*'dict'"):
        stoker.Loader("shard.tar", output="list", **kw)


def test_webdataset_samples_carry_masks_and_boxes(stoker, daemon_factory, build_dir, tmp_path):
    """A shard whose samples hold a jpg image, a png mask and a json with
    boxes: both targets move with the image (the mask exactly as
    stoker-image-tool's labels run moves it, the boxes as the reference's
    arithmetic), and come as torchvision's detection targets with "masks"."""
    root = tmp_path / "data"
    loose = tmp_path / "loose"
    boxes = write_shard(root, loose)
    d = daemon_factory(workers=2, data_root=str(root))
    keywords = {"size": 32}
    tool = os.path.join(build_dir, "bin", "stoker-image-tool")
    with stoker.Loader("shard.tar", socket=d.socket, batch_size=3, size=32, seed=6,
                       epochs=1) as ld:
        seen = 0
        for view in ld.iter_batches():
            images, targets = view
            assert view.statuses.tolist() == [0, 0, 0], d.log_tail(5)
            for i, index in enumerate(view.indices.tolist()):
                t = targets[i]
                assert tuple(t["masks"].shape) == (32, 32)
                steps = steps_of(build_dir, tmp_path, loose / f"{index:03d}.jpg", 6, view.epoch,
                                 index, keywords, boxes=boxes[index])
                out = str(tmp_path / "mask.raw")
                r = subprocess.run([tool, "labels", "--input", str(loose / f"{index:03d}.seg.png"),
                                    "--out", out, "--steps", json.dumps(steps)],
                                   capture_output=True, text=True, timeout=60)
                assert r.returncode == 0, r.stderr
                want_mask = np.fromfile(out, dtype=np.uint8).reshape(32, 32)
                assert np.array_equal(t["masks"].numpy(), want_mask)
                h, w = SIZES[index]
                want, keep = reference_boxes(boxes[index], steps, h, w)
                got = t["boxes"].numpy().astype(np.float64)
                assert got.shape[0] == int(keep.sum())
                assert np.abs(got - want[keep]).max(initial=0) <= 1e-4
                assert t["labels"].tolist() == [lab for lab, k in zip(range(index), keep) if k]
                assert t["image_id"] == index  # the json's label
                seen += 1
        assert seen == 6


def test_random_shortest_size_scales_boxes_as_the_reference(stoker, daemon_factory, build_dir,
                                                           tmp_path):
    root = tmp_path / "data"
    doc = make_coco(root, SIZES, random_boxes(4))
    by_image = xyxy_by_image(doc)
    ops = [{"RandomShortestSize": {"min_size": [40, 56, 72], "max_size": 90}},
           {"CenterCrop": {"size": [36, 36]}}]
    d = daemon_factory(workers=2, data_root=str(root))
    with stoker.Loader("images", socket=d.socket, batch_size=4, ops=ops, seed=9, epochs=1,
                       annotations="instances.json") as ld:
        for view in ld.iter_batches():
            for i, index in enumerate(view.indices.tolist()):
                steps = steps_of(build_dir, tmp_path, root / "images" / f"{index}.png", 9,
                                 view.epoch, index, {"ops": ops})
                h, w = SIZES[index]
                # torchvision: r = min(s / shorter, max_size / longer), int(side * r).
                sizes = {(int(h * r), int(w * r)) for r in
                         (min(s / min(h, w), 90 / max(h, w)) for s in (40, 56, 72))}
                resized = [(s["height"], s["width"]) for s in steps if s["kind"] == "resize"]
                assert resized[0] in sizes if resized else (h, w) in sizes
                want, keep = reference_boxes(by_image.get(100 + index, []), steps, h, w)
                got = view.targets[i]["boxes"].numpy().astype(np.float64)
                assert got.shape[0] == int(keep.sum())
                assert np.abs(got - want[keep]).max(initial=0) <= 1e-4


MULTI_SCALE = [  # the detection reference's multi-scale recipe, scaled down
    {"RandomShortestSize": {"min_size": [24, 32, 40], "max_size": 56}},
    {"RandomHorizontalFlip": {"p": 0.5}},
]


def test_images_of_their_own_sizes_batch_as_lists_or_padded(stoker, daemon_factory, build_dir,
                                                            tmp_path):
    """RandomShortestSize leaves every image a size of its own: a COCO batch
    is a list of them (the detection reference's collate_fn), or with
    pad_to_multiple one zero-padded tensor (GeneralizedRCNNTransform's
    batch_images) with each image's own size reported; boxes move as the
    image did either way, and every sample comes once an epoch."""
    root = tmp_path / "data"
    doc = make_coco(root, SIZES, random_boxes(2))
    by_image = xyxy_by_image(doc)
    d = daemon_factory(workers=2, data_root=str(root))
    opts = dict(socket=d.socket, batch_size=3, seed=4, epochs=1, ops=MULTI_SCALE,
                annotations="instances.json", layout="nchw")
    listed = {}
    with stoker.Loader("images", **opts) as ld:
        # Slots sized by the ops' bound (shorter side <= 40, longer <= 56),
        # not by max_decode_pixels.
        assert ld.info["height"] == 0
        assert 3 * 40 * 56 * 3 <= ld.info["slot_bytes"] <= 3 * 40 * 56 * 3 + 8192  # pages
        for view in ld.iter_batches():
            images, targets = view
            assert isinstance(images, list) and len(images) == len(view) == len(targets)
            assert view.image_sizes == [tuple(a.shape[1:]) for a in images]
            assert ld.last_image_sizes == view.image_sizes
            for i, index in enumerate(view.indices.tolist()):
                h, w = SIZES[index]
                steps = steps_of(build_dir, tmp_path, root / "images" / f"{index}.png", 4, 0,
                                 index, {"ops": MULTI_SCALE})
                resize = [s for s in steps if s["kind"] == "resize"][0]
                assert images[i].shape == (3, resize["height"], resize["width"])
                assert min(images[i].shape[1:]) <= 40 and max(images[i].shape[1:]) <= 56
                want, keep = reference_boxes(by_image.get(100 + index, []), steps, h, w)
                got = targets[i]["boxes"].numpy().astype(np.float64)
                assert got.shape[0] == int(keep.sum())
                assert np.abs(got - want[keep]).max(initial=0) <= 1e-4
                assert int(images[i][0].min()) == int(images[i][0].max()) == index * 7  # its own
                listed[index] = (images[i].clone(), targets[i]["boxes"].clone())
    assert sorted(listed) == list(range(len(SIZES)))  # each sample once
    sizes_seen = {tuple(a.shape) for a, _ in listed.values()}
    assert len(sizes_seen) > 2  # the sizes do vary

    padded = 0
    with stoker.Loader("images", pad_to_multiple=16, **opts) as ld:
        for view in ld.iter_batches():
            images, targets = view
            n, c, hh, ww = images.shape
            assert (n, c) == (len(view), 3) and hh % 16 == 0 and ww % 16 == 0
            assert hh == -(-max(h for h, _ in view.image_sizes) // 16) * 16
            assert ww == -(-max(w for _, w in view.image_sizes) // 16) * 16
            for i, index in enumerate(view.indices.tolist()):
                img, boxes = listed[index]
                h, w = view.image_sizes[i]
                assert (h, w) == tuple(img.shape[1:])
                assert torch_equal(images[i, :, :h, :w], img)  # the same pixels, top left
                assert int(images[i, :, h:, :].abs().sum()) == 0  # zeros below
                assert int(images[i, :, :, w:].abs().sum()) == 0  # and to the right
                padded += int(h < hh or w < ww)
                assert torch_equal(targets[i]["boxes"], boxes)  # boxes are not moved by padding
    assert padded > 0


def torch_equal(a, b):
    return a.shape == b.shape and bool((a == b).all())


def test_images_of_their_own_sizes_are_refused_without_a_way_to_batch_them(stoker,
                                                                            daemon_factory,
                                                                            tmp_path):
    root = tmp_path / "data"
    make_coco(root, SIZES[:4], random_boxes(3))
    d = daemon_factory(workers=1, data_root=str(root))
    with pytest.raises(stoker.InvalidRequestError, match="(?s)cannot be stacked.*pad_to_multiple"):
        stoker.Loader("images", socket=d.socket, batch_size=2, ops=MULTI_SCALE)
    for bad in (0, True, 2.5, "32", 5000):
        with pytest.raises(stoker.InvalidRequestError, match="pad_to_multiple must be an int"):
            stoker.Loader("images", socket=d.socket, batch_size=2, ops=MULTI_SCALE,
                          pad_to_multiple=bad)
    # A fixed size pads too (to the multiple), when asked.
    with stoker.Loader("images", socket=d.socket, batch_size=2, size=20, pad_to_multiple=8,
                       annotations="instances.json", epochs=1, layout="nchw") as ld:
        images, _ = next(iter(ld))
        assert tuple(images.shape) == (2, 3, 24, 24)
        assert ld.last_image_sizes == [(20, 20), (20, 20)]
        assert int(images[:, :, 20:, :].abs().sum()) == 0
