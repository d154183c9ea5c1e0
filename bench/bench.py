#!/usr/bin/python3
"""stoker vs torchvision DataLoader: throughput, consumer overhead, memory.

    /usr/bin/python3 bench/bench.py [--quick] [--rounds-small 5] [--rounds-large 3]
        [--build build] [--data bench/data] [--out bench]

Normally started by bench/run.sh (which installs and builds first). See
bench/README.md for what each configuration measures and how to read the
output. Everything runs in this process tree: the stoker daemon and the
DataLoader workers are our children; the configurations of one dataset run
interleaved, round-robin (a rotated order each round), so that drift on a
noisy machine hits every side alike. Nothing here asserts a timing.

On the ImageNet-like set the configurations include torchvision's training
recipes (v2: TrivialAugmentWide + RandomErasing; rand-m9: RandAugment), one
Compose given to both sides, and stoker's loop with and without the recipes'
policy ops (their CPU cost per image); for each recipe a line
``recipe NAME images/s ratio vs DataLoader: X.XX ...`` comes before the last.

The large photos are measured as two sets, their baseline files and their
progressive files (the whole set's rows are computed from the two), with PIL's
decode alone beside stoker's loop and, where stokerd has --transcode-cache, a
second daemon with a fresh cache (its rows from the second epoch on; the first
epoch's cost timed apart); then perf profiles of the loop and a check of what
skipping rows and columns saves with and without restart markers (issue 17).

The last line printed is ``train images/s ratio vs DataLoader: X.XX``
(ImageNet-like set, train pipeline, float32 NCHW on both sides).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from daemon_launcher import DaemonProcess, DaemonStartError  # noqa: E402

import make_data  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BATCH = 64
WORKERS = 2
RING_SLOTS = 4  # stoker's prefetch depth, in batches
DL_PREFETCH = 2  # DataLoader's prefetch_factor: 2 x WORKERS batches in flight
CLK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------
# /proc helpers


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (its threads included), in seconds; 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, IndexError, ValueError):
        return 0.0


def proc_kb(pid: int, path: str, key: str) -> int:
    """The `key:` line of /proc/PID/<path>, in kB (0 if unreadable)."""
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def rss_kb(pid: int) -> int:
    return proc_kb(pid, "status", "VmRSS")


def pss_kb(pid: int) -> int:
    return proc_kb(pid, "smaps_rollup", "Pss")


# ---------------------------------------------------------------------------
# The daemon


class Daemon(DaemonProcess):
    """stokerd started as our child (daemon_launcher.py, the tests' launcher
    too), in a temp dir; stop() sends SIGTERM and removes the dir. `extra`:
    flags as written (a --transcode-cache there replaces the default, off)."""

    def __init__(self, build: str, data_root: str, workers: int, log_path: str,
                 extra: Optional[List[str]] = None) -> None:
        import stoker  # before the daemon starts: an ImportError must not orphan it
        super().__init__(build, data_root, tempfile.mkdtemp(prefix="stkbench", dir="/tmp"),
                         settings=dict(workers=workers, log_level="info",
                                       decode_calibration=True),
                         extra_args=extra or [], log_path=log_path)
        self.client = stoker.Client(self.socket)
        try:
            self.start()
        except DaemonStartError:  # a RuntimeError, with the log's tail
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise

    def status(self) -> Dict[str, Any]:
        return self.client.status()

    def worker_pids(self) -> List[int]:
        return [int(w["pid"]) for w in self.status()["workers"]]

    def cpu(self) -> Tuple[float, float]:
        """(daemon process CPU s, workers' CPU s)."""
        return cpu_seconds(self.pid), sum(cpu_seconds(p) for p in self.worker_pids())

    def quiesce(self, timeout_s: float = 60) -> None:
        """Waits until no worker has a sample in flight (after a session closed)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(int(w.get("in_flight", 0)) == 0 for w in self.status()["workers"]):
                return
            time.sleep(0.02)
        log("!! stokerd workers still busy 60 s after their session closed")

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"stokerd died (exit {self.proc.returncode}); see {self.log_path}")

    def stop(self) -> None:
        rc = super().stop(timeout_s=30)
        if rc is None:
            log(f"!! stokerd {self.pid} ignored SIGTERM for 30 s: killed it")
        elif rc != 0:
            log(f"!! stokerd exited with {rc}; see {self.log_path}")
        shutil.rmtree(self.workdir, ignore_errors=True)


# ---------------------------------------------------------------------------
# Batch sources. Each measurement makes a fresh one and closes it after, so
# that no idle source prefetches (steals CPU) while another one is measured.


def touch(batch) -> int:
    """What the consumer does with a batch, on both sides: reads the last
    image element and the last label (one page each), returns the image count."""
    images, labels = batch
    images[(-1,) * images.dim()].item()
    labels[-1].item()
    return int(images.shape[0])


class CycleSampler:
    """Indices of many epochs back to back (shuffled or in order), so that the
    DataLoader, like stoker's daemon, prefetches across epoch boundaries."""

    def __init__(self, n: int, shuffle: bool, epochs: int = 100000, seed: int = 0) -> None:
        self.n, self.shuffle, self.epochs, self.seed = n, shuffle, epochs, seed

    def __len__(self) -> int:
        return self.n * self.epochs

    def __iter__(self):
        import torch
        g = torch.Generator()
        g.manual_seed(self.seed)
        for _ in range(self.epochs):
            if self.shuffle:
                yield from torch.randperm(self.n, generator=g).tolist()
            else:
                yield from range(self.n)


# The training recipes (issue 15), each one torchvision Compose that both
# sides are given: ImageFolder's transform on the DataLoader side,
# stoker.Loader(transform=...) on stoker's (read into stoker ops by
# stoker/_transforms.py). "v2": torchvision's reference recipe (the
# classification references' --auto-augment ta_wide --random-erase 0.1 at
# train-crop-size 176); "ra": timm-like rand-m9 at 224.
RECIPES = ("v2", "ra")
# The ops of the recipes that the CPU cost check leaves out for its baseline:
# the policies and RandomErasing (what issue 15 added; RandomResizedCrop,
# the flip and the output stay).
RECIPE_OPS = ("AutoAugment", "RandAugment", "TrivialAugmentWide", "AugMix", "RandomErasing")
_recipe_cache: Dict[str, Any] = {}


def recipe_transform(recipe: str):
    """The recipe's Compose: one object per recipe and process, so that both
    sides (and the image tool's keywords) are given the very same one."""
    if recipe not in _recipe_cache:
        import torch
        import torchvision.transforms as T
        from torchvision.transforms import InterpolationMode
        if recipe == "v2":
            bilinear = InterpolationMode.BILINEAR
            t = T.Compose([T.RandomResizedCrop(176, interpolation=bilinear),
                           T.RandomHorizontalFlip(), T.TrivialAugmentWide(interpolation=bilinear),
                           T.PILToTensor(), T.ConvertImageDtype(torch.float),
                           T.Normalize(MEAN, STD), T.RandomErasing(p=0.1)])
        elif recipe == "ra":
            t = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                           T.RandAugment(num_ops=2, magnitude=9), T.ToTensor(),
                           T.Normalize(MEAN, STD)])
        else:
            raise ValueError(f"unknown recipe {recipe!r}")
        _recipe_cache[recipe] = t
    return _recipe_cache[recipe]


def recipe_keywords(pipeline: str) -> Dict[str, Any]:
    """The pipeline keywords (ops, dtype, layout, mean, std) stoker's own
    mapping reads the recipe's Compose into: what stoker.Loader(transform=)
    sends the daemon. "<recipe>-base": the same without RECIPE_OPS."""
    from stoker import _transforms
    recipe, _, base = pipeline.partition("-")
    kw = _transforms.loader_options(recipe_transform(recipe))
    if base:
        kw["ops"] = [op for op in kw["ops"] if next(iter(op)) not in RECIPE_OPS]
    return kw


def torchvision_transform(pipeline: str):
    import torchvision.transforms as T
    if pipeline == "train":
        return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                          T.Normalize(MEAN, STD)])
    if pipeline == "eval":
        return T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                          T.Normalize(MEAN, STD)])
    return recipe_transform(pipeline)


class DataLoaderSource:
    """torchvision ImageFolder + DataLoader(batch 64, 2 persistent workers)
    with `transform` (a Compose) as the ImageFolder's transform."""

    def __init__(self, root: str, transform: Any, shuffle: bool) -> None:
        from torchvision.datasets import ImageFolder
        self._start(ImageFolder(root, transform=transform), BATCH, shuffle)

    def _start(self, ds: Any, batch_size: int, shuffle: bool, collate_fn: Any = None) -> None:
        """The DataLoader every bench runs over `ds`: WORKERS persistent workers,
        prefetch_factor DL_PREFETCH, epochs back to back, whole batches."""
        from torch.utils.data import DataLoader
        kw = {} if collate_fn is None else {"collate_fn": collate_fn}
        self.loader = DataLoader(ds, batch_size=batch_size, num_workers=WORKERS,
                                 persistent_workers=True, prefetch_factor=DL_PREFETCH,
                                 sampler=CycleSampler(len(ds), shuffle=shuffle),
                                 drop_last=True, **kw)
        self.it = iter(self.loader)  # forks the workers

    def producer_pids(self) -> List[int]:
        return [w.pid for w in self.it._workers]  # noqa: SLF001

    def producer_cpu(self) -> float:
        return sum(cpu_seconds(p) for p in self.producer_pids())

    def next(self):
        return next(self.it)

    def close(self) -> None:
        it, self.it = self.it, None
        if it is not None:
            it._shutdown_workers()  # noqa: SLF001
        self.loader = None


class StokerSource:
    """stoker.Loader on the shared daemon, iterated across epochs: a preset
    (`pipeline`, `dtype`, `layout`) or, given `transform`, that Compose (the
    drop-in path: the Loader reads it into ops; `pipeline` then only names it)."""

    def __init__(self, daemon: Daemon, dataset: str, pipeline: str, dtype: str, layout: str,
                 name: str, batch_size: int = BATCH, transform: Any = None,
                 drop_last: bool = True) -> None:
        import stoker
        self.daemon = daemon
        self.name = name
        spec: Dict[str, Any] = (dict(transform=transform) if transform is not None else
                                dict(pipeline=pipeline, dtype=dtype, layout=layout))
        self.loader = stoker.Loader(dataset, socket=daemon.socket, batch_size=batch_size,
                                    shuffle=pipeline != "eval", ring_slots=RING_SLOTS,
                                    drop_last=drop_last, timeout_ms=180000, client_name=name,
                                    **spec)
        self.loader.attach()
        self.it = self._stream()

    def _stream(self):
        while True:
            yield from self.loader

    def producer_cpu(self) -> float:
        d, w = self.daemon.cpu()
        return d + w

    def next(self):
        return next(self.it)

    def session_status(self) -> Dict[str, Any]:
        """This session's entry in the daemon's status, less its ring figures:
        its decode paths and decode times where the daemon reports them."""
        for sess in self.daemon.status().get("sessions", []):
            if sess.get("client_name") == self.name:
                return {k: v for k, v in sess.items() if not k.startswith("ring")}
        return {}

    def close(self) -> None:
        self.it.close()
        self.loader.close()
        self.daemon.quiesce()


BLOCKED_S = 0.002  # a next() this long waited for its batch: nothing was buffered


def measure(src, warmup: int, batches: int) -> Dict[str, float]:
    """Consumes `warmup` batches of a fresh source, then more until one next()
    has to wait for its batch (so the timed batches were not made before the
    clock started: both sides prefetch up to 4 batches), then times `batches`
    batches: images/s and the CPU the producers and this consumer used (in
    cores). With whole batches made by each DataLoader worker, `warmup` and
    `batches` should be multiples of WORKERS."""
    extra = 0
    for i in range(warmup + 3 * RING_SLOTS):
        t0 = time.perf_counter()
        touch(src.next())
        if i >= warmup - 1 and time.perf_counter() - t0 > BLOCKED_S:
            break
        extra += i >= warmup
    gc.collect()
    me = os.getpid()
    p0, c0, t0 = src.producer_cpu(), cpu_seconds(me), time.perf_counter()
    images = 0
    for _ in range(batches):
        images += touch(src.next())
    dt = time.perf_counter() - t0
    p1, c1 = src.producer_cpu(), cpu_seconds(me)
    return dict(images_per_s=images / dt, images=images, seconds=dt, extra_warmup=extra,
                producer_cores=(p1 - p0) / dt, consumer_cores=(c1 - c0) / dt)


def side_by_side(recipes, make_source: Callable[[str, str, int], Any], daemon: "Daemon",
                 rounds: int, batches: int) -> Dict[str, Dict[str, List[Dict[str, Any]]]]:
    """DataLoader ("dl") against stoker ("stoker") for each recipe, `rounds`
    rounds, the two sides' order swapped each round: measure() over a fresh
    source, make_source(recipe, config, round), closed right after (so that
    no idle source prefetches while the other is measured); the daemon is
    checked alive after each stoker run. The runs by recipe and side."""
    runs: Dict[str, Dict[str, List[Dict[str, Any]]]] = {k: {"dl": [], "stoker": []}
                                                        for k in recipes}
    for r in range(rounds):
        for recipe in recipes:
            for config in (("dl", "stoker") if r % 2 == 0 else ("stoker", "dl")):
                src = make_source(recipe, config, r)
                try:
                    res = measure(src, 2 * WORKERS, batches)
                finally:
                    src.close()
                    del src
                    gc.collect()
                if config == "stoker":
                    daemon.check_alive()
                res["round"] = r
                runs[recipe][config].append(res)
                log(f"round {r + 1} {recipe} {config}: {res['images_per_s']:.1f} img/s, "
                    f"producers {res['producer_cores']:.2f} cores")
    return runs


def run_tool(build: str, files: str, pipeline: str, dtype: str, layout: str,
             seconds: float, setup_cpu_s: float = 0.0, threads: int = 1,
             ring_mb: int = 0, keywords: Optional[Dict[str, Any]] = None,
             extra: Optional[List[str]] = None, size: Tuple[int, int] = (224, 224),
             prefix: Optional[List[str]] = None) -> Dict[str, float]:
    """stoker-image-tool bench, no daemon. `setup_cpu_s`: the CPU its start
    (loading the files into memory) costs, left out of its cores. `ring_mb`:
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
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 120)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr}")
    d = json.loads(r.stdout.strip().splitlines()[-1])
    if d.get("errors"):
        log(f"!! stoker-image-tool reported {d['errors']} errors on {files}")
    # The tool's CPU time less its start-up, over its timed seconds.
    loop_cpu = max(cpu - setup_cpu_s, 1e-3)
    return dict(images_per_s=float(d["images_per_s"]), images=int(d["images"]),
                seconds=float(d["seconds"]), cpu_s=cpu,
                producer_cores=min(float(threads), loop_cpu / max(float(d["seconds"]), 1e-9)),
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
    blobs = [_PIL_FILES[p] for p in paths]
    gc.collect()
    n, c0, t0 = 0, time.process_time(), time.perf_counter()
    while True:
        with Image.open(io.BytesIO(blobs[n % len(blobs)])) as im:
            im.load()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            break
    cpu = time.process_time() - c0
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


# ---------------------------------------------------------------------------
# Throughput, interleaved


# (key, label, kind, pipeline, dtype, layout, baseline key)
CONFIGS = [
    ("dl_train", "DataLoader train f32 NCHW", "dl", "train", "float32", "nchw", None),
    ("stk_train_f32", "stoker train f32 NCHW", "stoker", "train", "float32", "nchw", "dl_train"),
    ("stk_train_u8", "stoker train u8 NHWC", "stoker", "train", "uint8", "nhwc", "dl_train"),
    ("dl_eval", "DataLoader eval f32 NCHW", "dl", "eval", "float32", "nchw", None),
    ("stk_eval_f32", "stoker eval f32 NCHW", "stoker", "eval", "float32", "nchw", "dl_eval"),
    ("tool_train_f32", "image-tool train f32 NCHW, 1 thread", "tool", "train", "float32", "nchw",
     "dl_train"),
    ("tool_train_u8", "image-tool train u8 NHWC, 1 thread", "tool", "train", "uint8", "nhwc",
     "dl_train"),
    ("tool_eval_f32", "image-tool eval f32 NCHW, 1 thread", "tool", "eval", "float32", "nchw",
     "dl_eval"),
    ("tool2_train_f32", "image-tool train f32 NCHW, 2 threads into 64 MiB rings", "tool", "train",
     "float32", "nchw", "dl_train"),
]
# Tool configs run with other than 1 thread writing into a cached buffer:
# (threads, MiB of ring per thread). tool2_train_f32 is what this machine's
# cores give when both decode at once and write beyond the caches, as the
# daemon's 2 workers do: the ceiling the daemon is held to in practice.
TOOL_SHAPE = {"tool2_train_f32": (2, 64)}
# The recipes, on the ImageNet-like set only, in the same round-robin: each
# recipe's Compose on both sides, and stoker's single-thread loop with the
# recipe's op list (read from the same Compose) and without its RECIPE_OPS,
# for what those ops cost in CPU per image. float32 NCHW, as the Composes end.
RECIPE_CONFIGS = [
    ("dl_v2", "DataLoader v2 recipe (TrivialAugmentWide, RandomErasing) 176 f32", "dl", "v2",
     "float32", "nchw", None),
    ("stk_v2", "stoker v2 recipe, the same Compose", "stoker", "v2", "float32", "nchw", "dl_v2"),
    ("dl_ra", "DataLoader RandAugment(2, 9) recipe 224 f32", "dl", "ra", "float32", "nchw",
     None),
    ("stk_ra", "stoker RandAugment recipe, the same Compose", "stoker", "ra", "float32", "nchw",
     "dl_ra"),
    ("tool_v2", "image-tool v2 recipe, 1 thread", "tool", "v2", "float32", "nchw", "dl_v2"),
    ("tool_v2_base", "image-tool v2 recipe less TrivialAugmentWide + RandomErasing, 1 thread",
     "tool", "v2-base", "float32", "nchw", "dl_v2"),
    ("tool_ra", "image-tool RandAugment recipe, 1 thread", "tool", "ra", "float32", "nchw",
     "dl_ra"),
    ("tool_ra_base", "image-tool RandAugment recipe less RandAugment, 1 thread", "tool",
     "ra-base", "float32", "nchw", "dl_ra"),
]
# The recipes on the second daemon, the one with --transcode-cache (below),
# epoch 2 on: the set's progressive files decoded from their baseline copies.
RECIPE_TC_CONFIGS = [
    ("stk_v2_tc", "stoker v2 recipe, --transcode-cache (epoch 2 on)", "stoker_tc", "v2",
     "float32", "nchw", "dl_v2"),
    ("stk_ra_tc", "stoker RandAugment recipe, --transcode-cache (epoch 2 on)", "stoker_tc", "ra",
     "float32", "nchw", "dl_ra"),
]
# recipe -> (title, DataLoader key, stoker key, loop key, loop-without-its-ops key, what the
# baseline leaves out, stoker with the transcode cache key)
RECIPE_KEYS = {
    "v2": ("v2: RandomResizedCrop(176) + flip + TrivialAugmentWide + RandomErasing(0.1)",
           "dl_v2", "stk_v2", "tool_v2", "tool_v2_base", "TrivialAugmentWide + RandomErasing",
           "stk_v2_tc"),
    "ra": ("rand-m9: RandomResizedCrop(224) + flip + RandAugment(2, 9)", "dl_ra", "stk_ra",
           "tool_ra", "tool_ra_base", "RandAugment", "stk_ra_tc"),
}
SMALL_CONFIGS = CONFIGS + RECIPE_CONFIGS
# Issue 17, on the large-photo sets (baseline files, progressive files): PIL's
# full decode alone, one thread, files in memory (what each DataLoader worker
# pays per image before any transform), and stoker on a second daemon started
# with --transcode-cache DIR (where stokerd has the option), measured once an
# untimed epoch has written the baseline copies of the progressive files.
PIL_CONFIG = ("pil_decode", "PIL full decode (Image.open + load), 1 thread", "pil", "decode",
              "uint8", "nhwc", None)
TC_CONFIGS = [
    ("stk_train_f32_tc", "stoker train f32 NCHW, --transcode-cache (epoch 2 on)", "stoker_tc",
     "train", "float32", "nchw", "dl_train"),
    ("stk_eval_f32_tc", "stoker eval f32 NCHW, --transcode-cache (epoch 2 on)", "stoker_tc",
     "eval", "float32", "nchw", "dl_eval"),
]
LARGE_CONFIGS = CONFIGS + [PIL_CONFIG]
# The ImageNet-like set measures both: its plain pipelines and recipes on
# the cache daemon too (its 20% progressive files).
SMALL_TC_CONFIGS = TC_CONFIGS + RECIPE_TC_CONFIGS
ALL_CONFIGS = SMALL_CONFIGS + [PIL_CONFIG] + SMALL_TC_CONFIGS
CFG = {c[0]: c for c in ALL_CONFIGS}
# daemon config -> the single-process loop it is compared with
EFFICIENCY = [("stk_train_f32", "tool_train_f32"), ("stk_train_u8", "tool_train_u8"),
              ("stk_eval_f32", "tool_eval_f32")]


def is_recipe(pipeline: str) -> bool:
    return pipeline.partition("-")[0] in RECIPES


def throughput(name: str, root: str, rel: str, daemon: Daemon, build: str, rounds: int,
               warmup: int, batches: int, tool_s: float,
               configs: Optional[List[Tuple]] = None, daemon_tc: Optional[Daemon] = None,
               drop_last: bool = True,
               lists_dir: Optional[str] = None) -> Dict[str, List[Dict[str, float]]]:
    """Runs every config of `configs` (default CONFIGS) `rounds` times,
    round-robin; returns {key: [run, ...]}. Configs of kind "stoker_tc" run
    on `daemon_tc` (the one with --transcode-cache). `drop_last`: of stoker's
    sessions (False for sets of about one batch per epoch, which would
    otherwise leave the same files out of every eval epoch). `lists_dir`:
    the loops read a rotated list of the files there each round
    (rotated_list()), for sets that one run does not get through."""
    configs = CONFIGS if configs is None else configs
    load0 = loadavg()
    log(f"==> {name}: {rounds} rounds x {len(configs)} configs "
        f"({batches} batches of {BATCH} after warm-up; tools {tool_s:g} s)")
    # The recipes' pipelines as stoker's mapping reads their Composes (what
    # the loop runs; the Loader reads the same Compose the same way).
    keywords = {c[3]: recipe_keywords(c[3]) for c in configs
                if c[2] == "tool" and is_recipe(c[3])}
    for pipeline, kw in keywords.items():
        log(f"    {pipeline}: {json.dumps(kw)}")
    # What the tool's start-up (reading every file into memory) costs in CPU.
    setup_cpu = min(run_tool(build, root, "eval", "uint8", "nhwc", 0.01)["cpu_s"]
                    for _ in range(2))
    runs: Dict[str, List[Dict[str, float]]] = {c[0]: [] for c in configs}
    for r in range(rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        t_round = time.monotonic()
        files = rotated_list(root, r, rounds, lists_dir) if lists_dir else root
        for key, label, kind, pipeline, dtype, layout, _ in order:
            t0 = time.monotonic()
            if kind == "tool":
                threads, ring_mb = TOOL_SHAPE.get(key, (1, 0))
                res = run_tool(build, files, pipeline, dtype, layout, tool_s, setup_cpu,
                               threads=threads, ring_mb=ring_mb, keywords=keywords.get(pipeline))
            elif kind == "pil":
                res = run_pil(files, tool_s)
            else:
                recipe = recipe_transform(pipeline) if is_recipe(pipeline) else None
                d = daemon_tc if kind == "stoker_tc" else daemon
                src = (DataLoaderSource(root, torchvision_transform(pipeline),
                                        shuffle=pipeline != "eval") if kind == "dl" else
                       StokerSource(d, rel, pipeline, dtype, layout, f"bench-{key}",
                                    transform=recipe, drop_last=drop_last))
                try:
                    res = measure(src, warmup, batches)
                    if kind != "dl":
                        res["session"] = src.session_status()
                finally:
                    src.close()
                    del src
                    gc.collect()
                if kind != "dl":
                    d.check_alive()
            res["round"] = r
            res["wall_s"] = time.monotonic() - t0
            runs[key].append(res)
        line = "  ".join(f"{k}={runs[k][-1]['images_per_s']:.0f}" for k, *_ in configs)
        log(f"    round {r + 1}/{rounds} ({time.monotonic() - t_round:.0f} s): {line}")
    runs["_load"] = [dict(start=load0, end=loadavg())]  # type: ignore[list-item]
    if keywords:
        runs["_keywords"] = [keywords]  # type: ignore[list-item]
    return runs


def summarize(runs: Dict[str, List[Dict[str, float]]]) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for key in runs:
        if key.startswith("_"):
            continue
        for x in runs[key]:
            x["images_per_cpu_s"] = x["images_per_s"] / max(
                x["producer_cores"] + x["consumer_cores"], 1e-9)
    # The configs this run measured (an older results.json has no recipes).
    for key, label, kind, pipeline, dtype, layout, base in (c for c in ALL_CONFIGS
                                                            if c[0] in runs):
        v = [x["images_per_s"] for x in runs[key]]
        s: Dict[str, Any] = dict(label=label, kind=kind, median=statistics.median(v), min=min(v),
                                 max=max(v), n=len(v),
                                 producer_cores=statistics.median(
                                     x["producer_cores"] for x in runs[key]),
                                 consumer_cores=statistics.median(
                                     x["consumer_cores"] for x in runs[key]),
                                 per_cpu=statistics.median(
                                     x["images_per_cpu_s"] for x in runs[key]))
        if base:
            bv = [x["images_per_s"] for x in runs[base]]
            s["ratio"] = s["median"] / statistics.median(bv)
            paired = [a / b for a, b in zip(v, bv)]  # same round
            s["ratio_min"], s["ratio_max"] = min(paired), max(paired)
            s["cpu_ratio"] = s["per_cpu"] / statistics.median(
                x["images_per_cpu_s"] for x in runs[base])
        if kind == "tool":
            s["decode_ms"] = statistics.median(x["decode_ms"] for x in runs[key])
            s["augment_ms"] = statistics.median(x["augment_ms"] for x in runs[key])
        out[key] = s
    for daemon_key, tool_key in EFFICIENCY:
        if daemon_key not in out or tool_key not in out:
            continue
        d = out[daemon_key]
        d["efficiency"] = d["median"] / (out[tool_key]["median"] * WORKERS)
        paired = [a["images_per_s"] / (b["images_per_s"] * WORKERS)
                  for a, b in zip(runs[daemon_key], runs[tool_key])]
        d["efficiency_min"], d["efficiency_max"] = min(paired), max(paired)
        # The same per CPU second: robust to other load on the machine.
        d["cpu_efficiency"] = d["per_cpu"] / out[tool_key]["per_cpu"]
    return out


def summarize_recipes(runs: Dict[str, List[Dict[str, float]]],
                      summ: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Per recipe measured (after summarize(), which adds images_per_cpu_s to
    the runs): both sides' images/s and their ratio, the daemon's CPU per
    image, and the CPU per image of stoker's loop with and without the
    recipe's RECIPE_OPS: `added` is what those ops add, the median of the
    same-round ratios less 1, with their min-max."""
    out: Dict[str, Dict[str, Any]] = {}
    for recipe, (title, dk, sk, tk, bk, left_out, ck) in RECIPE_KEYS.items():
        if not all(k in summ for k in (dk, sk, tk, bk)):
            continue
        d, st, t, b = summ[dk], summ[sk], summ[tk], summ[bk]
        # CPU-s per image with / without = images per CPU-s without / with.
        added = [without["images_per_cpu_s"] / with_["images_per_cpu_s"] - 1
                 for with_, without in zip(runs[tk], runs[bk])]
        out[recipe] = dict(
            title=title, left_out=left_out, dl=d["median"], stoker=st["median"],
            ratio=st["ratio"], ratio_min=st["ratio_min"], ratio_max=st["ratio_max"],
            cpu_ratio=st["cpu_ratio"], dl_cpu_ms=1000 / d["per_cpu"],
            stoker_cpu_ms=1000 / st["per_cpu"], loop_cpu_ms=1000 / t["per_cpu"],
            loop_base_cpu_ms=1000 / b["per_cpu"], added=statistics.median(added),
            added_min=min(added), added_max=max(added),
            loop_augment_ms=t["augment_ms"], loop_base_augment_ms=b["augment_ms"],
            loop_decode_share=decode_share(t))
        if ck in summ:  # measured on the transcode-cache daemon too
            c = summ[ck]
            out[recipe].update(tc=c["median"], tc_ratio=c["ratio"], tc_ratio_min=c["ratio_min"],
                               tc_ratio_max=c["ratio_max"], tc_cpu_ratio=c["cpu_ratio"],
                               tc_cpu_ms=1000 / c["per_cpu"])
    return out


# ---------------------------------------------------------------------------
# Consumer overhead: time inside next() when the batch is already in the ring


def next_overhead(daemon: Daemon, rel: str, refills: int) -> Dict[str, Any]:
    """Times next() on batches already in the ring. Before each burst the ring
    is let fill completely; the burst then takes RING_SLOTS - 1 batches and
    holds them, so that the daemon's workers stay idle (no refill competes
    with the consumer for the CPU) while next() is timed."""
    log(f"==> consumer overhead: next() on a full ring, batch 256, {refills} refills")
    res: Dict[str, Any] = {}
    for dtype, layout in (("float32", "nchw"), ("uint8", "nhwc")):
        name = f"bench-next-{dtype}"
        src = StokerSource(daemon, rel, "train", dtype, layout, name, batch_size=256)
        samples: List[float] = []
        try:
            touch(src.next())
            for _ in range(refills):
                deadline = time.monotonic() + 120
                ready = 0
                while True:
                    st = daemon.status()
                    sess = [s for s in st["sessions"] if s["client_name"] == name]
                    if not sess:
                        raise RuntimeError(
                            f"session {name} vanished from the daemon's status "
                            f"(sessions_reclaimed={st.get('sessions_reclaimed')}); see "
                            f"{daemon.log_path}")
                    ready = int(sess[0]["ring_ready"])
                    if ready >= RING_SLOTS:
                        break
                    if time.monotonic() > deadline:
                        log(f"!! the ring did not fill within 120 s: {sess[0]}")
                        break
                    time.sleep(0.05)
                held = []
                for _ in range(min(ready, RING_SLOTS - 1)):
                    t0 = time.perf_counter_ns()
                    b = src.next()
                    t1 = time.perf_counter_ns()
                    samples.append((t1 - t0) / 1000)
                    held.append(b)
                    del b
                del held
        finally:
            src.close()
        samples.sort()
        if not samples:
            raise RuntimeError("no batch was ever ready in the ring: see the log above")
        res[dtype] = dict(median_us=statistics.median(samples), min_us=samples[0],
                          max_us=samples[-1], p90_us=samples[int(0.9 * (len(samples) - 1))],
                          n=len(samples), layout=layout)
        log(f"    {dtype} {layout}: median {res[dtype]['median_us']:.0f} us "
            f"[{samples[0]:.0f}-{samples[-1]:.0f}] over {len(samples)} batches")
    return res


# ---------------------------------------------------------------------------
# Memory


def _mem_child(args: argparse.Namespace) -> int:
    """In a fresh interpreter: iterate a loader, then report PSS/RSS as JSON."""
    import torch  # noqa: F401  (both consumers pay for torch)
    out: Dict[str, Any] = {}
    if args.mem_child == "dl":
        src = DataLoaderSource(args.root, torchvision_transform("train"), shuffle=True)
        for _ in range(args.batches):
            touch(src.next())
        pids = src.producer_pids()
        out["consumer_pss_kb"] = pss_kb(os.getpid())
        out["workers_pss_kb"] = [pss_kb(p) for p in pids]
        out["workers_rss_kb"] = [rss_kb(p) for p in pids]
        src.close()
    else:
        import stoker
        ld = stoker.Loader(args.rel, socket=args.socket, batch_size=BATCH, pipeline="train",
                           dtype="float32", layout="nchw", ring_slots=RING_SLOTS,
                           timeout_ms=180000, client_name="bench-mem")
        it = (b for _ in iter(int, 1) for b in ld)  # across epochs
        for _ in range(args.batches):
            touch(next(it))
        time.sleep(0.5)  # let the ring refill: all slots mapped and written
        st = stoker.Client(args.socket).status()
        dpid, wpids = int(st["pid"]), [int(w["pid"]) for w in st["workers"]]
        out["consumer_pss_kb"] = pss_kb(os.getpid())
        out["daemon_pss_kb"] = pss_kb(dpid)
        out["daemon_rss_kb"] = rss_kb(dpid)
        out["workers_pss_kb"] = [pss_kb(p) for p in wpids]
        out["workers_rss_kb"] = [rss_kb(p) for p in wpids]
        out["ring_bytes"] = int(st["sessions"][0]["ring_bytes"]) if st["sessions"] else 0
        ld.close()
    print("MEM " + json.dumps(out), flush=True)
    return 0


def _run_mem_child(extra: List[str]) -> Dict[str, Any]:
    r = subprocess.run([sys.executable, os.path.abspath(__file__)] + extra, capture_output=True,
                       text=True, timeout=600)
    for line in r.stdout.splitlines():
        if line.startswith("MEM "):
            return json.loads(line[4:])
    raise RuntimeError(f"memory child {extra} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")


def memory(build: str, data_root: str, ds: Dict[str, Any], out_dir: str,
           batches: int) -> Dict[str, Any]:
    log("==> memory")
    res: Dict[str, Any] = {}
    small_rel = os.path.relpath(ds["imagenet_like"]["path"], data_root)
    # PSS, same dataset (ImageNet-like, train, f32 NCHW, batch 64, 2 workers).
    res["dataloader"] = _run_mem_child(["--mem-child", "dl", "--root", ds["imagenet_like"]["path"],
                                        "--batches", str(batches)])
    d = Daemon(build, data_root, WORKERS, os.path.join(out_dir, "stokerd-mem.log"))
    try:
        res["stoker"] = _run_mem_child(["--mem-child", "stoker", "--socket", d.socket,
                                        "--rel", small_rel, "--batches", str(batches)])
    finally:
        d.stop()
    dl, st = res["dataloader"], res["stoker"]
    dl["total_pss_kb"] = dl["consumer_pss_kb"] + sum(dl["workers_pss_kb"])
    st["daemon_total_pss_kb"] = st["daemon_pss_kb"] + sum(st["workers_pss_kb"])
    st["total_pss_kb"] = st["daemon_total_pss_kb"] + st["consumer_pss_kb"]
    log(f"    PSS: stoker daemon+workers {st['daemon_total_pss_kb'] / 1024:.0f} MB "
        f"(+ consumer {st['consumer_pss_kb'] / 1024:.0f} MB); DataLoader main+workers "
        f"{dl['total_pss_kb'] / 1024:.0f} MB (workers {sum(dl['workers_pss_kb']) / 1024:.0f} MB)")
    # Worker RSS with a 100-entry and a 1,000,000-entry manifest (fresh daemon each).
    import stoker
    for key in ("manifest_100", "manifest_1m"):
        rel = os.path.relpath(ds[key]["path"], data_root)
        d = Daemon(build, data_root, WORKERS, os.path.join(out_dir, "stokerd-mem.log"))
        try:
            t0 = time.monotonic()
            ld = stoker.Loader(rel, socket=d.socket, batch_size=BATCH, pipeline="train",
                               dtype="uint8", ring_slots=RING_SLOTS, timeout_ms=180000,
                               client_name=f"bench-{key}")
            ld.attach()
            attach_s = time.monotonic() - t0
            it = (b for _ in iter(int, 1) for b in ld)  # across epochs
            for _ in range(batches):
                touch(next(it))
            time.sleep(0.5)
            wp = d.worker_pids()
            it.close()
            res[key] = dict(entries=ds[key]["entries"], attach_s=attach_s,
                            dataset_size=int(ld.info["dataset_size"]),
                            workers_rss_kb=[rss_kb(p) for p in wp],
                            workers_pss_kb=[pss_kb(p) for p in wp],
                            daemon_rss_kb=rss_kb(d.pid), daemon_pss_kb=pss_kb(d.pid))
            ld.close()
        finally:
            d.stop()
        m = res[key]
        log(f"    {key}: dataset_size {m['dataset_size']}, attach {attach_s:.2f} s, worker RSS "
            f"{[round(x / 1024, 1) for x in m['workers_rss_kb']]} MB, daemon RSS "
            f"{m['daemon_rss_kb'] / 1024:.1f} MB")
    a, b = res["manifest_100"], res["manifest_1m"]
    res["worker_rss_growth_kb"] = [y - x for x, y in zip(a["workers_rss_kb"], b["workers_rss_kb"])]
    res["daemon_rss_growth_kb"] = b["daemon_rss_kb"] - a["daemon_rss_kb"]
    return res


# ---------------------------------------------------------------------------
# Report


def _cmd(cmd: List[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine_info(build: str) -> Dict[str, str]:
    import numpy
    import PIL
    import torch
    import torchvision
    import stoker
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    lscpu = _cmd(["lscpu"])
    m = re.search(r"^Model name:\s*(.+)$", lscpu, re.M)
    if m and len(m.group(1)) > len(cpu):
        cpu = m.group(1).strip()
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    try:
        from PIL import features
        pil_jpeg = features.version_codec("jpg") or "?"
        turbo = features.check_feature("libjpeg_turbo")
    except Exception:  # noqa: BLE001
        pil_jpeg, turbo = "?", None
    return dict(
        cpu=cpu, cores=str(os.cpu_count()), memory=f"{mem_gb:.0f} GiB",
        kernel=platform.release(), os=_cmd(["sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"]),
        python=platform.python_version(), stoker=stoker.__version__,
        stokerd=_cmd([os.path.join(build, "bin", "stokerd"), "--version"]),
        torch=torch.__version__, torchvision=torchvision.__version__, PIL=PIL.__version__,
        pil_jpeg=f"{pil_jpeg}{' (libjpeg-turbo)' if turbo else ''}", numpy=numpy.__version__,
        libjpeg_turbo=_cmd(["dpkg-query", "-W", "-f=${Version}", "libjpeg62-turbo"]),
        torch_threads=str(torch.get_num_threads()))


def fmt_rate(s: Dict[str, Any]) -> str:
    return f"{s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]"


def fmt_ratio(s: Dict[str, Any]) -> str:
    if "ratio" not in s:
        return "1.00 (baseline)"
    return f"{s['ratio']:.2f} [{s['ratio_min']:.2f}-{s['ratio_max']:.2f}]"


def table_rows(summaries: Dict[str, Dict[str, Dict[str, Any]]]) -> List[List[str]]:
    rows = []
    for ds_name, summ in summaries.items():
        for key in (c[0] for c in ALL_CONFIGS if c[0] in summ):
            s = summ[key]
            cpu = (f"{s['producer_cores']:.2f} / {s['consumer_cores']:.2f}"
                   if s["kind"] not in ("tool", "pil") else
                   f"{s['producer_cores']:.2f} ({TOOL_SHAPE.get(key, (1, 0))[0]} thr.)")
            rows.append([ds_name, s["label"], fmt_rate(s), fmt_ratio(s), cpu,
                         f"{s['per_cpu']:.0f}",
                         f"{s['cpu_ratio']:.2f}" if "cpu_ratio" in s else "1.00"])
    return rows


def text_table(rows: List[List[str]], head: List[str]) -> str:
    w = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w[i]) for i, h in enumerate(head)),
             "  ".join("-" * x for x in w)]
    lines += ["  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    return "\n".join(lines)


def md_table(rows: List[List[str]], head: List[str]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


HEAD = ["dataset", "config", "images/s median [min-max]", "ratio vs DataLoader [paired min-max]",
        "CPU cores: producers / consumer", "images per CPU-s", "per-CPU ratio"]


SHORT = {"dl_train": "DataLoader\ntrain f32", "stk_train_f32": "stoker\ntrain f32",
         "stk_train_u8": "stoker\ntrain u8", "dl_eval": "DataLoader\neval f32",
         "stk_eval_f32": "stoker\neval f32", "tool_train_f32": "loop 1 thr\ntrain f32",
         "tool_train_u8": "loop 1 thr\ntrain u8", "tool_eval_f32": "loop 1 thr\neval f32",
         "tool2_train_f32": "loop 2 thr\ntrain f32", "dl_v2": "DataLoader\nv2 recipe",
         "stk_v2": "stoker\nv2 recipe", "dl_ra": "DataLoader\nRA recipe",
         "stk_ra": "stoker\nRA recipe", "stk_train_f32_tc": "stoker cache\ntrain f32",
         "stk_eval_f32_tc": "stoker cache\neval f32", "pil_decode": "PIL decode\n1 thr"}


def chart(summaries: Dict[str, Dict[str, Dict[str, Any]]], path: str) -> None:
    """Top row: images/s (median, min-max); bottom row: images per CPU second."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(summaries)
    bars_max = max(sum(k in summ for k in SHORT) for summ in summaries.values())
    fig, axes = plt.subplots(2, n, figsize=(max(7.0, 0.6 * bars_max) * n, 9), squeeze=False)
    colors = {"dl": "#8c8c8c", "stoker": "#d9541e", "tool": "#3b78b0", "stoker_tc": "#8f2d0a",
              "pil": "#c8c8c8"}
    for col, (ds_name, summ) in enumerate(summaries.items()):
        # The loop's recipe rows are left to RESULTS.md's Recipes table.
        keys = [k for k in SHORT if k in summ]
        for row, metric in enumerate(("median", "per_cpu")):
            ax = axes[row][col]
            vals = [summ[k][metric] for k in keys]
            kw: Dict[str, Any] = {}
            if metric == "median":
                kw = dict(yerr=[[summ[k]["median"] - summ[k]["min"] for k in keys],
                                [summ[k]["max"] - summ[k]["median"] for k in keys]], capsize=3)
            bars = ax.bar(range(len(keys)), vals, color=[colors[summ[k]["kind"]] for k in keys],
                          **kw)
            top = max(summ[k]["max"] for k in keys) if metric == "median" else max(vals)
            for b, k in zip(bars, keys):
                s = summ[k]
                ratio = s.get("ratio" if metric == "median" else "cpu_ratio")
                y = s["max"] if metric == "median" else s["per_cpu"]
                txt = f"{s[metric]:.0f}" + (f"\n{ratio:.2f}x" if ratio else "")
                ax.text(b.get_x() + b.get_width() / 2, y, txt, ha="center", va="bottom",
                        fontsize=8)
            ax.set_xticks(range(len(keys)))
            ax.set_xticklabels([SHORT[k] for k in keys], fontsize=7)
            ax.set_ylim(0, top * 1.25)
            ax.grid(axis="y", alpha=0.3)
            if metric == "median":
                ax.set_ylabel("images/s (median; bars: min-max)")
                ax.set_title(f"{ds_name}: wall clock, batch {BATCH}, {WORKERS} workers")
            else:
                ax.set_ylabel("images per CPU second")
                ax.set_title(f"{ds_name}: per CPU second (producers + consumer)")
    fig.suptitle("stoker vs torchvision DataLoader (grey: DataLoader, orange: stoker daemon, "
                 "dark red: the daemon with --transcode-cache, blue: stoker's single-thread "
                 "loop, no daemon, light grey: PIL's decode alone, 1 thread); ratios vs "
                 "DataLoader", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def decode_share(tool: Dict[str, Any]) -> float:
    return 100 * tool["decode_ms"] / max(tool["decode_ms"] + tool["augment_ms"], 1e-9)


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def against(value: float, goal: float) -> str:
    """A target of at least `goal`: met, or missed by how much."""
    return verdict(value >= goal) + ("" if value >= goal else
                                     f" by {(1 - value / goal) * 100:.0f}%")


def ratio_against(ratio: float, lo: float, hi: float, cpu_ratio: float, goal: float) -> str:
    """A ratio target, in images/s (with its paired min-max) and per CPU second."""
    return (f"{ratio:.2f}x [{lo:.2f}-{hi:.2f}] — {against(ratio, goal)}. Per CPU second: "
            f"{cpu_ratio:.2f}x ({'met' if cpu_ratio >= goal else 'missed'})")


def write_results(path: str, info: Dict[str, str], args: argparse.Namespace,
                  ds: Dict[str, Any], summaries: Dict[str, Dict[str, Dict[str, Any]]],
                  overhead: Dict[str, Any], mem: Dict[str, Any], elapsed_s: float,
                  params: Dict[str, Any], recipes: Optional[Dict[str, Dict[str, Any]]] = None,
                  opcost: Optional[Dict[str, Any]] = None,
                  raw: Optional[Dict[str, Any]] = None) -> None:
    small, large = summaries["ImageNet-like"], summaries["large photos"]
    recipes = recipes or {}
    loads = params.get("loads", {})
    L: List[str] = []
    a = L.append
    a("# stoker benchmark results")
    a("")
    a(f"Generated by `bench/run.sh{' --quick' if args.quick else ''}` on "
      f"{time.strftime('%Y-%m-%d %H:%M %Z')} in {elapsed_s / 60:.1f} min. "
      "Regenerated on every run; see bench/README.md for how to read it.")
    if args.quick:
        a("")
        a("**Quick (smoke) run: small datasets, few rounds; the figures are indicative only.**")
    a("")
    a("## Machine and versions")
    a("")
    a(f"- CPU: {info['cpu']}, {info['cores']} cores, {info['memory']} RAM; kernel "
      f"{info['kernel']}; {info['os']}. Shared and noisy: every figure is a median with its "
      "min-max over the rounds. Load average (1, 5, 15 min) at the start / end of each "
      "throughput phase: " + "; ".join(
          f"{n} {loads[n]['start']} / {loads[n]['end']}" for n in loads) + ".")
    a(f"- stoker {info['stoker']} (stokerd {info['stokerd']}), Python {info['python']}, "
      f"torch {info['torch']} ({info['torch_threads']} intra-op threads in the main process), "
      f"torchvision {info['torchvision']}, PIL {info['PIL']} (JPEG codec "
      f"{info['pil_jpeg']}), numpy {info['numpy']}, libjpeg-turbo {info['libjpeg_turbo']} "
      "(Debian's libjpeg62-turbo, used by both PIL and stoker).")
    a("")
    a("## Datasets (bench/data/, made by bench/make_data.py)")
    a("")
    for key, title in (("imagenet_like", "ImageNet-like"), ("large", "large photos"),
                       ("large_baseline", "large photos, baseline files"),
                       ("large_progressive", "large photos, progressive files")):
        if key not in ds:
            continue
        st = ds[key]["stats"]
        codings = ", ".join(f"{n} {k}" for k, n in st.get("codings", {}).items())
        content = ", ".join(f"{n} {k}" for k, n in st.get("content", {}).items())
        a(f"- {title}: {st['files']} JPEGs, mean {st['mean_w']:.0f}x{st['mean_h']:.0f} px "
          f"({st['min_mp']:.2f}-{st['max_mp']:.1f} MP, mean {st['mean_mp']:.2f} MP), mean "
          f"{st['mean_kb']:.0f} KB, {st['total_mb']:.0f} MB in all; ImageFolder tree "
          f"(`{os.path.relpath(ds[key]['path'], REPO)}`)"
          + (f"; coded: {codings}; content: {content}; {st['exif_oriented']} with an EXIF "
             "orientation" if codings else "") + ".")
    a("- Manifests for the memory check: 1,000,000 and 100 entries cycling over 50 of the "
      "ImageNet-like files.")
    a("")
    a("## Throughput")
    a("")
    a(f"Batch {BATCH}; {WORKERS} workers on both sides (DataLoader `num_workers=2, "
      f"persistent_workers=True, prefetch_factor={DL_PREFETCH}`, a sampler that runs epochs "
      f"back to back; `stokerd --workers 2`, a ring of {RING_SLOTS} batches). Each "
      "measurement makes a fresh loader (DataLoader workers forked, or a stoker session "
      f"attached: untimed), consumes {params['warmup']} warm-up batches and then more until "
      "one `next()` has to wait for its batch (so that nothing prefetched during the warm-up "
      "is timed), times "
      f"{params['small_batches']} (ImageNet-like) or {params['large_batches']} (each half of "
      "the large photos: baseline files, progressive files) "
      "batches, and closes the loader (so that nothing idle prefetches while another config "
      f"runs). Rounds: {params['rounds_small']} (ImageNet-like), {params['rounds_large']} "
      "(large photos); the configs run interleaved, round-robin, in an order rotated each "
      "round. The consumer reads one element of the images and one label per batch, nothing "
      "else, on both sides. Ratio: of the medians; in brackets, the min-max of the same-round "
      "ratios. CPU cores: CPU seconds per wall second used by the producers (DataLoader "
      "workers, or stokerd + its workers) / by the consuming Python process. Images per "
      "CPU-s: images per CPU second of producers + consumer, the figure least disturbed by "
      "other load on a shared machine; per-CPU ratio: that figure over the DataLoader's, i.e. "
      "the wall-clock ratio both sides would show with the same cores fully theirs. Image-tool rows: `stoker-image-tool bench --threads 1` "
      f"({params['tool_s']:g} s / {params['tool_s_large']:g} s each, files preloaded in "
      "memory), no daemon; their ratio is against DataLoader with 2 workers. The 2-thread "
      "row (`--threads 2 --ring-mb 64`) decodes on both cores at once and writes round a "
      "64 MiB mapping per thread, as the daemon's workers write into its ring.")
    a("")
    rows = table_rows(summaries)
    a(md_table(rows, HEAD))
    a("")
    a("![throughput](results.png)")
    a("")
    a("## Daemon vs its single-process loop")
    a("")
    a("| dataset | daemon config | daemon images/s | 1-thread loop images/s | "
      "daemon / (loop x 2) [paired min-max] | per CPU-s: daemon / loop |")
    a("|---|---|---|---|---|---|")
    for ds_name, summ in summaries.items():
        for dk, tk in EFFICIENCY:
            d, t = summ[dk], summ[tk]
            a(f"| {ds_name} | {d['label']} | {d['median']:.0f} | {t['median']:.0f} | "
              f"{d['efficiency'] * 100:.0f}% [{d['efficiency_min'] * 100:.0f}-"
              f"{d['efficiency_max'] * 100:.0f}%] | {d['cpu_efficiency'] * 100:.0f}% |")
    a("")
    for ds_name, summ in summaries.items():
        t1, t2, d = summ["tool_train_f32"], summ["tool2_train_f32"], summ["stk_train_f32"]
        a(f"- {ds_name}, what 2 cores give: the loop with 2 threads writing into 64 MiB rings "
          f"makes {t2['median']:.0f} images/s (train f32), {t2['median'] / (2 * t1['median']) * 100:.0f}% "
          f"of the 1-thread loop x 2; the daemon makes {d['median'] / t2['median'] * 100:.0f}% "
          "of that.")
    for ds_name, summ in summaries.items():
        tr, ev = summ["tool_train_f32"], summ["tool_eval_f32"]
        a(f"- {ds_name}: the single-thread loop needs {1000 / tr['per_cpu']:.2f} CPU-ms per "
          f"image for train ({decode_share(tr):.0f}% of it decoding, by its own timers), "
          f"{1000 / ev['per_cpu']:.2f} for eval ({decode_share(ev):.0f}% decoding); the daemon "
          f"{1000 / summ['stk_train_f32']['per_cpu']:.2f} (train f32, workers + stokerd + "
          f"consumer); the DataLoader {1000 / summ['dl_train']['per_cpu']:.2f} (train, "
          "workers + consumer).")
    a("")
    if "large progressive" in summaries:
        write_coding(a, summaries, ds, raw or {}, params)
    if recipes:
        write_recipes(a, recipes, params, (raw or {}).get("epochs_small"))
    if opcost:
        write_opcost(a, opcost)
    a("## Consumer overhead per batch")
    a("")
    a("Time inside `next()` of a `stoker.Loader` iterator (batch 256, train, 224x224) when the "
      f"batch is already in the ring: before each burst the ring is let fill ({RING_SLOTS} "
      f"ready slots), then {RING_SLOTS - 1} batches are taken and held, so that no refill "
      "by the daemon competes with the consumer while it is timed:")
    a("")
    for dtype, o in overhead.items():
        a(f"- {dtype} {o['layout'].upper()}: median **{o['median_us']:.0f} µs** (min "
          f"{o['min_us']:.0f}, p90 {o['p90_us']:.0f}, max {o['max_us']:.0f}) over {o['n']} "
          "batches.")
    a("")
    a("## Memory")
    a("")
    dl, st = mem["dataloader"], mem["stoker"]
    mb = lambda kb: f"{kb / 1024:.0f} MB"  # noqa: E731
    a(f"PSS (/proc/PID/smaps_rollup) after {params['mem_batches']} batches of the ImageNet-like "
      "set, train, float32 NCHW, batch 64, 2 workers, each side in a fresh process:")
    a("")
    a("| | producers | consumer process | total |")
    a("|---|---|---|---|")
    a(f"| stoker | stokerd {mb(st['daemon_pss_kb'])} + workers "
      f"{' + '.join(mb(x) for x in st['workers_pss_kb'])} = "
      f"**{mb(st['daemon_total_pss_kb'])}** | {mb(st['consumer_pss_kb'])} | "
      f"{mb(st['total_pss_kb'])} |")
    a(f"| DataLoader | workers {' + '.join(mb(x) for x in dl['workers_pss_kb'])} = "
      f"{mb(sum(dl['workers_pss_kb']))} | {mb(dl['consumer_pss_kb'])} | "
      f"**{mb(dl['total_pss_kb'])}** |")
    a("")
    a(f"stoker's ring ({RING_SLOTS} slots of 64x3x224x224 float32, "
      f"{st['ring_bytes'] / 2**20:.0f} MB of shared memory) is mapped by the daemon's workers "
      "and by the consumer, so its pages are split between them in PSS: stoker's consumer "
      f"is {(st['consumer_pss_kb'] - dl['consumer_pss_kb']) / 1024:.0f} MB above the "
      "DataLoader's main process for that reason (and the gRPC client), while DataLoader "
      "batches live in its workers' shared memory until collected. Both consumers import "
      "torch.")
    a("")
    m1, m2 = mem["manifest_100"], mem["manifest_1m"]
    a("Worker RSS (/proc/PID/status VmRSS) with a session on a 100-entry and on a "
      "1,000,000-entry manifest (a fresh daemon with 2 workers for each, after "
      f"{params['mem_batches']} batches of uint8):")
    a("")
    a("| manifest | attach | worker RSS | stokerd RSS |")
    a("|---|---|---|---|")
    for m in (m1, m2):
        a(f"| {m['entries']:,} entries | {m['attach_s']:.2f} s | "
          f"{', '.join(f'{x / 1024:.1f} MB' for x in m['workers_rss_kb'])} | "
          f"{m['daemon_rss_kb'] / 1024:.1f} MB |")
    g = mem["worker_rss_growth_kb"]
    a(f"| growth | | {', '.join(f'{x / 1024:+.1f} MB' for x in g)} | "
      f"{mem['daemon_rss_growth_kb'] / 1024:+.1f} MB |")
    a("")
    a("## Targets")
    a("")
    tr_s, tr_l = small["stk_train_f32"], large["stk_train_f32"]
    eff = [(n, s["stk_train_f32"]["efficiency"]) for n, s in summaries.items()]
    eff_all = [(n, s[dk]["label"], s[dk]["efficiency"]) for n, s in summaries.items()
               for dk, _ in EFFICIENCY]
    ov = overhead["float32"]["median_us"]
    g_max = max(g) / 1024
    for ds_label, s, goal in (("ImageNet-like", tr_s, 4), ("large photos", tr_l, 8)):
        a(f"- Train ratio vs DataLoader >= {goal}x on {ds_label} (f32 NCHW): "
          + ratio_against(s["ratio"], s["ratio_min"], s["ratio_max"], s["cpu_ratio"], goal)
          + ".")
    a("- Daemon >= 90% of single-thread loop x 2 workers (wall clock): "
      + "; ".join(f"{n} {lab}: {e * 100:.0f}% ({verdict(e >= 0.9)})" for n, lab, e in eff_all)
      + ". Per CPU second (daemon, its workers and the consumer vs the loop): "
      + "; ".join(f"{n} {s[dk]['label']}: {s[dk]['cpu_efficiency'] * 100:.0f}%"
                  for n, s in summaries.items() for dk, _ in EFFICIENCY) + ".")
    for r in recipes.values():
        a(f"- Recipe {r['title']}: ratio vs DataLoader >= 4x on ImageNet-like: "
          + ratio_against(r["ratio"], r["ratio_min"], r["ratio_max"], r["cpu_ratio"], 4)
          + f". Its per-sample ops ({r['left_out']}) add <= 25% to the CPU per image "
          f"(stoker's loop): {fmt_added(r)} — {verdict(r['added'] <= 0.25)}.")
        if "tc_ratio" in r:
            a(f"- Recipe {r['title']}, with --transcode-cache (epoch 2 on): ratio vs DataLoader "
              ">= 4x on ImageNet-like: "
              + ratio_against(r["tc_ratio"], r["tc_ratio_min"], r["tc_ratio_max"],
                              r["tc_cpu_ratio"], 4) + ".")
    if "large progressive" in summaries:
        for line in coding_targets(summaries, ds):
            a(f"- {line}")
    a(f"- Consumer < 100 µs per batch of 256 (f32 NCHW): {ov:.0f} µs — {verdict(ov < 100)}.")
    a(f"- Worker RSS growth < 20 MB, 1M vs 100 entries: max {g_max:+.1f} MB — "
      f"{verdict(g_max < 20)}.")
    a(f"- Daemon PSS < DataLoader's (2 workers, same data): stokerd + workers "
      f"{mb(st['daemon_total_pss_kb'])} vs DataLoader main + workers {mb(dl['total_pss_kb'])} — "
      f"{verdict(st['daemon_total_pss_kb'] < dl['total_pss_kb'])}; counting the consumer too, "
      f"{mb(st['total_pss_kb'])} vs {mb(dl['total_pss_kb'])}; against DataLoader's workers "
      f"alone, {mb(st['daemon_total_pss_kb'])} vs {mb(sum(dl['workers_pss_kb']))}.")
    a("")
    a("## Notes")
    a("")
    for note in notes(summaries, overhead, mem, info, eff, recipes):
        a(f"- {note}")
    a("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def _ratio(s: Dict[str, Any], key: str) -> str:
    """`key`'s ratio vs DataLoader with its paired min-max, or n/a."""
    x = s.get(key)
    return (f"{x['ratio']:.2f} [{x['ratio_min']:.2f}-{x['ratio_max']:.2f}]"
            if x and "ratio" in x else "n/a")


def _rate(s: Dict[str, Any], key: str) -> str:
    x = s.get(key)
    return f"{x['median']:.1f}" if x else "n/a"


def loop_vs_pil(s: Dict[str, Any]) -> float:
    """PIL's full decode time per image over stoker's loop's (eval, 1 thread)."""
    return s["tool_eval_f32"]["median"] / s["pil_decode"]["median"]


def coding_targets(summaries: Dict[str, Any], ds: Dict[str, Any]) -> List[str]:
    """Issue 17's targets: the large set (>= 40% progressive), the progressive files alone."""
    out = []
    mix, prog = summaries["large photos"], summaries["large progressive"]
    share = ds["large"]["stats"].get("progressive", 0) / ds["large"]["stats"]["files"]
    for pipeline, goal in (("train", 3.5), ("eval", 6.0)):
        for key, what in ((f"stk_{pipeline}_f32", "without the transcode cache"),
                          (f"stk_{pipeline}_f32_tc", "with --transcode-cache, epoch 2 on")):
            if key not in mix:
                out.append(f"Large photos ({share * 100:.0f}% progressive), {pipeline} >= "
                           f"{goal:g}x DataLoader, {what}: not measured (stokerd has no "
                           "--transcode-cache).")
                continue
            r = mix[key]["ratio"]
            out.append(f"Large photos ({share * 100:.0f}% progressive), {pipeline} f32 >= "
                       f"{goal:g}x DataLoader, {what}: {r:.2f}x — {against(r, goal)} "
                       f"(per CPU second {mix[key]['cpu_ratio']:.2f}x).")
    r = loop_vs_pil(prog)
    out.append(f"Progressive files alone, eval, stoker's loop (1 thread) >= 5x faster than PIL's "
               f"full decode per image: {r:.2f}x ({1000 / prog['tool_eval_f32']['median']:.0f} "
               f"vs {1000 / prog['pil_decode']['median']:.0f} ms) — {against(r, 5)}.")
    return out


def epoch_costs(e: Dict[str, Any], digits: int, why_epoch1: str) -> str:
    """One set's epoch times from first_epochs(): without a cache, then the
    cache's first (`why_epoch1` says what it does) and second epochs, with
    their change against the first."""
    n0, c1, c2 = (e[k]["seconds"] for k in ("no_cache", "tc_epoch1", "tc_epoch2"))
    return (f"without a cache {n0:.{digits}f} s; with the cache, epoch 1 {c1:.{digits}f} s "
            f"({(c1 / n0 - 1) * 100:+.0f}%{why_epoch1}), epoch 2 {c2:.{digits}f} s "
            f"({(c2 / n0 - 1) * 100:+.0f}%)")


def write_coding(a: Callable[[str], None], summaries: Dict[str, Any], ds: Dict[str, Any],
                 raw: Dict[str, Any], params: Dict[str, Any]) -> None:
    """RESULTS.md's section on baseline vs progressive large photos (issue 17)."""
    a("## Large photos: baseline vs progressive files")
    a("")
    nb = ds["large_baseline"]["stats"]["files"]
    npg = ds["large_progressive"]["stats"]["files"]
    tc = raw.get("transcode_cache")
    a(f"The large set's {nb} baseline and {npg} progressive files are measured apart, each "
      "set in the same rotated round-robin as above (the rows `large baseline` and `large "
      "progressive` of the throughput table); the `large photos` rows are computed from "
      "them, round by round: per image the times and the CPU add, so the whole set makes "
      "1 / (share_b / rate_b + share_p / rate_p) images/s. Both sides see the same files "
      "and the same transforms; stoker's sessions here keep the epoch's last partial batch "
      "(a set is about one batch per epoch). "
      + ("Transcode cache: a second `stokerd --workers 2 --transcode-cache DIR` (an empty "
         "DIR each run); one untimed epoch of each set goes through it before its rounds, so "
         "the `--transcode-cache` rows are epoch 2 on, where every progressive file has its "
         "baseline copy." if tc else
         "This stokerd has no `--transcode-cache`: the cache rows are missing."))
    a("")
    a("| set | DataLoader train | stoker train (ratio) | stoker train, transcode cache (ratio) "
      "| DataLoader eval | stoker eval (ratio) | stoker eval, transcode cache (ratio) |")
    a("|---|---|---|---|---|---|---|")
    for name in ("large baseline", "large progressive", "large photos"):
        s = summaries[name]
        a(f"| {name}{' (computed)' if name == 'large photos' else ''} | "
          f"{_rate(s, 'dl_train')} | {_rate(s, 'stk_train_f32')} ({_ratio(s, 'stk_train_f32')}) "
          f"| {_rate(s, 'stk_train_f32_tc')} ({_ratio(s, 'stk_train_f32_tc')}) | "
          f"{_rate(s, 'dl_eval')} | {_rate(s, 'stk_eval_f32')} ({_ratio(s, 'stk_eval_f32')}) | "
          f"{_rate(s, 'stk_eval_f32_tc')} ({_ratio(s, 'stk_eval_f32_tc')}) |")
    a("")
    a("Images/s, medians over the rounds; ratios vs the DataLoader on the same set, with the "
      "same-round min-max.")
    a("")
    a("| set | mean MP | stoker's loop, eval, ms per image (decode share) | loop, train | "
      "PIL full decode, ms per image | PIL decode / loop eval | DataLoader CPU-ms per image, "
      "train / eval |")
    a("|---|---|---|---|---|---|---|")
    for name, key in (("large baseline", "large_baseline"),
                      ("large progressive", "large_progressive")):
        s = summaries[name]
        ev, tr, pil = s["tool_eval_f32"], s["tool_train_f32"], s["pil_decode"]
        a(f"| {name} | {ds[key]['stats']['mean_mp']:.1f} | {1000 / ev['median']:.1f} "
          f"({decode_share(ev):.0f}%) | {1000 / tr['median']:.1f} ({decode_share(tr):.0f}%) | "
          f"{1000 / pil['median']:.1f} | {loop_vs_pil(s):.2f}x | "
          f"{1000 / s['dl_train']['per_cpu']:.0f} / {1000 / s['dl_eval']['per_cpu']:.0f} |")
    a("")
    a(f"The loop: `stoker-image-tool bench --threads 1` ({params['tool_s_large']:g} s a run, "
      "files in memory, 224x224 float32 NCHW); PIL: `Image.open(BytesIO(data)).load()` "
      "in one thread, files in memory (the decode each DataLoader worker does before "
      "`convert` and the transforms), the same seconds. Each round both loops read the same "
      "list of the set's files, rotated to start elsewhere each round (a run does not get "
      "through a set of large photos).")
    a("")
    epochs = raw.get("epochs") or {}
    for key, e in epochs.items():
        a(f"- {key.replace('_', ' ')}, one eval epoch (batch 16, one session, "
          f"{e['tc_epoch1']['images']} images): "
          + epoch_costs(e, 1, ": the workers write the copies" if "progressive" in key else
                        ": nothing to copy") + ".")
    tcs = (raw.get("tc_status_end") or {}).get("transcode_cache")
    if isinstance(tcs, dict):
        g = lambda k: float(tcs.get(k, 0) or 0)  # noqa: E731  (uint64s come as strings)
        a(f"- The cache at the end of the run: {g('entries'):.0f} copies, "
          f"{g('bytes') / 2**20:.0f} MiB; {g('hits'):.0f} hits, {g('misses'):.0f} misses "
          f"(hit rate {g('hit_rate') * 100:.0f}%), {g('writes'):.0f} copies written in "
          f"{g('transcode_seconds'):.1f} s of the workers' time, {g('bad_entries'):.0f} bad "
          f"entries, {g('write_failures') + g('writes_refused'):.0f} writes failed or refused.")
    elif raw.get("tc_status_end"):
        a(f"- The cache daemon's status at the end: `{json.dumps(raw['tc_status_end'])}`.")
    rows = []
    for name in ("large baseline", "large progressive"):
        key = "runs_" + name.replace(" ", "_")
        for cfg in ("tool_train_f32", "tool_eval_f32"):  # the loop's own count, same form
            runs = (raw.get(key) or {}).get(cfg) or []
            tp = runs[-1].get("paths") if runs else None
            if tp:
                rows.append(f"| {name} | {cfg} | " + "; ".join(
                    f"{k} {int(v.get('images', 0))} ({float(v.get('decode_ms', 0)):.1f} ms)"
                    for k, v in tp.items() if int(v.get("images", 0) or 0)) + " |")
        for cfg in ("stk_train_f32", "stk_eval_f32", "stk_train_f32_tc", "stk_eval_f32_tc"):
            runs = (raw.get(key) or {}).get(cfg) or []
            paths = runs[-1].get("session", {}).get("decode_paths") if runs else None
            if paths:
                rows.append(f"| {name} | {cfg} | " + "; ".join(
                    f"{p.get('path')} {int(p.get('samples', 0))} "
                    f"({float(p.get('mean_decode_ms', 0)):.1f} ms)"
                    for p in paths if int(p.get("samples", 0) or 0)) + " |")
    if rows:
        a("")
        a("Decode paths (the loop's own counts, and the daemon's status per session; each "
          "config's last round): samples and mean decode time per sample.")
        a("")
        a("| set | config | path samples (mean decode ms) |")
        a("|---|---|---|")
        for r in rows:
            a(r)
    a("")
    write_perf(a, raw.get("perf") or {})
    write_restart(a, raw.get("restart"))


def write_perf(a: Callable[[str], None], perf: Dict[str, Any]) -> None:
    if not perf:
        return
    a("### Where the time goes: perf profiles of the loop")
    a("")
    a("`perf record -F 999` of `stoker-image-tool bench --threads 1` (files in memory, 224x224 "
      "float32), one run per row. Debian's libjpeg is stripped of its static functions: "
      "their samples are put to the source module they lie in (the exported function that "
      "follows them in the library names it; past the last one lie the SIMD kernels). The "
      "kernel's share includes the loop's start-up (reading the files into memory: "
      "`_copy_to_iter` and page faults) and, on progressive files, the page faults of "
      "libjpeg's whole-image coefficient buffer (2 bytes per coefficient, ~27 MB at 9 MP "
      "4:2:0), allocated and zeroed afresh for every image.")
    a("")
    for key, p in perf.items():
        if p.get("error"):
            a(f"- {key}: {p['error']}.")
            continue
        tops = "; ".join(f"{t['what']} {t['share']:.0f}%" for t in p["top"][:8] if t["share"] >= 1)
        a(f"- {key.replace('_', ' ')} ({p['images_per_s']:.1f} images/s, decode "
          f"{p['decode_ms']:.1f} + augment {p['augment_ms']:.1f} ms per image): libjpeg "
          f"{p['libjpeg']:.0f}% of the samples (Huffman decoding {p['huffman']:.0f}%), stoker "
          f"{p['stoker']:.0f}%, kernel {p['kernel']:.0f}%. Top: {tops}.")
    a("")


def write_restart(a: Callable[[str], None], r: Optional[Dict[str, Any]]) -> None:
    if not r:
        return
    a("### Restart markers and what skipping rows and columns saves")
    a("")
    a(f"{r['files']} of the large baseline files (mean {r['mean_mp']:.1f} MP) re-coded by "
      "`jpegtran -optimize` without restart markers, with `-restart 1` (a marker every MCU "
      "row) and with `-restart 4B` (a marker every 4 MCUs, as hardware encoders place them); "
      "the same coefficients. stoker's loop, `--exact` (no DCT scaling), decode time per "
      "image by its own timers (medians); the last column counts the train crops that took "
      "the `restart_window` path:")
    a("")
    a("| file | full decode, ms | train crop (RandomResizedCrop), ms | crop / full | "
      "crops on restart_window |")
    a("|---|---|---|---|---|")
    seeked = r.get("seeked", {})
    for sub, title in (("plain", "no restart markers"), ("rst", "restart marker every MCU row"),
                       ("rst4b", "restart marker every 4 MCUs")):
        if f"{sub}_full" not in r:
            continue
        f, c = r[f"{sub}_full"], r[f"{sub}_crop"]
        n, of = seeked.get(sub, 0), seeked.get(f"{sub}_of", 0)
        # A --quick run's short turns may time no whole decode of a large photo.
        share = f"{c / f * 100:.0f}%" if f > 0 else "n/a"
        a(f"| {title} | {f:.1f} | {c:.1f} | {share} | "
          f"{100 * n / of if of else 0:.0f}% |")
    a("")
    a("What libjpeg-turbo 2.1.5 does (jdapistd.c, jdcoefct.c): `jpeg_skip_scanlines` on a "
      "single-scan (baseline) file still Huffman-decodes every MCU of the skipped iMCU rows "
      "(`decode_mcu(cinfo, NULL)`, coefficients discarded) and leaves out only their "
      "dequantization, IDCT, upsampling and color conversion; rows after the crop's last one "
      "are not read at all (stoker stops there). `jpeg_crop_scanline` still entropy-decodes "
      "every MCU of each row it reads and runs the IDCT only on the crop's columns. Neither "
      "uses restart markers to jump. stoker does (`JpegDecoder::Window`, "
      "server/image/decode/jpeg_restart.h): on a file with restart markers it finds each "
      "interval by its marker, without Huffman decoding, and decodes a cut copy holding only "
      "the intervals from one MCU row above the crop down and, when the interval divides an "
      "MCU row, only those from one MCU column beside it, bit-equal to the whole file inside "
      "the crop. With a marker every MCU row only the rows above the crop are left out; with "
      "one every 4 MCUs the columns beside it too. On progressive (multi-scan) files every "
      "scan of the whole image is entropy-decoded in `jpeg_start_decompress` into the "
      "coefficient buffer, before any row is skipped or cropped: skipping saves only the "
      "IDCT and what follows (stoker's answers there are the DC scans at 1/8 and the "
      "transcode cache).")
    a("")


def write_opcost(a: Callable[[str], None], opcost: Dict[str, Any]) -> None:
    """RESULTS.md's op-cost table (a run that measured it; older results.json have none)."""
    a("## Op costs (us per 224x224 image, stoker-image-tool opcost)")
    a("")
    a(f"`stoker-image-tool opcost --input {opcost['file']} --size 224 --seconds "
      f"{opcost['seconds_per_op']:g}`, run once after the throughput rounds with nothing else "
      "of the benchmark running: for each op, the steps [resize to 224x224 (antialias)] and "
      "the same + that op's steps with fixed typical parameters, run alternately on one "
      "ImageNet-like file; the cost is the median over the iterations of the op's augment "
      "time less the baseline's median (decoding excluded: it is not augment time). Output "
      "uint8 NHWC, float32 NCHW for the erase rows (a box of a third of the image, as "
      "RandomErasing runs on the recipes' float tensor). One process, one thread, on a shared "
      "machine: the small figures are within the noise of a few µs.")
    a("")
    a("| op | µs per image | iterations | baseline µs | output |")
    a("|---|---|---|---|---|")
    for d in opcost.get("ops", []):
        a(f"| {d['op']} | {float(d['us']):.1f} | {int(d['iterations'])} | "
          f"{float(d.get('baseline_us', 0)):.0f} | {d.get('output', '')} |")
    a("")


def write_recipes(a: Callable[[str], None], recipes: Dict[str, Dict[str, Any]],
                  params: Dict[str, Any], raw_epochs: Optional[Dict[str, Any]] = None) -> None:
    """RESULTS.md's Recipes section (a run that measured them)."""
    a("## Recipes")
    a("")
    a("torchvision's training recipes on the ImageNet-like set, in the same round-robin as the "
      "configs above (the `dl_v2`, `stk_v2`, `dl_ra`, `stk_ra` and image-tool recipe rows of "
      "the throughput table). Each side is given the very same `T.Compose` object: "
      "`ImageFolder(transform=...)` + DataLoader (2 workers, batch 64) and "
      "`stoker.Loader(transform=...)` (batch 64), which reads it into stoker's ops. "
      "v2: `RandomResizedCrop(176, BILINEAR), RandomHorizontalFlip(), "
      "TrivialAugmentWide(interpolation=BILINEAR), PILToTensor(), "
      "ConvertImageDtype(torch.float), Normalize(mean, std), RandomErasing(p=0.1)` "
      "(torchvision's reference recipe); rand-m9: `RandomResizedCrop(224), "
      "RandomHorizontalFlip(), RandAugment(num_ops=2, magnitude=9), ToTensor(), "
      "Normalize(mean, std)`. CPU per image: CPU-ms per image of stokerd + its workers + the "
      "consumer (the daemon), and of `stoker-image-tool bench --threads 1` (the loop, files in "
      f"memory, {params['tool_s']:g} s per run) on the op list stoker's mapping reads from the "
      "Compose (`--keywords`), with it and without the policy ops (the same crop, flip and "
      "float32 output): added CPU is the median of the same-round ratios less 1 [min-max].")
    a("")
    kws = params.get("recipe_keywords") or {}
    for pipeline in (p for p in kws if "-" not in p):
        left_out = [n for op in kws[pipeline]["ops"] for n in op if n in RECIPE_OPS]
        a(f"- `{pipeline}`, as stoker's mapping reads the Compose (the loop's `--keywords`; "
          f"its baseline leaves out {' and '.join(left_out)}): `{json.dumps(kws[pipeline])}`")
    if kws:
        a("")
    a("| recipe | DataLoader images/s | stoker images/s | ratio [paired min-max] | "
      "per-CPU ratio | stoker CPU-ms per image (daemon) | loop CPU-ms per image without / "
      "with the policy ops | ops' added CPU [min-max] |")
    a("|---|---|---|---|---|---|---|---|")
    for r in recipes.values():
        a(f"| {r['title']} | {r['dl']:.0f} | {r['stoker']:.0f} | {r['ratio']:.2f} "
          f"[{r['ratio_min']:.2f}-{r['ratio_max']:.2f}] | {r['cpu_ratio']:.2f} | "
          f"{r['stoker_cpu_ms']:.2f} | {r['loop_base_cpu_ms']:.2f} / {r['loop_cpu_ms']:.2f} | "
          f"{fmt_added(r)} |")
    a("")
    cached = [r for r in recipes.values() if "tc_ratio" in r]
    if cached:
        a("With `--transcode-cache` (the `stk_v2_tc` and `stk_ra_tc` rows: the second "
          "daemon, epoch 2 on, where the set's progressive files are decoded from their "
          "lossless baseline copies, the same pixels):")
        a("")
        a("| recipe | DataLoader images/s | stoker images/s, cache | ratio [paired min-max] | "
          "per-CPU ratio | stoker CPU-ms per image (daemon) |")
        a("|---|---|---|---|---|---|")
        for r in cached:
            a(f"| {r['title']} | {r['dl']:.0f} | {r['tc']:.0f} | {r['tc_ratio']:.2f} "
              f"[{r['tc_ratio_min']:.2f}-{r['tc_ratio_max']:.2f}] | {r['tc_cpu_ratio']:.2f} | "
              f"{r['tc_cpu_ms']:.2f} |")
        a("")
    if raw_epochs:
        a(f"What the cache costs on this set, one eval epoch each (batch 16, "
          f"{raw_epochs['tc_epoch1']['images']} images): "
          + epoch_costs(raw_epochs, 2, ": the workers write the copies of the progressive "
                        "files") + ".")
        a("")
    for r in recipes.values():
        a(f"- {r['title']}: the DataLoader needs {r['dl_cpu_ms']:.2f} CPU-ms per image "
          f"(workers + consumer), stoker's daemon {r['stoker_cpu_ms']:.2f}. In the loop, "
          f"the ops the baseline leaves out ({r['left_out']}) cost "
          f"{r['loop_cpu_ms'] - r['loop_base_cpu_ms']:.2f} CPU-ms per image (by the loop's "
          f"own timers, its augment time goes from {r['loop_base_augment_ms']:.2f} to "
          f"{r['loop_augment_ms']:.2f} ms per image, decoding unchanged).")
    a("")


def fmt_added(r: Dict[str, Any]) -> str:
    return (f"{r['added'] * 100:+.0f}% [{r['added_min'] * 100:+.0f}%, "
            f"{r['added_max'] * 100:+.0f}%]")


def notes(summaries, overhead, mem, info, eff, recipes=None) -> List[str]:
    """Observations computed from this run's numbers (so that they stay true when rerun)."""
    out = []
    for r in (recipes or {}).values():
        out.append(
            f"Recipe {r['title']}: {r['ratio']:.2f}x in images/s, {r['cpu_ratio']:.2f}x per CPU "
            f"second. With the same cores on both sides the ratio is the DataLoader's CPU per "
            f"image over stoker's: {r['dl_cpu_ms']:.2f} / {r['loop_cpu_ms']:.2f} ms = "
            f"{r['dl_cpu_ms'] / r['loop_cpu_ms']:.1f}x with the loop's, "
            f"{r['dl_cpu_ms'] / r['stoker_cpu_ms']:.1f}x with the daemon's. Decoding, the same "
            f"libjpeg-turbo on both sides, is {r['loop_decode_share']:.0f}% of the loop's "
            "time per image by its own timers (with the policy ops), and bounds the ratio "
            "however fast the ops are."
            + (f" With --transcode-cache (epoch 2 on), where the set's progressive files "
               f"(the costliest to decode) come from their baseline copies, stoker's daemon "
               f"needs {r['tc_cpu_ms']:.2f} CPU-ms per image: {r['tc_ratio']:.2f}x in "
               f"images/s." if "tc_ratio" in r else ""))
    small, large = summaries["ImageNet-like"], summaries["large photos"]
    for name, s in summaries.items():
        d, st = s["dl_train"], s["stk_train_f32"]
        if abs(st["ratio"] - st["cpu_ratio"]) > 0.25 * st["cpu_ratio"]:
            out.append(
                f"{name}, wall clock vs CPU: the train ratio is {st['ratio']:.2f}x in images/s "
                f"but {st['cpu_ratio']:.2f}x per CPU second, because during their turns "
                f"stoker's producers got {st['producer_cores']:.2f} cores and the "
                f"DataLoader's workers {d['producer_cores']:.2f} of the {info['cores']} "
                "(the machine was shared; see the load averages). On a machine of its own each "
                f"side would have both cores: expect a ratio near {st['cpu_ratio']:.1f}x "
                "there, not the wall-clock one.")
    for name, s in summaries.items():
        d, t, st = s["dl_train"], s["tool_train_f32"], s["stk_train_f32"]
        out.append(
            f"{name}, where the time goes (train, CPU-ms per image): DataLoader "
            f"{1000 / d['per_cpu']:.1f}; stoker's loop {1000 / t['per_cpu']:.1f} "
            f"({decode_share(t):.0f}% of it in the JPEG decoder); the daemon "
            f"{1000 / st['per_cpu']:.1f} (its workers, stokerd and the consumer). Both sides "
            "decode with the same libjpeg-turbo, so the ratio is bounded by what stoker saves "
            "besides decoding (PIL's resize, ToTensor, Normalize, collate, pickling through "
            "shared memory) and by what it avoids decoding (rows and columns outside the "
            "crop, DCT scaling): at most "
            f"{t['per_cpu'] / d['per_cpu']:.1f}x with the loop's cost per image, "
            f"{st['cpu_ratio']:.1f}x with the daemon's.")
    st_train = small["stk_train_f32"]
    out.append(
        f"Daemon overhead over its loop (per CPU second): train f32 "
        f"{small['stk_train_f32']['cpu_efficiency'] * 100:.0f}% / u8 "
        f"{small['stk_train_u8']['cpu_efficiency'] * 100:.0f}% of the loop's images per "
        f"CPU-s on ImageNet-like, {large['stk_train_f32']['cpu_efficiency'] * 100:.0f}% / "
        f"{large['stk_train_u8']['cpu_efficiency'] * 100:.0f}% on large photos. A daemon "
        "worker reads each file (the loop has them in memory: ~0.05 ms), gets each task "
        "and returns each result over a socket, shares the cores with stokerd and the "
        "consumer, and writes into a ring much larger than the caches (the 1-thread loop "
        "writes into one buffer that stays in cache; non-temporal stores were tried and did "
        "not help here). The 2-thread loop above, which writes beyond the caches too, is the "
        "fairer ceiling. Three causes found with perf were fixed: a page fault per 4 KiB of "
        "each slot (workers now map rings with MAP_POPULATE), stokerd waking every waiting "
        "thread on each result (a third of its CPU), and readahead waking all 16 of its "
        "threads on each dispatched sample and re-reading files already cached (0.16 cores "
        "on a warm dataset, now 0.04). In wall-clock terms, "
        f"the {info['cores']} cores are also shared with the consumer, stokerd and the rest "
        f"of the machine: stoker's producers got {st_train['producer_cores']:.2f} cores, the "
        "single-thread loop "
        f"{small['tool_train_f32']['producer_cores']:.2f} during its turn.")
    dl_l, tl = large["dl_train"], large["tool_train_f32"]
    out.append(
        f"Large photos: stoker decodes only the crop's rows and columns and uses libjpeg's "
        f"DCT scaling when the crop is much larger than the output ({1000 / tl['per_cpu']:.0f} "
        f"CPU-ms per image in its loop); torchvision decodes every pixel "
        f"with PIL (no `draft()`) and then crops and resizes ({1000 / dl_l['per_cpu']:.0f} "
        "CPU-ms per image). What remains for stoker is mostly entropy (Huffman) decoding, "
        "which DCT scaling does not shorten and which must run through every row above the "
        f"crop's last one. Eval: {large['stk_eval_f32']['ratio']:.1f}x "
        f"({large['stk_eval_f32']['cpu_ratio']:.1f}x per CPU-s).")
    u8, f32 = small["stk_train_u8"], small["stk_train_f32"]
    out.append(
        f"uint8 NHWC vs float32 NCHW (ImageNet-like train, daemon): {u8['median']:.0f} vs "
        f"{f32['median']:.0f} images/s, {u8['per_cpu']:.0f} vs {f32['per_cpu']:.0f} images "
        "per CPU-s (float32 writes 4x the bytes into the ring and normalizes).")
    o = overhead["float32"]
    out.append(
        f"Consumer overhead: median {o['median_us']:.0f} µs, p90 {o['p90_us']:.0f} µs per "
        "batch of 256 float32 (zero copy: the tensor is a view of the ring slot; `next()` "
        "is the native call plus the Loader's Python bookkeeping and `torch.from_numpy`). "
        "The tail is scheduling noise on a busy 2-core machine.")
    g = mem["worker_rss_growth_kb"]
    out.append(
        f"Manifest of 1M vs 100 entries: worker RSS {', '.join(f'{x / 1024:+.1f}' for x in g)} "
        f"MB, stokerd's own RSS {mem['daemon_rss_growth_kb'] / 1024:+.1f} MB (it holds the "
        f"index), attach {mem['manifest_1m']['attach_s']:.2f} s vs "
        f"{mem['manifest_100']['attach_s']:.2f} s.")
    return out


# ---------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (~1-2 minutes)")
    ap.add_argument("--rounds-small", type=int, default=None)
    ap.add_argument("--rounds-large", type=int, default=None)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--out", default=HERE, help="where RESULTS.md and results.png go")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite RESULTS.md and results.png from bench/out/results.json")
    # internal: memory children
    ap.add_argument("--mem-child", choices=["dl", "stoker"], help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--rel", help=argparse.SUPPRESS)
    ap.add_argument("--socket", help=argparse.SUPPRESS)
    ap.add_argument("--batches", type=int, default=10, help=argparse.SUPPRESS)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    if args.mem_child:
        return _mem_child(args)
    if args.report_only:
        with open(os.path.join(HERE, "out", "results.json")) as f:
            return report(json.load(f), args)

    t_start = time.monotonic()
    q = args.quick
    params = dict(rounds_small=args.rounds_small or (2 if q else 5),
                  rounds_large=args.rounds_large or (1 if q else 3),
                  warmup=WORKERS, small_batches=6 if q else 20,
                  large_batches=2, tool_s=1.0 if q else 4.0,
                  tool_s_large=1.5 if q else 3.0, refills=3 if q else 12,
                  mem_batches=5 if q else 10, perf_s=1.5 if q else 4.0,
                  restart_s=0.5 if q else 2.0, restart_repeats=1 if q else 3)
    data_root = os.path.abspath(args.data)
    out_dir = os.path.join(HERE, "out")
    os.makedirs(out_dir, exist_ok=True)
    ds = make_data.make_all(data_root, quick=q)
    small_rel = os.path.relpath(ds["imagenet_like"]["path"], data_root)

    import torch  # noqa: F401
    import stoker  # noqa: F401
    info = machine_info(build)
    log(f"==> {info['cpu']}, {info['cores']} cores, kernel {info['kernel']}; stoker "
        f"{info['stoker']}, torch {info['torch']}, torchvision {info['torchvision']}, "
        f"PIL {info['PIL']}")

    daemon_log = os.path.join(out_dir, "stokerd.log")
    daemon = Daemon(build, data_root, WORKERS, daemon_log)
    # A second daemon with a transcode cache (issue 17), fresh and empty for
    # this run, where stokerd has the option; it idles while others run.
    tc_dir = os.path.join(out_dir, "transcode-cache")
    shutil.rmtree(tc_dir, ignore_errors=True)
    daemon_tc: Optional[Daemon] = None
    raw: Dict[str, Any] = dict(params=params, info=info)
    try:
        if transcode_supported(build):
            daemon_tc = Daemon(build, data_root, WORKERS, os.path.join(out_dir, "stokerd-tc.log"),
                               ["--transcode-cache", tc_dir])
            # Its first session, untimed (baseline files: nothing to cache).
            epoch_time(daemon_tc, os.path.relpath(ds["large_baseline"]["path"], data_root),
                       "bench-warm")
        else:
            log("==> stokerd has no --transcode-cache: measuring without it")
        raw["transcode_cache"] = daemon_tc is not None
        if daemon_tc:
            # Fills the cache with the set's copies (and measures what that costs).
            raw["epochs_small"] = first_epochs(daemon, daemon_tc, small_rel, "imagenet_like")
        runs_small = throughput("ImageNet-like", ds["imagenet_like"]["path"], small_rel, daemon,
                                build, params["rounds_small"], params["warmup"],
                                params["small_batches"], params["tool_s"],
                                configs=SMALL_CONFIGS + (SMALL_TC_CONFIGS if daemon_tc else []),
                                daemon_tc=daemon_tc)
        # The large photos, baseline and progressive files apart (the mix of
        # the whole set is computed from the two, per round: mix_runs()).
        large_configs = LARGE_CONFIGS + (TC_CONFIGS if daemon_tc else [])
        epochs: Dict[str, Any] = {}
        for key, name in (("large_baseline", "large baseline"),
                          ("large_progressive", "large progressive")):
            rel = os.path.relpath(ds[key]["path"], data_root)
            if daemon_tc:
                epochs[key] = first_epochs(daemon, daemon_tc, rel, key)
            raw[f"runs_{key}"] = throughput(
                name, ds[key]["path"], rel, daemon, build, params["rounds_large"],
                params["warmup"], params["large_batches"], params["tool_s_large"],
                configs=large_configs, daemon_tc=daemon_tc, drop_last=False,
                lists_dir=os.path.join(out_dir, "lists"))
        raw["epochs"] = epochs
        if daemon_tc:
            raw["tc_status_end"] = status_fields(daemon_tc.status())
        overhead = next_overhead(daemon, small_rel, params["refills"])
        st = daemon.status()
        raw["daemon_status_end"] = dict(
            samples_failed_total=st.get("samples_failed_total"),
            worker_restarts_total=st.get("worker_restarts_total"),
            sessions_reclaimed=st.get("sessions_reclaimed"),
            workers=[{k: w.get(k) for k in ("pid", "restarts", "crashes", "samples_done",
                                              "samples_failed")} for w in st["workers"]])
    finally:
        daemon.stop()
        if daemon_tc:
            daemon_tc.stop()
    # Each op's cost, on one ImageNet-like file (a few seconds, nothing else running).
    raw["opcost"] = run_opcost(build, first_jpeg(ds["imagenet_like"]["path"]),
                               0.1 if q else 0.25)
    # Where the time goes on progressive files (and, for contrast, baseline
    # ones): perf profiles of the loop; then what skipping rows and columns
    # saves on baseline files with and without restart markers.
    log("==> perf profiles of the loop (progressive eval and train, baseline eval)")
    raw["perf"] = {f"{key}_{pipeline}": run_perf(build, ds[key]["path"], pipeline,
                                                 params["perf_s"],
                                                 os.path.join(out_dir, f"perf-{key}.data"))
                   for key, pipeline in (("large_progressive", "eval"),
                                         ("large_progressive", "train"),
                                         ("large_baseline", "eval"))}
    log("==> restart markers: full decode vs train crop (--exact), without and with")
    raw["restart"] = restart_check(build, ds["restart"], params["restart_s"],
                                   params["restart_repeats"])
    end = raw["daemon_status_end"]
    if any(int(end.get(k) or 0) for k in ("samples_failed_total", "worker_restarts_total",
                                           "sessions_reclaimed")):
        log(f"!! the daemon reported failures or restarts: {raw['daemon_status_end']}")
    mem = memory(build, data_root, ds, out_dir, params["mem_batches"])
    raw.update(runs_small=runs_small, overhead=overhead, memory=mem,
               datasets=ds, elapsed_s=time.monotonic() - t_start, quick=q)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(raw, f, indent=1)
    return report(raw, args)


def report(raw: Dict[str, Any], args: argparse.Namespace) -> int:
    """Summarizes the raw runs; prints the table; writes RESULTS.md and results.png."""
    params, info, ds = raw["params"], raw["info"], raw["datasets"]
    runs_small = raw["runs_small"]
    overhead, mem = raw["overhead"], raw["memory"]
    args.quick = raw.get("quick", args.quick)
    parts = {"large baseline": raw.get("runs_large_baseline"),
             "large progressive": raw.get("runs_large_progressive")}
    if all(parts.values()):
        # The whole large set, from its two parts (see mix_runs).
        runs_large = mix_runs([(parts["large baseline"], ds["large_baseline"]["stats"]["files"]),
                               (parts["large progressive"],
                                ds["large_progressive"]["stats"]["files"])])
    else:  # a results.json from before issue 17: the set was measured whole
        runs_large, parts = raw["runs_large"], {}
    params["loads"] = {"ImageNet-like": runs_small.pop("_load")[0]}
    params["loads"].update({n: p.pop("_load")[0] for n, p in parts.items()})
    runs_large.pop("_load")
    params["recipe_keywords"] = runs_small.pop("_keywords", [{}])[0]
    summaries = {"ImageNet-like": summarize(runs_small), "large photos": summarize(runs_large)}
    summaries.update({n: summarize(p) for n, p in parts.items()})
    # Empty for a results.json from before the recipes: no Recipes section.
    recipes = summarize_recipes(runs_small, summaries["ImageNet-like"])
    os.makedirs(args.out, exist_ok=True)
    chart({k: v for k, v in summaries.items() if k != "large photos" or not parts},
          os.path.join(args.out, "results.png"))
    elapsed = raw["elapsed_s"]
    write_results(os.path.join(args.out, "RESULTS.md"), info, args, ds, summaries, overhead, mem,
                  elapsed, params, recipes, raw.get("opcost"), raw)
    rows = table_rows(summaries)
    log("")
    log(text_table(rows, HEAD))
    log("")
    for name, summ in summaries.items():
        for dk, tk in EFFICIENCY:
            d = summ[dk]
            log(f"{name}: {d['label']} = {d['efficiency'] * 100:.0f}% of 2 x single-thread loop")
    o = overhead["float32"]
    log(f"consumer next() on a ready batch of 256 (f32): median {o['median_us']:.0f} us")
    log(f"worker RSS growth 1M vs 100 entries: "
        f"{[round(x / 1024, 1) for x in mem['worker_rss_growth_kb']]} MB; PSS stokerd+workers "
        f"{mem['stoker']['daemon_total_pss_kb'] / 1024:.0f} MB vs DataLoader main+workers "
        f"{mem['dataloader']['total_pss_kb'] / 1024:.0f} MB")
    for name, r in recipes.items():
        log(f"recipe {name} images/s ratio vs DataLoader: {r['ratio']:.2f} "
            f"(per CPU-s {r['cpu_ratio']:.2f}; stoker {r['stoker']:.0f}, DataLoader "
            f"{r['dl']:.0f}); its per-sample ops ({r['left_out']}) add {r['added'] * 100:+.0f}% "
            f"CPU per image in stoker's loop ({r['loop_base_cpu_ms']:.2f} -> "
            f"{r['loop_cpu_ms']:.2f} ms)")
    if "large progressive" in summaries:
        for line in coding_targets(summaries, ds):
            log(line.replace("**", ""))
    log(f"wrote {os.path.relpath(os.path.join(args.out, 'RESULTS.md'))}, "
        f"{os.path.relpath(os.path.join(args.out, 'results.png'))} in {elapsed / 60:.1f} min")
    log(f"train images/s ratio vs DataLoader: "
        f"{summaries['ImageNet-like']['stk_train_f32']['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
