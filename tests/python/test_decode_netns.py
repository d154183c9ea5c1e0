"""Decode nodes as separate machines: each node in its own network namespace,
over a veth link (tc tbf rate limits), its CPU held by a cgroup quota
(tests/python/netns.py); the trainer daemon in this namespace. The cases of
test_decode_nodes.py, across a network: the same batches over two slow-CPU
nodes with mutual TLS, and over a link with latency (delay_proxy.py: tc's
netem is not in these machines' kernels); a partition (no packets,
connections left hanging rather than reset); a link so slow the node falls
behind; a node restarted behind a healed link; a node that answers garbage;
a killed trainer; a peer without a certificate. Skipped where namespaces
cannot be made (not root).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

import netns
from conftest import make_dataset, start_daemon, wait_until
from decode_nodes import (DecodeNode, call_info, channel, digests, fingerprint_of, make_certs,
                          trainer_auth, write_token)

ok, why = netns.available()
pytestmark = pytest.mark.skipif(not ok, reason=f"network namespaces: {why}")

PORT = 7070  # each node has its namespace's ports to itself


@pytest.fixture(scope="module")
def host():
    h = netns.Host()
    yield h
    h.close()


@pytest.fixture(scope="module")
def corpus(host):
    root = tempfile.mkdtemp(prefix="stkns", dir="/tmp")
    data = os.path.join(root, "data")
    make_dataset(os.path.join(data, "ds"), classes=3, per_class=30, sizes=(64, 320), seed=9)
    nodes = [host.node(cpus=0.5, rate_mbit=1000) for _ in range(2)]
    certs = make_certs(os.path.join(root, "certs"), node_ips=[n.address for n in nodes])
    yield {"root": root, "data": data, "certs": certs, "nodes": nodes,
           "token": write_token(root)}
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(stoker, build_dir, corpus):
    d = start_daemon(build_dir, data_root=corpus["data"], workers=2)
    try:
        return digests(stoker, d.socket, epochs=1, seed=11)
    finally:
        d.stop()


@pytest.fixture
def nodes(build_dir, corpus):
    """Starts a TLS decode node in namespace i: nodes(i)."""
    started = []

    def start(i, workers=2):
        n = corpus["nodes"][i]
        work = tempfile.mkdtemp(prefix="stkn", dir=corpus["root"])
        d = DecodeNode(build_dir, work, os.path.join(work, "root"), workers=workers,
                       certs=corpus["certs"], port=PORT, host=n.address, wrap=n.wrap).start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.kill()
    for n in corpus["nodes"]:
        n.heal()
        n.rate(1000)


def remote(stoker, socket):
    return stoker.Client(socket).status().get("decode_nodes", [])


def trainer(daemon_factory, corpus, addresses, extra=()):
    """A trainer daemon with these decode nodes, once their relays are
    connected (so that the batches read next are shared with them)."""
    import stoker
    t = daemon_factory(workers=1, data_root=corpus["data"], extra_args=[
        "--decode-nodes", ",".join(addresses), "--decode-when", "always",
        "--decode-node-workers", "2", *trainer_auth(corpus["certs"]), *extra])
    wait_until(lambda: all(int(n["connected"]) == 2 for n in remote(stoker, t.socket)), 30,
               "the relays to connect")
    return t


def test_two_namespaced_nodes_give_the_same_batches(stoker, corpus, reference, nodes,
                                                    daemon_factory):
    a, b = nodes(0), nodes(1)
    t = trainer(daemon_factory, corpus, [a.address, b.address])
    assert digests(stoker, t.socket, epochs=1, seed=11) == reference
    st = remote(stoker, t.socket)
    assert [int(s["samples_done"]) > 0 for s in st] == [True, True], st
    assert all(int(s["bytes_sent"]) > 0 for s in st)


def test_a_partitioned_node_is_cut_off_and_rejoins_when_healed(stoker, corpus, reference, nodes,
                                                               daemon_factory):
    a = nodes(0)
    link = corpus["nodes"][0]
    t = trainer(daemon_factory, corpus, [a.address], extra=["--decode-node-timeout-ms", "1500"])

    def cut(i):
        if i == 2:
            link.partition()

    assert digests(stoker, t.socket, epochs=1, seed=11, on_batch=cut) == reference
    assert int(remote(stoker, t.socket)[0]["lost"]) >= 1
    link.heal()
    wait_until(lambda: int(remote(stoker, t.socket)[0]["connected"]) == 2, 30,
               "the relays to reconnect once the link is back")
    before = int(remote(stoker, t.socket)[0]["samples_done"])
    assert digests(stoker, t.socket, epochs=1, seed=12)
    assert int(remote(stoker, t.socket)[0]["samples_done"]) > before


def test_a_node_behind_a_crawling_link_falls_back_to_local_work(stoker, corpus, reference, nodes,
                                                                 daemon_factory):
    a = nodes(0)
    corpus["nodes"][0].rate(0.2)  # 200 kbit/s: a 20 KB sample takes a second
    t = trainer(daemon_factory, corpus, [a.address], extra=["--decode-node-timeout-ms", "1000"])
    assert digests(stoker, t.socket, epochs=1, seed=11) == reference


def test_a_restarted_node_in_its_namespace_takes_work_again(stoker, corpus, reference, nodes,
                                                            daemon_factory):
    a = nodes(0)
    t = trainer(daemon_factory, corpus, [a.address], extra=["--decode-node-timeout-ms", "2000"])

    def kill(i):
        if i == 1:
            a.kill()

    assert digests(stoker, t.socket, epochs=1, seed=11, on_batch=kill) == reference
    again = nodes(0)
    wait_until(lambda: int(remote(stoker, t.socket)[0]["connected"]) == 2, 30, "reconnect")
    before = int(remote(stoker, t.socket)[0]["samples_done"])
    assert digests(stoker, t.socket, epochs=1, seed=11) == reference
    assert int(remote(stoker, t.socket)[0]["samples_done"]) > before
    assert again.info()["tasks_done"] > 0


def test_a_peer_without_a_certificate_gets_nothing(corpus, nodes):
    import grpc
    a = nodes(0)
    certs = corpus["certs"]
    ch = channel(a.port, certs, "trainer", host=a.host)
    fp = fingerprint_of(ch)
    assert call_info(ch, [("stoker-protocol", fp)])["workers"] == 2
    ch.close()
    for client in ("rogue", None):
        ch = channel(a.port, certs, client, host=a.host)
        with pytest.raises(grpc.RpcError):
            call_info(ch, [("stoker-protocol", fp)], timeout=3)
        ch.close()


def test_a_link_with_latency_gives_the_same_batches(stoker, corpus, reference, nodes,
                                                    daemon_factory):
    a = nodes(0)
    link = corpus["nodes"][0]
    proxy = link.delay_proxy(PORT + 1, PORT, delay_ms=5)  # 10 ms a round trip
    try:
        t = trainer(daemon_factory, corpus, [f"{link.address}:{PORT + 1}"])
        assert digests(stoker, t.socket, epochs=1, seed=11) == reference
        st = remote(stoker, t.socket)[0]
        assert int(st["samples_done"]) > 0 and int(st["lost"]) == 0
        assert st["latency"]["mean_ms"] >= 10  # the round trip, and then some
    finally:
        proxy.kill()
        proxy.wait()
    del a


def test_a_namespaced_node_that_answers_garbage_is_cut_off(stoker, corpus, reference,
                                                           daemon_factory):
    link = corpus["nodes"][1]
    here = os.path.dirname(os.path.abspath(__file__))
    rogue = subprocess.Popen(link.wrap_net(["/usr/bin/python3", os.path.join(here, "decode_nodes.py"),
                                            "rogue", f"{link.address}:{PORT + 2}"]),
                             stdout=subprocess.PIPE, text=True)
    try:
        assert rogue.stdout.readline().strip() == "listening"
        t = daemon_factory(workers=1, data_root=corpus["data"], extra_args=[
            "--decode-nodes", f"{link.address}:{PORT + 2}", "--decode-when", "always",
            "--decode-node-workers", "2", "--decode-token-file", corpus["token"]])
        assert digests(stoker, t.socket, epochs=1, seed=11) == reference
        st = remote(stoker, t.socket)[0]
        assert int(st["lost"]) >= 1 and int(st["samples_done"]) == 0
    finally:
        rogue.kill()
        rogue.wait()


def test_a_killed_trainer_leaves_the_namespaced_node_clean(stoker, corpus, nodes,
                                                           daemon_factory):
    a = nodes(0)
    t = trainer(daemon_factory, corpus, [a.address])
    s = stoker.Client(t.socket).attach("ds", batch_size=4, shuffle=True, seed=1, epochs=50,
                                       pipeline={"pipeline": "train", "size": 56})
    for _ in range(3):
        s.next(30000)
    wait_until(lambda: a.info()["streams_open"] == 2, 10, "both relays' streams")
    t.kill()
    wait_until(lambda: a.info()["streams_open"] == 0, 15, "the node to drop the streams")
    assert a.info()["arena_used_bytes"] == 0
