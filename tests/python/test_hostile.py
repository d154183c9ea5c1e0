"""Nothing a dataset can hold stops training, and nothing is lost (issue 4).

Against the real daemon (conftest.py), with files made by hostile_corpus.py:
  - each hostile file alone fails as one sample, named, with a clear reason;
  - valid but unusual codings decode exactly as PIL decodes them;
  - EXIF orientation is applied (and not, when asked);
  - hostile files mixed into a dataset of good ones: two shuffled epochs under
    policy 'skip' deliver every planned sample exactly once (ok or replaced),
    the daemon's status names every bad file and no good one, and its log
    names each failure once; under policy 'error' each bad file raises
    SampleError naming it, and the session goes on.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from typing import Dict, List

import numpy as np
import pytest
from PIL import Image, ImageOps

import hostile_corpus as hc
from conftest import imagefolder_samples, make_dataset, samples_in_order

torch = pytest.importorskip("torch")

MAX_FILE_BYTES = 3_000_000  # the daemon's --max-file-bytes in this module
MIX_EPOCHS = 2
ESCAPE = "h_escape.jpg"  # a symlink leaving the data root: a sample that fails


@pytest.fixture(scope="module")
def corpus(build_dir):
    """A data root with:
        mixed/      good JPEGs (class_00..02), the hostile files (in class_01),
                    the unusual valid files (in class_02), a directory named x.jpg
        escape/c/   the symlink that leaves the data root alone (an ImageFolder
                    whose every sample leaves the root is refused at attach)
        unusual/c/  the unusual valid files alone
        exif/c/     one file per EXIF orientation
        one_<name>.txt  a manifest listing one hostile file of mixed/
    """
    top = tempfile.mkdtemp(prefix="stk", dir="/tmp")
    root = os.path.join(top, "data")
    mixed = os.path.join(root, "mixed")
    make_dataset(mixed, classes=3, per_class=14, sizes=(40, 140), seed=21)
    hostile = hc.write_hostile(os.path.join(mixed, "class_01"), os.path.join(top, "outside"),
                               max_file_bytes=MAX_FILE_BYTES)
    unusual = hc.write_unusual(os.path.join(mixed, "class_02"))
    hc.write_unusual(os.path.join(root, "unusual", "c"))
    exif = hc.write_exif_rotated(os.path.join(root, "exif", "c"))
    # ImageFolder walks a directory named like a JPEG; it is not a sample.
    os.makedirs(os.path.join(mixed, "class_00", "x.jpg"))
    with open(os.path.join(mixed, "class_00", "x.jpg", "notes.txt"), "w") as f:
        f.write("not an image\n")
    os.makedirs(os.path.join(root, "escape", "c"))
    os.rename(os.path.join(mixed, "class_01", ESCAPE), os.path.join(root, "escape", "c", ESCAPE))
    for h in hostile:
        if h.skip is None:
            where = "escape/c" if h.name == ESCAPE else "mixed/class_01"
            with open(os.path.join(root, f"one_{h.name}.txt"), "w") as f:
                f.write(f"{where}/{h.name}\t0\n")
    samples = imagefolder_samples(mixed)  # torchvision's view, before any deletion
    yield dict(top=top, root=root, hostile={h.name: h for h in hostile},
               unusual={u.name: u for u in unusual}, exif=exif, samples=samples)
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def served(module_daemon_factory, corpus):
    return module_daemon_factory(workers=2, data_root=corpus["root"],
                                 extra_args=["--max-file-bytes", str(MAX_FILE_BYTES)])


def session_status(stoker, daemon, client_name: str) -> Dict:
    st = stoker.Client(daemon.socket).status(include_failures=True)
    mine = [s for s in st.get("sessions", []) if s["client_name"] == client_name]
    assert len(mine) == 1, [s["client_name"] for s in st.get("sessions", [])]
    return mine[0]


def pil_rgb(path: str, exif: bool = True) -> np.ndarray:
    with Image.open(path) as im:
        if exif:
            im = ImageOps.exif_transpose(im)
        return np.asarray(im.convert("RGB"))


def decode_all(stoker, daemon, dataset: str, **kw) -> List[np.ndarray]:
    """Every sample of `dataset` through the decode pipeline (batch 1, in order)."""
    return [img for img, _ in samples_in_order(stoker, daemon.socket, dataset,
                                               pipeline=dict(pipeline="decode", **kw))]


# ---------------------------------------------------------------------------
# Each hostile file alone


@pytest.mark.parametrize("name", [n for n in hc.HOSTILE_NAMES if n != "h_deleted.jpg"])
def test_a_hostile_file_fails_alone_naming_the_file_and_why(stoker, served, corpus, name):
    h = corpus["hostile"][name]
    if h.skip:
        pytest.skip(f"{h.what}: {h.skip}")
    client_name = f"one-{name}"
    with stoker.Loader(f"one_{name}.txt", socket=served.socket, batch_size=1, size=24,
                       shuffle=False, epochs=1, failure_policy="error", timeout_ms=60000,
                       client_name=client_name) as loader:
        it = iter(loader)
        with pytest.raises(stoker.SampleError) as ei:
            next(it)
        msg = str(ei.value)
        assert name in msg, msg
        assert re.search(h.reason, msg, re.I), f"{h.what}: reason {msg!r} !~ {h.reason!r}"
        (f,) = session_status(stoker, served, client_name)["failures"]
        assert f["path"].endswith(name) and re.search(h.reason, f["reason"], re.I), f
        with pytest.raises(StopIteration):
            next(it)
    assert stoker.Client(served.socket).health()


def test_a_file_deleted_after_indexing_fails_as_one_sample(stoker, daemon_factory, tmp_short):
    root = os.path.join(tmp_short, "data")
    files = make_dataset(os.path.join(root, "ds"), classes=1, per_class=6, sizes=(40, 80), seed=3)
    d = daemon_factory(workers=1, data_root=root)
    # Two ring slots: the third batch (samples 4, 5) is not started, nor read
    # ahead, until the first is consumed, after the deletion.
    with stoker.Loader("ds", socket=d.socket, batch_size=2, size=24, shuffle=False, epochs=1,
                       timeout_ms=30000, client_name="deleted", ring_slots=2) as loader:
        loader.attach()  # indexes the folder
        os.unlink(files[4][0])
        views = [(v.planned_indices.tolist(), v.statuses.tolist()) for v in loader.iter_batches()]
        (f,) = session_status(stoker, d, "deleted")["failures"]
    assert [p for v in views for p in v[0]] == list(range(6))
    assert [s for v in views for s in v[1]] == [0, 0, 0, 0, 1, 0]
    assert f["path"] == os.path.relpath(files[4][0], root) and "No such file" in f["reason"], f


# ---------------------------------------------------------------------------
# Valid but unusual


@pytest.fixture(scope="module")
def unusual_decoded(stoker, served, corpus):
    names = sorted(n for n, u in corpus["unusual"].items() if u.skip is None)
    got = decode_all(stoker, served, "unusual")
    assert len(got) == len(names)
    return dict(zip(names, got))


@pytest.mark.parametrize("name", hc.UNUSUAL_NAMES)
def test_an_unusual_valid_jpeg_decodes_exactly_as_pil(corpus, unusual_decoded, name):
    u = corpus["unusual"][name]
    if u.skip:
        pytest.skip(f"{u.what}: {u.skip}")
    want = pil_rgb(os.path.join(corpus["root"], "unusual", "c", name))
    got = unusual_decoded[name]
    assert got.shape == want.shape, f"{u.what}: {got.shape} != {want.shape}"
    diff = np.abs(got.astype(int) - want.astype(int))
    assert diff.max() == 0, f"{u.what}: max |diff| {diff.max()}, mean {diff.mean():.3f}"


def test_exif_orientation_is_applied_only_when_asked(stoker, served, corpus):
    # Default: PIL.Image.open(f).convert("RGB"), as torchvision's ImageFolder reads it.
    paths = [os.path.join(corpus["root"], "exif", "c", n) for n in sorted(corpus["exif"])]
    applied = decode_all(stoker, served, "exif", apply_exif_orientation=True)
    ignored = decode_all(stoker, served, "exif")
    for p, a, i in zip(paths, applied, ignored):
        want = pil_rgb(p)
        assert a.shape == want.shape and np.array_equal(a, want), p
        raw = pil_rgb(p, exif=False)
        assert i.shape == raw.shape and np.array_equal(i, raw), p
    assert applied[5].shape == (58, 37, 3) and ignored[5].shape == (37, 58, 3)  # orientation 6


# ---------------------------------------------------------------------------
# Hostile files in a dataset of good ones


@pytest.fixture(scope="module")
def mixed(stoker, served, corpus):
    """The mixed dataset as the daemon indexes it.

    A file deleted after indexing (h_deleted.jpg) changes its folder, so the
    daemon indexes the folder again at the next attach and the file is no
    longer a sample: that case has its own test, with the deletion during a
    session. Here it is deleted first."""
    hostile = [h for h in corpus["hostile"].values() if h.skip is None and h.name != ESCAPE]
    hc.arm_after_index(hostile)
    hostile = [h for h in hostile if h.after_index is None]
    samples = [(p, c) for p, c in corpus["samples"] if os.path.lexists(p)]
    paths = [os.path.relpath(p, corpus["root"]) for p, _ in samples]
    s = stoker.Client(served.socket).attach("mixed", batch_size=4, pipeline={"size": 24},
                                            epochs=1)
    assert s.info["dataset_size"] == len(samples)
    s.detach()
    by_name = {os.path.basename(p): i for i, p in enumerate(paths)}
    bad = {by_name[h.name]: h for h in hostile}
    assert len(bad) == len(hostile)
    return dict(paths=paths, bad=bad, good=set(range(len(paths))) - set(bad))


def test_an_image_folder_with_a_symlink_leaving_the_root_is_refused_at_attach(stoker, served):
    with pytest.raises(stoker.InvalidRequestError, match=f"{ESCAPE}.*leaves the data root"):
        stoker.Client(served.socket).attach("escape", batch_size=1, pipeline={"size": 24})
    assert stoker.Client(served.socket).health()


def test_a_directory_named_jpg_is_not_a_sample(corpus, mixed):
    assert not any(p.endswith("x.jpg") or "/x.jpg/" in p for p in mixed["paths"])
    assert len(mixed["paths"]) == 3 * 14 + len(mixed["bad"]) + sum(
        1 for u in corpus["unusual"].values() if u.skip is None)


def test_two_epochs_under_skip_lose_nothing_and_name_every_bad_file(stoker, served, mixed):
    n, bad, good = len(mixed["paths"]), mixed["bad"], mixed["good"]
    log_before = len(served.log())
    with stoker.Loader("mixed", socket=served.socket, batch_size=8, size=32, shuffle=True,
                       seed=3, epochs=MIX_EPOCHS, ring_slots=2, timeout_ms=60000,
                       client_name="hostile-mix") as loader:
        for epoch in range(MIX_EPOCHS):
            planned, status, delivered = [], [], []
            for v in loader.iter_batches():
                assert v.epoch == epoch
                assert tuple(v.images.shape[1:]) == (32, 32, 3)
                planned += v.planned_indices.tolist()
                status += v.statuses.tolist()
                delivered += v.indices.tolist()
            assert sorted(planned) == list(range(n)), f"epoch {epoch}: planned != the shard"
            ok = {p for p, s in zip(planned, status) if s == 0}
            replaced = {p for p, s in zip(planned, status) if s == 1}
            assert status.count(2) == 0, "a sample failed without replacement under 'skip'"
            assert ok == good and replaced == set(bad), (
                f"epoch {epoch}: ok-but-bad {sorted(ok & set(bad))}, "
                f"replaced-but-good {sorted(replaced & good)}")
            assert len(ok) + len(replaced) == n
            for p, s, d in zip(planned, status, delivered):
                assert (d == p) if s == 0 else (d != p and d in good), (p, s, d)
        sess = session_status(stoker, served, "hostile-mix")
    failures = {os.path.basename(f["path"]): f for f in sess["failures"]}
    names = {h.name for h in bad.values()}
    assert set(failures) == names, (
        f"missing {sorted(names - set(failures))}, good files named "
        f"{sorted(set(failures) - names)}")
    for h in bad.values():
        f = failures[h.name]
        assert re.search(h.reason, f["reason"], re.I), f"{h.what}: {f['reason']!r}"
        # Once per epoch, where it was planned (tries as another's
        # replacement count in replacement_failures, not here).
        assert int(f["count"]) == MIX_EPOCHS, (h.name, f["count"])
    assert int(sess["samples_replaced"]) == MIX_EPOCHS * len(bad)
    assert int(sess["samples_failed"]) == MIX_EPOCHS * len(bad)  # what the trainer saw
    # Failures by the files' content: each format's count is the worker's
    # tries of its files (a bad file can also be tried as another's
    # replacement, before it is known bad); a file
    # that could not be read (a dangling link, a FIFO, an empty one, one over
    # --max-file-bytes) has no format.
    failed = {f["format"]: int(f.get("failed", 0)) for f in sess["formats"]}
    expect = {"unknown": ("h_random.jpg", "h_gif.png", "h_text.jpg"),
              "png": ("h_png_trunc.png", "h_png_bad_crc.png", "h_png_huge_dims.png"),
              "webp": ("h_webp_trunc.webp", "h_webp_corrupt.webp"),
              "tiff": ("h_tiff_trunc.tif", "h_tiff_strip_past_end.tif", "h_tiff_huge_dims.tif"),
              "bmp": ("h_bmp_trunc.bmp",), "pnm": ("h_ppm_trunc.ppm",)}
    for fmt, files in expect.items():
        tries = sum(int(failures[name]["count"]) for name in files)
        assert tries == MIX_EPOCHS * len(files) and failed.get(fmt, 0) >= tries, (fmt, failed)
    unread = ("h_dangling.jpg", "h_empty.jpg", "h_fifo.jpg", "h_oversize.jpg", "h_escape.jpg",
              "h_unreadable.jpg", "h_deleted.jpg")
    jpeg_tries = sum(int(f["count"]) for n, f in failures.items()
                     if n not in unread and not any(n in v for v in expect.values()))
    assert failed.get("jpeg", 0) >= jpeg_tries, (failed, jpeg_tries)
    assert (sum(failed.values()) - sum(int(f["count"]) for n, f in failures.items()
                                       if n not in unread)
            <= int(sess["replacement_failures"])), (failed, sess["replacement_failures"])
    decoded = {f["format"]: int(f.get("samples", 0)) for f in sess["formats"]}
    assert decoded.get("png", 0) >= MIX_EPOCHS  # u_png_named.jpg, at least
    assert decoded.get("unknown", 0) == 0
    # The log names each failure once, for the session.
    log = served.log()[log_before:]
    sid = sess["session_id"]
    for i, h in bad.items():
        lines = [ln for ln in log.splitlines()
                 if f"session {sid}: sample {i} (" in ln and "failed" in ln]
        assert len(lines) == 1, f"{h.name}: logged {len(lines)} times"
        assert h.name in lines[0]
    for i in good:
        assert f"session {sid}: sample {i} (" not in log


def test_each_bad_file_raises_sample_error_under_error_policy(stoker, served, mixed):
    n, bad = len(mixed["paths"]), mixed["bad"]
    named, got = [], []
    with stoker.Loader("mixed", socket=served.socket, batch_size=1, size=24, shuffle=False,
                       epochs=1, failure_policy="error", timeout_ms=60000) as loader:
        it = loader.iter_batches()
        for _ in range(len(loader)):
            try:
                got.append(int(next(it).indices[0]))
            except stoker.SampleError as e:
                hits = [h for h in bad.values() if h.name in str(e)]
                assert len(hits) == 1, str(e)
                assert re.search(hits[0].reason, str(e), re.I), str(e)
                named.append(hits[0].name)
        with pytest.raises(StopIteration):
            next(it)
    assert sorted(named) == sorted(h.name for h in bad.values())
    assert got == sorted(set(range(n)) - set(bad))
    assert stoker.Client(served.socket).health()
