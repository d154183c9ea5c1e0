"""One daemon, many trainers: ranks, fairness, and ranks spread over nodes.

Each trainer is a real session with its own ring; the consumers run in
threads of this process (Session.next releases the GIL while it waits).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from conftest import make_dataset, wait_until

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def many_data(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("sessions"))
    make_dataset(os.path.join(root, "set"), classes=4, per_class=25, sizes=(48, 200), seed=21)
    return root  # 100 samples


def _epoch_indices(stoker, socket, dataset, rank, world, epoch=0, batch=5):
    with stoker.Loader(dataset, socket=socket, batch_size=batch, size=32, seed=5,
                       rank=rank, world_size=world, epochs=epoch + 1) as ld:
        ld.set_epoch(epoch)
        out = []
        for v in ld.iter_batches():
            out += v.planned_indices.tolist()
        return out


def _run_concurrently(fns):
    results, errors = [None] * len(fns), []

    def run(i, f):
        try:
            results[i] = f()
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate(fns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not errors, errors
    assert all(not t.is_alive() for t in ts), "a consumer hung"
    return results


def test_eight_ranks_on_one_daemon_read_each_sample_once_per_epoch(stoker, daemon_factory,
                                                                   many_data):
    d = daemon_factory(workers=2, data_root=many_data)
    ds = os.path.join(many_data, "set")
    for epoch in (0, 1):
        shards = _run_concurrently(
            [lambda r=r: _epoch_indices(stoker, d.socket, ds, r, 8, epoch) for r in range(8)])
        # DistributedSampler: 100 samples over 8 ranks = 13 each, 4 padded by repetition.
        assert all(len(s) == 13 for s in shards)
        seen = Counter(i for s in shards for i in s)
        assert set(seen) == set(range(100))
        assert sum(c - 1 for c in seen.values()) == 4  # only the padding repeats
        assert max(seen.values()) == 2


def test_ranks_on_two_daemons_like_two_nodes_cover_the_dataset_once(stoker, daemon_factory,
                                                                    many_data):
    # Node A serves global ranks 0-1, node B ranks 2-3, as torchrun would set
    # RANK on each node; both daemons see the same files.
    a = daemon_factory(workers=1, data_root=many_data)
    b = daemon_factory(workers=1, data_root=many_data)
    ds = os.path.join(many_data, "set")
    shards = _run_concurrently(
        [lambda r=r: _epoch_indices(stoker, (a if r < 2 else b).socket, ds, r, 4)
         for r in range(4)])
    seen = Counter(i for s in shards for i in s)
    assert sorted(seen) == list(range(100)) and set(seen.values()) == {1}


def _sessions_by_name(d, prefix):
    st = d.ctl("status", "--json")
    assert st.returncode == 0, st.stderr
    return {s["client_name"]: s for s in json.loads(st.stdout).get("sessions", [])
            if s["client_name"].startswith(prefix)}


def test_four_sessions_share_the_workers_fairly_and_a_slow_one_holds_back_only_itself(
        stoker, daemon_factory, many_data):
    d = daemon_factory(workers=2, data_root=many_data)
    ds = os.path.join(many_data, "set")
    stop = threading.Event()
    consumed = Counter()

    def consume(name, rank, delay_s):
        with stoker.Loader(ds, socket=d.socket, batch_size=4, size=64, seed=rank, rank=rank,
                           world_size=4, ring_slots=16, client_name=name) as ld:
            while not stop.is_set():
                for _ in ld:
                    consumed[name] += 1
                    if delay_s:
                        time.sleep(delay_s)
                    if stop.is_set():
                        break

    names = [f"fair-{r}" for r in range(4)] + ["slow-4"]
    threads = [threading.Thread(target=consume, args=(n, r % 4, 0.25 if n == "slow-4" else 0))
               for r, n in enumerate(names)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(_sessions_by_name(d, "")) == 5 and all(consumed[n] for n in names),
                   60, "five sessions consuming")

        def produced():
            return {n: int(s.get("samples_produced", 0))
                    for n, s in _sessions_by_name(d, "").items()}

        p0 = produced()
        # A window of about 1,600 samples over the four fast sessions; rings of 16
        # batches absorb a consumer thread that is briefly not scheduled.
        wait_until(lambda: sum(produced()[n] - p0[n] for n in names[:4]) >= 1600, 120,
                   "1,600 samples for the fast sessions", interval_s=0.1)
        p1 = produced()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    fast = [p1[n] - p0[n] for n in names[:4]]
    slow = p1["slow-4"] - p0["slow-4"]
    # Round-robin across sessions: each fast session within 20% of the others.
    assert min(fast) >= 0.8 * max(fast), f"unfair shares {fast}"
    # The slow consumer (4 samples per 0.25 s) gets only what it takes: its
    # full ring stops its production; the others are not held back by it.
    assert slow < 0.5 * min(fast), f"slow session produced {slow}, fast ones {fast}"


_TRUNCATING_TRAINER = r"""
import errno, os, sys
import stoker
c = stoker.Client(sys.argv[1])
s = c.attach(sys.argv[2], batch_size=64, pipeline={"size": 64}, epochs=0,
             client_name="truncating-trainer")
# The ring's memory, through the mapping this process holds (a memfd is named
# nowhere else), opened read-write: cutting it short must be refused.
with open("/proc/self/maps") as f:
    span = next(l.split()[0] for l in f if l.split()[5:6] == ["/" + s.info["ring_name"]])
try:
    fd = os.open("/proc/self/map_files/" + span, os.O_RDWR)
except PermissionError:
    print("skip: map_files needs CAP_SYS_ADMIN", flush=True)
    sys.exit(0)
for size in (0, 4096):
    try:
        os.ftruncate(fd, size)
        print("truncated", flush=True)
    except OSError as e:
        print("refused" if e.errno == errno.EPERM else f"error {e}", flush=True)
b = s.next(30000)
print("next", b[0]["image"][0].shape, flush=True)
"""


def test_a_trainer_cannot_cut_its_ring_short(stoker, daemon_factory, many_data, build_dir):
    """A ring is mapped read-write by its client. It is a memfd sealed against
    shrinking, so a trainer (a bug, or an attacker sharing the daemon) cannot
    ftruncate it under the daemon and its workers, whose stores would fault;
    the session goes on, and so do the others."""
    d = daemon_factory(workers=2, data_root=many_data)
    ds = os.path.join(many_data, "set")
    with stoker.Loader(ds, socket=d.socket, batch_size=4, size=32, seed=1, epochs=None,
                       client_name="bystander") as ld:
        it = iter(ld)
        next(it)
        env = dict(os.environ, PYTHONPATH=os.path.join(build_dir, "python"))
        child = subprocess.run([sys.executable, "-c", _TRUNCATING_TRAINER, d.socket, ds],
                               env=env, capture_output=True, text=True, timeout=60)
        assert child.returncode == 0, child.stderr
        if child.stdout.startswith("skip"):
            pytest.skip(child.stdout.strip())
        assert child.stdout.split("\n")[:3] == ["refused", "refused", "next (64, 64, 64, 3)"], \
            child.stdout
        assert d.proc.poll() is None, f"stokerd died\n{d.log_tail()}"
        st = json.loads(d.ctl("status", "--json").stdout)
        for w in st["workers"]:
            assert int(w.get("crashes", 0)) == 0 and int(w.get("restarts", 0)) == 0, w
        for _ in range(20):
            images, _labels = next(it)
            assert images.shape == (4, 32, 32, 3)


def test_the_ring_budget_is_shared_by_all_sessions(stoker, daemon_factory):
    """--ring-budget-mb holds all rings together: a session past it is refused
    with RESOURCE_EXHAUSTED naming the budget; one that leaves frees its part."""
    # A ring: 4 slots x (8 samples x 64x64x3 uint8 and 8 int64 labels, in
    # whole pages) = 4 x 102400 = 409600 bytes (0.39 MiB).
    d = daemon_factory(workers=1, extra_args=["--ring-budget-mb", "1"])
    make_dataset(os.path.join(d.data_root, "imgs"), classes=2, per_class=8, seed=2)
    kw = dict(socket=d.socket, batch_size=8, size=64, epochs=1)
    a = stoker.Loader("imgs", **kw).attach()
    b = stoker.Loader("imgs", **kw).attach()
    st = stoker.Client(d.socket).status()
    assert int(st["ring_budget_bytes"]) == 1 << 20
    assert int(st["ring_used_bytes"]) == 2 * 409600
    with pytest.raises(stoker.ResourceExhaustedError, match=r"--ring-budget-mb of 1\.0 MiB"):
        stoker.Loader("imgs", **kw).attach()
    a.close()
    with stoker.Loader("imgs", **kw) as c:
        assert sum(len(y) for _, y in c) == 16
    b.close()


def test_a_deep_worker_queue_does_not_stall_a_lone_worker(stoker, daemon_factory, tmp_path):
    """--worker-queue-depth 32 with one worker: more tasks than the worker's
    socket buffer holds (each some 20 KB). The daemon waits for the worker's
    next answer instead of giving the worker up (which left its samples
    unsent and the trainer waiting: a hang at depth 11 and over)."""
    root = str(tmp_path / "data")
    make_dataset(os.path.join(root, "ds"), classes=2, per_class=30, sizes=(48, 120), seed=3)
    d = daemon_factory(workers=1, data_root=root, extra_args=["--worker-queue-depth", "32"])
    seen = []
    with stoker.Loader(os.path.join(root, "ds"), socket=d.socket, batch_size=8, size=32,
                       epochs=2, timeout_ms=30000) as loader:
        for _ in range(2):
            for b in loader.iter_batches():
                seen += [int(i) for i in b.indices]
    assert sorted(seen) == sorted(list(range(60)) * 2)
