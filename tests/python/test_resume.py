"""Exact resume: Loader.state_dict / load_state_dict / set_epoch.

The reference is an uninterrupted run; a resumed run (another process's
loader, a restarted daemon, another worker count) must yield the same
batches from the saved position on: the same sample indices and the same
bytes, replacements of a corrupt file included.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from conftest import make_dataset

pytest.importorskip("torch")

BATCH = 8
SIZE = 48


@pytest.fixture(scope="module")
def resume_data(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("resume"))
    data = os.path.join(root, "set")
    make_dataset(data, classes=3, per_class=14, sizes=(40, 160), seed=7)
    with open(os.path.join(data, "class_01", "img_0005.jpg"), "r+b") as f:
        f.truncate(300)  # a corrupt member: replaced, deterministically, under 'skip'
    return root


def _loader(stoker, daemon, **kw):
    opts = dict(socket=daemon.socket, batch_size=BATCH, pipeline="train", size=SIZE,
                seed=11, shuffle=True, epochs=None, failure_policy="skip", ring_slots=3)
    opts.update(kw)
    return stoker.Loader(os.path.join(daemon.data_root, "set"), **opts)


def _take(it, n):
    out = []
    for _ in range(n):
        v = next(it)
        out.append((v.epoch, v.batch_in_epoch, v.indices.copy(), v.images.numpy().copy(),
                    v.labels.numpy().copy(), v.statuses.copy()))
        del v
    return out


def _epochs(loader, n_epochs):
    out = []
    for _ in range(n_epochs):
        out += _take(iter(loader.iter_batches()), len(loader))
    return out


def _assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g[:2] == w[:2], f"position {g[:2]} != {w[:2]}"
        np.testing.assert_array_equal(g[2], w[2], err_msg=f"indices of batch {g[:2]}")
        np.testing.assert_array_equal(g[4], w[4], err_msg=f"labels of batch {g[:2]}")
        np.testing.assert_array_equal(g[5], w[5], err_msg=f"statuses of batch {g[:2]}")
        assert np.array_equal(g[3], w[3]), f"pixels of batch {g[:2]} differ"


def test_resume_after_a_daemon_restart_with_another_worker_count(stoker, daemon_factory,
                                                                 resume_data):
    ref_daemon = daemon_factory(workers=2, data_root=resume_data)
    with _loader(stoker, ref_daemon) as ld:
        bpe = len(ld)
        want = _epochs(ld, 2)
    assert bpe == 6  # 42 samples, batch 8: 5 full + 1 short
    ref_daemon.stop()

    # Stop mid-epoch 0, after 4 batches; keep the token as a checkpoint would.
    d1 = daemon_factory(workers=1, data_root=resume_data)
    with _loader(stoker, d1) as ld:
        it = iter(ld.iter_batches())
        first = _take(it, 4)
        token = json.loads(json.dumps(ld.state_dict()))
        _take(it, 1)  # prefetched and consumed after the checkpoint: must not matter
    _assert_same(first, want[:4])
    assert (token["epoch"], token["batch"], token["seed"]) == (0, 4, 11)
    d1.stop()

    # A new daemon with 3 workers, a new loader with another seed: the token wins.
    d3 = daemon_factory(workers=3, data_root=resume_data)
    with _loader(stoker, d3, seed=999) as ld:
        ld.load_state_dict(token)
        rest = _take(iter(ld.iter_batches()), bpe - 4)  # the rest of epoch 0
        assert ld.state_dict()["epoch"] == 1 and ld.state_dict()["batch"] == 0
        rest += _epochs(ld, 1)  # then epoch 1, whole
    _assert_same(rest, want[4:])
    # The corrupt file was met, and replaced, in both epochs.
    assert sum(int((w[5] == 1).sum()) for w in want) == 2


def test_set_epoch_moves_back_and_forth_and_state_follows(stoker, daemon_factory, resume_data):
    d = daemon_factory(workers=2, data_root=resume_data)
    with _loader(stoker, d) as ld:
        want = _epochs(ld, 3)
    bpe = len(want) // 3
    with _loader(stoker, d) as ld:
        ld.set_epoch(2)
        got2 = _epochs(ld, 1)
        ld.set_epoch(0)  # back: the session restarts at epoch 0
        it = iter(ld.iter_batches())
        got0 = _take(it, 2)
        state = ld.state_dict()
        ld.set_epoch(1)  # leaves epoch 0 midway: the next iteration serves epoch 1
        got1 = _epochs(ld, 1)
    _assert_same(got2, want[2 * bpe:])
    _assert_same(got0, want[:2])
    _assert_same(got1, want[bpe:2 * bpe])
    assert (state["epoch"], state["batch"]) == (0, 2)


@pytest.fixture(scope="module")
def served(module_daemon_factory, resume_data):
    return module_daemon_factory(workers=2, data_root=resume_data)


def test_state_between_epochs_points_at_the_next_epoch(stoker, served):
    ld = _loader(stoker, served, batch_size=10)
    with ld:
        assert ld.state_dict()["epoch"] == 0 and ld.state_dict()["batch"] == 0
        for _ in ld:
            pass
        s = ld.state_dict()
        assert (s["epoch"], s["batch"]) == (1, 0)
        assert s["dataset_size"] == ld.info["dataset_size"]
        it = iter(ld)
        next(it)
        assert (ld.state_dict()["epoch"], ld.state_dict()["batch"]) == (1, 1)


def test_a_token_saved_after_the_last_epoch_resumes_to_nothing(stoker, served):
    with _loader(stoker, served, batch_size=10, epochs=2) as ld:
        for _ in range(2):
            for _ in ld:
                pass
        token = ld.state_dict()
    assert (token["epoch"], token["batch"]) == (2, 0)
    with _loader(stoker, served, batch_size=10, epochs=2) as again:
        again.load_state_dict(token)
        assert len(again) == 5  # 42 samples in batches of 10, the last one short
        assert len(iter(again)) == 0
        assert list(again) == []
        assert list(again) == []
    # A token from the middle of an epoch: the first iteration is the rest.
    with _loader(stoker, served, batch_size=10, epochs=2) as again:
        again.load_state_dict(dict(token, epoch=1, batch=3))
        it = iter(again)
        assert len(it) == 2
        assert len(list(it)) == 2


def test_a_token_that_does_not_fit_is_refused(stoker, served):
    with _loader(stoker, served, batch_size=10) as ld:
        assert ld.state_dict()["dataset_size"] is None  # not attached yet
        ld.info  # noqa: B018 (attach: the token then carries the dataset size)
        token = ld.state_dict()
    with _loader(stoker, served, batch_size=12) as ld:
        with pytest.raises(stoker.InvalidRequestError, match="batch_size=10"):
            ld.load_state_dict(token)
    with _loader(stoker, served, batch_size=10) as ld:
        with pytest.raises(stoker.InvalidRequestError, match="not a stoker.Loader state"):
            ld.load_state_dict({"epoch": 1})
        bad = dict(token, dataset_size=token["dataset_size"] + 1)
        ld.load_state_dict(bad)
        with pytest.raises(stoker.InvalidRequestError, match="dataset of"):
            next(iter(ld))
