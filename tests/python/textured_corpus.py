"""Deterministic, finely textured JPEGs: where DCT-scaled decoding differs most
from PIL's full decode + resize.

Real photos are not available to the tests (no network); these stand in for
the photos that are hard for a reduced-scale decode: print (many small
glyphs), fur (dense thin oriented strands), fabric (woven stripes and checks
near the Nyquist frequency), plus a smooth photo-like image for contrast.

    write_corpus(folder) -> [(name, path)]   every image of CORPUS, written once

Each entry of CORPUS: (kind, width, height, subsampling 2 = 4:2:0 / 0 = 4:4:4,
quality, seed), ~500x375 to 4000x3000. Used by test_image_fidelity.py; importable by measurement
scripts (``sys.path.insert(0, "tests/python")``).
"""

import os
import pathlib

import numpy as np
from PIL import Image, ImageDraw, ImageFont

CORPUS = [
    ("text", 500, 375, 2, 75, 1),
    ("text", 1600, 1200, 0, 95, 2),
    ("fur", 800, 600, 2, 85, 3),
    ("fur", 2000, 1500, 2, 90, 4),
    ("fabric", 640, 480, 0, 90, 5),
    ("fabric", 1600, 1200, 2, 80, 6),
    ("fabric", 4000, 3000, 2, 85, 9),  # 12 MP: reaches DCT scaling at 224 px outputs
    ("photo", 1200, 900, 2, 85, 7),
    ("photo", 500, 375, 0, 95, 8),
]

_FONT_DIR = pathlib.Path("/usr/share/fonts/truetype/dejavu")


def _font(size):
    path = _FONT_DIR / "DejaVuSans.ttf"
    if path.exists():
        return ImageFont.truetype(str(path), size)
    return ImageFont.load_default()


def _text(width, height, rng):
    """A page of small print: lines of random words, a few sizes and inks."""
    img = Image.new("RGB", (width, height), (238, 232, 220))
    draw = ImageDraw.Draw(img)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;"))
    y = 2
    while y < height:
        size = int(rng.integers(7, 13))
        font = _font(size)
        ink = tuple(int(c) for c in rng.integers(0, 90, 3))
        words = [
            "".join(rng.choice(letters, int(rng.integers(2, 9)))) for _ in range(width // (size * 3) + 1)
        ]
        draw.text((int(rng.integers(0, 6)), y), " ".join(words), fill=ink, font=font)
        y += size + int(rng.integers(1, 4))
    return img


def _fur(width, height, rng):
    """Thin strands along a slowly turning direction field, in brown tones."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([110 + 40 * np.sin(xx / 97.0), 80 + 30 * np.cos(yy / 71.0), 50 + 0 * xx], axis=-1)
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    n = width * height // 12
    x0 = rng.uniform(0, width, n)
    y0 = rng.uniform(0, height, n)
    angle = 0.8 * np.sin(x0 / 150.0) + 0.6 * np.cos(y0 / 110.0) + rng.normal(0, 0.15, n)
    length = rng.uniform(6, 18, n)
    x1 = x0 + length * np.cos(angle)
    y1 = y0 + length * np.sin(angle)
    shade = rng.integers(-70, 90, n)
    for i in range(n):
        c = int(shade[i])
        draw.line([(x0[i], y0[i]), (x1[i], y1[i])], fill=(150 + c, 105 + c, 60 + c // 2), width=1)
    return img


def _fabric(width, height, rng):
    """A woven check: two thread colours, periods of 2.1-3.5 px, slightly skewed."""
    yy, xx = np.ogrid[0:height, 0:width]
    yy, xx = yy.astype(np.float32), xx.astype(np.float32)
    theta = rng.uniform(-0.08, 0.08)
    u = xx * np.float32(np.cos(theta)) + yy * np.float32(np.sin(theta))
    v = yy * np.float32(np.cos(theta)) - xx * np.float32(np.sin(theta))
    pu, pv = (np.float32(p) for p in rng.uniform(2.1, 3.5, 2))
    warp = 0.5 + 0.5 * np.sin(np.float32(2 * np.pi) * u / pu)
    weft = 0.5 + 0.5 * np.sin(np.float32(2 * np.pi) * v / pv)
    over = np.sin(np.float32(np.pi) * (u / pu + v / pv)) > 0  # twill-like over/under
    mix = np.where(over, warp, weft)
    band = (np.floor(u / 23) + np.floor(v / 17)) % 2 > 0  # coarse tartan bands
    noise = rng.normal(0, 4, (height, width)).astype(np.float32)
    img = np.empty((height, width, 3), np.uint8)
    for c, (a, b, cream) in enumerate(((170, 40, 230), (40, 60, 220), (45, 140, 190))):
        thread = np.where(band, np.float32(b), np.float32(a))
        img[..., c] = np.clip(thread * mix + cream * (1 - mix) + noise, 0, 255)
    return Image.fromarray(img)


def _photo(width, height, rng):
    """Smooth gradients, a few soft shapes and sensor-like noise."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    u, v = xx / width, yy / height
    img = np.stack(
        [60 + 140 * u + 30 * np.sin(7 * v + 1), 40 + 160 * v + 25 * np.cos(5 * u + 3 * v),
         90 + 80 * (1 - u) * v + 40 * np.sin(30 * u * v)],
        axis=-1,
    )
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(pil)
    for _ in range(8):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        w, h = int(rng.integers(width // 10, width // 3)), int(rng.integers(height // 10, height // 3))
        draw.ellipse([x0, y0, x0 + w, y0 + h], fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    arr = np.asarray(pil).astype(np.float32) + rng.normal(0, 4, (height, width, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


_MAKERS = {"text": _text, "fur": _fur, "fabric": _fabric, "photo": _photo}


def case_name(kind, width, height, subsampling, quality, seed):
    return f"{kind}_{width}x{height}_{'420' if subsampling == 2 else '444'}_q{quality}"


def write_corpus(folder):
    """Writes every image of CORPUS into `folder` (kept if already there)."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for entry in CORPUS:
        kind, width, height, subsampling, quality, seed = entry
        name = case_name(*entry)
        path = folder / f"{name}.jpg"
        if not path.exists():
            img = _MAKERS[kind](width, height, np.random.default_rng(seed))
            tmp = folder / f".{name}.{os.getpid()}.jpg"
            img.save(tmp, "JPEG", quality=quality, subsampling=subsampling)
            os.replace(tmp, path)
        out.append((name, path))
    return out
