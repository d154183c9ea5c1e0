"""The train and eval pipelines on every format, against torchvision's PIL path.

For each format the decode is exact (test_format_*.py), so the fused crop +
resize must hold the bounds JPEG's exact decode holds in
test_image_fidelity.py: mean absolute error <= 1 level and no value more
than 2 levels from torchvision's resized_crop / Resize + CenterCrop on
Image.open(f).convert("RGB"). The images are finely textured (fur, fabric,
print) and photo-like, at odd sizes, so that the region a format decodes
for a crop (PNG stops after its last row, TIFF reads its strips, WebP its
widened crop) is exercised at its edges.

Run with Debian's python: /usr/bin/python3 -m pytest tests/python/test_format_pipelines.py
"""

import io

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as TF  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402

import formats_util as fu  # noqa: E402
import textured_corpus  # noqa: E402

pytestmark = pytest.mark.skipif(not fu.tool_available(), reason=f"{fu.TOOL} not built")

MAE_LIMIT = 1.0  # as JPEG's exact decode (test_image_fidelity.py MAE_EXACT)
MAX_LIMIT = 2

# (name, PIL format, save options, mode): each format in a mode ImageFolder
# sets hold, the rare modes being covered pixel for pixel elsewhere.
FORMATS = [
    ("png", "PNG", {}, "RGB"),
    ("png_palette", "PNG", {}, "P"),
    ("png_adam7", "PNG", {"interlace": 1}, "RGB"),
    ("webp_lossy", "WEBP", {"quality": 85}, "RGB"),
    ("webp_lossless", "WEBP", {"lossless": True}, "RGB"),
    ("tiff_lzw", "TIFF", {"compression": "tiff_lzw"}, "RGB"),
    ("bmp", "BMP", {}, "RGB"),
    ("ppm", "PPM", {}, "RGB"),
]
EXT = {"PNG": "png", "WEBP": "webp", "TIFF": "tif", "BMP": "bmp", "PPM": "ppm"}
CONTENT = ["fur", "fabric", "text", "photo"]
SIZE = (419, 301)  # width, height: odd, and not a multiple of any block or strip


def content(kind: str, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    make = {"fur": textured_corpus._fur, "fabric": textured_corpus._fabric,
            "text": textured_corpus._text, "photo": textured_corpus._photo}[kind]
    return make(SIZE[0], SIZE[1], rng).convert("RGB")


def write(tmp_path, name, fmt, opts, mode, kind, seed):
    img = content(kind, seed)
    if mode != "RGB":
        img = img.convert(mode)
    path = tmp_path / f"{name}_{kind}.{EXT[fmt]}"
    img.save(path, fmt, **opts)
    return path


def boxes(width, height, seed, n=3):
    rng = np.random.default_rng(seed)
    out = [(0, 0, height, width, False), (height - 97, width - 131, 97, 131, True)]
    for i in range(n):
        area = width * height * rng.uniform(0.08, 1.0)
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        w = int(min(width, round(np.sqrt(area * ratio))))
        h = int(min(height, round(np.sqrt(area / ratio))))
        top, left = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1))
        out.append((top, left, h, w, i % 2 == 0))
    return out


def within(got, want, what):
    assert got.shape == want.shape, what
    diff = np.abs(got.astype(int) - want.astype(int))
    assert diff.mean() <= MAE_LIMIT and diff.max() <= MAX_LIMIT, (
        f"{what}: MAE {diff.mean():.3f} (limit {MAE_LIMIT}), max {diff.max()} (limit {MAX_LIMIT})")


@pytest.mark.parametrize("kind", CONTENT)
@pytest.mark.parametrize("name,fmt,opts,mode", FORMATS, ids=[f[0] for f in FORMATS])
def test_train_forced_crops_match_torchvision(tmp_path, name, fmt, opts, mode, kind):
    path = write(tmp_path, name, fmt, opts, mode, kind, seed=len(name) + len(kind))
    img = Image.open(path).convert("RGB")
    for top, left, h, w, flip in boxes(img.width, img.height, seed=len(kind)):
        want = TF.resized_crop(img, top, left, h, w, [224, 224], InterpolationMode.BILINEAR)
        if flip:
            want = TF.hflip(want)
        got, header = fu.stoker_decode(path, tmp_path, "--pipeline", "train", "--size", 224, 224,
                                       "--crop", top, left, h, w, "--flip", int(flip))
        within(got, np.asarray(want), f"{path.name} box {(top, left, h, w, flip)}")


@pytest.mark.parametrize("kind", CONTENT)
@pytest.mark.parametrize("name,fmt,opts,mode", FORMATS, ids=[f[0] for f in FORMATS])
def test_eval_matches_resize_center_crop(tmp_path, name, fmt, opts, mode, kind):
    path = write(tmp_path, name, fmt, opts, mode, kind, seed=7 * len(name) + len(kind))
    img = Image.open(path).convert("RGB")
    want = np.asarray(T.CenterCrop(224)(T.Resize(256)(img)))
    got, _ = fu.stoker_decode(path, tmp_path, "--pipeline", "eval", "--size", 224, 224,
                              "--resize", 256)
    within(got, want, path.name)


def test_a_file_is_decoded_by_content_through_the_pipeline(tmp_path):
    # The tool is given a PNG named .jpg: the pixels are the PNG's.
    img = content("photo", 3)
    path = tmp_path / "really_a_png.jpg"
    buf = io.BytesIO()
    img.save(buf, "PNG")
    path.write_bytes(buf.getvalue())
    got, header = fu.stoker_decode(path, tmp_path)
    assert header["format"] == "png"
    assert np.array_equal(got, np.asarray(img))
