"""Masks through their image's geometry, against torchvision's segmentation
reference transforms (references/segmentation/transforms.py: RandomResize,
RandomHorizontalFlip, RandomCrop with pad_if_smaller's fill 255,
CenterCrop) and v2's joint handling of masks (affine and rotate with
NEAREST and the mask's fill), with the random parameters forced: the same
steps run through `stoker-image-tool labels` (server/image/ops/labels.h) and
through torchvision's functional ops on the PIL mask. Masks equal exactly.

The masks are what segmentation sets hold: VOC-style palette PNGs (21
classes and 255 borders), 16-bit gray (more classes than a byte holds),
4-bit and 1-bit gray, all with fine detail (single-pixel speckle and thin
borders, which a resize's rounding would move first)."""

import json
import os
import subprocess

import numpy as np
import pytest

PIL = pytest.importorskip("PIL.Image")
F = pytest.importorskip("torchvision.transforms.functional")
from torchvision.transforms import InterpolationMode  # noqa: E402


def labels(rng, h, w, classes, border=255):
    """Blobs of classes with 1-pixel borders of `border` and speckle."""
    yy, xx = np.mgrid[0:h, 0:w]
    out = np.zeros((h, w), np.int64)
    for _ in range(8):
        cy, cx = rng.integers(0, h), rng.integers(0, w)
        r = rng.integers(max(2, min(h, w) // 8), max(3, min(h, w) // 2))
        inside = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
        out[inside] = rng.integers(1, classes)
        if border is not None:
            ring = inside & ((yy - cy) ** 2 + (xx - cx) ** 2 >= (r - 1) ** 2)
            out[ring] = border
    speckle = rng.random((h, w)) < 0.02
    out[speckle] = rng.integers(0, classes, speckle.sum())
    return out


def palette_mask(path, rng, h, w):
    a = labels(rng, h, w, 21).astype(np.uint8)
    im = PIL.fromarray(a, mode="P")
    im.putpalette([v for i in range(256) for v in ((i * 37) % 256, (i * 91) % 256, (i * 13) % 256)])
    im.save(path)
    return a


def gray16_mask(path, rng, h, w):
    a = labels(rng, h, w, 3000, border=65535 - 1).astype(np.uint16)
    PIL.fromarray(a, mode="I;16").save(path)
    return a


def gray4_mask(path, rng, h, w):
    # 4-bit gray: PIL opens it as "L" with values scaled by 17.
    a = labels(rng, h, w, 16, border=None).astype(np.uint8)
    im = PIL.fromarray(a * 17, mode="L")
    im.save(path, bits=4)
    return a * 17


def gray1_mask(path, rng, h, w):
    a = (labels(rng, h, w, 2, border=None) > 0).astype(np.uint8)
    PIL.fromarray(a * 255, mode="L").convert("1").save(path)
    return a


MAKERS = {"palette": palette_mask, "gray16": gray16_mask, "gray4": gray4_mask,
          "gray1": gray1_mask}


def run_tool(build_dir, tmp_path, mask_path, steps, fill=255):
    out = str(tmp_path / "out.raw")
    r = subprocess.run([os.path.join(build_dir, "bin", "stoker-image-tool"), "labels",
                        "--input", mask_path, "--out", out, "--steps", json.dumps(steps),
                        "--fill", str(fill)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    shape = json.loads(r.stdout)
    dtype = np.uint8 if shape["bpp"] == 1 else np.uint16
    return np.fromfile(out, dtype=dtype).reshape(shape["height"], shape["width"]), shape


def reference(mask, steps, fill=255):
    """The steps on the PIL mask with torchvision's functional ops, as the
    segmentation references (and v2, for affine and rotate) move a target."""
    for s in steps:
        k = s["kind"]
        if k == "resize":
            mask = F.resize(mask, [s["height"], s["width"]], InterpolationMode.NEAREST)
        elif k == "crop":
            mask = F.crop(mask, s["top"], s["left"], s["height"], s["width"])
        elif k == "pad":
            mask = F.pad(mask, s["padding"], fill=fill)
        elif k == "hflip":
            mask = F.hflip(mask)
        elif k == "vflip":
            mask = F.vflip(mask)
        elif k == "affine":
            mask = F.affine(mask, angle=s["angle"], translate=s["translate"], scale=s["scale"],
                            shear=s["shear"], interpolation=InterpolationMode.NEAREST,
                            fill=fill)
        elif k == "rotate":
            mask = F.rotate(mask, s["angle"], InterpolationMode.NEAREST, fill=fill)
        # colour steps: nothing
    return np.array(mask)


def seg_train(h, w, size, flip, crop, top, left):
    """references/segmentation presets' train transforms with their draws
    forced: RandomResize to shorter side `size`, a flip, RandomCrop(crop)
    after pad_if_smaller (right and bottom, fill 255)."""
    short, long_ = (h, w) if h <= w else (w, h)
    other = int(size * long_ / short)
    nh, nw = (size, other) if h <= w else (other, size)
    steps = [{"kind": "resize", "op": 0, "height": nh, "width": nw, "antialias": True}]
    if flip:
        steps.append({"kind": "hflip", "op": 1})
    ph, pw = max(0, crop - nh), max(0, crop - nw)
    if ph or pw:
        steps.append({"kind": "pad", "op": 2, "padding": [0, 0, pw, ph],
                      "padding_mode": "constant", "fill": [0, 0, 0]})
    steps.append({"kind": "crop", "op": 2, "top": top, "left": left, "height": crop,
                  "width": crop})
    steps.append({"kind": "color_jitter", "op": 3, "order": ["brightness"], "brightness": 1.3})
    return steps


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_segmentation_train_recipe_moves_masks_exactly(build_dir, tmp_path, kind):
    rng = np.random.default_rng(11)
    for h, w, size, flip, crop in [(180, 240, 130, True, 96), (200, 150, 60, False, 80),
                                   (97, 131, 260, True, 160), (240, 240, 240, False, 240)]:
        path = str(tmp_path / f"{kind}.png")
        MAKERS[kind](path, rng, h, w)
        pil = PIL.open(path)
        short, long_ = min(h, w), max(h, w)
        nh, nw = (size, int(size * long_ / short)) if h <= w else (int(size * long_ / short), size)
        top = int(rng.integers(0, max(nh, crop) - crop + 1))
        left = int(rng.integers(0, max(nw, crop) - crop + 1))
        steps = seg_train(h, w, size, flip, crop, top, left)
        ours, shape = run_tool(build_dir, tmp_path, path, steps)
        ref = reference(pil, steps)
        assert ours.shape == ref.shape == (crop, crop)
        assert np.array_equal(ours.astype(np.int64), ref.astype(np.int64)), (kind, h, w, size)
        if kind == "gray16":
            assert shape["bpp"] == 2 and ref.max() > 255
        if (nh < crop or nw < crop) and kind != "gray1":
            assert (ours == 255).any()  # pad_if_smaller's "ignore" fill
        # A 1-bit mask ("1") stores any fill but 0 as 1, in PIL and here.


@pytest.mark.parametrize("kind", ["palette", "gray16"])
def test_affine_rotate_and_flips_move_masks_exactly(build_dir, tmp_path, kind):
    rng = np.random.default_rng(5)
    path = str(tmp_path / f"{kind}.png")
    MAKERS[kind](path, rng, 143, 187)
    pil = PIL.open(path)
    cases = [
        [{"kind": "affine", "op": 0, "angle": 17.5, "translate": [9, -4], "scale": 1.2,
          "shear": [6.0, -3.0], "interpolation": "nearest", "fill": [0, 0, 0]}],
        [{"kind": "rotate", "op": 0, "angle": -33.0, "interpolation": "nearest",
          "fill": [0, 0, 0]}],
        [{"kind": "rotate", "op": 0, "angle": 180.0, "interpolation": "bilinear",
          "fill": [0, 0, 0]}],
        [{"kind": "vflip", "op": 0}, {"kind": "hflip", "op": 1},
         {"kind": "crop", "op": 2, "top": 10, "left": 31, "height": 100, "width": 120},
         {"kind": "resize", "op": 3, "height": 333, "width": 77, "antialias": True}],
    ]
    for steps in cases:
        ours, _ = run_tool(build_dir, tmp_path, path, steps, fill=255)
        ref = reference(pil, steps, fill=255)
        assert np.array_equal(ours.astype(np.int64), ref.astype(np.int64)), steps
    # Every value moved is a value of the mask or the fill.
    src = np.array(pil).astype(np.int64)
    ours, _ = run_tool(build_dir, tmp_path, path, cases[0], fill=255)
    assert set(np.unique(ours)) <= set(np.unique(src)) | {255}


def test_flips_twice_are_the_identity(build_dir, tmp_path):
    rng = np.random.default_rng(2)
    path = str(tmp_path / "m.png")
    src = palette_mask(path, rng, 61, 89)
    for k in ("hflip", "vflip"):
        ours, _ = run_tool(build_dir, tmp_path, path, [{"kind": k, "op": 0}, {"kind": k, "op": 1}])
        assert np.array_equal(ours, src)


def test_colour_masks_and_other_formats_are_refused_clearly(build_dir, tmp_path):
    path = str(tmp_path / "rgb.png")
    PIL.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)
    out = str(tmp_path / "o.raw")
    tool = os.path.join(build_dir, "bin", "stoker-image-tool")
    r = subprocess.run([tool, "labels", "--input", path, "--out", out], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "single-channel" in r.stderr and "RGB" in r.stderr
    path = str(tmp_path / "m.webp")
    PIL.fromarray(np.zeros((8, 8), np.uint8), mode="L").save(path)
    r = subprocess.run([tool, "labels", "--input", path, "--out", out], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "PNG files only" in r.stderr


def make_seg_set(root, n=12, size=(60, 80), wide=False):
    """n RGB images (PNG: decoded exactly) whose colour names their index,
    each with a palette (or 16-bit) mask holding its index and a gradient of
    other classes, and a manifest of image, mask and label columns."""
    rng = np.random.default_rng(3)
    (root / "img").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(exist_ok=True)
    h, w = size
    for k in range(n):
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        img[:, :, 0] = k * 10  # the red channel names the sample
        PIL.fromarray(img).save(root / "img" / f"{k}.png")
        m = ((np.arange(h)[:, None] // 7 + np.arange(w)[None, :] // 5) % 20).astype(np.int64)
        m[: h // 2, : w // 2] = k + 100 if wide else k  # the top-left quarter names it too
        if wide:
            m = m * 150  # values past 255
            PIL.fromarray(m.astype(np.uint16), mode="I;16").save(root / "masks" / f"{k}.png")
        else:
            im = PIL.fromarray(m.astype(np.uint8), mode="P")
            im.putpalette([v for i in range(256) for v in (i, 255 - i, (7 * i) % 256)])
            im.save(root / "masks" / f"{k}.png")
    (root / "seg.txt").write_text(
        "#columns: image\tmask\tlabel\n" +
        "".join(f"img/{k}.png\tmasks/{k}.png\t{k % 3}\n" for k in range(n)))


def expected_mask(build_dir, tmp_path, root, index, seed, epoch, keywords, fill=255):
    """The mask the daemon must deliver for a sample: the image's steps
    (drawn by stoker-image-tool render for the same key) run on its mask."""
    tool = os.path.join(build_dir, "bin", "stoker-image-tool")
    steps_file = str(tmp_path / "steps.json")
    r = subprocess.run([tool, "render", "--input", str(root / "img" / f"{index}.png"),
                        "--out", str(tmp_path / "img.raw"), "--keywords", json.dumps(keywords),
                        "--seed", str(seed), "--epoch", str(epoch), "--index", str(index),
                        "--steps-out", steps_file], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    steps = json.loads(open(steps_file).read())
    mask, _ = run_tool(build_dir, tmp_path, str(root / "masks" / f"{index}.png"), steps, fill)
    return mask


def test_masks_reach_the_trainer_with_their_images(stoker, daemon_factory, build_dir, tmp_path):
    root = tmp_path / "data"
    make_seg_set(root)
    d = daemon_factory(workers=2, data_root=str(root))
    keywords = {"size": 32}  # the train preset: RandomResizedCrop(32), a flip
    with stoker.Loader("seg.txt", socket=d.socket, batch_size=4, size=32, seed=7,
                       epochs=2) as ld:
        assert ld.info["mask_dtype"] == "uint8"
        seen = 0
        for epoch in range(2):
            for view in ld.iter_batches():
                images, masks = view  # a segmentation set yields (images, masks)
                assert masks is view.masks and masks.dtype == torch_uint8()
                assert tuple(masks.shape) == (len(view), 32, 32)
                assert view.labels.tolist() == [int(i) % 3 for i in view.indices]
                for i, index in enumerate(view.indices.tolist()):
                    # Image and mask are the same sample's ...
                    assert int(images[i, 0, 0, 0]) == index * 10
                    # ... and the mask moved exactly as its image was.
                    want = expected_mask(build_dir, tmp_path, root, index, 7, view.epoch,
                                         keywords)
                    assert np.array_equal(masks[i].numpy(), want), (epoch, index)
                    seen += 1
        assert seen == 24


def torch_uint8():
    import torch
    return torch.uint8


def test_mask_failures_are_sample_failures_naming_the_mask(stoker, daemon_factory, tmp_path):
    root = tmp_path / "data"
    make_seg_set(root, n=6)
    PIL.fromarray(np.zeros((10, 10), np.uint8), mode="L").save(root / "masks" / "2.png")
    (root / "masks" / "4.png").write_bytes(b"not a png")
    d = daemon_factory(workers=1, data_root=str(root))
    with stoker.Loader("seg.txt", socket=d.socket, batch_size=6, size=32, shuffle=False,
                       epochs=1, failure_policy="error") as ld:
        with pytest.raises(stoker.SampleError, match="mask .*masks/2.png: is 10x10, its image 80x60"):
            next(iter(ld))
    with stoker.Loader("seg.txt", socket=d.socket, batch_size=6, size=32, shuffle=False,
                       epochs=1) as ld:
        view = next(ld.iter_batches())
        statuses = view.statuses.tolist()
        assert statuses[2] == 1 and statuses[4] == 1  # replaced, as a bad image would be
        assert sorted(set(view.indices.tolist())) == [0, 1, 3, 5]
        for i, index in enumerate(view.indices.tolist()):
            assert int(view.images[i, 0, 0, 0]) == index * 10
            # A replaced sample's mask is its replacement's.
            assert set(np.unique(view.masks[i].numpy())) <= set(range(20)) | {index, 255}
    assert "failed: mask masks/4.png: label maps (masks) are read from PNG files only" in d.log()


def test_sixteen_bit_masks_need_mask_dtype_uint16(stoker, daemon_factory, tmp_path):
    root = tmp_path / "data"
    make_seg_set(root, n=4, wide=True)
    d = daemon_factory(workers=1, data_root=str(root))
    with stoker.Loader("seg.txt", socket=d.socket, batch_size=4, size=32, shuffle=False,
                       epochs=1, mask_dtype="uint16", mask_fill=65535) as ld:
        assert ld.info["mask_dtype"] == "uint16"
        view = next(ld.iter_batches())
        assert view.masks.numpy().dtype == np.int32  # torch has no uint16
        assert view.statuses.tolist() == [0, 0, 0, 0]
        assert int(view.masks.max()) > 255
    with stoker.Loader("seg.txt", socket=d.socket, batch_size=4, size=32, shuffle=False,
                       epochs=1, failure_policy="error") as ld:
        with pytest.raises(stoker.SampleError, match="over 255: set mask_dtype='uint16'"):
            next(iter(ld))
    with pytest.raises(stoker.InvalidRequestError, match="mask_fill 300 does not fit"):
        stoker.Loader("seg.txt", socket=d.socket, batch_size=4, size=32, mask_fill=300)


SEG_RECIPE = [  # references/segmentation presets' train transforms, as stoker ops
    {"RandomResize": {"min_size": 24, "max_size": 61}},
    {"RandomHorizontalFlip": {"p": 0.5}},
    {"RandomCrop": {"size": [40, 40], "pad_if_needed": True}},
]


def test_the_segmentation_recipe_moves_masks_with_their_images(stoker, daemon_factory,
                                                               build_dir, tmp_path):
    root = tmp_path / "data"
    make_seg_set(root, n=8)
    d = daemon_factory(workers=2, data_root=str(root))
    keywords = {"ops": SEG_RECIPE}
    with stoker.Loader("seg.txt", socket=d.socket, batch_size=4, ops=SEG_RECIPE, seed=3,
                       epochs=1, dtype="float32", layout="nchw") as ld:
        padded = 0
        for view in ld.iter_batches():
            images, masks = view
            assert tuple(images.shape) == (4, 3, 40, 40) and tuple(masks.shape) == (4, 40, 40)
            for i, index in enumerate(view.indices.tolist()):
                want = expected_mask(build_dir, tmp_path, root, index, 3, view.epoch, keywords)
                assert np.array_equal(masks[i].numpy(), want), index
                padded += int((want == 255).any())  # pad_if_needed's fill: "ignore"
        assert padded > 0  # some draw was under the crop and padded


def test_paired_folders_serve_what_the_manifest_does(stoker, daemon_factory, tmp_path):
    """VOC's layout (images and masks folders matched by name) gives the same
    samples as a manifest listing the same pairs; an image without a mask is
    left out."""
    root = tmp_path / "data"
    make_seg_set(root, n=6)
    PIL.fromarray(np.zeros((60, 80, 3), np.uint8)).save(root / "img" / "extra.png")
    d = daemon_factory(workers=2, data_root=str(root))
    opts = dict(socket=d.socket, batch_size=6, size=32, seed=2, epochs=1, shuffle=False)
    with stoker.Loader("img", masks="masks", **opts) as ld:
        paired = next(ld.iter_batches())
        # Listed within the images folder, as ImageFolder's samples are.
        assert [os.path.relpath(p, ld.dataset.root) for p, _ in ld.dataset.samples] == [
            f"{k}.png" for k in range(6)]
    (root / "pairs.txt").write_text("#columns: image\tmask\n" + "".join(
        f"img/{k}.png\tmasks/{k}.png\n" for k in range(6)))
    with stoker.Loader("pairs.txt", **opts) as ld:
        listed = next(ld.iter_batches())
    assert paired.indices.tolist() == listed.indices.tolist() == list(range(6))
    assert np.array_equal(paired.images.numpy(), listed.images.numpy())
    assert np.array_equal(paired.masks.numpy(), listed.masks.numpy())
    assert "1 image(s) in 'img' have no mask" in d.log()
    with pytest.raises(stoker.StokerError, match="has a mask in"):
        stoker.Loader("img", masks="masks", mask_suffix="_gt", **opts).info


SEG_EVAL = [  # the segmentation reference's eval preset: the shorter side, any longer
    {"RandomResize": {"min_size": 24, "max_size": 61}},
    {"RandomHorizontalFlip": {"p": 0.5}},
]


@pytest.mark.parametrize("wide", [False, True], ids=["uint8", "uint16"])
def test_any_size_segmentation_batches_pad_as_the_reference_collates(stoker, daemon_factory,
                                                                     build_dir, tmp_path, wide):
    """Without a crop every image keeps a size of its own; pad_to_multiple=1
    batches them as the segmentation reference's collate_fn (cat_list):
    images at the top left over 0, masks over 255, each the exact mask of its
    image's steps; the same samples one at a time are the padded ones'
    top-left corners."""
    root = tmp_path / "data"
    make_seg_set(root, n=8, wide=wide)
    d = daemon_factory(workers=2, data_root=str(root))
    opts = dict(socket=d.socket, ops=SEG_EVAL, seed=6, epochs=1, shuffle=False, layout="nchw",
                mask_dtype="uint16" if wide else "uint8")
    alone = {}
    with stoker.Loader("seg.txt", batch_size=1, **opts) as ld:
        for view in ld.iter_batches():
            (img,), (mask,) = view
            alone[int(view.indices[0])] = (img.clone(), mask.clone())
    assert len({tuple(m.shape) for _, m in alone.values()}) > 2  # the sizes vary
    seen = []
    with stoker.Loader("seg.txt", batch_size=4, pad_to_multiple=1, **opts) as ld:
        for view in ld.iter_batches():
            images, masks = view
            hh = max(h for h, _ in view.image_sizes)
            ww = max(w for _, w in view.image_sizes)
            assert tuple(images.shape) == (4, 3, hh, ww) and tuple(masks.shape) == (4, hh, ww)
            for i, index in enumerate(view.indices.tolist()):
                h, w = view.image_sizes[i]
                img, mask = alone[index]
                assert tuple(mask.shape) == (h, w)
                assert bool((images[i, :, :h, :w] == img).all())
                want = expected_mask(build_dir, tmp_path, root, index, 6, 0, {"ops": SEG_EVAL})
                assert np.array_equal(mask.numpy(), want), index
                assert np.array_equal(masks[i, :h, :w].numpy(), want), index
                assert int(images[i, :, h:].abs().sum()) + int(images[i, :, :, w:].abs().sum()) == 0
                assert bool((masks[i, h:] == 255).all()) and bool((masks[i, :, w:] == 255).all())
                seen.append(index)
    assert seen == list(range(8))


@pytest.mark.parametrize("kind", ["palette", "gray16"])
def test_perspective_moves_masks_as_pil_nearest(build_dir, tmp_path, kind):
    """v2's RandomPerspective moves a mask with NEAREST: exactly PIL's
    PERSPECTIVE transform for the exact coefficients; against torchvision's
    float32-solved ones, all but the pixels that rounding moves across an
    edge (test_image_ops.py's PERSPECTIVE_OFF_SHARE)."""
    rng = np.random.default_rng(8)
    path = str(tmp_path / f"{kind}.png")
    MAKERS[kind](path, rng, 143, 187)
    pil = PIL.open(path)
    w, h = pil.size
    corners = [9, 4, 180, 0, 170, 130, 2, 141]
    steps = [{"kind": "perspective", "op": 0, "corners": corners, "interpolation": "nearest"}]
    ours, _ = run_tool(build_dir, tmp_path, path, steps, fill=255)
    start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
    end = [corners[0:2], corners[2:4], corners[4:6], corners[6:8]]
    a, b = [], []
    for (x, y), (u, v) in zip(end, start):
        a += [[x, y, 1, 0, 0, 0, -u * x, -u * y], [0, 0, 0, x, y, 1, -v * x, -v * y]]
        b += [u, v]
    exact = np.linalg.solve(np.array(a, float), np.array(b, float)).tolist()
    want = np.array(pil.transform(pil.size, PIL.PERSPECTIVE, exact, PIL.NEAREST, fillcolor=255))
    assert np.array_equal(ours.astype(np.int64), want.astype(np.int64))
    tv = np.array(F.perspective(pil, start, end, InterpolationMode.NEAREST, fill=255))
    assert (ours.astype(np.int64) != tv.astype(np.int64)).mean() <= 5e-4
    assert (ours == 255).any()  # the corners moved in: fill
