"""bench/make_data.py writes the codings it says (progressive by PIL and by
jpegtran, baseline, EXIF orientations), and bench/bench.py's mix of two
measured sets adds their per-image times. Small files only: well under 2 s."""

import os
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import bench  # noqa: E402
import make_data  # noqa: E402


def sof_marker(path):
    """The frame marker's second byte: 0xC0 baseline, 0xC2 progressive."""
    data = open(path, "rb").read()
    i = 2
    while i + 4 <= len(data):
        assert data[i] == 0xFF, f"bad marker at {i} in {path}"
        m = data[i + 1]
        if m in (0xC0, 0xC1, 0xC2):
            return m
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    raise AssertionError(f"no SOF in {path}")


def test_small_set_codings_and_content(tmp_path):
    # By index: 0 PIL progressive, 5 jpegtran progressive, 4 textured (print)
    # baseline, 1 plain baseline.
    want = {0: ("pil-progressive", "scene", 0xC2), 5: ("jpegtran-progressive", "scene", 0xC2),
            4: ("baseline", "text", 0xC0), 1: ("baseline", "scene", 0xC0)}
    for index, (coding, kind, sof) in want.items():
        path = str(tmp_path / f"s{index}.jpg")
        row = make_data._small_job((path, 1_000_003 + index, index))
        assert row[4:6] == (coding, kind)
        assert sof_marker(path) == sof
        with Image.open(path) as im:
            assert im.size == (row[2], row[1])
            im.load()


def test_jpegtran_keeps_the_pixels_and_the_orientation(tmp_path):
    rng = np.random.default_rng(3)
    img = make_data.textured(rng, "fabric", 96, 128)
    base, prog = str(tmp_path / "b.jpg"), str(tmp_path / "p.jpg")
    make_data._save(img, base, "baseline", 90, 2, orientation=6)
    make_data._save(img, prog, "jpegtran-progressive", 90, 2, orientation=6)
    assert (sof_marker(base), sof_marker(prog)) == (0xC0, 0xC2)
    with Image.open(base) as b, Image.open(prog) as p:
        assert b.getexif().get(0x0112) == 6 and p.getexif().get(0x0112) == 6
        # Lossless re-coding: the same coefficients, so the same pixels.
        assert np.array_equal(np.asarray(b), np.asarray(p))
    assert not os.path.exists(prog + ".base.jpg")


def test_mix_adds_per_image_times():
    def runs(rate, cores):
        return {"k": [dict(images_per_s=rate, producer_cores=cores, consumer_cores=0.0,
                           decode_ms=1000 / rate, augment_ms=0.0)],
                "_load": [dict(start="0", end="1")]}
    mix = bench.mix_runs([(runs(10.0, 2.0), 50), (runs(30.0, 1.0), 50)])
    (r,) = mix["k"]
    # Half the files at 0.1 s, half at 1/30 s: 1 / (0.05 + 1/60) = 15 images/s.
    assert r["images_per_s"] == pytest.approx(15.0)
    # 75% of the time in the first part: cores 0.75 * 2 + 0.25 * 1.
    assert r["producer_cores"] == pytest.approx(1.75)
    assert r["decode_ms"] == pytest.approx(0.5 * 100 + 0.5 * 1000 / 30)
