"""Soak: workers SIGKILLed at random while a loader reads shuffled epochs (issue 4).

A background thread kills a random worker of the daemon (its pid from the
daemon's status, checked to be the daemon's child) every 0.2-1 s, and waits
until the daemon has noticed each death. Meanwhile a Loader consumes epochs.
Every completed epoch must hold each planned index exactly once, delivered
as itself (status ok: a killed worker's samples are redone, not replaced),
and the daemon must count at least as many worker restarts as there were
kills, stay healthy, and stop cleanly.

Bounded: STOKER_SOAK_SECONDS of kills (default 45), then the epoch under way
is finished. Set it higher to soak longer.
"""

from __future__ import annotations

import faulthandler
import os
import random
import re
import signal
import threading
import time

import numpy as np
import pytest

from conftest import make_dataset, wait_until

torch = pytest.importorskip("torch")

SOAK_S = float(os.environ.get("STOKER_SOAK_SECONDS", "45"))
MIN_EPOCHS = 3


def worker_of(pid: int, daemon_pid: int) -> bool:
    """True when pid is a live (not zombie) child of daemon_pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[1]) == daemon_pid


class Killer(threading.Thread):
    def __init__(self, stoker, daemon, seed: int) -> None:
        super().__init__(name="worker-killer", daemon=True)
        self.client = stoker.Client(daemon.socket)
        self.daemon_pid = daemon.pid
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.kills = []      # (seconds since start, worker id, pid)
        self.unnoticed = []  # kills the daemon had not noticed within 10 s
        self.error = None

    def restarts(self, wid: int) -> int:
        for w in self.client.status()["workers"]:
            if int(w.get("id", 0)) == wid:
                return int(w.get("restarts", 0))
        raise AssertionError(f"worker {wid} left the status")

    def run(self) -> None:
        t0 = time.monotonic()
        try:
            while not self.stop.wait(self.rng.uniform(0.2, 1.0)):
                live = [w for w in self.client.status()["workers"] if int(w.get("pid", 0))]
                if not live:
                    continue
                w = self.rng.choice(live)
                wid, pid = int(w.get("id", 0)), int(w["pid"])
                before = int(w.get("restarts", 0))
                if not worker_of(pid, self.daemon_pid):
                    continue  # exited meanwhile: never signal a pid that may be reused
                os.kill(pid, signal.SIGKILL)
                self.kills.append((time.monotonic() - t0, wid, pid))
                deadline = time.monotonic() + 10
                while self.restarts(wid) <= before:
                    if time.monotonic() > deadline:
                        self.unnoticed.append((wid, pid))
                        break
                    time.sleep(0.01)
        except BaseException as e:  # reported by the test
            self.error = e


def test_random_worker_kills_lose_and_repeat_nothing(stoker_mod, daemon_factory, tmp_short):
    stoker = stoker_mod
    faulthandler.dump_traceback_later(SOAK_S + 180, exit=True)  # over conftest's guard
    root = os.path.join(tmp_short, "data")
    make_dataset(os.path.join(root, "ds"), classes=4, per_class=40, sizes=(48, 200), seed=9)
    n = 160
    d = daemon_factory(workers=2, data_root=root)
    killer = Killer(stoker, d, seed=int(os.environ.get("STOKER_SOAK_SEED", "4")))
    delivered = epochs_done = 0
    t0 = time.monotonic()
    with stoker.Loader("ds", socket=d.socket, batch_size=8, size=32, shuffle=True, seed=17,
                       epochs=None, timeout_ms=60000, client_name="soak") as loader:
        assert len(loader) == n // 8
        killer.start()
        try:
            while epochs_done < MIN_EPOCHS or time.monotonic() - t0 < SOAK_S:
                planned, statuses, indices = [], [], []
                for v in loader.iter_batches():
                    assert v.epoch == epochs_done
                    planned += v.planned_indices.tolist()
                    statuses += v.statuses.tolist()
                    indices += v.indices.tolist()
                counts = np.bincount(planned, minlength=n)
                lost, dup = int((counts == 0).sum()), int((counts > 1).sum())
                assert lost == 0 and dup == 0 and len(planned) == n, (
                    f"epoch {epochs_done}: {lost} lost, {dup} duplicated, {len(planned)} seen")
                assert set(statuses) == {0}, f"epoch {epochs_done}: statuses {set(statuses)}"
                assert indices == planned
                delivered += len(planned)
                epochs_done += 1
        finally:
            killer.stop.set()
            killer.join(30)
    assert killer.error is None, repr(killer.error)
    assert not killer.unnoticed, f"deaths the daemon did not notice: {killer.unnoticed}"
    assert len(killer.kills) >= 10, f"only {len(killer.kills)} kills in {SOAK_S} s"
    client = stoker.Client(d.socket)
    st = client.status()
    assert int(st.get("worker_restarts_total", 0)) >= len(killer.kills)
    assert client.health() and st["state"] == "serving"
    # Every worker is back.
    wait_until(lambda: all(int(w.get("pid", 0)) and worker_of(int(w["pid"]), d.pid)
                           for w in client.status()["workers"]), 10, "every worker to be back")
    # The kills hit work in flight, which was redone (not just idle workers).
    redone = [int(x) for x in re.findall(r"(\d+) sample\(s\) in flight will be redone", d.log())]
    assert sum(redone) > 0, "no kill hit a worker with samples in flight"
    print(f"soak: {time.monotonic() - t0:.0f} s, {epochs_done} epochs, {delivered} samples "
          f"delivered, 0 lost, 0 duplicated, {len(killer.kills)} workers killed "
          f"({sum(1 for r in redone if r)} with work in flight, {sum(redone)} samples redone), "
          f"{st.get('worker_restarts_total')} restarts")


@pytest.fixture
def stoker_mod(build_dir):
    import stoker as mod
    return mod
