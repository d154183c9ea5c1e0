"""Volume sessions end to end: a real stokerd serving a Decathlon
dataset.json of CT-like NIfTI volumes (bench/volume_corpus.py: int16 and uint16
with scl_inter, gzip'd, LPS and tilted affines) through stoker.volume's
MONAI transforms, to stoker.Loader.

  * every patch is a block of the prepared volume (the deterministic
    prefix as stoker-volume-tool computes it, which test_volume_ops.py
    checks against nibabel / MONAI's formulas), its label patch the same
    block of the prepared label, and RandCropByPosNegLabel's pos/neg
    centres land in foreground / background at the asked ratio;
  * each volume once per epoch, num_samples patches each, the same batches
    whatever the worker count;
  * the volume cache: later epochs read entries (the sources untouched), a
    changed file is prepared again (its new values served);
  * a corrupt volume or a label that does not match is a counted, named
    sample failure; bad transforms are refused naming the fix.
"""

import json
import os
import re
import shutil

import numpy as np
import pytest

from volume_corpus import ct_volume
from test_volume_ops import oblique_lps_affine, prefix

nib = pytest.importorskip("nibabel")
torch = pytest.importorskip("torch")

SPLEEN_PREFIX = ["Orientation:RAS", "Spacing:1.5,1.5,2", "ScaleIntensityRange:-57,164,0,1,clip",
                 "CropForeground"]


def spleen(V, patch=16, samples=3, pos=1.0, neg=1.0, extra=()):
    keys = ["image", "label"]
    return V.Compose([
        V.LoadImaged(keys=keys), V.EnsureChannelFirstd(keys=keys),
        V.Orientationd(keys=keys, axcodes="RAS"),
        V.Spacingd(keys=keys, pixdim=(1.5, 1.5, 2.0), mode=("bilinear", "nearest")),
        V.ScaleIntensityRanged(keys=["image"], a_min=-57, a_max=164, b_min=0.0, b_max=1.0,
                               clip=True),
        V.CropForegroundd(keys=keys, source_key="image"),
        V.RandCropByPosNegLabeld(keys=keys, label_key="label", spatial_size=(patch,) * 3,
                                 pos=pos, neg=neg, num_samples=samples, image_key="image",
                                 image_threshold=0),
        *extra])


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """data/Task09/dataset.json over 4 volumes (one uint16 + scl_inter, one
    tilted), and what the prefix makes of each: (root, dataset, prepared)."""
    root = tmp_path_factory.mktemp("vol") / "data"
    d = root / "Task09"
    (d / "imagesTr").mkdir(parents=True)
    (d / "labelsTr").mkdir()
    rng = np.random.default_rng(11)
    training = []
    for n, (shape, spacing) in enumerate([((64, 56, 14), (0.8, 0.8, 2.5)),
                                          ((60, 60, 12), (0.75, 0.75, 3.0)),
                                          ((56, 64, 16), (0.9, 0.9, 2.0)),
                                          ((64, 64, 10), (0.7, 0.7, 4.0))]):
        hu, label, aff = ct_volume(shape, rng, spacing)
        if n == 2:
            aff = oblique_lps_affine(spacing, theta=0.1)
        if n == 1:  # stored as scanners store unsigned data: uint16, scl_inter -1024
            img = nib.Nifti1Image((hu.astype(np.int32) + 1024).astype(np.uint16), aff)
            img.header.set_slope_inter(1.0, -1024.0)
        else:
            img = nib.Nifti1Image(hu, aff)
        nib.save(img, d / "imagesTr" / f"ct_{n}.nii.gz")
        nib.save(nib.Nifti1Image(label, aff), d / "labelsTr" / f"ct_{n}.nii.gz")
        training.append({"image": f"./imagesTr/ct_{n}.nii.gz", "label": f"./labelsTr/ct_{n}.nii.gz"})
    (d / "dataset.json").write_text(json.dumps({"name": "CT", "labels": {"0": "background",
                                                                         "1": "organ"},
                                                "training": training}))
    return root, d


def prepared(volume_tool, task, n, tmp_path):
    """Volume n after the spleen prefix: (image (i, j, k), label (i, j, k))."""
    _, d = task
    img, _ = prefix(volume_tool, d / "imagesTr" / f"ct_{n}.nii.gz", SPLEEN_PREFIX, tmp_path,
                    label=d / "labelsTr" / f"ct_{n}.nii.gz")
    lab = np.fromfile(tmp_path / "label.u8", np.uint8)
    shape = img.shape[1:]
    return img[0], lab.reshape(shape[2], shape[1], shape[0]).transpose(2, 1, 0)


def locate(patch, volume):
    """The corners where `patch` (x, y, z) is a block of `volume`."""
    p = patch.shape
    win = np.lib.stride_tricks.sliding_window_view(volume, p)
    hits = np.argwhere((win[..., 0, 0, 0] == patch[0, 0, 0]))
    return [tuple(h) for h in hits if np.array_equal(win[tuple(h)], patch)]


def epoch_batches(stoker, socket, dataset, compose, seed, epochs=1, **kw):
    out = []
    with stoker.Loader(dataset, transform=compose, socket=socket, batch_size=2, seed=seed,
                       epochs=epochs, **kw) as loader:
        for _ in range(epochs):  # one iteration an epoch, as DataLoader's
            for batch in loader:
                out.append((loader.last_indices.copy(), {k: v.clone() for k, v in batch.items()}))
    return out


def test_patches_are_blocks_of_the_prepared_volume(stoker, task, daemon_factory, volume_tool,
                                                    tmp_path):
    root, d = task
    daemon = daemon_factory(workers=2, data_root=str(root),
                            extra_args=[f"--prepared-cache={tmp_path / 'vcache'}"])
    from stoker import volume as V
    batches = epoch_batches(stoker, daemon.socket, "Task09/dataset.json", spleen(V), seed=3)
    assert len(batches) == 2
    seen = []
    refs = {n: prepared(volume_tool, task, n, tmp_path) for n in range(4)}
    fg_hits = 0
    for indices, b in batches:
        assert set(b) == {"image", "label"}
        assert b["image"].shape == (6, 1, 16, 16, 16) and b["image"].dtype == torch.float32
        assert b["label"].shape == (6, 1, 16, 16, 16) and b["label"].dtype == torch.uint8
        seen += indices.tolist()
        for s in range(6):
            n = int(indices[s // 3])
            img, lab = refs[n]
            patch = b["image"][s, 0].numpy()
            corners = locate(patch, img)
            assert corners, f"patch {s} of volume {n} is no block of its prepared volume"
            c = corners[0]
            block = lab[c[0]:c[0] + 16, c[1]:c[1] + 16, c[2]:c[2] + 16]
            assert np.array_equal(b["label"][s, 0].numpy(), block)
            fg_hits += int(b["label"][s, 0, 8, 8, 8] > 0 or b["label"][s, 0].numpy().any())
    assert sorted(seen) == [0, 1, 2, 3]  # each volume once
    assert fg_hits >= 3  # pos=1, neg=1: about half the patches hold the organ
    assert os.listdir(tmp_path / "vcache"), "no cache entry was written"


def test_same_batches_whatever_the_workers_and_cache(stoker, task, daemon_factory, tmp_path):
    root, _ = task
    from stoker import volume as V
    compose = spleen(V, extra=[V.RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=[0]),
                               V.RandRotate90d(keys=["image", "label"], prob=0.5),
                               V.RandAffined(keys=["image", "label"], mode=("bilinear", "nearest"),
                                             prob=0.5, rotate_range=(0.2, 0.2, 0.2),
                                             scale_range=(0.1, 0.1, 0.1)),
                               V.RandShiftIntensityd(keys=["image"], offsets=0.1, prob=0.5)])
    runs = []
    for workers, cache in ((1, None), (3, tmp_path / "c"), (2, tmp_path / "c")):
        args = [f"--prepared-cache={cache}"] if cache else []
        daemon = daemon_factory(workers=workers, data_root=str(root), extra_args=args)
        batches = epoch_batches(stoker, daemon.socket, "Task09/dataset.json", compose,
                                   seed=5, epochs=2, shuffle=True)
        runs.append(batches)
        daemon.stop()
    for other in runs[1:]:
        assert len(other) == len(runs[0]) == 4
        for (ia, ba), (ib, bb) in zip(runs[0], other):
            assert np.array_equal(ia, ib)
            assert torch.equal(ba["image"], bb["image"]) and torch.equal(ba["label"], bb["label"])
    # Two epochs differ (other draws).
    assert not torch.equal(runs[0][0][1]["image"], runs[0][2][1]["image"])


def entries(cache):
    names = sorted(os.listdir(cache))
    assert not [n for n in names if n.startswith(".tmp")], names  # every write completed
    return names


def test_later_epochs_read_the_cache_and_a_changed_volume_is_prepared_again(
        stoker, task, daemon_factory, tmp_path):
    root, d = task
    work = tmp_path / "data"
    shutil.copytree(root, work)
    cache = tmp_path / "vc"
    from stoker import volume as V
    compose = V.Compose([V.RandSpatialCropd(keys=["image"], roi_size=(8, 8, 8),
                                            random_center=False)])
    daemon = daemon_factory(workers=1, data_root=str(work), extra_args=[f"--prepared-cache={cache}"])
    ds = "Task09/dataset.json"
    first = epoch_batches(stoker, daemon.socket, ds, compose, seed=1, shuffle=False)
    names = entries(cache)
    assert len(names) == 4 and all(n.endswith(".stkv") for n in names)
    # What later epochs serve is the entries' voxels: overwrite them (the
    # headers kept, so each still opens) and the patches are what was written.
    for n in names:
        with open(cache / n, "r+b") as f:
            at, size = np.frombuffer(f.read(208)[192:208], np.uint64)  # the image section
            f.seek(int(at))
            f.write(np.full(int(size) // 4, 7.0, np.float32).tobytes())
    cached = epoch_batches(stoker, daemon.socket, ds, compose, seed=1, shuffle=False)
    assert all(torch.all(b["image"] == 7.0) for _, b in cached)
    assert entries(cache) == names
    pc = stoker.Client(daemon.socket).status()["prepared_cache"]
    assert [int(pc[k]) for k in ("volume_writes", "volume_hits", "entries")] == [4, 4, 4]
    # Gone: prepared again, the same patches as the first time.
    for n in names:
        os.unlink(cache / n)
    again = epoch_batches(stoker, daemon.socket, ds, compose, seed=1, shuffle=False)
    assert all(torch.equal(a[1]["image"], b[1]["image"]) for a, b in zip(first, again))
    assert entries(cache) == names
    # Volume 0 changes: its new values are served, from a rebuilt entry.
    hu, label, aff = ct_volume((64, 56, 14), np.random.default_rng(99), (0.8, 0.8, 2.5))
    path = work / "Task09" / "imagesTr" / "ct_0.nii.gz"
    nib.save(nib.Nifti1Image(hu, aff), path)
    changed = epoch_batches(stoker, daemon.socket, ds, compose, seed=1, shuffle=False)
    want = np.asanyarray(nib.load(path).dataobj).astype(np.float32)
    c = [(s - 8) // 2 for s in want.shape]
    block = want[c[0]:c[0] + 8, c[1]:c[1] + 8, c[2]:c[2] + 8]
    assert np.array_equal(changed[0][1]["image"][0, 0].numpy(), block)
    assert not torch.equal(changed[0][1]["image"][0], first[0][1]["image"][0])
    assert torch.equal(changed[1][1]["image"], first[1][1]["image"])
    assert entries(cache) == names  # the same name, rewritten


def test_the_cache_keeps_to_its_budget(stoker, task, daemon_factory, tmp_path):
    """--prepared-cache-mb: the oldest entries go; what is served is the same."""
    root, _ = task
    cache = tmp_path / "vc"
    from stoker import volume as V
    compose = spleen(V)
    plain = daemon_factory(workers=2, data_root=str(root))
    want = epoch_batches(stoker, plain.socket, "Task09/dataset.json", compose, seed=2, epochs=2)
    small = daemon_factory(workers=2, data_root=str(root),
                           extra_args=[f"--prepared-cache={cache}", "--prepared-cache-mb=0.25"])
    got = epoch_batches(stoker, small.socket, "Task09/dataset.json", compose, seed=2, epochs=2)
    for (ia, a), (ib, b) in zip(want, got):
        assert np.array_equal(ia, ib) and torch.equal(a["image"], b["image"])
    sizes = [os.path.getsize(cache / n) for n in entries(cache)]
    assert 0 < len(sizes) < 4 and sum(sizes) <= 0.25 * 2**20


def test_bad_volumes_are_named_sample_failures(stoker, task, daemon_factory, tmp_path):
    root, d = task
    work = tmp_path / "data"
    shutil.copytree(root, work)
    t = work / "Task09"
    (t / "imagesTr" / "ct_1.nii.gz").write_bytes(b"\x1f\x8b" + os.urandom(300))  # not a volume
    hu, label, aff = ct_volume((30, 30, 8), np.random.default_rng(2))
    nib.save(nib.Nifti1Image(label, aff), t / "labelsTr" / "ct_2.nii.gz")  # another shape
    daemon = daemon_factory(workers=2, data_root=str(work))
    from stoker import volume as V
    with stoker.Loader("Task09/dataset.json", transform=spleen(V), socket=daemon.socket,
                       batch_size=2, seed=1, epochs=1, shuffle=False) as loader:
        statuses = []
        for batch in loader:
            statuses.append(loader.last_indices.copy())
    assert len(statuses) == 2  # the epoch completes: failures replaced, not fatal
    log = open(daemon.log_path).read()
    assert "ct_1.nii.gz" in log and "ct_2.nii.gz" in log
    assert "its label is" in log


def test_refusals_name_the_fix(stoker, task, daemon_factory):
    root, _ = task
    from stoker import volume as V
    daemon = daemon_factory(workers=1, data_root=str(root))
    keys = ["image", "label"]
    with pytest.raises(stoker.InvalidRequestError, match="no patch op"):
        with stoker.Loader("Task09/dataset.json", socket=daemon.socket, transform=V.Compose(
                [V.Orientationd(keys=keys, axcodes="RAS")])) as loader:
            next(iter(loader))
    with pytest.raises(stoker.InvalidRequestError, match="pixdim"):
        with stoker.Loader("Task09/dataset.json", socket=daemon.socket, transform=V.Compose(
                [V.Spacingd(keys=keys, pixdim=(1, 2)),
                 V.RandSpatialCropd(keys=keys, roi_size=8)])) as loader:
            next(iter(loader))
    with pytest.raises(stoker.InvalidRequestError, match="mode=\\('bilinear', 'nearest'\\)"):
        V.Spacingd(keys=keys, pixdim=1.5, mode="bilinear")
    with pytest.raises(stoker.InvalidRequestError, match="image only"):
        V.Compose([V.ScaleIntensityRanged(keys=keys, a_min=0, a_max=1),
                   V.RandCropByPosNegLabeld(keys=keys, label_key="label", spatial_size=8)])


def test_resume_mid_epoch_and_a_manifest_of_volumes(stoker, task, daemon_factory, tmp_path):
    """load_state_dict after one batch: the rest of the epoch as an
    uninterrupted run serves it, patches and all. A manifest '#columns:
    image label' of the same files serves the same volumes."""
    root, d = task
    daemon = daemon_factory(workers=2, data_root=str(root))
    from stoker import volume as V
    compose = spleen(V, samples=2)

    def loader(ds="Task09/dataset.json"):
        return stoker.Loader(ds, transform=compose, socket=daemon.socket, batch_size=1, seed=4,
                             copy=True)

    with loader() as ld:
        ld.set_epoch(1)
        whole = [(b["image"], ld.last_indices.copy()) for b in ld]
    with loader() as ld:
        ld.set_epoch(1)
        it = iter(ld)
        next(it)
        state = ld.state_dict()
    with loader() as ld:
        ld.load_state_dict(state)
        rest = [(b["image"], ld.last_indices.copy()) for b in ld]
    assert len(whole) == 4 and len(rest) == 3
    for (a, ia), (b, ib) in zip(whole[1:], rest):
        assert ia.tolist() == ib.tolist()
        assert torch.equal(a, b)

    (d / "list.tsv").write_text("#columns: image label\n" + "".join(
        f"imagesTr/ct_{n}.nii.gz\tlabelsTr/ct_{n}.nii.gz\n" for n in range(4)))
    with loader("Task09/list.tsv") as ld:
        ld.set_epoch(1)
        listed = [(b["image"], ld.last_indices.copy()) for b in ld]
    for (a, ia), (b, ib) in zip(whole, listed):
        assert ia.tolist() == ib.tolist()
        assert torch.equal(a, b)


def test_axial_slices_with_neighbours_as_channels(stoker, task, daemon_factory, volume_tool,
                                                  tmp_path):
    """AxialSlicesd: each sample's slices are [2k + 1, X, Y] blocks of the
    prepared volume (z-k .. z+k as channels), their labels the centre
    slice's; pos/neg centres as RandCropByPosNegLabel draws them."""
    root, _ = task
    daemon = daemon_factory(workers=2, data_root=str(root))
    from stoker import volume as V
    keys = ["image", "label"]
    compose = V.Compose([
        V.Orientationd(keys=keys, axcodes="RAS"),
        V.Spacingd(keys=keys, pixdim=(1.5, 1.5, 2.0), mode=("bilinear", "nearest")),
        V.ScaleIntensityRanged(keys=["image"], a_min=-57, a_max=164, b_min=0.0, b_max=1.0,
                               clip=True),
        V.CropForegroundd(keys=keys, source_key="image"),
        V.AxialSlicesd(keys=keys, label_key="label", roi_size=(24, 20), neighbours=2,
                       num_samples=5, pos=3, neg=1),
        V.RandFlipd(keys=keys, prob=0.5, spatial_axis=[0])])
    with pytest.raises(stoker.InvalidRequestError, match="not with AxialSlicesd"):
        V.Compose(compose.transforms + [V.RandRotate90d(keys=keys, prob=0.5)])
    batches = epoch_batches(stoker, daemon.socket, "Task09/dataset.json", compose, seed=6)
    refs = {n: prepared(volume_tool, task, n, tmp_path) for n in range(4)}
    organ = 0
    for indices, b in batches:
        assert b["image"].shape == (10, 5, 24, 20) and b["label"].shape == (10, 1, 24, 20)
        for s in range(10):
            img, lab = refs[int(indices[s // 5])]
            stack = b["image"][s].numpy()
            block = np.ascontiguousarray(stack.transpose(1, 2, 0))  # (X, Y, 2k + 1)
            corners = locate(block, img) or locate(block[::-1], img)  # RandFlip on X
            assert corners, "a slice stack is no block of its prepared volume"
            c = corners[0]
            want = lab[c[0]:c[0] + 24, c[1]:c[1] + 20, c[2] + 2]
            got = b["label"][s, 0].numpy()
            assert np.array_equal(got, want) or np.array_equal(got, want[::-1])
            organ += int(got.any())
    assert organ >= 15  # pos=3: three in four centred on the organ


def test_npy_volumes_take_the_spacing_given(stoker, daemon_factory, tmp_path):
    """A manifest '#columns: image label' of .npy volumes: Compose(spacing=)
    is their voxel size (they hold none). With pixdim equal to it Spacing
    leaves the voxels as they are (the centre block is the file's); at
    twice the pixdim's voxel size a small volume grows past the patch
    (without it, it stays smaller and fails, named)."""
    root = tmp_path / "data"
    (root / "npy").mkdir(parents=True)
    rng = np.random.default_rng(4)
    vol = rng.normal(size=(12, 10, 8)).astype(np.float32)
    np.save(root / "npy" / "a.npy", vol)
    np.save(root / "npy" / "a_seg.npy", (vol > 1).astype(np.uint8))
    small = rng.normal(size=(6, 6, 6)).astype(np.float32)
    np.save(root / "npy" / "b.npy", small)
    np.save(root / "npy" / "b_seg.npy", np.ones((6, 6, 6), np.uint8))
    (root / "npy" / "a.tsv").write_text("#columns: image label\na.npy\ta_seg.npy\n")
    (root / "npy" / "b.tsv").write_text("#columns: image label\nb.npy\tb_seg.npy\n")
    daemon = daemon_factory(workers=1, data_root=str(root))
    from stoker import volume as V

    def compose(pixdim, spacing, roi):
        return V.Compose([V.Spacingd(keys=["image", "label"], pixdim=pixdim),
                          V.RandSpatialCropd(keys=["image", "label"], roi_size=roi,
                                             random_center=False)], spacing=spacing)

    got = epoch_batches(stoker, daemon.socket, "npy/a.tsv", compose(2.0, (2.0, 2.0, 2.0), 4),
                        seed=1, shuffle=False)
    assert np.array_equal(got[0][1]["image"][0, 0].numpy(), vol[4:8, 3:7, 2:6])
    grown = epoch_batches(stoker, daemon.socket, "npy/b.tsv", compose(1.0, (2.0, 2.0, 2.0), 10),
                          seed=1, shuffle=False)
    assert grown[0][1]["image"].shape == (1, 1, 10, 10, 10)
    with stoker.Loader("npy/b.tsv", transform=compose(1.0, None, 10), socket=daemon.socket,
                       batch_size=1, epochs=1, failure_policy="error") as loader:
        with pytest.raises(Exception, match="smaller than the 10 x 10 x 10 patch"):
            next(iter(loader))


def test_npz_cases_as_nnunet_stores_them(stoker, daemon_factory, tmp_path):
    """nnU-Net's preprocessed cases: one .npz per case holding "data" (C x X
    x Y x Z float32) and "seg" (1 x X x Y x Z), both named by one manifest
    line; LoadImaged(npz_keys=...) picks the array for each key, as MONAI's
    NumpyReader does. Every patch is the block of the arrays np.load gives,
    channels and label alike; a case without the array is a named failure."""
    root = tmp_path / "data"
    (root / "nn").mkdir(parents=True)
    rng = np.random.default_rng(8)
    data = rng.normal(size=(2, 12, 10, 8)).astype(np.float32)
    seg = (data[0] > 0.5).astype(np.int8)[None]
    np.savez_compressed(root / "nn" / "case_000.npz", data=data, seg=seg)
    np.savez(root / "nn" / "case_001.npz", image=data)  # no "data": fails
    (root / "nn" / "train.tsv").write_text("#columns: image label\ncase_000.npz\tcase_000.npz\n")
    (root / "nn" / "bad.tsv").write_text("#columns: image label\ncase_001.npz\tcase_001.npz\n")
    daemon = daemon_factory(workers=2, data_root=str(root))
    from stoker import volume as V
    keys = ["image", "label"]
    compose = V.Compose([V.LoadImaged(keys=["image"], npz_keys=["data"]),
                         V.LoadImaged(keys=["label"], npz_keys=["seg"]),
                         V.RandSpatialCropd(keys=keys, roi_size=(6, 5, 4))], channels=2)
    assert compose.spec()["array_keys"] == ["data"] and compose.spec()["label_array_keys"] == ["seg"]
    got = epoch_batches(stoker, daemon.socket, "nn/train.tsv", compose, seed=3, epochs=2)
    assert len(got) == 2
    for _, batch in got:
        image, label = batch["image"][0].numpy(), batch["label"][0, 0].numpy()
        assert image.shape == (2, 6, 5, 4)
        corners = locate(image[0], data[0])
        assert len(corners) == 1
        x, y, z = corners[0]
        assert np.array_equal(image[1], data[1, x:x + 6, y:y + 5, z:z + 4])
        assert np.array_equal(label, seg[0, x:x + 6, y:y + 5, z:z + 4])
    with stoker.Loader("nn/bad.tsv", transform=compose, socket=daemon.socket, batch_size=1,
                       epochs=1, failure_policy="error") as loader:
        with pytest.raises(Exception, match="no array 'data' \\(it holds image\\)"):
            next(iter(loader))


def test_an_image_as_a_list_of_channel_files(stoker, daemon_factory, tmp_path):
    """BraTS as MONAI's tutorials list it: "image": [t1, t1ce, t2, flair],
    one NIfTI each. The files are the image's channels in the list's order,
    the same patch cut from each; one file of another shape is a named
    sample failure."""
    root = tmp_path / "data"
    d = root / "brats"
    d.mkdir(parents=True)
    rng = np.random.default_rng(12)
    aff = np.diag([1.0, 1.0, 1.0, 1.0])
    mods = ["t1", "t1ce", "t2", "flair"]
    vols = {m: rng.normal(size=(14, 12, 10)).astype(np.float32) * 100 for m in mods}
    for m in mods:
        nib.save(nib.Nifti1Image(vols[m], aff), d / f"{m}.nii.gz")
    seg = (vols["t1"] > 50).astype(np.uint8)
    nib.save(nib.Nifti1Image(seg, aff), d / "seg.nii.gz")
    nib.save(nib.Nifti1Image(np.zeros((9, 9, 9), np.float32), aff), d / "odd.nii.gz")
    (d / "dataset.json").write_text(json.dumps({"training": [
        {"image": [f"./{m}.nii.gz" for m in mods], "label": "./seg.nii.gz"}]}))
    (d / "bad.json").write_text(json.dumps({"training": [
        {"image": ["./t1.nii.gz", "./odd.nii.gz"], "label": "./seg.nii.gz"}]}))
    daemon = daemon_factory(workers=2, data_root=str(root))
    from stoker import volume as V
    keys = ["image", "label"]
    compose = V.Compose([V.LoadImaged(keys=keys),
                         V.RandSpatialCropd(keys=keys, roi_size=(6, 5, 4))], channels=4)
    got = epoch_batches(stoker, daemon.socket, "brats/dataset.json", compose, seed=2, epochs=2)
    for _, batch in got:
        image, label = batch["image"][0].numpy(), batch["label"][0, 0].numpy()
        assert image.shape == (4, 6, 5, 4)
        corners = locate(image[0], vols["t1"])
        assert len(corners) == 1
        x, y, z = corners[0]
        for c, m in enumerate(mods):
            assert np.array_equal(image[c], vols[m][x:x + 6, y:y + 5, z:z + 4]), m
        assert np.array_equal(label, seg[x:x + 6, y:y + 5, z:z + 4])
    bad = V.Compose([V.RandSpatialCropd(keys=keys, roi_size=(6, 5, 4))], channels=2)
    with stoker.Loader("brats/bad.json", transform=bad, socket=daemon.socket, batch_size=1,
                       epochs=1, failure_policy="error") as loader:
        with pytest.raises(Exception, match="odd.nii.gz"):
            next(iter(loader))


def test_hdf5_volumes_and_a_missing_dataset(stoker, daemon_factory, tmp_path):
    """Volumes kept as HDF5 datasets (one .h5 a case, "image" and "label"
    inside), named per key with LoadImaged(npz_keys=...): every patch is a
    block of what h5py reads. A case whose file lacks the dataset is a
    counted, named sample failure, replaced as any other; the session
    goes on."""
    h5py = pytest.importorskip("h5py")
    root = tmp_path / "data"
    (root / "h5").mkdir(parents=True)
    rng = np.random.default_rng(13)
    cases = {}
    for n in range(3):
        image = rng.normal(size=(12, 11, 9)).astype(np.float32)
        label = (image > 0.8).astype(np.uint8)
        with h5py.File(root / "h5" / f"case_{n}.h5", "w") as f:
            f.create_dataset("image" if n != 2 else "img", data=image, compression="gzip")
            f.create_dataset("label", data=label)
        cases[n] = (image, label)
    (root / "h5" / "list.tsv").write_text(
        "#columns: image label\n" + "".join(f"case_{n}.h5\tcase_{n}.h5\n" for n in range(3)))
    daemon = daemon_factory(workers=2, data_root=str(root))
    from stoker import volume as V
    keys = ["image", "label"]
    compose = V.Compose([V.LoadImaged(keys=["image"], npz_keys="image"),
                         V.LoadImaged(keys=["label"], npz_keys="label"),
                         V.RandSpatialCropd(keys=keys, roi_size=(5, 4, 3))])
    with stoker.Loader("h5/list.tsv", transform=compose, socket=daemon.socket, batch_size=1,
                       epochs=1, shuffle=False, failure_policy="skip") as loader:
        served = []
        for view in loader.iter_batches():
            served.append((view.statuses.tolist(), loader.last_indices.tolist()))
    statuses = [s for st, _ in served for s in st]
    assert statuses.count(1) == 1 and len(statuses) == 3  # case 2 replaced
    assert re.search(r"case_2\.h5: no dataset 'image' \(it holds img, label\)", daemon.log())
    got = epoch_batches(stoker, daemon.socket, "h5/list.tsv", compose, seed=4, shuffle=False,
                        failure_policy="skip")
    for indices, batch in got:
        for row, n in enumerate(indices):
            if n == 2:
                continue
            image, label = batch["image"][row, 0].numpy(), batch["label"][row, 0].numpy()
            corners = locate(image, cases[n][0])
            assert len(corners) == 1
            x, y, z = corners[0]
            assert np.array_equal(label, cases[n][1][x:x + 5, y:y + 4, z:z + 3])


def test_a_record_file_is_not_a_volume_dataset(stoker, daemon_factory, tmp_path):
    h5py = pytest.importorskip("h5py")
    root = tmp_path / "data"
    root.mkdir()
    with h5py.File(root / "x.h5", "w") as f:
        f.create_dataset("x", data=np.zeros((2, 8, 8, 3), np.uint8))
    daemon = daemon_factory(workers=1, data_root=str(root))
    from stoker import volume as V
    compose = V.Compose([V.RandSpatialCropd(keys=["image", "label"], roi_size=4)])
    with pytest.raises(stoker.InvalidRequestError, match="is a record file.*manifest"):
        with stoker.Loader("x.h5", transform=compose, socket=daemon.socket) as loader:
            next(iter(loader))


def test_a_folder_of_volumes_with_its_labels_folder(stoker, task, daemon_factory):
    """Loader("Task09/imagesTr", masks="Task09/labelsTr"): the Decathlon's
    folders without their dataset.json. The same files in the same order
    as the dataset.json lists them, so the same batches for the same seed."""
    root, d = task
    daemon = daemon_factory(workers=2, data_root=str(root))
    from stoker import volume as V
    compose = spleen(V, patch=16, samples=2)
    by_json = epoch_batches(stoker, daemon.socket, "Task09/dataset.json", compose, seed=6)
    by_folder = epoch_batches(stoker, daemon.socket, "Task09/imagesTr", compose, seed=6,
                              masks="Task09/labelsTr")
    assert len(by_json) == len(by_folder) == 2
    for (ia, a), (ib, b) in zip(by_json, by_folder):
        assert np.array_equal(ia, ib)
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])
    unlabelled = epoch_batches(stoker, daemon.socket, "Task09/imagesTr",
                               V.Compose([V.RandSpatialCropd(keys=["image", "label"],
                                                             roi_size=8)]), seed=6)
    assert len(unlabelled) == 2 and unlabelled[0][1]["image"].shape == (2, 1, 8, 8, 8)
