"""Measurements beside the daemon's loop, for bench.py: stoker-image-tool's
single-process loop (run_tool) and op costs (run_opcost), PIL's decode alone
(run_pil), perf profiles of the loop (run_perf), the restart-marker check,
the transcode cache's first epochs, and the file lists they read. bench.py
re-exports these names (``bench.run_tool`` in formats.py)."""
from __future__ import annotations

import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from harness import Daemon, StokerSource, _cmd, log, touch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def run_tool(build: str, files: str, pipeline: str, dtype: str, layout: str,
             seconds: float, threads: int = 1,
             ring_mb: int = 0, keywords: Optional[Dict[str, Any]] = None,
             extra: Optional[List[str]] = None, size: Tuple[int, int] = (224, 224),
             prefix: Optional[List[str]] = None) -> Dict[str, float]:
    """stoker-image-tool bench, no daemon; its cores are the CPU it reports
    for its loop (loading the files into memory left out). `ring_mb`:
    each thread writes round a shared mapping of this size, as a worker
    writes into a ring (0: into one buffer that stays in cache). `keywords`:
    the whole pipeline as keywords (a recipe's), instead of the preset
    `pipeline` at 224x224 in `dtype`, `layout`."""
    spec = (["--keywords", json.dumps(keywords)] if keywords is not None else
            ["--pipeline", pipeline, "--size", str(size[0]), str(size[1]), "--dtype", dtype,
             "--layout", layout])
    cmd = [*(prefix or []), os.path.join(build, "bin", "stoker-image-tool"), "bench",
           "--files", files, *spec, "--threads", str(threads), "--seconds", str(seconds),
           "--ring-mb", str(ring_mb), *(extra or [])]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 120)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr}")
    d = json.loads(r.stdout.strip().splitlines()[-1])
    if d.get("errors"):
        log(f"!! stoker-image-tool reported {d['errors']} errors on {files}")
    # Its loop's CPU time over its timed seconds (every file at least once,
    # then until `seconds`).
    cpu = float(d["cpu_s"])
    return dict(images_per_s=float(d["images_per_s"]), images=int(d["images"]),
                seconds=float(d["seconds"]), cpu_s=cpu,
                producer_cores=min(float(threads), cpu / max(float(d["seconds"]), 1e-9)),
                consumer_cores=0.0,
                decode_ms=float(d.get("decode_ms", 0)), augment_ms=float(d.get("augment_ms", 0)),
                paths=d.get("paths") or {})


def first_jpeg(root: str) -> str:
    """The first .jpg/.jpeg under `root`, in sorted walk order."""
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name.lower().endswith((".jpg", ".jpeg")):
                return os.path.join(d, name)
    raise RuntimeError(f"no JPEG under {root}")


_PIL_FILES: Dict[str, bytes] = {}  # path -> bytes: one set held at a time


def jpeg_paths(root: str) -> List[str]:
    """The JPEGs under `root` (or listed in the file `root`, one path a line),
    in the image tool's order (sorted full paths)."""
    if os.path.isfile(root):
        with open(root) as f:
            return [line.split()[0] for line in f if line.strip()]
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
                  if f.lower().endswith((".jpg", ".jpeg")))


def rotated_list(root: str, r: int, rounds: int, out_dir: str) -> str:
    """A list file of `root`'s JPEGs in the tool's order, rotated to start
    r/rounds of the way in: the loops (stoker's and PIL's) start at the
    first file of each run, and a run of a few seconds on large photos
    covers only part of a set, so each round starts elsewhere, both loops of
    a round on the same files."""
    paths = jpeg_paths(root)
    k = r * len(paths) // max(rounds, 1)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{os.path.basename(root.rstrip('/'))}-r{r}.txt")
    with open(path, "w") as f:
        f.write("".join(p + "\n" for p in paths[k:] + paths[:k]))
    return path


def time_each(blobs: List[bytes], seconds: float, fn: Callable[[bytes], Any]
              ) -> Tuple[int, float, float]:
    """`fn` on `blobs` in turn from the first, in this thread, until
    `seconds` have passed: (calls, wall seconds, this process's CPU seconds)."""
    gc.collect()
    n, c0, t0 = 0, time.process_time(), time.perf_counter()
    while True:
        fn(blobs[n % len(blobs)])
        n += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            break
    return n, dt, time.process_time() - c0


def run_pil(files: str, seconds: float) -> Dict[str, float]:
    """PIL's full decode (`Image.open(BytesIO).load()`, what ImageFolder's
    loader does before `convert`) of the JPEGs of `files` (a folder or a list
    file, in the image tool's order), preloaded in memory, in this thread for
    `seconds`, from the first file on, as the tool does."""
    import io
    from PIL import Image
    paths = jpeg_paths(files)
    if any(p not in _PIL_FILES for p in paths):
        _PIL_FILES.clear()
        for p in paths:
            with open(p, "rb") as f:
                _PIL_FILES[p] = f.read()

    def load(blob: bytes) -> None:
        with Image.open(io.BytesIO(blob)) as im:
            im.load()

    n, dt, cpu = time_each([_PIL_FILES[p] for p in paths], seconds, load)
    return dict(images_per_s=n / dt, images=n, seconds=dt, producer_cores=min(1.0, cpu / dt),
                consumer_cores=0.0, decode_ms=1000 * dt / n, augment_ms=0.0)


def transcode_supported(build: str) -> bool:
    """Whether this stokerd has --transcode-cache (issue 17)."""
    return "--transcode-cache" in _cmd([os.path.join(build, "bin", "stokerd"), "--help"])


def status_fields(st: Dict[str, Any], words=("transcode", "decode_path", "dct", "path")) -> Dict:
    """The status fields whose names say transcode cache or decode path."""
    return {k: v for k, v in st.items() if any(w in k for w in words)}


def epoch_time(daemon: Daemon, rel: str, name: str) -> Dict[str, Any]:
    """One epoch of `rel` through a fresh eval session (batch 16, no drop):
    wall seconds, images/s, producer cores, the session's status after."""
    src = StokerSource(daemon, rel, "eval", "float32", "nchw", name, batch_size=16,
                       drop_last=False)
    try:
        p0, t0, n = src.producer_cpu(), time.perf_counter(), 0
        for b in src.loader:
            n += touch(b)
        dt = time.perf_counter() - t0
        res = dict(images=n, seconds=dt, images_per_s=n / dt,
                   producer_cores=(src.producer_cpu() - p0) / dt,
                   session=src.session_status())
    finally:
        src.close()
    return res


def first_epochs(daemon: Daemon, daemon_tc: Daemon, rel: str, name: str) -> Dict[str, Any]:
    """What the transcode cache costs and gives by epoch: one epoch on
    `daemon` (no cache; first, so that it pays for the page cache if anyone
    does), then the first epoch on `daemon_tc` (cold cache: it writes the
    copies) and a second one (warm), eval pipeline. Also the cache's fields."""
    res = {}
    for key, d in (("no_cache", daemon), ("tc_epoch1", daemon_tc), ("tc_epoch2", daemon_tc)):
        res[key] = epoch_time(d, rel, f"bench-epoch-{name}-{key}")
        log(f"    {name} epoch, {key}: {res[key]['seconds']:.1f} s "
            f"({res[key]['images_per_s']:.1f} images/s)")
    res["tc_status"] = status_fields(daemon_tc.status())
    return res


def mix_runs(parts: List[Tuple[Dict[str, List[Dict[str, Any]]], int]]) -> Dict[str, Any]:
    """The runs of a set made of `parts` ([(runs, files)]), computed from the
    parts' runs of the same round: per image, the times (and the CPU) add, so
    the mix makes 1 / sum(share_i / rate_i) images/s and its cores are the
    parts' cores weighted by their share of the time."""
    total = sum(n for _, n in parts)
    keys = [k for k in parts[0][0] if not k.startswith("_") and all(k in p for p, _ in parts)]
    out: Dict[str, Any] = {}
    for k in keys:
        runs = []
        for r in range(min(len(p[k]) for p, _ in parts)):
            xs = [(p[k][r], n / total) for p, n in parts]
            t = sum(f / x["images_per_s"] for x, f in xs)  # seconds per image
            w = [(x, f / x["images_per_s"] / t) for x, f in xs]  # share of the time
            runs.append(dict(
                images_per_s=1 / t, round=r, derived=True,
                producer_cores=sum(x["producer_cores"] * sh for x, sh in w),
                consumer_cores=sum(x["consumer_cores"] * sh for x, sh in w),
                decode_ms=sum(x.get("decode_ms", 0.0) * f for x, f in xs),
                augment_ms=sum(x.get("augment_ms", 0.0) * f for x, f in xs)))
        out[k] = runs
    out["_load"] = [dict(start=parts[0][0]["_load"][0]["start"],
                         end=parts[-1][0]["_load"][0]["end"])]
    return out


_LIBJPEG_MODULES = [  # exported symbol that follows a module's static functions -> module
    ("jinit_d_coef_controller", "jdcoefct.c (coefficient buffer, block smoothing)"),
    ("jinit_color_deconverter", "jdcolor.c (C color conversion)"),
    ("jinit_inverse_dct", "jddctmgr.c"),
    ("jinit_huff_decoder", "jdhuff.c (sequential Huffman decoding)"),
    ("jpeg_huff_decode", "jdhuff.c (sequential Huffman decoding)"),
    ("jpeg_fill_bit_buffer", "jdhuff.c (sequential Huffman decoding)"),
    ("jpeg_make_d_derived_tbl", "jdhuff.c (sequential Huffman decoding)"),
    ("jinit_phuff_decoder", "jdphuff.c (progressive Huffman decoding)"),
    ("jinit_merged_upsampler", "jdmerge.c (merged upsampling + color)"),
    ("jinit_upsampler", "jdsample.c (upsampling)"),
    ("jinit_d_post_controller", "jdpostct.c"),
    ("jinit_d_main_controller", "jdmainct.c"),
    ("jinit_input_controller", "jdinput.c"),
    ("jpeg_idct_", "jidct*.c (C inverse DCTs, the scaled ones)"),
    ("jzero_far", "jutils.c (zeroing coefficient blocks)"),
    ("jcopy_", "jutils.c"),
    ("jinit_memory_mgr", "jmemmgr.c"),
]


def libjpeg_symbols(path: str) -> List[Tuple[int, str]]:
    """(address, name) of the exported functions of libjpeg, sorted."""
    out = []
    for line in _cmd(["nm", "-D", "--defined-only", path]).splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "Tt":
            out.append((int(f[0], 16), f[2].split("@")[0]))
    return sorted(out)


def libjpeg_module(addr: int, syms: List[Tuple[int, str]]) -> str:
    """The libjpeg source module of a stripped address: libjpeg's static
    functions come before the module's exported jinit_* / jpeg_* function
    (source order), so the next exported symbol names the module. Past the
    last one lie the SIMD kernels (hidden symbols)."""
    import bisect
    i = bisect.bisect_right([a for a, _ in syms], addr)
    if i > 0 and syms[i - 1][0] == addr:
        i -= 1
    if i >= len(syms):
        return "SIMD kernels (jsimd_*: IDCT 8x8, color conversion, upsampling)"
    name = syms[i][1]
    for prefix, module in _LIBJPEG_MODULES:
        if name.startswith(prefix):
            return module
    return f"before {name}"


def run_perf(build: str, files: str, pipeline: str, seconds: float,
             data_path: str) -> Dict[str, Any]:
    """A perf profile (user and kernel samples at 999 Hz) of
    `stoker-image-tool bench --threads 1` on `files`: shares by function,
    libjpeg's stripped addresses grouped by source module."""
    if not shutil.which("perf"):
        return dict(error="perf is not installed")
    try:
        tool = run_tool(build, files, pipeline, "float32", "nchw", seconds,
                        prefix=["perf", "record", "-q", "-F", "999", "-o", data_path, "--"])
    except (RuntimeError, subprocess.SubprocessError) as e:
        return dict(error=f"perf record failed: {e}")
    r = subprocess.run(["perf", "report", "-i", data_path, "--stdio", "--sort", "dso,sym",
                        "-t", "\t"], capture_output=True, text=True, timeout=120)
    lib = next((p for p in ("/usr/lib/x86_64-linux-gnu/libjpeg.so.62.3.0",
                            "/usr/lib/x86_64-linux-gnu/libjpeg.so.62") if os.path.exists(p)), "")
    syms = libjpeg_symbols(lib) if lib else []
    groups: Dict[str, float] = {}
    top: List[Tuple[float, str]] = []
    for line in r.stdout.splitlines():
        if line.startswith("#") or "\t" not in line:
            continue
        f = [x.strip() for x in line.split("\t")]
        if len(f) < 3 or not f[0].endswith("%"):
            continue
        pct, dso, sym = float(f[0][:-1]), f[1], f[2].split("] ", 1)[-1]
        if dso.startswith("libjpeg") and sym in ("jpeg_fill_bit_buffer", "jpeg_huff_decode"):
            what = "libjpeg jdhuff.c's bit reader (both Huffman decoders)"
        elif dso.startswith("libjpeg"):
            what = (f"libjpeg {libjpeg_module(int(sym, 16), syms)}" if sym.startswith("0x")
                    else f"libjpeg {sym}")
        elif dso.startswith("[kernel"):
            what = f"kernel {sym}"
        elif dso.startswith("stoker-image"):
            short = re.sub(r"\(anonymous namespace\)::|stoker::image::", "", sym)
            what = f"stoker {re.sub(r'<.*', '', short)}"
        else:
            what = f"{dso} {sym}"
        groups[what] = groups.get(what, 0.0) + pct
    top = sorted(((v, k) for k, v in groups.items()), reverse=True)
    return dict(pipeline=pipeline, files=os.path.relpath(files, REPO), seconds=seconds,
                images_per_s=tool["images_per_s"], decode_ms=tool["decode_ms"],
                augment_ms=tool["augment_ms"], top=[dict(share=v, what=k) for v, k in top[:14]],
                libjpeg=sum(v for k, v in groups.items() if k.startswith("libjpeg")),
                huffman=sum(v for k, v in groups.items() if "Huffman" in k),
                stoker=sum(v for k, v in groups.items() if k.startswith("stoker")),
                kernel=sum(v for k, v in groups.items() if k.startswith("kernel")))


def restart_check(build: str, restart: Dict[str, Any], seconds: float,
                  repeats: int) -> Dict[str, Any]:
    """The same baseline files without restart markers, with one per MCU row
    and with one every 4 MCUs: the loop's decode time for a full decode and
    for a train crop, both --exact (no DCT scaling: what skipping rows and
    columns saves alone), `repeats` interleaved runs each, medians in ms per
    image; and how many crops took the restart_window path."""
    cases = [("full", "decode", (0, 0)), ("crop", "train", (224, 224))]
    raw: Dict[str, List[float]] = {}
    seeked: Dict[str, int] = {}
    for _ in range(repeats):
        for sub in [s for s in ("plain", "rst", "rst4b") if s in restart]:
            for name, pipeline, size in cases:
                # The decode pipeline refuses images over max_decode_pixels
                # (16 MP by default); the set has photos up to 20 MP.
                r = run_tool(build, restart[sub], pipeline, "uint8", "nhwc", seconds,
                             extra=["--exact", "--keywords", '{"max_decode_pixels": 67108864}'],
                             size=size)
                raw.setdefault(f"{sub}_{name}", []).append(r["decode_ms"])
                if name == "crop":
                    w = r["paths"].get("restart_window", {}).get("images", 0)
                    seeked[sub] = seeked.get(sub, 0) + w
                    seeked[f"{sub}_of"] = seeked.get(f"{sub}_of", 0) + r["images"]
    out: Dict[str, Any] = {k: statistics.median(v) for k, v in raw.items()}
    out["seeked"] = seeked
    out["files"] = restart["stats"]["files"]
    out["mean_mp"] = restart["stats"]["mean_mp"]
    return out


def run_opcost(build: str, path: str, seconds: float) -> Dict[str, Any]:
    """`stoker-image-tool opcost` on one file: each op's augment cost in µs
    per 224x224 image (median over interleaved runs of the op's steps less
    the baseline resize; decode excluded), `seconds` per op."""
    cmd = [os.path.join(build, "bin", "stoker-image-tool"), "opcost", "--input", path,
           "--size", "224", "--seconds", str(seconds)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 40 + 120)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr}")
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    ops = [d for d in lines if "op" in d]
    summary = next((d for d in lines if d.get("summary")), {})
    return dict(file=os.path.relpath(path, REPO), seconds_per_op=seconds, ops=ops,
                summary=summary)


