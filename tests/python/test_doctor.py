"""stokerctl doctor against a real daemon: a starved trainer is data-bound
(exit 2), a slow one healthy (exit 0), a missing daemon exit 3."""

import contextlib
import json
import os
import threading
import time

import pytest

from conftest import make_dataset


@contextlib.contextmanager
def trainer(stoker, socket, step_s, dtype, warm_batches):
    """A trainer consuming "imgs" on a thread, sleeping step_s per batch, for
    the duration of the with block, which waits until it has taken
    warm_batches batches (so that doctor's window sees it running)."""
    stop = threading.Event()
    warm = threading.Event()

    def consume():
        taken = 0
        with stoker.Loader("imgs", socket=socket, batch_size=8, size=64, epochs=None,
                           dtype=dtype) as ld:
            while not stop.is_set():
                for _ in ld:
                    taken += 1
                    if taken >= warm_batches:
                        warm.set()
                    time.sleep(step_s)
                    if stop.is_set():
                        break

    t = threading.Thread(target=consume)
    t.start()
    try:
        assert warm.wait(120), "the trainer took no batch"
        yield
    finally:
        stop.set()
        t.join(60)


def doctor(d, *extra):
    r = d.ctl("doctor", "--window-s", "2", *extra)
    return r.returncode, r.stdout


def test_doctor_names_a_data_bound_trainer_and_a_healthy_one(stoker, daemon_factory):
    d = daemon_factory(workers=1)
    make_dataset(os.path.join(d.data_root, "imgs"), classes=2, per_class=20, sizes=(200, 320),
                 seed=4)
    with trainer(stoker, d.socket, 0, "float32", warm_batches=8):
        code, out = doctor(d, "--json")
        j = json.loads(out)
        assert code == 2 and j["verdict"] == "data-bound" and j["exit_code"] == 2, out
        (s,) = j["sessions"]
        assert s["stall_share"] >= 0.3 and s["bound"] in ("read", "decode", "augment")
        assert any(a.startswith("more workers: stokerd runs a fixed --workers 1")
                   for a in s["advice"])
        assert any(a.startswith("uint8 output with GPU normalize") for a in s["advice"])
        code, text = doctor(d)
        assert code == 2 and text.startswith("stokerd doctor: data-bound"), text
        assert "what would help:" in text

    with trainer(stoker, d.socket, 0.5, "uint8", warm_batches=4):
        code, out = doctor(d, "--json")
        j = json.loads(out)
        assert code == 0 and j["verdict"] == "healthy", out
        assert j["sessions"][0]["bound"] == "the consumer"


def test_doctor_without_a_daemon_exits_3(daemon):
    import subprocess
    r = subprocess.run([daemon.stokerctl, "doctor", "--socket", "/nonexistent/s.sock",
                        "--window-s", "0.2"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 3, r


def test_doctor_points_at_slow_storage(stoker, daemon_factory, tmp_path_factory):
    """Cold files on a slow disk (the daemon's test-only read latency, page
    cache dropped), readahead off: read bounds the trainer."""
    from test_readahead import evict
    root = str(tmp_path_factory.mktemp("slowdisk"))
    files = make_dataset(os.path.join(root, "imgs"), classes=2, per_class=60, sizes=(48, 64),
                         seed=8)
    d = daemon_factory(workers=1, data_root=root,
                       extra_args=["--io-threads", "0", "--simulate-read-latency-us", "40000"])
    evict(root)
    with trainer(stoker, d.socket, 0, "uint8", warm_batches=2):
        code, out = doctor(d, "--json")
        j = json.loads(out)
        (s,) = j["sessions"]
        assert code == 2 and s["bound"] == "read", out
        assert s["read_ms"] > 10 * max(s["decode_ms"], s["augment_ms"])
        assert any(a.startswith("readahead on slow storage: it is off") for a in s["advice"])
