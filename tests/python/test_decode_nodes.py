"""Decode nodes (stokerd --decode-node, a trainer daemon's --decode-nodes)
against real daemons over real TCP on this machine: the same batches as one
node pixel for pixel, each fault (a node killed, silent, restarted, lying;
the trainer killed) and each security case (mutual TLS, the token, peers
without either). The same cases in network namespaces, over veth links with
rates and partitions: test_decode_netns.py.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
import time

import numpy as np
import pytest

import test_video_loader
import test_volume_loader
from conftest import make_dataset, wait_until
from decode_nodes import (BATCH, PIPELINE, DecodeNode, RogueNode, call_info, channel, digests,
                          fingerprint_of, make_certs, trainer_auth, write_token)


# The video and volume suites' datasets, for the media test below.
kinetics_root = test_video_loader.kinetics_root
task = test_volume_loader.task


@pytest.fixture(scope="module")
def corpus():
    root = tempfile.mkdtemp(prefix="stkdn", dir="/tmp")
    data = os.path.join(root, "data")
    make_dataset(os.path.join(data, "ds"), classes=3, per_class=40, sizes=(64, 320), seed=5)
    yield {"root": root, "data": data, "token": write_token(root),
           "certs": make_certs(os.path.join(root, "certs"))}
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(stoker, build_dir, corpus):
    """The batches of one node alone (2 local workers)."""
    from conftest import start_daemon
    d = start_daemon(build_dir, data_root=corpus["data"], workers=2)
    try:
        return digests(stoker, d.socket)
    finally:
        d.stop()


def node_status(stoker, socket):
    st = stoker.Client(socket).status()
    return st.get("decode_nodes", []), st


def remote_done(stoker, socket) -> int:
    nodes, _ = node_status(stoker, socket)
    return sum(int(n.get("samples_done", 0)) for n in nodes)


def trainer(daemon_factory, corpus, node_ports, *, workers=1, when="always", tls=False,
            extra=(), connected=True, data_root=None):
    """A trainer daemon with decode nodes on these ports (over `data_root`,
    default the corpus'); with `connected`, returned once every relay is
    connected (so that the batches read next are shared with the nodes)."""
    t = daemon_factory(
        workers=workers, data_root=data_root or corpus["data"],
        extra_args=["--decode-nodes", ",".join(f"127.0.0.1:{p}" for p in node_ports),
                    "--decode-when", when,
                    *trainer_auth(corpus["certs"] if tls else None, corpus["token"]),
                    *extra])
    if connected:
        import stoker
        wait_until(lambda: all(int(n["connected"]) == int(n["slots"])
                               for n in node_status(stoker, t.socket)[0]), 30,
                   "the relays to connect")
    return t


def start_node(build_dir, corpus, tls=False, **kw):
    workdir = tempfile.mkdtemp(prefix="stkn", dir=corpus["root"])
    kw.setdefault("data_root", os.path.join(workdir, "root"))
    return DecodeNode(build_dir, workdir, certs=corpus["certs"] if tls else None,
                      token=None if tls else corpus["token"], **kw).start()


@pytest.fixture
def nodes():
    started = []
    yield started
    for n in started:
        n.kill()


def test_same_batches_with_a_decode_node_shipping_samples(stoker, build_dir, corpus, reference,
                                                          daemon_factory, nodes):
    node = start_node(build_dir, corpus)
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port])
    assert digests(stoker, t.socket) == reference
    status, st = node_status(stoker, t.socket)
    assert len(status) == 1 and status[0]["address"] == f"127.0.0.1:{node.port}"
    assert int(status[0]["samples_done"]) > 0, status
    assert int(status[0]["bytes_sent"]) > 0 and int(status[0]["bytes_received"]) > 0
    assert st["decode_nodes_open"] and "always" in st["decode_nodes_reason"]
    remote_workers = [w for w in st["workers"] if w.get("node")]
    assert len(remote_workers) == 2 and all(w["state"] != "connecting" for w in remote_workers)
    info = node.info()
    assert info["tasks_done"] == int(status[0]["samples_done"])
    assert info["workers"] == 2


def test_same_batches_reading_a_shared_data_root(stoker, build_dir, corpus, reference,
                                                 daemon_factory, nodes):
    node = start_node(build_dir, corpus, data_root=corpus["data"])
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port], extra=["--decode-shared-root"])
    assert digests(stoker, t.socket) == reference
    status, _ = node_status(stoker, t.socket)
    assert int(status[0]["samples_done"]) > 0
    assert int(status[0]["bytes_sent"]) == 0  # the node read its own copy


def test_two_nodes_over_mutual_tls(stoker, build_dir, corpus, reference, daemon_factory, nodes):
    a = start_node(build_dir, corpus, tls=True)
    b = start_node(build_dir, corpus, tls=True, workers=1)
    nodes += [a, b]
    t = trainer(daemon_factory, corpus, [a.port, b.port], tls=True,
                extra=["--decode-node-workers", "2"])
    assert digests(stoker, t.socket) == reference
    status, _ = node_status(stoker, t.socket)
    assert [int(s["samples_done"]) > 0 for s in status] == [True, True], status


def test_the_node_answers_health_on_its_status_address(build_dir, corpus, nodes):
    import re
    import subprocess
    node = start_node(build_dir, corpus, tls=True, extra_args=["--status-addr", "127.0.0.1:0"])
    nodes.append(node)
    port = re.search(r"health on \S+ \(port (\d+)\)", open(node.log_path).read()).group(1)
    out = subprocess.run([os.path.join(build_dir, "bin", "stokerctl"), "health", "--socket",
                          f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "SERVING (decode node)"
    node.pause()  # a node that does not answer is not healthy
    try:
        out = subprocess.run([os.path.join(build_dir, "bin", "stokerctl"), "health", "--socket",
                              f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
        assert out.returncode != 0
    finally:
        node.resume()


def test_peers_without_credentials_are_refused(build_dir, corpus, nodes):
    import grpc
    certs = corpus["certs"]
    tls = start_node(build_dir, corpus, tls=True)
    nodes.append(tls)
    # The right client certificate: served (the control for what follows).
    ch = channel(tls.port, certs, "trainer")
    fp = fingerprint_of(ch)
    assert call_info(ch, [("stoker-protocol", fp)])["workers"] == 2
    ch.close()
    for client, plain in (("rogue", False), (None, False), (None, True)):
        ch = channel(tls.port, None if plain else certs, client)
        with pytest.raises(grpc.RpcError) as e:
            call_info(ch, [("stoker-protocol", fp)], timeout=3)
        assert e.value.code() in (grpc.StatusCode.UNAVAILABLE,
                                  grpc.StatusCode.DEADLINE_EXCEEDED), (client, plain, e.value)
        # Nor can it submit a task.
        decode = ch.stream_stream("/stoker.v1.DecodeNode/Decode",
                                  request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError):
            list(decode(iter([b"\x0a\x01x"]), timeout=3))
        ch.close()
    # Token mode: a wrong or missing token is refused before anything else.
    tok = start_node(build_dir, corpus)
    nodes.append(tok)
    ch = channel(tok.port)
    for md in ([], [("stoker-token", "wrong-token-wrong-token")]):
        with pytest.raises(grpc.RpcError) as e:
            call_info(ch, [*md, ("stoker-protocol", fp)])
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "token" in e.value.details()
        decode = ch.stream_stream("/stoker.v1.DecodeNode/Decode",
                                  request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as e:
            list(decode(iter([b"\x0a\x01x"]), metadata=md, timeout=3))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # The right token, another build: refused naming the fix.
    with pytest.raises(grpc.RpcError) as e:
        call_info(ch, [*tok.metadata(), ("stoker-protocol", "stoker-0.0.0/other")])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "same stoker version" in e.value.details()
    # A malformed task from an authenticated peer ends its stream, not the node.
    decode = ch.stream_stream("/stoker.v1.DecodeNode/Decode",
                              request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        list(decode(iter([b"\x0a\x03abc"]), metadata=[*tok.metadata(), ("stoker-protocol", fp)],
                    timeout=5))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ch.close()
    assert tok.info()["streams_open"] == 0


def test_a_node_killed_mid_epoch(stoker, build_dir, corpus, reference, daemon_factory, nodes):
    node = start_node(build_dir, corpus)
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port], extra=["--decode-node-timeout-ms", "2000"])
    gaps = []

    def kill_it(i):
        if i == 2:
            assert remote_done(stoker, t.socket) > 0
            node.kill()

    assert digests(stoker, t.socket, on_batch=kill_it, gaps=gaps) == reference
    status, st = node_status(stoker, t.socket)
    assert int(status[0]["lost"]) >= 1
    assert int(status[0]["connected"]) == 0
    assert max(gaps) < 20, gaps  # never near a hang: redone locally
    assert "decode node was lost" in open(t.log_path).read()


def test_a_silent_node_is_cut_off_then_a_restarted_one_rejoins(stoker, build_dir, corpus,
                                                                reference, daemon_factory, nodes):
    node = start_node(build_dir, corpus)
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port], extra=["--decode-node-timeout-ms", "1000"])

    def pause_it(i):
        if i == 2:
            node.pause()  # no answers, no packets: as a partition

    try:
        assert digests(stoker, t.socket, on_batch=pause_it) == reference
    finally:
        node.resume()
    status, _ = node_status(stoker, t.socket)
    assert int(status[0]["lost"]) >= 1
    # Restarted on the same port: the relays connect again and take work.
    port = node.port
    node.kill()
    again = start_node(build_dir, corpus, port=port)
    nodes.append(again)
    wait_until(lambda: int(node_status(stoker, t.socket)[0][0]["connected"]) == 2, 30,
               "the relays to reconnect")
    before = remote_done(stoker, t.socket)
    assert digests(stoker, t.socket, seed=8, epochs=1)
    assert remote_done(stoker, t.socket) > before


def test_tasks_are_taken_back_from_a_node_that_falls_behind(stoker, build_dir, corpus, reference,
                                                            daemon_factory, nodes):
    """The node keeps its stream (it answers gRPC's pings) but its workers
    stop: the relay's silence timeout is far off (60 s), yet the tasks come
    back once they are held 0.5 s with local workers idle."""
    from decode_nodes import _children
    node = start_node(build_dir, corpus)
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port], extra=["--decode-node-timeout-ms", "60000"])
    stopped = []

    def stall(i):
        if i == 2:
            for pid in _children(node.proc.pid):  # the node's workers, not the node
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)

    try:
        assert digests(stoker, t.socket, on_batch=stall) == reference
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    st = node_status(stoker, t.socket)[0][0]
    assert int(st["stolen"]) >= 1, st
    assert "fell behind" in open(t.log_path).read()


def test_a_node_that_answers_garbage_is_cut_off(stoker, build_dir, corpus, reference,
                                                daemon_factory):
    rogue = RogueNode()
    try:
        t = trainer(daemon_factory, corpus, [rogue.port], extra=["--decode-node-workers", "2"],
                    connected=False)
        assert digests(stoker, t.socket) == reference
        status, _ = node_status(stoker, t.socket)
        assert rogue.tasks > 0
        assert int(status[0]["lost"]) >= 1 and int(status[0]["samples_done"]) == 0
        log = open(t.log_path).read()
        assert "answered something malformed" in log
    finally:
        rogue.stop()


def test_a_killed_trainer_leaves_the_node_clean(stoker, build_dir, corpus, daemon_factory, nodes):
    node = start_node(build_dir, corpus)
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port])
    s = stoker.Client(t.socket).attach("ds", batch_size=BATCH, shuffle=True, seed=1, epochs=50,
                                       pipeline=dict(PIPELINE))
    for _ in range(3):
        s.next(30000)
    wait_until(lambda: node.info()["streams_open"] == 2, 10, "both relays' streams")
    t.kill()  # SIGKILL: its relays go with their channels
    wait_until(lambda: node.info()["streams_open"] == 0, 15, "the node to drop the streams")
    info = node.info()
    assert info["arena_used_bytes"] == 0
    assert node.proc.poll() is None
    # And it serves the next trainer.
    t2 = trainer(daemon_factory, corpus, [node.port])
    assert len(digests(stoker, t2.socket, epochs=1)) == 30


def test_a_sample_that_crashes_node_workers_fails_as_it_would_locally(stoker, build_dir, corpus,
                                                                      daemon_factory, nodes):
    fault = ["--fault-crash-substring", "img_0007"]
    local = daemon_factory(workers=2, data_root=corpus["data"], extra_args=fault)
    want = digests(stoker, local.socket, epochs=1, seed=3, all_ok=False)
    assert int(stoker.Client(local.socket).status()["dataset_totals"][0]["samples_failed"]) >= 1
    node = start_node(build_dir, corpus, extra_args=fault)
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port], extra=fault)
    assert digests(stoker, t.socket, epochs=1, seed=3, all_ok=False) == want
    assert node.info()["worker_restarts"] >= 1


def test_stalled_trainers_open_the_gate(stoker, build_dir, corpus, daemon_factory, nodes):
    node = start_node(build_dir, corpus)
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port], when="stalled")
    _, st = node_status(stoker, t.socket)
    assert not st["decode_nodes_open"]
    deadline = time.monotonic() + 60
    seed = 0
    while remote_done(stoker, t.socket) == 0 and time.monotonic() < deadline:
        digests(stoker, t.socket, epochs=2, seed=seed)  # as fast as it can: one worker stalls it
        seed += 1
    assert remote_done(stoker, t.socket) > 0
    _, st = node_status(stoker, t.socket)
    assert "waited" in st["decode_nodes_reason"] or st["decode_nodes_reason"].startswith("closed")


def _loader_batches(stoker, daemon, n=None, token=None, seed=11):
    """Batches of a Loader over the corpus (indices, pixels, labels, statuses),
    `n` of them (None: two epochs), from `token` if given; and the state
    after them."""
    ld = stoker.Loader(os.path.join(daemon.data_root, "ds"), socket=daemon.socket,
                       batch_size=8, pipeline="train", size=48, seed=seed, shuffle=True,
                       epochs=None, ring_slots=3)
    out = []
    with ld:
        if token is not None:
            ld.load_state_dict(token)
        want = n if n is not None else 2 * len(ld)
        it = iter(ld.iter_batches())  # one epoch; kept open while the state is read
        while len(out) < want:
            try:
                v = next(it)
            except StopIteration:
                it = iter(ld.iter_batches())
                continue
            out.append((v.epoch, v.batch_in_epoch, v.indices.copy(), v.images.numpy().copy(),
                        v.labels.numpy().copy(), v.statuses.copy()))
            del v
        state = json.loads(json.dumps(ld.state_dict()))
    return out, state


def test_resume_with_decode_nodes_is_exact(stoker, build_dir, corpus, daemon_factory, nodes):
    local = daemon_factory(workers=2, data_root=corpus["data"])
    want, _ = _loader_batches(stoker, local)
    local.stop()
    a, b = start_node(build_dir, corpus), start_node(build_dir, corpus, workers=1)
    nodes += [a, b]
    # Stopped after 5 batches with one node; resumed by another daemon with
    # two nodes and another seed given (the token wins).
    t1 = trainer(daemon_factory, corpus, [a.port])
    first, token = _loader_batches(stoker, t1, n=5)
    assert (token["epoch"], token["batch"]) == (0, 5), token
    t1.stop()
    t2 = trainer(daemon_factory, corpus, [a.port, b.port], workers=2)
    rest, _ = _loader_batches(stoker, t2, n=len(want) - 5, token=token, seed=999)
    got = first + rest
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g[:2] == w[:2]
        np.testing.assert_array_equal(g[2], w[2])
        np.testing.assert_array_equal(g[4], w[4])
        assert np.array_equal(g[3], w[3]), f"pixels of batch {g[:2]} differ"
    assert remote_done(stoker, t2.socket) > 0


def test_a_node_never_reads_outside_its_data_root(stoker, build_dir, corpus, daemon_factory,
                                                  nodes):
    """With --decode-shared-root the node reads each task's path beneath its
    own --data-root: a path there that leads outside (a symlink to a file
    elsewhere) fails as a sample, named, and nothing is read from outside."""
    root = tempfile.mkdtemp(prefix="stknr", dir=corpus["root"])
    shutil.copytree(os.path.join(corpus["data"], "ds"), os.path.join(root, "ds"))
    outside = os.path.join(corpus["root"], "outside.jpg")
    shutil.copy(os.path.join(corpus["data"], "ds", "class_00", "img_0000.jpg"), outside)
    victim = os.path.join(root, "ds", "class_01", "img_0003.jpg")
    os.unlink(victim)
    os.symlink(outside, victim)
    node = start_node(build_dir, corpus, data_root=root)
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port], workers=1,
                extra=["--decode-shared-root", "--decode-node-workers", "2"])
    # The sample goes to the local worker or to the node, epoch by epoch:
    # read until the node has met it (an epoch is a second or so).
    failures = []
    for epoch in range(20):
        s = stoker.Client(t.socket).attach("ds", batch_size=BATCH, shuffle=True, seed=epoch,
                                           epochs=1, pipeline=dict(PIPELINE))
        try:
            while True:
                try:
                    s.next(60000)
                except stoker.EndOfData:
                    break
            st = stoker.Client(t.socket).status(include_failures=True)
            failures += [f for x in st.get("sessions", []) for f in x.get("failures", [])]
        finally:
            s.detach()
        if node.info()["tasks_failed"] > 0:
            break
    assert node.info()["tasks_failed"] > 0, "the node never met the sample in 20 epochs"
    assert failures and all("img_0003" in f["path"] for f in failures), failures
    assert any("leaves the data root" in f["reason"] for f in failures), failures
    assert int(node_status(stoker, t.socket)[0][0]["samples_failed"]) == node.info()["tasks_failed"]


def store_of(node) -> str:
    """The folder a decode node keeps shipped files in (from its log)."""
    m = re.search(r"shipped videos and volumes kept in (\S+) ", open(node.log_path).read())
    assert m, node.log_tail()
    return m.group(1)


def count_files(root: str) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


@pytest.mark.parametrize("mode", ["shipped", "shared"])
def test_video_clips_and_volumes_go_to_decode_nodes(
        stoker, build_dir, corpus, daemon_factory, nodes, kinetics_root, task, mode):
    """Clip and volume sessions use decode nodes: the same clips and patches
    as a node alone. Shipped (the default), each video or volume file crosses
    once per node, whole, and is kept in the node's store, which its stop
    removes; with --decode-shared-root each node reads its own data root."""
    import torch
    from stoker import volume as V
    from test_video_loader import EXTENSIONS, eval_preset
    from test_volume_loader import epoch_batches, spleen

    def clips(socket):
        out = []
        with stoker.Loader(str(kinetics_root / "train"), frames_per_clip=8, step_between_clips=8,
                           transform=eval_preset(), extensions=EXTENSIONS, socket=socket,
                           batch_size=2, epochs=1, shuffle=True, seed=3) as loader:
            for x, y in loader:
                out.append((x.clone(), y.clone()))
        return out

    volume_root, _ = task
    compose = spleen(V, extra=[V.RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=[0])])
    for root, run in ((str(kinetics_root), clips),
                      (str(volume_root), lambda socket: epoch_batches(
                          stoker, socket, "Task09/dataset.json", compose, seed=5, epochs=2,
                          shuffle=True))):
        local = daemon_factory(workers=1, data_root=root)
        want = run(local.socket)
        local.stop()
        shipped = mode == "shipped"
        # Shipped, the node's own data root is empty: everything it reads
        # came over the stream.
        node = start_node(build_dir, corpus, **({} if shipped else {"data_root": root}))
        nodes.append(node)
        t = trainer(daemon_factory, corpus, [node.port], data_root=root, extra=[
            *([] if shipped else ["--decode-shared-root"]), "--decode-node-workers", "2"])
        got = run(t.socket)
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            if isinstance(g[1], dict):  # volumes: (indices, {image, label})
                assert np.array_equal(g[0], w[0])
                assert all(torch.equal(g[1][k], w[1][k]) for k in w[1])
            else:  # clips: (clips, labels)
                assert torch.equal(g[0], w[0]) and torch.equal(g[1], w[1])
        assert remote_done(stoker, t.socket) > 0, root
        info = node.info()
        if shipped:
            # Each file at most once (the volumes were read for two epochs),
            # and every one kept; none read from the node's own root.
            store = store_of(node)
            assert 0 < info["files_received"] <= count_files(root), (info, root)
            assert info["files_held"] == info["files_received"] == count_files(store)
            again = run(t.socket)
            assert len(again) == len(got)
            after = node.info()
            assert after["files_received"] == info["files_received"]
            if root == str(volume_root):
                # Prepared once per node (its --prepared-cache), then served.
                assert 0 < after["prepared_entries"] <= 4 and after["prepared_hits"] > 0, after
            t.stop()
            node.stop()
            assert not os.path.exists(store), "the node left its shipped files behind"
        else:
            assert info["files_received"] == 0
            t.stop()


def test_a_killed_nodes_store_is_removed_by_the_next_node(build_dir, corpus, nodes, tmp_path,
                                                         monkeypatch):
    """The shipped-file store of a node that was killed (SIGKILL: no chance
    to clean up) is removed by the next node started on the machine; a
    stopped node removes its own; a live node's is never touched."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    first = start_node(build_dir, corpus)
    nodes.append(first)
    live = start_node(build_dir, corpus)
    nodes.append(live)
    killed_store, live_store = store_of(first), store_of(live)
    assert os.path.dirname(killed_store) == str(tmp_path)
    with open(os.path.join(killed_store, "0123456789abcdef0123456789abcdef"), "wb") as f:
        f.write(b"a video left behind")
    first.kill()  # waits for its workers, which hold the store's lock too
    assert os.path.isdir(killed_store)
    after = start_node(build_dir, corpus)
    nodes.append(after)
    assert not os.path.exists(killed_store), "a killed node's store was left"
    assert os.path.isdir(live_store), "a live node's store was removed"
    for n in (live, after):
        n.stop()
    assert os.listdir(tmp_path) == []


def test_a_shipped_volume_that_fails_is_named_by_its_path(stoker, build_dir, corpus,
                                                           daemon_factory, nodes, task, tmp_path):
    """A corrupt volume decoded on a node fails as a sample, named by its
    path on the trainer node (not by its store key); the epoch completes."""
    root, _ = task
    work = tmp_path / "data"
    shutil.copytree(root, work)
    (work / "Task09" / "imagesTr" / "ct_1.nii.gz").write_bytes(b"\x1f\x8b" + os.urandom(300))
    node = start_node(build_dir, corpus)
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port], data_root=str(work),
                extra=["--decode-node-workers", "2"])
    from stoker import volume as V
    from test_volume_loader import spleen
    failures = []
    for seed in range(10):
        with stoker.Loader("Task09/dataset.json", transform=spleen(V), socket=t.socket,
                           batch_size=2, seed=seed, epochs=1, shuffle=True) as loader:
            assert len(list(loader)) == 2  # failures replaced, not fatal
            st = stoker.Client(t.socket).status(include_failures=True)
            failures += [f for x in st.get("sessions", []) for f in x.get("failures", [])]
        if node.info()["tasks_failed"] > 0:
            break
    assert node.info()["tasks_failed"] > 0, "the node never met the volume in 10 epochs"
    assert failures, "no failure reported"
    for f in failures:
        assert "ct_1.nii.gz" in f["path"], f
        assert not re.search(r"[0-9a-f]{32}", f["reason"]), f
        assert "ct_1.nii.gz" in f["reason"], f


def test_masks_boxes_and_views_cross_to_a_node_and_back(stoker, build_dir, corpus, daemon_factory,
                                                        nodes, tmp_path):
    """What a sample carries besides its image: a WebDataset shard whose
    members hold a mask and boxes (byte ranges of the tar, shipped), and a
    two-view SimCLR pipeline: the same batches through a node as alone."""
    import torch
    from test_boxes import write_shard
    from test_multiview import simclr
    root = tmp_path / "data"
    write_shard(root, tmp_path / "loose")
    shutil.copytree(os.path.join(corpus["data"], "ds"), root / "ds")

    def batches(socket, node=None):
        out = []
        with stoker.Loader("shard.tar", socket=socket, batch_size=3, size=32, seed=6, epochs=3,
                           output="dict") as ld:
            for _ in range(3):
                for b in ld:
                    out.append({k: v.clone() if isinstance(v, torch.Tensor) else
                                [x.clone() for x in v] for k, v in b.items()})
        done = node.info()["tasks_done"] if node is not None else 0
        assert node is None or done > 0, "the node decoded none of the shard's samples"
        with stoker.Loader("ds", transform=stoker.MultiView([simclr(48), simclr(32)]),
                           socket=socket, batch_size=4, seed=2, epochs=1) as ld:
            for views, labels in ld:
                out.append({"views": [v.clone() for v in views], "labels": labels.clone()})
        assert node is None or node.info()["tasks_done"] > done, "nor any two-view sample"
        return out

    def same(a, b):
        if isinstance(a, torch.Tensor):
            return torch.equal(a, b)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)

    local = daemon_factory(workers=1, data_root=str(root))
    want = batches(local.socket)
    local.stop()
    node = start_node(build_dir, corpus)
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port], data_root=str(root),
                extra=["--decode-node-workers", "2"])
    got = batches(t.socket, node)
    assert len(got) == len(want) > 0
    for i, (g, w) in enumerate(zip(got, want)):
        assert same(g, w), f"batch {i} differs"


def test_raw_records_are_shipped_as_the_images_of_their_pixels(stoker, build_dir, corpus,
                                                               daemon_factory, nodes, tmp_path):
    """An HDF5 array of raw pixels (PCam's layout): the relay ships each row
    as the PNM image of it, as a local worker reads it: the same batches."""
    import torch
    h5py = pytest.importorskip("h5py")
    root = tmp_path / "data"
    root.mkdir()
    rng = np.random.default_rng(4)
    with h5py.File(root / "x.h5", "w") as f:
        f["x"] = rng.integers(0, 256, (40, 32, 32, 3), dtype=np.uint8)
        f["y"] = rng.integers(0, 2, (40,), dtype=np.uint8)

    def batches(socket):
        with stoker.Loader("x.h5", socket=socket, batch_size=4, pipeline="train", size=24,
                           seed=3, shuffle=True, epochs=1) as ld:
            return [(x.clone(), y.clone()) for x, y in ld]

    local = daemon_factory(workers=1, data_root=str(root))
    want = batches(local.socket)
    local.stop()
    node = start_node(build_dir, corpus)
    nodes.append(node)
    t = trainer(daemon_factory, corpus, [node.port], data_root=str(root),
                extra=["--decode-node-workers", "2"])
    got = batches(t.socket)
    assert len(got) == len(want) == 10
    assert all(torch.equal(g[0], w[0]) and torch.equal(g[1], w[1]) for g, w in zip(got, want))
    assert node.info()["tasks_done"] > 0
