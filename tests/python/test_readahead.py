"""Readahead: stokerd's I/O threads read the next samples' files before the
workers need them, within a bound on bytes read ahead.

The page cache is dropped for the dataset's files (posix_fadvise DONTNEED),
and the daemon's test-only --simulate-read-latency-us makes every read of
uncached data sleep first, as a slow disk would. What is asserted is what
readahead did (files read, how many were cold, the bytes it held), never
how fast anything was: bench/run.sh measures that.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import contextlib
import time

import pytest

from conftest import make_dataset

pytest.importorskip("torch")


def resident_pages(path, pages=None):
    """How many of the file's pages (of its first `pages`, if given) are in
    the page cache, by mincore(2) on a mapping never touched (so, unlike a
    read, it starts no readahead), as the daemon's own probe asks."""
    size = os.path.getsize(path)
    if pages is not None:
        size = min(size, pages * mmap.PAGESIZE)
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = ctypes.create_string_buffer(pages)
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return sum(b & 1 for b in vec.raw)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def evict(root):
    """Drops the files under `root` from the page cache, and checks that it
    did (skips the test where the file system cannot: tmpfs, some overlays).
    DONTNEED leaves a page it cannot drop at once (just written, or held in
    another CPU's LRU batch), so it is asked again until none is left."""
    paths = [os.path.join(d, f) for d, _, names in os.walk(root) for f in names]
    paths = [p for p in paths if os.path.isfile(p)]
    left = paths
    for attempt in range(20):
        for path in left:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError as e:
                pytest.skip(f"cannot drop {root} from the page cache here: {e}")
            finally:
                os.close(fd)
        left = [p for p in left if resident_pages(p) > 0]
        if not left:
            return
        time.sleep(0.05 * (attempt + 1))
    pytest.skip(f"{len(left)} of {len(paths)} files under {root} stay in the page cache")


def cached(path):
    """Whether the file's first page is in the page cache."""
    return resident_pages(path, pages=1) > 0


@contextlib.contextmanager
def pinned(paths):
    """Maps each file and mlock(2)s it, so that the host's memory pressure (a
    memory cgroup full of a parallel build's page cache) cannot evict a page
    between the test's check and the daemon's. Yields whether every file is
    pinned (RLIMIT_MEMLOCK may be too small)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    maps = []
    all_pinned = True
    try:
        for path in paths:
            size = os.path.getsize(path)
            fd = os.open(path, os.O_RDONLY)
            try:
                addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            finally:
                os.close(fd)
            if addr in (None, ctypes.c_void_p(-1).value):
                all_pinned = False
                continue
            maps.append((addr, size))
            if libc.mlock(addr, size) != 0:
                all_pinned = False
        yield all_pinned
    finally:
        for addr, size in maps:
            libc.munmap(addr, size)  # unlocks too


def status(d):
    r = d.ctl("status", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def cold_set(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ra"))
    files = make_dataset(os.path.join(root, "set"), classes=2, per_class=24, sizes=(200, 400),
                         seed=81)
    return root, files


def test_readahead_reads_cold_files_ahead_within_its_budget(stoker, daemon_factory, cold_set):
    root, files = cold_set
    evict(root)
    biggest = max(os.path.getsize(p) for p, _ in files)
    d = daemon_factory(workers=2, data_root=root,
                       extra_args=["--readahead-mb", "1", "--io-threads", "3",
                                   "--simulate-read-latency-us", "3000"])
    with stoker.Loader("set", socket=d.socket, batch_size=8, size=32, epochs=1, seed=5,
                       ring_slots=3) as ld:
        n = sum(len(y) for _, y in ld)
    assert n == 48
    ra = status(d)["readahead"]
    print("readahead status:", ra)
    assert ra["threads"] == 3 and int(ra["budget_bytes"]) == 1 << 20
    files_read, late = int(ra["files_read"]), int(ra.get("late", 0))
    # Every sample was either read ahead, found cached (a worker read it
    # first), or dispatched before its turn came.
    assert files_read + late + int(ra.get("files_cached", 0)) >= 48 and files_read > 0
    # The files were cold, and readahead is what found them so.
    assert int(ra["cold_files"]) > 0
    # The bound: what it held never passed the budget (plus the one file a
    # thread may read into an otherwise empty window).
    assert 0 < int(ra["window_bytes_max"]) <= (1 << 20) + biggest
    assert int(ra.get("window_bytes", 0)) == 0  # nothing left once all was dispatched


def test_readahead_leaves_a_cached_dataset_alone(stoker, daemon_factory, cold_set):
    """On a warm dataset readahead reads nothing (it checks each input's
    first and last page), and holds nothing."""
    root, files = cold_set
    evict(root)
    for p, _ in files:
        with open(p, "rb") as f:
            f.read()
    d = daemon_factory(workers=2, data_root=root, extra_args=["--io-threads", "3"])
    with pinned([p for p, _ in files]) as all_pinned:
        assert all(cached(p) for p, _ in files)
        with stoker.Loader("set", socket=d.socket, batch_size=8, size=32, epochs=1, seed=6,
                           ring_slots=3) as ld:
            assert sum(len(y) for _, y in ld) == 48
    ra = status(d)["readahead"]
    print("readahead status:", ra, "pinned:", all_pinned)
    if all_pinned:
        assert int(ra.get("files_read", 0)) == 0 and int(ra.get("bytes_read", 0)) == 0
        assert int(ra.get("cold_files", 0)) == 0 and int(ra.get("window_bytes_max", 0)) == 0
    else:
        # Unpinned, the host may evict a page meanwhile: then readahead may
        # read that file, and only because it found it cold.
        assert int(ra.get("files_read", 0)) == int(ra.get("cold_files", 0)) <= 4
    assert int(ra["files_cached"]) + int(ra.get("late", 0)) == 48 and int(ra["files_cached"]) > 0


def test_readahead_off(stoker, daemon_factory, cold_set):
    root, _ = cold_set
    d = daemon_factory(workers=1, data_root=root, extra_args=["--readahead-mb", "0"])
    with stoker.Loader("set", socket=d.socket, batch_size=8, size=32, epochs=1) as ld:
        assert sum(len(y) for _, y in ld) == 48
    ra = status(d).get("readahead", {})
    assert int(ra.get("threads", 0)) == 0 and int(ra.get("files_read", 0)) == 0


def test_files_over_the_size_cap_are_not_read_ahead(stoker, daemon_factory, cold_set):
    root, _ = cold_set
    d = daemon_factory(workers=1, data_root=root, extra_args=["--max-file-bytes", "100"])
    with stoker.Loader("set", socket=d.socket, batch_size=8, size=32, epochs=1,
                       failure_policy="error") as ld:
        with pytest.raises(stoker.SampleError, match="over the cap"):
            next(iter(ld))
    ra = status(d)["readahead"]
    assert int(ra.get("files_read", 0)) == 0 and int(ra.get("bytes_read", 0)) == 0
