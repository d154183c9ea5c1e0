#!/usr/bin/python3
"""Makes an ImageFolder tree of photo-like JPEGs for demos, tests and benchmarks.

    /usr/bin/python3 scripts/make_dataset.py OUT_DIR [--classes 4] [--per-class 100]
        [--min-size 160] [--max-size 480] [--quality 75 95] [--seed 0]

Content is smooth gradients, shapes and sensor-like noise, so that JPEG files
have realistic sizes (not the tiny files a flat colour gives). Subsampling,
quality and progressive coding vary per file. Importable: make_dataset(...).
"""
import argparse
import os
import sys

import numpy as np
from PIL import Image


def gradients_and_blobs(rng: np.random.Generator, h: int, w: int, amp: float = 80,
                        blobs=(2, 6)) -> np.ndarray:
    """h x w x 3 float32: a sinusoidal gradient per channel (128 +- amp) and
    rng.integers(*blobs) flat-coloured discs blended in. Also the base of
    bench/make_data.py's textured images."""
    y = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    img = np.empty((h, w, 3), np.float32)
    for c in range(3):
        a, b, p = rng.uniform(-1, 1, 3)
        f = rng.uniform(1, 6)
        img[..., c] = 128 + amp * np.sin(f * (a * x + b * y) * np.pi + p * 3)
    for _ in range(rng.integers(*blobs)):
        cy, cx = rng.uniform(0, 1, 2)
        r = rng.uniform(0.05, 0.3)
        mask = ((y - cy) ** 2 + (x - cx) ** 2) < r * r
        img[mask] = img[mask] * 0.4 + rng.uniform(0, 255, 3) * 0.6
    return img


def photo_like(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A smooth, textured RGB image of h x w pixels."""
    img = gradients_and_blobs(rng, h, w)
    img += rng.normal(0, 12, img.shape).astype(np.float32)  # texture
    return np.clip(img, 0, 255).astype(np.uint8)


def save_jpeg(arr: np.ndarray, path: str, rng: np.random.Generator,
              quality=(75, 95)) -> None:
    q = int(rng.integers(quality[0], quality[1] + 1))
    sub = int(rng.choice([0, 1, 2], p=[0.2, 0.1, 0.7]))  # 4:4:4, 4:2:2, 4:2:0
    Image.fromarray(arr).save(path, "JPEG", quality=q, subsampling=sub,
                              progressive=bool(rng.random() < 0.15))


def make_dataset(out: str, classes: int = 4, per_class: int = 100, min_size: int = 160,
                 max_size: int = 480, quality=(75, 95), seed: int = 0) -> list:
    """Writes out/class_k/img_i.jpg; returns the paths in ImageFolder order."""
    rng = np.random.default_rng(seed)
    paths = []
    for k in range(classes):
        d = os.path.join(out, f"class_{k:03d}")
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            h = int(rng.integers(min_size, max_size + 1))
            w = int(rng.integers(min_size, max_size + 1))
            p = os.path.join(d, f"img_{i:05d}.jpg")
            save_jpeg(photo_like(rng, h, w), p, rng, quality)
            paths.append(p)
    return paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--per-class", type=int, default=100)
    ap.add_argument("--min-size", type=int, default=160)
    ap.add_argument("--max-size", type=int, default=480)
    ap.add_argument("--quality", type=int, nargs=2, default=(75, 95))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    paths = make_dataset(a.out, a.classes, a.per_class, a.min_size, a.max_size,
                         tuple(a.quality), a.seed)
    total = sum(os.path.getsize(p) for p in paths)
    print(f"wrote {len(paths)} JPEGs ({total / len(paths) / 1024:.0f} KB mean) to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
