"""Readahead: stokerd's I/O threads read the next samples' files before the
workers need them, within a bound on bytes read ahead.

The page cache is dropped for the dataset's files (posix_fadvise DONTNEED),
and the daemon's test-only --simulate-read-latency-us makes every read of
uncached data sleep first, as a slow disk would. What is asserted is what
readahead did (files read, how many were cold, the bytes it held), never
how fast anything was: bench/run.sh measures that.
"""

from __future__ import annotations

import json
import os

import pytest

from conftest import make_dataset

pytest.importorskip("torch")


def evict(root):
    """Drops the files under `root` from the page cache (skips the test where
    the file system cannot: tmpfs, some overlays)."""
    for dirpath, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError as e:
                pytest.skip(f"cannot drop {root} from the page cache here: {e}")
            finally:
                os.close(fd)


def cached(path):
    """Whether the file's first page is in the page cache (True where the file
    system cannot tell: RWF_NOWAIT unsupported, e.g. tmpfs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(1)], 0, os.RWF_NOWAIT)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


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
    if cached(files[0][0]):
        pytest.skip("this file system keeps the files cached (DONTNEED ignored)")
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
    # Every sample was either read ahead, found cached (a one-byte probe of a
    # cold page starts the kernel's own readahead, which on fast storage can
    # finish before the probe of the last page), or dispatched before its
    # turn came.
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
    if cached(files[0][0]):
        pytest.skip("this file system cannot tell what is cached")
    for p, _ in files:
        with open(p, "rb") as f:
            f.read()
    assert all(cached(p) for p, _ in files)
    d = daemon_factory(workers=2, data_root=root, extra_args=["--io-threads", "3"])
    with stoker.Loader("set", socket=d.socket, batch_size=8, size=32, epochs=1, seed=6,
                       ring_slots=3) as ld:
        assert sum(len(y) for _, y in ld) == 48
    ra = status(d)["readahead"]
    print("readahead status:", ra)
    assert int(ra.get("files_read", 0)) == 0 and int(ra.get("bytes_read", 0)) == 0
    assert int(ra.get("cold_files", 0)) == 0 and int(ra.get("window_bytes_max", 0)) == 0
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
