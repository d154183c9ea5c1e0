"""stoker.Loader as a drop-in for torch's DataLoader: the habits of real
training scripts work, or fail loudly (issue 13).

One module daemon serves a small ImageFolder (3 classes of 8 photos, batches
of 4: 6 batches per epoch) to most tests.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import threading
import time
import warnings

import numpy as np
import pytest

from conftest import make_dataset

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")
datasets = pytest.importorskip("torchvision.datasets")

CLASSES, PER_CLASS, BATCH = 3, 8, 4
N = CLASSES * PER_CLASS
BPE = N // BATCH  # 6


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    top = str(tmp_path_factory.mktemp("dropin"))
    make_dataset(os.path.join(top, "set"), classes=CLASSES, per_class=PER_CLASS,
                 sizes=(40, 120), seed=13, class_prefix="kind_")
    return top


@pytest.fixture(scope="module")
def served(module_daemon_factory, root):
    return module_daemon_factory(workers=2, data_root=root)


@pytest.fixture(scope="module")
def folder(root):
    return os.path.join(root, "set")


def loader_for(stoker, served, folder, **kw):
    kw.setdefault("batch_size", BATCH)
    kw.setdefault("size", 32)
    kw.setdefault("timeout_ms", 30000)
    kw.setdefault("seed", 5)
    return stoker.Loader(folder, socket=served.socket, **kw)


def positions(it):
    return [(b.epoch, b.batch_in_epoch) for b in it]


# ---------------------------------------------------------------------------
# 1. A partly read epoch is served again, whole


def test_a_peek_then_two_epochs_each_yield_a_whole_epoch(stoker, served, folder):
    with loader_for(stoker, served, folder, epochs=2) as loader:
        x, y = next(iter(loader))  # a look at the shapes
        peeked = loader.last_indices.copy()
        assert x.shape == (BATCH, 32, 32, 3) and y.shape == (BATCH,)
        assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["batch"] == 0
        epochs = []
        for epoch in range(2):
            order, first = [], None
            for images, labels in loader:
                order += loader.last_indices.tolist()
                first = loader.last_indices.copy() if first is None else first
            assert loader.epoch == epoch
            assert sorted(order) == list(range(N)), f"epoch {epoch} is not whole"
            epochs.append(len(order) // BATCH)
            if epoch == 0:
                assert np.array_equal(first, peeked), "the peek was not epoch 0's first batch"
        assert epochs == [BPE, BPE]
        assert list(loader) == []  # epochs=2: both served


def test_a_break_is_undone_and_state_points_at_the_next_start(stoker, served, folder):
    with loader_for(stoker, served, folder, epochs=3, ring_slots=3) as loader:
        for n, b in enumerate(loader.iter_batches()):
            if n == 2:
                break
        assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (0, 0)
        # The loop variable still holds a batch of the abandoned session.
        kept = b.images.clone()
        assert positions(loader.iter_batches()) == [(0, k) for k in range(BPE)]
        assert torch.equal(b.images, kept)
        del b
        # An epoch whose batches were all yielded is served, StopIteration or not.
        for _n, _batch in zip(range(BPE), loader):
            pass
        del _batch
        assert loader.state_dict()["epoch"] == 2
        assert positions(loader.iter_batches()) == [(2, k) for k in range(BPE)]
        assert list(loader) == []


def test_a_break_after_a_restored_state_resumes_there_again(stoker, served, folder):
    with loader_for(stoker, served, folder, epochs=None) as loader:
        loader.load_state_dict(dict(loader.state_dict(), epoch=1, batch=3))
        it = loader.iter_batches()
        assert positions([next(it)]) == [(1, 3)]
        del it
        assert loader.state_dict()["epoch"] == 1 and loader.state_dict()["batch"] == 3
        assert positions(loader.iter_batches()) == [(1, k) for k in range(3, BPE)]
        assert positions(loader.iter_batches()) == [(2, k) for k in range(BPE)]


def test_breaking_the_same_epoch_twice_warns_once_to_call_set_epoch(stoker, served, folder):
    with loader_for(stoker, served, folder, epochs=None) as loader:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(4):  # a script that stops each epoch after 2 steps
                for n, _batch in enumerate(loader):
                    if n == 1:
                        break
            assert loader.epoch == 0
        said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(said) == 1 and "set_epoch" in said[0], said
    with loader_for(stoker, served, folder, epochs=None) as loader:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for epoch in range(3):  # the same, with set_epoch: no warning
                loader.set_epoch(epoch)
                for n, _batch in enumerate(loader):
                    if n == 1:
                        break
                assert loader.epoch == epoch


# ---------------------------------------------------------------------------
# 2. One iteration at a time


def test_a_second_thread_iterating_the_same_loader_raises(stoker, served, folder):
    with loader_for(stoker, served, folder, epochs=1) as loader:
        started, go_on = threading.Event(), threading.Event()
        got, errors = [], []

        def first():
            try:
                for n, b in enumerate(loader.iter_batches()):
                    got.append((b.epoch, b.batch_in_epoch))
                    if n == 0:
                        started.set()
                        go_on.wait(30)
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(e)
                started.set()

        t = threading.Thread(target=first)
        t.start()
        assert started.wait(30)
        try:
            with pytest.raises(stoker.ConcurrentIterationError, match="its own Loader"):
                next(iter(loader))
        finally:
            go_on.set()
            t.join(60)
        assert not errors, errors
        assert got == [(0, k) for k in range(BPE)], "the first thread's epoch was cut"
        assert issubclass(stoker.ConcurrentIterationError, stoker.StokerError)


def test_a_superseded_iterator_raises_when_advanced(stoker, served, folder):
    with loader_for(stoker, served, folder, epochs=None) as loader:
        old = iter(loader)
        next(old)
        new = loader.iter_batches()
        assert positions([next(new)]) == [(0, 0)]  # the same epoch, from its start
        with pytest.raises(stoker.ConcurrentIterationError, match="newer iteration"):
            next(old)
        assert positions([next(new)]) == [(0, 1)]  # the new one goes on


# ---------------------------------------------------------------------------
# 3. A forked child


def test_a_forked_child_using_the_parents_loader_raises_at_once(stoker, served, folder):
    attached = loader_for(stoker, served, folder, epochs=None)
    assert len(attached) == BPE
    next(iter(attached))
    lazy = loader_for(stoker, served, folder, epochs=None)  # never attached here
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only os._exit leaves it
        out = []
        try:
            for what, call in (("iter", lambda: next(iter(lazy))),
                               ("len", lambda: len(lazy)),
                               ("attach", lazy.attach),
                               ("next", lambda: next(iter(attached))),
                               ("len-attached", lambda: len(attached))):
                try:
                    call()
                    out.append(f"{what}: no error")
                except stoker.StokerError as e:
                    ok = "in the child" in str(e) and "pickl" in str(e)
                    out.append(f"{what}: {'ok' if ok else repr(e)}")
        except BaseException as e:  # noqa: BLE001
            out.append(f"crash: {e!r}")
        os.write(w, "\n".join(out).encode())
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    report = os.read(r, 65536).decode().splitlines()
    os.close(r)
    assert report == [f"{w}: ok" for w in ("iter", "len", "attach", "next", "len-attached")]
    # The parent's loaders carry on.
    assert next(iter(attached))[0].shape == (BATCH, 32, 32, 3)
    attached.close()
    lazy.close()


# ---------------------------------------------------------------------------
# 4. Pickling


def _spawned_child(blob, queue):
    try:
        loader = pickle.loads(blob)
        with loader:
            got = [(b.epoch, b.batch_in_epoch, b.indices.tolist(), float(b.images.sum()))
                   for b in loader.iter_batches()]
        queue.put(got)
    except BaseException as e:  # noqa: BLE001
        queue.put(repr(e))


def test_a_pickled_loader_continues_where_the_parent_stood(stoker, served, folder):
    tf = T.Compose([T.RandomResizedCrop(24), T.ToTensor(), T.Normalize((0.5,), (0.5,))])
    loader = stoker.Loader(folder, socket=served.socket, batch_size=BATCH, transform=tf,
                           seed=3, timeout_ms=30000)
    assert len(loader) == BPE
    for _batch in loader:
        pass
    del _batch
    it = loader.iter_batches()
    next(it), next(it)  # epoch 1, batches 0 and 1: the child goes on at batch 2
    blob = pickle.dumps(loader)
    again = pickle.loads(blob)  # in process: the same configuration and position
    assert again.state_dict() == dict(loader.state_dict(), dataset_size=None)  # not attached
    assert again.batch_size == BATCH and again.dataset_path == folder
    again.close()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_spawned_child, args=(blob, queue))
    child.start()
    try:
        got = queue.get(timeout=120)
    finally:
        child.join(60)
    want = [(b.epoch, b.batch_in_epoch, b.indices.tolist(), float(b.images.sum()))
            for b in it]
    assert isinstance(got, list), got
    assert [g[:3] for g in got] == [w[:3] for w in want]
    assert [g[0:2] for g in got] == [(1, k) for k in range(2, BPE)]
    assert np.allclose([g[3] for g in got], [w[3] for w in want])
    loader.close()


def test_a_pickled_private_loader_starts_its_own_daemon(stoker, folder, monkeypatch):
    monkeypatch.delenv("STOKER_SOCKET", raising=False)
    with stoker.Loader(folder, batch_size=BATCH, size=32, epochs=1, num_workers=1) as loader:
        assert len(loader) == BPE
        again = pickle.loads(pickle.dumps(loader))
        with again:
            assert positions(again.iter_batches()) == [(0, k) for k in range(BPE)]


def test_num_workers_zero_means_one_decode_process(stoker, folder, monkeypatch):
    # DataLoader's "load in the main process": the daemon always decodes.
    monkeypatch.delenv("STOKER_SOCKET", raising=False)
    with stoker.Loader(folder, batch_size=BATCH, size=32, epochs=1, num_workers=0) as loader:
        assert positions(loader.iter_batches()) == [(0, k) for k in range(BPE)]
        assert len(stoker.Client(loader.socket).status()["workers"]) == 1
    with pytest.raises(stoker.InvalidRequestError, match="num_workers"):
        stoker.Loader(folder, num_workers=-1)


# ---------------------------------------------------------------------------
# 5, 6. loader.dataset


def test_loader_dataset_has_imagefolders_attributes(stoker, served, folder):
    ref = datasets.ImageFolder(folder)
    with loader_for(stoker, served, folder, epochs=1) as loader:
        ds = loader.dataset
        assert loader.dataset_path == folder and folder in repr(loader)
        assert len(ds) == len(ref) == N
        assert ds.root == ref.root
        assert ds.classes == ref.classes and ds.class_to_idx == ref.class_to_idx
        assert ds.samples == ref.samples and ds.imgs == ref.imgs
        assert ds.targets == ref.targets


def test_an_imagefolder_object_is_accepted_as_the_dataset(stoker, served, folder):
    tf = T.Compose([T.Resize(36), T.CenterCrop(32), T.ToTensor(), T.Normalize((0.5,), (0.5,))])
    ds = datasets.ImageFolder(folder, transform=tf)
    common = dict(socket=served.socket, batch_size=BATCH, epochs=1, seed=2, shuffle=False)
    with stoker.Loader(ds, **common) as a, \
            stoker.Loader(folder, transform=tf, **common) as b:
        assert a.dataset is ds and a.dataset_path == folder
        assert a.class_names == ds.classes
        n = 0
        for (xa, ya), (xb, yb) in zip(a, b):
            assert xa.shape == (BATCH, 3, 32, 32) and xa.dtype == torch.float32
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
            n += 1
        assert n == BPE
    # Without a transform of its own, the pipeline keywords apply.
    with stoker.Loader(datasets.ImageFolder(folder), size=32, **common) as c:
        assert next(iter(c))[0].shape == (BATCH, 32, 32, 3)


def _tensors():
    return torch.utils.data.TensorDataset(torch.zeros(4, 3, 8, 8), torch.zeros(4))


@pytest.mark.parametrize("make,match", [
    (lambda f: datasets.ImageFolder(f, target_transform=int), "target_transform"),
    (lambda f: datasets.ImageFolder(f, loader=lambda p: p), "loader"),
    (lambda f: datasets.ImageFolder(f, is_valid_file=lambda p: p.endswith(".jpg")),
     "is_valid_file"),
    (lambda f: _tensors(), "image folders, manifests and WebDataset shards"),
])
def test_a_dataset_object_that_cannot_be_honoured_is_refused(stoker, folder, make, match):
    with pytest.raises(stoker.InvalidRequestError, match=match):
        stoker.Loader(make(folder), socket="/nonexistent.sock")


def test_a_transform_on_the_dataset_and_as_keyword_is_refused(stoker, folder):
    tf = T.Compose([T.RandomResizedCrop(32), T.ToTensor()])
    with pytest.raises(stoker.InvalidRequestError, match="both"):
        stoker.Loader(datasets.ImageFolder(folder, transform=tf), transform=tf,
                      socket="/nonexistent.sock")


def test_an_imagefolder_that_differs_from_the_daemons_is_refused(stoker, served, root):
    fresh = os.path.join(root, "grown")
    make_dataset(fresh, classes=2, per_class=3, sizes=(40, 60), seed=4)
    ds = datasets.ImageFolder(fresh)
    make_dataset(os.path.join(fresh, "class_99"), classes=1, per_class=2, sizes=(40, 60))
    shutil.move(os.path.join(fresh, "class_99", "class_00"), os.path.join(fresh, "zzz"))
    shutil.rmtree(os.path.join(fresh, "class_99"))
    with pytest.raises(stoker.InvalidRequestError, match="(?s)6 samples.*8 samples|8.*6"):
        with stoker.Loader(ds, socket=served.socket, batch_size=2, size=32) as ld:
            len(ld)


# ---------------------------------------------------------------------------
# 7. DataLoader's keywords


def test_dataloader_keywords_are_accepted_and_mapped(stoker, served, folder):
    with loader_for(stoker, served, folder, epochs=1, prefetch_factor=3,
                    persistent_workers=True, sampler=None, collate_fn=None, timeout=0) as ld:
        assert ld.info["ring_slots"] == 4  # 3 batches ahead of the one in use
    with stoker.Loader(folder, BATCH, True, socket=served.socket, size=32) as ld:
        assert ld.batch_size == BATCH and len(ld) == BPE
    with pytest.raises(stoker.InvalidRequestError, match="(?s)prefetch_factor.*ring_slots"):
        stoker.Loader(folder, socket=served.socket, prefetch_factor=2, ring_slots=4)


def test_pin_memory_pins_or_warns_once(stoker, served, folder):
    with loader_for(stoker, served, folder, epochs=2, pin_memory=True) as ld:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pinned = [x.is_pinned() for epoch in range(2) for x, _ in ld]
        said = [str(w.message) for w in caught if "pin_memory" in str(w.message)]
        if torch.cuda.is_available():
            assert not said and all(pinned)
        else:
            assert len(said) == 1 and "device='cuda'" in said[0], said
        assert len(pinned) == 2 * BPE


@pytest.mark.parametrize("keyword,value,match", [
    ("sampler", object(), "shuffle.*seed.*rank.*world_size"),
    ("batch_sampler", object(), "batch_size"),
    ("collate_fn", lambda b: b, "collate_fn"),
    ("worker_init_fn", lambda i: None, "worker_init_fn"),
    ("generator", object(), "seed"),
    ("timeout", 5, "timeout_ms"),
    ("multiprocessing_context", "spawn", "multiprocessing_context"),
    ("pin_memory_device", "cuda", "device"),
])
def test_other_dataloader_keywords_are_refused_naming_the_stoker_way(stoker, folder, keyword,
                                                                      value, match):
    with pytest.raises(stoker.InvalidRequestError, match=f"(?s){keyword}.*{match}"):
        stoker.Loader(folder, socket="/nonexistent.sock", **{keyword: value})
    with pytest.raises(TypeError, match="bogus"):
        stoker.Loader(folder, socket="/nonexistent.sock", bogus=1)


# ---------------------------------------------------------------------------
# 8-11. Pipeline keywords and transforms


@pytest.mark.parametrize("kw,match", [
    (dict(size=128), "(?s)size.*RandomResizedCrop"),
    (dict(dtype="uint8"), "(?s)dtype.*ToTensor"),
    (dict(mean=(0.5, 0.5, 0.5)), "(?s)mean.*Normalize"),
    (dict(pipeline="eval"), "pipeline"),
    (dict(flip_prob=0.5), "(?s)flip_prob.*RandomHorizontalFlip"),
])
def test_a_pipeline_keyword_beside_a_transform_is_refused(stoker, folder, kw, match):
    tf = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize((0.5,), (0.5,))])
    with pytest.raises(stoker.InvalidRequestError, match=match):
        stoker.Loader(folder, socket="/nonexistent.sock", transform=tf, **kw)


@pytest.mark.parametrize("size", [0, -3, (0, 32), (32, -1), (32, True)])
def test_a_size_that_is_not_positive_is_refused(stoker, folder, size):
    with pytest.raises(stoker.InvalidRequestError, match="size"):
        stoker.Loader(folder, socket="/nonexistent.sock", size=size)


def test_a_one_value_mean_and_std_are_broadcast(stoker, served, folder):
    from stoker._transforms import loader_options
    o = loader_options([T.RandomResizedCrop(32), T.ToTensor(), T.Normalize((0.5,), (0.25,))])
    assert o["mean"] == [0.5] * 3 and o["std"] == [0.25] * 3
    with pytest.raises(stoker.InvalidRequestError, match="Normalize"):
        loader_options([T.RandomResizedCrop(32), T.ToTensor(), T.Normalize((0.5, 0.5), (1, 1))])
    with pytest.raises(stoker.InvalidRequestError, match="mean"):
        stoker.Loader(folder, socket="/nonexistent.sock", mean=(0.5, 0.5), dtype="float32")
    common = dict(epochs=1, shuffle=False, dtype="float32", pipeline="eval")
    with loader_for(stoker, served, folder, mean=(0.5,), std=[0.5], **common) as a, \
            loader_for(stoker, served, folder, mean=[0.5] * 3, std=[0.5] * 3, **common) as b:
        (xa, _), (xb, _) = next(iter(a)), next(iter(b))
        assert torch.equal(xa, xb) and xa.min() < -0.5


def test_a_transform_without_a_fixed_size_step_says_how_to_batch(stoker, served, folder):
    with pytest.raises(stoker.InvalidRequestError,
                       match="(?s)RandomResizedCrop.*Resize.*CenterCrop.*batch_size=1"):
        stoker.Loader(folder, socket=served.socket, transform=T.ToTensor(), batch_size=4)
    with stoker.Loader(folder, socket=served.socket, transform=T.ToTensor(), batch_size=1,
                       epochs=1, shuffle=False) as ld:
        (img,), _ = next(iter(ld))
        assert img.dtype == torch.float32 and img.shape[0] == 3


# ---------------------------------------------------------------------------
# 12. Pass-through keywords


def test_decode_keywords_reach_the_daemon(stoker, served, folder):
    with loader_for(stoker, served, folder, epochs=1) as ld:
        eff = ld.info["effective_pipeline"]
        # The spec's JSON holds the fields that are set: false ones are absent.
        assert "exact_decode" not in eff and "apply_exif_orientation" not in eff
        assert ld.effective_pipeline == eff  # what the Loader computed is what was run
    with loader_for(stoker, served, folder, epochs=1, exact_decode=True,
                    apply_exif_orientation=True, allow_empty=True,
                    skip_unsupported_formats=True) as ld:
        eff = ld.info["effective_pipeline"]
        assert eff["exact_decode"] is True and eff["apply_exif_orientation"] is True
        assert len(ld) == BPE



def test_a_distributed_sampler_is_read_and_its_set_epoch_followed(stoker, served, folder):
    from torch.utils.data import DistributedSampler, RandomSampler
    ds = datasets.ImageFolder(folder)
    sampler = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=7)
    with stoker.Loader(ds, BATCH, False, sampler=sampler, socket=served.socket, size=32,
                       timeout_ms=30000) as ld:
        assert (ld.world_size, ld.rank) == (2, 1)
        assert ld.info["shard_size"] == N // 2 and len(ld) == N // 2 // BATCH
        sampler.set_epoch(3)
        assert {b.epoch for b in ld.iter_batches()} == {3}
        assert {b.epoch for b in ld.iter_batches()} == {4}  # then in turn, as usual
        sampler.set_epoch(1)
        assert {b.epoch for b in ld.iter_batches()} == {1}
    with stoker.Loader(ds, BATCH, sampler=DistributedSampler(ds, num_replicas=2, rank=0,
                                                             shuffle=False, seed=7),
                       socket=served.socket, size=32, epochs=1) as a, \
            stoker.Loader(folder, BATCH, False, seed=7, world_size=2, rank=0,
                          socket=served.socket, size=32, epochs=1) as b:
        assert ([x.indices.tolist() for x in a.iter_batches()]
                == [x.indices.tolist() for x in b.iter_batches()])
    with pytest.raises(stoker.InvalidRequestError, match="(?s)sampler.*shuffle"):
        stoker.Loader(ds, sampler=RandomSampler(ds, replacement=True),
                      socket="/nonexistent.sock")
    with pytest.raises(stoker.InvalidRequestError, match="disagree"):
        stoker.Loader(ds, sampler=sampler, world_size=4, socket="/nonexistent.sock")
