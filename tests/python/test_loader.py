"""stoker.Loader end to end against the real stokerd (see conftest.py)."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import threading
import time

import numpy as np
import pytest
from PIL import Image

from conftest import imagefolder_samples, make_dataset, ring_mapping, wait_until

torch = pytest.importorskip("torch")

MAIN_CLASSES, MAIN_PER_CLASS = 3, 20
MAIN_N = MAIN_CLASSES * MAIN_PER_CLASS  # 60: even, so two ranks split it exactly

# Every JPEG flavour the decode pipeline must reproduce bit-exactly, with odd
# sizes so that chroma edges are exercised.
FLAVOURS = [
    {"subsampling": "420"},
    {"subsampling": "422"},
    {"subsampling": "444"},
    {"gray": True},
    {"subsampling": "420", "progressive": True},
    {"subsampling": "444", "progressive": True},
    {"gray": True, "progressive": True},
    {"subsampling": "422", "quality": 60},
]


@pytest.fixture(scope="module")
def data(build_dir):
    """A data root with datasets main/, flavours/, empty/, hang/ and an escape hatch."""
    top = tempfile.mkdtemp(prefix="stk", dir="/tmp")
    root = os.path.join(top, "data")
    os.makedirs(root)
    make_dataset(os.path.join(root, "main"), classes=MAIN_CLASSES, per_class=MAIN_PER_CLASS,
                 sizes=(64, 400), seed=1)
    make_dataset(os.path.join(root, "flavours"), classes=2, per_class=len(FLAVOURS),
                 sizes=(33, 211), seed=2, flavours=FLAVOURS)
    os.makedirs(os.path.join(root, "empty"))
    os.makedirs(os.path.join(root, "empty_classes", "a"))
    make_dataset(os.path.join(root, "hang"), classes=1, per_class=4, sizes=(64, 96), seed=3,
                 class_prefix="hangme_")
    # A valid dataset outside the root, reachable by '..' and by a symlink.
    make_dataset(os.path.join(top, "outside"), classes=1, per_class=4, sizes=(64, 96), seed=4)
    os.symlink(os.path.join(top, "outside"), os.path.join(root, "link"))
    # Four good files and one that is not a JPEG at all (dataset index 2).
    make_dataset(os.path.join(root, "corrupt"), classes=1, per_class=4, sizes=(64, 96), seed=5)
    with open(os.path.join(root, "corrupt", "class_00", "img_0001_bad.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 this is not a JPEG" + bytes(range(256)) * 4)
    yield root
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def served(module_daemon_factory, data):
    """One daemon (2 workers) serving `data` for the whole module."""
    return module_daemon_factory(workers=2, data_root=data)


def loader_for(stoker, daemon, dataset="main", **kw):
    kw.setdefault("batch_size", 8)
    kw.setdefault("timeout_ms", 30000)
    return stoker.Loader(dataset, socket=daemon.socket, **kw)


def normalize(u8_nchw: np.ndarray, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)):
    m = np.asarray(mean, np.float32)[None, :, None, None]
    s = np.asarray(std, np.float32)[None, :, None, None]
    return (u8_nchw.astype(np.float32) / 255.0 - m) / s


# ---------------------------------------------------------------------------
# Order, coverage, labels, shapes


def test_two_shuffled_epochs_cover_the_dataset_with_imagefolder_labels(stoker, served, data):
    samples = imagefolder_samples(os.path.join(data, "main"))
    assert len(samples) == MAIN_N
    with loader_for(stoker, served, epochs=2, seed=5, shuffle=True) as loader:
        assert len(loader) == 8  # ceil(60 / 8)
        assert loader.class_names == [f"class_{k:02d}" for k in range(MAIN_CLASSES)]
        assert loader.info["dataset_size"] == MAIN_N
        assert loader.info["dtype"] == "uint8" and loader.info["layout"] == "nhwc"
        orders = []
        for epoch in range(2):
            order = []
            for n, b in enumerate(loader.iter_batches()):
                assert b.epoch == epoch == loader.epoch and b.batch_in_epoch == n
                want = 4 if n == 7 else 8
                assert b.images.shape == (want, 224, 224, 3)
                assert b.images.dtype == torch.uint8
                assert b.labels.dtype == torch.int64 and b.labels.shape == (want,)
                assert np.array_equal(loader.last_indices, b.indices)
                assert b.labels.tolist() == [samples[i][1] for i in b.indices]
                assert (b.statuses == 0).all()
                assert b.images.float().std() > 5  # real pixels, not zeros
                order += b.indices.tolist()
            assert n == 7
            assert sorted(order) == list(range(MAIN_N)), f"epoch {epoch} is not a permutation"
            orders.append(order)
        assert orders[0] != orders[1], "shuffle gave the same order twice"
        assert orders[0] != sorted(orders[0])
        # Both epochs served: a further iteration is empty.
        assert list(loader) == []


def test_iteration_yields_tensor_pairs_in_dataset_order_without_shuffle(stoker, served, data):
    samples = imagefolder_samples(os.path.join(data, "main"))
    with loader_for(stoker, served, epochs=1, shuffle=False, pipeline="eval", size=64,
                    batch_size=16) as loader:
        seen = []
        it = iter(loader)
        assert len(it) == -(-MAIN_N // 16)  # before the first batch, as DataLoader's
        for images, labels in it:
            assert isinstance(images, torch.Tensor) and images.shape[1:] == (64, 64, 3)
            seen += loader.last_indices.tolist()
            assert labels.tolist() == [samples[i][1] for i in loader.last_indices]
        assert seen == list(range(MAIN_N))


@pytest.mark.parametrize("dtype,tdtype", [("float32", torch.float32), ("float16", torch.float16)])
def test_float_nchw_is_the_normalized_uint8(stoker, served, dtype, tdtype):
    kw = dict(pipeline="eval", size=(96, 128), resize_size=146, epochs=1, shuffle=False,
              batch_size=4)
    with loader_for(stoker, served, dtype=dtype, **kw) as lf, \
            loader_for(stoker, served, dtype="uint8", **kw) as lu:
        assert lf.info["layout"] == "nchw" and lf.info["dtype"] == dtype
        fi, fl = next(iter(lf))
        ui, ul = next(iter(lu))
        assert fi.shape == (4, 3, 96, 128) and fi.dtype == tdtype
        assert ui.shape == (4, 96, 128, 3) and ui.dtype == torch.uint8
        assert torch.equal(fl, ul)
        want = normalize(ui.numpy().transpose(0, 3, 1, 2))
        # The float path may round differently from uint8: at most ~1 level.
        err = np.abs(fi.float().numpy() - want).max()
        assert err < 1.5 / 255 / 0.224 + (0.01 if dtype == "float16" else 0), err


def test_uint8_nchw_layout(stoker, served):
    with loader_for(stoker, served, layout="nchw", size=32, epochs=1, batch_size=4) as loader:
        images, _ = next(iter(loader))
        assert images.shape == (4, 3, 32, 32) and images.dtype == torch.uint8


def test_decode_pipeline_is_bit_exact_with_pil(stoker, served, data):
    root = os.path.join(data, "flavours")
    samples = imagefolder_samples(root)
    with loader_for(stoker, served, dataset="flavours", pipeline="decode", batch_size=1,
                    shuffle=False, epochs=1) as loader:
        assert loader.info["height"] == 0  # variable size
        seen = []
        for b in loader.iter_batches():
            (img,), (idx,) = b.images, b.indices
            path, label = samples[idx]
            want = np.asarray(Image.open(path).convert("RGB"))
            assert img.shape == want.shape, path
            got = img.numpy()
            assert np.array_equal(got, want), (
                f"{path} ({FLAVOURS[idx % len(FLAVOURS)]}): "
                f"{np.count_nonzero(got != want)} values differ, max "
                f"{np.abs(got.astype(int) - want).max()}")
            assert b.labels.tolist() == [label]
            seen.append(idx)
        assert seen == list(range(len(samples)))


# ---------------------------------------------------------------------------
# Distribution and determinism


def test_ranks_are_disjoint_and_cover_the_dataset(stoker, served, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    shards = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        with loader_for(stoker, served, epochs=1, seed=3) as loader:
            assert loader.rank == rank and loader.world_size == 2
            assert loader.info["shard_size"] == MAIN_N // 2
            shards.append([i for b in loader.iter_batches() for i in b.indices.tolist()])
    a, b = set(shards[0]), set(shards[1])
    assert len(shards[0]) == len(a) == MAIN_N // 2 and len(shards[1]) == len(b) == MAIN_N // 2
    assert not a & b
    assert a | b == set(range(MAIN_N))


def _all_batches(stoker, daemon, **kw):
    out = []
    with loader_for(stoker, daemon, **kw) as loader:
        for b in loader.iter_batches():
            out.append((b.images.clone().numpy(), b.labels.numpy().copy(), b.indices.copy()))
    return out


def test_same_seed_gives_identical_batches_with_1_and_3_workers(stoker, daemon_factory, data):
    kw = dict(epochs=1, seed=11, batch_size=12, size=96)
    one = daemon_factory(workers=1, data_root=data)
    a = _all_batches(stoker, one, **kw)
    one.stop()
    three = daemon_factory(workers=3, data_root=data)
    b = _all_batches(stoker, three, **kw)
    assert len(a) == len(b) == 5
    for (ia, la, xa), (ib, lb, xb) in zip(a, b):
        assert np.array_equal(xa, xb)
        assert np.array_equal(la, lb)
        assert ia.tobytes() == ib.tobytes()
    # And the seed matters.
    c = _all_batches(stoker, three, **dict(kw, seed=12))
    assert any(not np.array_equal(x[2], y[2]) for x, y in zip(a, c))


# ---------------------------------------------------------------------------
# Zero copy and the ring


def shm_mapping(ring_name):
    """(start, end) of this process's mapping of the ring (a memfd)."""
    span = ring_mapping(ring_name)
    assert span is not None, f"{ring_name} is not mapped"
    return span


def test_zero_copy_views_outlive_later_batches_and_close(stoker, served):
    loader = loader_for(stoker, served, ring_slots=4, epochs=None, size=64, batch_size=20)
    lo, hi = shm_mapping(loader.info["ring_name"])
    for kept, kept_labels in loader:  # 3 batches per epoch
        pass
    ref = kept.clone()
    assert lo <= kept.data_ptr() and kept.data_ptr() + kept.numel() <= hi, "not a ring view"
    arr = kept.numpy()
    assert not arr.flags.owndata
    # The ring reuses its slots in order: 3 more batches can pass while one is kept.
    it = iter(loader)
    for _ in range(3):
        images, _ = next(it)
        assert lo <= images.data_ptr() < hi and images.data_ptr() != kept.data_ptr()
        del images
    assert torch.equal(kept, ref)
    loader.close()
    gc.collect()
    assert torch.equal(kept, ref), "a kept batch changed after close()"
    assert int(kept.sum()) == int(ref.sum())


def test_native_images_are_one_array_over_the_slot_owned_by_a_capsule(stoker, served):
    session = stoker.Client(served.socket).attach("main", batch_size=5, pipeline={"size": [40, 48]},
                                                  epochs=1, ring_slots=3)
    fields, indices, planned, statuses, epoch, bie, seq = session.next(10000)
    assert list(fields) == ["image", "label"]  # ring_layout.h's fields, in the ring's order
    (images, shapes), (labels, label_shapes) = fields["image"], fields["label"]
    assert shapes.tolist() == [[40, 48, 3]] * 5 and label_shapes.shape == (5, 0)
    assert [f[0] for f in session.info["fields"]] == ["image", "label"]
    assert session.info["fields"][0] == ("image", "uint8", (40, 48, 3), True)
    assert session.info["fields"][1] == ("label", "int64", (), True)
    assert images.shape == (5, 40, 48, 3) and images.dtype == np.uint8
    assert type(images.base).__name__ == "PyCapsule"
    assert images.flags.c_contiguous and images.flags.writeable and not images.flags.owndata
    assert labels.dtype == np.int64 and indices.dtype == np.int64 and planned.dtype == np.int64
    assert statuses.dtype == np.int32 and (epoch, bie, seq) == (0, 0, 0)
    view = images[2:4]  # a numpy view keeps the lease too
    del images
    assert view.sum() > 0
    session.detach()
    assert view.shape == (2, 40, 48, 3) and view.sum() > 0  # readable after detach
    with pytest.raises(stoker.StokerError, match="detached"):
        session.next()


def test_a_forked_child_leaves_the_parents_session_alone(stoker, served):
    """A fork (a DataLoader worker, a subprocess helper) inherits the session and
    its batches. Dropping them in the child must not free the parent's slots (the
    daemon would refill a slot the parent still reads), and the child can neither
    take the parent's batches nor detach its session."""
    session = stoker.Client(served.socket).attach("main", batch_size=2, pipeline={"size": 32},
                                                  ring_slots=2, shuffle=False)
    images = session.next(10000)[0]["image"][0]
    saved = images.copy()
    pid = os.fork()
    if pid == 0:  # the child: only os._exit leaves it
        code = 0
        try:
            try:
                session.next(1000)
                code = 3
            except stoker.StokerError as e:
                code = 0 if "fork" in str(e) else 4
            session.detach()
            del images
            gc.collect()
        except BaseException:  # noqa: BLE001 (a distinct exit code says it)
            code = 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    second = session.next(10000)  # the other slot
    time.sleep(1.0)  # were slot 0 freed, the daemon would refill it with batch 2 now
    assert np.array_equal(images, saved), "the parent's batch changed under it"
    del images, second
    third = session.next(10000)
    assert third[-1] == 2  # the session goes on: batch 2
    session.detach()


def test_copy_true_gives_private_tensors(stoker, served):
    with loader_for(stoker, served, ring_slots=2, epochs=None, size=32, copy=True) as loader:
        it = iter(loader)
        held = [next(it)[0] for _ in range(5)]  # more than the ring's slots: no stall
        assert all(h.numpy().base is None or type(h.numpy().base).__name__ != "PyCapsule"
                   for h in held)


def test_holding_every_slot_raises_instead_of_hanging(stoker, served):
    with loader_for(stoker, served, ring_slots=2, epochs=None, size=32, batch_size=4,
                    timeout_ms=-1) as loader:
        it = iter(loader)
        a, _ = next(it)
        b, _ = next(it)
        t0 = time.monotonic()
        with pytest.raises(stoker.RingExhaustedError, match="ring slot") as ei:
            next(it)
        assert time.monotonic() - t0 < 2.0
        assert ei.value.code == "FAILED_PRECONDITION"
        del a  # one slot goes back: the loader goes on
        c, _ = next(it)
        assert c.shape == (4, 32, 32, 3)
        del b, c


def test_keeping_one_batch_while_the_ring_comes_around_raises(stoker, served):
    # Slots are reused in order, so a batch kept for ring_slots more batches
    # blocks the ring: a clear error, not a hang (timeout_ms=-1).
    with loader_for(stoker, served, ring_slots=3, epochs=None, size=32, batch_size=4,
                    timeout_ms=-1) as loader:
        it = iter(loader)
        kept, _ = next(it)
        next(it)
        next(it)
        t0 = time.monotonic()
        with pytest.raises(stoker.RingExhaustedError, match="held by batch 0"):
            next(it)
        assert time.monotonic() - t0 < 2.0
        del kept
        assert next(it)[0].shape == (4, 32, 32, 3)


def test_an_abandoned_epoch_is_served_again_whole_and_does_not_leak(stoker, served):
    # An iteration that stops early is undone: the next one serves the same
    # epoch again, whole (test_dropin.py has the DataLoader habits).
    # ring_slots=2 and 6 batches left: the loader re-attaches at epoch 0.
    with loader_for(stoker, served, ring_slots=2, epochs=3, size=32, seed=9) as loader:
        for n, (images, labels) in enumerate(loader):
            if n == 1:
                break
        order = [i for b in loader.iter_batches() for i in b.indices.tolist()]
        assert loader.epoch == 0 and sorted(order) == list(range(MAIN_N))
        for n, b in enumerate(loader.iter_batches()):
            if n == 6:
                break
        del b
        assert loader.epoch == 1
        assert [sum(1 for _ in loader) for _ in range(3)] == [8, 8, 0]  # epochs 1, 2, none
    # ring_slots=4 and 1 batch left: the same.
    with loader_for(stoker, served, ring_slots=4, epochs=2, size=32, seed=9) as loader:
        for n, (images, labels) in enumerate(loader):
            if n == 6:
                break
        del images, labels
        got = [(b.epoch, b.batch_in_epoch) for b in loader.iter_batches()]
        assert got == [(0, k) for k in range(8)]
        got = [(b.epoch, b.batch_in_epoch) for b in loader.iter_batches()]
        assert got == [(1, k) for k in range(8)]
    # The loop variable still alive after `break`, as it is in Python: the
    # epoch starts again anyway, whole, and the kept batch stays as it was.
    for stop_at in (4, 5):  # 3 and 2 batches left over, with 4 slots
        with loader_for(stoker, served, ring_slots=4, epochs=2, size=32, seed=9) as loader:
            for n, (images, labels) in enumerate(loader):
                if n == stop_at:
                    break
            kept = images.clone()
            got = [(b.epoch, b.batch_in_epoch) for b in loader.iter_batches()]
            assert got == [(0, k) for k in range(8)], stop_at
            assert torch.equal(images, kept)
            del images, labels


# ---------------------------------------------------------------------------
# Failed samples


def test_failed_sample_raises_sample_error_naming_the_file_under_error_policy(stoker, served):
    with loader_for(stoker, served, dataset="corrupt", batch_size=1, shuffle=False, epochs=1,
                    size=32, failure_policy="error") as loader:
        it = loader.iter_batches()
        got, errors = [], []
        for _ in range(len(loader)):
            try:
                got.append(int(next(it).indices[0]))
            except stoker.SampleError as e:
                errors.append(str(e))
        assert got == [0, 1, 3, 4]  # the session goes on after the failed batch
        assert len(errors) == 1 and "img_0001_bad.jpg" in errors[0], errors
        with pytest.raises(StopIteration):
            next(it)


def test_failed_sample_is_replaced_under_skip_policy(stoker, served):
    with loader_for(stoker, served, dataset="corrupt", batch_size=5, shuffle=False, epochs=1,
                    size=32) as loader:
        (b,) = list(loader.iter_batches())
        assert b.planned_indices.tolist() == [0, 1, 2, 3, 4]
        assert b.statuses.tolist() == [0, 0, 1, 0, 0]
        assert b.indices[2] != 2 and b.indices[2] in (0, 1, 3, 4)
        assert b.images.shape == (5, 32, 32, 3)


# ---------------------------------------------------------------------------
# Bad requests


def test_bad_requests_raise_invalid_request_and_the_daemon_keeps_serving(stoker, served):
    cases = [
        (dict(dataset="../outside"), "data root|leaves|outside"),
        (dict(dataset="link"), "data root|leaves|outside"),
        (dict(dataset="missing"), "not found|missing"),
        (dict(dataset="empty"), "no .jpg|empty|no "),
        (dict(dataset="empty_classes"), "no .jpg|empty|no "),
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=MAIN_N + 1, drop_last=True), "batch_size"),
        (dict(pipeline="bogus"), "pipeline"),
        (dict(dtype="int7"), "dtype"),
        (dict(layout="hwcn"), "layout"),
        (dict(ring_slots=1), "ring_slots"),
        (dict(rank=2, world_size=2), "rank"),
    ]
    for kw, pattern in cases:
        kw.setdefault("dataset", "main")
        with pytest.raises(stoker.InvalidRequestError, match=f"(?i){pattern}") as ei:
            with loader_for(stoker, served, epochs=1, **kw) as loader:
                next(iter(loader))
        assert isinstance(ei.value, ValueError) and isinstance(ei.value, stoker.StokerError)
        # The daemon is still there and serving.
        with loader_for(stoker, served, epochs=1, batch_size=4, size=32) as good:
            images, labels = next(iter(good))
            assert images.shape == (4, 32, 32, 3)
    # The same from the native layer, for a bad option the daemon itself checks.
    client = stoker.Client(served.socket)
    with pytest.raises(stoker.InvalidRequestError, match="pipeline.*bogus") as ei:
        client.attach("main", pipeline={"pipeline": "bogus"})
    with pytest.raises(stoker.InvalidRequestError) as ei:
        client.attach("main", pipeline={"pipeline": "decode", "max_decode_pixels": 2 ** 40})
    assert ei.value.code == "INVALID_ARGUMENT"
    with pytest.raises(stoker.InvalidRequestError, match="unknown attach option"):
        client.attach("main", batchsize=2)
    assert client.status()["state"] == "serving"
    assert served.health()


def _raw_rpc(socket: str, method: str, request: bytes):
    """Calls a stoker.v1.Stoker method with hand-serialized bytes (no stubs)."""
    grpc = pytest.importorskip("grpc")
    with grpc.insecure_channel("unix:" + socket) as ch:
        return ch.unary_unary(f"/stoker.v1.Stoker/{method}")(request, timeout=10)


def _string_field_1(value: bytes) -> bytes:
    """A message whose field 1 is the string `value` (protobuf wire format)."""
    n, varint = len(value), b""
    while True:
        byte, n = n & 0x7F, n >> 7
        varint += bytes([byte | (0x80 if n else 0)])
        if not n:
            break
    return b"\x0a" + varint + value


def test_a_huge_session_id_gets_a_short_not_found(served):
    grpc = pytest.importorskip("grpc")
    with pytest.raises(grpc.RpcError) as ei:
        _raw_rpc(served.socket, "Detach", _string_field_1(b"x" * (1 << 20)))
    # Not RESOURCE_EXHAUSTED for an error message too large for the trailers.
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND, ei.value
    assert "1048576 bytes" in ei.value.details() and len(ei.value.details()) < 200
    with pytest.raises(grpc.RpcError) as ei:
        _raw_rpc(served.socket, "Detach", _string_field_1(b"no-such-session"))
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no-such-session" in ei.value.details()


def test_socket_comes_from_the_environment(stoker, served, monkeypatch):
    monkeypatch.delenv("STOKER_SOCKET", raising=False)
    with pytest.raises(stoker.InvalidRequestError, match="STOKER_SOCKET"):
        stoker.Client()
    # A Loader without either starts a private daemon at first use
    # (test_private_daemon.py); nothing happens before.
    assert stoker.Loader("main").socket is None
    monkeypatch.setenv("STOKER_SOCKET", served.socket)
    with stoker.Loader("main", batch_size=4, size=32, epochs=1) as loader:
        assert loader.socket == served.socket
        assert len(loader) == MAIN_N // 4


# ---------------------------------------------------------------------------
# Client, sessions in status


def test_client_status_and_health(stoker, served, tmp_short):
    client = stoker.Client(served.socket)
    assert client.health() is True
    with loader_for(stoker, served, epochs=None, size=32, client_name="pytest-loader") as loader:
        next(iter(loader))
        st = client.status()
        assert st["state"] == "serving" and len(st["workers"]) == 2
        mine = [s for s in st.get("sessions", []) if s["client_name"] == "pytest-loader"]
        assert len(mine) == 1 and mine[0]["client_pid"] == os.getpid()
    wait_until(lambda: not any(s["client_name"] == "pytest-loader"
                               for s in client.status().get("sessions", [])),
               5, "the closed loader's session to leave the daemon's status")
    nobody = stoker.Client(os.path.join(tmp_short, "nobody.sock"), rpc_timeout_ms=2000)
    assert nobody.health() is False
    with pytest.raises(stoker.DaemonUnavailableError):
        nobody.status()
    with pytest.raises(stoker.DaemonUnavailableError):
        stoker.Loader("main", socket=nobody.socket).attach()


# ---------------------------------------------------------------------------
# A daemon that dies


def test_daemon_killed_while_waiting_raises_daemon_unavailable(stoker, daemon_factory, data):
    d = daemon_factory(workers=1, data_root=data,
                       extra_args=["--fault-hang-substring", "hangme"])
    loader = loader_for(stoker, d, dataset="hang", batch_size=2, epochs=None, timeout_ms=-1)
    loader.attach()  # the workers hang on every file of 'hang': next() waits
    # next() waits without the GIL: another Python thread runs meanwhile.
    ticks, done = [0], threading.Event()

    def spin():
        while not done.is_set():
            ticks[0] += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(stoker.StokerTimeoutError) as ei:
            loader._session.next(300)
    finally:
        done.set()
        spinner.join()
    assert isinstance(ei.value, TimeoutError) and ei.value.code == "DEADLINE_EXCEEDED"
    assert 0.25 < time.monotonic() - t0 < 3
    assert ticks[0] > 10000, "next() held the GIL while waiting"
    killed_at = []

    def kill():
        killed_at.append(time.monotonic())
        d.kill()

    timer = threading.Timer(0.5, kill)
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(stoker.DaemonUnavailableError) as ei:
            next(iter(loader))
    finally:
        timer.join()
    noticed = time.monotonic() - killed_at[0]
    assert time.monotonic() - t0 >= 0.5
    assert noticed < 5.0, f"took {noticed:.2f} s to notice the daemon's death"
    print(f"daemon death noticed in {noticed * 1000:.0f} ms: {ei.value}")
    loader.close()  # detaching from a dead daemon is not an error
