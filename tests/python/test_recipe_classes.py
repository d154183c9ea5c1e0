"""The recipes' own augmentation classes, as their repositories write them.

DINO's ``utils.GaussianBlur`` / ``utils.Solarization`` and MoCo's
``loader.GaussianBlur`` / ``loader.Solarize`` are not torchvision
transforms: they call PIL's ImageFilter.GaussianBlur and ImageOps.solarize
behind ``random`` draws. stoker reads them by what they do to a stand-in
image (stoker/_recipe_ops.py) into ``ImageFilterGaussianBlur`` (Pillow's
box-blur arithmetic, exact) and ``RandomSolarize``. Here: each is read with
its parameters and probability; what is not of their shape is refused by
name; the ``random`` module is left as it was; and DINO's
``DataAugmentationDINO`` exactly as main_dino.py writes it (BICUBIC crops,
the PIL blur and solarize) runs through ``Loader(transform=...)`` with every
view equal to its ops run alone by stoker-image-tool and to torchvision +
PIL forced to the parameters drawn (exact but for the resize, within its
bound).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")
from PIL import ImageFilter, ImageOps  # noqa: E402

from test_image_fidelity import MAE_EXACT, TOOL  # noqa: E402
from test_image_ops import composed_torchvision_result, render  # noqa: E402
from test_multiview import MEAN, STD, TwoCropsTransform, corpus, samples  # noqa: E402,F401


from recipes import (DataAugmentationDINO, DinoGaussianBlur, DinoSolarization,  # noqa: E402
                     MocoGaussianBlur, MocoSolarize, moco_v2)


@pytest.fixture(scope="module")
def read(stoker):
    from stoker import _recipe_ops
    return _recipe_ops.read


@pytest.fixture(scope="module")
def options(stoker):
    from stoker._transforms import loader_options
    return loader_options


def test_each_class_is_read_with_its_parameters_and_probability(read):
    blur = lambda r, p: {"ImageFilterGaussianBlur": {"radius": r, "p": p}}  # noqa: E731
    assert read(DinoGaussianBlur(1.0)) == blur([0.1, 2.0], 1.0)
    assert read(DinoGaussianBlur(0.1)) == blur([0.1, 2.0], 0.1)
    assert read(DinoGaussianBlur(p=0.5, radius_min=0.3, radius_max=4)) == blur([0.3, 4.0], 0.5)
    assert read(MocoGaussianBlur([.1, 2.])) == blur([0.1, 2.0], 1.0)
    assert read(DinoSolarization(0.2)) == {"RandomSolarize": {"threshold": 128.0, "p": 0.2}}
    assert read(MocoSolarize()) == {"RandomSolarize": {"threshold": 128.0, "p": 1.0}}

    class FixedBlur:  # a constant radius
        def __call__(self, img):
            return img.filter(ImageFilter.GaussianBlur(1.5))

    class SkipWhenLarge:  # the gate spelled the other way: applied when the draw is large
        def __call__(self, img):
            if random.random() >= 0.7:
                return ImageOps.solarize(img, 100)
            return img

    assert read(FixedBlur()) == blur([1.5], 1.0)
    assert read(SkipWhenLarge()) == {"RandomSolarize": {"threshold": 100.0, "p": pytest.approx(0.3)}}


def test_what_is_not_of_their_shape_reads_as_nothing_and_random_is_left_alone(read):
    class Scaled:  # a radius computed from a draw: not a range stoker can name
        def __call__(self, img):
            return img.filter(ImageFilter.GaussianBlur(random.random() * 2))

    class TwoGates:
        def __call__(self, img):
            if random.random() < 0.5 and random.random() < 0.5:
                return ImageOps.solarize(img)
            return img

    class Rotates:
        def __call__(self, img):
            return img.rotate(10)

    class BoxBlur:  # another PIL filter
        def __call__(self, img):
            return img.filter(ImageFilter.BoxBlur(2))

    class Ignores:  # returns something else than the image it made
        def __call__(self, img):
            img.filter(ImageFilter.GaussianBlur(1))
            return img

    before = (random.random, random.uniform)
    for t in (Scaled(), TwoGates(), Rotates(), BoxBlur(), Ignores(), lambda img: img,
              T.RandomHorizontalFlip()):
        assert read(t) is None, t
    assert (random.random, random.uniform) == before
    state = random.getstate()
    read(DinoGaussianBlur())
    assert random.getstate() == state


def test_the_recipes_compositions_are_read_and_the_unknown_refused(options, stoker):
    o = options(TwoCropsTransform(moco_v2()))
    (view,) = o["views"]
    assert view["count"] == 2
    assert view["ops"][3] == {"RandomApply": {"transforms": [
        {"ImageFilterGaussianBlur": {"radius": [0.1, 2.0], "p": 1.0}}], "p": 0.5}}

    o = options(DataAugmentationDINO((0.4, 1.), (0.05, 0.4), 8))
    assert [v["count"] for v in o["views"]] == [1, 1, 8]
    g1, g2, local = (v["ops"] for v in o["views"])
    assert g1[0] == {"RandomResizedCrop": {"size": [224, 224], "scale": [0.4, 1.0],
                                           "ratio": [0.75, pytest.approx(4 / 3)],
                                           "interpolation": "bicubic"}}
    assert [next(iter(op)) for op in g1] == ["RandomResizedCrop", "RandomHorizontalFlip",
                                             "RandomApply", "RandomGrayscale",
                                             "ImageFilterGaussianBlur"]
    assert g1[-1]["ImageFilterGaussianBlur"]["p"] == 1.0
    assert g2[-2]["ImageFilterGaussianBlur"]["p"] == 0.1
    assert g2[-1] == {"RandomSolarize": {"threshold": 128.0, "p": 0.2}}
    assert local[0]["RandomResizedCrop"]["size"] == [96, 96]
    assert local[-1]["ImageFilterGaussianBlur"]["p"] == 0.5

    class OwnFilter:
        def __call__(self, img):
            return img.filter(ImageFilter.SHARPEN)

    from stoker import InvalidRequestError
    with pytest.raises(InvalidRequestError, match="OwnFilter is not served.*ImageFilter.GaussianBlur"):
        options(T.Compose([T.RandomResizedCrop(64), OwnFilter(), T.ToTensor()]))
    with pytest.raises(InvalidRequestError, match="RandomApply holds OwnFilter"):
        options(T.Compose([T.RandomResizedCrop(64), T.RandomApply([OwnFilter()]), T.ToTensor()]))


def test_dino_as_written_runs_and_every_view_is_its_ops_and_torchvision_pil_forced(
        stoker, daemon_factory, corpus, tmp_path):
    if not TOOL.exists():
        pytest.skip(f"{TOOL} not built")
    d = daemon_factory(workers=2, data_root=str(corpus.parent))
    files = samples(corpus)
    dino = DataAugmentationDINO((0.4, 1.), (0.05, 0.4), 4, size=128, local_size=48)
    failures, seen, blurred = [], 0, 0
    with stoker.Loader(str(corpus), transform=dino, socket=d.socket, batch_size=5, seed=4,
                       shuffle=False, epochs=1) as loader:
        view_ops = [v["ops"] for v in loader.effective_pipeline["views"]]
        output_view = [0, 1, 2, 2, 2, 2]
        for views, labels in loader:
            assert len(views) == 6 and views[0].dtype == torch.float32
            assert views[0].shape[1:] == (3, 128, 128) and views[5].shape[1:] == (3, 48, 48)
            for i, index in enumerate(loader.last_indices.tolist()):
                path, label = files[index]
                assert int(labels[i]) == label
                for k in range(6):
                    # ToTensor + Normalize undone: the uint8 pixels.
                    unnormalized = (views[k][i].permute(1, 2, 0).numpy() * STD + MEAN) * 255
                    got = np.rint(unnormalized)
                    assert np.abs(got - unnormalized).max() < 0.01
                    got = got.astype(np.uint8)
                    ops = view_ops[output_view[k]]
                    alone, steps = render(path, tmp_path, ops, 4, exact=True, index=index,
                                          output=k)
                    blurred += any(s["kind"] == "box_blur" for s in steps)
                    if not np.array_equal(got, alone):
                        failures.append(f"{path} view {k}: differs from its ops alone")
                    want = composed_torchvision_result(path, ops, steps)
                    err = np.abs(got.astype(int) - want.astype(int)).mean()
                    if err > MAE_EXACT:
                        failures.append(f"{path} view {k}: MAE {err:.3f} against torchvision")
                seen += 1
    assert seen == 10
    assert blurred >= 10  # view 0 always blurs
    assert not failures, "\n".join(failures)
