"""Multi-view samples (SimCLR, MoCo, BYOL, DINO): one decode, several views.

Reading: ``stoker.MultiView([...])`` and the recipes' own transform objects
(MoCo's ``TwoCropsTransform``, DINO's ``DataAugmentationDINO``), recognised by
structure, become the pipeline's ``views``; what cannot be served is refused
by name. End to end, through the daemon: every view of every sample equals
the same view's ops run alone by stoker-image-tool with that view's key
(bit for bit), and torchvision's transforms forced to the parameters drawn
(exactly for crop and pixel ops, within the resize bound for
RandomResizedCrop); batches come out as DataLoader's default collate gives a
list of views; a seed gives the same views whatever the number of workers.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from conftest import make_dataset

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")

import textured_corpus  # noqa: E402
from test_image_fidelity import MAE_EXACT, TOOL  # noqa: E402
from test_image_ops import composed_torchvision_result, render  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


# The projects' own objects (MoCo's TwoCropsTransform, MoCo v3's two-transform
# form, DINO's DataAugmentationDINO with its BICUBIC crops and PIL classes).
from recipes import DataAugmentationDINO, TwoBaseTransforms, TwoCropsTransform  # noqa: E402


def simclr(size=224):
    """SimCLR / MoCo v2's augmentation, with torchvision's GaussianBlur."""
    return T.Compose([
        T.RandomResizedCrop(size, scale=(0.2, 1.0)),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([T.GaussianBlur(23, sigma=(0.1, 2.0))], p=0.5),
        T.RandomHorizontalFlip(),
        T.ToTensor(), T.Normalize(MEAN, STD)])


@pytest.fixture(scope="module")
def options(stoker):
    from stoker._transforms import loader_options
    return loader_options


def op_names(view):
    return [next(iter(op)) for op in view["ops"]]


def test_the_recipes_transform_objects_are_read_as_views(options, stoker):
    base = simclr()
    o = options(TwoCropsTransform(base))
    assert len(o["views"]) == 1 and o["views"][0]["count"] == 2
    assert op_names(o["views"][0]) == ["RandomResizedCrop", "RandomApply", "RandomGrayscale",
                                       "RandomApply", "RandomHorizontalFlip"]
    assert o["dtype"] == "float32" and o["mean"] == MEAN and o["std"] == STD
    assert options(stoker.MultiView([base, base])) == o  # declared: the same
    # Two transforms: two views; DINO: 1 + 1 + 8.
    o = options(TwoBaseTransforms(simclr(), simclr(160)))
    assert [v["count"] for v in o["views"]] == [1, 1]
    assert o["views"][1]["ops"][0]["RandomResizedCrop"]["size"] == [160, 160]
    o = options(DataAugmentationDINO((0.4, 1.0), (0.05, 0.4), 8))
    assert [v["count"] for v in o["views"]] == [1, 1, 8]
    assert op_names(o["views"][0]) == ["RandomResizedCrop", "RandomHorizontalFlip", "RandomApply",
                                       "RandomGrayscale", "ImageFilterGaussianBlur"]
    assert op_names(o["views"][1])[-1] == "RandomSolarize"
    assert o["views"][2]["ops"][0]["RandomResizedCrop"]["size"] == [96, 96]
    # The object itself is left as it was.
    t = TwoCropsTransform(base)
    options(t)
    assert t.base_transform is base


def test_what_views_cannot_serve_is_refused_by_name(options, stoker):
    from stoker import InvalidRequestError

    class OwnFilter:  # a class of its own that does what stoker cannot read
        def __call__(self, img):
            return img.rotate(3)

    own = T.Compose([T.RandomResizedCrop(64), OwnFilter(), T.ToTensor()])
    with pytest.raises(InvalidRequestError, match="view 0: .*OwnFilter is not served"):
        options(TwoCropsTransform(own))
    a = T.Compose([T.RandomResizedCrop(64), T.ToTensor(), T.Normalize(MEAN, STD)])
    b = T.Compose([T.RandomResizedCrop(32), T.PILToTensor()])
    with pytest.raises(InvalidRequestError, match="tensor conversions differ"):
        options(stoker.MultiView([a, b]))
    with pytest.raises(InvalidRequestError, match="view 1 .* has no op"):
        options(stoker.MultiView([a, T.ToTensor()]))

    class Dict:  # not a list of views: not recognised, refused as unknown
        def __init__(self):
            self.t = a

        def __call__(self, x):
            return {"q": self.t(x)}

    with pytest.raises(InvalidRequestError, match="Dict is not served"):
        options(Dict())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """An ImageFolder of finely textured and photo-like JPEGs."""
    root = tmp_path_factory.mktemp("mv") / "data" / "views"
    small = {"text_500x375_420_q75", "fur_800x600_420_q85", "fabric_640x480_444_q90",
             "photo_500x375_444_q95"}
    (root / "a").mkdir(parents=True)
    for name, path in textured_corpus.write_corpus(root.parent.parent / "textured"):
        if name in small:
            shutil.copy(path, root / "a" / f"{name}.jpg")
    make_dataset(str(root), classes=2, per_class=3, sizes=(120, 300), seed=5,
                 class_prefix="b")
    files = sorted(str(p) for p in root.rglob("*.jpg"))
    assert len(files) == 10
    return root


# View 0: crop and pixel ops, torchvision-exact; view 1: RandomResizedCrop,
# within the resize bound. uint8 outputs: compared as pixels.
VIEW_A = T.Compose([T.RandomCrop(96, pad_if_needed=True), T.RandomHorizontalFlip(),
                    T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
                    T.RandomGrayscale(p=0.2), T.PILToTensor()])
VIEW_B = T.Compose([T.RandomResizedCrop(48, scale=(0.05, 0.4)), T.RandomHorizontalFlip(),
                    T.RandomSolarize(128, p=0.5), T.PILToTensor()])


def samples(root):
    """ImageFolder's order: (path, class)."""
    out = []
    for k, c in enumerate(sorted(os.listdir(root))):
        out += [(os.path.join(root, c, f), k) for f in sorted(os.listdir(os.path.join(root, c)))]
    return out


def test_every_view_equals_its_ops_alone_and_torchvision_forced(stoker, daemon_factory, corpus,
                                                                 tmp_path):
    if not TOOL.exists():
        pytest.skip(f"{TOOL} not built")
    d = daemon_factory(workers=2, data_root=str(corpus.parent))
    files = samples(corpus)
    transform = stoker.MultiView([VIEW_A, VIEW_A, VIEW_B])
    failures, seen = [], 0
    with stoker.Loader(str(corpus), transform=transform, socket=d.socket, batch_size=4, seed=21,
                       shuffle=False, epochs=1) as loader:
        view_ops = [v["ops"] for v in loader.effective_pipeline["views"]]
        output_view = [0, 0, 1]
        for views, labels in loader:
            assert isinstance(views, list) and len(views) == 3
            assert views[0].shape[1:] == (3, 96, 96) and views[2].shape[1:] == (3, 48, 48)
            assert all(v.dtype == torch.uint8 for v in views)
            for i, index in enumerate(loader.last_indices.tolist()):
                path, label = files[index]
                assert int(labels[i]) == label
                for k in range(3):
                    got = views[k][i].permute(1, 2, 0).numpy()
                    ops = view_ops[output_view[k]]
                    alone, steps = render(path, tmp_path, ops, 21, exact=True, index=index,
                                          output=k)
                    if not np.array_equal(got, alone):
                        failures.append(f"{path} view {k}: differs from its ops alone")
                    want = np.asarray(composed_torchvision_result(path, ops, steps))
                    diff = np.abs(got.astype(int) - want.astype(int))
                    if output_view[k] == 0 and diff.max() != 0:
                        failures.append(f"{path} view {k}: not torchvision's ({diff.max()})")
                    if output_view[k] == 1 and diff.mean() > MAE_EXACT:
                        failures.append(f"{path} view {k}: MAE {diff.mean():.3f}")
                seen += 1
                # The two copies of view 0 are drawn apart.
                assert not torch.equal(views[0][i], views[1][i])
    assert seen == 10
    assert not failures, "\n".join(failures)


def test_dino_batches_come_out_as_dataloader_collates_them(stoker, daemon_factory, corpus):
    d = daemon_factory(workers=2, data_root=str(corpus.parent))
    dino = DataAugmentationDINO((0.4, 1.0), (0.05, 0.4), 8, size=128, local_size=48)
    ds = __import__("torchvision.datasets", fromlist=["ImageFolder"]).ImageFolder(
        str(corpus), transform=dino)
    ref_views, ref_labels = next(iter(torch.utils.data.DataLoader(ds, batch_size=5)))
    with stoker.Loader(str(corpus), transform=dino, socket=d.socket, batch_size=5, seed=3,
                       shuffle=False, epochs=1) as loader:
        batches = list(loader)
    views, labels = batches[0]
    assert len(batches) == 2
    assert type(views) is type(ref_views) and len(views) == len(ref_views) == 10
    for ours, theirs in zip(views, ref_views):
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert torch.equal(labels, ref_labels)
    # Normalized as ToTensor + Normalize leave them; every view its own.
    for v in views:
        assert -2.2 < float(v.min()) and float(v.max()) < 2.7
    assert not torch.equal(views[2][0], views[3][0])
    # output="dict": each view by its field name.
    with stoker.Loader(str(corpus), transform=dino, socket=d.socket, batch_size=5, seed=3,
                       shuffle=False, epochs=1, output="dict") as loader:
        first = next(iter(loader))
    assert sorted(first) == sorted([f"view{k}" for k in range(10)] + ["label"])
    assert torch.equal(first["view9"], views[9])


def test_a_seed_gives_the_same_views_whatever_the_workers(stoker, daemon_factory, corpus):
    mv = stoker.MultiView([simclr(64), simclr(64)])
    got = []
    for workers in (1, 3):
        d = daemon_factory(workers=workers, data_root=str(corpus.parent))
        with stoker.Loader(str(corpus), transform=mv, socket=d.socket, batch_size=3, seed=11,
                           epochs=2) as loader:
            got.append([(torch.stack(v).clone(), l.clone()) for _ in range(2) for v, l in loader])
    assert len(got[0]) == len(got[1]) == 8  # 2 epochs of 4 batches (the last partial)
    for (va, la), (vb, lb) in zip(*got):
        assert torch.equal(la, lb) and torch.equal(va, vb)
    # Epochs draw anew.
    assert not torch.equal(got[0][0][0], got[0][4][0])


def test_an_imagefolder_with_the_recipes_transform_is_served(stoker, daemon_factory, corpus):
    """The drop-in's route (and `python -m stoker run`'s): a torchvision
    ImageFolder whose transform is a multi-view object."""
    from torchvision.datasets import ImageFolder
    d = daemon_factory(workers=1, data_root=str(corpus.parent))
    ds = ImageFolder(str(corpus), transform=TwoCropsTransform(simclr(64)))
    with stoker.Loader(ds, socket=d.socket, batch_size=5, epochs=1, seed=1) as loader:
        batches = list(loader)
    assert len(batches) == 2
    (q, k), labels = batches[0]
    assert q.shape == k.shape == (5, 3, 64, 64) and q.dtype == torch.float32
    assert sorted(torch.cat([b[1] for b in batches]).tolist()) == sorted(t for _, t in ds.samples)
