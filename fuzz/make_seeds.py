"""Writes the seed corpora of the fuzz targets (scripts/fuzz.sh runs it).

    /usr/bin/python3 fuzz/make_seeds.py OUT_DIR   -> OUT_DIR/{decode,ring,tar,video,...}/*

decode: small JPEGs of every coding tests/python/hostile_corpus.py makes (PIL's
4:2:0/4:2:2/4:4:4/gray/progressive, CMYK, YCCK, arithmetic, restart markers,
4:4:0, 4:1:1, non-interleaved, 100 scans, EXIF orientations) and a few broken
ones, each behind the 8 parameter bytes of decode_fuzzer.cc, one per mode.
png, webp, tiff, stb (BMP and PPM/PGM): small files of each mode PIL
writes, behind each target's parameter bytes (FORMAT_PARAMS), and behind
decode's too (the pipeline's path).
video: tiny videos of each container and codec family (H.264 in MP4 with
B-frames, VP9 in WebM, MJPEG in AVI, MPEG-4 in Matroska) and a truncated
one, made with Debian's ffmpeg, behind one byte (where the clip starts).
volume: small NIfTI-1 and NIfTI-2 files (int16, big-endian float32 4-D with
scaling, uint8 with a qform), plain and gzip'd, a truncated one, and .npy
arrays (C and Fortran order, 4-D, big-endian, bool).
ring: valid headers for a few geometries (mode 1, no patch), with valid
field records of each of their fields (image, label, boxes).
"""

import gzip
import io
import os
import struct
import sys
import zipfile

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import hostile_corpus as hc  # noqa: E402

# (mode, height-1, width-1, flags, q4..q7) per pipeline: see decode_fuzzer.cc.
PARAMS = [
    bytes([0, 31, 31, 0, 7, 99, 4, 3]),      # train 32x32 uint8
    bytes([1, 23, 27, 8 * 2 | 32, 40, 0, 0, 0]),  # eval 24x28 float32 NCHW
    bytes([2, 15, 15, 4 | 8 * 3, 0, 0, 0, 0]),    # decode 16x16 bilinear float16
    bytes([3, 0, 0, 1, 0, 0, 0, 0]),         # decode, the image's own size, exact
    bytes([4, 15, 15, 64 | 2, 1, 1, 4, 4]),  # train, a given box, flipped, no EXIF
    bytes([5, 0, 0, 0, 0x24, 0x35, 0xF7, 0x5A]),  # RandomCrop, hflip, ColorJitter, GaussianBlur
    bytes([5, 15, 15, 128, 0x42, 0x13, 0x99, 0xC8]),  # Resize, CenterCrop 16x16, RandomGrayscale, Grayscale
]


def small_jpegs():
    img = hc.photo(29, 37, 5)
    out = {}
    for name, kw in [("420", dict(subsampling=2)), ("422", dict(subsampling=1)),
                     ("444", dict(subsampling=0)), ("prog", dict(progressive=True))]:
        out[name] = hc.pil_jpeg(img, **kw)
    b = io.BytesIO()
    Image.fromarray(img).convert("L").save(b, "JPEG", quality=85)
    out["gray"] = b.getvalue()
    tmp = os.path.join(OUT, "tmp")
    for u in hc.write_unusual(os.path.join(tmp, "u")):
        if u.skip is None and "sliver" not in u.name:
            with open(os.path.join(tmp, "u", u.name), "rb") as f:
                out[u.name[2:-4]] = f.read()
    for i, n in enumerate(hc.write_exif_rotated(os.path.join(tmp, "e"))):
        if i in (2, 5):
            with open(os.path.join(tmp, "e", n), "rb") as f:
                out[n[:-4]] = f.read()
    base = out["420"]
    out["trunc"] = base[: len(base) * 2 // 3]
    out["huge"] = hc.patch_sof(base, height=60000, width=60000)
    out["wide"] = hc.patch_sof(base, height=8, width=4096)
    return out


def format_seeds():
    """{target: {name: bytes}}: small files of each format, in PIL's modes."""
    img = Image.fromarray(hc.photo(23, 31, 7))
    rgba = img.convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize(img.size))
    cases = {
        "png": [("rgb", img, {}), ("p", img.convert("P"), {}), ("la", img.convert("LA"), {}),
                ("rgba", rgba, {}), ("i16", img.convert("L").convert("I").point(lambda v: v * 257).convert("I;16"), {}), ("bit", img.convert("1"), {}),
                ("adam7", img, {"interlace": 1})],
        "webp": [("lossy", img, {"quality": 80}), ("lossless", img, {"lossless": True}),
                 ("alpha", rgba, {"quality": 70})],
        "tiff": [("lzw", img, {"compression": "tiff_lzw"}), ("raw", img, {}),
                 ("cmyk", img.convert("CMYK"), {"compression": "tiff_adobe_deflate"}),
                 ("i16", img.convert("L").convert("I").point(lambda v: v * 257).convert("I;16"), {}), ("p", img.convert("P"), {"compression": "packbits"}),
                 ("bit", img.convert("1"), {})],
        "stb": [("rgb_bmp", img, {"format": "BMP"}), ("p_bmp", img.convert("P"), {"format": "BMP"}),
                ("bit_bmp", img.convert("1"), {"format": "BMP"}),
                ("ppm", img, {"format": "PPM"}), ("pgm", img.convert("L"), {"format": "PPM"})],
    }
    fmt_of = {"png": "PNG", "webp": "WEBP", "tiff": "TIFF"}
    out = {}
    for target, rows in cases.items():
        out[target] = {}
        for name, im, kw in rows:
            kw = dict(kw)
            fmt = kw.pop("format", fmt_of.get(target))
            b = io.BytesIO()
            im.save(b, fmt, **kw)
            out[target][name] = b.getvalue()
        first = next(iter(out[target].values()))
        out[target]["trunc"] = first[: len(first) * 2 // 3]
    return out


def ring_seeds():
    """ring_fuzzer.cc's input: the geometry bytes, then (field index, FieldRecord
    of 5 uint32 dimensions and a reserved word) pairs."""
    seeds = {}

    def record(field, *shape):
        return bytes([field]) + struct.pack("<6I", *(list(shape) + [0] * (5 - len(shape))), 0)

    for slots, batch, data in [(4, 8, 3 * 24 * 24 * 8), (2, 1, 65536), (8, 64, 1)]:
        # [0]=1 (patched valid header, no patch), slots-1, batch-1, data-1 (LE u16), 8 (exact mapping)
        head = bytes([1, slots - 1, batch - 1]) + struct.pack("<H", (data - 1) % 65536) + bytes([8, 0, 0])
        image = 1 + ((data - 1) % 65536) // batch  # the image field's [1, image, 1]
        recs = record(0, 1, image, 1) + record(1) + record(2, 0, 4) + record(2, 3, 4)
        seeds[f"valid_{slots}x{batch}"] = head + recs
    # Regression (layout 4): height * width * channels wrapped around 2^64 to
    # 0, so a 2^31 x 2^31 sample of 0 bytes passed; the same for a field.
    head = bytes([1, 1, 0]) + struct.pack("<H", 65535) + bytes([8, 0, 0])
    seeds["overflow_shape"] = head + record(2, 1 << 31, 1 << 31) + record(0, 1 << 31, 1 << 31, 4)
    return seeds


def video_seeds():
    """Tiny videos (64x48, 12 frames), one per container/codec family."""
    import subprocess
    import tempfile
    out = {}
    cases = {"h264.mp4": ["-c:v", "libx264", "-bf", "2", "-g", "6"],
             "vp9.webm": ["-c:v", "libvpx-vp9", "-g", "6", "-deadline", "realtime"],
             "mjpeg.avi": ["-c:v", "mjpeg"],
             "mpeg4.mkv": ["-c:v", "mpeg4", "-bf", "1", "-g", "6"]}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in cases.items():
            path = os.path.join(tmp, name)
            subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi",
                            "-i", "testsrc2=size=64x48:rate=12:duration=1", "-pix_fmt", "yuv420p",
                            *args, path], check=True)
            with open(path, "rb") as f:
                out[name] = f.read()
    out["trunc.mkv"] = out["mpeg4.mkv"][: len(out["mpeg4.mkv"]) * 2 // 3]
    return out


def nifti(version, endian, dims, datatype, elem, voxels, slope=0.0, inter=0.0, qform=False):
    """One NIfTI file's bytes, written field by field (nifti.h's layout)."""
    e = endian
    if version == 1:
        h = bytearray(348)
        struct.pack_into(e + "i", h, 0, 348)
        struct.pack_into(e + "8h", h, 40, len(dims), *dims, *([1] * (7 - len(dims))))
        struct.pack_into(e + "hh", h, 70, datatype, elem * 8)
        struct.pack_into(e + "8f", h, 76, -1.0 if qform else 1.0, 0.8, 0.8, 2.5, 1, 1, 1, 1)
        struct.pack_into(e + "3f", h, 108, 352.0, slope, inter)
        struct.pack_into(e + "hh", h, 252, 1 if qform else 0, 0 if qform else 1)
        struct.pack_into(e + "6f", h, 256, 0.0, 0.0, 0.38268343, 10.0, -20.0, 30.0)
        struct.pack_into(e + "12f", h, 280, 0.8, 0, 0, -90, 0, 0.8, 0, -120, 0, 0, 2.5, 40)
        h[344:348] = b"n+1\0"
    else:
        h = bytearray(540)
        struct.pack_into(e + "i", h, 0, 540)
        h[4:12] = b"n+2\0\r\n\x1a\n"
        struct.pack_into(e + "hh", h, 12, datatype, elem * 8)
        struct.pack_into(e + "8q", h, 16, len(dims), *dims, *([1] * (7 - len(dims))))
        struct.pack_into(e + "8d", h, 104, 1.0, 0.8, 0.8, 2.5, 1, 1, 1, 1)
        struct.pack_into(e + "q2d", h, 168, 544, slope, inter)
        struct.pack_into(e + "ii", h, 344, 0, 1)
        struct.pack_into(e + "12d", h, 400, 0.8, 0, 0, -90, 0, 0.8, 0, -120, 0, 0, 2.5, 40)
    return bytes(h) + b"\0\0\0\0" + voxels


def volume_seeds():
    """Small NIfTI files of each kind nifti.h reads, plain and gzip'd."""
    ramp16 = b"".join(struct.pack("<h", (i * 397) % 4001 - 2000) for i in range(8 * 6 * 4))
    f32be = b"".join(struct.pack(">f", i * 0.25 - 3) for i in range(5 * 4 * 3 * 2))
    files = {
        "int16": nifti(1, "<", [8, 6, 4], 4, 2, ramp16),
        "float32_be_4d_scaled": nifti(1, ">", [5, 4, 3, 2], 16, 4, f32be, 0.5, -1.0),
        "uint8_qform": nifti(1, "<", [6, 5, 4], 2, 1, bytes(range(120)), qform=True),
        "nifti2_int16": nifti(2, "<", [8, 6, 4], 4, 2, ramp16),
    }
    out = {}
    for name, data in files.items():
        out[name] = data
        out[name + "_gz"] = gzip.compress(data, mtime=0)
    out["int16_truncated_gz"] = out["int16_gz"][: len(out["int16_gz"]) // 2]

    def npy(descr, fortran, shape, data):
        d = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}"
        d += " " * ((64 - (10 + len(d) + 1) % 64) % 64) + "\n"
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + data
    out["npy_c_int16"] = npy("<i2", False, (8, 6, 4), ramp16)
    out["npy_f_int16"] = npy("<i2", True, (8, 6, 4), ramp16)
    out["npy_4d_f4_be"] = npy(">f4", False, (2, 5, 4, 3), f32be)
    out["npy_bool"] = npy("|b1", False, (6, 5), bytes(i % 3 for i in range(30)))
    # .npz archives as np.savez / np.savez_compressed write them (zip64
    # member sizes, as numpy forces).
    for name, method in (("npz_stored", zipfile.ZIP_STORED), ("npz_deflated", zipfile.ZIP_DEFLATED)):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=method) as z:
            for key, data in (("data", out["npy_c_int16"]), ("seg", out["npy_f_int16"])):
                with z.open(key + ".npy", "w", force_zip64=True) as f:
                    f.write(data)
        out[name] = buf.getvalue()
    return out


def tar_seeds():
    """Small WebDataset shards: ustar, GNU long names, pax paths, labels."""
    import io
    import tarfile
    seeds = {}
    jpeg = next(iter(small_jpegs().values()))
    for fmt, name in ((tarfile.USTAR_FORMAT, "ustar"), (tarfile.GNU_FORMAT, "gnu"),
                      (tarfile.PAX_FORMAT, "pax")):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
            for i, key in enumerate(["a/k0", "b/" + "n" * 120 + "/k1", "k2"]):
                for ext, blob in (("jpg", jpeg), ("cls", str(i).encode()),
                                  ("json", b'{"label": %d}' % i)):
                    if fmt == tarfile.USTAR_FORMAT and len(key) > 90:
                        continue
                    ti = tarfile.TarInfo(f"{key}.{ext}")
                    ti.size = len(blob)
                    tar.addfile(ti, io.BytesIO(blob))
        seeds[f"shard_{name}"] = buf.getvalue()
    return seeds


OUT = sys.argv[1]
os.makedirs(os.path.join(OUT, "tar"), exist_ok=True)
for name, data in tar_seeds().items():
    with open(os.path.join(OUT, "tar", name), "wb") as f:
        f.write(data)
os.makedirs(os.path.join(OUT, "decode"), exist_ok=True)
os.makedirs(os.path.join(OUT, "ring"), exist_ok=True)
for name, jpeg in small_jpegs().items():
    for k, p in enumerate(PARAMS):
        with open(os.path.join(OUT, "decode", f"{name}_m{k}"), "wb") as f:
            f.write(p + jpeg)
# Each format target's parameter bytes before the file (its header comment):
# a small region near the top left, and one over most of the image.
FORMAT_PARAMS = {"png": [bytes([0, 0, 3, 3, 0]), bytes([2, 1, 200, 200, 1])],
                 "webp": [b""], "tiff": [b""],
                 "stb": [bytes([0, 0, 40, 40]), bytes([10, 30, 255, 200])]}
for target, files in format_seeds().items():
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    for name, data in files.items():
        for k, prefix in enumerate(FORMAT_PARAMS[target]):
            with open(os.path.join(OUT, target, f"{name}_p{k}"), "wb") as f:
                f.write(prefix + data)
        for k in (0, 3):  # train, and decode at the image's own size
            with open(os.path.join(OUT, "decode", f"{target}_{name}_m{k}"), "wb") as f:
                f.write(PARAMS[k] + data)
os.makedirs(os.path.join(OUT, "video"), exist_ok=True)
for name, data in video_seeds().items():
    for where in (0, 5):
        with open(os.path.join(OUT, "video", f"{name}_{where}"), "wb") as f:
            f.write(bytes([where]) + data)
os.makedirs(os.path.join(OUT, "volume"), exist_ok=True)
for name, data in volume_seeds().items():
    with open(os.path.join(OUT, "volume", name), "wb") as f:
        f.write(data)
for name, data in ring_seeds().items():
    with open(os.path.join(OUT, "ring", name), "wb") as f:
        f.write(data)
print(f"seeds: {len(os.listdir(os.path.join(OUT, 'decode')))} decode, "
      + "".join(f"{len(os.listdir(os.path.join(OUT, t)))} {t}, " for t in ("png", "webp", "tiff", "stb"))
      + 
      f"{len(os.listdir(os.path.join(OUT, 'ring')))} ring, "
      f"{len(os.listdir(os.path.join(OUT, 'tar')))} tar, "
      f"{len(os.listdir(os.path.join(OUT, 'video')))} video, "
      f"{len(os.listdir(os.path.join(OUT, 'volume')))} volume")
