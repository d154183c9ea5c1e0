"""Hostile and unusual image files (JPEG mostly, and each other format), made at test time.

Nothing here is checked in: every file is written by PIL, by libjpeg-turbo's
`cjpeg`/`jpegtran` (Debian's libjpeg-turbo-progs, which scripts/lib.sh
installs), or by editing the bytes of such a file (a header that lies about
its size, a cut, a patched marker).

    bad = write_hostile(class_dir, outside_dir)   # -> [Hostile]
    ok = write_unusual(class_dir)                 # -> [Unusual]

`Hostile.reason` is a regular expression the daemon's failure reason must
match; `Unusual` files are valid and must decode exactly as PIL decodes them.
A kind this machine cannot produce is returned with `skip` set to the reason
(the tests turn it into a pytest skip), never silently dropped.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
from PIL import Image

CJPEG = shutil.which("cjpeg")
JPEGTRAN = shutil.which("jpegtran")

# The decoder's scan cap (server/image/decode/jpeg_decoder.h, DecodeLimits::max_scans).
MAX_SCANS = 1000


# Every kind, by file name: write_hostile / write_unusual return exactly these
# (so that tests can be parametrized before anything is written).
HOSTILE_NAMES = (
    "h_empty.jpg", "h_trunc_soi.jpg", "h_trunc_app0.jpg", "h_trunc_tables.jpg",
    "h_trunc_sos.jpg", "h_trunc_half.jpg", "h_trunc_no_eoi.jpg", "h_trunc_progressive.jpg",
    "h_random.jpg", "h_random_soi.jpg", "h_gif.png", "h_text.jpg", "h_dangling.jpg",
    "h_escape.jpg", "h_fifo.jpg", "h_unreadable.jpg", "h_deleted.jpg", "h_huge_dims.jpg",
    "h_zero_height.jpg", "h_sof1_precision12.jpg", "h_sof3_lossless.jpg", "h_real_12bit.jpg",
    "h_real_lossless.jpg", "h_many_scans.jpg", "h_oversize.jpg",
    "h_png_trunc.png", "h_png_bad_crc.png", "h_png_huge_dims.png", "h_webp_trunc.webp",
    "h_webp_corrupt.webp", "h_tiff_trunc.tif", "h_tiff_strip_past_end.tif", "h_tiff_huge_dims.tif",
    "h_bmp_trunc.bmp", "h_ppm_trunc.ppm")
UNUSUAL_NAMES = (
    "u_cmyk.jpg", "u_ycck.jpg", "u_arithmetic.jpg", "u_arith_progressive.jpg",
    "u_restart_rows.jpg", "u_restart_blocks.jpg", "u_1x1.jpg", "u_sliver_4000x6.jpg",
    "u_sliver_6x4000.jpg", "u_sample_440.jpg", "u_sample_411.jpg", "u_noninterleaved.jpg",
    "u_100_scans.jpg", "u_trailing_garbage.jpg", "u_png_named.jpg", "u_jpeg_named.png")


@dataclass
class Hostile:
    """A file that must fail as one sample, with a reason matching `reason`."""

    name: str                  # file name inside its class folder
    reason: str                # regex (re.search, case-insensitive) on the daemon's reason
    what: str                  # one line for reports
    skip: Optional[str] = None  # why this machine cannot make it
    # Set up after indexing (the file must exist when the dataset is indexed).
    after_index: Optional[Callable[[], None]] = None


@dataclass
class Unusual:
    """A valid file that must decode bit-exactly as PIL decodes it."""

    name: str
    what: str
    skip: Optional[str] = None


# ---------------------------------------------------------------------------
# Pixels and encoders


def photo(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth gradients, a disc and mild noise: compresses like a photo."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
    img = rng.uniform(40, 200, 3) + rng.uniform(-80, 80, 3) * x + rng.uniform(-80, 80, 3) * y
    d2 = (y - 0.5) ** 2 + (x - 0.4) ** 2
    img = np.where(d2 < 0.08, img * 0.4 + 120, img)
    img = img + rng.normal(0, 6, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def pil_jpeg(img: np.ndarray, **kw) -> bytes:
    """img: h x w x 3 (RGB) or h x w x 4 (CMYK, written as Adobe CMYK)."""
    b = io.BytesIO()
    mode = "CMYK" if img.ndim == 3 and img.shape[2] == 4 else None
    Image.fromarray(img, mode).save(b, "JPEG", quality=kw.pop("quality", 90), **kw)
    return b.getvalue()


def _run(cmd: Sequence[str], data: bytes) -> bytes:
    p = subprocess.run(list(cmd), input=data, capture_output=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.decode(errors='replace')}")
    return p.stdout


def cjpeg(img: np.ndarray, *flags: str) -> bytes:
    """`cjpeg FLAGS` of img (fed as a PPM)."""
    ppm = io.BytesIO()
    Image.fromarray(img).save(ppm, "PPM")
    return _run([CJPEG, "-quality", "90", *flags], ppm.getvalue())


def jpegtran_scans(jpeg: bytes, script: str) -> bytes:
    """`jpegtran -scans SCRIPT` (lossless rewrite of the coefficients)."""
    with tempfile.NamedTemporaryFile("w", suffix=".scans", delete=False) as f:
        f.write(script)
    try:
        return _run([JPEGTRAN, "-scans", f.name], jpeg)
    finally:
        os.unlink(f.name)


def has_flag(tool: Optional[str], flag: str) -> bool:
    if tool is None:
        return False
    p = subprocess.run([tool, "-help"], capture_output=True, text=True)
    return flag in (p.stdout + p.stderr)


# ---------------------------------------------------------------------------
# Byte surgery on JPEG markers


def segments(data: bytes) -> Dict[int, int]:
    """Offsets of the first marker of each kind before the first scan's data
    (the SOS itself included): {marker byte: offset of its 0xFF}."""
    out: Dict[int, int] = {}
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        m = data[pos + 1]
        if m == 0xFF:  # fill byte
            pos += 1
            continue
        out.setdefault(m, pos)
        if m == 0xDA:
            break
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return out


def sof_offset(data: bytes) -> int:
    seg = segments(data)
    for m in (0xC0, 0xC1, 0xC2):
        if m in seg:
            return seg[m]
    raise ValueError("no SOF0/1/2 marker")


def patch_sof(data: bytes, *, marker: Optional[int] = None, precision: Optional[int] = None,
              height: Optional[int] = None, width: Optional[int] = None) -> bytes:
    b = bytearray(data)
    at = sof_offset(data)
    if marker is not None:
        b[at + 1] = marker
    if precision is not None:
        b[at + 4] = precision
    if height is not None:
        b[at + 5:at + 7] = height.to_bytes(2, "big")
    if width is not None:
        b[at + 7:at + 9] = width.to_bytes(2, "big")
    return bytes(b)


def scan_data_start(data: bytes) -> int:
    sos = segments(data)[0xDA]
    return sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")


def markers(data: bytes) -> List[tuple]:
    """[(offset, marker byte)] of every marker in the file, entropy-coded data
    skipped (there 0xFF is followed by 0x00 or a restart marker)."""
    out = []
    pos = 2 if data[:2] == b"\xff\xd8" else 0
    n = len(data)
    while pos + 1 < n:
        if data[pos] != 0xFF:
            pos += 1
            continue
        m = data[pos + 1]
        if m == 0xFF:
            pos += 1
            continue
        if m == 0x00 or 0xD0 <= m <= 0xD7:
            pos += 2
            continue
        out.append((pos, m))
        if m == 0xD9:
            break
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        pos += 2 + length
    return out


def count_scans(data: bytes) -> int:
    return sum(1 for _, m in markers(data) if m == 0xDA)


def progressive_script(components: int = 3, bands: int = 33) -> str:
    """A valid progressive script: DC of all components, then `bands` spectral
    bands of AC per component (1 + components * bands scans; jpegtran reads at
    most 100)."""
    lines = [f"{','.join(map(str, range(components)))}: 0-0, 0, 0;"]
    edges = np.linspace(1, 64, bands + 1).astype(int)
    for c in range(components):
        lines += [f"{c}: {a}-{b - 1}, 0, 0;" for a, b in zip(edges[:-1], edges[1:])]
    return "\n".join(lines) + "\n"


def repeat_last_scan(data: bytes, times: int) -> bytes:
    """The file with its last scan (and the tables just before it) repeated
    `times` more times before the EOI. libjpeg decodes it (a repeated scan is
    only a warning), so only a scan cap stops the work."""
    ms = markers(data)
    sos = [i for i, (_, m) in enumerate(ms) if m == 0xDA]
    eoi = ms[-1][0]
    assert ms[-1][1] == 0xD9 and len(sos) >= 2
    unit_start = ms[sos[-2] + 1][0]  # the first marker after the previous scan's data
    unit = data[unit_start:eoi]
    return data[:eoi] + unit * times + data[eoi:]


# ---------------------------------------------------------------------------
# The hostile files


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def write_hostile(class_dir: str, outside_dir: str, *, max_file_bytes: int = 0,
                  seed: int = 7) -> List[Hostile]:
    """Writes every hostile kind into class_dir (outside_dir: a folder outside
    the data root, for a symlink that escapes it). Returns them all, those
    this machine cannot make with `skip` set (and no file written)."""
    os.makedirs(class_dir, exist_ok=True)
    os.makedirs(outside_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    base = pil_jpeg(photo(96, 128, seed))                       # baseline 4:2:0
    prog = pil_jpeg(photo(96, 128, seed + 1), progressive=True)  # progressive
    sd = scan_data_start(base)
    out: List[Hostile] = []

    def add(name: str, data: Optional[bytes], reason: str, what: str) -> None:
        if data is not None:
            _write(os.path.join(class_dir, name), data)
        out.append(Hostile(name, reason, what))

    truncated = r"Premature end of JPEG file \(truncated\)"
    add("h_empty.jpg", b"", r"empty", "an empty file")
    add("h_trunc_soi.jpg", base[:2], truncated, "truncated: only the SOI marker")
    add("h_trunc_app0.jpg", base[:20], truncated, "truncated: inside APP0")
    add("h_trunc_tables.jpg", base[:sd - 40], truncated, "truncated: inside the tables")
    add("h_trunc_sos.jpg", base[:sd], truncated, "truncated: right after the SOS header")
    add("h_trunc_half.jpg", base[:sd + (len(base) - sd) // 2], truncated,
        "truncated: half the entropy-coded data")
    add("h_trunc_no_eoi.jpg", base[:-2], truncated, "truncated: only the EOI marker missing")
    second_scan = prog.find(b"\xff\xda", scan_data_start(prog))
    add("h_trunc_progressive.jpg", prog[:second_scan], truncated,
        "truncated: a progressive file cut after its first scan")
    not_an_image = r"not an image format stoker reads"
    add("h_random.jpg", rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(), not_an_image,
        "4 KiB of random bytes")
    add("h_random_soi.jpg", b"\xff\xd8\xff" + rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        r"corrupt JPEG", "random bytes after an SOI")
    gif = io.BytesIO()
    Image.fromarray(photo(40, 50, seed + 2)).save(gif, "GIF")
    add("h_gif.png", gif.getvalue(), not_an_image + r".*GIF8", "a GIF named .png")
    add("h_text.jpg", b"this is a text file, not a JPEG\n" * 20, not_an_image,
        "a text file named .jpg")
    os.symlink("no-such-target.jpg", os.path.join(class_dir, "h_dangling.jpg"))  # relative
    out.append(Hostile("h_dangling.jpg", r"No such file", "a dangling symlink"))
    _write(os.path.join(outside_dir, "outside.jpg"), base)
    os.symlink(os.path.join(outside_dir, "outside.jpg"), os.path.join(class_dir, "h_escape.jpg"))
    out.append(Hostile("h_escape.jpg", r"data root|leaves|beneath|outside|cross-device",
                       "a symlink to a good JPEG outside the data root"))
    os.mkfifo(os.path.join(class_dir, "h_fifo.jpg"))
    out.append(Hostile("h_fifo.jpg", r"not a regular file", "a FIFO named .jpg (nobody writes)"))
    if os.geteuid() == 0:
        out.append(Hostile("h_unreadable.jpg", "", "a good JPEG with mode 000",
                           skip="running as root: chmod 000 does not stop root from reading"))
    else:
        p = os.path.join(class_dir, "h_unreadable.jpg")
        _write(p, base)
        os.chmod(p, 0)
        out.append(Hostile("h_unreadable.jpg", r"permission denied|EACCES",
                           "a good JPEG with mode 000"))

    def delete(root: str) -> None:
        os.unlink(os.path.join(root, "h_deleted.jpg"))

    _write(os.path.join(class_dir, "h_deleted.jpg"), base)
    out.append(Hostile("h_deleted.jpg", r"No such file",
                       "a good JPEG deleted after the dataset was indexed",
                       after_index=lambda: delete(class_dir)))
    add("h_huge_dims.jpg", patch_sof(base, height=65500, width=65500),
        r"65500x65500, over the cap of \d+ pixels", "a small JPEG whose SOF0 claims 65500x65500")
    add("h_zero_height.jpg", patch_sof(base, height=0),
        r"Empty JPEG image", "a SOF0 that claims height 0")
    # A real 12-bit or lossless file needs libjpeg-turbo 3 (cjpeg -precision,
    # -lossless); the headers are tested here on 8-bit data either way.
    add("h_sof1_precision12.jpg", patch_sof(base, marker=0xC1, precision=12),
        r"only 8-bit JPEG is supported.*precision 12", "an extended SOF1 header saying 12-bit samples")
    add("h_sof3_lossless.jpg", patch_sof(base, marker=0xC3),
        r"lossless and hierarchical JPEG are not supported", "a lossless (SOF3) header")
    if has_flag(CJPEG, "-precision"):
        add("h_real_12bit.jpg", cjpeg(photo(40, 48, seed), "-precision", "12"),
            r"12-bit|precision", "a real 12-bit JPEG (cjpeg -precision 12)")
    else:
        out.append(Hostile("h_real_12bit.jpg", "", "a real 12-bit JPEG",
                           skip="cjpeg has no -precision (libjpeg-turbo < 3.0 cannot write 12-bit)"))
    if has_flag(CJPEG, "-lossless"):
        add("h_real_lossless.jpg", cjpeg(photo(40, 48, seed), "-lossless", "1"),
            r"lossless", "a real lossless JPEG (cjpeg -lossless 1)")
    else:
        out.append(Hostile("h_real_lossless.jpg", "", "a real lossless JPEG",
                           skip="cjpeg has no -lossless (libjpeg-turbo < 3.0)"))
    if JPEGTRAN is not None:
        hundred = jpegtran_scans(pil_jpeg(photo(24, 32, seed + 3)), progressive_script())
        many = repeat_last_scan(hundred, 3 * MAX_SCANS)
        assert count_scans(many) > MAX_SCANS, count_scans(many)
        add("h_many_scans.jpg", many, rf"more than {MAX_SCANS} scans",
            f"a progressive JPEG of {count_scans(many)} scans (jpegtran -scans, then its "
            "last scan repeated)")
    else:
        out.append(Hostile("h_many_scans.jpg", "", "a progressive JPEG of > 1000 scans",
                           skip="jpegtran is not installed (libjpeg-turbo-progs)"))
    if max_file_bytes:
        add("h_oversize.jpg", base + b"\0" * (max_file_bytes + 1 - len(base)),
            rf"over the cap of {max_file_bytes}", "a JPEG padded past --max-file-bytes")
    else:
        out.append(Hostile("h_oversize.jpg", "", "a JPEG padded past --max-file-bytes",
                           skip="no max_file_bytes given"))
    write_hostile_formats(add, photo(96, 128, seed + 4))
    assert tuple(h.name for h in out) == HOSTILE_NAMES, [h.name for h in out]
    return out


def _encoded(img: np.ndarray, fmt: str, **kw) -> bytes:
    b = io.BytesIO()
    Image.fromarray(img).save(b, fmt, **kw)
    return b.getvalue()


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    return (struct.pack(">I", len(payload)) + kind + payload +
            struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF))


def png_with_size(png: bytes, width: int, height: int) -> bytes:
    """The PNG with its IHDR's size replaced (CRC fixed): a valid header."""
    ihdr = bytearray(png[16:29])
    ihdr[0:8] = struct.pack(">II", width, height)
    return png[:8] + png_chunk(b"IHDR", bytes(ihdr)) + png[33:]


def tiff_tag_offset(tiff: bytes, tag: int) -> int:
    """Where the value field of `tag` in the first IFD of a little-endian
    TIFF starts (a count-1 LONG or SHORT holds its value there)."""
    assert tiff[:4] == b"II*\0", tiff[:4]
    ifd = struct.unpack_from("<I", tiff, 4)[0]
    (n,) = struct.unpack_from("<H", tiff, ifd)
    for k in range(n):
        at = ifd + 2 + 12 * k
        t, _typ, _count = struct.unpack_from("<HHI", tiff, at)
        if t == tag:
            return at + 8
    raise KeyError(tag)


def write_hostile_formats(add: Callable[[str, Optional[bytes], str, str], None],
                          img: np.ndarray) -> None:
    """The other formats' hostile kinds (server/image/*_decoder.h)."""
    png = _encoded(img, "PNG")
    add("h_png_trunc.png", png[:len(png) // 2], r"PNG.*trunc", "a PNG cut in half")
    idat = png.index(b"IDAT")
    (length,) = struct.unpack_from(">I", png, idat - 4)
    bad = bytearray(png)
    bad[idat + 4 + length] ^= 0x55  # the chunk's CRC, its data intact
    add("h_png_bad_crc.png", bytes(bad), r"PNG.*CRC", "a PNG whose IDAT CRC is wrong")
    add("h_png_huge_dims.png", png_with_size(png, 65535, 65535), r"over the cap",
        "a small PNG whose IHDR claims 65535x65535")
    webp = _encoded(img, "WEBP", quality=80)
    add("h_webp_trunc.webp", webp[:len(webp) * 2 // 3], r"WebP", "a WebP cut at two thirds")
    # Lossy VP8 has no checksum (scrambled data decodes to other pixels, for
    # PIL too): the frame header's start code is what can be caught.
    start = webp.index(b"\x9d\x01\x2a")
    corrupt = webp[:start] + b"\0\0\0" + webp[start + 3:]
    add("h_webp_corrupt.webp", corrupt, r"WebP", "a WebP whose VP8 start code is broken")
    tiff = _encoded(img, "TIFF")
    add("h_tiff_trunc.tif", tiff[:len(tiff) // 2], r"TIFF", "an uncompressed TIFF cut in half")
    past = bytearray(tiff)
    struct.pack_into("<I", past, tiff_tag_offset(tiff, 273), 1 << 30)  # StripOffsets
    add("h_tiff_strip_past_end.tif", bytes(past), r"TIFF", "a TIFF whose strip lies past the file")
    huge = bytearray(tiff)
    for tag in (256, 257):  # ImageWidth, ImageLength
        struct.pack_into("<H", huge, tiff_tag_offset(tiff, tag), 65000)
    add("h_tiff_huge_dims.tif", bytes(huge), r"over the cap", "a small TIFF claiming 65000x65000")
    bmp = _encoded(img, "BMP")
    add("h_bmp_trunc.bmp", bmp[:len(bmp) // 2], r"BMP", "a BMP cut in half")
    ppm = _encoded(img, "PPM")
    add("h_ppm_trunc.ppm", ppm[:len(ppm) // 2], r"P[NP]M", "a PPM cut in half")


def arm_after_index(hostile: Sequence[Hostile]) -> None:
    """Runs the after-index steps (deletions): call once the dataset is indexed."""
    for h in hostile:
        if h.after_index is not None and h.skip is None:
            h.after_index()


# ---------------------------------------------------------------------------
# Valid but unusual files


def _ycck(img: np.ndarray) -> bytes:
    """A 4-component Adobe YCCK JPEG: PIL writes Adobe CMYK (transform 0); the
    APP14 transform byte set to 2 makes the same components YCCK."""
    cmyk = np.concatenate([img, img[:, :, :1] // 3], axis=2)
    d = bytearray(pil_jpeg(cmyk))
    at = d.find(b"Adobe")
    assert at > 0 and d[at - 4:at - 2] == b"\xff\xee", "PIL wrote no Adobe APP14 marker"
    assert d[at + 11] == 0
    d[at + 11] = 2
    return bytes(d)


def write_unusual(class_dir: str, seed: int = 11) -> List[Unusual]:
    """Writes valid JPEGs of unusual codings into class_dir."""
    os.makedirs(class_dir, exist_ok=True)
    out: List[Unusual] = []
    img = photo(61, 83, seed)  # odd sizes: partial MCUs at both edges

    def add(name: str, make: Callable[[], bytes], what: str, needs: Optional[str] = None,
            skip: Optional[str] = None) -> None:
        if skip is None and needs is not None and shutil.which(needs) is None:
            skip = f"{needs} is not installed (libjpeg-turbo-progs)"
        if skip is None:
            _write(os.path.join(class_dir, name), make())
        out.append(Unusual(name, what, skip))

    cmyk = np.concatenate([img, img[:, :, 1:2]], axis=2)
    add("u_cmyk.jpg", lambda: pil_jpeg(cmyk), "Adobe CMYK (PIL)")
    add("u_ycck.jpg", lambda: _ycck(img), "Adobe YCCK (APP14 transform 2)")
    add("u_arithmetic.jpg", lambda: cjpeg(img, "-arithmetic"), "arithmetic coding", "cjpeg")
    add("u_arith_progressive.jpg", lambda: cjpeg(img, "-arithmetic", "-progressive"),
        "progressive arithmetic coding", "cjpeg")
    add("u_restart_rows.jpg", lambda: cjpeg(img, "-restart", "1"),
        "a restart marker every MCU row", "cjpeg")
    add("u_restart_blocks.jpg", lambda: cjpeg(img, "-restart", "1B"),
        "a restart marker every MCU", "cjpeg")
    add("u_1x1.jpg", lambda: pil_jpeg(photo(1, 1, seed)), "1x1 pixel")
    add("u_sliver_4000x6.jpg", lambda: pil_jpeg(photo(6, 4000, seed)), "4000 wide, 6 high")
    add("u_sliver_6x4000.jpg", lambda: pil_jpeg(photo(4000, 6, seed)), "6 wide, 4000 high")
    add("u_sample_440.jpg", lambda: cjpeg(img, "-sample", "1x2"), "4:4:0 (cjpeg -sample 1x2)",
        "cjpeg")
    add("u_sample_411.jpg", lambda: cjpeg(img, "-sample", "4x1"), "4:1:1 (cjpeg -sample 4x1)",
        "cjpeg")
    add("u_noninterleaved.jpg",
        lambda: jpegtran_scans(pil_jpeg(img), "0: 0-63, 0, 0;\n1: 0-63, 0, 0;\n2: 0-63, 0, 0;\n"),
        "sequential, one scan per component (jpegtran -scans)", "jpegtran")
    add("u_100_scans.jpg", lambda: jpegtran_scans(pil_jpeg(img), progressive_script()),
        "progressive, 100 scans (jpegtran -scans)", "jpegtran")
    add("u_trailing_garbage.jpg", lambda: pil_jpeg(img) + b"\0garbage after EOI" * 10,
        "bytes after the EOI")
    add("u_png_named.jpg", lambda: _encoded(img, "PNG"), "a PNG named .jpg (decoded as a PNG)")
    add("u_jpeg_named.png", lambda: pil_jpeg(img), "a JPEG named .png (decoded as a JPEG)")
    assert tuple(u.name for u in out) == UNUSUAL_NAMES, [u.name for u in out]
    return out


def write_exif_rotated(class_dir: str, seed: int = 13) -> List[str]:
    """One JPEG per EXIF orientation 1..8 (non-square, so a transpose shows)."""
    os.makedirs(class_dir, exist_ok=True)
    names = []
    for o in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        b = io.BytesIO()
        Image.fromarray(photo(37, 58, seed + o)).save(b, "JPEG", quality=90, exif=exif.tobytes())
        name = f"orient_{o}.jpg"
        _write(os.path.join(class_dir, name), b.getvalue())
        names.append(name)
    return names
