"""Progressive JPEGs decoded at DCT scale 1/8 from their DC scans only.

At scale 1/8 libjpeg's 1x1 inverse DCT reads only the DC coefficient, so
the decoder leaves out the AC scans of the components that use it
(server/image/decode/jpeg_decoder.h, ScanSelection::kNeeded; pipeline.h
DecodePath::kDcScans). The pixels must be those of the whole file, bit for
bit. Files written the ways real ones are: PIL (progressive=True,
optimize=True, each subsampling; gray; CMYK), cjpeg -progressive and
cjpeg -scans with scan scripts, jpegtran -progressive and jpegtran -scans
from a baseline file. Each goes through `stoker-image-tool render` with an
eval pipeline small enough that the planner picks 1/8 (a 2400x1800 image to
32x32), once with --decode-path auto and once with whole: the bytes must be
equal, and the auto run must report the DC path.

Needs the tool ($STOKER_BUILD_DIR/server/image/stoker-image-tool) and
libjpeg-turbo-progs (cjpeg, jpegtran); skips without them.
Run with Debian's python: /usr/bin/python3 -m pytest -q tests/python/test_progressive.py
"""

import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("STOKER_BUILD_DIR", REPO / "build"))
TOOL = BUILD / "bin" / "stoker-image-tool"

pytestmark = pytest.mark.skipif(not TOOL.exists(), reason=f"{TOOL} not built")

WIDTH, HEIGHT = 2400, 1800  # 1800 / 32 = 56 decoded pixels per output: 1/8 (7 per output)

# cjpeg/jpegtran -scans scripts for YCbCr ("components: Ss-Se, Ah, Al;").
SCRIPTS = {
    # DC first at Al=1, its last bit at the very end (jpegtran's habit).
    "late_dc_refine": "0,1,2: 0-0, 0, 1;\n0: 1-63, 0, 0;\n1: 1-63, 0, 0;\n2: 1-63, 0, 0;\n0,1,2: 0-0, 1, 0;\n",
    # One DC scan per component, AC in successive approximation.
    "split_dc_approx_ac": (
        "0: 0-0, 0, 0;\n1: 0-0, 0, 0;\n2: 0-0, 0, 0;\n"
        "0: 1-5, 0, 2;\n0: 6-63, 0, 2;\n1: 1-63, 0, 1;\n2: 1-63, 0, 1;\n"
        "0: 1-63, 2, 1;\n0: 1-63, 1, 0;\n1: 1-63, 1, 0;\n2: 1-63, 1, 0;\n"
    ),
}


def textured(width, height, seed):
    """Fine texture (stripes near Nyquist, a checker, noise) over gradients."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([60 + 120 * x / width, 50 + 140 * y / height, 120 + 60 * np.sin(x / 97 + y / 61)], -1)
    stripes = 40 * np.sin(x * 2.7 + y * 0.4)[..., None]
    checker = 25 * (((x.astype(int) // 3 + y.astype(int) // 3) % 2) * 2 - 1)[..., None]
    noise = rng.normal(0, 14, (height, width, 3))
    return Image.fromarray(np.clip(base + stripes + checker + noise, 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{name: path} of progressive files, each 2400x1800."""
    d = tmp_path_factory.mktemp("progressive")
    img = textured(WIDTH, HEIGHT, 1)
    out = {}
    for sub in (0, 1, 2):
        p = d / f"pil_sub{sub}.jpg"
        img.save(p, "JPEG", quality=90, subsampling=sub, progressive=True, optimize=True)
        out[f"pil_sub{sub}"] = p
    p = d / "pil_gray.jpg"
    img.convert("L").save(p, "JPEG", quality=88, progressive=True, optimize=True)
    out["pil_gray"] = p
    p = d / "pil_cmyk.jpg"
    img.convert("CMYK").save(p, "JPEG", quality=85, progressive=True)
    out["pil_cmyk"] = p
    cjpeg, jpegtran = shutil.which("cjpeg"), shutil.which("jpegtran")
    if cjpeg is None or jpegtran is None:
        return out  # the PIL files still run; test_tools_present reports the rest
    ppm = d / "src.ppm"
    img.save(ppm)
    baseline = d / "baseline.jpg"
    img.save(baseline, "JPEG", quality=92, subsampling=2)

    def run(args, dest):  # the input file last
        subprocess.run([*args[:-1], "-outfile", str(dest), args[-1]], check=True, timeout=60, capture_output=True)
        return dest

    out["cjpeg_progressive"] = run([cjpeg, "-quality", "90", "-progressive", str(ppm)], d / "cjpeg_p.jpg")
    out["jpegtran_progressive"] = run([jpegtran, "-progressive", "-optimize", str(baseline)], d / "jt_p.jpg")
    for name, script in SCRIPTS.items():
        sf = d / f"{name}.txt"
        sf.write_text(script)
        out[f"cjpeg_{name}"] = run(
            [cjpeg, "-quality", "90", "-sample", "1x1", "-scans", str(sf), str(ppm)], d / f"cjpeg_{name}.jpg"
        )
        out[f"jpegtran_{name}"] = run([jpegtran, "-scans", str(sf), str(baseline)], d / f"jt_{name}.jpg")
    return out


def render(path, out_dir, decode_path, resize=32):
    raw = out_dir / f"{path.stem}_{decode_path}_{resize}.raw"
    cmd = [
        str(TOOL), "render", "--input", str(path), "--out", str(raw), "--pipeline", "eval",
        "--resize", str(resize), "--size", str(resize), str(resize), "--decode-path", decode_path,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{cmd}: {proc.stderr}"
    header = json.loads(proc.stdout)
    data = raw.read_bytes()
    assert len(data) == header["bytes"] == resize * resize * 3
    return data, header


def test_tools_present():
    if shutil.which("cjpeg") is None or shutil.which("jpegtran") is None:
        pytest.skip("libjpeg-turbo-progs (cjpeg, jpegtran) not installed")


@pytest.mark.parametrize(
    "name",
    [
        "pil_sub0", "pil_sub1", "pil_sub2", "pil_gray", "pil_cmyk", "cjpeg_progressive",
        "jpegtran_progressive", "cjpeg_late_dc_refine", "jpegtran_late_dc_refine",
        "cjpeg_split_dc_approx_ac", "jpegtran_split_dc_approx_ac",
    ],
)
def test_dc_scans_decode_the_whole_files_pixels(files, tmp_path, name):
    if name not in files:
        pytest.skip("cjpeg/jpegtran not installed")
    with Image.open(files[name]) as im:
        assert im.info.get("progressive") or im.info.get("progression"), name
    auto, auto_header = render(files[name], tmp_path, "auto")
    whole, whole_header = render(files[name], tmp_path, "whole")
    assert auto_header["dct_scale"] == whole_header["dct_scale"] == 1
    assert auto_header["progressive"] and whole_header["progressive"]
    assert auto_header["decode_path"] == "dc_scans"
    assert whole_header["decode_path"] == "whole"
    assert auto == whole


def test_other_scales_and_baseline_files_decode_whole(files, tmp_path):
    # 1800 / 64 = 28 decoded pixels per output: scale 2/8, where the 2x2
    # IDCT reads AC coefficients of every band.
    _, header = render(files["pil_sub2"], tmp_path, "auto", resize=64)
    assert header["dct_scale"] == 2
    assert header["decode_path"] == "whole"
    baseline = tmp_path / "baseline.jpg"
    textured(WIDTH, HEIGHT, 2).save(baseline, "JPEG", quality=90)
    _, header = render(baseline, tmp_path, "auto")
    assert header["dct_scale"] == 1
    assert not header["progressive"]
    assert header["decode_path"] == "whole"


def test_bench_counts_the_paths(files, tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    shutil.copy(files["pil_sub1"], folder / "a.jpg")
    textured(WIDTH, HEIGHT, 3).save(folder / "b.jpg", "JPEG", quality=90)
    cmd = [
        str(TOOL), "bench", "--files", str(folder), "--pipeline", "eval", "--resize", "32", "--size", "32", "32",
        "--seconds", "0.3",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["errors"] == 0
    paths = result["paths"]
    assert paths["dc_scans"]["images"] > 0 and paths["whole"]["images"] > 0
    assert paths["dc_scans"]["images"] + paths["whole"]["images"] == result["images"]
    assert result["progressive_images"] == paths["dc_scans"]["images"]
    proc = subprocess.run([*cmd, "--decode-path", "whole"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["paths"]["dc_scans"]["images"] == 0
