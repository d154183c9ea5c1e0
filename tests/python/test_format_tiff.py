"""stoker's TIFF decoder (server/image/decode/tiff_decoder.h) against PIL 9.4.

Every mode PIL opens TIFF files as (1, L at 2/4/8 bits, I;16 / I;16B, LA, P
at 1/2/4/8 bits, PA, RGB / RGBA / RGBX / premultiplied RGBA at 8 and 16
bits, CMYK at 8 and 16 bits, JPEG YCbCr), in strips and tiles, contiguous
and planar, with each compression PIL and tiffcp write: stoker's decode must
equal Image.open(f).convert("RGB") byte for byte. Files PIL cannot write are
built by write_tiff below (uncompressed strips), then recompressed, tiled or
split into planes by tiffcp. Hostile files (truncated, corrupt, bombs) must
fail cleanly. Run: /usr/bin/python3 -m pytest -q tests/python/test_format_tiff.py
"""

import shutil
import struct
import subprocess

import numpy as np
import pytest

import formats_util as fu

pytestmark = pytest.mark.skipif(not fu.tool_available(), reason="stoker-image-tool not built")
Image = pytest.importorskip("PIL.Image")

H, W = 37, 53  # not multiples of 16: partial strips and tiles


def photo(shape, seed, hi=256):
    """Noise plus gradients, values in [0, hi)."""
    rng = np.random.RandomState(seed)
    h, w = shape[:2]
    yy, xx = np.mgrid[0:h, 0:w]
    base = (xx * 3 + yy * 5)[..., None] if len(shape) == 3 else (xx * 3 + yy * 5)
    noise = rng.randint(0, hi // 4 + 1, shape)
    return ((base * (hi // 256 or 1) + noise) % hi).astype(np.int64)


def pack(vals, bps):
    """[H, W] values of bps < 8 bits, packed MSB first, rows byte-aligned."""
    h, w = vals.shape
    out = np.zeros((h, (w * bps + 7) // 8), np.uint8)
    for x in range(w):
        bit = x * bps
        out[:, bit // 8] |= (vals[:, x] << (8 - bps - bit % 8)).astype(np.uint8)
    return out


def write_tiff(path, samples, photometric, bps, extra=(), planar=1, order="<", colormap=None,
               rps=None, width=None):
    """An uncompressed striped TIFF. samples: [H, W, S] (bps 8/16) or packed rows (bps < 8)."""
    h = samples.shape[0]
    w = width or samples.shape[1]
    spp = samples.shape[2] if bps >= 8 else 1
    if bps >= 8:
        a = samples.astype(np.dtype(order + ("u1" if bps == 8 else "u2")))
        data = np.ascontiguousarray(a.transpose(2, 0, 1) if planar == 2 else a).tobytes()
    else:
        data = samples.astype(np.uint8).tobytes()
    rps = rps or h
    row = (w * (1 if planar == 2 else spp) * bps + 7) // 8
    planes = spp if planar == 2 else 1
    chunks = [data[(p * h + y) * row:(p * h + min(h, y + rps)) * row]
              for p in range(planes) for y in range(0, h, rps)]
    tags = {256: (4, [w]), 257: (4, [h]), 258: (3, [bps] * spp), 259: (3, [1]),
            262: (3, [photometric]), 273: (4, [0] * len(chunks)), 277: (3, [spp]),
            278: (4, [rps]), 279: (4, [len(c) for c in chunks])}
    if planar != 1:
        tags[284] = (3, [planar])
    if colormap is not None:
        tags[320] = (3, list(colormap))
    if extra:
        tags[338] = (3, list(extra))
    ifd_size = 2 + 12 * len(tags) + 4
    blob_at = 8 + ifd_size
    blob_len = sum(len(v) * (2 if t == 3 else 4) for t, v in tags.values())
    data_at = blob_at + blob_len
    offsets, at = [], data_at
    for c in chunks:
        offsets.append(at)
        at += len(c)
    tags[273] = (4, offsets)
    head = bytearray(b"II*\0" if order == "<" else b"MM\0*") + struct.pack(order + "I", 8)
    head += struct.pack(order + "H", len(tags))
    blobs = bytearray()
    for tag in sorted(tags):
        typ, vals = tags[tag]
        raw = b"".join(struct.pack(order + ("H" if typ == 3 else "I"), v) for v in vals)
        if len(raw) <= 4:
            head += struct.pack(order + "HHI", tag, typ, len(vals)) + raw.ljust(4, b"\0")
        else:
            head += struct.pack(order + "HHII", tag, typ, len(vals), blob_at + len(blobs))
            blobs += raw
    head += b"\0\0\0\0"
    with open(path, "wb") as f:
        f.write(bytes(head + blobs.ljust(blob_len, b"\0")) + b"".join(chunks))


def tiffcp(src, dst, *args):
    subprocess.run(["tiffcp", *args, str(src), str(dst)], check=True, capture_output=True)
    return dst


def variants(path, tmp, order="<", predictor=True):
    """path, recompressed (LZW with predictor 2, deflate, PackBits), tiled, tiled + deflate."""
    bo = "-B" if order == ">" else "-L"
    p = ":2" if predictor else ""
    yield path
    for name, args in [("lzw2", ("-c", "lzw" + p, "-r", "8")), ("zip", ("-c", "zip")),
                       ("pack", ("-c", "packbits", "-r", "5")), ("tile", ("-t", "-w", "16", "-l", "32")),
                       ("tilezip", ("-t", "-w", "32", "-l", "16", "-c", "zip" + p))]:
        yield tiffcp(path, tmp / f"{path.stem}_{name}.tif", bo, *args)


def compressed(f):
    return any(k in f.name for k in ("lzw", "zip", "pack"))


needs_tiffcp = pytest.mark.skipif(shutil.which("tiffcp") is None, reason="tiffcp missing")


@pytest.mark.parametrize("mode", ["1", "L", "P", "RGB", "RGBA", "CMYK", "I;16"])
@pytest.mark.parametrize("compression", ["raw", "tiff_lzw", "tiff_adobe_deflate", "packbits", "jpeg"])
def test_pil_written(tmp_path, mode, compression):
    if compression == "jpeg" and mode not in ("L", "RGB"):
        pytest.skip("PIL writes JPEG-in-TIFF for L and RGB only")
    src = photo((H, W, 3), 1)
    img = Image.fromarray(src.astype(np.uint8), "RGB")
    if mode == "I;16":
        img = Image.fromarray((photo((H, W), 2, 65536) >> (np.arange(W) % 9)).astype(np.uint16), "I;16")
    elif mode == "P":
        img = img.quantize(200)
    else:
        img = img.convert(mode)
    path = tmp_path / "a.tif"
    img.save(path, compression=compression)
    fu.assert_same_as_pil(path, tmp_path)


@needs_tiffcp
@pytest.mark.parametrize("bps", [1, 2, 4, 8])
@pytest.mark.parametrize("photometric", [0, 1, 3])
def test_low_bit_depths(tmp_path, bps, photometric):
    vals = photo((H, W), bps, 2 ** bps)
    cmap = np.random.RandomState(bps).randint(0, 65536, 3 * 2 ** bps) if photometric == 3 else None
    path = tmp_path / "g.tif"
    write_tiff(path, pack(vals, bps) if bps < 8 else vals[..., None], photometric, bps,
               colormap=cmap, width=W, rps=7)
    for f in variants(path, tmp_path, predictor=bps == 8):
        fu.assert_same_as_pil(f, tmp_path)
    tiffcp(path, tmp_path / "lsb.tif", "-f", "lsb2msb", "-c", "lzw")  # PIL's raw decoder lacks some
    fu.assert_same_as_pil(tmp_path / "lsb.tif", tmp_path)


LAYOUTS = [  # name, photometric, samples, extra samples
    ("LA", 1, 2, (2,)), ("PA", 3, 2, (2,)), ("RGB", 2, 3, ()), ("RGBA", 2, 4, (2,)),
    ("RGBa", 2, 4, (1,)), ("RGBX", 2, 4, (0,)), ("RGBnone", 2, 4, ()), ("RGBXX", 2, 5, (0, 0)),
    ("RGBaX", 2, 5, (1, 0)), ("RGBAXX", 2, 6, (2, 0, 0)), ("CMYK", 5, 4, ()),
    ("CMYKX", 5, 5, (0,)), ("CMYKXX", 5, 6, (0, 0)),
]


@needs_tiffcp
@pytest.mark.parametrize("name,photometric,spp,extra", LAYOUTS, ids=[x[0] for x in LAYOUTS])
@pytest.mark.parametrize("planar", [1, 2])
def test_8bit_layouts(tmp_path, name, photometric, spp, extra, planar):
    s = photo((H, W, spp), spp)
    s[..., -1] = np.random.RandomState(0).randint(0, 256, (H, W))  # alpha: 0, 255 and between
    s[0, :3, -1] = [0, 255, 1]
    cmap = np.random.RandomState(9).randint(0, 65536, 768) if photometric == 3 else None
    path = tmp_path / "m.tif"
    write_tiff(path, s, photometric, 8, extra=extra, planar=planar, colormap=cmap, rps=10)
    compared = 0
    for f in variants(path, tmp_path):
        try:
            fu.pil_rgb(f)
        except Exception:  # PIL's raw planar decoder and its 5-6 sample strips (see the header)
            continue
        if planar == 2 and name == "RGBnone" and not compressed(f):
            continue  # PIL garbles uncompressed planar tiles without ExtraSamples
        fu.assert_same_as_pil(f, tmp_path)
        compared += 1
    assert compared >= 1


@needs_tiffcp
@pytest.mark.parametrize("photometric,spp,extra", [(1, 1, ()), (2, 3, ()), (2, 4, (2,)), (2, 4, (1,)),
                                                   (2, 4, (0,)), (5, 4, ())])
@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("planar", [1, 2])
def test_16bit(tmp_path, photometric, spp, extra, order, planar):
    if spp == 1 and planar == 2:
        pytest.skip("one sample: planar is contiguous")
    s = photo((H, W, spp), 16 + spp, 65536)
    s[..., 0] >>= np.arange(W) % 9  # some small values: I;16 clips at 255
    path = tmp_path / "w.tif"
    write_tiff(path, s, photometric, 16, extra=extra, planar=planar, order=order, rps=9)
    if photometric == 5 and order == ">":
        assert fu.stoker_fails(path, tmp_path) is not None  # PIL cannot open these either
        return
    for f in variants(path, tmp_path, order):
        if planar == 2 and not compressed(f):
            continue  # PIL's raw decoder garbles 16-bit planes (see the header)
        try:
            fu.pil_rgb(f)
        except Exception:
            continue
        fu.assert_same_as_pil(f, tmp_path)


@needs_tiffcp
@pytest.mark.parametrize("args", [("-c", "jpeg", "-r", "16"), ("-c", "jpeg:r", "-r", "8"),
                                  ("-c", "jpeg", "-t", "-w", "16", "-l", "16")],
                         ids=["ycbcr", "rgb", "ycbcr-tiles"])
def test_jpeg(tmp_path, args):
    path = tmp_path / "rgb.tif"
    write_tiff(path, photo((H, W, 3), 5), 2, 8)
    fu.assert_same_as_pil(tiffcp(path, tmp_path / "j.tif", *args), tmp_path)


def test_multipage_reads_the_first(tmp_path):
    a = Image.fromarray(photo((H, W, 3), 1).astype(np.uint8))
    b = Image.fromarray(photo((20, 10, 3), 2).astype(np.uint8))
    path = tmp_path / "pages.tif"
    a.save(path, save_all=True, append_images=[b], compression="tiff_lzw")
    got, _ = fu.stoker_decode(path, tmp_path)
    assert got.shape == (H, W, 3)
    fu.assert_same_as_pil(path, tmp_path)


def good_file(tmp_path, compression="tiff_lzw"):
    path = tmp_path / "good.tif"
    Image.fromarray(photo((H, W, 3), 3).astype(np.uint8)).save(path, compression=compression)
    return path.read_bytes()


@pytest.mark.parametrize("compression", ["raw", "tiff_lzw", "tiff_adobe_deflate"])
def test_truncated(tmp_path, compression):
    data = good_file(tmp_path, compression)
    for cut in sorted({8, 20, len(data) // 3, len(data) // 2, len(data) - 200, len(data) - 1}):
        path = tmp_path / f"cut{cut}.tif"
        path.write_bytes(data[:cut])
        assert fu.stoker_fails(path, tmp_path) is not None, cut


def test_corrupt_deflate_strip(tmp_path):
    data = bytearray(good_file(tmp_path, "tiff_adobe_deflate"))
    data[20:60] = b"\xff" * 40  # the zlib stream starts at 8: its adler32 or codes break
    path = tmp_path / "bad.tif"
    path.write_bytes(bytes(data))
    assert fu.stoker_fails(path, tmp_path) is not None


def ifd_entries(data):
    """{tag: offset of its 12-byte entry} of a little-endian file's first IFD."""
    ifd = struct.unpack_from("<I", data, 4)[0]
    n = struct.unpack_from("<H", data, ifd)[0]
    return {struct.unpack_from("<H", data, ifd + 2 + 12 * i)[0]: ifd + 2 + 12 * i for i in range(n)}


def set_long(data, tag, value):
    at = ifd_entries(data)[tag]
    struct.pack_into("<HI", data, at + 2, 4, 1)
    struct.pack_into("<I", data, at + 8, value)


@pytest.mark.parametrize("size", [(65535, 65535), (1 << 20, 1 << 20), (0xFFFFFFFF, 0xFFFFFFFF)])
def test_bomb_declared_size(tmp_path, size):
    data = bytearray(good_file(tmp_path, "raw"))
    set_long(data, 256, size[0])
    set_long(data, 257, size[1])
    path = tmp_path / "bomb.tif"
    path.write_bytes(bytes(data))
    msg = fu.stoker_fails(path, tmp_path)
    assert msg is not None


def test_bomb_deflate_expands(tmp_path):
    # 4000 x 4000 gray, one deflate strip of zeros: ~16 KB expanding 1000x.
    path = tmp_path / "zeros.tif"
    Image.new("L", (4000, 4000)).save(path, compression="tiff_adobe_deflate")
    assert path.stat().st_size < 60000
    fu.assert_same_as_pil(path, tmp_path)  # legitimate: decodes, bounded by the strip size
    data = bytearray(path.read_bytes())
    set_long(data, 256, 40000)  # now it claims 10x the pixels the stream holds
    path.write_bytes(bytes(data))
    assert fu.stoker_fails(path, tmp_path) is not None


def test_offsets_past_the_end_and_ifd_loops(tmp_path):
    good = good_file(tmp_path, "raw")
    cases = {}
    d = bytearray(good)
    set_long(d, 273, len(good) + 10)  # one strip, its offset past the end
    cases["offset"] = d
    d = bytearray(good_file(tmp_path, "tiff_lzw"))
    set_long(d, 279, 1 << 30)  # byte count past the end
    cases["count"] = d
    d = bytearray(good)
    struct.pack_into("<I", d, 4, len(good) + 100)  # first IFD past the end
    cases["ifd"] = d
    # A zero count (one strip) libtiff and PIL estimate; uncompressed, PIL
    # ignores a count past the end and libtiff repairs it.
    for count, src in ((0, good_file(tmp_path, "tiff_lzw")), (0, good), (1 << 30, good)):
        d = bytearray(src)
        set_long(d, 279, count)
        (tmp_path / "raw_count.tif").write_bytes(bytes(d))
        fu.assert_same_as_pil(tmp_path / "raw_count.tif", tmp_path)
    for name, d in cases.items():
        path = tmp_path / f"{name}.tif"
        path.write_bytes(bytes(d))
        assert fu.stoker_fails(path, tmp_path) is not None, name
    d = bytearray(good)  # IFD chain pointing back to itself: the first page decodes
    ifd = struct.unpack_from("<I", d, 4)[0]
    n = struct.unpack_from("<H", d, ifd)[0]
    struct.pack_into("<I", d, ifd + 2 + 12 * n, ifd)
    path = tmp_path / "loop.tif"
    path.write_bytes(bytes(d))
    got, _ = fu.stoker_decode(path, tmp_path)
    assert got.shape == (H, W, 3)


def test_refused_kinds(tmp_path):
    f = tmp_path / "f.tif"
    Image.fromarray(np.zeros((4, 4), np.float32)).save(f)
    assert "float" in fu.stoker_fails(f, tmp_path)
    s = tmp_path / "s.tif"
    Image.fromarray(np.zeros((4, 4), np.int32)).save(s)
    assert fu.stoker_fails(s, tmp_path) is not None
