"""stokerd's start-up calibration of the DCT scales against a real daemon:
Status holds the table (scales 1, 2, 4, 8 with positive times) and stokerctl
sums it up; `--decode-calibration off` measures nothing and disables nothing;
two calibrated daemons decode a sample eligible for 1/8 to the same pixels,
and to those of an uncalibrated one when nothing was disabled. No timing and
no particular disabled scale is asserted: both depend on the machine."""

import json
import os

import numpy as np
import pytest
from PIL import Image

# eval at size 16: Resize(18) + CenterCrop(16) of a 1200x1100 image reads
# about 61 decoded pixels per output pixel, over the quality rule's 52 for
# DCT scale 1/8 (pipeline.cc kMinDecodedPerOutput x 8).
PIPELINE = {"pipeline": "eval", "size": 16}
SCALE_BITS = {1: 1, 2: 2, 4: 8}


def _status(d):
    r = d.ctl("status", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _disabled(st):
    return {int(c.get("scale", 0)) for c in st["decode_calibration"]["scales"]
            if c.get("disabled")}


def _dataset(d):
    """Two progressive 4:2:0 photos (1/8 takes the dc_scans path) and one
    baseline, in one class."""
    root = os.path.join(d.data_root, "ds", "a")
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(5)
    y = np.linspace(0, 1, 1100, dtype=np.float32)[:, None, None]
    x = np.linspace(0, 1, 1200, dtype=np.float32)[None, :, None]
    for i in range(3):
        base = rng.uniform(40, 200, 3) + rng.uniform(-60, 60, 3) * x + rng.uniform(-60, 60, 3) * y
        noise = rng.normal(0, 12, (1100, 1200, 3))
        img = np.clip(base + 20 * np.sin(40 * (x + y)) + noise, 0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(root, f"img_{i}.jpg"), "JPEG", quality=90,
                                  progressive=i < 2, optimize=True, subsampling=2)
    return "ds"


def _epoch(stoker, d):
    """The epoch's batch bytes (unshuffled) and the session's status."""
    s = stoker.Client(d.socket).attach(_dataset(d), batch_size=3, shuffle=False, epochs=1,
                                       pipeline=PIPELINE)
    try:
        raw = s.next(30000)
        assert raw[3].tolist() == [0, 0, 0], raw[3]
        out = np.array(raw[0]["image"][0]).tobytes()
        st = _status(d)
    finally:
        s.detach()
    return out, st


ON = ["--decode-calibration", "on"]


def test_status_shows_the_table(daemon_factory):
    d = daemon_factory(workers=1, extra_args=ON)
    st = _status(d)
    dc = st["decode_calibration"]
    assert [int(c["scale"]) for c in dc["scales"]] == [1, 2, 4, 8]
    for c in dc["scales"]:
        assert c["baseline_ms"] > 0 and c["progressive_ms"] > 0, c
    assert not dc["scales"][3].get("disabled", False)  # 8/8 never is
    assert dc["seconds"] > 0 and dc["source"] == "measured"
    assert st["config"]["decode_calibration"] is True
    assert "decode calibration (" in d.log()
    r = d.ctl("status")
    assert r.returncode == 0, r.stderr
    line = [x for x in r.stdout.splitlines() if x.startswith("decode calibration")]
    assert line and "8/8" in r.stdout, r.stdout


def test_off_measures_and_disables_nothing(daemon_factory, stoker):
    d = daemon_factory(workers=1, extra_args=["--decode-calibration", "off"])
    st = _status(d)
    assert "decode_calibration" not in st
    assert st["config"]["decode_calibration"] is False
    assert "decode calibration (" not in d.log()
    r = d.ctl("status")
    assert r.returncode == 0 and "decode calibration off" in r.stdout, r.stdout
    # Every scale allowed: the progressive files are decoded at 1/8 from
    # their DC scans.
    _, st = _epoch(stoker, d)
    paths = {p["path"]: int(p.get("samples", 0)) for p in st["sessions"][0]["decode_paths"]}
    assert paths.get("dc_scans") == 2, paths


def test_same_pixels_across_calibrated_daemons(daemon_factory, stoker, tmp_short):
    """A daemon started again on the same machine loads the calibration the
    first one saved beside the index cache: the same scales, the same pixels."""
    index = ["--index-cache", os.path.join(tmp_short, "shared", "index")]
    a = daemon_factory(workers=1, extra_args=ON + index)
    b = daemon_factory(workers=2, extra_args=ON + index)
    off = daemon_factory(workers=1, extra_args=["--decode-calibration", "off"])
    saved = os.path.join(tmp_short, "shared", "index", "decode-calibration.txt")
    assert _status(a)["decode_calibration"]["source"] == "measured"
    assert os.stat(saved).st_mode & 0o777 == 0o600
    assert _status(b)["decode_calibration"]["source"] == saved
    assert "loaded from" in b.log()
    assert ([c["baseline_ms"] for c in _status(a)["decode_calibration"]["scales"]] ==
            [c["baseline_ms"] for c in _status(b)["decode_calibration"]["scales"]])
    out_a, st_a = _epoch(stoker, a)
    out_b, st_b = _epoch(stoker, b)
    out_off, _ = _epoch(stoker, off)
    assert _disabled(st_a) == _disabled(st_b)
    assert out_a == out_b
    if not _disabled(st_a):
        assert out_a == out_off
        paths = {p["path"]: int(p.get("samples", 0))
                 for p in st_a["sessions"][0]["decode_paths"]}
        assert paths.get("dc_scans") == 2, paths
    if 1 in _disabled(st_a):
        # 1/8 off: the progressive files are decoded whole at a larger scale.
        paths = {p["path"]: int(p.get("samples", 0))
                 for p in st_a["sessions"][0]["decode_paths"]}
        assert paths.get("dc_scans", 0) == 0, paths


def test_a_calibration_file_others_can_write_is_not_loaded(daemon_factory, tmp_short):
    index = os.path.join(tmp_short, "planted", "index")
    a = daemon_factory(workers=1, extra_args=ON + ["--index-cache", index])
    saved = os.path.join(index, "decode-calibration.txt")
    assert _status(a)["decode_calibration"]["source"] == "measured"
    os.chmod(saved, 0o666)
    b = daemon_factory(workers=1, extra_args=ON + ["--index-cache", index])
    assert _status(b)["decode_calibration"]["source"] == "measured"  # measured again
    assert os.stat(saved).st_mode & 0o777 == 0o600  # and saved afresh
