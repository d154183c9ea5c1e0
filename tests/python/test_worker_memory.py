"""A worker after a huge image keeps no more than the README says (issue 34):
a 36 Mpx PPM (108 MB of pixels) decoded, then a small image, and the worker
is back under 64 MiB of kept memory beyond its start, instead of holding the
huge image's working buffers (150-180 MB after a 64 Mpx image before)."""

from __future__ import annotations

import os

import numpy as np



def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _worker_pid(daemon) -> int:
    with open(f"/proc/{daemon.pid}/task/{daemon.pid}/children") as f:
        kids = [int(p) for p in f.read().split()]
    assert len(kids) == 1, kids
    return kids[0]


def test_a_worker_gives_back_a_huge_images_buffers(stoker, daemon_factory):
    d = daemon_factory(workers=1)
    folder = os.path.join(d.data_root, "huge", "c0")
    os.makedirs(folder)
    h = w = 6000
    rng = np.random.default_rng(3)
    row = rng.integers(0, 256, (w * 3,), dtype=np.uint8).tobytes()
    with open(os.path.join(folder, "a_huge.ppm"), "wb") as f:  # first in the order
        f.write(b"P6\n%d %d\n255\n" % (w, h))
        for _ in range(h):
            f.write(row)
    with open(os.path.join(folder, "b_small.ppm"), "wb") as f:
        f.write(b"P6\n64 48\n255\n" + bytes(64 * 48 * 3))
    worker = _worker_pid(d)
    start = _rss_bytes(worker)
    with stoker.Loader("huge", socket=d.socket, batch_size=1, shuffle=False, pipeline="eval",
                       size=64, epochs=1, timeout_ms=120000) as ld:
        sizes = [tuple(x.shape) for x, _ in ld]
    assert sizes == [(1, 64, 64, 3)] * 2
    # (The worker has answered both: its buffers were trimmed after each.)
    kept = _rss_bytes(worker) - start
    assert kept < (64 << 20), f"the worker kept {kept >> 20} MiB after a 36 Mpx image"
