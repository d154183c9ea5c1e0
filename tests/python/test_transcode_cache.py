"""stokerd --transcode-cache against a real daemon and real files: the first
epoch writes a baseline copy of each progressive file (and of no baseline
one), the next decodes the copies, and every batch of both is byte-identical
to a daemon without the cache; copies are 0600 in a 0700 folder; a corrupted
or truncated copy is found, counted, deleted and costs nothing; a small budget
holds; an unwritable folder costs only the cache; Status reports each
session's decode paths."""

import collections
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image

from conftest import photo_like, samples_in_order, write_jpeg

BATCH = 4
PIPELINE = {"pipeline": "eval", "size": 48}


def _exif(orientation: int) -> bytes:
    e = Image.Exif()
    e[0x0112] = orientation
    return e.tobytes()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An ImageFolder of 16 JPEGs: 10 progressive (PIL progressive+optimize,
    4:2:0 and 4:4:4; jpegtran -progressive of 4:2:2), 6 baseline (3 with an
    EXIF orientation).
    Returns (path, the progressive files' relative paths)."""
    if shutil.which("jpegtran") is None:
        pytest.skip("jpegtran (libjpeg-turbo-progs) is not installed")
    root = str(tmp_path_factory.mktemp("tc") / "ds")
    rng = np.random.default_rng(17)
    progressive = []
    n = 0
    for k in range(2):
        d = os.path.join(root, f"class_{k}")
        os.makedirs(d)
        for i in range(8):
            h, w = int(rng.integers(120, 330)), int(rng.integers(120, 330))
            img = photo_like(rng, h, w)
            rel = f"class_{k}/img_{i:02d}.jpg"
            p = os.path.join(root, rel)
            kind = n % 5
            if kind in (0, 3):  # PIL: progressive, optimized tables
                sub = 2 if kind == 0 else 0
                Image.fromarray(img).save(p, "JPEG", quality=88, progressive=True, optimize=True,
                                          subsampling=sub)
                progressive.append(rel)
            elif kind == 1:  # jpegtran's default progressive scan script
                base = p + ".base"
                write_jpeg(base, img, subsampling="422", quality=90)
                subprocess.run(["jpegtran", "-progressive", "-copy", "all", "-outfile", p, base],
                               check=True)
                os.unlink(base)
                progressive.append(rel)
            elif kind == 2:  # baseline with an EXIF orientation
                Image.fromarray(img).save(p, "JPEG", quality=85, exif=_exif(6))
            else:
                write_jpeg(p, img, subsampling="420", quality=80)
            n += 1
    return root, sorted(progressive)


def _dataset(daemon, folder):
    root, _ = folder
    dst = os.path.join(daemon.data_root, "ds")
    if not os.path.exists(dst):
        shutil.copytree(root, dst, copy_function=shutil.copy2)
    return "ds"


def _epoch(stoker, daemon, with_status=False, dataset="ds", pipeline=None):
    """One unshuffled epoch's samples as bytes (every sample ok), and the
    session's status just before it detaches (with_status)."""
    seen = []
    samples = samples_in_order(stoker, daemon.socket, dataset, pipeline=pipeline or PIPELINE,
                               before_detach=lambda: seen.append(_status(daemon)))
    out = [pixels.tobytes() for pixels, _ in samples]
    return (out, seen[0]) if with_status else out


def _status(daemon):
    r = daemon.ctl("status", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _cache(daemon):
    """The daemon's TranscodeCacheStatus, counters as ints (absent ones 0)."""
    tc = _status(daemon)["transcode_cache"]
    return collections.defaultdict(int, {k: (int(v) if isinstance(v, str) and v.isdigit() else v)
                                         for k, v in tc.items()})


def _paths(session):
    return {p["path"]: int(p.get("samples", 0)) for p in session["decode_paths"]}


def _entries(cache_dir):
    return sorted(f for f in os.listdir(cache_dir) if f.endswith(".jpg"))


@pytest.fixture(scope="module")
def reference(module_daemon_factory, folder, stoker):
    d = module_daemon_factory(workers=2)
    _dataset(d, folder)
    return _epoch(stoker, d)


def test_copies_of_progressive_files_only_and_same_pixels(daemon_factory, folder, reference,
                                                          stoker, tmp_short):
    _, progressive = folder
    cache_dir = os.path.join(tmp_short, "tc", "cache")
    d = daemon_factory(workers=2, extra_args=["--transcode-cache", cache_dir])
    _dataset(d, folder)

    first, st1 = _epoch(stoker, d, with_status=True)
    assert first == reference
    tc = _cache(d)
    assert tc["writes"] == len(progressive), d.log_tail()
    assert tc["misses"] == len(progressive)
    assert tc["hits"] == 0 and tc["bad_entries"] == 0 and tc["write_failures"] == 0
    assert tc["entries"] == len(progressive)
    entries = _entries(cache_dir)
    assert len(entries) == len(progressive)
    assert tc["bytes"] == sum(os.path.getsize(os.path.join(cache_dir, f)) for f in entries)
    assert os.stat(cache_dir).st_mode & 0o777 == 0o700
    for f in os.listdir(cache_dir):
        assert os.stat(os.path.join(cache_dir, f)).st_mode & 0o777 == 0o600, f
    # The first epoch decoded each fresh copy (re-coding first is the cheaper order).
    assert st1["sessions"][0]["transcode_seconds"] > 0
    paths1 = _paths(st1["sessions"][0])
    assert paths1["baseline"] == len(progressive)
    assert sum(paths1.values()) == 16

    second, st2 = _epoch(stoker, d, with_status=True)
    assert second == reference
    tc = _cache(d)
    assert tc["hits"] == len(progressive)
    assert tc["writes"] == len(progressive)  # nothing written again
    assert tc["hit_rate"] == pytest.approx(0.5)
    paths2 = _paths(st2["sessions"][0])
    assert paths2["baseline"] == len(progressive)
    assert set(paths2) == {"whole", "dc_scans", "baseline", "restart_window"}
    text = d.ctl("status")
    assert text.returncode == 0
    assert "transcode cache" in text.stdout and "hit rate 50.0%" in text.stdout

    # A restarted daemon finds the copies and hits them at once.
    d.stop()
    d2 = daemon_factory(workers=2, data_root=d.data_root,
                        extra_args=["--transcode-cache", cache_dir])
    assert _epoch(stoker, d2) == reference
    tc = _cache(d2)
    assert tc["loaded_entries"] == len(progressive)
    assert tc["hits"] == len(progressive) and tc["misses"] == 0


def test_at_dct_scale_one_eighth_the_original_is_decoded(daemon_factory, stoker, tmp_short):
    """At 1/8 a progressive original's DC scans decode faster than its
    baseline copy: a hit (and the first epoch's fresh copy) is set aside for
    the original's dc_scans path, with the same pixels."""
    cache_dir = os.path.join(tmp_short, "c8")
    ref = daemon_factory(workers=1)
    d = daemon_factory(workers=1, extra_args=["--transcode-cache", cache_dir])
    for daemon in (ref, d):
        root = os.path.join(daemon.data_root, "big", "c")
        os.makedirs(root)
        for i in range(BATCH):  # 1200 rows / an 18-row resize: the planner picks 1/8
            r = np.random.default_rng(100 + i)
            img = Image.fromarray(photo_like(r, 300, 400)).resize((1600, 1200), Image.BICUBIC)
            noisy = np.asarray(img, np.int16) + r.integers(-12, 13, (1200, 1600, 3))
            Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(os.path.join(root, f"{i}.jpg"), "JPEG", quality=90,
                                      progressive=True, optimize=True, subsampling=int(i % 3))
    small = {"pipeline": "eval", "size": 16}
    want = _epoch(stoker, ref, dataset="big", pipeline=small)
    for epoch in range(2):
        got, st = _epoch(stoker, d, with_status=True, dataset="big", pipeline=small)
        assert got == want
        paths = _paths(st["sessions"][0])
        assert paths["dc_scans"] == BATCH and paths["baseline"] == 0, paths
    tc = _cache(d)
    assert tc["writes"] == BATCH and tc["hits"] == BATCH and tc["bad_entries"] == 0


def test_corrupt_and_truncated_copies_are_found_and_deleted(daemon_factory, folder, reference,
                                                            stoker, tmp_short):
    _, progressive = folder
    cache_dir = os.path.join(tmp_short, "cache")
    d = daemon_factory(workers=2, extra_args=["--transcode-cache", cache_dir])
    _dataset(d, folder)
    assert _epoch(stoker, d) == reference
    entries = _entries(cache_dir)
    assert len(entries) == len(progressive)
    flipped, cut = (os.path.join(cache_dir, f) for f in entries[:2])
    with open(flipped, "r+b") as f:  # one payload byte, past the 64-byte header
        f.seek(os.path.getsize(flipped) // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x01]))
    os.truncate(cut, os.path.getsize(cut) - 100)

    assert _epoch(stoker, d) == reference
    tc = _cache(d)
    assert tc["bad_entries"] == 2
    assert tc["hits"] == len(progressive) - 2
    assert not os.path.exists(flipped) and not os.path.exists(cut)
    assert tc["entries"] == len(progressive) - 2
    # The next epoch writes them again.
    assert _epoch(stoker, d) == reference
    assert len(_entries(cache_dir)) == len(progressive)


def test_small_budget_holds(daemon_factory, folder, reference, stoker, tmp_short):
    _, progressive = folder
    cache_dir = os.path.join(tmp_short, "cache")
    d = daemon_factory(workers=2, extra_args=["--transcode-cache", cache_dir])
    _dataset(d, folder)
    assert _epoch(stoker, d) == reference
    total = _cache(d)["bytes"]
    d.stop()
    # Room for about half the copies: start-up evicts the rest, and a run
    # keeps within it.
    budget = total / 2 / 1048576.0
    d2 = daemon_factory(workers=2, data_root=d.data_root,
                        extra_args=["--transcode-cache", cache_dir,
                                    "--transcode-cache-mb", f"{budget:.6f}"])
    tc = _cache(d2)
    assert tc["evictions"] > 0 and tc["bytes"] <= tc["budget_bytes"]
    for _ in range(2):
        assert _epoch(stoker, d2) == reference
        tc = _cache(d2)
        assert 0 < tc["bytes"] <= tc["budget_bytes"]
        entries = _entries(cache_dir)
        assert len(entries) == tc["entries"] < len(progressive)
        assert sum(os.path.getsize(os.path.join(cache_dir, f)) for f in entries) == tc["bytes"]
    assert tc["hits"] > 0


def test_unwritable_cache_costs_only_the_cache(daemon_factory, folder, reference, stoker,
                                               tmp_short):
    _, progressive = folder
    # A folder removed under the running daemon: no write can succeed there,
    # even for root (whom a read-only mode would not stop).
    cache_dir = os.path.join(tmp_short, "gone")
    d = daemon_factory(workers=2, extra_args=["--transcode-cache", cache_dir])
    _dataset(d, folder)
    os.rmdir(cache_dir)
    assert _epoch(stoker, d) == reference
    tc = _cache(d)
    # The first failure turns writes off (the ones already in flight fail
    # too): the other files are decoded from their originals, not re-coded.
    assert 1 <= tc["write_failures"] < len(progressive) and tc["writes"] == 0
    assert tc["write_failures"] + tc["writes_refused"] == tc["misses"] == len(progressive)
    assert tc["write_pauses"] == 1
    assert tc["writes_paused_reason"] == "No such file or directory (ENOENT)"
    assert tc["entries"] == 0
    if os.geteuid() != 0:
        ro = os.path.join(tmp_short, "ro")
        os.mkdir(ro, 0o500)
        d2 = daemon_factory(workers=2, data_root=d.data_root,
                            extra_args=["--transcode-cache", ro])
        assert _epoch(stoker, d2) == reference
        assert _cache(d2)["write_failures"] == len(progressive)


def test_a_full_disk_turns_writes_off_for_a_while_never_slower_than_no_cache(
        daemon_factory, folder, reference, stoker, tmp_short):
    """A cache folder on a file system with room for a few copies at most: the
    first ENOSPC turns writes off (logged once, with the reason, named in the
    status), and no later epoch re-codes a file it cannot keep."""
    _, progressive = folder
    mnt = os.path.join(tmp_short, "small")
    os.mkdir(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k,mode=0700", "tmpfs", mnt],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        cache_dir = os.path.join(mnt, "cache")
        # A budget the disk cannot hold (a disk others fill up after start-up;
        # without --transcode-cache-mb the budget is a quarter of its free space).
        d = daemon_factory(workers=2, extra_args=["--transcode-cache", cache_dir,
                                                  "--transcode-cache-mb", "64"])
        _dataset(d, folder)
        assert _epoch(stoker, d) == reference
        first = _cache(d)
        assert first["write_pauses"] == 1 and first["write_failures"] >= 1
        assert first["writes_paused_reason"] == "No space left on device (ENOSPC)"
        assert 0 < float(first["writes_resume_in_seconds"]) <= 60
        assert first["misses"] == len(progressive)
        for _ in range(2):
            assert _epoch(stoker, d) == reference
        later = _cache(d)
        # Writes stayed off: no more failures, and no file was re-coded again
        # (the re-coding time did not grow: each later miss decoded the original).
        assert later["write_failures"] == first["write_failures"]
        assert float(later["transcode_seconds"]) == float(first["transcode_seconds"])
        assert later["misses"] - first["misses"] == 2 * (len(progressive) - first["entries"])
        log = d.log()
        assert log.count("writing a copy failed") == 1, d.log_tail()
        assert "No space left on device (ENOSPC)" in log
        st = d.ctl("status").stdout
        assert "transcode cache writes paused: No space left on device (ENOSPC)" in st
    finally:
        for dd in list(daemon_factory.daemons):
            dd.stop()
        subprocess.run(["umount", mnt], check=False)


def test_the_cache_is_on_by_default_in_the_users_cache_folder(stoker, folder, monkeypatch,
                                                               tmp_short):
    """stokerd's default (and so the private daemon's): HOME/.cache/stoker/
    transcode, within 4 GiB and a quarter of its file system's free space;
    STOKER_TRANSCODE_CACHE=off (stokerd --transcode-cache off) refuses it."""
    pytest.importorskip("torch")
    root, progressive = folder
    home = os.path.join(tmp_short, "home")
    os.mkdir(home)
    monkeypatch.delenv("STOKER_SOCKET", raising=False)
    monkeypatch.delenv("STOKER_TRANSCODE_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", home)
    ld = stoker.Loader(root, batch_size=BATCH, pipeline="eval", size=48, num_workers=1,
                       epochs=1, shuffle=False)
    try:
        assert sum(len(labels) for _, labels in ld) == 16
        tc = stoker.Client(ld.socket).status()["transcode_cache"]
    finally:
        ld.close()
    cache_dir = os.path.join(home, ".cache", "stoker", "transcode")
    assert tc["dir"] == cache_dir
    free = os.statvfs(cache_dir).f_bavail * os.statvfs(cache_dir).f_frsize
    assert 0 < int(tc["budget_bytes"]) <= min(4 << 30, free // 4 + (64 << 20))
    assert len(_entries(cache_dir)) == len(progressive)
    monkeypatch.setenv("STOKER_TRANSCODE_CACHE", "off")
    with stoker.Loader(root, batch_size=BATCH, pipeline="eval", size=48, num_workers=1,
                       epochs=1) as ld:
        ld.attach()
        assert "transcode_cache" not in stoker.Client(ld.socket).status()


def test_private_daemon_keeps_a_cache_when_asked(stoker, folder, monkeypatch, tmp_short):
    pytest.importorskip("torch")
    root, progressive = folder
    cache_dir = os.path.join(tmp_short, "private-cache")
    monkeypatch.delenv("STOKER_SOCKET", raising=False)
    monkeypatch.delenv("STOKERD", raising=False)
    monkeypatch.setenv("STOKER_TRANSCODE_CACHE", cache_dir)
    ld = stoker.Loader(root, batch_size=BATCH, pipeline="eval", size=48, num_workers=1,
                       epochs=1, shuffle=False)
    try:
        assert sum(len(labels) for _, labels in ld) == 16
    finally:
        ld.close()
    assert len(_entries(cache_dir)) == len(progressive)


def test_one_daemon_per_cache_folder(daemon_factory, tmp_short):
    """A second daemon on the same folder runs without the cache (it would
    delete the first one's temporaries and keep a budget of its own)."""
    cache_dir = os.path.join(tmp_short, "shared-cache")
    a = daemon_factory(workers=1, extra_args=["--transcode-cache", cache_dir])
    b = daemon_factory(workers=1, extra_args=["--transcode-cache", cache_dir])
    assert "transcode_cache" in _status(a)
    assert "transcode_cache" not in _status(b)
    assert "in use by another stokerd" in b.log()
    a.stop()
    c = daemon_factory(workers=1, extra_args=["--transcode-cache", cache_dir])
    assert "transcode_cache" in _status(c)  # the lock went with the first daemon


def test_a_file_the_transcoder_refuses_costs_one_try(daemon_factory, stoker, tmp_short):
    """A truncated progressive file fails as it does without the cache, is
    not re-coded again by the worker next epoch, and leaves no bad entry."""
    cache_dir = os.path.join(tmp_short, "refused")
    d = daemon_factory(workers=1, extra_args=["--transcode-cache", cache_dir])
    root = os.path.join(d.data_root, "cut", "c")
    os.makedirs(root)
    rng = np.random.default_rng(3)
    for i in range(BATCH):
        p = os.path.join(root, f"{i}.jpg")
        Image.fromarray(photo_like(rng, 200, 260)).save(p, "JPEG", quality=90, progressive=True,
                                                      optimize=True)
        if i == 0:
            os.truncate(p, os.path.getsize(p) // 2)
    for epoch in range(2):
        s = stoker.Client(d.socket).attach("cut", batch_size=BATCH, shuffle=False, epochs=1,
                                           pipeline=PIPELINE)
        try:
            raw = s.next(30000)
            assert raw[3].tolist()[0] != 0 and raw[3].tolist()[1:] == [0] * (BATCH - 1), raw[3]
            session = _status(d)["sessions"][0]
        finally:
            s.detach()
        spent = float(session.get("transcode_seconds", 0))
        if epoch == 0:
            assert spent > 0  # the three good files, and one try on the cut one
        else:
            assert spent == 0, session  # copies hit; the cut file is not tried again
    tc = _cache(d)
    # Hits: the copies, and those of the samples drawn to replace the cut one.
    assert tc["writes"] == BATCH - 1 and tc["bad_entries"] == 0 and tc["hits"] >= BATCH - 1
