"""The deterministic prefix's ops (server/volume/: orientation.h,
intensity.h, crop_foreground.h, through stoker-volume-tool prefix) against
references users trust, on CT-like volumes (bench/volume_corpus.py):

  * Orientation: nibabel's io_orientation / ornt_transform /
    apply_orientation / inv_ornt_aff (what MONAI's Orientation calls):
    equal voxels, the same affine;
  * ScaleIntensityRange: MONAI's arithmetic run with torch on the same
    float32 tensor: bit-equal; and a float64 reference of the documented
    formula ((x - a_min) / (a_max - a_min) * (b_max - b_min) + b_min, then
    the clip) within 2 float32 ulps of 1;
  * NormalizeIntensity: a float64 reference of MONAI's formula ((x - mean)
    / std, population std, over the nonzero voxels with nonzero=True, per
    channel with channel_wise=True) within 8 float32 ulps of max(1, |x|)
    (stoker takes the mean and std in float64, MONAI in float32);
  * CropForeground: a numpy transcription of MONAI's
    generate_spatial_bounding_box and CropForeground's divisible box and
    zero padding: equal voxels, the affine moved to the box;
  * Spacing: a numpy transcription of MONAI's zoom_affine and
    compute_shape_offset for the geometry, scipy's map_coordinates in
    float64 for the values (trilinear within one float32 rounding, nearest
    equal).
(Checked by hand against MONAI 1.5's own transforms, which CI cannot
fetch: the spleen prefix's voxels and affines equal.)"""

import json
import subprocess

import numpy as np
import pytest

from volume_corpus import ct_volume
from volumes import zoom_geometry

nib = pytest.importorskip("nibabel")
torch = pytest.importorskip("torch")
EPS = np.finfo(np.float32).eps


def prefix(tool, path, ops, tmp_path, label=None):
    """The tool's prefix: (image values as (c, i, j, k), affine); with a
    label, its values land in tmp_path / "label.u8"."""
    cmd = [tool, "prefix", str(path), "--out", str(tmp_path / "out.f32")]
    if label is not None:
        cmd += ["--label", str(label), "--label-out", str(tmp_path / "label.u8")]
    for op in ops:
        cmd += ["--op", op]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    info = json.loads(out.stdout)
    shape = info["shape"]
    values = np.fromfile(tmp_path / "out.f32", dtype=np.float32)
    # voxel order (i fastest, channel slowest) -> (c, i, j, k)
    arr = values.reshape(info["channels"], shape[2], shape[1], shape[0]).transpose(0, 3, 2, 1)
    return arr, np.array(info["affine"]).reshape(4, 4)


def oblique_lps_affine(spacing=(0.78, 0.78, 2.5), theta=0.12):
    """A scanner's LPS-stored affine, tilted about z (a gantry tilt)."""
    rot = np.array([[np.cos(theta), -np.sin(theta), 0], [np.sin(theta), np.cos(theta), 0],
                    [0, 0, 1]])
    aff = np.eye(4)
    aff[:3, :3] = rot @ np.diag([-spacing[0], -spacing[1], spacing[2]])
    aff[:3, 3] = [120.5, 98.25, -310.0]
    return aff


@pytest.fixture(scope="module")
def ct(tmp_path_factory):
    d = tmp_path_factory.mktemp("ct")
    hu, label, _ = ct_volume((160, 144, 20), np.random.default_rng(5))
    aff = oblique_lps_affine()
    nib.save(nib.Nifti1Image(hu, aff), d / "ct.nii.gz")
    nib.save(nib.Nifti1Image(label, aff), d / "label.nii.gz")
    return d, hu, label, nib.load(d / "ct.nii.gz").affine  # as stored: float32


def ref_orientation(arr, aff, codes):
    ornt = nib.orientations.ornt_transform(nib.io_orientation(aff),
                                           nib.orientations.axcodes2ornt(codes))
    return (nib.orientations.apply_orientation(arr, ornt),
            aff @ nib.orientations.inv_ornt_aff(ornt, arr.shape))


@pytest.mark.parametrize("codes", ["RAS", "LPS", "PIL", "SAR"])
def test_orientation_is_nibabels(volume_tool, ct, tmp_path, codes):
    d, hu, _, aff = ct
    got, got_aff = prefix(volume_tool, d / "ct.nii.gz", [f"Orientation:{codes}"], tmp_path)
    want, want_aff = ref_orientation(hu.astype(np.float32), aff, codes)
    assert np.array_equal(got[0], want)
    assert np.allclose(got_aff, want_aff, rtol=0, atol=1e-9)
    assert "".join(nib.aff2axcodes(got_aff)) == codes


def monai_scale(x, a_min, a_max, b_min, b_max, clip):
    """MONAI's ScaleIntensityRange.__call__, on a torch float32 tensor."""
    img = torch.from_numpy(x.copy())
    img = (img - a_min) / (a_max - a_min)
    img = img * (b_max - b_min) + b_min
    if clip:
        img = torch.clamp(img, b_min, b_max)
    return img.numpy()


def test_scale_intensity_range_is_monais_arithmetic(volume_tool, ct, tmp_path):
    d, hu, _, _ = ct
    for a_min, a_max, b_min, b_max, clip in ((-57, 164, 0.0, 1.0, True),
                                             (-175, 250, -1.0, 1.0, False),
                                             (-1000, 1000, 0.0, 255.0, True)):
        op = f"ScaleIntensityRange:{a_min},{a_max},{b_min},{b_max}" + (",clip" if clip else "")
        got, _ = prefix(volume_tool, d / "ct.nii.gz", [op], tmp_path)
        x = hu.astype(np.float32)
        assert np.array_equal(got[0], monai_scale(x, a_min, a_max, b_min, b_max, clip))
        ref = (x.astype(np.float64) - a_min) / (a_max - a_min) * (b_max - b_min) + b_min
        if clip:
            ref = np.clip(ref, b_min, b_max)
        assert np.max(np.abs(got[0] - ref) / np.maximum(1.0, np.abs(ref))) <= 2 * EPS


@pytest.mark.parametrize("nonzero", [False, True])
@pytest.mark.parametrize("channel_wise", [False, True])
def test_normalize_intensity_is_the_formula(volume_tool, tmp_path, nonzero, channel_wise):
    """Four MRI-like channels (BraTS' modalities: zero outside the head,
    each its own scale) as one 4-D file."""
    rng = np.random.default_rng(9)
    x = np.zeros((48, 40, 12, 4), np.float32)
    head = np.zeros((48, 40, 12), bool)
    head[8:40, 6:34, 2:10] = True
    for c in range(4):
        x[..., c][head] = (rng.gamma(2.0 + c, 150.0 * (c + 1), size=head.sum())).astype(np.float32)
    nib.save(nib.Nifti1Image(x, np.eye(4)), tmp_path / "mri.nii.gz")
    args = ",".join(a for a, on in (("nonzero", nonzero), ("channel_wise", channel_wise)) if on)
    got, _ = prefix(volume_tool, tmp_path / "mri.nii.gz",
                    ["NormalizeIntensity" + (f":{args}" if args else "")], tmp_path)
    cf = np.moveaxis(x, -1, 0).astype(np.float64)  # channel first
    ref = cf.copy()
    groups = [ref[c:c + 1] for c in range(4)] if channel_wise else [ref]
    for g in groups:
        mask = g != 0 if nonzero else np.ones_like(g, bool)
        mean, std = g[mask].mean(), g[mask].std()
        g[mask] = (g[mask] - mean) / (std if std != 0 else 1.0)
    assert np.max(np.abs(got - ref) / np.maximum(1.0, np.abs(ref))) <= 8 * EPS
    if nonzero:
        assert np.all(got[np.moveaxis(x, -1, 0) == 0] == 0)


def monai_crop_foreground(img, margin, allow_smaller, k):
    """generate_spatial_bounding_box + CropForeground.compute_bounding_box +
    crop_pad (constant 0), transcribed with numpy: (cropped, start)."""
    fg = (img > 0).any(0)
    start, end = [], []
    for ax in range(3):
        other = tuple(a for a in range(3) if a != ax)
        hits = np.where(fg.any(axis=other))[0]
        lo, hi = hits[0] - margin, hits[-1] + margin + 1
        if allow_smaller:
            lo, hi = max(lo, 0), min(hi, fg.shape[ax])
        size = hi - lo
        new = int(np.ceil(size / k) * k)
        lo -= (new - size) // 2
        start.append(lo)
        end.append(lo + new)
    out = np.zeros((img.shape[0],) + tuple(e - s for s, e in zip(start, end)), img.dtype)
    src = tuple(slice(max(s, 0), min(e, n)) for s, e, n in zip(start, end, img.shape[1:]))
    dst = tuple(slice(max(s, 0) - s, max(s, 0) - s + (sl.stop - sl.start))
                for s, sl in zip(start, src))
    out[(slice(None),) + dst] = img[(slice(None),) + src]
    return out, np.array(start)


@pytest.mark.parametrize("margin,allow_smaller,k", [(0, False, 1), (10, True, 1), (10, False, 1),
                                                    (3, True, 16)])
def test_crop_foreground_is_monais_box(volume_tool, ct, tmp_path, margin, allow_smaller, k):
    d, hu, _, aff = ct
    scale = "ScaleIntensityRange:-57,164,0,1,clip"
    op = f"CropForeground:{margin}" + (",allow_smaller" if allow_smaller else "") + f",k={k}"
    got, got_aff = prefix(volume_tool, d / "ct.nii.gz", [scale, op], tmp_path)
    scaled = monai_scale(hu.astype(np.float32), -57, 164, 0.0, 1.0, True)[None]
    want, start = monai_crop_foreground(scaled, margin, allow_smaller, k)
    assert got.shape == want.shape
    assert np.array_equal(got, want)
    shift = np.eye(4)
    shift[:3, 3] = start
    assert np.allclose(got_aff, aff @ shift, rtol=0, atol=1e-9)


def test_spleen_prefix_in_order(volume_tool, ct, tmp_path):
    """The Decathlon spleen recipe's prefix without Spacing (Orientation RAS,
    ScaleIntensityRange -57..164 -> 0..1 clip, CropForeground), each step
    its reference in turn; a volume with no foreground fails, named."""
    d, hu, _, aff = ct
    got, got_aff = prefix(volume_tool, d / "ct.nii.gz",
                          ["Orientation:RAS", "ScaleIntensityRange:-57,164,0,1,clip",
                           "CropForeground"], tmp_path)
    ras, ras_aff = ref_orientation(hu.astype(np.float32), aff, "RAS")
    scaled = monai_scale(ras, -57, 164, 0.0, 1.0, True)[None]
    want, start = monai_crop_foreground(scaled, 0, False, 1)
    assert np.array_equal(got, want)
    shift = np.eye(4)
    shift[:3, 3] = start
    assert np.allclose(got_aff, ras_aff @ shift, rtol=0, atol=1e-9)
    nib.save(nib.Nifti1Image(np.full((8, 8, 8), -1000, np.int16), aff), tmp_path / "air.nii.gz")
    out = subprocess.run([volume_tool, "prefix", str(tmp_path / "air.nii.gz"), "--op",
                          "ScaleIntensityRange:-57,164,0,1,clip", "--op", "CropForeground"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    err = json.loads(out.stdout)
    assert err["code"] == "FAILED_PRECONDITION" and "no foreground" in err["error"]


# MONAI's zoom_affine and compute_shape_offset (diagonal=False), transcribed
# once, for this test and bench/volumes.py's DataLoader side.
monai_spacing_geometry = zoom_geometry


@pytest.mark.parametrize("theta", [0.0, 0.12])
def test_spacing_is_monais_resampling(volume_tool, tmp_path, theta):
    """Spacing(pixdim=(1.5, 1.5, 2.0)) after Orientation RAS, on a CT-like
    volume and its label (as stored: LPS, with or without a gantry tilt):
    the geometry of MONAI's zoom_affine and compute_shape_offset, and the
    values of a float64 trilinear (the image) or nearest (the label)
    sampling at inv(A_in) A_out n with border clamping (scipy's
    map_coordinates, order 1 / 0, mode 'nearest'): the image within one
    float32 rounding of the float64 reference, the label equal."""
    ndimage = pytest.importorskip("scipy.ndimage")
    hu, label, _ = ct_volume((120, 100, 14), np.random.default_rng(2))
    aff = oblique_lps_affine(theta=theta)
    nib.save(nib.Nifti1Image(hu, aff), tmp_path / "ct.nii.gz")
    nib.save(nib.Nifti1Image(label, aff), tmp_path / "label.nii.gz")
    stored = nib.load(tmp_path / "ct.nii.gz").affine
    image, image_aff = prefix(volume_tool, tmp_path / "ct.nii.gz",
                              ["Orientation:RAS", "Spacing:1.5,1.5,2.0"], tmp_path,
                              label=tmp_path / "label.nii.gz")
    labels = np.fromfile(tmp_path / "label.u8", dtype=np.uint8).reshape(
        image.shape[3], image.shape[2], image.shape[1]).transpose(2, 1, 0)[None]
    for data, got, got_aff, order in ((hu, image, image_aff, 1), (label, labels, image_aff, 0)):
        ras, ras_aff = ref_orientation(data.astype(np.float64), stored, "RAS")
        new, shape = monai_spacing_geometry(ras_aff, ras.shape, (1.5, 1.5, 2.0))
        assert got.shape == (1,) + shape
        assert np.allclose(got_aff, new, rtol=0, atol=1e-9)
        grid = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"))
        coords = np.einsum("ij,jxyz->ixyz", np.linalg.solve(ras_aff, new)[:3, :3], grid)
        coords += np.linalg.solve(ras_aff, new)[:3, 3][:, None, None, None]
        for a in range(3):
            coords[a] = np.clip(coords[a], 0, ras.shape[a] - 1)
        if order == 1:
            want = ndimage.map_coordinates(ras, coords, order=1, mode="nearest")
            err = np.abs(got[0].astype(np.float64) - want)
            assert np.all(err <= np.spacing(np.abs(want).astype(np.float32)).astype(np.float64) + 1e-9)
        else:
            want = ras[tuple(np.rint(coords).astype(int))]
            assert np.array_equal(got[0], want.astype(np.float32))
            assert set(np.unique(got)) <= {0.0, 1.0}


def test_prepared_entry_and_its_patches(volume_tool, tmp_path):
    """The spleen recipe's prefix over a CT-like image and its label into a
    cache entry, then RandCropByPosNegLabel(96^3 -> 32^3 here, pos 1, neg 1)
    from it: the entry's voxel lists are MONAI's map_binary_to_indices of
    what the prefix made (foreground = label > 0, background = label 0 with
    the image > image_threshold), every patch is the slice of the prepared
    image and label at its start, its drawn voxel is foreground exactly when
    it says so, about half are (pos 1, neg 1), and the same seed, epoch and
    index draw the same patches."""
    hu, label, _ = ct_volume((160, 144, 30), np.random.default_rng(4))
    aff = oblique_lps_affine(theta=0.0)
    nib.save(nib.Nifti1Image(hu, aff), tmp_path / "ct.nii.gz")
    nib.save(nib.Nifti1Image(label, aff), tmp_path / "seg.nii.gz")
    ops = ["Orientation:RAS", "Spacing:1.5,1.5,2.0", "ScaleIntensityRange:-57,164,0,1,clip",
           "CropForeground"]
    cmd = [volume_tool, "prefix", str(tmp_path / "ct.nii.gz"), "--label",
           str(tmp_path / "seg.nii.gz"), "--out", str(tmp_path / "img.f32"), "--label-out",
           str(tmp_path / "seg.u8"), "--entry", str(tmp_path / "entry")]
    for op in ops:
        cmd += ["--op", op]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    info = json.loads(out.stdout)
    ni, nj, nk = info["shape"]
    img = np.fromfile(tmp_path / "img.f32", np.float32).reshape(nk, nj, ni).transpose(2, 1, 0)
    seg = np.fromfile(tmp_path / "seg.u8", np.uint8).reshape(nk, nj, ni).transpose(2, 1, 0)
    assert info["foreground"] == int((seg > 0).sum()) > 0
    assert info["background"] == int(((seg == 0) & (img > 0)).sum())
    assert img.min() >= 0 and img.max() <= 1

    def patches(seed, n=200):
        r = subprocess.run([volume_tool, "patches", str(tmp_path / "entry"), "--key",
                            info["recipe"], "--spatial-size", "32,32,16", "--num-samples",
                            str(n), "--seed", str(seed), "--out", str(tmp_path / "p.f32"),
                            "--label-out", str(tmp_path / "p.u8")], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        return json.loads(r.stdout)["patches"]

    got = patches(1)
    values = np.fromfile(tmp_path / "p.f32", np.float32).reshape(200, 16, 32, 32)
    labels = np.fromfile(tmp_path / "p.u8", np.uint8).reshape(200, 16, 32, 32)
    fg = 0
    for n, p in enumerate(got):
        (a, b, c), size = p["start"], p["size"]
        assert size == [32, 32, 16]
        assert np.array_equal(values[n].transpose(2, 1, 0), img[a:a + 32, b:b + 32, c:c + 16])
        assert np.array_equal(labels[n].transpose(2, 1, 0), seg[a:a + 32, b:b + 32, c:c + 16])
        d = p["drawn"]
        at = (d % ni, d // ni % nj, d // (ni * nj))
        assert (seg[at] > 0) == p["foreground"]
        assert all(s <= x < s + w for s, x, w in zip(p["start"], at, size))
        fg += p["foreground"]
    assert abs(fg - 100) < 4 * np.sqrt(200 * 0.25)  # Binomial(200, 1/2)
    assert patches(1) == got and patches(2) != got
    bad = subprocess.run([volume_tool, "patches", str(tmp_path / "entry"), "--key", "1"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and json.loads(bad.stdout)["code"] == "FAILED_PRECONDITION"


def monai_rotate_scale(angles, factors):
    """MONAI's create_rotate (R0 R1 R2, 3-D) times create_scale."""
    m = np.eye(3)
    a0, a1, a2 = angles
    m = m @ np.array([[1, 0, 0], [0, np.cos(a0), -np.sin(a0)], [0, np.sin(a0), np.cos(a0)]])
    m = m @ np.array([[np.cos(a1), 0, np.sin(a1)], [0, 1, 0], [-np.sin(a1), 0, np.cos(a1)]])
    m = m @ np.array([[np.cos(a2), -np.sin(a2), 0], [np.sin(a2), np.cos(a2), 0], [0, 0, 1]])
    return m @ np.diag(factors)


def grid_sample_reference(vol, m, mode, padding):
    """MONAI's Affine resampling of `vol` by `m` (output voxel's centred
    coordinates -> input's) through torch's grid_sample in float64
    (align_corners=False, as MONAI's Resample calls it)."""
    n = np.array(vol.shape, float)
    c = (n - 1) / 2
    idx = np.stack(np.meshgrid(*[np.arange(k) for k in vol.shape], indexing="ij"), -1) - c
    src = idx @ m.T + c                                   # input voxel coordinates
    norm = (2 * src + 1) / n - 1                          # align_corners=False
    grid = torch.from_numpy(norm[..., ::-1].copy())[None]  # (x, y, z) = (dim 2, 1, 0)
    out = torch.nn.functional.grid_sample(torch.from_numpy(vol.astype(np.float64))[None, None],
                                          grid, mode=mode, padding_mode=padding,
                                          align_corners=False)
    return out[0, 0].numpy()


@pytest.mark.parametrize("padding", ["reflection", "border", "zeros"])
def test_rand_affine_resampling_is_grid_samples(volume_tool, tmp_path, padding):
    """RandAffine's resampling (augment.h, through stoker-volume-tool affine)
    against torch's grid_sample in float64 on MONAI's geometry (centred
    coordinates, R0 R1 R2 S), each padding: the image trilinear within one
    float32 ulp of the largest value of the float64 reference (measured:
    3e-8 of the range), the label nearest equal."""
    rng = np.random.default_rng(8)
    hu, label, _ = ct_volume((20, 18, 12), rng)
    vol = hu.astype(np.float32)
    np.save(tmp_path / "v.npy", vol)
    np.save(tmp_path / "l.npy", label)
    for angles, factors in [((0.0, 0.0, 0.3), (1.0, 1.0, 1.0)), ((0.2, -0.15, 0.1), (1.1, 0.9, 1.05)),
                            ((0.0, 0.0, 0.0), (0.8, 1.3, 1.0)), ((0.4, 0.3, -0.5), (1.2, 1.2, 0.85))]:
        m = monai_rotate_scale(angles, factors)
        arg = ",".join(repr(float(x)) for x in m.ravel())
        subprocess.run([volume_tool, "affine", str(tmp_path / "v.npy"), "--matrix", arg,
                        "--padding", padding, "--out", str(tmp_path / "o.f32")], check=True)
        got = np.fromfile(tmp_path / "o.f32", np.float32).reshape(12, 18, 20).transpose(2, 1, 0)
        want = grid_sample_reference(vol, m, "bilinear", padding)
        # float32 rounding of the output: half an ulp of the largest value
        assert np.max(np.abs(got - want)) <= np.spacing(np.float32(np.abs(vol).max()))
        subprocess.run([volume_tool, "affine", str(tmp_path / "l.npy"), "--matrix", arg,
                        "--padding", padding, "--nearest", "--out", str(tmp_path / "o.u8")],
                       check=True)
        got_l = np.fromfile(tmp_path / "o.u8", np.uint8).reshape(12, 18, 20).transpose(2, 1, 0)
        want_l = grid_sample_reference(label.astype(np.float64), m, "nearest", padding)
        assert np.array_equal(got_l, want_l.astype(np.uint8))
