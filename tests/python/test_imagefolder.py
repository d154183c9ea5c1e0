"""ImageFolder indexing as torchvision's, against the real daemon.

Each dataset here is compared with torchvision.datasets.ImageFolder (or its
make_dataset, for allow_empty, which torchvision 0.14 lacks) on the same
folder: empty and hidden class folders, every image format of torchvision's
IMG_EXTENSIONS in mixed case beside files it skips, file links that dangle or leave the data root, class folders and dataset
paths outside the root, and the options in the daemon's and the cache's keys.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from typing import Dict, List, Tuple

import numpy as np
import pytest
from PIL import Image

from conftest import photo_like, write_jpeg

tv_folder = pytest.importorskip("torchvision.datasets.folder")

SIZE = dict(pipeline={"size": 24})


def _jpeg(path: str, seed: int) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_jpeg(path, photo_like(np.random.default_rng(seed), 32, 40))


def _image(path: str, fmt: str, seed: int, mode: str = "RGB") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(photo_like(np.random.default_rng(seed), 20, 24)).convert(mode).save(path, fmt)


def _age(top: str) -> None:
    """Folder mtimes 10 s back: the daemon caches no index of a tree changed
    within the last 2 s."""
    past = time.time() - 10
    for d, _, _ in os.walk(top):
        os.utime(d, (past, past))


@pytest.fixture(scope="module")
def data():
    top = tempfile.mkdtemp(prefix="stk", dir="/tmp")
    root = os.path.join(top, "data")
    outside = os.path.join(top, "outside")
    seed = iter(range(1000))
    # Row 1: an empty class and Jupyter's hidden folder beside the classes.
    for cls, n in (("cat", 3), ("emu", 2)):
        for i in range(n):
            _jpeg(os.path.join(root, "empties", cls, f"{i}.jpg"), next(seed))
    os.makedirs(os.path.join(root, "empties", ".ipynb_checkpoints"))
    os.makedirs(os.path.join(root, "empties", "dog"))
    with open(os.path.join(root, "empties", "dog", "readme.txt"), "w") as f:
        f.write("no images\n")
    # Row 2: every format beside the JPEGs, names in mixed case; a class of
    # PNGs only; files torchvision skips (a GIF, text, no extension), a
    # directory named like an image (walked), a PNG named .jpg (decoded as
    # the PNG it is).
    formats = os.path.join(root, "formats")
    for i in range(4):
        _jpeg(os.path.join(formats, "a", f"img{i}.jpg"), next(seed))
    _image(os.path.join(formats, "a", "img1.png"), "PNG", next(seed))
    _image(os.path.join(formats, "a", "img2b.WEBP"), "WEBP", next(seed))
    _image(os.path.join(formats, "a", "sub", "s.bmp"), "BMP", next(seed))
    _jpeg(os.path.join(formats, "a", "sub", "t.jpeg"), next(seed))
    for i in range(3):
        _jpeg(os.path.join(formats, "b", f"{i}.JPG"), next(seed))
    _image(os.path.join(formats, "b", "scan.tif"), "TIFF", next(seed))
    for i in range(2):
        _image(os.path.join(formats, "c_png", f"{i}.png"), "PNG", next(seed))
    for i in range(2):
        _jpeg(os.path.join(formats, "d", f"{i}.jpg"), next(seed))
    _image(os.path.join(formats, "c_png", "2.PPM"), "PPM", next(seed))
    _image(os.path.join(formats, "d", "gray.pgm"), "PPM", next(seed), mode="L")
    _image(os.path.join(formats, "d", "x.TIFF"), "TIFF", next(seed))
    _image(os.path.join(formats, "d", "png_named.jpg"), "PNG", next(seed))
    _image(os.path.join(formats, "d", "dir.png", "inner.Png"), "PNG", next(seed), mode="P")
    _image(os.path.join(formats, "d", "anim.gif"), "GIF", next(seed))
    for name in ("notes.txt", "noext"):
        with open(os.path.join(formats, "d", name), "w") as f:
            f.write("not an image\n")
    # Row 3: a dangling link and one leaving the root, among good files.
    links = os.path.join(root, "links", "cls")
    for i in range(5):
        _jpeg(os.path.join(links, f"img{i}.jpg"), next(seed))
    _jpeg(os.path.join(outside, "good.jpg"), next(seed))
    os.symlink("no-such-file.jpg", os.path.join(links, "img1_dangling.jpg"))
    os.symlink(os.path.join(outside, "good.jpg"), os.path.join(links, "img3_escape.jpg"))
    os.symlink("../../../outside/good.jpg", os.path.join(links, "img4_escape_rel.jpg"))
    os.symlink("img0.jpg", os.path.join(links, "img2_inside.jpg"))  # a link that stays
    # Row 4: a class folder that is a link out of the root.
    _jpeg(os.path.join(root, "classlink", "a", "0.jpg"), next(seed))
    _jpeg(os.path.join(outside, "pool", "b", "0.jpg"), next(seed))
    os.symlink(os.path.join(outside, "pool", "b"), os.path.join(root, "classlink", "b"))
    os.symlink(os.path.join(outside, "pool"), os.path.join(root, "pool_link"))
    _age(top)
    yield dict(top=top, root=root, outside=outside)
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def served(module_daemon_factory, data):
    return module_daemon_factory(workers=2, data_root=data["root"])


def _attach_error(stoker, daemon, dataset: str, **kw):
    with pytest.raises(stoker.InvalidRequestError) as e:
        stoker.Client(daemon.socket).attach(dataset, batch_size=1, **SIZE, **kw)
    return e.value


def _drain(session) -> Dict[str, List[int]]:
    """Every batch of a one-epoch session: planned indices, statuses, labels."""
    out: Dict[str, List[int]] = {"planned": [], "status": [], "labels": [], "delivered": []}
    while True:
        try:
            raw = session.next(30000)
        except Exception as e:  # EndOfData ends the epoch
            if type(e).__name__ == "EndOfData":
                return out
            raise
        out["labels"] += raw[0]["label"][0].tolist()
        out["delivered"] += raw[1].tolist()
        out["planned"] += raw[2].tolist()
        out["status"] += raw[3].tolist()
        del raw


def _served_in_order(stoker, daemon, dataset: str, **kw):
    """(info, drained) for one unshuffled epoch of batch 1."""
    s = stoker.Client(daemon.socket).attach(dataset, batch_size=1, shuffle=False, epochs=1,
                                            **SIZE, **kw)
    try:
        return s.info, _drain(s), stoker.Client(daemon.socket).status(include_failures=True)
    finally:
        s.detach()


def _torchvision_error(root: str) -> str:
    from torchvision.datasets import ImageFolder
    with pytest.raises(FileNotFoundError) as e:
        ImageFolder(root)
    return str(e.value)


# ---------------------------------------------------------------------------
# Row 1: classes without an image file


def test_empty_and_hidden_class_folders_fail_attach_naming_torchvision_classes(
        stoker, served, data):
    tv = _torchvision_error(os.path.join(data["root"], "empties"))
    named = re.search(r"Found no valid file for the classes (.*?)\. ", tv).group(1)
    assert named == ".ipynb_checkpoints, dog"
    err = _attach_error(stoker, served, "empties")
    assert err.code == "FAILED_PRECONDITION", err
    assert f"no valid file for the classes {named} (" in str(err)
    assert "allow_empty=True" in str(err)


def test_allow_empty_keeps_every_label_as_torchvision_allow_empty(stoker, served, data):
    root = os.path.join(data["root"], "empties")
    classes, class_to_idx = tv_folder.find_classes(root)
    # torchvision's ImageFolder(allow_empty=True): every class keeps its index,
    # the empty ones have no sample (0.14's make_dataset, given the classes
    # that have files, with the indices of all).
    non_empty = {c: i for c, i in class_to_idx.items()
                 if any(tv_folder.is_image_file(f) for _, _, fs in os.walk(os.path.join(root, c))
                        for f in fs)}
    samples = tv_folder.make_dataset(root, non_empty, extensions=tv_folder.IMG_EXTENSIONS)
    info, got, _ = _served_in_order(stoker, served, "empties", allow_empty=True)
    assert info["class_names"] == classes == [".ipynb_checkpoints", "cat", "dog", "emu"]
    assert info["dataset_size"] == len(samples) == 5
    assert got["status"] == [0] * len(samples)
    assert got["labels"] == [c for _, c in samples] == [1, 1, 1, 3, 3]


# ---------------------------------------------------------------------------
# Row 2: image files stoker cannot read yet


def _formats_samples(data) -> List[Tuple[str, int]]:
    from torchvision.datasets import ImageFolder
    return ImageFolder(os.path.join(data["root"], "formats")).samples


def test_every_image_extension_is_served_in_torchvision_order_and_decoded_by_content(
        stoker, served, data):
    samples = _formats_samples(data)
    assert len(samples) == 21
    info, got, status = _served_in_order(stoker, served, "formats",
                                         skip_unsupported_formats=True)  # accepted, ignored
    assert info["class_names"] == ["a", "b", "c_png", "d"]
    assert info["dataset_size"] == len(samples)
    assert got["planned"] == list(range(len(samples)))
    assert got["status"] == [0] * len(samples), status
    assert got["labels"] == [c for _, c in samples]
    # Status counts the samples by content: the PNG named .jpg is a PNG.
    (session,) = [x for x in status["sessions"] if x["dataset"] == "formats"]
    counts = {f["format"]: int(f.get("samples", 0)) for f in session["formats"]}
    assert counts == {"jpeg": 10, "png": 5, "webp": 1, "tiff": 2, "bmp": 1, "pnm": 2}
    assert all(int(f.get("failed", 0)) == 0 for f in session["formats"])
    assert all(f["decode"]["count"] for f in session["formats"])
    # The very list torchvision makes: paths (the folder's, mixed case kept) and labels.
    s = stoker.Client(served.socket).attach("formats", batch_size=1, **SIZE)
    try:
        paths, labels = s.list_samples(0, 0)
    finally:
        s.detach()
    formats = os.path.join(data["root"], "formats")
    assert [(os.path.join(formats, p), k) for p, k in zip(paths, labels)] == samples


# ---------------------------------------------------------------------------
# Row 3: one dangling or escaping file link


def test_dangling_and_escaping_file_links_are_counted_sample_failures(stoker, served, data):
    from torchvision.datasets import ImageFolder
    root = os.path.join(data["root"], "links")
    samples = ImageFolder(root).samples  # lists the links as files
    names = [os.path.basename(p) for p, _ in samples]
    assert len(samples) == 9
    bad = {names.index("img1_dangling.jpg"): "dangling symlink",
           names.index("img3_escape.jpg"): "leaves the data root",
           names.index("img4_escape_rel.jpg"): "leaves the data root"}
    info, got, status = _served_in_order(stoker, served, "links")
    assert info["dataset_size"] == len(samples)
    assert got["planned"] == list(range(len(samples)))
    for i, s in enumerate(got["status"]):
        assert s == (1 if i in bad else 0), (i, names[i], s)  # bad ones replaced
    assert all(d not in bad for d in got["delivered"])
    assert got["labels"] == [0] * len(samples)
    mine = [s for s in status["sessions"] if s["session_id"] == info["session_id"]]
    assert len(mine) == 1
    failures = {int(f["dataset_index"]): f for f in mine[0]["failures"]}
    assert set(failures) == set(bad)
    for i, why in bad.items():
        assert failures[i]["path"] == os.path.join("links", "cls", names[i])
        assert why in failures[i]["reason"], failures[i]
    # The escaping link was never followed: nothing outside was read.
    assert "good.jpg" not in " ".join(f["reason"] for f in failures.values())


# ---------------------------------------------------------------------------
# Row 4: a class folder, or the dataset, out of the root


HINT = ("--data-root", "Loader(data_root=...)")


def test_a_class_folder_out_of_the_root_names_both_fixes(stoker, served, data):
    err = _attach_error(stoker, served, "classlink")
    assert err.code == "PERMISSION_DENIED"
    assert "'classlink/b' leaves the data root" in str(err)
    assert all(h in str(err) for h in HINT), str(err)
    for dataset in ("pool_link", "../outside/pool", os.path.join(data["outside"], "pool")):
        err = _attach_error(stoker, served, dataset)
        assert err.code == "PERMISSION_DENIED", dataset
        assert all(h in str(err) for h in HINT), str(err)


def test_a_private_daemon_names_data_root_and_data_root_fixes_it(stoker, data, monkeypatch):
    monkeypatch.delenv("STOKER_SOCKET", raising=False)
    ds = os.path.join(data["root"], "classlink")
    with pytest.raises(stoker.InvalidRequestError, match=r"Loader\(data_root=\.\.\.\)"):
        stoker.Loader(ds, batch_size=1, size=24, num_workers=1, epochs=1,
                      data_root=ds).attach()
    with stoker.Loader(ds, batch_size=1, size=24, num_workers=1, epochs=1,
                       data_root=data["top"]) as ld:
        assert sorted(int(y) for _, labels in ld for y in labels) == [0, 1]


# ---------------------------------------------------------------------------
# Row 5: the options in the keys of the daemon's table and of the cache


def test_indexes_made_with_other_options_do_not_mix(stoker, served, daemon_factory, data):
    c = stoker.Client(served.socket)
    lenient = dict(allow_empty=True)
    s = c.attach("empties", batch_size=1, **SIZE, **lenient)
    assert s.info["dataset_size"] == 5
    s.detach()
    # The same folder on the same daemon, without the opt-in: refused, not
    # served from the index made with it.
    assert _attach_error(stoker, served, "empties").code == "FAILED_PRECONDITION"
    s = c.attach("empties", batch_size=1, **SIZE, **lenient)
    assert s.info["dataset_size"] == 5
    s.detach()

    # A second daemon with the first one's index cache: the cached index is
    # used for the same options only.
    cache = os.path.join(served.workdir, "index")
    assert os.listdir(cache)
    other = daemon_factory(workers=1, data_root=data["root"],
                           extra_args=["--index-cache", cache])
    assert _attach_error(stoker, other, "empties").code == "FAILED_PRECONDITION"
    s = stoker.Client(other.socket).attach("empties", batch_size=1, **SIZE, **lenient)
    assert s.info["dataset_size"] == 5
    s.detach()
    assert "loaded the cached index of dataset empties" in other.log()
