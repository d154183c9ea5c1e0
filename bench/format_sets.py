"""The format benchmark's sets (bench/formats.py): photo-like images
(bench/make_data.py's content and textures, about 500x375, 1 in 4 portrait)
and CIFAR-like 32x32 ones, written as PNG, WebP, TIFF, BMP, PPM and JPEG,
in class folders, made once and kept (keyed by GENERATOR_VERSION)."""
from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Dict, List

import numpy as np
from PIL import Image

import make_data  # the photo-like content and textures
from harness import log

GENERATOR_VERSION = 1
CLASSES = 10
PHOTO_KINDS = ("scene", "scene", "scene", "fur", "fabric", "text")  # by index
# About 500x375: (w, h) of a landscape file; 1 in 4 portrait.
PHOTO_SIZES = ((500, 375), (500, 333), (480, 360), (500, 400), (512, 384), (460, 345))
DECODER_FORMATS = ("png", "webp", "tiff", "bmp", "ppm", "jpeg")


def _photo_job(args) -> Dict[str, Any]:
    """Photo i: its pixels, written as PNG and WebP, and (i < n_dec) as TIFF,
    BMP, PPM and JPEG; returns its size and each file's bytes."""
    root, rel, seed, index, n_dec = args
    rng = np.random.default_rng(seed)
    w, h = PHOTO_SIZES[int(rng.integers(0, len(PHOTO_SIZES)))]
    if index % 4 == 3:
        w, h = h, w
    kind = PHOTO_KINDS[index % len(PHOTO_KINDS)]
    img = make_data.textured_photo(rng, h, w) if kind == "scene" else make_data.textured(
        rng, kind, h, w)
    pil = Image.fromarray(img)
    q = int(rng.integers(80, 91))
    out = dict(rel=rel, w=w, h=h, kind=kind, webp_quality=q, bytes={})
    fmts = DECODER_FORMATS if index < n_dec else ("png", "webp")
    for fmt in fmts:
        path = os.path.join(root, f"photos_{fmt}", rel + "." + fmt)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if fmt == "png":
            pil.save(path, "PNG")  # PIL's defaults (zlib level 6)
        elif fmt == "webp":
            pil.save(path, "WEBP", quality=q)  # lossy
        elif fmt == "tiff":
            pil.save(path, "TIFF", compression="tiff_lzw")
        elif fmt == "bmp":
            pil.save(path, "BMP")
        elif fmt == "ppm":
            pil.save(path, "PPM")
        else:
            pil.save(path, "JPEG", quality=90)
        out["bytes"][fmt] = os.path.getsize(path)
    return out


def _cifar_job(args) -> Dict[str, Any]:
    path, seed, index = args
    rng = np.random.default_rng(seed)
    if index % 5 == 4:  # a texture (fur, fabric, text, foliage) seen from afar
        kind = make_data.TEXTURES[(index // 5) % len(make_data.TEXTURES)]
        img = make_data.textured(rng, kind, 128, 128)
    else:
        kind = "scene"
        s = int(rng.integers(96, 129))
        img = make_data.textured_photo(rng, s, s)
    small = Image.fromarray(img).resize((32, 32), Image.LANCZOS)
    small.save(path, "PNG")
    return dict(rel=path, w=32, h=32, kind=kind, bytes={"png": os.path.getsize(path)})


def _stamp(path: str) -> Dict[str, Any]:
    return make_data._read_stamp(path)  # noqa: SLF001


def _set_stats(rows: List[Dict[str, Any]], fmt: str) -> Dict[str, Any]:
    mp = np.array([r["w"] * r["h"] / 1e6 for r in rows])
    kb = np.array([r["bytes"][fmt] / 1024 for r in rows])
    raw_kb = np.array([r["w"] * r["h"] * 3 / 1024 for r in rows])
    kinds: Dict[str, int] = {}
    for r in rows:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    return dict(files=len(rows), mean_mp=float(mp.mean()), total_mp=float(mp.sum()),
                mean_w=float(np.mean([r["w"] for r in rows])),
                mean_h=float(np.mean([r["h"] for r in rows])),
                mean_kb=float(kb.mean()), total_mb=float(kb.sum() / 1024),
                of_raw=float(kb.sum() / raw_kb.sum()), content=kinds)


def make_sets(base: str, quick: bool, jobs: int) -> Dict[str, Dict[str, Any]]:
    """Makes or reuses the sets under `base`; returns {name: {path, stats, files}}
    where files are the absolute paths in ImageFolder's order (the decoder
    sets: the first n_dec photos, 10 per class)."""
    per_photo = 12 if quick else 40
    n_dec_per = 4 if quick else 10
    per_cifar = 128 if quick else 500
    os.makedirs(base, exist_ok=True)
    out: Dict[str, Dict[str, Any]] = {}

    # The photos: one generation writes every photo set (their stamps agree).
    params = dict(version=GENERATOR_VERSION, kind="photos", classes=CLASSES,
                  per_class=per_photo, decoder_per_class=n_dec_per, seed=16)
    names = [f"photos_{f}" for f in DECODER_FORMATS]
    stamps = {n: os.path.join(base, n, ".stamp.json") for n in names}
    if not all(_stamp(s).get("params") == params for s in stamps.values()):
        for n in names:
            shutil.rmtree(os.path.join(base, n), ignore_errors=True)
        todo = []
        for i in range(CLASSES * per_photo):
            # Class i % 10, so that the first 10 * n_dec_per photos are
            # n_dec_per per class.
            rel = os.path.join(f"class_{i % CLASSES:02d}", f"img_{i // CLASSES:04d}")
            todo.append((base, rel, 16 * 1_000_003 + i, i, CLASSES * n_dec_per))
        t0 = time.monotonic()
        log(f"==> generating {len(todo)} photos (PNG, WebP; {CLASSES * n_dec_per} also as "
            f"TIFF, BMP, PPM, JPEG) under {base} ({jobs} processes)")
        with ProcessPoolExecutor(jobs) as ex:
            rows = list(ex.map(_photo_job, todo, chunksize=4))
        log(f"    done in {time.monotonic() - t0:.0f} s")
        for n in names:
            fmt = n.split("_", 1)[1]
            mine = [r for r in rows if fmt in r["bytes"]]
            with open(stamps[n], "w") as f:
                json.dump(dict(params=params, stats=_set_stats(mine, fmt),
                               generate_s=time.monotonic() - t0,
                               files=[r["rel"] + "." + fmt for r in mine]), f, indent=1)
    for n in names:
        st = _stamp(stamps[n])
        root = os.path.join(base, n)
        out[n] = dict(path=root, stats=st["stats"],
                      files=sorted(os.path.join(root, r) for r in st["files"]))

    # CIFAR-like: 32x32 PNGs.
    params_c = dict(version=GENERATOR_VERSION, kind="cifar", classes=CLASSES,
                    per_class=per_cifar, seed=32)
    root = os.path.join(base, "cifar_png")
    stamp = os.path.join(root, ".stamp.json")
    if _stamp(stamp).get("params") != params_c:
        shutil.rmtree(root, ignore_errors=True)
        todo = []
        for i in range(CLASSES * per_cifar):
            d = os.path.join(root, f"class_{i % CLASSES:02d}")
            os.makedirs(d, exist_ok=True)
            todo.append((os.path.join(d, f"img_{i // CLASSES:04d}.png"), 32 * 1_000_003 + i, i))
        t0 = time.monotonic()
        log(f"==> generating {len(todo)} 32x32 PNGs in {root} ({jobs} processes)")
        with ProcessPoolExecutor(jobs) as ex:
            rows = list(ex.map(_cifar_job, todo, chunksize=64))
        log(f"    done in {time.monotonic() - t0:.0f} s")
        with open(stamp, "w") as f:
            json.dump(dict(params=params_c, stats=_set_stats(rows, "png"),
                           generate_s=time.monotonic() - t0,
                           files=[os.path.relpath(r["rel"], root) for r in rows]), f, indent=1)
    st = _stamp(stamp)
    out["cifar_png"] = dict(path=root, stats=st["stats"],
                            files=sorted(os.path.join(root, r) for r in st["files"]))
    return out


def write_list(paths: List[str], path: str) -> str:
    """A list file for stoker-image-tool (its folder mode takes only .jpg/.jpeg)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("".join(p + "\n" for p in paths))
    return path
