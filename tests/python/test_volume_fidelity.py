"""NIfTI volumes read as nibabel reads them (server/volume/nifti.h, through
stoker-volume-tool): every datatype stoker reads, plain and gzip'd, either
byte order, NIfTI-1 and -2, 3-D and 4-D, scaled and not, sform, qform and
neither; and CT-like volumes as CT scanners store them (bench/volume_corpus.py).

The reference is nibabel's `np.asanyarray(img.dataobj)` (float64 scaling)
cast to float32, which is what MONAI's LoadImage gives: equal, bit for bit.
nibabel's `get_fdata(dtype=np.float32)` scales in float32 instead: within
two float32 rounding errors of the scaling's terms."""

import json
import subprocess

import numpy as np
import pytest

from volume_corpus import ct_volume

nib = pytest.importorskip("nibabel")

DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float32",
          "float64"]


def read(tool, path, tmp_path):
    raw = tmp_path / "values.f32"
    out = subprocess.run([tool, "read", str(path), "--out", str(raw)], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    info = json.loads(out.stdout)
    return info, np.fromfile(raw, dtype=np.float32)


def reference(path):
    img = nib.load(str(path))
    return img, np.asanyarray(img.dataobj).astype(np.float32).ravel(order="F")


def random_array(dtype, shape, rng):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 1000).astype(dt)
    info = np.iinfo(dt)
    lo, hi = max(info.min, -(2 ** 40)), min(info.max, 2 ** 40)
    return rng.integers(lo, hi, size=shape, dtype=np.int64 if dt.kind == "i" or dt.itemsize < 8
                        else np.uint64).astype(dt)


def check(tool, path, tmp_path):
    info, got = read(tool, path, tmp_path)
    img, want = reference(path)
    shape = img.shape
    assert info["shape"] == list(shape[:3]) + [1] * (3 - min(3, len(shape)))
    assert info["channels"] == int(np.prod(shape[3:], dtype=np.int64))
    assert np.array_equal(got, want, equal_nan=True)
    assert np.allclose(np.array(info["affine"]).reshape(4, 4), img.affine, rtol=0, atol=1e-9)
    assert np.allclose(info["spacing"], img.header.get_zooms()[:3], rtol=0, atol=0)
    return info, got, img


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scaled", [False, True])
def test_every_datatype_plain_and_gzip(volume_tool, tmp_path, dtype, scaled):
    rng = np.random.default_rng(DTYPES.index(dtype) * 2 + scaled)
    arr = random_array(dtype, (23, 17, 9), rng)
    affine = np.array([[0.8, 0.1, 0, -90], [0, 0.8, 0.05, -120], [0, 0, 2.5, 40], [0, 0, 0, 1]])
    img = nib.Nifti1Image(arr, affine, dtype=arr.dtype)  # 64-bit ints need it said
    if scaled:
        img.header.set_slope_inter(0.37, -1024.3)
    for name in ("v.nii", "v.nii.gz"):
        nib.save(img, tmp_path / name)
        info, _, _ = check(volume_tool, tmp_path / name, tmp_path)
        assert info["type"] == dtype
        assert info["scaled"] is scaled


@pytest.mark.parametrize("dtype", ["int16", "float32", "uint64"])
def test_big_endian_and_nifti2(volume_tool, tmp_path, dtype):
    rng = np.random.default_rng(7)
    arr = random_array(dtype, (11, 13, 5), rng)
    affine = np.diag([1.5, 1.5, 3.0, 1.0])
    big = nib.Nifti1Image(arr.astype(np.dtype(dtype).newbyteorder(">")), affine,
                          header=nib.Nifti1Header(endianness=">"), dtype=np.dtype(dtype))
    big.header.set_slope_inter(2.0, 5.0)
    nib.save(big, tmp_path / "big.nii.gz")
    assert nib.load(tmp_path / "big.nii.gz").header.endianness == ">"
    check(volume_tool, tmp_path / "big.nii.gz", tmp_path)
    two = nib.Nifti2Image(arr, affine, dtype=arr.dtype)
    two.header.set_slope_inter(0.25, -7.5)
    for name in ("two.nii", "two.nii.gz"):
        nib.save(two, tmp_path / name)
        assert nib.load(tmp_path / name).header.sizeof_hdr == 540
        check(volume_tool, tmp_path / name, tmp_path)


def test_four_d_volumes_are_channels(volume_tool, tmp_path):
    """BraTS' four modalities in one 4-D file: channel c is the volume at
    index c of the fourth dim."""
    rng = np.random.default_rng(3)
    arr = (rng.standard_normal((24, 20, 12, 4)) * 300).astype(np.float32)
    nib.save(nib.Nifti1Image(arr, np.eye(4)), tmp_path / "brats.nii.gz")
    info, got, _ = check(volume_tool, tmp_path / "brats.nii.gz", tmp_path)
    assert info["shape"] == [24, 20, 12] and info["channels"] == 4
    per = 24 * 20 * 12
    assert np.array_equal(got[2 * per:3 * per], arr[..., 2].ravel(order="F"))


def test_qform_only_and_no_transform(volume_tool, tmp_path):
    """The affine nibabel gives: from the qform (a rotation, qfac -1) when
    the sform code is 0, and Analyze's base affine when both codes are."""
    arr = np.arange(6 * 7 * 8, dtype=np.int16).reshape(6, 7, 8)
    theta = 0.3
    rot = np.array([[np.cos(theta), -np.sin(theta), 0], [np.sin(theta), np.cos(theta), 0],
                    [0, 0, 1]])
    aff = np.eye(4)
    aff[:3, :3] = rot @ np.diag([0.9, 0.9, -2.0])
    aff[:3, 3] = [10, -20, 30]
    img = nib.Nifti1Image(arr, None)
    img.set_qform(aff, code=1)
    img.set_sform(None, code=0)
    nib.save(img, tmp_path / "q.nii")
    loaded = nib.load(tmp_path / "q.nii")
    assert loaded.header["sform_code"] == 0 and loaded.header["pixdim"][0] == -1
    check(volume_tool, tmp_path / "q.nii", tmp_path)
    img.set_qform(None, code=0)
    nib.save(img, tmp_path / "none.nii")
    loaded = nib.load(tmp_path / "none.nii")
    assert loaded.header["qform_code"] == 0 and loaded.header["sform_code"] == 0
    check(volume_tool, tmp_path / "none.nii", tmp_path)


def test_ct_volumes_as_scanners_store_them(volume_tool, tmp_path):
    """A 512 x 512 CT-like volume (int16 HU, gzip'd) and the same as uint16
    with scl_inter -1024, and its label: equal to nibabel's, and nibabel's
    get_fdata(dtype=float32) within its float32 scaling's rounding."""
    rng = np.random.default_rng(11)
    hu, label, affine = ct_volume((512, 512, 24), rng)
    nib.save(nib.Nifti1Image(hu, affine), tmp_path / "ct.nii.gz")
    _, got, _ = check(volume_tool, tmp_path / "ct.nii.gz", tmp_path)
    assert got.min() >= -1024 and got.max() > 300
    stored = nib.Nifti1Image((hu.astype(np.int32) + 1024).astype(np.uint16), affine)
    stored.header.set_slope_inter(1.0, -1024.0)
    nib.save(stored, tmp_path / "ct16.nii.gz")
    _, got16, img16 = check(volume_tool, tmp_path / "ct16.nii.gz", tmp_path)
    assert np.array_equal(got16, got)
    scaled = nib.Nifti1Image(hu, affine)
    scaled.header.set_slope_inter(0.37, -1024.3)
    nib.save(scaled, tmp_path / "scaled.nii.gz")
    _, got_s, img_s = check(volume_tool, tmp_path / "scaled.nii.gz", tmp_path)
    f32 = img_s.get_fdata(dtype=np.float32).ravel(order="F")
    terms = np.abs(hu.ravel(order="F").astype(np.float64) * 0.37) + 1024.3
    assert np.all(np.abs(got_s.astype(np.float64) - f32) <= 2 * np.finfo(np.float32).eps * terms)
    nib.save(nib.Nifti1Image(label, affine), tmp_path / "label.nii.gz")
    _, got_l, _ = check(volume_tool, tmp_path / "label.nii.gz", tmp_path)
    assert set(np.unique(got_l)) == {0.0, 1.0}


def test_bad_files_are_named_errors(volume_tool, tmp_path):
    """What the tool reports for files nibabel refuses or would read past:
    a truncated gzip, a complex datatype, a header from another format."""
    arr = np.zeros((8, 8, 8), np.int16)
    nib.save(nib.Nifti1Image(arr, np.eye(4)), tmp_path / "ok.nii.gz")
    data = (tmp_path / "ok.nii.gz").read_bytes()
    (tmp_path / "cut.nii.gz").write_bytes(data[: len(data) // 2])
    nib.save(nib.Nifti1Image(arr.astype(np.complex64), np.eye(4)), tmp_path / "complex.nii")
    (tmp_path / "text.nii").write_bytes(b"not a volume\n" * 40)
    for name, code, words in (("cut.nii.gz", "DATA_LOSS", "ends within"),
                              ("complex.nii", "UNIMPLEMENTED", "complex64"),
                              ("text.nii", "DATA_LOSS", "sizeof_hdr")):
        out = subprocess.run([volume_tool, "read", str(tmp_path / name)], capture_output=True,
                             text=True)
        assert out.returncode == 2, out.stdout + out.stderr
        err = json.loads(out.stdout)
        assert err["code"] == code and words in err["error"] and name in err["error"]


@pytest.mark.parametrize("dtype", DTYPES + ["bool", ">i2", ">f8"])
def test_npy_arrays_equal_numpys(volume_tool, tmp_path, dtype):
    """np.save'd arrays, C and Fortran order, 2-D, 3-D and 4-D (channel
    first), numpy's format versions 1 and 2: the values numpy reads, in the
    volume's order (axis 0 being i), and the spacing given as the affine."""
    rng = np.random.default_rng(len(dtype))
    for shape in ((9, 7), (9, 7, 5), (3, 9, 7, 5)):
        if dtype == "bool":
            arr = rng.integers(0, 2, size=shape).astype(bool)
        else:
            arr = random_array(np.dtype(dtype).newbyteorder("="), shape, rng).astype(dtype)
        for order in ("C", "F"):
            a = np.asarray(arr, order=order)
            for version in ((1, 0), (2, 0)):
                path = tmp_path / f"a_{order}_{version[0]}.npy"
                with open(path, "wb") as f:
                    np.lib.format.write_array(f, a, version=version)
                out = subprocess.run([volume_tool, "read", str(path), "--out",
                                      str(tmp_path / "v.f32"), "--spacing", "0.7,0.8,2.5"],
                                     capture_output=True, text=True)
                assert out.returncode == 0, out.stdout + out.stderr
                info = json.loads(out.stdout)
                got = np.fromfile(tmp_path / "v.f32", dtype=np.float32)
                back = np.load(path)
                if back.ndim == 4:
                    want = np.concatenate([back[c].astype(np.float32).ravel(order="F")
                                           for c in range(back.shape[0])])
                    assert info["channels"] == back.shape[0]
                    assert info["shape"] == list(back.shape[1:])
                else:
                    want = back.astype(np.float32).ravel(order="F")
                    assert info["shape"] == list(back.shape) + [1] * (3 - back.ndim)
                assert np.array_equal(got, want)
                assert np.allclose(np.array(info["affine"]).reshape(4, 4),
                                   np.diag([0.7, 0.8, 2.5, 1.0]), rtol=0, atol=0)


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_archives_equal_numpys(volume_tool, tmp_path, compressed):
    """np.savez / np.savez_compressed archives as nnU-Net writes its cases
    (data: C x X x Y x Z float32, seg: 1 x X x Y x Z int8) and plain 3-D
    arrays: each array chosen by --npz-key is the values np.load reads; several
    are stacked as channels, every array when none is named (MONAI's
    NumpyReader); a missing key, arrays that do not stack and a damaged
    archive are named errors (npz_test.cc: a deflate bomb, other methods)."""
    rng = np.random.default_rng(5 + compressed)
    save = np.savez_compressed if compressed else np.savez
    data = rng.standard_normal((2, 11, 9, 7)).astype(np.float32)
    seg = rng.integers(-1, 3, size=(1, 11, 9, 7)).astype(np.int8)
    save(tmp_path / "case.npz", data=data, seg=seg)
    a, b = (rng.integers(0, 4000, size=(6, 5, 4)).astype(np.int16) for _ in range(2))
    save(tmp_path / "pair.npz", a, b)  # arr_0, arr_1

    def read_npz(path, *keys):
        args = [volume_tool, "read", str(path), "--out", str(tmp_path / "v.f32")]
        for k in keys:
            args += ["--npz-key", k]
        out = subprocess.run(args, capture_output=True, text=True)
        return out, (np.fromfile(tmp_path / "v.f32", dtype=np.float32) if out.returncode == 0
                     else None)

    def volume_order(arr):  # channel-first arrays to stoker's voxel order
        return np.concatenate([c.astype(np.float32).ravel(order="F") for c in arr])

    loaded = np.load(tmp_path / "case.npz")
    out, got = read_npz(tmp_path / "case.npz", "data")
    assert out.returncode == 0, out.stdout + out.stderr
    info = json.loads(out.stdout)
    assert info["channels"] == 2 and info["shape"] == [11, 9, 7] and info["type"] == "float32"
    assert np.array_equal(got, volume_order(loaded["data"]))
    out, got = read_npz(tmp_path / "case.npz", "seg")
    assert np.array_equal(got, volume_order(loaded["seg"]))
    out, got = read_npz(tmp_path / "pair.npz")
    pair = np.load(tmp_path / "pair.npz")
    assert json.loads(out.stdout)["channels"] == 2
    assert np.array_equal(got, volume_order(np.stack([pair["arr_0"], pair["arr_1"]])))
    out, got = read_npz(tmp_path / "pair.npz", "arr_1")
    assert np.array_equal(got, pair["arr_1"].astype(np.float32).ravel(order="F"))

    out, _ = read_npz(tmp_path / "case.npz", "image")
    err = json.loads(out.stdout)
    assert err["code"] == "NOT_FOUND" and "no array 'image'" in err["error"]
    assert "data, seg" in err["error"]
    out, _ = read_npz(tmp_path / "case.npz")  # float32 and int8: not one volume
    assert json.loads(out.stdout)["code"] == "INVALID_ARGUMENT"
    raw = (tmp_path / "case.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(raw[: len(raw) // 2])
    out, _ = read_npz(tmp_path / "cut.npz", "data")
    assert out.returncode == 2 and json.loads(out.stdout)["code"] == "DATA_LOSS"


def test_hdf5_datasets_equal_h5pys(volume_tool, tmp_path):
    """HDF5 datasets (server/volume/hdf5_volume.h): each dtype, 3-D and 4-D
    (channel first, as a .npy), contiguous, chunked and gzip'd, in groups;
    the values h5py reads, in the volume's order; several datasets stacked
    as channels; a missing dataset, a file of several datasets read without
    a key, and a damaged file are named errors."""
    h5py = pytest.importorskip("h5py")
    rng = np.random.default_rng(21)
    path = tmp_path / "vols.h5"
    arrays = {}
    with h5py.File(path, "w") as f:
        for n, dtype in enumerate(DTYPES + ["bool"]):
            shape = (9, 7, 5) if n % 2 else (2, 9, 7, 5)
            arr = (rng.integers(0, 2, size=shape).astype(bool) if dtype == "bool"
                   else random_array(dtype, shape, rng))
            kw = ({} if n % 3 == 0 else {"chunks": True} if n % 3 == 1
                  else {"compression": "gzip"})
            f.create_dataset(f"cases/{dtype}", data=arr, **kw)
            arrays[dtype] = arr
        f.create_dataset("t1", data=random_array("float32", (9, 7, 5), rng))
        f.create_dataset("t2", data=random_array("float32", (9, 7, 5), rng))
        f.create_dataset("odd", data=random_array("float32", (3, 7, 5), rng))

    def read_h5(p, *keys):
        args = [volume_tool, "read", str(p), "--out", str(tmp_path / "v.f32")]
        for k in keys:
            args += ["--npz-key", k]
        out = subprocess.run(args, capture_output=True, text=True)
        got = (np.fromfile(tmp_path / "v.f32", dtype=np.float32) if out.returncode == 0
               else None)
        return out, got

    def volume_order(arr):
        if arr.ndim == 4:
            return np.concatenate([c.astype(np.float32).ravel(order="F") for c in arr])
        return arr.astype(np.float32).ravel(order="F")

    with h5py.File(path) as f:
        for dtype in DTYPES + ["bool"]:
            out, got = read_h5(path, f"cases/{dtype}")
            assert out.returncode == 0, (dtype, out.stdout + out.stderr)
            want = f[f"cases/{dtype}"][()]
            info = json.loads(out.stdout)
            assert info["channels"] == (want.shape[0] if want.ndim == 4 else 1)
            assert np.array_equal(got, volume_order(want)), dtype
        out, got = read_h5(path, "t1", "/t2")
        assert json.loads(out.stdout)["channels"] == 2
        assert np.array_equal(got, np.concatenate([volume_order(f["t1"][()]),
                                                   volume_order(f["t2"][()])]))
    for keys, code, words in ((("cases/none",), "NOT_FOUND", "no dataset 'cases/none'"),
                              ((), "NOT_FOUND", "name the dataset"),
                              (("cases",), "INVALID_ARGUMENT", "not a dataset"),
                              (("t1", "odd"), "INVALID_ARGUMENT", "differ in shape")):
        out, _ = read_h5(path, *keys)
        err = json.loads(out.stdout)
        assert err["code"] == code and words in err["error"], err
    raw = path.read_bytes()
    (tmp_path / "cut.h5").write_bytes(raw[:3000])
    out, _ = read_h5(tmp_path / "cut.h5", "t1")
    assert out.returncode == 2 and json.loads(out.stdout)["code"] in (
        "INVALID_ARGUMENT", "NOT_FOUND", "DATA_LOSS")
