"""EXIF orientation through the real daemon: torchvision's pixels by default.

torchvision's ImageFolder reads a sample with PIL's Image.open(f).convert("RGB"),
which does not turn the image as its EXIF orientation tag says. stoker gives the
same pixels unless the session asks for apply_exif_orientation (then it gives
ImageOps.exif_transpose's). One ImageFolder with a photo tagged orientation 6
(rotate 90 degrees clockwise to display), non-square so a transpose shows.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest
from PIL import Image, ImageOps

from conftest import make_dataset, samples_in_order

torchvision = pytest.importorskip("torchvision")
import torchvision.transforms as T  # noqa: E402

ROTATED = "a_rotated.jpg"  # sorts first in class_00: sample 0
H, W = 96, 160  # as coded; displayed 160 x 96 once turned


@pytest.fixture(scope="module")
def folder():
    top = tempfile.mkdtemp(prefix="stk", dir="/tmp")
    root = os.path.join(top, "folder")
    make_dataset(root, classes=2, per_class=3, sizes=(60, 120), seed=6)
    rng = np.random.default_rng(6)
    y, x = np.mgrid[0:H, 0:W]
    img = np.stack([x * 255 // W, y * 255 // H, (x + y) % 64 * 4], axis=-1).astype(np.float64)
    img += rng.normal(0, 8, img.shape)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
        os.path.join(root, "class_00", ROTATED), "JPEG", quality=90, exif=exif.tobytes())
    yield root
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def served(module_daemon_factory, folder):
    return module_daemon_factory(workers=1, data_root=os.path.dirname(folder))


def read_all(stoker, daemon, folder, **kw):
    """Every sample in order, batch 1: [(image array, label)]; `kw`: the
    pipeline keywords."""
    return samples_in_order(stoker, daemon.socket, os.path.basename(folder), pipeline=kw)


def test_decode_gives_imagefolder_pixels_and_turns_only_when_asked(stoker, served, folder):
    tv = torchvision.datasets.ImageFolder(folder)
    assert os.path.basename(tv.samples[0][0]) == ROTATED
    default = read_all(stoker, served, folder, pipeline="decode")
    assert len(default) == len(tv)
    for i, (got, label) in enumerate(default):
        img, want_label = tv[i]
        want = np.asarray(img)
        assert label == want_label, tv.samples[i]
        assert got.shape == want.shape and np.array_equal(got, want), tv.samples[i][0]
    assert default[0][0].shape == (H, W, 3)

    turned = read_all(stoker, served, folder, pipeline="decode", apply_exif_orientation=True)
    with Image.open(tv.samples[0][0]) as im:
        want = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    assert turned[0][0].shape == (W, H, 3)
    assert np.array_equal(turned[0][0], want)
    for (a, _), (b, _) in zip(turned[1:], default[1:]):  # untagged files: unchanged
        assert np.array_equal(a, b)


def test_eval_follows_imagefolder_with_its_transforms(stoker, served, folder):
    # What a validation loop sees: Resize + CenterCrop on ImageFolder's image.
    tf = T.Compose([T.Resize(64), T.CenterCrop(56)])
    tv = torchvision.datasets.ImageFolder(folder, transform=tf)
    kw = dict(pipeline="eval", size=56, resize_size=64, dtype="uint8", layout="nhwc")
    default = read_all(stoker, served, folder, **kw)
    turned = read_all(stoker, served, folder, apply_exif_orientation=True, **kw)
    with Image.open(tv.samples[0][0]) as im:
        want_turned = np.asarray(tf(ImageOps.exif_transpose(im).convert("RGB"))).astype(int)
    want = np.asarray(tv[0][0]).astype(int)
    assert np.abs(default[0][0].astype(int) - want).mean() < 0.1
    # Turned, the resize runs in the coded orientation: rounding differs, not geometry.
    assert np.abs(turned[0][0].astype(int) - want_turned).mean() < 0.5
    assert np.abs(want - want_turned).mean() > 10  # the two really differ
