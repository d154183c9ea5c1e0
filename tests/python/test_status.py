"""The daemon's status against ground truth, and stokerctl's status, top and
health against a live daemon, on the Unix socket and the TCP listener."""

import json
import re
import os
import pty
import socket
import subprocess

import pytest

from conftest import read_terminal, wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(daemon_factory, make_dataset, tmp_short):
    port = free_port()
    d = daemon_factory(workers=2, extra_args=["--status-addr", f"127.0.0.1:{port}"])
    make_dataset(os.path.join(d.data_root, "ds"), classes=2, per_class=15)  # 30 samples
    d.tcp = f"127.0.0.1:{port}"
    return d


def status(d, *extra):
    r = d.ctl("status", "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_status_counts_match_what_was_consumed(served, stoker):
    os.unlink(os.path.join(served.data_root, "ds", "class_01", "img_0003.jpg"))
    with open(os.path.join(served.data_root, "ds", "class_01", "img_0003.jpg"), "wb") as f:
        f.write(b"not a jpeg")
    loader = stoker.Loader("ds", socket=served.socket, batch_size=6, size=32, epochs=1, seed=3)
    n = 0
    for _images, _labels in loader:
        n += 1
    assert n == 5
    del _images, _labels  # the last batch's slot goes back with its tensors
    # Consumed batches are counted when their slots come back: wait for the
    # last release to be seen.
    wait_until(lambda: status(served)["sessions"][0]["batches_consumed"] == "5", 5,
               "the last release")
    s = status(served, "--failures")["sessions"][0]
    assert s["batches_produced"] == "5"
    assert s["samples_produced"] == "30"
    assert s["samples_failed"] == "1"
    assert s["samples_replaced"] == "1"
    assert [f["path"].endswith("class_01/img_0003.jpg") for f in s["failures"]] == [True]
    assert int(s["read"]["count"]) >= 30 and int(s["decode"]["count"]) >= 30
    assert int(s["client_wait"]["count"]) == 5
    assert s["client_pid"] == os.getpid()
    loader.close()
    top = status(served)
    assert top["state"] == "serving"
    assert top["sessions"] == []
    assert int(top["samples_total"]) >= 30 and int(top["samples_failed_total"]) == 1
    assert len(top["workers"]) == 2 and all(w["pid"] > 0 for w in top["workers"])
    assert top["config"]["status_addr"] == served.tcp


def test_stokerctl_status_table_and_health(served, stoker):
    with stoker.Loader("ds", socket=served.socket, batch_size=5, size=32, epochs=None) as loader:
        it = iter(loader)
        next(it)
        # (Wide enough for every column: an 80-column one drops PIPELINE.)
        r = subprocess.run([served.stokerctl, "status", "--socket", served.socket],
                           capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, COLUMNS="300"))
        assert r.returncode == 0, r.stderr
        assert "WORKER" in r.stdout and "SESSION" in r.stdout
        assert "serving" in r.stdout and "train" in r.stdout
        assert re.search(r"readahead +16 threads +budget 64 MiB +read \d+ files", r.stdout), \
            r.stdout
    r = served.ctl("health")
    assert r.returncode == 0 and r.stdout.strip() == "SERVING"


def test_stokerctl_top_refreshes_in_a_terminal(served):
    master, slave = pty.openpty()
    p = subprocess.Popen([served.stokerctl, "top", "--socket", served.socket, "--iterations", "2",
                          "--interval-ms", "100"], stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    out = read_terminal(master)
    assert p.wait(timeout=20) == 0
    os.close(master)
    text = out.decode(errors="replace")
    assert text.count("\x1b[H\x1b[2J") == 2  # two refreshes, each clears the screen
    assert text.count("stokerd ") >= 2 and "WORKER" in text


def test_tcp_listener_serves_status_and_health_but_refuses_sessions(served):
    r = subprocess.run([served.stokerctl, "health", "--socket", served.tcp], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([served.stokerctl, "status", "--json", "--socket", served.tcp],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "serving"
    r = subprocess.run([served.stokerctl, "consume", "--socket", served.tcp, "--dataset", "ds"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode != 0
    assert "PERMISSION_DENIED" in r.stderr and "Unix socket only" in r.stderr
    # And the Unix socket still serves sessions.
    r = served.ctl("consume", "--dataset", "ds", "--batch-size", "6", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["samples"] == 30


def test_json_log_lines(daemon_factory, make_dataset):
    d = daemon_factory(workers=1, extra_args=["--log-json"])
    make_dataset(os.path.join(d.data_root, "ds"), classes=1, per_class=4)
    with open(os.path.join(d.data_root, "ds", "class_00", "img_0001.jpg"), "wb") as f:
        f.write(b'"quoted" \\ and \n a newline: not a jpeg')
    r = d.ctl("consume", "--dataset", "ds", "--batch-size", "2", "--json")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in d.log().splitlines() if line.strip()]
    assert all({"ts", "level", "pid", "msg"} <= set(x) for x in lines)
    assert any(x["level"] == "warning" and "img_0001.jpg" in x["msg"] for x in lines)
    assert any("attached" in x["msg"] for x in lines)
