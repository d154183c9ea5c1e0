"""An evaluation pipeline's images kept in the prepared cache
(server/worker/image_entry.h), against a real daemon: a pipeline whose ops
all draw nothing (the eval preset: Resize + CenterCrop) is decoded once per
file; later epochs copy each output from its entry, the same pixels as the
uncached path; a changed file is decoded again; a random pipeline keeps
nothing.

That later epochs read the entries is shown by the files themselves: a
worker that computes an image writes its entry anew (a new file renamed
over the old one), so entries whose inodes and times stay put were read.
"""

import os

import numpy as np
import pytest

from conftest import make_dataset, write_jpeg, photo_like

torch = pytest.importorskip("torch")


def epoch(stoker, socket, root, **kw):
    out = []
    with stoker.Loader(root, socket=socket, batch_size=8, shuffle=False, epochs=1, **kw) as ld:
        for images, labels in ld:
            out.append((images.clone(), ld.last_indices.copy()))
    return out


def entries(cache):
    names = sorted(n for n in os.listdir(cache) if not n.startswith(".tmp"))
    return {n: (os.stat(cache / n).st_ino, os.stat(cache / n).st_mtime_ns) for n in names}


def test_eval_images_are_kept_and_served_again(stoker, daemon_factory, tmp_path):
    root = tmp_path / "data"
    files = make_dataset(str(root / "set"), classes=2, per_class=10, sizes=(48, 160), seed=3)
    cache = tmp_path / "prepared"
    cached = daemon_factory(workers=2, data_root=str(root),
                            extra_args=[f"--prepared-cache={cache}"])
    plain = daemon_factory(workers=2, data_root=str(root))
    kw = dict(pipeline="eval", size=40)
    want = epoch(stoker, plain.socket, "set", **kw)
    first = epoch(stoker, cached.socket, "set", **kw)
    made = entries(cache)
    assert len(made) == len(files) and all(n.endswith(".stki") for n in made)
    again = epoch(stoker, cached.socket, "set", **kw)
    assert entries(cache) == made  # read, not rewritten
    pc = {k: int(v) for k, v in stoker.Client(cached.socket).status()["prepared_cache"].items()
          if k != "dir"}  # (64-bit counters are JSON strings)
    assert pc["image_writes"] == len(files) and pc["image_hits"] == len(files)
    assert pc["entries"] == len(files) and pc.get("volume_hits", 0) == 0
    for runs in (first, again):
        for (a, ia), (b, ib) in zip(want, runs):
            assert np.array_equal(ia, ib) and torch.equal(a, b)
    # float32 output: another pipeline, other entries, the same values.
    f32 = epoch(stoker, cached.socket, "set", dtype="float32", **kw)
    assert len(entries(cache)) == 2 * len(files)
    f32_again = epoch(stoker, cached.socket, "set", dtype="float32", **kw)
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(f32, f32_again))

    # A changed file: decoded again (its entry rewritten), its new pixels served.
    path, _ = files[3]
    write_jpeg(path, photo_like(np.random.default_rng(77), 90, 70), quality=90)
    changed = epoch(stoker, cached.socket, "set", **kw)
    fresh = epoch(stoker, plain.socket, "set", **kw)
    assert torch.equal(changed[0][0], fresh[0][0])
    assert not torch.equal(changed[0][0][3], want[0][0][3])
    after = entries(cache)
    rewritten = [n for n in made if after.get(n) != made[n]]
    assert len(rewritten) == 1


def test_a_random_pipeline_keeps_nothing(stoker, daemon_factory, tmp_path):
    root = tmp_path / "data"
    make_dataset(str(root / "set"), classes=2, per_class=4, sizes=(48, 96), seed=4)
    cache = tmp_path / "prepared"
    d = daemon_factory(workers=1, data_root=str(root), extra_args=[f"--prepared-cache={cache}"])
    epoch(stoker, d.socket, "set", pipeline="train", size=32, seed=1)
    epoch(stoker, d.socket, "set", ops=[{"Resize": {"size": [40]}},
                                        {"RandomCrop": {"size": [32]}}], seed=1)
    assert entries(cache) == {}
    assert int(stoker.Client(d.socket).status()["prepared_cache"].get("image_writes", 0)) == 0
