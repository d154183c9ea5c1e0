"""AugMix as torchvision 0.14 computes it: its chains on the uint8 tensor.

torchvision's AugMix.forward turns a PIL image into a uint8 tensor and runs
_apply_op on that tensor, so its chain ops are functional_tensor's kernels
(grid_sample affine and rotate, float32 _blend, ...), not PIL's. stoker's
AugMix marks its chain steps "tensor": true and runs its Tensor* kernels
(server/image/ops/ops.h). Checked here, each exactly where torch runs its
vectorized kernels, else within the bound of MAX_DIFFERING / MAX_MEAN_ERROR:

  - every tensor kernel against torchvision.transforms.functional on the
    same uint8 tensor (the JPEG's exact decode): F.affine (_apply_op's
    shears and translations, a general affine with a center), F.rotate
    (with and without a center, right angles: no PIL shortcuts), NEAREST
    and BILINEAR, fill None and a fill; F.adjust_contrast,
    F.adjust_saturation, F.adjust_sharpness, F.autocontrast, and the ops
    whose tensor kernel is the PIL one (brightness, equalize, posterize,
    solarize, invert);
  - contrast on images whose grey sum passes 2^24, where torch's float32
    mean depends on its summation order (stoker sums as torch does on one
    thread, what DataLoader workers run);
  - whole AugMix samples (stoker-image-tool render --ops AugMix
    --steps-out): torchvision's own AugMix.forward on the PIL image with its
    randomness forced to the drawn steps (_sample_dirichlet returns [m0, 1]
    then the chain weights; torch.randint the depths, op indices, bins and
    signs), for several indices, bilinear and nearest, all_ops true and
    false, fill None and given.

Run with Debian's python: /usr/bin/python3 -m pytest tests/python/test_augmix.py
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
import torchvision.transforms.autoaugment as A  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402

from test_image_fidelity import TOOL  # noqa: E402
from test_policy_ops import f32, make_images  # noqa: E402

pytestmark = pytest.mark.skipif(not TOOL.exists(), reason=f"{TOOL} not built")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """name -> (JPEG path, PIL's decode of it)."""
    return make_images(tmp_path_factory.mktemp("augmix_images"))


def render(path, tmp_path, *args):
    """stoker-image-tool render on the JPEG's exact decode: the HWC uint8 result."""
    out = tmp_path / "out.raw"
    proc = subprocess.run([str(TOOL), "render", "--input", str(path), "--out", str(out), "--exact", *map(str, args)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{args}: {proc.stderr}"
    header = json.loads(proc.stdout)
    return np.fromfile(out, dtype=np.uint8).reshape(header["height"], header["width"], 3)


def tensor(pil):
    return F.pil_to_tensor(pil)  # uint8 [3, H, W], as AugMix.forward makes it


def hwc(t):
    return t.permute(1, 2, 0).numpy()


# Exact where torch runs its vectorized (AVX2, FMA) CPU kernels, as on the
# machines this was measured on. Where torch falls back to its default
# kernels (e.g. a chroot where it cannot read the CPU's features: no FMA in
# grid_sample), a coordinate can round the other way: the bound then is at
# most 5% of the pixels differing, mean absolute error 0.05 levels (seen on a
# fresh Debian root: up to 2.5% of the pixels, mean 0.017; 1 level for
# bilinear, a neighbour's value for nearest). PIL's kernels in their place
# differ on up to 74% of the pixels, mean 0.68, by up to 119 levels.
MAX_DIFFERING = 0.05
MAX_MEAN_ERROR = 0.05


def mismatch(got, want):
    """None when got matches torchvision within the bound above, else why not."""
    if np.array_equal(got, want):
        return None
    diff = np.abs(got.astype(int) - want.astype(int))
    differing = float((diff.max(-1) > 0).mean())
    if differing <= MAX_DIFFERING and diff.mean() <= MAX_MEAN_ERROR:
        return None
    return (f"{int((diff.max(-1) > 0).sum())} pixels differ ({differing:.2%}), worst {diff.max()}, "
            f"mean {diff.mean():.4f}")


def check_all(images, tmp_path, cases):
    """cases: [(id, steps, fn(uint8 tensor) -> uint8 tensor)], on every image."""
    failures = []
    for name, (path, pil) in images.items():
        for case_id, steps, fn in cases:
            got = render(path, tmp_path, "--pipeline", "decode", "--steps", json.dumps(steps))
            want = hwc(fn(tensor(pil)))
            assert got.shape == want.shape, (name, case_id)
            why = mismatch(got, want)
            if why is not None:
                failures.append(f"{name} {case_id}: {why}")
    assert not failures, "\n".join(failures)


def policy_step(kind, aug, magnitude, **fields):
    """A step as AugMix draws it: torchvision's op, its magnitude, the tensor flag."""
    return {"kind": kind, "aug": aug, "bin": 1, "magnitude": magnitude, "tensor": True, **fields}


MAGNITUDES = [0.0, f32(0.1), f32(-0.35), f32(0.8999), f32(-0.9)]


def test_blends_equal_torchvision_tensor_kernels(images, tmp_path):
    # _apply_op passes 1.0 + magnitude: contrast and saturation (and
    # sharpness) blend in float32(ratio) and float32(1 - ratio), which the
    # step's float factor alone cannot give.
    cases = []
    for m in MAGNITUDES:
        r = 1.0 + m
        cases += [
            (f"contrast {m}", [policy_step("color_jitter", "Contrast", m, order=["contrast"], contrast=r)],
             lambda t, r=r: F.adjust_contrast(t, r)),
            (f"saturation {m}", [policy_step("color_jitter", "Color", m, order=["saturation"], saturation=r)],
             lambda t, r=r: F.adjust_saturation(t, r)),
            (f"brightness {m}", [policy_step("color_jitter", "Brightness", m, order=["brightness"], brightness=r)],
             lambda t, r=r: F.adjust_brightness(t, r)),
            (f"sharpness {m}", [policy_step("sharpness", "Sharpness", m, factor=r)],
             lambda t, r=r: F.adjust_sharpness(t, r)),
        ]
    # A step not from a policy blends with its factor as the ratio.
    cases.append(("contrast factor", [{"kind": "color_jitter", "order": ["contrast"], "contrast": 1.75,
                                       "tensor": True}], lambda t: F.adjust_contrast(t, 1.75)))
    check_all(images, tmp_path, cases)


def test_point_ops_equal_torchvision_tensor_kernels(images, tmp_path):
    cases = [("autocontrast", [{"kind": "autocontrast", "tensor": True}], F.autocontrast),
             # Few, uneven levels: the float32 scale's rounding shows.
             ("autocontrast after posterize", [{"kind": "posterize", "bits": 3, "tensor": True},
                                               {"kind": "autocontrast", "tensor": True}],
              lambda t: F.autocontrast(F.posterize(t, 3))),
             ("equalize", [{"kind": "equalize", "tensor": True}], F.equalize),
             ("invert", [{"kind": "invert", "tensor": True}], F.invert)]
    cases += [(f"posterize {b}", [{"kind": "posterize", "bits": b, "tensor": True}],
               lambda t, b=b: F.posterize(t, b)) for b in [0, 1, 4, 7, 8]]
    cases += [(f"solarize {th}", [{"kind": "solarize", "threshold": th, "tensor": True}],
               lambda t, th=th: F.solarize(t, th)) for th in [0.0, 77.5, 128.0, 255.0]]
    check_all(images, tmp_path, cases)


def geometry_cases(interpolation, fill):
    mode = InterpolationMode(interpolation)
    extra = {"tensor": True, "interpolation": interpolation, "fill": list(fill or (0, 0, 0))}
    if fill is not None:
        extra["tensor_fill"] = True
    cases = []
    for m in [f32(0.3), f32(-0.17)]:
        shear = math.degrees(math.atan(m))
        for aug, sh in [("ShearX", [shear, 0.0]), ("ShearY", [0.0, shear])]:
            step = policy_step("affine", aug, m, angle=0.0, translate=[0, 0], scale=1.0, shear=sh, center=[0, 0],
                               **extra)
            cases.append((f"{aug} {m}", [step],
                          lambda t, sh=sh: F.affine(t, 0.0, [0, 0], 1.0, sh, interpolation=mode, fill=fill,
                                                    center=[0, 0])))
    for tr in [[13, 0], [0, -9]]:
        step = policy_step("affine", "TranslateX" if tr[0] else "TranslateY", float(sum(tr)), angle=0.0,
                           translate=tr, scale=1.0, shear=[0.0, 0.0], **extra)
        cases.append((f"translate {tr}", [step],
                      lambda t, tr=tr: F.affine(t, 0.0, tr, 1.0, [0.0, 0.0], interpolation=mode, fill=fill)))
    for angle in [f32(27.3), f32(-12.0), 90.0, 180.0]:
        cases.append((f"rotate {angle}", [policy_step("rotate", "Rotate", angle, angle=angle, **extra)],
                      lambda t, a=angle: F.rotate(t, a, interpolation=mode, fill=fill)))
    # Steps not from a policy: a center, a scale, shears on both axes.
    cases.append(("rotate about (10, 20)", [dict(kind="rotate", angle=30.0, center=[10, 20], **extra)],
                  lambda t: F.rotate(t, 30.0, interpolation=mode, fill=fill, center=[10, 20])))
    angle, scale, shear = f32(12.7), f32(0.9), [f32(10.4), f32(-6.2)]
    cases.append(("affine", [dict(kind="affine", angle=angle, translate=[-3, 5], scale=scale, shear=shear,
                                  center=[20, 31], **extra)],
                  lambda t: F.affine(t, angle, [-3, 5], scale, shear, interpolation=mode, fill=fill,
                                     center=[20, 31])))
    return cases


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("fill", [None, (9, 99, 199)], ids=["fill_none", "fill"])
def test_geometry_equals_torchvision_tensor_kernels(images, tmp_path, interpolation, fill):
    check_all(images, tmp_path, geometry_cases(interpolation, None if fill is None else list(fill)))


def test_contrast_on_large_images(tmp_path):
    # Grey sums past 2^24: torch's float32 sum rounds on the way, in the
    # order of its cascade (one thread; more split it between them).
    rng = np.random.default_rng(5)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for h, w, low in [(700, 500, 150), (600, 900, 200)]:
            path = tmp_path / "large.jpg"
            Image.fromarray(rng.integers(low, 256, (h, w, 3), dtype=np.uint8)).save(path, quality=95)
            t = tensor(Image.open(path).convert("RGB"))
            grey = F.rgb_to_grayscale(t)
            assert int(grey.sum()) >= 2**24
            for m in [f32(0.1), f32(-0.35), f32(0.8999)]:
                got = render(path, tmp_path, "--pipeline", "decode", "--steps",
                             json.dumps([policy_step("color_jitter", "Contrast", m, order=["contrast"],
                                                     contrast=1.0 + m)]))
                assert np.array_equal(got, hwc(F.adjust_contrast(t, 1.0 + m))), (h, w, m)
    finally:
        torch.set_num_threads(threads)


def forced_forward(augmix, pil, steps, monkeypatch):
    """AugMix.forward(pil) with its draws forced to stoker's steps."""
    assert steps[0]["kind"] == "mix_begin" and steps[-1]["kind"] == "mix_end"
    chains = []
    for s in steps[1:-1]:
        if s["kind"] == "mix_chain":
            chains.append((s["weight"], []))
        else:
            assert s.get("tensor") is True, s
            chains[-1][1].append(s)
    h, w = pil.height, pil.width
    op_meta = augmix._augmentation_space(augmix._PARAMETER_MAX, (h, w))
    names = list(op_meta)
    draws = []  # torch.randint's results, in forward's order
    for _, chain in chains:
        if augmix.chain_depth <= 0:
            draws.append(len(chain))  # AugMix's space has no Identity: one step per op
        for s in chain:
            draws.append(names.index(s["aug"]))
            magnitudes, signed = op_meta[s["aug"]]
            if magnitudes.ndim > 0:
                draws.append(s["bin"])
            if signed:
                draws.append(1 if math.copysign(1.0, s["magnitude"]) < 0 else 0)
    # m = [m0, 1]: the combined weights are then the chain weights as drawn.
    dirichlet = [torch.tensor([[steps[0]["weight"], 1.0]], dtype=torch.float32),
                 torch.tensor([[wt for wt, _ in chains]], dtype=torch.float32)]
    monkeypatch.setattr(augmix, "_sample_dirichlet", lambda params: dirichlet.pop(0))
    real_randint = torch.randint

    def randint(*args, **kwargs):
        # forward calls randint(low=1, high=4, size=(1,)) and randint(high, (1,)).
        low, high = (kwargs["low"], kwargs["high"]) if "high" in kwargs else (0, args[0])
        value = draws.pop(0)
        assert low <= value < high
        return torch.tensor([value], dtype=kwargs.get("dtype", torch.int64))

    monkeypatch.setattr(torch, "randint", randint)
    try:
        out = augmix(pil)
    finally:
        monkeypatch.setattr(torch, "randint", real_randint)
    assert not draws and not dirichlet
    return np.asarray(out)


@pytest.mark.parametrize("params", [
    {},
    {"interpolation": "nearest", "all_ops": False},
    {"all_ops": False, "severity": 10, "mixture_width": 4, "chain_depth": 3, "fill": [30, 60, 90]},
    {"interpolation": "nearest", "fill": [200, 10, 50], "alpha": 0.5, "chain_depth": 2},
], ids=["defaults", "nearest_9ops", "fill_severity10", "nearest_fill"])
def test_augmix_samples_equal_torchvision_forward(images, tmp_path, monkeypatch, params):
    augmix = A.AugMix(severity=params.get("severity", 3), mixture_width=params.get("mixture_width", 3),
                      chain_depth=params.get("chain_depth", -1), alpha=params.get("alpha", 1.0),
                      all_ops=params.get("all_ops", True),
                      interpolation=InterpolationMode(params.get("interpolation", "bilinear")),
                      fill=params.get("fill"))
    seen = set()
    for name, (path, pil) in images.items():
        for index in range(4):
            steps_path = tmp_path / "steps.json"
            got = render(path, tmp_path, "--ops", json.dumps([{"AugMix": params}]), "--seed", 7, "--index", index,
                         "--steps-out", steps_path)
            steps = json.loads(steps_path.read_text())
            seen.update(s["aug"] for s in steps if "aug" in s)
            want = forced_forward(augmix, pil, steps, monkeypatch)
            why = mismatch(got, want)
            assert why is None, f"{name} index {index}: {why}; steps {steps}"
    # The samples ran the geometric ops (the kernels that differ most).
    assert {"ShearX", "ShearY", "Rotate"} & seen


def test_tensor_step_with_a_negative_ratio_is_refused(images, tmp_path):
    # F.adjust_contrast raises for a ratio below 0: so do the steps.
    path, _ = images["photo_130x100"]
    for step in [policy_step("color_jitter", "Contrast", -2.0, order=["contrast"], contrast=0.0),
                 policy_step("sharpness", "Sharpness", -1.5, factor=0.0)]:
        proc = subprocess.run([str(TOOL), "render", "--input", str(path), "--out", str(tmp_path / "out.raw"),
                               "--pipeline", "decode", "--exact", "--steps", json.dumps([step])],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and "1 + magnitude" in proc.stderr, (step, proc.stderr)
