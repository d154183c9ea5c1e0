"""Loader(transform=...): torchvision transforms read into a daemon pipeline.

Reading: each supported recipe maps to the right options, anything else is
refused naming the transform. End to end: a Loader given the torchvision
recipe yields exactly what the same Loader given the options yields.
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
    assert o == dict(pipeline="train", size=(176, 176), scale=(0.25, 1.0), ratio=(0.5, 2.0),
                     interpolation="antialias", flip_prob=0.3, dtype="float32", layout="nchw",
                     mean=MEAN, std=STD)


def test_eval_recipe_and_uint8(options):
    o = options([T.Resize(160), T.CenterCrop((128, 144)), T.PILToTensor()])
    assert o["pipeline"] == "eval" and o["resize_size"] == 160 and o["size"] == (128, 144)
    assert o["dtype"] == "uint8" and o["layout"] == "nchw" and "mean" not in o
    o = options([T.Resize(256), T.CenterCrop(224), T.PILToTensor(),
                 T.ConvertImageDtype(torch.float16), T.Normalize(MEAN, STD)])
    assert o["dtype"] == "float16" and o["mean"] == MEAN
    o = options(T.Compose([T.RandomResizedCrop(64), T.ToTensor()]))  # no flip, no Normalize
    assert o["flip_prob"] == 0.0 and o["mean"] == [0.0] * 3 and o["std"] == [1.0] * 3


@pytest.mark.parametrize("transform,match", [
    ([T.RandomResizedCrop(64), T.ColorJitter(0.4), T.ToTensor()], "ColorJitter"),
    ([T.RandomResizedCrop(64, interpolation=T.InterpolationMode.BICUBIC), T.ToTensor()],
     "bicubic"),
    ([T.Resize((64, 80)), T.CenterCrop(64), T.ToTensor()], "Resize"),
    ([T.Resize(64), T.ToTensor()], "without CenterCrop"),
    ([T.RandomResizedCrop(64)], "end in a tensor"),
    ([T.RandomResizedCrop(64), T.PILToTensor(), T.Normalize(MEAN, STD)], "Normalize"),
    ([T.Resize(72), T.CenterCrop(64), T.RandomHorizontalFlip(), T.ToTensor()],
     "RandomHorizontalFlip"),
])
def test_unsupported_transforms_are_refused_by_name(stoker, options, transform, match):
    with pytest.raises(stoker.InvalidRequestError, match=match):
        options(transform)


def test_a_loader_given_the_recipe_yields_what_the_options_give(stoker, daemon_factory,
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
        for (xa, ya), (xb, yb) in zip(a, b):
            assert xa.shape == (4, 3, 40, 40) and xa.dtype == torch.float32
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
