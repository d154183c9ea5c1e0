"""Shared by the image-format tests (test_format_*.py): stoker's decode of a
file as raw RGB8 pixels, and PIL's, to compare them byte for byte.

stoker's side runs `stoker-image-tool render --pipeline decode` (no ops, the
image at its own size, uint8 HWC): the same SampleProcessor the workers run.
$STOKER_DECODE_TOOL, when set, names another program taking the same
`render --input F --out O --pipeline decode` arguments (for working on a
decoder before it is in the build).
"""

import json
import os
import pathlib
import subprocess

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("STOKER_BUILD_DIR", REPO / "build"))
TOOL = pathlib.Path(os.environ.get("STOKER_DECODE_TOOL") or
                    BUILD / "bin" / "stoker-image-tool")


def tool_available() -> bool:
    return TOOL.exists()


def run_render(path, out_dir, *args):
    """Runs `render` on path; returns the CompletedProcess (not checked)."""
    out = pathlib.Path(out_dir) / "sample.raw"
    cmd = [str(TOOL), "render", "--input", str(path), "--out", str(out), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def stoker_decode(path, out_dir, *args):
    """(uint8 array [H, W, 3], the tool's JSON line) of stoker's decode."""
    if not args:
        args = ("--pipeline", "decode")
    proc = run_render(path, out_dir, *args)
    assert proc.returncode == 0, f"render {path}: {proc.stderr}"
    header = json.loads(proc.stdout)
    data = np.fromfile(pathlib.Path(out_dir) / "sample.raw", dtype=np.uint8)
    assert data.nbytes == header["bytes"]
    return data.reshape(header["height"], header["width"], header["channels"]), header


def stoker_fails(path, out_dir):
    """The error message when stoker's decode of path fails; None if it decodes."""
    proc = run_render(path, out_dir, "--pipeline", "decode")
    if proc.returncode == 0:
        return None
    return proc.stderr.strip() or "failed"


def pil_rgb(path):
    """What torchvision's ImageFolder loader gives: Image.open(f).convert('RGB')."""
    from PIL import Image
    with open(path, "rb") as f:
        img = Image.open(f)
        return np.asarray(img.convert("RGB"))


def pil_mode(path):
    from PIL import Image
    with Image.open(path) as img:
        return img.mode


def assert_same_as_pil(path, out_dir):
    got, _ = stoker_decode(path, out_dir)
    want = pil_rgb(path)
    assert got.shape == want.shape, f"{path}: shape {got.shape} vs PIL {want.shape}"
    if not np.array_equal(got, want):
        diff = np.abs(got.astype(int) - want.astype(int))
        ys, xs, cs = np.nonzero(diff)
        raise AssertionError(
            f"{path} (PIL mode {pil_mode(path)}): {len(ys)} values differ, max {diff.max()}, "
            f"first at y={ys[0]} x={xs[0]} c={cs[0]}: stoker {got[ys[0], xs[0]]} PIL {want[ys[0], xs[0]]}")
