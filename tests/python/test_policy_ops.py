"""The pixel kernels of the augmentation policies against torchvision 0.14 + PIL 9.4.

Each step (the step JSON of `stoker-image-tool render --steps`, decoded with
--exact so that the input is PIL's own decode) must give exactly
(np.array_equal) what torchvision.transforms.functional gives on the PIL
image: posterize (bits 0..8), solarize (integer and fractional thresholds),
invert, autocontrast, equalize, adjust_sharpness, affine and rotate with
NEAREST and BILINEAR (shears as autoaugment.py's _apply_op passes them,
translations, rotations, scales, centers, fill colours; rotations by right
angles on square and non-square images), and AugMix's mixing of chain
results (torch's float32 arithmetic on the uint8 tensor). These are the PIL
kernels (what AutoAugment, RandAugment and TrivialAugmentWide run on a PIL
image); AugMix's own chains run torchvision's tensor kernels, checked in
test_augmix.py.

Most step parameters travel as float32 (pipeline.h's Step): the values given
to torchvision here are float32 values, as the policies' own draws are. The
shears, centers and solarize thresholds are doubles (a policy's shear is
degrees(atan(m)); centers and thresholds are the user's Python floats): the
cases include values that no float32 holds.

Images: a photo-like one, a finely textured one (textured_corpus's fur) and a
small square, ~100 x 130.

Run with Debian's python: /usr/bin/python3 -m pytest tests/python/test_policy_ops.py
"""

import json
import math
import subprocess

import numpy as np
import pytest

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402

import textured_corpus  # noqa: E402
from test_image_fidelity import TOOL, make_photo  # noqa: E402

pytestmark = pytest.mark.skipif(not TOOL.exists(), reason=f"{TOOL} not built")

MODES = {"nearest": InterpolationMode.NEAREST, "bilinear": InterpolationMode.BILINEAR}


def f32(x):
    """x as the float32 a Step holds, back as a Python float."""
    return float(np.float32(x))


def make_images(folder):
    """name -> (JPEG path, PIL's decode of it), written into `folder`."""
    pictures = {
        "photo_130x100": make_photo(130, 100, 4),
        "fur_131x97": textured_corpus._fur(131, 97, np.random.default_rng(3)),
        "square_96": make_photo(96, 96, 5),
    }
    out = {}
    for name, picture in pictures.items():
        path = folder / f"{name}.jpg"
        picture.convert("RGB").save(path, "JPEG", quality=92)
        with Image.open(path) as im:
            out[name] = (path, im.convert("RGB"))
    return out


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return make_images(tmp_path_factory.mktemp("policy_images"))


def render_steps(path, tmp_path, steps):
    """Runs the step list on the JPEG's exact decode; the HWC uint8 result."""
    out = tmp_path / "steps.raw"
    proc = subprocess.run([str(TOOL), "render", "--input", str(path), "--out", str(out), "--pipeline", "decode",
                           "--exact", "--steps", json.dumps(steps)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{steps}: {proc.stderr}"
    header = json.loads(proc.stdout)
    data = np.fromfile(out, dtype=np.uint8)
    assert data.nbytes == header["bytes"]
    return data.reshape(header["height"], header["width"], 3)


def check_all(images, tmp_path, cases):
    """cases: [(id, steps, fn(PIL image) -> PIL image)], on every image."""
    failures = []
    for name, (path, pil) in images.items():
        for case_id, steps, fn in cases:
            got = render_steps(path, tmp_path, steps)
            want = np.asarray(fn(pil))
            assert got.shape == want.shape, (name, case_id)
            if not np.array_equal(got, want):
                diff = np.abs(got.astype(int) - want)
                failures.append(f"{name} {case_id}: {int((diff.max(-1) > 0).sum())} pixels differ, "
                                f"worst {diff.max()}")
    assert not failures, "\n".join(failures)


def test_point_ops_equal_torchvision(images, tmp_path):
    cases = [(f"posterize {b}", [{"kind": "posterize", "bits": b}], lambda im, b=b: F.posterize(im, b))
             for b in range(9)]
    cases += [(f"solarize {t}", [{"kind": "solarize", "threshold": t}], lambda im, t=t: F.solarize(im, t))
              for t in [0.0, 1.0, 77.5, 128.0, 200.25, 255.0, 256.0,
                        128.000000001, 99.99999999]]  # not float32 values: held as doubles
    cases += [("invert", [{"kind": "invert"}], F.invert),
              ("autocontrast", [{"kind": "autocontrast"}], F.autocontrast),
              ("equalize", [{"kind": "equalize"}], F.equalize)]
    check_all(images, tmp_path, cases)


def test_autocontrast_and_equalize_after_a_narrowing_op(images, tmp_path):
    # Posterize then solarize leaves few, uneven levels per channel: the
    # stretch and the histogram tables see gaps and a short last bin.
    cases = [(f"{name} after posterize", [{"kind": "posterize", "bits": 3}, {"kind": "solarize", "threshold": 100.0},
                                          {"kind": name}],
              lambda im, fn=fn: fn(F.solarize(F.posterize(im, 3), 100.0)))
             for name, fn in [("autocontrast", F.autocontrast), ("equalize", F.equalize)]]
    check_all(images, tmp_path, cases)


def test_sharpness_equals_torchvision(images, tmp_path):
    cases = [(f"sharpness {s}", [{"kind": "sharpness", "factor": s}],
              lambda im, s=s: F.adjust_sharpness(im, s)) for s in [0.0, 0.5, 1.9, 3.0]]
    check_all(images, tmp_path, cases)


def affine_case(angle, translate, scale, shear, interpolation, fill, center=None):
    step = {"kind": "affine", "angle": angle, "translate": list(translate), "scale": scale, "shear": list(shear),
            "interpolation": interpolation, "fill": list(fill)}
    if center is not None:
        step["center"] = list(center)
    case_id = f"affine {angle} {translate} {scale} {shear} {center} {interpolation} {fill}"
    return (case_id, [step],
            lambda im: F.affine(im, angle, list(translate), scale, list(shear), interpolation=MODES[interpolation],
                                fill=list(fill), center=None if center is None else list(center)))


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_affine_equals_torchvision(images, tmp_path, interpolation):
    # _apply_op's shears: F.affine(angle 0, translate [0, 0], scale 1,
    # shear [degrees(atan(m)), 0] or [0, degrees(atan(m))], center [0, 0]).
    shear = f32(math.degrees(math.atan(f32(0.3))))
    cases = [
        affine_case(0.0, (0, 0), 1.0, (shear, 0.0), interpolation, (0, 0, 0), center=(0, 0)),
        affine_case(0.0, (0, 0), 1.0, (0.0, -shear), interpolation, (0, 0, 0), center=(0, 0)),
        affine_case(0.0, (0, 0), 1.0, (f32(-7.3), 0.0), interpolation, (128, 128, 128), center=(0, 0)),
        # _apply_op's translations: whole pixels.
        affine_case(0.0, (13, 0), 1.0, (0.0, 0.0), interpolation, (0, 0, 0)),
        affine_case(0.0, (0, -9), 1.0, (0.0, 0.0), interpolation, (0, 0, 0)),
        # RandomAffine's draws: rotation, scale, shear on both axes, a
        # translation, the default center or a given one, a fill colour.
        affine_case(f32(17.25), (0, 0), 1.0, (0.0, 0.0), interpolation, (0, 0, 0)),
        affine_case(f32(-33.1), (4, 7), f32(1.3), (0.0, 0.0), interpolation, (200, 17, 90)),
        affine_case(0.0, (0, 0), f32(0.7), (0.0, 0.0), interpolation, (1, 2, 3)),
        affine_case(f32(12.7), (-3, 5), f32(0.9), (f32(10.4), f32(-6.2)), interpolation, (5, 6, 7), center=(20, 31)),
        affine_case(f32(150.0), (2, 2), f32(1.1), (f32(-20.0), f32(3.5)), interpolation, (255, 0, 255)),
        # A center that is no float32 value (RandomAffine(center=...) is the user's double).
        affine_case(f32(9.5), (0, 0), 1.0, (0.0, 0.0), interpolation, (0, 0, 0), center=(100.7, 33.3)),
        # Far corners: Pillow's double-precision NEAREST path (a corner 2^15+ pixels away).
        affine_case(0.0, (0, 0), f32(0.004), (0.0, 0.0), interpolation, (7, 8, 9)),
        affine_case(0.0, (40000, 0), 1.0, (0.0, 0.0), interpolation, (7, 8, 9)),
    ]
    check_all(images, tmp_path, cases)


def rotate_case(angle, interpolation, fill, center=None):
    step = {"kind": "rotate", "angle": angle, "interpolation": interpolation, "fill": list(fill)}
    if center is not None:
        step["center"] = list(center)
    return (f"rotate {angle} {center} {interpolation}", [step],
            lambda im: F.rotate(im, angle, MODES[interpolation], fill=list(fill),
                                center=None if center is None else list(center)))


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_rotate_equals_torchvision(images, tmp_path, interpolation):
    # 90 and 270 are PIL's transposes on the square image, affine on the
    # others; 0, 180 and 360 transposes on all; with a center never.
    fill = (9, 99, 199)
    cases = [rotate_case(a, interpolation, fill) for a in [0.0, 90.0, 180.0, 270.0, -90.0, 360.0, 450.0, 1.5,
                                                           -17.25, 45.0, 123.0]]
    cases += [rotate_case(a, interpolation, fill, center=c)
              for a, c in [(90.0, (48, 48)), (30.0, (10, 20)), (-45.5, (0, 0)), (180.0, (65.5, 50)),
                           (20.0, (100.7, 33.3)), (-8.0, (41.123456789, 60.987654321))]]
    check_all(images, tmp_path, cases)


def test_mix_equals_torch_float32_arithmetic(images, tmp_path):
    # kMixBegin(w0), kMixChain(w1) chain 1, kMixChain(w2) chain 2, kMixEnd:
    # AugMix's m0 * img + sum of w_i * chain_i in float32 on the uint8
    # tensor, converted to uint8 (truncated).
    w0, w1, w2 = f32(0.3), f32(0.45), f32(0.25000003)
    chain1 = [{"kind": "posterize", "bits": 2}, {"kind": "invert"}]
    chain2 = [{"kind": "rotate", "angle": 30.0, "interpolation": "bilinear", "fill": [0, 0, 0]},
              {"kind": "sharpness", "factor": 1.5}]
    steps = ([{"kind": "mix_begin", "weight": w0}, {"kind": "mix_chain", "weight": w1}] + chain1 +
             [{"kind": "mix_chain", "weight": w2}] + chain2 + [{"kind": "mix_end"}])
    for name, (path, pil) in images.items():
        got = render_steps(path, tmp_path, steps)
        # Each chain checked on its own first: its result is PIL's.
        c1 = np.asarray(F.invert(F.posterize(pil, 2)))
        c2 = np.asarray(F.adjust_sharpness(F.rotate(pil, 30.0, InterpolationMode.BILINEAR, fill=[0, 0, 0]), 1.5))
        assert np.array_equal(render_steps(path, tmp_path, chain1), c1), name
        assert np.array_equal(render_steps(path, tmp_path, chain2), c2), name

        def t(a):
            return torch.from_numpy(np.array(a))  # a writable copy

        mix = torch.tensor([w0], dtype=torch.float32) * t(np.asarray(pil))
        mix.add_(torch.tensor([w1], dtype=torch.float32) * t(c1))
        mix.add_(torch.tensor([w2], dtype=torch.float32) * t(c2))
        want = mix.to(dtype=torch.uint8).numpy()
        assert np.array_equal(got, want), f"{name}: {int((got != want).any(-1).sum())} pixels differ"
