"""Record files against a real daemon (server/dataset/records.h): an HDF5
image array shaped as PatchCamelyon's x/y files (written by h5py, contiguous
and chunked) and an LMDB of encoded images (written by python-lmdb, keyed by
index). Each sample is what h5py / PIL read from the same bytes; the same
pipeline gives the same pixels as over PNG files of those images; exactly
once per epoch; bad records are counted sample failures, bad files clear
errors, and the daemon lives on.
"""

import io
import os
from collections import Counter

import numpy as np
import pytest
from PIL import Image

from conftest import photo_like

torch = pytest.importorskip("torch")
h5py = pytest.importorskip("h5py")
lmdb = pytest.importorskip("lmdb")


def pcam_like(root, n=40, h=32, w=40, seed=5, chunks=None, name="pcam"):
    """x: n x h x w x 3 uint8 (textured), y: n x 1 x 1 x 1 uint8, as PCam's."""
    rng = np.random.default_rng(seed)
    x = np.stack([photo_like(rng, h, w) for _ in range(n)])
    y = (np.arange(n) * 7 % 2).astype(np.uint8).reshape(n, 1, 1, 1)
    os.makedirs(os.path.join(root, name), exist_ok=True)
    with h5py.File(os.path.join(root, name, "train_x.h5"), "w") as f:
        f.create_dataset("x", data=x, chunks=chunks)
    with h5py.File(os.path.join(root, name, "train_y.h5"), "w") as f:
        f.create_dataset("y", data=y)
    return x, y.reshape(-1).astype(np.int64)


def all_batches(ld):
    images, labels, indices = [], [], []
    for im, lb in ld:
        images.append(im.clone())
        labels.append(lb.clone())
        indices.append(ld.last_indices.copy())
    return torch.cat(images), torch.cat(labels), np.concatenate(indices)


@pytest.mark.parametrize("chunks", [None, (8, 32, 40, 3)])
def test_an_hdf5_image_array_serves_h5pys_rows_and_labels(stoker, daemon_factory, tmp_path,
                                                          chunks):
    root = str(tmp_path)
    x, y = pcam_like(root, chunks=chunks)
    d = daemon_factory(workers=2, data_root=root)
    with stoker.Loader("pcam/train_x.h5", socket=d.socket, batch_size=6, pipeline="decode",
                       size=(32, 40), shuffle=False, epochs=1, record_labels="pcam/train_y.h5") as ld:
        images, labels, indices = all_batches(ld)
        assert ld.info["dataset_size"] == len(x)
    assert np.array_equal(indices, np.arange(len(x)))
    assert np.array_equal(images.numpy(), x)
    assert np.array_equal(labels.numpy(), y)


def test_records_go_through_the_pipeline_as_the_same_images_in_files(stoker, daemon_factory,
                                                                     tmp_path):
    root = str(tmp_path)
    x, y = pcam_like(root, n=24, h=48, w=48, seed=9)
    # The same pixels as PNG files, listed in the same order.
    os.makedirs(os.path.join(root, "png"))
    with open(os.path.join(root, "png", "list.txt"), "w") as f:
        for i, img in enumerate(x):
            Image.fromarray(img).save(os.path.join(root, "png", f"{i:03d}.png"))
            f.write(f"{i:03d}.png\t{y[i]}\n")
    d = daemon_factory(workers=2, data_root=root)
    kw = dict(socket=d.socket, batch_size=8, pipeline="train", size=32, seed=3, epochs=2,
              shuffle=True)
    with stoker.Loader("pcam/train_x.h5", record_labels="pcam/train_y.h5", **kw) as ld:
        from_records = [all_batches(ld) for _ in range(2)]
    with stoker.Loader("png/list.txt", **kw) as ld:
        from_files = [all_batches(ld) for _ in range(2)]
    for (a, la, ia), (b, lb, ib) in zip(from_records, from_files):
        assert np.array_equal(ia, ib)
        assert sorted(ia.tolist()) == list(range(24))  # exactly once
        assert torch.equal(la, lb)
        assert torch.equal(a, b)
    # Random draws differ between epochs (a real augmentation).
    assert not torch.equal(from_records[0][0], from_records[1][0])


def test_an_hdf5_files_own_y_and_grey_images(stoker, daemon_factory, tmp_path):
    root = str(tmp_path)
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, size=(10, 20, 30), dtype=np.uint8)
    with h5py.File(os.path.join(root, "grey.h5"), "w") as f:
        f.create_dataset("images/train", data=x)
        f.create_dataset("targets", data=np.arange(10, dtype=np.int32) * 3)
    d = daemon_factory(workers=1, data_root=root)
    with stoker.Loader("grey.h5", socket=d.socket, batch_size=5, pipeline="decode",
                       size=(20, 30), shuffle=False, epochs=1, record_images="images/train",
                       record_labels="grey.h5", record_labels_key="targets") as ld:
        images, labels, _ = all_batches(ld)
    # A grey image is read as PIL reads mode "L" then converts to RGB.
    assert np.array_equal(images.numpy(), np.repeat(x[..., None], 3, axis=3))
    assert labels.tolist() == list(range(0, 30, 3))


def first_batch(stoker, dataset, **kw):
    with stoker.Loader(dataset, batch_size=2, size=8, **kw) as ld:
        return next(iter(ld))


def write_lmdb(path, values):
    env = lmdb.open(path, map_size=1 << 26)
    with env.begin(write=True) as txn:
        for k, v in values.items():
            txn.put(k, v)
    env.close()


def encoded(img, fmt, **kw):
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format=fmt, **kw)
    return buf.getvalue()


def test_an_lmdb_of_encoded_images_in_index_order(stoker, daemon_factory, tmp_path):
    root = str(tmp_path)
    rng = np.random.default_rng(4)
    n = 23  # keys "10".."22" sort before "2" in LMDB's byte order
    imgs = [photo_like(rng, int(rng.integers(30, 70)), int(rng.integers(30, 70)))
            for _ in range(n)]
    values = {}
    for i, img in enumerate(imgs):
        if i % 3 == 0:
            values[str(i).encode()] = encoded(img, "PNG")
        else:
            values[str(i).encode()] = encoded(img, "JPEG", quality=85,
                                              progressive=i % 3 == 1, optimize=True)
    values[b"__len__"] = str(n).encode()
    write_lmdb(os.path.join(root, "db"), values)
    with open(os.path.join(root, "db.labels"), "w") as f:
        f.write("".join(f"{i * 2}\n" for i in range(n)))
    d = daemon_factory(workers=2, data_root=root)
    with stoker.Loader("db", socket=d.socket, batch_size=1, pipeline="decode", shuffle=False,
                       epochs=1, record_labels="db.labels") as ld:
        got = [(im[0].numpy().copy(), int(lb[0])) for im, lb in ld]
        assert ld.info["dataset_size"] == n
    assert len(got) == n
    for i, (im, label) in enumerate(got):
        want = np.asarray(Image.open(io.BytesIO(values[str(i).encode()])).convert("RGB"))
        assert label == 2 * i
        assert np.array_equal(im, want), i
    assert "1 key(s) that are not decimal" in d.log()


def test_bad_records_are_sample_failures_and_bad_files_clear_errors(stoker, daemon_factory,
                                                                   tmp_path):
    root = str(tmp_path)
    rng = np.random.default_rng(6)
    values = {str(i).encode(): encoded(photo_like(rng, 40, 40), "JPEG") for i in range(12)}
    values[b"4"] = b"\xff\xd8\xff garbage, not an image"
    values[b"7"] = values[b"7"][:300]  # truncated
    write_lmdb(os.path.join(root, "db"), values)
    d = daemon_factory(workers=2, data_root=root)
    with stoker.Loader("db", socket=d.socket, batch_size=4, size=24, epochs=1,
                       failure_policy="skip", seed=1) as ld:
        statuses = Counter()
        for v in ld.iter_batches():
            statuses.update(v.statuses.tolist())
    assert statuses[1] == 2 and sum(statuses.values()) == 12
    assert "db/data.mdb:4) failed" in d.log()

    pcam_like(root, n=6, h=8, w=8)
    with pytest.raises(stoker.StokerError, match="has no dataset 'images'.*x"):
        first_batch(stoker, "pcam/train_x.h5", socket=d.socket, record_images="images")
    with pytest.raises(stoker.StokerError, match="has no dataset 'labels'"):
        first_batch(stoker, "pcam/train_x.h5", socket=d.socket, record_labels="pcam/train_y.h5",
                      record_labels_key="labels")
    with h5py.File(os.path.join(root, "gz.h5"), "w") as f:
        f.create_dataset("x", data=np.zeros((4, 8, 8, 3), np.uint8), compression="gzip")
    with pytest.raises(stoker.StokerError, match="compressed.*h5repack -l CONTI"):
        first_batch(stoker, "gz.h5", socket=d.socket)
    # A damaged file: its header kept, the rest overwritten.
    with open(os.path.join(root, "pcam", "train_x.h5"), "r+b") as f:
        f.seek(64)
        f.write(os.urandom(4000))
    with pytest.raises(stoker.StokerError):
        first_batch(stoker, "pcam/train_x.h5", socket=d.socket)
    with open(os.path.join(root, "fake.lmdb"), "wb") as f:
        f.write(os.urandom(20000))
    with pytest.raises(stoker.StokerError, match="could not be opened"):
        first_batch(stoker, "fake.lmdb", socket=d.socket)
    # The daemon lives on and still serves.
    assert stoker.Client(d.socket).status()["state"] == "serving"


def test_a_transform_that_sizes_nothing_takes_the_arrays_size(stoker, daemon_factory, tmp_path):
    T = pytest.importorskip("torchvision.transforms")
    root = str(tmp_path)
    x, y = pcam_like(root, n=12, h=32, w=40)
    d = daemon_factory(workers=2, data_root=root)
    mean, std = [0.7, 0.55, 0.7], [0.15, 0.17, 0.13]
    transform = T.Compose([T.RandomHorizontalFlip(p=1.0), T.ToTensor(), T.Normalize(mean, std)])
    with stoker.Loader("pcam/train_x.h5", socket=d.socket, record_labels="pcam/train_y.h5",
                       transform=transform, size=(32, 40), batch_size=4, shuffle=False,
                       epochs=1) as ld:
        images, labels, _ = all_batches(ld)
    want = torch.stack([transform(Image.fromarray(img)) for img in x])
    assert images.dtype == torch.float32 and images.shape == want.shape
    assert torch.allclose(images, want, atol=1e-5)
    assert np.array_equal(labels.numpy(), y)
    # A transform that sizes its images still decides the size alone.
    with pytest.raises(stoker.InvalidRequestError,
                       match="size is decided by the transform's RandomCrop"):
        stoker.Loader("pcam/train_x.h5", socket=d.socket,
                      transform=T.Compose([T.RandomCrop(16), T.ToTensor()]), size=(32, 40))


def test_encoded_images_in_hdf5(stoker, daemon_factory, tmp_path):
    """A 1-D HDF5 dataset of variable-length bytes, an encoded image each
    (h5py.vlen_dtype(np.uint8)), as sets that keep JPEGs in HDF5 write it:
    each sample is what PIL decodes from the bytes h5py reads, with its
    row's label; an empty row is left out (the log says so), a corrupt one
    is a counted sample failure named by its row."""
    root = str(tmp_path)
    rng = np.random.default_rng(15)
    blobs = []
    for i in range(14):
        img = photo_like(rng, int(rng.integers(30, 60)), int(rng.integers(30, 60)))
        blobs.append(encoded(img, "PNG" if i % 4 == 0 else "JPEG"))
    blobs[5] = b""
    blobs[9] = blobs[9][:200]  # truncated
    with h5py.File(os.path.join(root, "enc.h5"), "w") as f:
        images = f.create_dataset("images", (len(blobs),), dtype=h5py.vlen_dtype(np.uint8))
        for i, b in enumerate(blobs):
            images[i] = np.frombuffer(b, np.uint8)
        f.create_dataset("labels", data=np.arange(len(blobs), dtype=np.int16) + 50)
    d = daemon_factory(workers=2, data_root=root)
    with stoker.Loader("enc.h5", socket=d.socket, batch_size=1, pipeline="decode", shuffle=False,
                       epochs=1, record_images="images", record_labels_key="labels",
                       failure_policy="skip") as ld:
        got = []
        for view in ld.iter_batches():
            got.append((view.statuses.tolist()[0], int(view.labels[0]),
                        view.images[0].numpy().copy() if view.statuses[0] == 0 else None))
        assert ld.info["dataset_size"] == len(blobs) - 1
    rows = [i for i in range(len(blobs)) if i != 5]
    with h5py.File(os.path.join(root, "enc.h5")) as f:
        for (status, label, image), row in zip(got, rows):
            if row == 9:
                assert status == 1
                continue
            assert status == 0 and label == 50 + row
            want = np.asarray(Image.open(io.BytesIO(f["images"][row].tobytes())).convert("RGB"))
            assert np.array_equal(image, want), row
    log = d.log()
    assert "left out 1 empty element" in log
    assert "enc.h5:9) failed" in log


def test_an_lmdb_of_raw_pixels(stoker, daemon_factory, tmp_path):
    """record_shape=(H, W, C): each LMDB value is arr.tobytes() of an H x W x C
    uint8 array, served as those pixels; a value of another size is a
    counted sample failure; record_shape for an HDF5 file is refused."""
    root = str(tmp_path)
    rng = np.random.default_rng(16)
    arrays = [photo_like(rng, 20, 24) for _ in range(9)]
    values = {str(i).encode(): a.tobytes() for i, a in enumerate(arrays)}
    values[b"6"] = values[b"6"][:100]
    write_lmdb(os.path.join(root, "raw"), values)
    d = daemon_factory(workers=2, data_root=root)
    with stoker.Loader("raw", socket=d.socket, batch_size=1, pipeline="decode", size=(20, 24),
                       shuffle=False, epochs=1, record_shape=(20, 24, 3),
                       failure_policy="skip") as ld:
        got = [(v.statuses.tolist()[0], v.images[0].numpy().copy()) for v in ld.iter_batches()]
    assert len(got) == 9
    for i, (status, image) in enumerate(got):
        if i == 6:
            assert status == 1
        else:
            assert status == 0 and np.array_equal(image, arrays[i]), i
    assert "is not 20x24x3 pixels" in d.log()
    pcam_like(root, n=4, h=8, w=8)
    with pytest.raises(stoker.StokerError, match="record_shape is for an LMDB"):
        first_batch(stoker, "pcam/train_x.h5", socket=d.socket, record_shape=(8, 8, 3))
