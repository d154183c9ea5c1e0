"""PNG: stoker's decode equals PIL's Image.open(f).convert("RGB"), byte for byte.

Files of every colour type and bit depth: PIL writes the modes it can (1, L,
LA, P at 1/2/4/8 bits, I;16, RGB, RGBA, APNG); the rest (gray 2/4-bit, 16-bit
colour, gray+alpha 16-bit, Adam7 interlacing, short palettes) come from the
small writer below, which filters each row with a different PNG filter. Plus
hostile files that must fail cleanly where PIL is lenient (png_decoder.h).
"""

import struct
import zlib

import numpy as np
import pytest

import formats_util as fu

pytestmark = [
    pytest.mark.skipif(not fu.tool_available(), reason="stoker-image-tool not built"),
    pytest.mark.filterwarnings("ignore:Palette images with Transparency"),
]

RNG = np.random.default_rng(1234)


def photo(h, w, channels, maxval):
    """Gradients plus noise, as uint32 samples in [0, maxval]."""
    y, x = np.mgrid[0:h, 0:w]
    out = np.empty((h, w, channels), dtype=np.int64)
    for c in range(channels):
        grad = ((x * (c + 1) + y * (3 - c % 3)) * maxval) // (w * (c + 1) + h * 3)
        out[..., c] = grad + RNG.integers(-maxval // 16 - 1, maxval // 16 + 2, (h, w))
    return np.clip(out, 0, maxval).astype(np.uint32)


# --- a minimal PNG writer, for what PIL cannot write ---------------------------

def chunk(ctype, data):
    return struct.pack(">I", len(data)) + ctype + data + struct.pack(
        ">I", zlib.crc32(ctype + data) & 0xFFFFFFFF)


def pack_rows(samples, depth):
    """[h, w, c] samples -> list of packed scanlines (bytes, no filter byte)."""
    h, w, c = samples.shape
    flat = samples.reshape(h, w * c)
    if depth == 16:
        return [row.astype(">u2").tobytes() for row in flat]
    if depth == 8:
        return [row.astype(np.uint8).tobytes() for row in flat]
    per = 8 // depth
    rows = []
    for row in flat:
        padded = np.zeros(-(-len(row) // per) * per, dtype=np.uint32)
        padded[:len(row)] = row
        groups = padded.reshape(-1, per)
        shifts = np.array([8 - depth * (i + 1) for i in range(per)], dtype=np.uint32)
        rows.append((groups << shifts).sum(axis=1).astype(np.uint8).tobytes())
    return rows


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = np.abs(p - a), np.abs(p - b), np.abs(p - c)
    return np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))


def filter_rows(rows, bpp, first_filter=0):
    """Filters each row with the next of the five filters; returns the stream."""
    out = []
    prev = np.zeros(len(rows[0]) if rows else 0, dtype=np.int32)
    for i, raw in enumerate(rows):
        cur = np.frombuffer(raw, dtype=np.uint8).astype(np.int32)
        left = np.concatenate([np.zeros(bpp, dtype=np.int32), cur[:-bpp]])[:len(cur)]
        upleft = np.concatenate([np.zeros(bpp, dtype=np.int32), prev[:-bpp]])[:len(cur)]
        ftype = (first_filter + i) % 5
        pred = [0, left, prev, (left + prev) // 2, paeth(left, prev, upleft)][ftype]
        out.append(bytes([ftype]) + ((cur - pred) % 256).astype(np.uint8).tobytes())
        prev = cur
    return b"".join(out)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]  # (x0, y0, dx, dy)


def make_png(samples, depth, color_type, interlace=False, plte=None, trns=None, extra=b""):
    h, w, c = samples.shape
    bpp = max(1, c * depth // 8)
    if interlace:
        stream = b""
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.size:
                stream += filter_rows(pack_rows(sub, depth), bpp, x0 + y0)
    else:
        stream = filter_rows(pack_rows(samples, depth), bpp)
    out = b"\x89PNG\r\n\x1a\n" + chunk(
        b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, int(interlace)))
    if plte is not None:
        out += chunk(b"PLTE", bytes(plte))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    out += extra
    data = zlib.compress(stream, 9)
    for i in range(0, len(data), 4000):  # several IDAT chunks
        out += chunk(b"IDAT", data[i:i + 4000])
    return out + chunk(b"IEND", b"")


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return path


# --- files PIL writes -----------------------------------------------------------

def pil_files(tmp_path):
    from PIL import Image
    rgb = Image.fromarray(photo(48, 61, 3, 255).astype(np.uint8), "RGB")
    rgba = Image.fromarray(photo(48, 61, 4, 255).astype(np.uint8), "RGBA")
    files = {
        "rgb.png": (rgb, {}),
        "rgb_opt.png": (rgb, {"optimize": True}),
        "rgb_trns.png": (rgb, {"transparency": (10, 20, 30)}),
        "rgba.png": (rgba, {}),
        "l.png": (rgb.convert("L"), {}),
        "l_trns.png": (rgb.convert("L"), {"transparency": 7}),
        "la.png": (rgba.convert("LA"), {}),
        "1.png": (rgb.convert("1"), {}),
        "p256.png": (rgb.quantize(256), {}),
        "p16.png": (rgb.quantize(16), {}),
        "p4.png": (rgb.quantize(4), {}),
        "p2.png": (rgb.quantize(2), {}),
        "p_trns.png": (rgb.quantize(64), {"transparency": 3}),
        "p_alpha.png": (rgba.quantize(64), {"transparency": bytes(range(0, 256, 4))}),
        "i16.png": (Image.fromarray(photo(48, 61, 1, 65535)[..., 0].astype(np.uint16), "I;16"), {}),
        "i16_low.png": (Image.fromarray(photo(48, 61, 1, 400)[..., 0].astype(np.uint16), "I;16"),
                        {}),
    }
    out = []
    for name, (im, kw) in files.items():
        path = tmp_path / name
        im.save(path, "PNG", **kw)
        out.append(path)
    return out


def test_pil_written_modes(tmp_path):
    for path in pil_files(tmp_path):
        fu.assert_same_as_pil(path, tmp_path)


# --- every colour type / depth, interlaced or not ----------------------------------

MODES = [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (2, 8), (2, 16), (3, 1), (3, 2), (3, 4), (3, 8),
         (4, 8), (4, 16), (6, 8), (6, 16)]
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


@pytest.mark.parametrize("interlace", [False, True], ids=["plain", "adam7"])
@pytest.mark.parametrize("color_type,depth", MODES)
def test_every_mode(tmp_path, color_type, depth, interlace):
    samples = photo(37, 45, CHANNELS[color_type], (1 << depth) - 1)
    plte = trns = None
    if color_type == 3:
        # A palette shorter than the depth allows: indices past it are gray in PIL.
        n = max(1, (1 << depth) * 3 // 4)
        plte = RNG.integers(0, 256, n * 3).astype(np.uint8)
        trns = bytes(RNG.integers(0, 256, min(n, 5)).astype(np.uint8))
    elif color_type == 0:
        trns = struct.pack(">H", int(samples[0, 0, 0]))
    elif color_type == 2:
        trns = struct.pack(">3H", *map(int, samples[0, 0]))
    for with_trns in (False, True):
        data = make_png(samples, depth, color_type, interlace, plte, trns if with_trns else None)
        path = write(tmp_path, f"m{color_type}_{depth}_{int(with_trns)}.png", data)
        fu.assert_same_as_pil(path, tmp_path)


def test_ancillary_chunks_change_nothing(tmp_path):
    samples = photo(20, 30, 3, 255)
    extra = (chunk(b"gAMA", struct.pack(">I", 100000)) + chunk(b"sBIT", b"\x03\x04\x05") +
             chunk(b"iCCP", b"icc\x00\x00" + zlib.compress(b"x" * 200)) +
             chunk(b"tEXt", b"Comment\x00hello") + chunk(b"prIv", b"\x00" * 100))
    fu.assert_same_as_pil(write(tmp_path, "anc.png", make_png(samples, 8, 2, extra=extra)),
                          tmp_path)


@pytest.mark.parametrize("default_image", [False, True])
def test_apng_gives_the_first_image(tmp_path, default_image):
    from PIL import Image
    frames = [Image.fromarray(photo(24, 32, 3, 255).astype(np.uint8), "RGB") for _ in range(3)]
    path = tmp_path / "anim.png"
    frames[0].save(path, "PNG", save_all=True, append_images=frames[1:],
                   default_image=default_image, duration=100)
    assert b"fdAT" in path.read_bytes()
    fu.assert_same_as_pil(path, tmp_path)


# --- hostile files --------------------------------------------------------------

def chunk_offsets(data):
    pos, out = 8, []
    while pos + 12 <= len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        out.append((data[pos + 4:pos + 8], pos, n))
        pos += 12 + n
    return out


def test_truncated_files_fail(tmp_path):
    data = make_png(photo(40, 50, 3, 255), 8, 2)
    idats = [(pos, n) for t, pos, n in chunk_offsets(data) if t == b"IDAT"]
    cuts = {"in_idat": idats[-1][0] + 8 + idats[-1][1] // 2,
            "before_iend": len(data) - 12,  # PIL decodes this one
            "in_header": 20,
            "mid_iend": len(data) - 5}
    for name, cut in cuts.items():
        msg = fu.stoker_fails(write(tmp_path, f"cut_{name}.png", data[:cut]), tmp_path)
        assert msg is not None and "PNG" in msg, name


def test_bad_crc_fails_even_where_pil_is_lenient(tmp_path):
    data = bytearray(make_png(photo(40, 50, 3, 255), 8, 2))
    t, pos, n = [c for c in chunk_offsets(bytes(data)) if c[0] == b"IDAT"][0]
    data[pos + 8 + n] ^= 0xFF  # the first IDAT's CRC
    path = write(tmp_path, "badcrc.png", bytes(data))
    fu.pil_rgb(path)  # PIL does not check IDAT CRCs
    msg = fu.stoker_fails(path, tmp_path)
    assert msg is not None and "CRC" in msg


def test_bomb_decodes_like_pil_without_expanding(tmp_path):
    # 64x64 gray, 4160 bytes of scanlines; the IDAT stream inflates to 64 MiB.
    comp = zlib.compressobj(9)
    stream = b"".join(comp.compress(bytes(1 << 20)) for _ in range(64)) + comp.flush()
    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", stream) + chunk(b"IEND", b""))
    fu.assert_same_as_pil(write(tmp_path, "bomb.png", data), tmp_path)


def test_huge_declared_size_fails(tmp_path):
    for w, h in [(65535, 65535), (0x7FFFFFFF, 1)]:
        data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(bytes(1000))) + chunk(b"IEND", b""))
        msg = fu.stoker_fails(write(tmp_path, f"huge_{w}.png", data), tmp_path)
        assert msg is not None and "cap" in msg


def test_chunk_length_past_the_end_fails(tmp_path):
    data = make_png(photo(10, 10, 3, 255), 8, 2)
    t, pos, n = chunk_offsets(data)[1]
    bad = data[:pos] + struct.pack(">I", 1 << 30) + data[pos + 4:]
    assert fu.stoker_fails(write(tmp_path, "longchunk.png", bad), tmp_path) is not None
