"""File and folder names that are not UTF-8 (issue 34): a Latin-1 class
folder, a file from another system, a manifest or tar member naming one.
torchvision reads them (os.listdir gives them as surrogate-escaped str);
stoker must attach, list, report failures and show status for any name the
file system holds, and give back the same str, so os.fsencode recovers the
bytes.
"""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np
import pytest
from PIL import Image

from conftest import make_dataset

CAFE = b"caf\xe9"                # Latin-1 "café": not UTF-8
ODD = b"img_\xff\xfe_photo.jpg"  # bytes no encoding makes
BROKEN = b"broken_\xe9.jpg"      # not UTF-8, and not an image


def _jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    top = tmp_path_factory.mktemp("names")
    folder = os.path.join(os.fsencode(str(top)), b"set")
    make_dataset(os.fsdecode(folder), classes=2, per_class=3, sizes=(40, 60), seed=4)
    os.makedirs(os.path.join(folder, CAFE))
    for i in range(3):
        with open(os.path.join(folder, CAFE, b"%d_" % i + ODD), "wb") as f:
            f.write(_jpeg(i))
    with open(os.path.join(folder, b"class_00", BROKEN), "wb") as f:
        f.write(b"not a jpeg at all")
    # A manifest naming the same files (bytes, one per line).
    lines = [b"#columns: image label"]
    for cls, label in ((b"class_00", 0), (CAFE, 1)):
        for name in sorted(os.listdir(os.path.join(folder, cls))):
            lines.append(b"set/" + cls + b"/" + name + b"\t%d" % label)
    with open(os.path.join(os.fsencode(str(top)), b"list.tsv"), "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    # A WebDataset shard whose keys are such names.
    with tarfile.open(os.path.join(str(top), "shard-0000.tar"), "w",
                      format=tarfile.GNU_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tar:
        for i in range(4):
            key = os.fsdecode(b"k%d_" % i + CAFE)
            for ext, data in ((".jpg", _jpeg(10 + i)), (".cls", b"%d\n" % (i % 2))):
                info = tarfile.TarInfo(key + ext)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(top)


@pytest.fixture(scope="module")
def served(module_daemon_factory, root):
    return module_daemon_factory(workers=2, data_root=root)


def test_an_image_folder_with_such_names_attaches_lists_and_reports(stoker, served, root):
    tv = pytest.importorskip("torchvision.datasets")
    folder = os.path.join(root, "set")
    want = tv.ImageFolder(folder)
    with stoker.Loader(folder, 4, False, socket=served.socket, size=32, epochs=1,
                       timeout_ms=30000) as ld:
        assert ld.class_names == want.classes
        assert sorted(os.fsencode(c) for c in ld.class_names) == [CAFE, b"class_00", b"class_01"]
        # ImageFolder's samples, names and all (the broken file is listed too).
        assert ld.dataset.samples == want.samples
        n = sum(len(y) for _, y in ld)
        assert n == len(want.samples)
        st = stoker.Client(served.socket).status(include_failures=True)
    (s,) = [x for x in st["sessions"] if "set" in x["dataset"]]
    (failure,) = s["failures"]
    # The failing file's exact name: os.fsencode gives its bytes back.
    assert os.fsencode(failure["path"]) == b"set/class_00/" + BROKEN
    # stokerctl shows it too (its bytes escaped), and its JSON keeps them.
    out = served.ctl("status", "--failures")
    assert out.returncode == 0, out.stderr
    assert "broken_\\xe9.jpg" in out.stdout


def test_a_manifest_and_a_shard_naming_such_files(stoker, served, root):
    with stoker.Loader("list.tsv", 2, False, socket=served.socket, size=32, epochs=1,
                       timeout_ms=30000) as ld:
        samples = ld.dataset.samples
        assert any(os.fsencode(p).endswith(b"/" + CAFE + b"/0_" + ODD) for p, _ in samples)
        assert sum(len(y) for _, y in ld) == len(samples)
    with stoker.Loader("shard-{0000..0000}.tar", 2, False, socket=served.socket, size=32,
                       epochs=1, timeout_ms=30000) as ld:
        paths = [os.fsencode(p) for p, _ in ld.dataset.samples]
        assert len(paths) == 4 and all(CAFE in p for p in paths)
        labels = sorted(int(v) for _, y in ld for v in y)
        assert labels == [0, 0, 1, 1]


def test_a_dataset_path_that_is_not_utf8(stoker, served, root):
    # The dataset's own folder named with such bytes: attach, status, and the
    # exact name back from it.
    folder = os.path.join(os.fsencode(root), b"d\xe9j\xe0")
    if not os.path.exists(folder):
        make_dataset(os.fsdecode(folder), classes=2, per_class=2, sizes=(40, 50), seed=6)
    with stoker.Loader(os.fsdecode(folder), 2, False, socket=served.socket, size=32, epochs=1,
                       timeout_ms=30000) as ld:
        assert sum(len(y) for _, y in ld) == 4
        st = stoker.Client(served.socket).status()
        assert any(os.fsencode(s["dataset"]).endswith(b"d\xe9j\xe0") for s in st["sessions"]), \
            [s["dataset"] for s in st["sessions"]]
