#!/usr/bin/python3
"""Makes (or reuses) the benchmark's datasets under bench/data/.

    /usr/bin/python3 bench/make_data.py [--data DIR] [--quick] [--jobs N]

* imagenet_like/: ~2,000 photo-like JPEGs in 10 ImageFolder classes, about
  400x350 px and ~100 KB each (quality 75-95, mostly 4:2:0). The content has
  texture at several scales, fine gratings and sensor noise, so the files are
  as large (and as costly to decode) as ImageNet's, not the tiny files a
  smooth synthetic image gives.
* large/: ~150 phone-camera-like JPEGs of 2-12 MP (1600x1200 .. 4000x3000,
  4:3 and 3:2, both orientations), quality 85-95, 4:2:0: smoother per pixel
  than the small set (a phone photo is ~2-3 bits/pixel).
* manifest_1m.tsv / manifest_100.tsv: manifests ("relative/path<TAB>label"
  per line) of 1,000,000 and 100 entries that cycle over imagenet_like's files.

A stamp file per dataset records the generator's parameters; a dataset whose
stamp matches is reused, otherwise it is rebuilt. --quick makes smaller sets
(under data/quick/) for a smoke run.
"""
import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Dict, List, Tuple

import numpy as np
from PIL import Image, ImageFile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from make_dataset import gradients_and_blobs  # noqa: E402

# Noisy progressive JPEGs can outgrow PIL's default encoder buffer
# ("Suspension not allowed here").
ImageFile.MAXBLOCK = 1 << 25

GENERATOR_VERSION = 3


def _upsampled_noise(rng: np.random.Generator, h: int, w: int, scale: float) -> np.ndarray:
    """Gaussian noise of feature size `scale` pixels, h x w, float32."""
    sh, sw = int(h / scale) + 2, int(w / scale) + 2
    n = rng.normal(0, 1, (sh, sw)).astype(np.float32)
    return np.asarray(Image.fromarray(n, mode="F").resize((w, h), Image.BICUBIC))


def textured_photo(rng: np.random.Generator, h: int, w: int, fine_noise: float = 22.0,
                   grating_amp: Tuple[float, float] = (15, 40)) -> np.ndarray:
    """A photo-like RGB image: gradients, blobs, multi-scale texture, gratings, noise."""
    img = gradients_and_blobs(rng, h, w, amp=70, blobs=(3, 8))  # objects
    lum = np.zeros((h, w), np.float32)  # texture at several scales
    for s, amp in ((32, 30), (8, 20), (3, 28), (1.5, 28)):
        lum += amp * _upsampled_noise(rng, h, w, s)
    img += lum[..., None] * rng.uniform(0.6, 1.2, 3).astype(np.float32)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    for _ in range(rng.integers(4, 9)):  # fine gratings (foliage, fabric)
        th = rng.uniform(0, np.pi)
        per = rng.uniform(2.5, 7)
        cy, cx = rng.uniform(0, 1, 2) * (h, w)
        r = rng.uniform(0.15, 0.45) * min(h, w)
        m = ((yy - cy) ** 2 + (xx - cx) ** 2) < r * r
        g = np.sin((xx[m] * np.cos(th) + yy[m] * np.sin(th)) * (2 * np.pi / per))
        img[m] += (rng.uniform(*grating_amp) * g)[:, None]
    img += rng.normal(0, fine_noise, img.shape).astype(np.float32)  # sensor noise
    return np.clip(img, 0, 255).astype(np.uint8)


def _small_job(args) -> Tuple[str, int, int, int]:
    path, seed = args
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(250, 451)), int(rng.integers(300, 501))
    q = int(rng.integers(75, 96))
    sub = int(rng.choice([0, 1, 2], p=[0.2, 0.1, 0.7]))  # 4:4:4, 4:2:2, 4:2:0
    Image.fromarray(textured_photo(rng, h, w)).save(
        path, "JPEG", quality=q, subsampling=sub, progressive=bool(rng.random() < 0.1))
    return path, h, w, os.path.getsize(path)


_LARGE_SIZES = [(1600, 1200), (2000, 1500), (2592, 1944), (3000, 2000), (3264, 2448),
                (4000, 3000)]


def _large_job(args) -> Tuple[str, int, int, int]:
    path, seed = args
    rng = np.random.default_rng(seed)
    w, h = _LARGE_SIZES[int(rng.integers(0, len(_LARGE_SIZES)))]
    if rng.random() < 0.3:  # portrait
        w, h = h, w
    # Content made at 1/3 resolution (cheap), upscaled like a lens-blurred
    # scene, then fine sensor noise and a little sharpening-like detail.
    sh, sw = h // 3, w // 3
    base = textured_photo(rng, sh, sw, fine_noise=10.0, grating_amp=(10, 25))
    img = np.asarray(Image.fromarray(base).resize((w, h), Image.BICUBIC), np.float32)
    tile = rng.normal(0, 1, (509, 509, 3)).astype(np.float32)  # sensor noise, tiled
    reps = (h // 509 + 1, w // 509 + 1, 1)
    img += rng.uniform(3, 6) * np.tile(tile, reps)[:h, :w]
    img += 8 * _upsampled_noise(rng, h, w, 2.0)[..., None]
    q = int(rng.integers(85, 96))
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(path, "JPEG", quality=q,
                                                                  subsampling=2)
    return path, h, w, os.path.getsize(path)


def _stats(rows: List[Tuple[str, int, int, int]]) -> Dict[str, float]:
    hs = np.array([r[1] for r in rows], np.float64)
    ws = np.array([r[2] for r in rows], np.float64)
    sz = np.array([r[3] for r in rows], np.float64)
    return dict(files=len(rows), mean_h=float(hs.mean()), mean_w=float(ws.mean()),
                mean_mp=float((hs * ws).mean() / 1e6), min_mp=float((hs * ws).min() / 1e6),
                max_mp=float((hs * ws).max() / 1e6), mean_kb=float(sz.mean() / 1024),
                total_mb=float(sz.sum() / 2**20))


def _make_imagefolder(root: str, classes: int, per_class: int, job, seed: int,
                      jobs: int, what: str) -> Dict[str, float]:
    params = dict(version=GENERATOR_VERSION, kind=what, classes=classes, per_class=per_class,
                  seed=seed)
    stamp = os.path.join(root, ".stamp.json")
    try:
        with open(stamp) as f:
            old = json.load(f)
        if old.get("params") == params:
            return old["stats"]
    except (OSError, ValueError):
        pass
    shutil.rmtree(root, ignore_errors=True)
    todo = []
    for k in range(classes):
        d = os.path.join(root, f"class_{k:02d}")
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            todo.append((os.path.join(d, f"img_{i:04d}.jpg"), seed * 1_000_003 + len(todo)))
    t0 = time.monotonic()
    print(f"==> generating {len(todo)} {what} JPEGs in {root} ({jobs} processes)", flush=True)
    with ProcessPoolExecutor(jobs) as ex:
        rows = list(ex.map(job, todo, chunksize=4))
    st = _stats(rows)
    with open(stamp, "w") as f:
        json.dump(dict(params=params, stats=st), f, indent=1)
    print(f"    done in {time.monotonic() - t0:.0f} s: {st['files']} files, "
          f"{st['mean_w']:.0f}x{st['mean_h']:.0f} px mean, {st['mean_kb']:.0f} KB mean",
          flush=True)
    return st


def _write_manifest(path: str, files: List[str], labels: List[int], entries: int) -> None:
    if os.path.exists(path):
        with open(path, "rb") as f:
            n = sum(1 for _ in f)
        if n == entries:
            return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for i in range(entries):
            j = i % len(files)
            f.write(f"{files[j]}\t{labels[j]}\n")
    os.replace(tmp, path)


def make_all(data: str, quick: bool = False, jobs: int = 0) -> Dict[str, Dict]:
    """Makes or reuses the datasets; returns {name: {'path', 'stats'}} (paths absolute)."""
    jobs = jobs or os.cpu_count() or 1
    data = os.path.abspath(data)
    base = os.path.join(data, "quick") if quick else data
    os.makedirs(base, exist_ok=True)
    small = os.path.join(base, "imagenet_like")
    large = os.path.join(base, "large")
    small_st = _make_imagefolder(small, 10, 40 if quick else 200, _small_job, 1, jobs,
                                 "imagenet-like")
    large_st = _make_imagefolder(large, 3, 22 if quick else 50, _large_job, 2, jobs,
                                 "large-photo")
    # Manifests over the small set's files, relative to the manifest's folder.
    files, labels = [], []
    for k, cls in enumerate(sorted(os.listdir(small))):
        d = os.path.join(small, cls)
        if not os.path.isdir(d):
            continue
        for fn in sorted(os.listdir(d))[:5]:
            files.append(os.path.relpath(os.path.join(d, fn), base))
            labels.append(k)
    m_big = os.path.join(base, "manifest_1m.tsv")
    m_small = os.path.join(base, "manifest_100.tsv")
    _write_manifest(m_big, files, labels, 1_000_000)
    _write_manifest(m_small, files, labels, 100)
    return {"imagenet_like": dict(path=small, stats=small_st),
            "large": dict(path=large, stats=large_st),
            "manifest_1m": dict(path=m_big, entries=1_000_000),
            "manifest_100": dict(path=m_small, entries=100),
            "root": dict(path=data)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "data"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jobs", type=int, default=0)
    a = ap.parse_args()
    print(json.dumps(make_all(a.data, a.quick, a.jobs), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
