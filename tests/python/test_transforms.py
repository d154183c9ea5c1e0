"""Loader(transform=...): torchvision transforms read into a daemon pipeline.

Reading: each torchvision transform maps one to one onto its op, with the
parameters torchvision stores; the tensor conversion onto the output
keywords; anything else is refused naming the transform. End to end: a Loader
given the torchvision recipe yields exactly what the same Loader given the
keywords yields.
"""

from __future__ import annotations

import os

import pytest

from conftest import make_dataset

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def options(stoker):
    from stoker._transforms import loader_options
    return loader_options


def test_train_recipe(options):
    o = options(T.Compose([T.RandomResizedCrop(176, scale=(0.25, 1), ratio=(0.5, 2)),
                           T.RandomHorizontalFlip(0.3), T.ToTensor(), T.Normalize(MEAN, STD)]))
    assert o == dict(ops=[{"RandomResizedCrop": dict(size=[176, 176], scale=[0.25, 1.0],
                                                     ratio=[0.5, 2.0], interpolation="bilinear")},
                          {"RandomHorizontalFlip": dict(p=0.3)}],
                     dtype="float32", layout="nchw", mean=MEAN, std=STD)


def test_eval_recipe_and_uint8(options):
    o = options([T.Resize(160), T.CenterCrop((128, 144)), T.PILToTensor()])
    assert o == dict(ops=[{"Resize": dict(size=[160], interpolation="bilinear")},
                          {"CenterCrop": dict(size=[128, 144])}], dtype="uint8", layout="nchw")
    o = options([T.Resize(256), T.CenterCrop(224), T.PILToTensor(),
                 T.ConvertImageDtype(torch.float16), T.Normalize(MEAN, STD)])
    assert o["dtype"] == "float16" and o["mean"] == MEAN and o["std"] == STD
    o = options(T.Compose([T.RandomResizedCrop(64), T.ToTensor()]))  # no flip, no Normalize
    assert [list(op) for op in o["ops"]] == [["RandomResizedCrop"]]
    assert o["mean"] == [0.0] * 3 and o["std"] == [1.0] * 3  # plain x / 255
    assert options(T.ToTensor()) == dict(pipeline="decode", dtype="float32", layout="nchw",
                                         mean=[0.0] * 3, std=[1.0] * 3)  # the whole image


def test_every_new_op_is_read_with_the_parameters_torchvision_stores(options):
    o = options([T.Resize((40, 48)), T.Resize(36, max_size=44),
                 T.RandomCrop(32, padding=4, pad_if_needed=True, fill=(1, 2, 3),
                              padding_mode="reflect"),
                 T.RandomCrop((30, 28)), T.RandomVerticalFlip(0.25),
                 T.ColorJitter(brightness=0.4, contrast=(0.5, 1.5), saturation=0, hue=0.1),
                 T.Grayscale(3), T.RandomGrayscale(0.2), T.GaussianBlur((3, 5), (0.5, 1.5)),
                 T.GaussianBlur(7, 0.8), T.PILToTensor()])
    assert o["ops"] == [
        {"Resize": dict(size=[40, 48], interpolation="bilinear")},
        {"Resize": dict(size=[36], max_size=44, interpolation="bilinear")},
        {"RandomCrop": dict(size=[32, 32], padding=[4], pad_if_needed=True, fill=[1, 2, 3],
                            padding_mode="reflect")},
        {"RandomCrop": dict(size=[30, 28], pad_if_needed=False, fill=[0],
                            padding_mode="constant")},
        {"RandomVerticalFlip": dict(p=0.25)},
        # torchvision's ranges: 0.4 -> [0.6, 1.4]; saturation 0 -> not made (None).
        {"ColorJitter": dict(brightness=[pytest.approx(0.6), pytest.approx(1.4)],
                             contrast=[0.5, 1.5], hue=[-0.1, 0.1])},
        {"Grayscale": dict(num_output_channels=3)},
        {"RandomGrayscale": dict(p=0.2)},
        {"GaussianBlur": dict(kernel_size=[3, 5], sigma=[0.5, 1.5])},
        {"GaussianBlur": dict(kernel_size=[7, 7], sigma=[0.8, 0.8])},
    ]


def test_compositions_are_read_with_the_ops_they_hold(options):
    """SimCLR's augmentation as its authors write it (RandomApply of a
    ColorJitter at p=0.8), and RandomChoice / RandomOrder."""
    o = options(T.Compose([
        T.RandomResizedCrop(96), T.RandomHorizontalFlip(),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), T.RandomGrayscale(p=0.2),
        T.RandomApply([T.GaussianBlur(9, sigma=(0.1, 2.0))], p=0.5),
        T.RandomChoice([T.RandomInvert(1.0), T.RandomSolarize(128, 1.0)], p=[0.25, 0.75]),
        T.RandomChoice([T.RandomEqualize(1.0), T.RandomAutocontrast(1.0)]),
        T.RandomOrder([T.RandomInvert(0.5), T.RandomPosterize(4, 0.5)]), T.ToTensor()]))
    ops = o["ops"]
    assert ops[2] == {"RandomApply": {"transforms": [{"ColorJitter": dict(
        brightness=[0.6, 1.4], contrast=[0.6, 1.4], saturation=[0.6, 1.4], hue=[-0.1, 0.1])}],
        "p": 0.8}}
    assert ops[4] == {"RandomApply": {"transforms": [{"GaussianBlur": dict(
        kernel_size=[9, 9], sigma=[0.1, 2.0])}], "p": 0.5}}
    assert ops[5] == {"RandomChoice": {"transforms": [{"RandomInvert": {"p": 1.0}},
                                                      {"RandomSolarize": {"threshold": 128.0, "p": 1.0}}],
                                       "p": [0.25, 0.75]}}
    assert "p" not in ops[6]["RandomChoice"]  # None: the daemon's equal weights
    assert ops[7] == {"RandomOrder": {"transforms": [{"RandomInvert": {"p": 0.5}},
                                                     {"RandomPosterize": {"bits": 4, "p": 0.5}}]}}


def test_pad_is_read_as_torchvision_stores_it(options):
    o = options([T.Pad(4), T.Pad((1, 2), fill=(9, 8, 7), padding_mode="edge"),
                 T.Pad([1, 2, 3, 4], padding_mode="reflect"), T.CenterCrop(32), T.PILToTensor()])
    assert o["ops"][:3] == [
        {"Pad": {"padding": [4], "fill": [0], "padding_mode": "constant"}},
        {"Pad": {"padding": [1, 2], "fill": [9, 8, 7], "padding_mode": "edge"}},
        {"Pad": {"padding": [1, 2, 3, 4], "fill": [0], "padding_mode": "reflect"}}]


def test_a_composition_of_an_op_that_is_not_served_is_refused_by_name(stoker, options):
    with pytest.raises(stoker.InvalidRequestError, match="RandomApply holds Lambda, which is not served"):
        options([T.RandomApply([T.Lambda(lambda x: x)]), T.ToTensor()])


def test_bicubic_is_read_from_the_mode_and_from_pils_filter_number(options):
    # DINO writes RandomResizedCrop(224, interpolation=Image.BICUBIC) (3), which
    # torchvision 0.14 turns into InterpolationMode.BICUBIC with a warning.
    with pytest.warns(UserWarning):
        from_int = T.RandomResizedCrop(32, interpolation=3)
    for t in (T.RandomResizedCrop(32, interpolation=T.InterpolationMode.BICUBIC), from_int,
              T.Resize(32, interpolation=T.InterpolationMode.BICUBIC)):
        (op,) = options([t, T.PILToTensor()])["ops"]
        assert next(iter(op.values()))["interpolation"] == "bicubic", op


def test_antialias_is_never_sent_the_pil_backend_always_antialiases(options):
    # torchvision 0.14 ignores antialias=False for PIL images (with a warning):
    # the op's default, PIL's antialiased resampling, is what it does.
    for t in (T.RandomResizedCrop(32, antialias=False), T.Resize(32, antialias=True)):
        (op,) = options([t, T.PILToTensor()])["ops"]
        assert "antialias" not in next(iter(op.values())), op


@pytest.mark.parametrize("transform,match", [
    ([T.RandomResizedCrop(64), T.Lambda(lambda x: x), T.ToTensor()], "Lambda"),
    ([T.RandomResizedCrop(64, interpolation=T.InterpolationMode.LANCZOS), T.ToTensor()],
     "RandomResizedCrop.*lanczos"),
    ([T.Resize(64, interpolation=T.InterpolationMode.NEAREST), T.ToTensor()], "Resize.*nearest"),
    ([T.RandomResizedCrop(64)], "end in a tensor"),
    ([T.RandomResizedCrop(64), T.PILToTensor(), T.Normalize(MEAN, STD)], "Normalize"),
    ([T.RandomResizedCrop(64), T.ToTensor(), T.RandomHorizontalFlip()],
     "RandomHorizontalFlip after ToTensor"),
    ([T.ToTensor(), T.ColorJitter(0.4)], "ColorJitter after ToTensor"),
    ([T.RandomResizedCrop(64), T.RandomErasing(), T.ToTensor()], "RandomErasing before"),
    ([T.RandomResizedCrop(64), T.ToTensor(), T.RandomErasing(), T.Normalize(MEAN, STD)],
     "Normalize after RandomErasing"),
])
def test_unsupported_transforms_are_refused_by_name(stoker, options, transform, match):
    with pytest.raises(stoker.InvalidRequestError, match=match) as e:
        options(transform)
    # The message lists what is served, from the one table.
    from stoker._transforms import _OPS
    assert all(name in str(e.value) for name in _OPS), str(e.value)


def test_a_loader_given_the_recipe_yields_what_the_keywords_give(stoker, daemon_factory,
                                                                 tmp_path_factory):
    root = str(tmp_path_factory.mktemp("tf"))
    make_dataset(os.path.join(root, "set"), classes=2, per_class=6, sizes=(50, 150), seed=61)
    d = daemon_factory(workers=2, data_root=root)
    ds = os.path.join(root, "set")
    common = dict(socket=d.socket, batch_size=4, seed=9, epochs=1)
    recipe = T.Compose([T.RandomResizedCrop(40, scale=(0.3, 1)), T.RandomHorizontalFlip(),
                        T.ToTensor(), T.Normalize(MEAN, STD)])
    with stoker.Loader(ds, transform=recipe, **common) as a, \
            stoker.Loader(ds, pipeline="train", size=40, scale=(0.3, 1), dtype="float32",
                          layout="nchw", **common) as b:
        n = 0
        for (xa, ya), (xb, yb) in zip(a, b):
            assert xa.shape == (4, 3, 40, 40) and xa.dtype == torch.float32
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
            n += 1
        assert n == 3


def test_a_simclr_augmentation_runs_in_the_daemon(stoker, daemon_factory, tmp_path_factory):
    """SimCLR's per-view augmentation, as its authors write it, through
    Loader(transform=): the same batches as its ops given by name (the
    rates and pixels of RandomApply: test_image_ops.py)."""
    root = str(tmp_path_factory.mktemp("simclr"))
    make_dataset(os.path.join(root, "set"), classes=2, per_class=16, sizes=(60, 160), seed=62)
    d = daemon_factory(workers=2, data_root=root)
    ds = os.path.join(root, "set")
    common = dict(socket=d.socket, batch_size=8, seed=4, epochs=1)
    simclr = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(),
                        T.RandomApply([T.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
                        T.RandomGrayscale(p=0.2), T.PILToTensor()])
    ops = [{"RandomResizedCrop": {"size": 32}}, {"RandomHorizontalFlip": {}},
           {"RandomApply": {"transforms": [{"ColorJitter": {"brightness": 0.8, "contrast": 0.8,
                                                            "saturation": 0.8, "hue": 0.2}}],
                            "p": 0.8}},
           {"RandomGrayscale": {"p": 0.2}}]
    with stoker.Loader(ds, transform=simclr, **common) as a, \
            stoker.Loader(ds, ops=ops, size=32, layout="nchw", **common) as b:
        assert [list(op) for op in a.effective_pipeline["ops"]] == [
            ["RandomResizedCrop"], ["RandomHorizontalFlip"], ["RandomApply"], ["RandomGrayscale"]]
        n = 0
        for (xa, ya), (xb, yb) in zip(a, b):
            assert xa.shape == (8, 3, 32, 32) and xa.dtype == torch.uint8
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
            n += 1
        assert n == 4


def test_random_perspective_is_read(options):
    o = options([T.RandomPerspective(0.3, p=0.7, fill=5), T.CenterCrop(32), T.PILToTensor()])
    assert o["ops"][0] == {"RandomPerspective": dict(distortion_scale=0.3, p=0.7,
                                                     interpolation="bilinear", fill=[5])}
    o = options([T.RandomPerspective(interpolation=T.InterpolationMode.NEAREST), T.CenterCrop(8),
                 T.PILToTensor()])
    assert o["ops"][0]["RandomPerspective"]["interpolation"] == "nearest"


def test_elastic_transform_is_read(options):
    o = options([T.ElasticTransform(alpha=30.0, sigma=(4.0, 6.0), fill=7), T.CenterCrop(32),
                 T.PILToTensor()])
    assert o["ops"][0] == {"ElasticTransform": dict(alpha=[30.0, 30.0], sigma=[4.0, 6.0],
                                                    interpolation="bilinear", fill=[7])}
