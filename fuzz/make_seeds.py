"""Writes the seed corpora of the fuzz targets (scripts/fuzz.sh runs it).

    /usr/bin/python3 fuzz/make_seeds.py OUT_DIR   -> OUT_DIR/{decode,ring,tar}/*

decode: small JPEGs of every coding tests/python/hostile_corpus.py makes (PIL's
4:2:0/4:2:2/4:4:4/gray/progressive, CMYK, YCCK, arithmetic, restart markers,
4:4:0, 4:1:1, non-interleaved, 100 scans, EXIF orientations) and a few broken
ones, each behind the 8 parameter bytes of decode_fuzzer.cc, one per mode.
ring: valid headers for a few geometries (mode 1, no patch), with valid
records for fixed and variable sizes, and the same as raw header bytes.
"""

import io
import os
import struct
import sys

import numpy as np
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


def ring_seeds():
    seeds = {}
    HEADER = 4096
    for slots, batch, data in [(4, 8, 3 * 24 * 24 * 8), (2, 1, 65536), (8, 64, 1)]:
        # [0]=1 (patched valid header, no patch), slots-1, batch-1, data-1 (LE u16), 8 (exact mapping)
        head = bytes([1, slots - 1, batch - 1]) + struct.pack("<H", (data - 1) % 65536) + bytes([8, 0, 0])
        recs = b""
        if batch == 8:  # fixed 24x24x3 uint8 samples
            for i in range(batch):
                recs += struct.pack("<qQQQIIIIQ", i, i, i * 1728, 1728, 0, 24, 24, 3, i)
        else:  # variable size, one sample
            recs += struct.pack("<qQQQIIIIQ", 0, 3, 0, 30000, 1, 100, 100, 3, 3)
            recs += struct.pack("<qQQQIIIIQ", 0, 3, 0, 0, 2, 0, 0, 3, 3)
        seeds[f"valid_{slots}x{batch}"] = head + recs
    # Regression: height * width * channels wrapped around 2^64 to 0, so a
    # 2^31 x 2^31 sample of 0 bytes passed ValidateRecord.
    head = bytes([1, 1, 0]) + struct.pack("<H", 65535) + bytes([8, 0, 0])
    seeds["overflow_shape"] = head + struct.pack("<qQQQIIIIQ", 0, 0, 0, 0, 0, 1 << 31, 1 << 31,
                                                 4, 0)
    return seeds


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
for name, data in ring_seeds().items():
    with open(os.path.join(OUT, "ring", name), "wb") as f:
        f.write(data)
print(f"seeds: {len(os.listdir(os.path.join(OUT, 'decode')))} decode, "
      f"{len(os.listdir(os.path.join(OUT, 'ring')))} ring, "
      f"{len(os.listdir(os.path.join(OUT, 'tar')))} tar")
