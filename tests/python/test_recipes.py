"""torchvision's classification training recipes through stoker (issue 15).

* every choice of the reference's ClassificationPresetTrain (no policy, "ra",
  "ta_wide", "augmix", "imagenet"/"cifar10"/"svhn", with and without
  random_erase_prob), given as Loader(transform=preset), becomes the
  effective pipeline of the same ops with torchvision's parameters, in
  order, RandomErasing last, on the normalized float32 output;
* the new single ops map likewise; transforms out of their place are
  refused by name;
* end to end: the v2 recipe (ta_wide, RandomErasing, RandomChoice of MixUp
  and CutMix) yields float batches with soft labels, mixed exactly as the
  batch transform mixes the unmixed batches with the generator of (seed,
  epoch, batch), and a resumed Loader yields the same mixed batches;
* examples/train_resnet.py --recipe v2 trains and resumes with the same mixed
  batches: tests/python/test_train_example.py.
"""

from __future__ import annotations

import os
import pickle

import pytest

from conftest import make_dataset

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")

IM = T.InterpolationMode
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class ClassificationPresetTrain:
    """torchvision 0.14's references/classification/presets.py train preset,
    written from its description (it is not installed with torchvision):
    RandomResizedCrop(crop_size, interpolation); RandomHorizontalFlip(hflip_prob)
    when hflip_prob > 0; the auto_augment_policy ("ra": RandAugment with
    ra_magnitude, "ta_wide": TrivialAugmentWide, "augmix": AugMix with
    augmix_severity, else AutoAugment of that AutoAugmentPolicy value), each
    with the preset's interpolation; PILToTensor, ConvertImageDtype(float),
    Normalize(mean, std); RandomErasing(random_erase_prob) when > 0. Its
    `transforms` is the Compose; calling it applies it."""

    def __init__(self, *, crop_size, mean=MEAN, std=STD, interpolation=IM.BILINEAR,
                 hflip_prob=0.5, auto_augment_policy=None, ra_magnitude=9, augmix_severity=3,
                 random_erase_prob=0.0):
        steps = [T.RandomResizedCrop(crop_size, interpolation=interpolation)]
        if hflip_prob > 0:
            steps.append(T.RandomHorizontalFlip(hflip_prob))
        if auto_augment_policy is not None:
            if auto_augment_policy == "ra":
                steps.append(T.RandAugment(interpolation=interpolation, magnitude=ra_magnitude))
            elif auto_augment_policy == "ta_wide":
                steps.append(T.TrivialAugmentWide(interpolation=interpolation))
            elif auto_augment_policy == "augmix":
                steps.append(T.AugMix(interpolation=interpolation, severity=augmix_severity))
            else:
                steps.append(T.AutoAugment(policy=T.AutoAugmentPolicy(auto_augment_policy),
                                           interpolation=interpolation))
        steps += [T.PILToTensor(), T.ConvertImageDtype(torch.float),
                  T.Normalize(mean=mean, std=std)]
        if random_erase_prob > 0:
            steps.append(T.RandomErasing(p=random_erase_prob))
        self.transforms = T.Compose(steps)

    def __call__(self, img):
        return self.transforms(img)


def effective(stoker, transform, batch_size=8):
    """The effective pipeline a Loader of `transform` requests (no attach)."""
    return stoker.Loader("/nonexistent/set", batch_size=batch_size,
                         transform=transform).effective_pipeline


def op_names(eff):
    return [next(iter(op)) for op in eff["ops"]]


def params(eff, name):
    found = [op[name] for op in eff["ops"] if name in op]
    assert len(found) == 1, eff["ops"]
    return found[0]


POLICY_OPS = {None: [], "ra": ["RandAugment"], "ta_wide": ["TrivialAugmentWide"],
              "augmix": ["AugMix"], "imagenet": ["AutoAugment"], "cifar10": ["AutoAugment"],
              "svhn": ["AutoAugment"]}


@pytest.mark.parametrize("erase", [0.0, 0.25])
@pytest.mark.parametrize("policy", list(POLICY_OPS))
def test_every_preset_choice_is_its_effective_pipeline(stoker, policy, erase):
    preset = ClassificationPresetTrain(crop_size=176, auto_augment_policy=policy,
                                       ra_magnitude=7, augmix_severity=4,
                                       random_erase_prob=erase, mean=(0.5,), std=(0.25,))
    eff = effective(stoker, preset)
    assert op_names(eff) == (["RandomResizedCrop", "RandomHorizontalFlip"] + POLICY_OPS[policy]
                             + (["RandomErasing"] if erase else []))
    assert eff["size"] == [176, 176]
    assert eff["output"] == {"dtype": "float32", "layout": "nchw", "mean": [0.5] * 3,
                             "std": [0.25] * 3}
    rrc = params(eff, "RandomResizedCrop")
    assert rrc["size"] == [176, 176] and rrc["interpolation"] == "bilinear"
    assert rrc["scale"] == pytest.approx([0.08, 1.0]) and rrc["ratio"] == pytest.approx(
        [3 / 4, 4 / 3])
    assert params(eff, "RandomHorizontalFlip") == {"p": 0.5}
    want = {
        "ra": ("RandAugment", {"num_ops": 2, "magnitude": 7, "num_magnitude_bins": 31}),
        "ta_wide": ("TrivialAugmentWide", {"num_magnitude_bins": 31}),
        "augmix": ("AugMix", {"severity": 4, "mixture_width": 3, "chain_depth": -1,
                              "alpha": 1.0, "all_ops": True}),
    }.get(policy, ("AutoAugment", {"policy": policy}))
    if policy is not None:
        got = params(eff, want[0])
        for k, v in want[1].items():
            assert got[k] == v, (k, got)
        # The preset hands its interpolation to the policy; torchvision's
        # fill None is 0.
        assert got["interpolation"] == "bilinear" and got["fill"] == [0, 0, 0]
    if erase:
        e = params(eff, "RandomErasing")
        assert e["p"] == 0.25 and e["scale"] == pytest.approx([0.02, 0.33])
        assert e["ratio"] == pytest.approx([0.3, 3.3]) and e["value"] == [0, 0, 0]
        assert not e.get("value_random")


def test_the_single_ops_map_with_torchvision_parameters(stoker):
    eff = effective(stoker, T.Compose([
        T.RandomResizedCrop(64),
        T.RandomRotation(15, interpolation=IM.BILINEAR, center=(3, 4), fill=(10, 20, 30)),
        T.RandomAffine(degrees=(-5, 10), translate=(0.1, 0.2), scale=(0.9, 1.1),
                       shear=(-3, 3, -1, 2), fill=7.9),
        T.RandomAffine(degrees=0, shear=4),
        T.RandomPosterize(bits=3, p=0.4), T.RandomSolarize(threshold=128.5, p=0.3),
        T.RandomAdjustSharpness(sharpness_factor=2, p=0.2), T.RandomAutocontrast(p=0.1),
        T.RandomEqualize(p=0.6), T.RandomInvert(p=0.7),
        T.AutoAugment(T.AutoAugmentPolicy.CIFAR10, fill=[1, 2, 3]),
        T.RandAugment(num_ops=3, magnitude=5, num_magnitude_bins=11),
        T.AugMix(severity=2, mixture_width=2, chain_depth=3, alpha=0.5, all_ops=False),
        T.ToTensor(), T.RandomErasing(p=1.0, scale=(0.1, 0.2), ratio=(0.5, 2.0), value="random"),
        T.RandomErasing(p=0.5, value=(0.1, 0.2, 0.3), inplace=True)]))
    ops = eff["ops"]
    rot = ops[1]["RandomRotation"]
    assert rot["degrees"] == [-15, 15] and rot["interpolation"] == "bilinear"
    assert rot["center"] == [3, 4] and rot["fill"] == [10, 20, 30]
    aff = ops[2]["RandomAffine"]
    assert aff["degrees"] == [-5, 10] and aff["translate"] == pytest.approx([0.1, 0.2])
    assert aff["scale"] == pytest.approx([0.9, 1.1]) and aff["shear"] == [-3, 3, -1, 2]
    assert aff["interpolation"] == "nearest" and aff["fill"] == [7, 7, 7]  # PIL truncates
    assert ops[3]["RandomAffine"]["shear"][:2] == [-4, 4]
    assert ops[4] == {"RandomPosterize": {"bits": 3, "p": pytest.approx(0.4)}}
    assert ops[5] == {"RandomSolarize": {"threshold": 128.5, "p": pytest.approx(0.3)}}
    assert ops[6] == {"RandomAdjustSharpness": {"sharpness_factor": 2, "p": pytest.approx(0.2)}}
    assert [ops[i] for i in (7, 8, 9)] == [{"RandomAutocontrast": {"p": pytest.approx(0.1)}},
                                           {"RandomEqualize": {"p": pytest.approx(0.6)}},
                                           {"RandomInvert": {"p": pytest.approx(0.7)}}]
    aa = ops[10]["AutoAugment"]
    assert aa["policy"] == "cifar10" and aa["fill"] == [1, 2, 3]
    assert aa["interpolation"] == "nearest"
    ra = ops[11]["RandAugment"]
    assert (ra["num_ops"], ra["magnitude"], ra["num_magnitude_bins"]) == (3, 5, 11)
    am = ops[12]["AugMix"]
    assert (am["severity"], am["mixture_width"], am["chain_depth"], am["all_ops"]) == (
        2, 2, 3, False)
    assert am["alpha"] == 0.5 and am["interpolation"] == "bilinear"
    e1, e2 = ops[13]["RandomErasing"], ops[14]["RandomErasing"]
    assert e1["value_random"] and e1["scale"] == pytest.approx([0.1, 0.2])
    assert e2["value"] == pytest.approx([0.1, 0.2, 0.3]) and not e2.get("value_random")
    assert eff["output"]["dtype"] == "float32"


def test_pil_to_tensor_then_convert_image_dtype_is_to_tensor(stoker):
    crop = [T.RandomResizedCrop(48)]
    want = effective(stoker, T.Compose(crop + [T.ToTensor(), T.Normalize(MEAN, STD)]))
    got = effective(stoker, T.Compose(crop + [T.PILToTensor(), T.ConvertImageDtype(torch.float),
                                              T.Normalize(MEAN, STD)]))
    assert got == want and got["output"]["dtype"] == "float32"
    half = effective(stoker, T.Compose(crop + [T.PILToTensor(),
                                               T.ConvertImageDtype(torch.float16)]))
    assert half["output"]["dtype"] == "float16"
    assert effective(stoker, T.Compose(crop + [T.PILToTensor()]))["output"]["dtype"] == "uint8"
    # A preset without a flip, inside a Compose of its own.
    eff = effective(stoker, T.Compose([ClassificationPresetTrain(crop_size=48, hflip_prob=0)]))
    assert op_names(eff) == ["RandomResizedCrop"] and eff["output"]["dtype"] == "float32"


@pytest.mark.parametrize("transform, message", [
    (ClassificationPresetTrain(crop_size=32, interpolation=IM.LANCZOS),
     r"RandomResizedCrop\(interpolation=lanczos\)"),
    (T.Compose([T.RandomCrop(32), T.RandAugment(interpolation=IM.BICUBIC), T.ToTensor()]),
     r"RandAugment\(interpolation=bicubic\).*nearest or bilinear"),
    (T.Compose([T.RandomCrop(32), T.RandomErasing(), T.ToTensor()]),
     r"RandomErasing before the tensor conversion"),
    (T.Compose([T.RandomCrop(32), T.ToTensor(), T.RandomErasing(), T.Normalize(MEAN, STD)]),
     r"Normalize after RandomErasing.*last step"),
    (T.Compose([T.ToTensor(), T.RandomErasing(), T.RandomInvert()]),
     r"RandomInvert after RandomErasing"),
    (T.Compose([T.RandomCrop(32), T.ToTensor(), T.RandomInvert()]),
     r"RandomInvert after ToTensor\(\)"),
])
def test_out_of_place_transforms_are_refused_by_name(stoker, transform, message):
    with pytest.raises(stoker.InvalidRequestError, match=message) as e:
        effective(stoker, transform)
    assert "TrivialAugmentWide" in str(e.value) and "RandomErasing" in str(e.value)


def test_the_pipeline_module_refuses_what_torchvision_would_not_serve(stoker):
    with pytest.raises(stoker.InvalidRequestError, match="expand"):
        effective(stoker, T.Compose([T.RandomCrop(32), T.RandomRotation(10, expand=True),
                                     T.ToTensor()]))
    with pytest.raises(stoker.InvalidRequestError, match="(?i)random.*(uint8|float)"):
        effective(stoker, T.Compose([T.RandomCrop(32), T.PILToTensor(),
                                     T.RandomErasing(value="random")]))


# ---------------------------------------------------------------------------
# End to end

BATCH, CLASSES, SIZE = 6, 3, 32


@pytest.fixture(scope="module")
def recipe_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("recipes"))
    make_dataset(os.path.join(root, "set"), classes=CLASSES, per_class=6, sizes=(40, 90),
                 seed=15)
    return root


@pytest.fixture(scope="module")
def served(module_daemon_factory, recipe_root):
    return module_daemon_factory(workers=2, data_root=recipe_root)


def v2_loader(stoker, daemon, mixed=True, **kw):
    mix = stoker.RandomChoice([stoker.MixUp(alpha=0.2, num_classes=CLASSES),
                               stoker.CutMix(alpha=1.0, num_classes=CLASSES)])
    preset = ClassificationPresetTrain(crop_size=SIZE, auto_augment_policy="ta_wide",
                                       random_erase_prob=0.5)
    return stoker.Loader("set", batch_size=BATCH, socket=daemon.socket, transform=preset,
                         seed=5, batch_transform=mix if mixed else None, **kw)


def take(loader, n, state=None):
    """n batches, epoch after epoch; `state`: a list that gets the loader's
    state_dict after the last one (taken with its iterator alive)."""
    out = []
    it = iter(loader.iter_batches())
    for _ in range(n):
        try:
            v = next(it)
        except StopIteration:
            it = iter(loader.iter_batches())
            v = next(it)
        out.append((v.epoch, v.batch_in_epoch, v.images.clone(), v.labels.clone()))
    if state is not None:
        state.append(loader.state_dict())
    return out


def test_v2_recipe_end_to_end_with_mixup_cutmix_and_resume(stoker, served):
    import stoker.batch as sb  # noqa: PLC0415

    with v2_loader(stoker, served) as ld:
        assert len(ld) == 3
        mixed = take(ld, 6)  # two epochs
    with v2_loader(stoker, served, mixed=False) as ld:
        plain = take(ld, 6)
    mix = v2_loader(stoker, served).batch_transform
    soft_rows = 0
    for (e, b, images, labels), (pe, pb, pimages, plabels) in zip(mixed, plain):
        assert (e, b) == (pe, pb)
        assert images.shape == (BATCH, 3, SIZE, SIZE) and images.dtype == torch.float32
        assert labels.shape == (BATCH, CLASSES) and labels.dtype == torch.float32
        torch.testing.assert_close(labels.sum(1), torch.ones(BATCH))
        soft_rows += int(((labels > 0) & (labels < 1)).any(1).sum())
        # The batch transform with the generator of (seed, epoch, batch).
        want = mix(pimages, plabels, generator=sb.batch_generator(5, e, b))
        assert torch.equal(images, want[0]) and torch.equal(labels, want[1]), (e, b)
    assert soft_rows > 0
    # Resumed after 2 batches: the same mixed batches follow.
    state = []
    with v2_loader(stoker, served) as ld:
        take(ld, 2, state)
    assert (state[0]["epoch"], state[0]["batch"]) == (0, 2)
    with v2_loader(stoker, served) as ld:
        ld.load_state_dict(state[0])
        resumed = take(ld, 4)
    for got, want in zip(resumed, mixed[2:]):
        assert got[:2] == want[:2]
        assert torch.equal(got[2], want[2]) and torch.equal(got[3], want[3]), got[:2]
    # A batch transform set on the loader (once its classes are known) is
    # checked as the keyword, and a pickled copy carries it.
    with v2_loader(stoker, served, mixed=False) as ld:
        ld.batch_transform = mix
        it = iter(ld.iter_batches())
        for _ in range(3):
            next(it)
        copy = pickle.loads(pickle.dumps(ld))
    with copy:
        assert isinstance(copy.batch_transform, stoker.RandomChoice)
        got = take(copy, 2)
    for g, w in zip(got, mixed[3:5]):
        assert g[:2] == w[:2] and torch.equal(g[2], w[2]) and torch.equal(g[3], w[3])


@pytest.mark.parametrize("layout", ["nhwc", "channels_last"])
def test_the_loader_mixes_in_its_layout(stoker, served, layout):
    import stoker.batch as sb  # noqa: PLC0415

    cut = stoker.CutMix(alpha=1.0, num_classes=CLASSES)

    def loader(bt):
        return stoker.Loader("set", batch_size=BATCH, socket=served.socket, pipeline="train",
                             size=(SIZE, SIZE + 8), dtype="float32", layout=layout, seed=3,
                             batch_transform=bt)

    with loader(cut) as ld:
        mixed = take(ld, 2)
    with loader(None) as ld:
        plain = take(ld, 2)
    with loader(lambda x, y: (x * 2, y + 1)) as ld:  # any callable, called as it is
        doubled = take(ld, 1)
    for (e, b, images, labels), (_, _, pimages, plabels) in zip(mixed, plain):
        want = cut(pimages, plabels, generator=sb.batch_generator(3, e, b),
                   layout="nhwc" if layout == "nhwc" else "nchw")
        assert torch.equal(images, want[0]) and torch.equal(labels, want[1])
        box = cut.draw(sb.batch_generator(3, e, b), SIZE, SIZE + 8).box
        assert box[1] - box[0] < SIZE or box[3] - box[2] < SIZE + 8  # a box, not the image
    assert torch.equal(doubled[0][2], plain[0][2] * 2)
    assert torch.equal(doubled[0][3], plain[0][3] + 1)
    # num_classes must hold the dataset's classes: refused at attach, and when
    # set on an attached loader.
    with pytest.raises(stoker.InvalidRequestError, match="num_classes=2.*3 classes"):
        loader(stoker.MixUp(num_classes=2)).attach()
    with loader(None) as ld:
        ld.attach()
        with pytest.raises(stoker.InvalidRequestError, match="num_classes=2.*3 classes"):
            ld.batch_transform = stoker.CutMix(num_classes=2)
