"""A ring that deepens for a trainer that consumes in bursts, on the real
daemon, its workers and shared memory. The policy itself (when to deepen, by
how much, the budget's share, the dwell) is tested against a modelled
session in server/engine/ring_depth_test.cc, and the depth protocol (which slot each
batch takes across a change) in server/engine/session_test.cc; here: that the daemon
measures a real trainer, deepens its real ring without losing or repeating a
sample, reports it, and keeps within the shared-memory budget."""

import os
import time

import pytest

from conftest import make_dataset, ring_fd_path, wait_until

BATCH = 16
PER_EPOCH = 160  # 10 batches


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ringdepth"))
    make_dataset(os.path.join(root, "data", "imgs"), classes=2, per_class=PER_EPOCH // 2,
                 sizes=(48, 96), seed=9)
    return os.path.join(root, "data")


def session_status(stoker, d):
    sessions = stoker.Client(d.socket).status()["sessions"]
    assert len(sessions) == 1
    return sessions[0]


def bursty(stoker, d, loader, until, seconds):
    """Takes batches in bursts of 40 with 0.8 s between bursts (an eval
    step, a checkpoint) until `until()` or `seconds`; returns the planned
    dataset indices of each epoch it went through. The workers make small
    batches many times faster than that on average, yet a burst drains a
    ring of 4 (or 8, or 16) and waits for the rest."""
    epochs = {}
    t0 = time.monotonic()
    taken = 0
    while time.monotonic() - t0 < seconds and not until():
        for view in loader.iter_batches():
            epochs.setdefault(view.epoch, []).extend(int(i) for i in view.planned_indices)
            taken += 1
            if taken % 40 == 0:
                time.sleep(0.8)
                if until() or time.monotonic() - t0 >= seconds:
                    break
    return epochs


def test_a_bursty_trainer_gets_a_deeper_ring_and_every_sample_once(stoker, daemon_factory, small):
    d = daemon_factory(workers=2, data_root=small)
    loader = stoker.Loader("imgs", socket=d.socket, batch_size=BATCH, size=32, epochs=None,
                           shuffle=True, seed=4)
    try:
        info = loader.info
        assert info["ring_slots"] == 16  # room to deepen: 4 deep at first
        assert session_status(stoker, d)["ring_depth"] == 4
        first = next(loader.iter_batches())  # the workers have mapped the ring
        del first
        st = session_status(stoker, d)
        allocated = os.stat(ring_fd_path(d.pid, st["ring_name"])).st_blocks * 512
        assert allocated <= int(st["ring_bytes"]) < info["slot_bytes"] * 5

        def deep():
            return session_status(stoker, d)["ring_depth"] >= 8

        epochs = bursty(stoker, d, loader, deep, 40)
        st = session_status(stoker, d)
        assert st["ring_depth"] >= 8, st
        assert "consumes in bursts" in st["ring_depth_reason"]
        assert "ring 4 -> 8 batches" in d.log()
        # A deeper ring holds more of /dev/shm: its depth's slots, not all 16.
        assert info["slot_bytes"] * st["ring_depth"] < int(st["ring_bytes"])
        assert int(st["ring_bytes"]) < info["slot_bytes"] * (st["ring_depth"] + 1)
        # ... and the ring's memory agrees: the slots beyond the depth are
        # holes, which neither the workers nor the client fault in.
        allocated = os.stat(ring_fd_path(d.pid, st["ring_name"])).st_blocks * 512
        assert info["slot_bytes"] * st["ring_depth"] < allocated <= int(st["ring_bytes"])
        # Through the change: each whole epoch is a permutation of the dataset.
        epochs.update(bursty(stoker, d, loader, lambda: False, 3))
        whole = [e for e, idx in epochs.items() if len(idx) >= PER_EPOCH]
        assert len(whole) >= 2
        for e in whole:
            assert sorted(epochs[e]) == list(range(PER_EPOCH)), e
        # stokerctl shows the depth and why.
        out = d.ctl("status").stdout
        assert "ring " in out and "consumes in bursts" in out
    finally:
        loader.close()


def test_a_steady_trainer_keeps_the_first_depth(stoker, daemon_factory, small):
    d = daemon_factory(workers=2, data_root=small)
    with stoker.Loader("imgs", socket=d.socket, batch_size=BATCH, size=32, epochs=None) as loader:
        t0 = time.monotonic()
        it = iter(loader)
        while time.monotonic() - t0 < 8:
            try:
                next(it)
            except StopIteration:
                it = iter(loader)
            time.sleep(0.05)  # slower than the workers, evenly: the ring stays full
        st = session_status(stoker, d)
        assert st["ring_depth"] == 4
        assert st["ring_depth_reason"] == ""


def test_ring_slots_given_is_a_fixed_depth(stoker, daemon_factory, small):
    d = daemon_factory(workers=2, data_root=small)
    with stoker.Loader("imgs", socket=d.socket, batch_size=BATCH, size=32, epochs=None,
                       ring_slots=3) as loader:
        assert loader.info["ring_slots"] == 3
        bursty(stoker, d, loader, lambda: False, 6)
        st = session_status(stoker, d)
        assert st["ring_depth"] == 3 and st["ring_slots"] == 3


def test_the_budget_caps_the_depth(stoker, daemon_factory, small):
    # A budget with room for the first ring and a little: the ring is made
    # with only the slots that could fit, and deepens no further.
    d = daemon_factory(workers=2, data_root=small)
    with stoker.Loader("imgs", socket=d.socket, batch_size=BATCH, size=32, epochs=1) as probe:
        slot_bytes = probe.info["slot_bytes"]
    d.stop()
    budget_mb = (slot_bytes * 6) / 1048576.0
    d = daemon_factory(workers=2, data_root=small,
                       extra_args=["--ring-budget-mb", f"{budget_mb:.6f}"])
    with stoker.Loader("imgs", socket=d.socket, batch_size=BATCH, size=32, epochs=None) as loader:
        assert loader.info["ring_slots"] == 4  # 8 slots would not fit in the budget
        bursty(stoker, d, loader, lambda: False, 6)
        assert session_status(stoker, d)["ring_depth"] == 4
