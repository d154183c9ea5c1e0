"""WebDataset tar shards end to end, and the index cache, against the real daemon.

Shards are written with Python's tarfile (GNU format, as webdataset's
writers make them) from real JPEGs: key.jpg with key.cls or key.json.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from collections import Counter

import numpy as np
import pytest
from PIL import Image

from conftest import make_dataset

torch = pytest.importorskip("torch")

SHARDS, PER_SHARD = 4, 9


def write_shards(root, jpegs, bad_keys=(), truncate_last=False, pattern="train-{:04d}.tar"):
    """Packs `jpegs` [(path, label)] into SHARDS shards; returns {key: (label, bytes)}."""
    os.makedirs(root, exist_ok=True)
    samples = {}
    for s in range(SHARDS):
        path = os.path.join(root, pattern.format(s))
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
            for i in range(PER_SHARD):
                n = s * PER_SHARD + i
                src, label = jpegs[n]
                key = f"s{s}/sample{n:05d}"
                data = open(src, "rb").read()
                if key in bad_keys:
                    data = b"\xff\xd8\xff\xe0 not a JPEG at all" + bytes(500)
                members = [(key + ".jpg", data)]
                if n % 3 == 0:
                    members.append((key + ".json", json.dumps({"label": label}).encode()))
                else:
                    members.append((key + ".cls", f"{label}\n".encode()))
                members.append((key + ".txt", b"a caption, ignored"))
                for name, blob in members:
                    info = tarfile.TarInfo(name)
                    info.size = len(blob)
                    tar.addfile(info, io.BytesIO(blob))
                samples[key] = (label, data)
        if truncate_last and s == SHARDS - 1:
            with tarfile.open(path) as tar:
                last = [m for m in tar.getmembers() if m.name.endswith(".jpg")][-1]
            with open(path, "r+b") as f:  # cut in the middle of the last image
                f.truncate(last.offset_data + last.size // 2)
    return samples


@pytest.fixture(scope="module")
def shard_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("wds"))
    jpegs = make_dataset(os.path.join(root, "src"), classes=4, per_class=9, sizes=(40, 140),
                         seed=71)
    samples = write_shards(os.path.join(root, "shards"), jpegs)
    return root, samples, jpegs


def _keys_of(indices, n_per_shard=PER_SHARD):
    return [f"s{i // n_per_shard}/sample{i:05d}" for i in indices]


def test_shards_serve_every_sample_once_per_epoch_with_its_label(stoker, daemon_factory,
                                                                 shard_root):
    root, samples, _ = shard_root
    d = daemon_factory(workers=2, data_root=root)
    with stoker.Loader("shards/train-{0000..0003}.tar", socket=d.socket, batch_size=5,
                       size=32, epochs=2, seed=4) as ld:
        assert len(ld) == 8 and ld.info["dataset_size"] == 36
        per_epoch = Counter()
        for _ in range(2):
            for v in ld.iter_batches():
                keys = _keys_of(v.indices.tolist())
                assert v.labels.tolist() == [samples[k][0] for k in keys]
                assert (v.statuses == 0).all()
                per_epoch.update((v.epoch, i) for i in v.indices.tolist())
    for epoch in (0, 1):
        seen = sorted(i for (e, i) in per_epoch if e == epoch)
        assert seen == list(range(36)), f"epoch {epoch}"
    assert set(per_epoch.values()) == {1}


def test_shard_members_decode_exactly_as_pil(stoker, daemon_factory, shard_root):
    root, samples, _ = shard_root
    d = daemon_factory(workers=1, data_root=root)
    with stoker.Loader("shards/train-{0000..0003}.tar", socket=d.socket, batch_size=1,
                       pipeline="decode", shuffle=False, epochs=1) as ld:
        for n, (images, labels) in enumerate(ld):
            if n % 7:
                continue
            key = _keys_of([n])[0]
            want = np.asarray(Image.open(io.BytesIO(samples[key][1])).convert("RGB"))
            assert images[0].numpy().shape == want.shape
            assert np.array_equal(images[0].numpy(), want), key


def test_a_corrupt_member_and_a_truncated_shard_are_sample_failures(stoker, daemon_factory,
                                                                    tmp_path_factory):
    root = str(tmp_path_factory.mktemp("wdsbad"))
    jpegs = make_dataset(os.path.join(root, "src"), classes=2, per_class=18, sizes=(40, 90),
                         seed=72)
    write_shards(os.path.join(root, "shards"), jpegs, bad_keys=("s1/sample00011",),
                 truncate_last=True)
    d = daemon_factory(workers=2, data_root=root)
    pattern = "shards/train-{0000..0003}.tar"
    with stoker.Loader(pattern, socket=d.socket, batch_size=4, size=32, epochs=1,
                       failure_policy="skip", seed=1) as ld:
        statuses = Counter()
        for v in ld.iter_batches():
            statuses.update(v.statuses.tolist())
        n = ld.info["dataset_size"]
    # The truncated shard keeps its last, cut member; it fails like the corrupt one.
    assert n == 36
    assert statuses[1] == 2 and statuses[2] == 0 and sum(statuses.values()) == 36
    # The log names both members, shard and member name.
    log = d.log()
    assert re.search(r"train-0001\.tar:s1/sample00011\.jpg\) failed", log), log[-3000:]
    assert re.search(r"train-0003\.tar:s3/sample00035\.jpg\) failed: .*truncated shard", log)
    with stoker.Loader(pattern, socket=d.socket, batch_size=4, size=32, epochs=1,
                       failure_policy="error", shuffle=False) as ld:
        errors = []
        it = iter(ld)
        while True:
            try:
                next(it)
            except StopIteration:
                break
            except stoker.SampleError as e:
                errors.append(str(e))
        assert len(errors) == 2 and "sample00011.jpg" in errors[0]


def test_the_index_cache_survives_a_restart_and_follows_changes(stoker, daemon_factory,
                                                                tmp_path_factory):
    root = str(tmp_path_factory.mktemp("cache"))
    make_dataset(os.path.join(root, "folder"), classes=2, per_class=4, sizes=(40, 60), seed=73)
    past = 1_000_000_000  # mtimes well in the past: the index is not "racy"
    for dirpath, dirs, files in os.walk(root):
        for f in dirs + files:
            os.utime(os.path.join(dirpath, f), (past, past))
    cache = os.path.join(root, "..", os.path.basename(root) + "-idx")
    args = ["--index-cache", cache]
    d1 = daemon_factory(workers=1, data_root=root, extra_args=args)

    def size_via(d):
        with stoker.Loader("folder", socket=d.socket, batch_size=2, size=16, epochs=1) as ld:
            return ld.info["dataset_size"]

    assert size_via(d1) == 8
    assert "indexed dataset folder" in d1.log()
    d1.stop()
    d2 = daemon_factory(workers=1, data_root=root, extra_args=args)
    assert size_via(d2) == 8
    assert "loaded the cached index of dataset folder" in d2.log()
    # A new file in a class folder: the same daemon notices at the next attach.
    make_dataset(os.path.join(root, "folder"), classes=1, per_class=1, sizes=(40, 60), seed=74,
                 class_prefix="class_new_")
    assert size_via(d2) == 9
    assert "changed since it was indexed" in d2.log()


def test_a_private_daemon_serves_a_shard_pattern(stoker, shard_root, monkeypatch):
    root, samples, _ = shard_root
    monkeypatch.delenv("STOKER_SOCKET", raising=False)
    pattern = os.path.join(root, "shards", "train-{0000..0003}.tar")
    with stoker.Loader(pattern, batch_size=6, size=24, epochs=1, shuffle=False,
                       num_workers=1) as ld:
        labels = [int(x) for _, y in ld for x in y]
    assert labels == [samples[k][0] for k in _keys_of(range(36))]
