"""stoker's BMP and PNM decoders (server/image/decode/stb_decoder.h) against PIL 9.4.

BMP: PIL-written modes 1, L, P, RGB, RGBA, and files written here by
write_bmp (PIL cannot write them): 1/4/8-bit palettes (short palettes, odd
widths), 16-bit 555/565, 24-bit, 32-bit BI_RGB and every BI_BITFIELDS layout
PIL reads, V4/V5/OS/2 headers, top-down rows, odd pixel data offsets. PNM:
PIL-written P5/P6/16-bit P5, and headers written here (maxvals below and
above 255, comments). stoker's decode must equal Image.open(f).convert("RGB")
byte for byte. Hostile files (truncated, bombs, palettes and offsets past the
end, RLE, PBM) must fail cleanly. Neither format has a checksum.
Run: /usr/bin/python3 -m pytest -q tests/python/test_format_bmp.py
"""

import re
import struct

import numpy as np
import pytest

import formats_util as fu

pytestmark = pytest.mark.skipif(not fu.tool_available(), reason="stoker-image-tool not built")
Image = pytest.importorskip("PIL.Image")

H, W = 29, 45  # odd: row padding in every depth


def photo(shape, seed, hi=256):
    """Noise plus gradients, values in [0, hi)."""
    rng = np.random.RandomState(seed)
    h, w = shape[:2]
    yy, xx = np.mgrid[0:h, 0:w]
    base = (xx * 5 + yy * 3)[..., None] if len(shape) == 3 else (xx * 5 + yy * 3)
    noise = rng.randint(0, max(2, hi // 4), shape)
    return ((base * max(1, hi // 256) + noise) % hi).astype(np.int64)


def rows_bmp(vals, bits):
    """[H, W] values (palette indices or packed 16/32-bit words) or [H, W, 3]
    BGR bytes: BMP rows, top first, each padded to 4 bytes."""
    h, w = vals.shape[:2]
    if bits == 24:
        raw = vals.astype(np.uint8).reshape(h, w * 3)
    elif bits in (16, 32):
        raw = vals.astype("<u%d" % (bits // 8)).view(np.uint8).reshape(h, -1)
    else:
        raw = np.zeros((h, (w * bits + 7) // 8), np.uint8)
        for x in range(w):
            bit = x * bits
            raw[:, bit // 8] |= (vals[:, x] << (8 - bits - bit % 8)).astype(np.uint8)
    stride = (w * bits + 31) // 32 * 4
    out = np.zeros((h, stride), np.uint8)
    out[:, :raw.shape[1]] = raw
    return out


def write_bmp(path, vals, bits, hsz=40, compression=0, masks=None, palette=None, colors=0,
              top_down=False, offset=None, gap=b"", cut=0):
    """A BMP of vals (see rows_bmp). masks: 3 after a 40-byte header, 4 in
    longer ones. palette: [N, 3] RGB. gap: bytes between palette and pixels."""
    h, w = vals.shape[:2]
    rows = rows_bmp(vals, bits)
    pixels = (rows if top_down else rows[::-1]).tobytes()
    if hsz == 12:
        info = struct.pack("<IHHHH", 12, w, h, 1, bits)
    else:
        info = struct.pack("<IiiHHIIiiII", hsz, w, -h if top_down else h, 1, bits, compression,
                           len(pixels), 2835, 2835, colors, 0)
        if hsz > 40:
            m = list(masks or []) + [0] * 4
            info += struct.pack("<IIII", *m[:4]) if compression == 3 else b"\0" * 16
            info += b"\0" * (hsz - 56)
    extra = struct.pack("<III", *masks[:3]) if hsz == 40 and compression == 3 else b""
    pal = b""
    if palette is not None:
        pad = b"" if hsz == 12 else b"\0"
        pal = b"".join(bytes([b, g, r]) + pad for r, g, b in np.asarray(palette, np.uint8))
    body = info + extra + pal + gap
    if offset is None:
        offset = 14 + len(body)
    data = b"BM" + struct.pack("<IHHI", 14 + len(body) + len(pixels), 0, 0, offset) + body + pixels
    path.write_bytes(data[:len(data) - cut])
    return path


def write_pnm(path, magic, vals, maxval, header=None, cut=0):
    """P5 ([H, W]) or P6 ([H, W, 3]) samples, 2-byte big-endian over 255."""
    h, w = vals.shape[:2]
    head = header if header is not None else b"%s\n%d %d\n%d\n" % (magic, w, h, maxval)
    data = head + vals.astype(">u2" if maxval > 255 else np.uint8).tobytes()
    path.write_bytes(data[:len(data) - cut])
    return path


def random_palette(n, seed):
    return np.random.RandomState(seed).randint(0, 256, (n, 3))


# --- BMP written by PIL -----------------------------------------------------

@pytest.mark.parametrize("mode", ["1", "L", "P", "RGB", "RGBA"])
def test_pil_written_bmp(tmp_path, mode):
    rgb = photo((H, W, 3), 1).astype(np.uint8)
    im = Image.fromarray(rgb)
    if mode == "P":
        im = im.quantize(colors=200)
    elif mode == "RGBA":
        im = Image.fromarray(np.dstack([rgb, photo((H, W), 2).astype(np.uint8)]), "RGBA")
    else:
        im = im.convert(mode)
    path = tmp_path / f"{mode}.bmp"
    im.save(path)
    fu.assert_same_as_pil(path, tmp_path)


# --- BMP written here -------------------------------------------------------

@pytest.mark.parametrize("bits", [1, 4, 8])
@pytest.mark.parametrize("hsz", [12, 40, 64, 108, 124])
def test_palette(tmp_path, bits, hsz):
    idx = photo((H, W), 3, 1 << bits)
    path = write_bmp(tmp_path / "p.bmp", idx, bits, hsz=hsz, palette=random_palette(1 << bits, 4))
    assert fu.pil_mode(path) == "P"
    fu.assert_same_as_pil(path, tmp_path)


@pytest.mark.parametrize("bits,colors", [(8, 3), (8, 100), (4, 5), (1, 1)])
def test_short_palette(tmp_path, bits, colors):
    """biClrUsed entries; indexes past them are grey in PIL's palette."""
    idx = photo((H, W), 5, 1 << bits)
    path = write_bmp(tmp_path / "s.bmp", idx, bits, colors=colors,
                     palette=random_palette(colors, 6))
    fu.assert_same_as_pil(path, tmp_path)


@pytest.mark.parametrize("bits,palette,mode", [
    (1, [(0, 0, 0), (255, 255, 255)], "1"),
    (1, [(255, 255, 255), (0, 0, 0)], "P"),
    (8, [(i, i, i) for i in range(256)], "L"),
    (8, [(i, i, i) for i in range(40)], "L"),
])
def test_grey_palettes(tmp_path, bits, palette, mode):
    idx = photo((H, W), 7, len(palette) if bits == 8 else 2)
    path = write_bmp(tmp_path / "g.bmp", idx, bits, palette=palette,
                     colors=len(palette) if len(palette) < (1 << bits) else 0)
    assert fu.pil_mode(path) == mode
    fu.assert_same_as_pil(path, tmp_path)


@pytest.mark.parametrize("hsz,compression,masks", [
    (40, 0, None), (40, 3, (0x7C00, 0x3E0, 0x1F)), (40, 3, (0xF800, 0x7E0, 0x1F)),
    (108, 3, (0xF800, 0x7E0, 0x1F, 0)), (124, 3, (0x7C00, 0x3E0, 0x1F, 0x8000)), (12, 0, None),
])
def test_16bit(tmp_path, hsz, compression, masks):
    words = np.random.RandomState(8).randint(0, 65536, (H, W))
    path = write_bmp(tmp_path / "w.bmp", words, 16, hsz=hsz, compression=compression, masks=masks)
    fu.assert_same_as_pil(path, tmp_path)


@pytest.mark.parametrize("hsz", [12, 40, 108, 124])
@pytest.mark.parametrize("top_down", [False, True])
def test_24bit(tmp_path, hsz, top_down):
    if hsz == 12 and top_down:
        pytest.skip("OS/2 heights are unsigned")
    path = write_bmp(tmp_path / "t.bmp", photo((H, W, 3), 9), 24, hsz=hsz, top_down=top_down)
    fu.assert_same_as_pil(path, tmp_path)


def test_24bit_bitfields(tmp_path):
    path = write_bmp(tmp_path / "b.bmp", photo((H, W, 3), 10), 24, compression=3,
                     masks=(0xFF0000, 0xFF00, 0xFF))
    fu.assert_same_as_pil(path, tmp_path)


@pytest.mark.parametrize("hsz,compression,masks,mode", [
    (40, 0, None, "RGB"),
    (124, 0, (0xFF, 0xFF00, 0xFF0000, 0xFF000000), "RGB"),  # BI_RGB: masks ignored
    (40, 3, (0xFF0000, 0xFF00, 0xFF), "RGB"),
    (40, 3, (0xFF000000, 0xFF0000, 0xFF00), "RGB"),
    (108, 3, (0xFF000000, 0xFF0000, 0xFF00, 0xFF), "RGBA"),
    (108, 3, (0xFF, 0xFF00, 0xFF0000, 0xFF000000), "RGBA"),
    (124, 3, (0xFF0000, 0xFF00, 0xFF, 0xFF000000), "RGBA"),
    (124, 3, (0, 0, 0, 0), "RGBA"),
])
def test_32bit(tmp_path, hsz, compression, masks, mode):
    words = np.random.RandomState(11).randint(0, 1 << 32, (H, W), dtype=np.uint64)
    words = words + ((np.mgrid[0:H, 0:W][1] * 5) << 16).astype(np.uint64)
    path = write_bmp(tmp_path / "x.bmp", words % (1 << 32), 32, hsz=hsz, compression=compression,
                     masks=masks, top_down=True)
    assert fu.pil_mode(path) == mode
    fu.assert_same_as_pil(path, tmp_path)


@pytest.mark.parametrize("bits", [4, 8, 24])
@pytest.mark.parametrize("kind", ["gap", "zero", "no_room", "last_pad_missing"])
def test_offsets(tmp_path, bits, kind):
    """Pixel data after a gap; offset 0 (PIL: right after the palette); an
    offset right after the header (PIL: moved past 4 * colours); the last
    row's padding cut (PIL does not read it)."""
    vals = photo((H, W, 3) if bits == 24 else (H, W), 12, 256 if bits == 24 else 1 << bits)
    pal = random_palette(1 << bits, 13) if bits <= 8 else None
    args = dict(palette=pal, top_down=True)
    if kind == "gap":
        args["gap"] = bytes(range(37))
    elif kind == "zero":
        args["offset"] = 0
    elif kind == "no_room":
        if bits > 8:
            pytest.skip("palette files only")
        args["offset"] = 54
        args["gap"] = bytes(4 * (1 << bits))
        args["hsz"] = 40
    else:
        args["cut"] = -((W * bits + 7) // 8) % 4 or pytest.skip("no padding")
    path = write_bmp(tmp_path / "o.bmp", vals, bits, **args)
    fu.assert_same_as_pil(path, tmp_path)


def test_os2_no_room_quirk(tmp_path):
    """OS/2 palette of 3-byte entries, offset right after the header: PIL
    looks for the pixels 4 * colours bytes on."""
    idx = photo((H, W), 14, 16)
    path = write_bmp(tmp_path / "q.bmp", idx, 4, hsz=12, palette=random_palette(16, 15),
                     offset=26, gap=bytes(16))
    fu.assert_same_as_pil(path, tmp_path)


def test_wide_and_tall(tmp_path):
    for shape in [(1, 777), (555, 1), (1, 1)]:
        vals = photo(shape + (3,), 16)
        path = write_bmp(tmp_path / "s.bmp", vals, 24)
        fu.assert_same_as_pil(path, tmp_path)


# --- PNM --------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["L", "RGB", "I"])
def test_pil_written_pnm(tmp_path, mode):
    if mode == "I":
        im = Image.fromarray(photo((H, W), 17, 1 << 9).astype(np.int32), "I")
    else:
        im = Image.fromarray(photo((H, W, 3), 17).astype(np.uint8)).convert(mode)
    path = tmp_path / "p.pnm"
    im.save(path, format="PPM")
    fu.assert_same_as_pil(path, tmp_path)


@pytest.mark.parametrize("maxval", [1, 2, 10, 100, 254, 255, 256, 300, 1000, 4095, 65535])
@pytest.mark.parametrize("magic", [b"P5", b"P6"])
def test_maxvals(tmp_path, magic, maxval):
    """Samples up to maxval and past it (clipped by PIL)."""
    shape = (H, W, 3) if magic == b"P6" else (H, W)
    vals = photo(shape, 18, min(65536, maxval + 1 + maxval // 8))
    path = write_pnm(tmp_path / "m.pnm", magic, vals, maxval)
    fu.assert_same_as_pil(path, tmp_path)


@pytest.mark.parametrize("magic,maxval", [(b"P5", 10), (b"P5", 254), (b"P5", 255), (b"P5", 300),
                                           (b"P5", 1000), (b"P5", 65535), (b"P6", 4097)])
def test_every_sample_value(tmp_path, magic, maxval):
    n = 65536 if maxval > 255 else 256
    vals = np.arange(n).reshape(-1, 256)
    if magic == b"P6":
        vals = np.stack([vals, vals[::-1], vals[:, ::-1]], axis=-1)
    path = write_pnm(tmp_path / "e.pnm", magic, vals, maxval)
    fu.assert_same_as_pil(path, tmp_path)


@pytest.mark.parametrize("header", [
    "P6\n# made by hand\n{w} {h}\n255\n",
    "P6 {w}\t{h}\r255\r",
    "P6\n{w0}# a comment inside a token\r{w1} {h} # then more\n255\n",
    "P6\n{w} {h}\n255#comment right after\n\n",
    "P6\f{w}\v{h} 0255 ",
])
def test_headers(tmp_path, header):
    vals = photo((H, W, 3), 19)
    head = header.format(w=W, h=H, w0=str(W)[0], w1=str(W)[1:]).encode()
    path = write_pnm(tmp_path / "h.ppm", b"P6", vals, 255, header=head)
    assert Image.open(path).size == (W, H)
    fu.assert_same_as_pil(path, tmp_path)


# --- hostile ----------------------------------------------------------------

def test_truncated(tmp_path):
    bmp = write_bmp(tmp_path / "t.bmp", photo((H, W), 20, 256), 8,
                    palette=random_palette(256, 21)).read_bytes()
    pnm = write_pnm(tmp_path / "t.pgm", b"P5", photo((H, W), 22, 4096), 4095).read_bytes()
    for data, name in [(bmp, "t.bmp"), (pnm, "t.pgm")]:
        for cut in [len(data) - 5, len(data) // 2, 1100, 60, 30, 15, 8, 3, 1]:
            path = tmp_path / name
            path.write_bytes(data[:cut])
            msg = fu.stoker_fails(path, tmp_path)
            assert msg, f"{name} cut at {cut} decoded"
            with pytest.raises(Exception):
                fu.pil_rgb(path)


@pytest.mark.parametrize("w,h", [(70000, 70000), (65535, 65535), (1 << 31, 1), (1, 1 << 31)])
def test_bombs(tmp_path, w, h):
    bmp = b"BM" + struct.pack("<IHHI", 0, 0, 0, 54) + struct.pack(
        "<IIIHHIIiiII", 40, w, h, 1, 24, 0, 0, 0, 0, 0, 0) + bytes(64)
    (tmp_path / "b.bmp").write_bytes(bmp)
    assert re.search("over the cap|over stb's limit", fu.stoker_fails(tmp_path / "b.bmp", tmp_path))
    (tmp_path / "b.ppm").write_bytes(b"P6\n%d %d\n255\n" % (w, h) + bytes(64))
    assert re.search("over the cap|over stb's limit", fu.stoker_fails(tmp_path / "b.ppm", tmp_path))


def test_refused(tmp_path):
    """Valid files stoker does not read, and corrupt headers: clean failures."""
    idx = photo((H, W), 23, 256)
    cases = {}
    # RLE8: one run of 4 pixels, end of bitmap.
    cases["rle8.bmp"] = (b"BM" + struct.pack("<IHHI", 0, 0, 0, 54 + 1024) + struct.pack(
        "<IiiHHIIiiII", 40, 4, 1, 1, 8, 1, 4, 0, 0, 0, 0) + bytes(1024) + b"\x04\x07\x00\x01",
        "RLE8")
    im1 = Image.fromarray((idx % 2 * 255).astype(np.uint8)).convert("1")
    im1.save(tmp_path / "p4.pbm")
    cases["p4.pbm"] = ((tmp_path / "p4.pbm").read_bytes(), "P4")
    cases["p2.pgm"] = (b"P2\n2 1\n255\n0 255\n", "P2")
    cases["p3.ppm"] = (b"P3\n1 1\n255\n0 255 7\n", "P3")
    cases["p1.pbm"] = (b"P1\n2 1\n0 1\n", "P1")
    p = write_bmp(tmp_path / "x.bmp", idx, 8, palette=random_palette(256, 24)).read_bytes()
    cases["pal_past_end.bmp"] = (p[:14] + p[14:46] + struct.pack("<I", 200) + p[50:60], "palette")
    cases["offset_past_end.bmp"] = (p[:10] + struct.pack("<I", 10 ** 6) + p[14:], "offset")
    cases["big_palette.bmp"] = (p[:46] + struct.pack("<I", 300) + p[50:], "palette")
    cases["grey4.bmp"] = (write_bmp(tmp_path / "g.bmp", idx % 16, 4, palette=[(i, i, i) for i in range(16)])
                          .read_bytes(), "grey palette")
    cases["v3.bmp"] = (p[:14] + struct.pack("<I", 56) + p[18:], "56-byte")
    cases["rle4.bmp"] = (p[:30] + struct.pack("<I", 2) + p[34:], "RLE4")
    cases["masks.bmp"] = (write_bmp(tmp_path / "m.bmp", idx, 32, hsz=108, compression=3,
                                    masks=(0xFF00, 0xFF, 0xFF0000, 0)).read_bytes(), "masks")
    cases["zero.ppm"] = (b"P6\n0 5\n255\n" + bytes(30), "zero")
    cases["maxval.ppm"] = (b"P6\n1 1\n70000\n" + bytes(30), "maxval")
    for name, (data, word) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        msg = fu.stoker_fails(path, tmp_path)
        assert msg and word in msg, f"{name}: {msg}"
