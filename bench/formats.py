#!/usr/bin/python3
"""Image formats: stoker vs DataLoader on PNG and WebP ImageFolders, and each
decoder's cost per megapixel.

    /usr/bin/python3 bench/formats.py [--quick] [--rounds N] [--decoder-rounds N]
        [--build build] [--data bench/data] [--out bench] [--jobs N]

Writes bench/FORMATS.md (and the raw numbers in bench/out/formats.json);
bench/run.sh runs it after bench/scale.py. About 8-10 minutes on an idle
2-core machine once the datasets exist (making them takes about 2 more the
first time); --quick is a 1-2 minute smoke run on smaller sets.

1. Datasets, under bench/data/formats/ (--quick: bench/data/formats/quick/),
   made once and reused while their stamp (.stamp.json) matches:
   * cifar_png/: 10 classes, 5,000 32x32 PNGs: make_data.py's photo-like
     content (and 1 in 5 of its textures) drawn at 96-128 px and downscaled
     (LANCZOS), as CIFAR's images are downscaled photos;
   * photos_png/: 10 classes, 400 photos of about 500x375 (both
     orientations), make_data.py's textured scenes (half) and its fur, fabric
     and text textures (a sixth each), saved by PIL with default compression;
   * photos_webp/: the same photos as lossy WebP, quality 80-90;
   * photos_tiff/ (LZW), photos_bmp/, photos_ppm/ and photos_jpeg/ (quality
     90, a reference): the first 100 photos (10 per class), for the decoders'
     costs; PNG's and WebP's costs are taken on the same 100 photos.
2. Throughput, train pipeline, 2 workers on both sides, in --rounds rounds,
   each set's configurations in an order rotated each round: DataLoader
   (ImageFolder, num_workers=2, persistent workers, prefetch_factor 2) vs
   stoker.Loader(transform=<the same Compose object>) on a `stokerd
   --workers 2` this script starts (bench.py's Daemon, measure() and CPU
   accounting), plus stoker's single-thread loop (`stoker-image-tool bench`
   on the same keywords the Loader sends) for where its time goes. Photos:
   RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize,
   batch 64; CIFAR: RandomCrop(32, padding=4) + RandomHorizontalFlip +
   ToTensor + Normalize, batch 256.
3. Decoders: `stoker-image-tool bench --threads 1 --pipeline decode` (files
   preloaded in memory) vs PIL's `Image.open(BytesIO(b)).convert("RGB")` in
   one thread on the same files, --decoder-rounds interleaved runs each: ms
   per image and per megapixel, and PIL's over stoker's.

Nothing here asserts a timing: FORMATS.md says whether the target (stoker at
least 3x DataLoader on the PNG photos) is met, and where the time goes.
"""
from __future__ import annotations

import argparse
import gc
import io
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Tuple

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import bench  # noqa: E402  (Daemon, measure, CPU accounting, machine_info, tables)

log = bench.log
WORKERS = bench.WORKERS
MEAN, STD = bench.MEAN, bench.STD
SETS = ("cifar_png", "photos_png", "photos_webp")
TARGET = 3.0  # stoker over DataLoader, train, PNG photos

# The sets (format_sets.py).
from format_sets import DECODER_FORMATS, make_sets, write_list  # noqa: E402


# ---------------------------------------------------------------------------
# Transforms and sources


def transform(kind: str):
    """The Compose both sides are given (one object per set kind)."""
    import torchvision.transforms as T
    if kind == "cifar":
        return T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                          T.Normalize(MEAN, STD)])
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


class DataLoaderSource(bench.DataLoaderSource):
    """bench.py's DataLoader side (ImageFolder, 2 persistent workers,
    prefetch_factor 2, epochs back to back) with a batch size of our own."""

    def __init__(self, root: str, tf: Any, batch_size: int) -> None:  # noqa: D107
        from torchvision.datasets import ImageFolder
        self._start(ImageFolder(root, transform=tf), batch_size, shuffle=True)


class StokerSource(bench.StokerSource):
    """bench.py's stoker side; remembers each producer_cpu() reading split
    into (stokerd, workers), so that the timed window's split is known
    (measure() reads producer_cpu() once before and once after it)."""

    def __init__(self, *args: Any, **kw: Any) -> None:  # noqa: D107
        self.readings: List[Tuple[float, float]] = []
        super().__init__(*args, **kw)

    def producer_cpu(self) -> float:
        d, w = self.daemon.cpu()
        self.readings.append((d, w))
        return d + w


SET_SHAPE = {"cifar_png": ("cifar", 256), "photos_png": ("photo", 64),
             "photos_webp": ("photo", 64)}


def throughput(sets: Dict[str, Dict[str, Any]], data_root: str, daemon: bench.Daemon,
               build: str, rounds: int, warmup: int, batches: Dict[str, int], tool_s: float,
               lists_dir: str) -> Dict[str, Dict[str, List[Dict[str, Any]]]]:
    """Per set, `rounds` rounds of [DataLoader, stoker, loop] in an order
    rotated each round; the sets one after another within a round, so that
    every round sees every set. Returns {set: {config: [run, ...]}}."""
    from stoker import _transforms
    tfs = {k: transform(k) for k in ("cifar", "photo")}
    keywords = {k: _transforms.loader_options(tfs[k]) for k in tfs}
    for k, kw in keywords.items():
        log(f"    {k}: the Loader sends {json.dumps(kw)}")
    configs = ("dl", "stoker", "loop")
    runs: Dict[str, Dict[str, List[Dict[str, Any]]]] = {s: {c: [] for c in configs}
                                                        for s in SETS}
    lists = {s: write_list(sets[s]["files"], os.path.join(lists_dir, s + ".txt")) for s in SETS}
    for r in range(rounds):
        t_round = time.monotonic()
        line = []
        for s in SETS:
            kind, bs = SET_SHAPE[s]
            order = configs[r % 3:] + configs[:r % 3]
            for c in order:
                t0 = time.monotonic()
                if c == "loop":
                    res = bench.run_tool(build, lists[s], "train", "float32", "nchw", tool_s,
                                         keywords=keywords[kind])
                else:
                    src = (DataLoaderSource(sets[s]["path"], tfs[kind], bs) if c == "dl" else
                           StokerSource(daemon, os.path.relpath(sets[s]["path"], data_root),
                                              "train", "float32", "nchw", f"formats-{s}-{r}",
                                              batch_size=bs, transform=tfs[kind]))
                    try:
                        res = bench.measure(src, warmup, batches[s])
                        if res["producer_cores"] < 0.05:
                            log(f"!! {s} {c}: the producers used no CPU while timed: the "
                                "timed batches were made before the clock started (too few "
                                "batches?)")
                        if c == "stoker":
                            res["session"] = src.session_status()
                            (d0, w0), (d1, w1) = src.readings[-2:]
                            res["daemon_cores"] = (d1 - d0) / res["seconds"]
                            res["worker_cores"] = (w1 - w0) / res["seconds"]
                    finally:
                        src.close()
                        del src
                        gc.collect()
                    if c == "stoker":
                        daemon.check_alive()
                res["round"] = r
                res["wall_s"] = time.monotonic() - t0
                res["load"] = bench.loadavg()
                runs[s][c].append(res)
            line.append(f"{s}: dl={runs[s]['dl'][-1]['images_per_s']:.0f} "
                        f"stoker={runs[s]['stoker'][-1]['images_per_s']:.0f} "
                        f"loop={runs[s]['loop'][-1]['images_per_s']:.0f}")
        log(f"    round {r + 1}/{rounds} ({time.monotonic() - t_round:.0f} s, load "
            f"{bench.loadavg()}): " + "  ".join(line))
    return runs


def run_pil_convert(paths: List[str], seconds: float, blobs_cache: Dict[str, bytes]
                    ) -> Dict[str, float]:
    """`Image.open(BytesIO(b)).convert("RGB")` over the files (preloaded),
    from the first on, in this thread for `seconds` (what ImageFolder's
    loader does before the transform)."""
    for p in paths:
        if p not in blobs_cache:
            with open(p, "rb") as f:
                blobs_cache[p] = f.read()
    n, dt, cpu = bench.time_each([blobs_cache[p] for p in paths], seconds,
                                 lambda b: Image.open(io.BytesIO(b)).convert("RGB"))
    return dict(images_per_s=n / dt, images=n, seconds=dt, cpu_s=cpu, ms=1000 * dt / n,
                cpu_ms=1000 * cpu / n)


def png_idat(data: bytes) -> bytes:
    """A PNG's IDAT chunks joined: its zlib stream."""
    pos, out = 8, []
    while pos + 8 <= len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        if data[pos + 4:pos + 8] == b"IDAT":
            out.append(data[pos + 8:pos + 8 + n])
        pos += 12 + n
    return b"".join(out)


def run_inflate(paths: List[str], seconds: float) -> Dict[str, Any]:
    """zlib.decompress of each PNG's IDAT stream (the same zlib PIL and
    libspng inflate with), one thread, from the first file on: the inflate
    part of a PNG decode; and the share of rows per PNG filter type."""
    streams = []
    filters = [0] * 5
    for p in paths:
        with open(p, "rb") as f:
            data = f.read()
        streams.append(png_idat(data))
        w, h = Image.open(io.BytesIO(data)).size
        raw = __import__("zlib").decompress(streams[-1])
        stride = w * 3 + 1  # 8-bit RGB, as these files are
        for r in range(h):
            filters[min(raw[r * stride], 4)] += 1
    import zlib
    gc.collect()
    n, t0 = 0, time.perf_counter()
    while True:
        zlib.decompress(streams[n % len(streams)])
        n += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            break
    rows = sum(filters)
    return dict(ms=1000 * dt / n, images=n, seconds=dt,
                filters={k: filters[i] / rows for i, k in
                         enumerate(("none", "sub", "up", "average", "paeth"))})


def decoders(sets: Dict[str, Dict[str, Any]], build: str, rounds: int, seconds: float,
             lists_dir: str) -> Dict[str, List[Dict[str, Any]]]:
    """Per format, `rounds` interleaved pairs of (stoker's decode loop, PIL)
    on the same files: {fmt: [{tool: ..., pil: ...}, ...]}."""
    n_dec = sets["photos_tiff"]["stats"]["files"]
    files = {}
    for fmt in DECODER_FORMATS:
        all_files = sets[f"photos_{fmt}"]["files"]
        # The decoder sets' photos: PNG's and WebP's first n_dec (the same ones).
        names = {os.path.splitext(os.path.relpath(p, sets["photos_tiff"]["path"]))[0]
                 for p in sets["photos_tiff"]["files"]}
        mine = [p for p in all_files
                if os.path.splitext(os.path.relpath(p, sets[f"photos_{fmt}"]["path"]))[0] in names]
        assert len(mine) == n_dec, (fmt, len(mine), n_dec)
        files[fmt] = write_list(mine, os.path.join(lists_dir, f"decode-{fmt}.txt"))
    out: Dict[str, List[Dict[str, Any]]] = {fmt: [] for fmt in DECODER_FORMATS}
    blobs: Dict[str, bytes] = {}
    log(f"==> decoders: {rounds} rounds x {len(DECODER_FORMATS)} formats x (stoker, PIL), "
        f"{seconds:g} s each, {n_dec} photos per format")
    for r in range(rounds):
        order = DECODER_FORMATS[r % len(DECODER_FORMATS):] + DECODER_FORMATS[
            :r % len(DECODER_FORMATS)]
        line = []
        for fmt in order:
            paths = [ln.strip() for ln in open(files[fmt]) if ln.strip()]
            pair = {}
            for side in (("tool", "pil") if r % 2 == 0 else ("pil", "tool")):
                if side == "tool":
                    t = bench.run_tool(build, files[fmt], "decode", "uint8", "nhwc", seconds,
                                       size=(0, 0))
                    t["ms"] = 1000 / t["images_per_s"]
                    pair["tool"] = t
                else:
                    pair["pil"] = run_pil_convert(paths, seconds, blobs)
            if fmt == "png":
                pair["inflate"] = run_inflate(paths, seconds)
            blobs.clear()
            pair["round"] = r
            pair["mean_kb"] = sum(os.path.getsize(x) for x in paths) / len(paths) / 1024
            out[fmt].append(pair)
            line.append(f"{fmt} {pair['tool']['ms']:.2f}/{pair['pil']['ms']:.2f}")
        log(f"    round {r + 1}/{rounds} (ms per image, stoker/PIL): " + "  ".join(line))
    return out


# ---------------------------------------------------------------------------
# Summaries and the report


def med(v: List[float]) -> float:
    return statistics.median(v)


def summarize_sets(runs: Dict[str, Dict[str, List[Dict[str, Any]]]]) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for s, by in runs.items():
        o: Dict[str, Any] = {}
        for c, rs in by.items():
            for x in rs:
                x["cores"] = x["producer_cores"] + x["consumer_cores"]
                x["images_per_cpu_s"] = x["images_per_s"] / max(x["cores"], 1e-9)
            v = [x["images_per_s"] for x in rs]
            o[c] = dict(median=med(v), min=min(v), max=max(v), n=len(v),
                        producer_cores=med([x["producer_cores"] for x in rs]),
                        consumer_cores=med([x["consumer_cores"] for x in rs]),
                        per_cpu=med([x["images_per_cpu_s"] for x in rs]))
            o[c]["cpu_ms"] = 1000 / o[c]["per_cpu"]
            if c == "stoker":
                o[c]["daemon_ms"] = med([1000 * x["daemon_cores"] / x["images_per_s"]
                                         for x in rs])
                o[c]["worker_ms"] = med([1000 * x["worker_cores"] / x["images_per_s"]
                                         for x in rs])
            if c == "loop":
                o[c]["decode_ms"] = med([x["decode_ms"] for x in rs])
                o[c]["augment_ms"] = med([x["augment_ms"] for x in rs])
                o[c]["errors"] = 0
        dl = by["dl"]
        for c in ("stoker", "loop"):
            paired = [a["images_per_s"] / b["images_per_s"] for a, b in zip(by[c], dl)]
            o[c]["ratio"] = o[c]["median"] / o["dl"]["median"]
            o[c]["ratio_min"], o[c]["ratio_max"] = min(paired), max(paired)
            o[c]["cpu_ratio"] = o[c]["per_cpu"] / o["dl"]["per_cpu"]
        # The ceiling of the ratio with 2 workers: 2 x the loop's images/s
        # (one worker at the loop's speed, nothing else) over DataLoader's.
        o["ceiling"] = WORKERS * o["loop"]["median"] / o["dl"]["median"]
        o["cpu_ceiling"] = o["loop"]["per_cpu"] / o["dl"]["per_cpu"]
        o["efficiency"] = o["stoker"]["median"] / (WORKERS * o["loop"]["median"])
        sess = [x.get("session") or {} for x in by["stoker"]]
        o["session_last"] = sess[-1] if sess else {}
        o["failed"] = sum(int(x.get("samples_failed", 0) or 0) for x in sess)
        out[s] = o
    return out


def summarize_decoders(dec: Dict[str, List[Dict[str, Any]]],
                       sets: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    out = {}
    for fmt, pairs in dec.items():
        mp = sets["photos_tiff"]["stats"]["mean_mp"]  # the same photos in every format
        t = [p["tool"]["ms"] for p in pairs]
        pil = [p["pil"]["ms"] for p in pairs]
        ratio = [p["pil"]["ms"] / p["tool"]["ms"] for p in pairs]
        out[fmt] = dict(mean_mp=mp, mean_kb=pairs[0]["mean_kb"], tool_ms=med(t), tool_min=min(t),
                        tool_max=max(t), tool_ms_mp=med(t) / mp,
                        tool_timer_ms=med([p["tool"]["decode_ms"] for p in pairs]),
                        tool_errors=sum(int(p["tool"].get("errors", 0)) for p in pairs),
                        pil_ms=med(pil), pil_min=min(pil), pil_max=max(pil),
                        pil_ms_mp=med(pil) / mp, ratio=med(ratio), ratio_min=min(ratio),
                        ratio_max=max(ratio), n=len(pairs))
        if all("inflate" in p for p in pairs):
            inf = [p["inflate"]["ms"] for p in pairs]
            out[fmt].update(inflate_ms=med(inf), inflate_min=min(inf), inflate_max=max(inf),
                            filters=pairs[0]["inflate"]["filters"])
    return out


LABELS = {"dl": "DataLoader (2 workers)", "stoker": "stoker.Loader (stokerd, 2 workers)",
          "loop": "stoker loop, 1 thread (no daemon)"}
TITLES = {"cifar_png": "CIFAR-like PNG, 32x32", "photos_png": "PNG photos, ~500x375",
          "photos_webp": "WebP photos (lossy), ~500x375"}
FMT_NAMES = {"png": "PNG (PIL default zlib level 6)", "webp": "WebP lossy (q 80-90)",
             "tiff": "TIFF LZW", "bmp": "BMP (24-bit)", "ppm": "PPM (P6)",
             "jpeg": "JPEG q90 4:2:0 (reference)"}


def lib_versions() -> Dict[str, str]:
    pk = ("libspng0", "libdeflate0", "libwebp7", "libtiff6", "zlib1g", "libjpeg62-turbo")
    return {p: bench._cmd(["dpkg-query", "-W", "-f=${Version}", p]) or "?"  # noqa: SLF001
            for p in pk}


def write_report(path: str, raw: Dict[str, Any]) -> List[str]:
    info, params, sets = raw["info"], raw["params"], raw["sets"]
    S = summarize_sets(raw["runs"])
    D = summarize_decoders(raw["decoders"], sets)
    raw["summary"] = dict(sets=S, decoders=D)
    lines: List[str] = []
    a = lines.append
    a("# Image formats: stoker vs DataLoader on PNG and WebP, and each decoder's cost")
    a("")
    a(f"Generated by `{raw['command']}` (bench/formats.py; do not edit by hand) on "
      f"{raw['date']}, in {raw['elapsed_s'] / 60:.1f} minutes"
      f"{' (--quick: small sets, few rounds; not the real figures)' if raw['quick'] else ''}.")
    a("")
    a(f"- Machine: {info['cpu']}, {info['cores']} cores, {info['memory']}, kernel "
      f"{info['kernel']}, {info['os']}; load average at the start {raw['load_start']}, at the "
      f"end {raw['load_end']} (the machine is shared: other jobs ran too; per-CPU figures "
      "are the steadier ones).")
    libs = raw["libs"]
    a(f"- Versions: stoker {info['stoker']} ({info['stokerd']}), Python {info['python']}, torch "
      f"{info['torch']} ({info['torch_threads']} threads), torchvision {info['torchvision']}, "
      f"PIL {info['PIL']}, numpy {info['numpy']}; Debian libspng {libs['libspng0']}, "
      f"libdeflate {libs.get('libdeflate0', '?')}, libwebp "
      f"{libs['libwebp7']}, libtiff {libs['libtiff6']}, zlib {libs['zlib1g']}, "
      f"libjpeg-turbo {libs['libjpeg62-turbo']} (PIL uses the same zlib, libwebp, libtiff "
      "and libjpeg-turbo; stoker reads PNG with libspng, and inflates the image data of "
      "non-interlaced files of 8 bits or fewer with libdeflate in one call, then undoes the "
      "row filters itself (png_decoder.h's whole-buffer path); BMP and PPM with stb_image).")
    a(f"- Rounds: {params['rounds']} of the throughput sets, {params['decoder_rounds']} of the "
      f"decoders; {params['batches']['photos_png']} timed batches of 64 per photo measurement, "
      f"{params['batches']['cifar_png']} of 256 per CIFAR one, after "
      f"{params['warmup']} warm-up batches and more until a `next()` waits (bench.py's "
      f"`measure()`); the loop {params['tool_s']:g} s, each decoder run "
      f"{params['decoder_s']:g} s.")
    a("")
    a("## Datasets (bench/data/formats/, generated, reused while their stamps match)")
    a("")
    rows = []
    for n in ("cifar_png", "photos_png", "photos_webp", "photos_tiff", "photos_bmp", "photos_ppm",
              "photos_jpeg"):
        st = sets[n]["stats"]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(st["content"].items()))
        rows.append([f"`{n}`", str(st["files"]), f"{st['mean_w']:.0f}x{st['mean_h']:.0f}",
                     f"{st['mean_mp']:.3f}", f"{st['mean_kb']:.1f}", f"{100 * st['of_raw']:.0f}%",
                     f"{st['total_mb']:.1f}", kinds])
    a(bench.md_table(rows, ["set", "files", "mean px", "mean MP", "mean KB", "of raw RGB",
                            "MB", "content"]))
    a("")
    a("Content: bench/make_data.py's generators (`textured_photo`: gradients, blobs, "
      "multi-scale noise, gratings, sensor noise; `textured`: fur, fabric, text, foliage). "
      "The photos are 10 classes of ~500x375 (1 in 4 portrait), half scenes; the CIFAR-like "
      "files are the same content drawn at 96-128 px and downscaled to 32x32 (LANCZOS), "
      "saved by PIL's PNG defaults. The content is noisy at the pixel level, so the PNGs "
      "are close to the raw size (real photo PNGs often compress better, to 50-70%, and "
      "inflate a little faster per pixel). The TIFF/BMP/PPM/JPEG sets are the first "
      f"{sets['photos_tiff']['stats']['files']} photos; PNG's and WebP's decoder rows use "
      "those same photos.")
    a("")
    a("## Throughput: train pipeline, 2 workers on both sides")
    a("")
    a("Both sides are given the same torchvision `Compose` object (`ImageFolder(transform=)` "
      "and `stoker.Loader(transform=)`). Photos: `RandomResizedCrop(224)`, "
      "`RandomHorizontalFlip()`, `ToTensor()`, `Normalize(ImageNet)`, batch 64. CIFAR: "
      "`RandomCrop(32, padding=4)`, `RandomHorizontalFlip()`, `ToTensor()`, `Normalize`, "
      "batch 256 (stoker takes the padding: `RandomCrop` with `padding=[4]`, constant fill). "
      "Float32 NCHW out on both sides; the consumer reads one element of each batch.")
    a("")
    rows = []
    for s in SETS:
        for c in ("dl", "stoker", "loop"):
            x = S[s][c]
            cpu = (f"{x['producer_cores']:.2f} / {x['consumer_cores']:.2f}" if c != "loop" else
                   f"{x['producer_cores']:.2f} (1 thr.)")
            rows.append([TITLES[s], LABELS[c], bench.fmt_rate(x), bench.fmt_ratio(x), cpu,
                         f"{x['per_cpu']:.0f}", f"{x['cpu_ms']:.2f}",
                         f"{x['cpu_ratio']:.2f}" if "cpu_ratio" in x else "1.00"])
    a(bench.md_table(rows, ["set", "config", "images/s median [min-max]",
                            "ratio vs DataLoader [paired min-max]",
                            "CPU cores: producers / consumer", "images per CPU-s",
                            "CPU-ms per image", "per-CPU ratio"]))
    a("")
    a("CPU: DataLoader's two workers, or stokerd and its two workers, over the timed "
      "wall time; the consumer is this Python process. `images per CPU-s` counts producers "
      "and consumer together; `per-CPU ratio` is stoker's over DataLoader's (what the "
      "wall-clock ratio would be if both sides got the same cores to themselves). The loop "
      "row is `stoker-image-tool bench --threads 1` on the keywords the Loader sends "
      "(files in memory, no daemon, no shared memory): its ratio column is one thread "
      "against DataLoader's two workers.")
    a("")
    rows = []
    for s in SETS:
        lp = S[s]["loop"]
        rows.append([TITLES[s], f"{lp['decode_ms']:.3f}", f"{lp['augment_ms']:.3f}",
                     f"{100 * lp['decode_ms'] / max(lp['decode_ms'] + lp['augment_ms'], 1e-9):.0f}%",
                     f"{lp['cpu_ms']:.3f}", f"{S[s]['stoker']['cpu_ms']:.3f}",
                     f"{S[s]['stoker']['daemon_ms']:.3f} / {S[s]['stoker']['worker_ms']:.3f}",
                     f"{S[s]['dl']['cpu_ms']:.3f}", f"{S[s]['ceiling']:.2f}",
                     f"{S[s]['cpu_ceiling']:.2f}", f"{100 * S[s]['efficiency']:.0f}%"])
    a("Where the time goes per image (medians over the rounds):")
    a("")
    a(bench.md_table(rows, ["set", "loop decode ms", "loop augment ms", "decode share",
                            "loop CPU-ms", "stoker CPU-ms (daemon+workers+consumer)",
                            "of which stokerd / its workers",
                            "DataLoader CPU-ms", "ceiling: 2 x loop / DataLoader",
                            "per-CPU ceiling: DataLoader CPU-ms / loop CPU-ms",
                            "daemon / (2 x loop)"]))
    a("")
    a("## Decoders: cost per megapixel, one thread, files in memory")
    a("")
    a("stoker: `stoker-image-tool bench --threads 1 --pipeline decode --size 0 0` (the whole "
      "image, uint8 RGB; the tool's wall time per image, its own decode timer beside it). "
      "PIL: `Image.open(BytesIO(b)).convert(\"RGB\")` in this process, one thread (what "
      "ImageFolder's loader does). The same files for both, run alternately, "
      f"{params['decoder_rounds']} rounds.")
    a("")
    rows = []
    for fmt in DECODER_FORMATS:
        d = D[fmt]
        rows.append([FMT_NAMES[fmt], f"{d['mean_mp']:.3f}", f"{d['mean_kb']:.0f}",
                     f"{d['tool_ms']:.2f} [{d['tool_min']:.2f}-{d['tool_max']:.2f}]",
                     f"{d['tool_timer_ms']:.2f}", f"{d['tool_ms_mp']:.1f}",
                     f"{d['pil_ms']:.2f} [{d['pil_min']:.2f}-{d['pil_max']:.2f}]",
                     f"{d['pil_ms_mp']:.1f}",
                     f"{d['ratio']:.2f} [{d['ratio_min']:.2f}-{d['ratio_max']:.2f}]"])
    a(bench.md_table(rows, ["format", "mean MP", "mean KB", "stoker ms/image [min-max]",
                            "stoker decode timer ms", "stoker ms/MP",
                            "PIL ms/image [min-max]", "PIL ms/MP",
                            "PIL / stoker [paired min-max]"]))
    pd = D["png"]
    if "inflate_ms" in pd:
        a("")
        a(f"PNG's inflate alone with zlib (`zlib.decompress` of the files' IDAT streams, the "
          f"zlib PIL inflates with, one thread): {pd['inflate_ms']:.2f} ms per image "
          f"[{pd['inflate_min']:.2f}-{pd['inflate_max']:.2f}], "
          f"{100 * pd['inflate_ms'] / pd['pil_ms']:.0f}% of PIL's whole decode (stoker's "
          f"whole decode, libdeflate's inflate included, takes {pd['tool_ms']:.2f} ms); the "
          "rest of PIL's is mostly undoing the row filters, as PIL wrote them: " + ", ".join(
              f"{k} {100 * v:.0f}%" for k, v in pd["filters"].items() if v > 0)
          + " of the rows.")
    a("")
    a("## Target")
    a("")
    png = S["photos_png"]
    ok = png["stoker"]["ratio"] >= TARGET
    a(f"- **stoker at least {TARGET:g}x DataLoader on PNG photos** (train, 2 workers): "
      f"{png['stoker']['ratio']:.2f}x [{png['stoker']['ratio_min']:.2f}-"
      f"{png['stoker']['ratio_max']:.2f}] wall clock, {png['stoker']['cpu_ratio']:.2f}x per "
      f"CPU: {bench.verdict(ok)}"
      + ("." if ok else f", by {100 * (1 - png['stoker']['ratio'] / TARGET):.0f}% "
         f"(wall clock; {100 * (1 - min(png['stoker']['cpu_ratio'], TARGET) / TARGET):.0f}% "
         "per CPU)."))
    lines_why = why(S, D, sets)
    for w in lines_why:
        a(f"- {w}")
    for s in SETS:
        if S[s]["failed"]:
            a(f"- **{S[s]['failed']} samples failed** in stoker's sessions on `{s}` "
              "(see bench/out/formats-stokerd.log).")
    for fmt, d in D.items():
        if d["tool_errors"]:
            a(f"- **stoker-image-tool reported {d['tool_errors']} decode errors** on {fmt}.")
    a("")
    a("Other sets: " + "; ".join(
        f"{TITLES[s]}: stoker {S[s]['stoker']['ratio']:.2f}x wall clock "
        f"[{S[s]['stoker']['ratio_min']:.2f}-{S[s]['stoker']['ratio_max']:.2f}], "
        f"{S[s]['stoker']['cpu_ratio']:.2f}x per CPU" for s in SETS if s != "photos_png") + ".")
    a("")
    a("Raw numbers: `bench/out/formats.json`; stokerd's log: `bench/out/formats-stokerd.log`. "
      "Nothing here is asserted by a test.")
    sess = {s: S[s]["session_last"] for s in SETS}
    fm = {s: v.get("formats") for s, v in sess.items() if v.get("formats")}
    if fm:
        a("")
        a("The daemon's per-format session status (last round): " + "; ".join(
            f"`{s}`: `{json.dumps(v)}`" for s, v in fm.items()))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return lines


def why(S: Dict[str, Any], D: Dict[str, Any], sets: Dict[str, Any]) -> List[str]:
    """Where the time goes on the PNG photos: what bounds the ratio."""
    png = S["photos_png"]
    mp = sets["photos_png"]["stats"]["mean_mp"]
    dl_ms = png["dl"]["cpu_ms"]
    stk = png["stoker"]
    stk_ms = stk["cpu_ms"]
    lp = png["loop"]
    pil_dec = D["png"]["pil_ms_mp"] * mp  # PIL's full decode of a photo of the set's size
    stk_dec = D["png"]["tool_ms_mp"] * mp
    over = stk_ms - lp["cpu_ms"]
    over_s = (f"{over:.2f} CPU-ms per image" if abs(over) > 0.05 * lp["cpu_ms"] else
              f"about nil ({over:+.2f} CPU-ms per image, within the noise)")
    # What 3x would take: stoker's CPU per image at a third of DataLoader's,
    # everything but the decode as it is.
    rest = lp["augment_ms"] + stk["daemon_ms"]  # stoker's per-image CPU but the decode
    need = dl_ms / TARGET - rest
    out = [
        f"Per image, DataLoader spends {dl_ms:.2f} CPU-ms (its workers and the consumer), of "
        f"which PIL's PNG decode alone is about {pil_dec:.2f} ms ({D['png']['pil_ms_mp']:.1f} "
        f"ms/MP x {mp:.3f} MP, {100 * pil_dec / dl_ms:.0f}%); the rest, "
        f"{dl_ms - pil_dec:.2f} ms, is the crop, resize, ToTensor, Normalize and collation.",
        f"stoker spends {stk_ms:.2f} CPU-ms per image (stokerd {stk['daemon_ms']:.2f}, its "
        f"workers {stk['worker_ms']:.2f}, the consumer the rest); its loop, one thread, "
        f"{lp['cpu_ms']:.2f}: decode {lp['decode_ms']:.2f} ms "
        f"({100 * lp['decode_ms'] / max(lp['decode_ms'] + lp['augment_ms'], 1e-9):.0f}% of "
        f"the loop's timers; the train crop's rows below its last one are inflated but not "
        f"unfiltered, so this is less than the whole decode's {stk_dec:.2f} ms), augment "
        f"{lp['augment_ms']:.2f} ms. "
        f"The daemon's cost over the loop: {over_s}. stoker already removes most of "
        f"DataLoader's non-decode cost ({dl_ms - pil_dec:.2f} ms -> {rest:.2f} ms: the "
        "loop's augment timer plus stokerd's own CPU).",
        f"stoker's whole PNG decode is {D['png']['ratio']:.2f}x PIL's speed: libdeflate "
        "inflates the image data in one call where PIL's zlib streams it"
        + (f" (zlib's inflate alone is {100 * D['png']['inflate_ms'] / D['png']['pil_ms']:.0f}% "
           "of PIL's decode)" if "inflate_ms" in D["png"] else "")
        + ", and stoker undoes the row filters with SSE2 (Paeth, Sub and Average a pixel at a "
        "time) where PIL's are scalar C. Decoding is still most of stoker's time: a daemon that "
        "cost nothing beyond its decode would reach at most "
        f"{dl_ms / max(lp['decode_ms'], 1e-9):.2f}x per CPU (DataLoader's CPU-ms over the "
        f"loop's decode ms); the loop as it is bounds the ratio at {png['cpu_ceiling']:.2f}x "
        f"per CPU. (2 x its images/s over DataLoader's, {png['ceiling']:.2f}x, assumes stoker "
        f"gets 2 whole cores where DataLoader's workers got {png['dl']['producer_cores']:.2f} "
        "on this shared machine: the per-CPU figure is the one to expect with the cores "
        "to themselves.)",
    ]
    if stk["cpu_ratio"] < TARGET:
        out.append(
            f"{TARGET:g}x per CPU would need stoker's CPU per image at {dl_ms / TARGET:.2f} ms, "
            f"i.e. with the rest as it is ({rest:.2f} ms), the crop's decode at "
            f"{max(need, 0):.2f} ms instead of {lp['decode_ms']:.2f} "
            + (f"({lp['decode_ms'] / need:.1f}x faster)." if need > 0 else
               "(impossible: the rest alone exceeds it)."))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (1-2 minutes)")
    ap.add_argument("--rounds", type=int, default=None, help="throughput rounds (default 5)")
    ap.add_argument("--decoder-rounds", type=int, default=None, help="default 3")
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", default=HERE, help="where FORMATS.md goes")
    ap.add_argument("--jobs", type=int, default=0, help="dataset generation processes")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite FORMATS.md from bench/out/formats.json")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    out_dir = os.path.join(HERE, "out")
    os.makedirs(out_dir, exist_ok=True)
    raw_path = os.path.join(out_dir, "formats.json")
    md_path = os.path.join(args.out, "FORMATS.md")
    if args.report_only:
        with open(raw_path) as f:
            raw = json.load(f)
        print("\n".join(write_report(md_path, raw)))
        return 0

    t_start = time.monotonic()
    q = args.quick
    params = dict(rounds=args.rounds or (1 if q else 5),
                  decoder_rounds=args.decoder_rounds or (1 if q else 3),
                  warmup=WORKERS,
                  # CIFAR: enough batches that the timed window is about a
                  # second on stoker's side (its ring holds 4 batches ready).
                  batches={"cifar_png": 30 if q else 120, "photos_png": 4 if q else 20,
                           "photos_webp": 4 if q else 20},
                  tool_s=1.0 if q else 3.0, decoder_s=0.5 if q else 2.0)
    data_root = os.path.join(os.path.abspath(args.data), "formats")
    base = os.path.join(data_root, "quick") if q else data_root
    sets = make_sets(base, q, args.jobs or os.cpu_count() or 1)
    for n, s in sets.items():
        st = s["stats"]
        log(f"    {n}: {st['files']} files, {st['mean_w']:.0f}x{st['mean_h']:.0f} mean, "
            f"{st['mean_kb']:.1f} KB mean")

    import torch  # noqa: F401
    import stoker  # noqa: F401
    info = bench.machine_info(build)
    load_start = bench.loadavg()
    log(f"==> {info['cpu']}, {info['cores']} cores, load {load_start}; stoker {info['stoker']}, "
        f"torch {info['torch']}, torchvision {info['torchvision']}, PIL {info['PIL']}")
    lists_dir = os.path.join(out_dir, "formats-lists")
    daemon_log = os.path.join(out_dir, "formats-stokerd.log")
    if os.path.exists(daemon_log):
        os.unlink(daemon_log)
    daemon = bench.Daemon(build, data_root, WORKERS, daemon_log)
    log(f"==> throughput: {params['rounds']} rounds x {len(SETS)} sets x (DataLoader, stoker, "
        "loop)")
    try:
        runs = throughput(sets, data_root, daemon, build, params["rounds"], params["warmup"],
                          params["batches"], params["tool_s"], lists_dir)
        st = daemon.status()
        daemon_end = dict(samples_failed_total=st.get("samples_failed_total"),
                          worker_restarts_total=st.get("worker_restarts_total"))
    finally:
        daemon.stop()
    if any(int(v or 0) for v in daemon_end.values()):
        log(f"!! the daemon reported failures or restarts: {daemon_end}")
    dec = decoders(sets, build, params["decoder_rounds"], params["decoder_s"], lists_dir)
    cmd = "/usr/bin/python3 bench/formats.py" + "".join(
        f" {x}" for x in sys.argv[1:])
    raw = dict(params=params, info=info, libs=lib_versions(), sets=sets, runs=runs,
               decoders=dec, daemon_end=daemon_end, quick=q, command=cmd,
               date=time.strftime("%Y-%m-%d %H:%M %Z"), load_start=load_start,
               load_end=bench.loadavg(), elapsed_s=time.monotonic() - t_start)
    lines = write_report(md_path, raw)
    with open(raw_path, "w") as f:
        json.dump(raw, f, indent=1)
    print("\n".join(lines))
    png = raw["summary"]["sets"]["photos_png"]["stoker"]
    log(f"PNG photos train images/s ratio vs DataLoader: {png['ratio']:.2f} "
        f"(per CPU {png['cpu_ratio']:.2f}; target {TARGET:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
