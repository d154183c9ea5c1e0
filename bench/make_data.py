#!/usr/bin/python3
"""Makes (or reuses) the benchmark's datasets under bench/data/.

    /usr/bin/python3 bench/make_data.py [--data DIR] [--quick] [--jobs N]

* imagenet_like/: ~2,000 photo-like JPEGs in 10 ImageFolder classes, about
  400x350 px and ~100 KB each (quality 75-95, mostly 4:2:0). The content has
  texture at several scales, fine gratings and sensor noise, so the files are
  as large (and as costly to decode) as ImageNet's, not the tiny files a
  smooth synthetic image gives. One file in five is finely textured (print,
  fur, woven fabric, foliage); one in five is progressive (PIL's
  progressive=True, optimize=True, or `jpegtran -progressive -optimize` of a
  baseline file).
* large/: ~150 photos of 2-20 MP (1600x1200 .. 5472x3648, 4:3 and 3:2, both
  orientations), quality 85-95, 4:2:0. Half are camera-like scenes (smooth
  per pixel, sensor noise: ~2-3 bits/pixel), half finely textured at full
  resolution (print, fur, fabric, foliage). Half of the files are baseline
  with the standard Huffman tables (as cameras write them), a quarter PIL
  progressive with optimized tables (as web tools and photo software write
  them), a quarter `jpegtran -progressive -optimize -copy all` of a baseline
  file; one in six carries an EXIF orientation (3, 6 or 8).
* large_baseline/, large_progressive/: the same files as large/, split by
  coding (hard links, same class folders), for rows per coding.
* restart/plain/, restart/rst/, restart/rst4b/: 12 of large/'s baseline files
  re-coded by jpegtran, without restart markers, with one every MCU row
  (-restart 1) and with one every 4 MCUs (-restart 4B), the same
  coefficients: what skipping rows or columns saves.
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
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Dict, List, Tuple

import numpy as np
from PIL import Image, ImageDraw, ImageFile

_REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(_REPO, "scripts"))
sys.path.insert(0, os.path.join(_REPO, "tests", "python"))
from make_dataset import gradients_and_blobs  # noqa: E402
import textured_corpus  # noqa: E402  (print, fur and fabric generators)

# Noisy progressive JPEGs can outgrow PIL's default encoder buffer
# ("Suspension not allowed here").
ImageFile.MAXBLOCK = 1 << 25

GENERATOR_VERSION = 4
# How a file is coded: PIL baseline (standard tables, as cameras write them),
# PIL progressive with optimized tables, jpegtran -progressive -optimize of a
# PIL baseline file.
CODINGS = ("baseline", "pil-progressive", "jpegtran-progressive")
TEXTURES = ("text", "fur", "fabric", "foliage")


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


def _foliage(width: int, height: int, rng: np.random.Generator) -> Image.Image:
    """Leaves: many small overlapping ellipses in greens, light and shadow."""
    img = Image.new("RGB", (width, height), (34, 52, 28))
    draw = ImageDraw.Draw(img)
    n = width * height // 60
    x = rng.uniform(0, width, n)
    y = rng.uniform(0, height, n)
    a = rng.uniform(2, 7, n)
    b = a * rng.uniform(0.3, 0.7, n)
    light = rng.uniform(0.35, 1.15, n)
    hue = rng.normal(0, 18, n)
    for i in range(n):
        lf = light[i]
        c = (int(np.clip((70 + hue[i]) * lf, 0, 255)), int(np.clip(140 * lf, 0, 255)),
             int(np.clip((40 - hue[i] / 2) * lf, 0, 255)))
        if i % 2:
            draw.ellipse([x[i] - a[i], y[i] - b[i], x[i] + a[i], y[i] + b[i]], fill=c)
        else:
            draw.ellipse([x[i] - b[i], y[i] - a[i], x[i] + b[i], y[i] + a[i]], fill=c)
    return img


_TEXTURE_MAKERS = {"text": textured_corpus._text, "fur": textured_corpus._fur,  # noqa: SLF001
                   "fabric": textured_corpus._fabric, "foliage": _foliage}  # noqa: SLF001
_TILE = 1024  # fur and foliage draw one shape per call: drawn once a tile, then tiled


def textured(rng: np.random.Generator, kind: str, h: int, w: int) -> np.ndarray:
    """A finely textured RGB image of h x w: a texture of TEXTURES at full
    resolution (fine detail in every block, unlike a scene), lit by a smooth
    gradient, with a little sensor noise. Fur and foliage are drawn on a
    1024 px tile, repeated with flips (the decoder cannot tell)."""
    make = _TEXTURE_MAKERS[kind]
    if kind in ("fur", "foliage") and (h > _TILE or w > _TILE):
        tile = np.asarray(make(_TILE, _TILE, rng))
        reps = (h // _TILE + 1, w // _TILE + 1)
        rows = []
        for i in range(reps[0]):
            row = [tile[::1 - 2 * (i % 2), ::1 - 2 * (j % 2)] for j in range(reps[1])]
            rows.append(np.concatenate(row, axis=1))
        img = np.concatenate(rows, axis=0)[:h, :w].astype(np.float32)
    else:
        img = np.asarray(make(w, h, rng), np.float32)
    sh, sw = max(h // 16, 8), max(w // 16, 8)
    light = gradients_and_blobs(rng, sh, sw, amp=40, blobs=(2, 4)).mean(axis=2)
    light = np.asarray(Image.fromarray(light.astype(np.float32), mode="F").resize(
        (w, h), Image.BILINEAR))
    img *= (0.75 + light / 512.0)[..., None]
    img += rng.normal(0, 3, (h, w, 1)).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def _save(img: np.ndarray, path: str, coding: str, quality: int, subsampling: int,
          orientation: int = 1) -> None:
    """Writes `img` as `coding` (CODINGS); `orientation` != 1 adds an EXIF
    orientation tag (the pixels are stored as they are, as a camera does)."""
    kw = dict(quality=quality, subsampling=subsampling)
    if orientation != 1:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kw["exif"] = exif.tobytes()
    pil = Image.fromarray(img)
    if coding == "pil-progressive":
        pil.save(path, "JPEG", progressive=True, optimize=True, **kw)
    elif coding == "jpegtran-progressive":
        tmp = path + ".base.jpg"
        pil.save(tmp, "JPEG", **kw)
        subprocess.run(["jpegtran", "-progressive", "-optimize", "-copy", "all", "-outfile",
                        path, tmp], check=True)
        os.unlink(tmp)
    else:
        pil.save(path, "JPEG", **kw)


def _small_job(args) -> Tuple[str, int, int, int, str, str, int]:
    path, seed, index = args
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(250, 451)), int(rng.integers(300, 501))
    q = int(rng.integers(75, 96))
    sub = int(rng.choice([0, 1, 2], p=[0.2, 0.1, 0.7]))  # 4:4:4, 4:2:2, 4:2:0
    # By index, so that every share is exact: 1 in 5 textured, 1 in 5
    # progressive (1 in 10 each way), crossed.
    kind = TEXTURES[(index // 5) % 4] if index % 5 == 4 else "scene"
    coding = {0: CODINGS[1], 5: CODINGS[2]}.get(index % 10, CODINGS[0])
    img = textured_photo(rng, h, w) if kind == "scene" else textured(rng, kind, h, w)
    _save(img, path, coding, q, sub)
    return path, h, w, os.path.getsize(path), coding, kind, 1


_LARGE_SIZES = [(1600, 1200), (2000, 1500), (2592, 1944), (3000, 2000), (3264, 2448),
                (4000, 3000), (4608, 3456), (5472, 3648)]


def _large_job(args) -> Tuple[str, int, int, int, str, str, int]:
    path, seed, index = args
    rng = np.random.default_rng(seed)
    w, h = _LARGE_SIZES[int(rng.integers(0, len(_LARGE_SIZES)))]
    if rng.random() < 0.3:  # portrait
        w, h = h, w
    q = int(rng.integers(85, 96))
    # By index, crossed so that both codings get the same mix of content:
    # codings cycle every 4 files, content every 8 (half scenes).
    coding = CODINGS[(0, 0, 1, 2)[index % 4]]
    kind = ("scene", "scene", "scene", "scene", *TEXTURES)[(index // 4) % 8]
    orientation = (3, 6, 8)[(index // 6) % 3] if index % 6 == 5 else 1
    if kind != "scene":
        _save(textured(rng, kind, h, w), path, coding, q, 2, orientation)
        return path, h, w, os.path.getsize(path), coding, kind, orientation
    # Content made at 1/3 resolution (cheap), upscaled like a lens-blurred
    # scene, then fine sensor noise and a little sharpening-like detail.
    sh, sw = h // 3, w // 3
    base = textured_photo(rng, sh, sw, fine_noise=10.0, grating_amp=(10, 25))
    img = np.asarray(Image.fromarray(base).resize((w, h), Image.BICUBIC), np.float32)
    tile = rng.normal(0, 1, (509, 509, 3)).astype(np.float32)  # sensor noise, tiled
    reps = (h // 509 + 1, w // 509 + 1, 1)
    img += rng.uniform(3, 6) * np.tile(tile, reps)[:h, :w]
    img += 8 * _upsampled_noise(rng, h, w, 2.0)[..., None]
    _save(np.clip(img, 0, 255).astype(np.uint8), path, coding, q, 2, orientation)
    return path, h, w, os.path.getsize(path), coding, kind, orientation


def _stats(rows: List[Tuple]) -> Dict[str, Any]:
    hs = np.array([r[1] for r in rows], np.float64)
    ws = np.array([r[2] for r in rows], np.float64)
    sz = np.array([r[3] for r in rows], np.float64)
    count = lambda i: {k: sum(1 for r in rows if r[i] == k)  # noqa: E731
                       for k in sorted({r[i] for r in rows})}
    return dict(files=len(rows), mean_h=float(hs.mean()), mean_w=float(ws.mean()),
                mean_mp=float((hs * ws).mean() / 1e6), min_mp=float((hs * ws).min() / 1e6),
                max_mp=float((hs * ws).max() / 1e6), mean_kb=float(sz.mean() / 1024),
                total_mb=float(sz.sum() / 2**20),
                progressive=sum(1 for r in rows if r[4] != "baseline"),
                codings=count(4), content=count(5),
                exif_oriented=sum(1 for r in rows if r[6] != 1))


def _make_imagefolder(root: str, classes: int, per_class: int, job, seed: int,
                      jobs: int, what: str) -> Dict[str, float]:
    params = dict(version=GENERATOR_VERSION, kind=what, classes=classes, per_class=per_class,
                  seed=seed)
    stamp = os.path.join(root, ".stamp.json")
    old = _read_stamp(stamp)
    if old.get("params") == params:
        return old
    shutil.rmtree(root, ignore_errors=True)
    todo = []
    for k in range(classes):
        d = os.path.join(root, f"class_{k:02d}")
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            todo.append((os.path.join(d, f"img_{i:04d}.jpg"), seed * 1_000_003 + len(todo),
                         len(todo)))
    t0 = time.monotonic()
    print(f"==> generating {len(todo)} {what} JPEGs in {root} ({jobs} processes)", flush=True)
    with ProcessPoolExecutor(jobs) as ex:
        rows = list(ex.map(job, todo, chunksize=4))
    st = _stats(rows)
    st["generate_s"] = time.monotonic() - t0
    files = {os.path.relpath(r[0], root): dict(h=r[1], w=r[2], bytes=r[3], coding=r[4],
                                               content=r[5], orientation=r[6]) for r in rows}
    out = dict(params=params, stats=st, files=files)
    with open(stamp, "w") as f:
        json.dump(out, f, indent=1)
    print(f"    done in {st['generate_s']:.0f} s: {st['files']} files, "
          f"{st['mean_w']:.0f}x{st['mean_h']:.0f} px mean, {st['mean_kb']:.0f} KB mean, "
          f"{st['progressive']} progressive", flush=True)
    return out


def _read_stamp(path: str) -> Dict[str, Any]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _split_by_coding(src: Dict[str, Any], root: str, views: Dict[str, str]) -> Dict[str, Dict]:
    """Hard-link views of `root` (an ImageFolder made above) per coding:
    views = {name: folder}; name "baseline" gets the baseline files,
    "progressive" the others. Rebuilt when `root`'s stamp changes."""
    out = {}
    for name, folder in views.items():
        stamp = os.path.join(folder, ".stamp.json")
        params = dict(src["params"], view=name)
        old = _read_stamp(stamp)
        if old.get("params") == params:
            out[name] = dict(path=folder, stats=old["stats"])
            continue
        shutil.rmtree(folder, ignore_errors=True)
        rows = []
        for rel, f in sorted(src["files"].items()):
            if (f["coding"] == "baseline") != (name == "baseline"):
                continue
            dst = os.path.join(folder, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.link(os.path.join(root, rel), dst)
            rows.append((dst, f["h"], f["w"], f["bytes"], f["coding"], f["content"],
                         f["orientation"]))
        st = _stats(rows)
        with open(stamp, "w") as fh:
            json.dump(dict(params=params, stats=st), fh, indent=1)
        out[name] = dict(path=folder, stats=st)
    return out


def _restart_pair(src: Dict[str, Any], root: str, folder: str, n: int = 12) -> Dict[str, Any]:
    """n baseline files of `root` re-coded by jpegtran (same coefficients,
    -optimize) into folder/plain/, with a restart marker every MCU row into
    folder/rst/, and every 4 MCUs (as hardware encoders place them) into
    folder/rst4b/."""
    params = dict(src["params"], view="restart", n=n, variants=3)
    stamp = os.path.join(folder, ".stamp.json")
    old = _read_stamp(stamp)
    if old.get("params") != params:
        shutil.rmtree(folder, ignore_errors=True)
        picked = [rel for rel, f in sorted(src["files"].items())
                  if f["coding"] == "baseline"][:n]
        for sub, extra in (("plain", []), ("rst", ["-restart", "1"]), ("rst4b", ["-restart", "4B"])):
            os.makedirs(os.path.join(folder, sub), exist_ok=True)
            for i, rel in enumerate(picked):
                subprocess.run(["jpegtran", "-optimize", "-copy", "none", *extra, "-outfile",
                                os.path.join(folder, sub, f"img_{i:02d}.jpg"),
                                os.path.join(root, rel)], check=True)
        mb = sum(src["files"][rel]["w"] * src["files"][rel]["h"] for rel in picked) / 1e6
        old = dict(params=params, stats=dict(files=len(picked), mean_mp=mb / max(len(picked), 1),
                                             sources=picked))
        with open(stamp, "w") as fh:
            json.dump(old, fh, indent=1)
    return dict(path=folder, plain=os.path.join(folder, "plain"),
                rst=os.path.join(folder, "rst"), rst4b=os.path.join(folder, "rst4b"),
                stats=old["stats"])


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
    small_made = _make_imagefolder(small, 10, 40 if quick else 200, _small_job, 1, jobs,
                                   "imagenet-like")
    large_made = _make_imagefolder(large, 3, 44 if quick else 50, _large_job, 2, jobs,
                                   "large-photo")
    small_st, large_st = small_made["stats"], large_made["stats"]
    views = _split_by_coding(large_made, large, {
        "baseline": os.path.join(base, "large_baseline"),
        "progressive": os.path.join(base, "large_progressive")})
    restart = _restart_pair(large_made, large, os.path.join(base, "restart"), 4 if quick else 12)
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
            "large_baseline": views["baseline"],
            "large_progressive": views["progressive"],
            "restart": restart,
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
