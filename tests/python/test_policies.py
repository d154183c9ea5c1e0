"""The draws of the augmentation policies and the random affine / erasing ops
against torchvision 0.14's rules (transforms/autoaugment.py, transforms.py).

`stoker-image-tool draw --image-size H W --count N` prints the steps drawn for
dataset indices 0..N-1; steps a policy made carry "aug" (torchvision's op
name), "bin" and "magnitude". Over fixed seeds (so that nothing flakes):
  - every drawn magnitude is, as a float32, the value of torchvision's own
    space (built here by calling its _augmentation_space methods), and each
    step is what _apply_op makes of it (ShearX: shear degrees(atan(m)) about
    [0, 0]; TranslateX: translate int(m); Brightness: factor 1 + m; ...);
  - RandAugment's, TrivialAugmentWide's and AugMix's op choices, bins and
    signs are uniform (chi-square, p > P_MIN); AutoAugment's outcomes (which
    of a sub-policy's two ops ran) have the frequencies its table and
    probabilities give; AugMix's chain depths are uniform in 1..3 and its
    weights Beta / Dirichlet distributed (KS);
  - RandomRotation's and RandomAffine's parameters are uniform in their
    ranges (the translations as int(round(U(-d, d))));
  - RandomErasing's boxes are distributed as torchvision's get_params draws
    them, and it erases with probability p.
Then the mapping end to end: policy samples rendered with --exact equal
torchvision's _apply_op run on PIL's decode with the drawn (op, magnitude)s.

Run with Debian's python: /usr/bin/python3 -m pytest tests/python/test_policies.py
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
stats = pytest.importorskip("scipy.stats")
import torchvision.transforms as T  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402
from torchvision.transforms import autoaugment as A  # noqa: E402

from test_image_fidelity import TOOL, make_photo  # noqa: E402
from test_image_ops import P_MIN, assert_rate, chisquare_p, uniform_ks_p  # noqa: E402

pytestmark = pytest.mark.skipif(not TOOL.exists(), reason=f"{TOOL} not built")

DRAWS = 20000
H, W = 120, 200  # the image size the draws are for (translations depend on it)
SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
          "Contrast", "Sharpness"}
JITTER = {"Brightness": "brightness", "Color": "saturation", "Contrast": "contrast"}


def draw(ops, count=DRAWS, seed=1, height=H, width=W):
    args = ["draw", "--ops", json.dumps(ops), "--image-size", height, width, "--count", count,
            "--seed", seed, "--dtype", "float32"]
    proc = subprocess.run([str(TOOL), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["index"] for r in rows] == list(range(count))
    assert all("steps" in r for r in rows), [r["error"] for r in rows if "error" in r][:3]
    return [r["steps"] for r in rows]


def f32(x):
    return float(np.float32(x))


def space_values(space):
    """op name -> (list of float32 magnitudes or None, signed)."""
    out = {}
    for name, (mags, signed) in space.items():
        out[name] = ([f32(v) for v in mags.tolist()] if mags.ndim > 0 else None, signed)
    return out


def check_step(step, values, interpolation="nearest"):
    """A policy step: its magnitude from the space, its parameters _apply_op's."""
    # JSON numbers are float32 values printed shortest: f32() reads them back.
    name, b, m = step["aug"], step["bin"], f32(step["magnitude"])
    mags, signed = values[name]
    if mags is None:
        assert b == -1 and m == 0, step
    else:
        assert 0 <= b < len(mags), step
        assert f32(abs(m) if signed else m) == mags[b], (step, mags[b])
    if name in ("ShearX", "ShearY"):
        shear = [math.degrees(math.atan(m)), 0.0]
        if name == "ShearY":
            shear.reverse()
        assert step["kind"] == "affine" and step["shear"] == shear and step["center"] == [0, 0], step
        assert step["interpolation"] == interpolation and step["translate"] == [0, 0], step
    elif name in ("TranslateX", "TranslateY"):
        t = [int(m), 0] if name == "TranslateX" else [0, int(m)]
        assert step["kind"] == "affine" and step["translate"] == t and "center" not in step, step
        assert step["shear"] == [0, 0] and step["angle"] == 0 and step["scale"] == 1, step
    elif name == "Rotate":
        assert step["kind"] == "rotate" and f32(step["angle"]) == m and "center" not in step, step
    elif name in JITTER:
        adj = JITTER[name]
        assert step["kind"] == "color_jitter" and step["order"] == [adj], step
        assert f32(step[adj]) == f32(1.0 + m), step
    elif name == "Sharpness":
        assert step["kind"] == "sharpness" and f32(step["factor"]) == f32(1.0 + m), step
    elif name == "Posterize":
        assert step["kind"] == "posterize" and step["bits"] == int(m), step
    elif name == "Solarize":
        assert step["kind"] == "solarize" and f32(step["threshold"]) == m, step
    else:
        assert step["kind"] == name.lower(), step


def check_uniform_choices(steps, names, values, bins):
    """Op counts (Identity: no step) uniform; bins uniform below `bins` where
    drawn; signs fair."""
    counts = {n: 0 for n in names}
    bin_counts = np.zeros(bins, dtype=np.int64)
    negative = positive = 0
    for s in steps:
        counts[s["aug"]] += 1
        if values[s["aug"]][0] is not None:
            bin_counts[s["bin"]] += 1
        if s["aug"] in SIGNED and s["magnitude"] != 0:
            negative += s["magnitude"] < 0
            positive += s["magnitude"] > 0
    return counts, bin_counts, negative, positive


def test_trivial_augment_wide_draws_and_magnitudes():
    space = A.TrivialAugmentWide()._augmentation_space(31)
    values = space_values(space)
    rows = draw([{"TrivialAugmentWide": {}}])
    assert all(len(r) <= 1 for r in rows)
    steps = [s for r in rows for s in r]
    for s in steps:
        check_step(s, values)
    counts, bins, neg, pos = check_uniform_choices(steps, list(space), values, 31)
    counts["Identity"] = DRAWS - len(steps)
    assert chisquare_p(list(counts.values())) > P_MIN, counts
    assert chisquare_p(bins) > P_MIN
    assert_rate(neg, neg + pos, 0.5)
    # Every bin of every op is reachable, extremes included.
    assert {s["bin"] for s in steps if s["aug"] == "Rotate"} == set(range(31))


def test_rand_augment_uses_its_fixed_bin_and_uniform_ops():
    space = A.RandAugment()._augmentation_space(31, (H, W))
    values = space_values(space)
    rows = draw([{"RandAugment": {"num_ops": 3, "magnitude": 13}}])
    steps = [s for r in rows for s in r]
    for s in steps:
        check_step(s, values)
        assert s["bin"] in (13, -1)
    counts, _, neg, pos = check_uniform_choices(steps, list(space), values, 31)
    counts["Identity"] = 3 * DRAWS - len(steps)
    assert chisquare_p(list(counts.values())) > P_MIN, counts
    assert_rate(neg, neg + pos, 0.5)
    # TranslateX's bins scale with the width: 150 / 331 * W at the top.
    top = space_values(A.RandAugment()._augmentation_space(31, (H, W)))["TranslateX"][0][30]
    one = draw([{"RandAugment": {"num_ops": 1, "magnitude": 30}}], count=400)
    xs = {f32(abs(s["magnitude"])) for r in one for s in r if s["aug"] == "TranslateX"}
    assert xs == {top}


def test_magnitudes_equal_torchvision_spaces_for_every_bin_count():
    # torch.linspace's float32 values (not start + i * step: its CPU kernel
    # rounds differently by position) for num_magnitude_bins 2..64; RandAugment
    # at its top bin for the image-size dependent translations.
    for n in range(2, 65):
        values = space_values(A.TrivialAugmentWide()._augmentation_space(n))
        for r in draw([{"TrivialAugmentWide": {"num_magnitude_bins": n}}], count=150, seed=n):
            for s in r:
                check_step(s, values)
        values = space_values(A.RandAugment()._augmentation_space(n, (H, W)))
        for r in draw([{"RandAugment": {"num_magnitude_bins": n, "magnitude": n - 1}}], count=40,
                      seed=n):
            for s in r:
                check_step(s, values)


@pytest.mark.parametrize("policy", ["imagenet", "cifar10", "svhn"])
def test_auto_augment_outcomes_follow_its_table(policy):
    aa = A.AutoAugment(A.AutoAugmentPolicy(policy))
    values = space_values(aa._augmentation_space(10, (H, W)))
    rows = draw([{"AutoAugment": {"policy": policy}}], seed=7)
    # The outcome of a sample: the (op, bin) pairs that ran, in order. Its
    # probability: over the 25 sub-policies (uniform), each op applied when
    # torch.rand <= p (float32 p; 24-bit uniforms: p + 2^-24).
    expected = {}
    for sub in aa.policies:
        probs = [min(1.0, f32(p) + 2.0**-24) if p > 0 else 2.0**-24 for _, p, _ in sub]
        for ran in ((0, 0), (1, 0), (0, 1), (1, 1)):
            key = tuple((sub[k][0], -1 if sub[k][2] is None or values[sub[k][0]][0] is None else sub[k][2])
                        for k in range(2) if ran[k])
            pr = np.prod([probs[k] if ran[k] else 1 - probs[k] for k in range(2)]) / len(aa.policies)
            expected[key] = expected.get(key, 0.0) + pr
    observed = {}
    for r in rows:
        for s in r:
            check_step(s, values)
        key = tuple((s["aug"], s["bin"]) for s in r)
        observed[key] = observed.get(key, 0) + 1
    assert set(observed) <= set(expected), set(observed) - set(expected)
    # Cells expected fewer than 5 times pooled into one.
    keys = [k for k in expected if expected[k] * DRAWS >= 5]
    obs = [observed.get(k, 0) for k in keys] + [DRAWS - sum(observed.get(k, 0) for k in keys)]
    exp = [expected[k] * DRAWS for k in keys] + [DRAWS * (1 - sum(expected[k] for k in keys))]
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    assert chisquare_p(obs, np.array(exp) * sum(obs) / sum(exp)) > P_MIN
    signed = [s["magnitude"] for r in rows for s in r if s["aug"] in SIGNED and s["magnitude"] != 0]
    assert_rate(sum(m < 0 for m in signed), len(signed), 0.5)


@pytest.mark.parametrize("all_ops,alpha", [(True, 1.0), (False, 0.5)])
def test_augmix_chains_depths_and_weights(all_ops, alpha):
    n = 6000
    mix = A.AugMix(all_ops=all_ops)
    space = mix._augmentation_space(mix._PARAMETER_MAX, (H, W))  # 10 bins
    values = space_values(space)
    rows = draw([{"AugMix": {"all_ops": all_ops, "alpha": alpha, "severity": 4}}], count=n, seed=3)
    m0, first_share, depths, steps = [], [], [], []
    for r in rows:
        assert r[0]["kind"] == "mix_begin" and r[-1]["kind"] == "mix_end"
        chains = []
        for s in r[1:-1]:
            if s["kind"] == "mix_chain":
                chains.append([s["weight"], []])
            else:
                chains[-1][1].append(s)
                check_step(s, values, interpolation="bilinear")
                assert s["bin"] < 4  # below severity
        assert len(chains) == 3
        total = r[0]["weight"] + sum(c[0] for c in chains)
        assert abs(total - 1) < 1e-5
        m0.append(r[0]["weight"])
        rest = sum(c[0] for c in chains)
        if rest > 0:
            first_share.append(chains[0][0] / rest)
        depths += [len(c[1]) for c in chains]
        steps += [s for c in chains for s in c[1]]
    # m = Dirichlet([alpha, alpha]): m[0] ~ Beta(alpha, alpha); a chain's
    # share of m[1]: Dirichlet([alpha] * 3)'s marginal, Beta(alpha, 2 alpha).
    assert stats.kstest(m0, stats.beta(alpha, alpha).cdf).pvalue > P_MIN
    assert stats.kstest(first_share, stats.beta(alpha, 2 * alpha).cdf).pvalue > P_MIN
    assert abs(np.mean(m0) - 0.5) < 0.02
    assert abs(np.var(m0) - 1 / (4 * (2 * alpha + 1))) < 0.01
    # Depth uniform in 1..3 (no Identity in AugMix's space: one step per op).
    assert set(depths) == {1, 2, 3}
    assert chisquare_p(np.bincount(depths)[1:]) > P_MIN
    counts, bins, neg, pos = check_uniform_choices(steps, list(space), values, 4)
    assert chisquare_p(list(counts.values())) > P_MIN, counts
    assert chisquare_p(bins) > P_MIN
    assert_rate(neg, neg + pos, 0.5)
    # A fixed depth.
    fixed = draw([{"AugMix": {"chain_depth": 2, "mixture_width": 2}}], count=200)
    assert all(len(r) == 2 + 2 * 3 for r in fixed)


def test_random_rotation_and_affine_parameters():
    ops = [{"RandomRotation": {"degrees": [-20, 35], "interpolation": "bilinear", "center": [3, 4],
                               "fill": [9, 8, 7]}},
           {"RandomAffine": {"degrees": [10], "translate": [0.1, 0.25], "scale": [0.7, 1.3],
                             "shear": [-4, 6, 2, 12]}}]
    rows = draw(ops)
    rot = [r[0] for r in rows]
    aff = [r[1] for r in rows]
    assert all(s["kind"] == "rotate" and s["center"] == [3, 4] and s["fill"] == [9, 8, 7] and
               s["interpolation"] == "bilinear" for s in rot)
    assert uniform_ks_p([s["angle"] for s in rot], -20, 35) > P_MIN
    assert uniform_ks_p([s["angle"] for s in aff], -10, 10) > P_MIN
    assert uniform_ks_p([s["scale"] for s in aff], 0.7, 1.3) > P_MIN
    assert uniform_ks_p([s["shear"][0] for s in aff], -4, 6) > P_MIN
    assert uniform_ks_p([s["shear"][1] for s in aff], 2, 12) > P_MIN
    assert all(s["interpolation"] == "nearest" and "center" not in s for s in aff)
    # translate: int(round(U(-d, d))), d = 0.1 * W (x) and 0.25 * H (y).
    for k, d in ((0, 0.1 * W), (1, 0.25 * H)):
        t = np.array([s["translate"][k] for s in aff])
        lo = -int(round(d))
        support = np.arange(lo, -lo + 1)
        assert t.min() == lo and t.max() == -lo
        edges = np.clip(np.stack([support - 0.5, support + 0.5]), -d, d)
        expected = (edges[1] - edges[0]) / (2 * d) * DRAWS
        assert chisquare_p(np.bincount(t - lo, minlength=len(support)), expected) > P_MIN
    # Two shear values: x only; none: no shear, translate or scale drawn.
    plain = draw([{"RandomAffine": {"degrees": [0], "shear": [5]}}], count=500)
    assert all(r[0]["shear"][1] == 0 and -5 <= r[0]["shear"][0] <= 5 for r in plain)
    assert all(r[0]["translate"] == [0, 0] and r[0]["scale"] == 1 for r in plain)


def test_point_ops_rates():
    names = ["RandomPosterize", "RandomSolarize", "RandomAdjustSharpness", "RandomAutocontrast",
             "RandomEqualize", "RandomInvert"]
    kinds = ["posterize", "solarize", "sharpness", "autocontrast", "equalize", "invert"]
    params = [{"bits": 3}, {"threshold": 100.5}, {"sharpness_factor": 1.5}, {}, {}, {}]
    ps = [0.3, 0.6, 0.1, 0.9, 0.5, 0.45]
    ops = [{n: dict(pr, p=p)} for n, pr, p in zip(names, params, ps)]
    rows = draw(ops, count=10000)
    for k, p in zip(kinds, ps):
        assert_rate(sum(any(s["kind"] == k for s in r) for r in rows), 10000, p)
    steps = [s for r in rows for s in r]
    assert {s["bits"] for s in steps if s["kind"] == "posterize"} == {3}
    assert {s["threshold"] for s in steps if s["kind"] == "solarize"} == {100.5}
    assert {s["factor"] for s in steps if s["kind"] == "sharpness"} == {1.5}


def test_random_erasing_boxes_are_distributed_as_torchvision_draws_them():
    n = 10000
    rows = draw([{"RandomErasing": {"p": 0.8, "scale": [0.05, 0.4], "ratio": [0.5, 2.5],
                                    "value": [0.1, 0.2, 0.3]}}], count=n)
    assert_rate(sum(len(r) for r in rows), n, 0.8)
    boxes = [r[0] for r in rows if r]
    assert all(s["kind"] == "erase" and [f32(v) for v in s["value"]] == [f32(0.1), f32(0.2), f32(0.3)]
               for s in boxes)
    ours = np.array([(s["top"], s["left"], s["height"], s["width"]) for s in boxes], dtype=np.float64)
    torch.manual_seed(0)
    img = torch.empty(3, H, W)
    theirs = np.array([T.RandomErasing.get_params(img, (0.05, 0.4), (0.5, 2.5), [0])[:4]
                       for _ in range(len(boxes))], dtype=np.float64)
    assert (theirs[:, 2] < H).all()

    def features(b):
        top, left, h, w = b.T
        return {"h": h, "w": w, "area": h * w, "top": top / (H - h + 1), "left": left / (W - w + 1)}

    a, b = features(ours), features(theirs)
    for name in a:
        p = stats.ks_2samp(a[name], b[name]).pvalue
        assert p > P_MIN, f"{name}: KS p = {p:.2g}"
    # "random": a noise seed per box, as a decimal string.
    noisy = draw([{"RandomErasing": {"p": 1, "value": "random"}}], count=50)
    seeds = [r[0]["noise_seed"] for r in noisy if r]
    assert all(isinstance(s, str) and s.isdigit() for s in seeds) and len(set(seeds)) == len(seeds)


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    path = tmp_path_factory.mktemp("policies") / "photo.jpg"
    make_photo(96, 72, 8).save(path, quality=92)
    return path


@pytest.mark.parametrize("ops", [
    [{"TrivialAugmentWide": {}}],
    [{"RandAugment": {"num_ops": 3, "magnitude": 15, "interpolation": "bilinear", "fill": [30, 60, 90]}}],
    [{"AutoAugment": {"policy": "svhn"}}],
    [{"AutoAugment": {"policy": "cifar10", "fill": [255, 0, 128]}}],
], ids=["trivial", "randaugment", "svhn", "cifar10"])
def test_rendered_policy_equals_apply_op(photo, tmp_path, ops):
    (name, params), = ops[0].items()
    interpolation = InterpolationMode(params.get("interpolation", "nearest"))
    fill = params.get("fill")
    pil = Image.open(photo).convert("RGB")
    for index in range(12):
        out, steps_path = tmp_path / "out.raw", tmp_path / "steps.json"
        proc = subprocess.run([str(TOOL), "render", "--input", str(photo), "--out", str(out), "--ops",
                               json.dumps(ops), "--exact", "--seed", "5", "--index", str(index),
                               "--steps-out", str(steps_path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        ours = np.fromfile(out, dtype=np.uint8).reshape(72, 96, 3)
        img = pil
        for s in json.loads(steps_path.read_text()):
            img = A._apply_op(img, s["aug"], f32(s["magnitude"]), interpolation=interpolation, fill=fill)
        assert np.array_equal(ours, np.asarray(img)), (index, json.loads(steps_path.read_text()))
