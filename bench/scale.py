#!/usr/bin/python3
"""Datasets at scale: indexing a million entries, and reading from a cold disk.

    /usr/bin/python3 bench/scale.py [--build build] [--rounds 3] [--quick]

Writes bench/SCALE.md. bench/run.sh runs it after bench/bench.py.

1. Indexing. A 1,000,000-file ImageFolder (1,000 classes x 1,000 hard links
   to 50 of the ImageNet-like JPEGs, made once under bench/data/million/),
   the 1,000,000-entry manifest, and 100 WebDataset shards of 1,000 samples
   each (small images: indexing reads the headers). For each: a fresh daemon indexes it (time to attach,
   stokerd's RSS growth, the index's heap size from the log), then a second
   fresh daemon with the same --index-cache attaches (the index is mapped).
2. Cold reads. The ImageNet-like set is dropped from the page cache
   (posix_fadvise DONTNEED on every file) before each run; one epoch, batch
   64, train, uint8, 2 workers, with readahead on (the default: 16 threads,
   64 MiB) and off. Once on this machine's own disk, and once with every read
   of uncached data delayed by 5 ms (--simulate-read-latency-us 5000, in the
   workers and in readahead alike): network storage. Medians of --rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import make_data  # noqa: E402
from daemon_launcher import DaemonProcess  # noqa: E402


def log(msg: str) -> None:
    print(msg, flush=True)


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


class Daemon(DaemonProcess):
    """stokerd as our child (daemon_launcher.py); `args`: flags as written."""

    def __init__(self, build: str, root: str, args: List[str]) -> None:
        import stoker
        super().__init__(build, root, tempfile.mkdtemp(prefix="stkscale", dir="/tmp"),
                         settings=dict(log_level="info", decode_calibration=True),
                         extra_args=args)
        self.client = stoker.Client(self.socket)
        self.start()  # DaemonStartError (a RuntimeError) with the log's tail

    def stop(self) -> None:
        super().stop(timeout_s=60)
        shutil.rmtree(self.workdir, ignore_errors=True)


# ---------------------------------------------------------------------------
# Datasets


def make_million(data: str, n_classes: int, per_class: int) -> str:
    """An ImageFolder of n_classes x per_class hard links (made once)."""
    root = os.path.join(data, "million")
    stamp = os.path.join(root, f".done-{n_classes}x{per_class}")
    if os.path.exists(stamp):
        return root
    shutil.rmtree(root, ignore_errors=True)
    src_dir = os.path.join(data, "imagenet_like")
    srcs = sorted(os.path.join(d, f) for d, _, fs in os.walk(src_dir) for f in fs
                  if f.endswith(".jpg"))[:50]
    t0 = time.monotonic()
    for c in range(n_classes):
        d = os.path.join(root, f"n{c:05d}")
        os.makedirs(d)
        for i in range(per_class):
            os.link(srcs[(c + i) % len(srcs)], os.path.join(d, f"img_{i:05d}.jpg"))
    open(stamp, "w").close()
    log(f"    made {n_classes * per_class} hard links in {time.monotonic() - t0:.0f} s")
    return root


def make_shards(data: str, shards: int, per_shard: int) -> str:
    """WebDataset shards of per_shard samples (jpg + cls), made once. The
    images are small (indexing reads headers, not images): the shards take
    ~2.5 KB per sample on disk."""
    root = os.path.join(data, "shards")
    stamp = os.path.join(root, f".done-{shards}x{per_shard}")
    if os.path.exists(stamp):
        return root
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    import io

    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(5)
    blobs = []
    for _ in range(20):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(buf, "JPEG")
        blobs.append(buf.getvalue())
    for s in range(shards):
        with tarfile.open(os.path.join(root, f"train-{s:04d}.tar"), "w") as tar:
            for i in range(per_shard):
                n = s * per_shard + i
                for name, blob in ((f"{n:08d}.jpg", blobs[n % len(blobs)]),
                                   (f"{n:08d}.cls", str(n % 1000).encode())):
                    ti = tarfile.TarInfo(name)
                    ti.size = len(blob)
                    tar.addfile(ti, io.BytesIO(blob))
    open(stamp, "w").close()
    return root


def age(path: str) -> None:
    """Sets mtimes a minute back: stokerd does not cache an index of
    something that changed within the last 2 s."""
    past = time.time() - 60
    for d, dirs, files in os.walk(path):
        for f in dirs + files:
            os.utime(os.path.join(d, f), (past, past), follow_symlinks=False)
    os.utime(path, (past, past))


# ---------------------------------------------------------------------------
# 1. Indexing


def index_once(build: str, root: str, dataset: str, cache: str, n: int) -> Dict[str, Any]:
    import stoker
    d = Daemon(build, root, ["--workers", "1", "--index-cache", cache])
    try:
        rss0 = rss_kb(d.proc.pid)
        t0 = time.monotonic()
        s = d.client.attach(dataset, batch_size=16, pipeline={"size": 32}, ring_slots=2)
        attach_s = time.monotonic() - t0
        size = s.info["dataset_size"]
        rss1 = rss_kb(d.proc.pid)
        s.detach()
        text = d.log()
    finally:
        d.stop()
    assert size == n, (dataset, size)
    m = re.search(r"(indexed|loaded the cached index of) dataset .*? in ([0-9.]+) ms; index "
                  r"([0-9.]+) MB", text)
    progress = len(re.findall(r"indexing .*: \d+ entries so far", text))
    return dict(attach_s=attach_s, cached=m.group(1) != "indexed", index_ms=float(m.group(2)),
                heap_mb=float(m.group(3)), rss_growth_mb=(rss1 - rss0) / 1024,
                progress_lines=progress)


def indexing(build: str, data: str, quick: bool) -> List[Dict[str, Any]]:
    n_cls, per = (100, 100) if quick else (1000, 1000)
    shards, per_shard = (10, 1000) if quick else (100, 1000)
    base = os.path.join(data, "quick") if quick else data
    million = make_million(base, n_cls, per)
    sh = make_shards(base, shards, per_shard)
    manifest = os.path.join(base, "manifest_1m.tsv")
    age(million)
    age(sh)
    os.utime(manifest, (time.time() - 60, time.time() - 60))
    cases = [(f"ImageFolder, {n_cls:,} classes", million, ".", n_cls * per),
             ("manifest", data, os.path.relpath(manifest, data), 1_000_000),
             (f"WebDataset, {shards} shards", data,
              os.path.relpath(sh, data) + f"/train-{{0000..{shards - 1:04d}}}.tar",
              shards * per_shard)]
    out = []
    for label, root, rel, n in cases:
        cache = tempfile.mkdtemp(prefix="stkidx")
        try:
            first = index_once(build, root, rel, cache, n)
            second = index_once(build, root, rel, cache, n)
            size = sum(os.path.getsize(os.path.join(cache, f)) for f in os.listdir(cache))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        log(f"    {label}: {n} entries; index {first['index_ms'] / 1000:.2f} s, cached "
            f"{second['index_ms'] / 1000:.3f} s; stokerd RSS +{first['rss_growth_mb']:.0f} MB "
            f"/ +{second['rss_growth_mb']:.0f} MB")
        out.append(dict(label=label, entries=n, first=first, second=second,
                        cache_file_mb=size / 1e6))
    return out


# ---------------------------------------------------------------------------
# 2. Cold reads


def evict(root: str) -> None:
    for d, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError as e:
                log(f"!! cannot drop {root} from the page cache ({e}): these runs are warm")
                return
            finally:
                os.close(fd)


def cold_epoch(build: str, data: str, rel: str, args: List[str]) -> Dict[str, Any]:
    import stoker
    evict(os.path.join(data, rel))
    d = Daemon(build, data, ["--workers", "2"] + args)
    try:
        t0 = time.monotonic()
        n = 0
        with stoker.Loader(rel, socket=d.socket, batch_size=64, pipeline="train", size=224,
                           dtype="uint8", epochs=1, seed=1, client_name="cold") as ld:
            for _, labels in ld:
                n += len(labels)
            st = d.client.status()
            sess = [s for s in st["sessions"] if s["client_name"] == "cold"][0]
        dt = time.monotonic() - t0
    finally:
        d.stop()
    return dict(images_per_s=n / dt, read_p50_ms=sess["read"]["p50_ms"],
                read_p99_ms=sess["read"]["p99_ms"], read_mean_ms=sess["read"]["mean_ms"],
                stall_s=sess.get("client_wait_seconds", 0.0),
                readahead={k: st.get("readahead", {}).get(k) for k in
                           ("files_read", "cold_files", "files_cached", "late",
                            "window_bytes_max")})


def cold_reads(build: str, data: str, rounds: int, quick: bool) -> List[Dict[str, Any]]:
    rel = os.path.relpath(os.path.join(data, "quick" if quick else "", "imagenet_like"), data)
    configs = [("own disk", "readahead on", []),
               ("own disk", "readahead off", ["--readahead-mb", "0"]),
               ("5 ms per cold read", "readahead on", ["--simulate-read-latency-us", "5000"]),
               ("5 ms per cold read", "readahead off",
                ["--simulate-read-latency-us", "5000", "--readahead-mb", "0"])]
    runs: Dict[int, List[Dict[str, Any]]] = {i: [] for i in range(len(configs))}
    for r in range(rounds):
        for i, (disk, ra, args) in enumerate(configs):
            res = cold_epoch(build, data, rel, args)
            runs[i].append(res)
            log(f"    round {r + 1}/{rounds} {disk}, {ra}: {res['images_per_s']:.0f} images/s, "
                f"read p50 {res['read_p50_ms']} ms p99 {res['read_p99_ms']} ms")
    out = []
    for i, (disk, ra, args) in enumerate(configs):
        rs = runs[i]
        out.append(dict(disk=disk, readahead=ra,
                        images_per_s=statistics.median(x["images_per_s"] for x in rs),
                        min=min(x["images_per_s"] for x in rs),
                        max=max(x["images_per_s"] for x in rs),
                        read_p50_ms=statistics.median(x["read_p50_ms"] for x in rs),
                        read_p99_ms=statistics.median(x["read_p99_ms"] for x in rs),
                        read_mean_ms=statistics.median(x["read_mean_ms"] for x in rs),
                        readahead_stats=rs[-1]["readahead"]))
    return out


# ---------------------------------------------------------------------------


def write(path: str, idx: List[Dict[str, Any]], cold: List[Dict[str, Any]], rounds: int,
          elapsed: float) -> None:
    a = []
    a.append("# stoker at scale: indexing and cold reads\n")
    a.append(f"Generated by `bench/scale.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
             f" in {elapsed / 60:.1f} min, on {os.cpu_count()} CPUs "
             f"(load average at the end: {open('/proc/loadavg').read().split()[:3]}). "
             "Regenerated on every run.\n")
    a.append("## Indexing 1,000,000 entries\n")
    a.append("A fresh stokerd per row attaches the dataset: first with an empty index cache "
             "(it walks the tree, parses the manifest or reads every shard's headers, then "
             "writes the cache), then a second fresh daemon with the same cache (it checks "
             "the folders' or files' mtimes and maps the index). `index` is the daemon's own "
             "timing; RSS growth is stokerd's over the attach (the workers never hold the "
             "index: each task carries its path).\n")
    a.append("| dataset | entries | index (first) | attach (first) | stokerd RSS growth | "
             "index heap | index (cached) | RSS growth (cached) | cache file | progress lines |")
    a.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in idx:
        f, s = r["first"], r["second"]
        a.append(f"| {r['label']} | {r['entries']:,} | {f['index_ms'] / 1000:.2f} s | "
                 f"{f['attach_s']:.2f} s | +{f['rss_growth_mb']:.0f} MB | {f['heap_mb']:.0f} MB "
                 f"| {s['index_ms'] / 1000:.3f} s | +{s['rss_growth_mb']:.0f} MB | "
                 f"{r['cache_file_mb']:.0f} MB | {f['progress_lines']} |")
    a.append("")
    a.append("## Cold reads, with and without readahead\n")
    a.append("One epoch of the ImageNet-like set (2,000 JPEGs, ~100 KB), batch 64, train, "
             "uint8, 2 workers, the set dropped from the page cache before each run "
             "(`posix_fadvise(DONTNEED)`). Readahead: 16 I/O threads, 64 MiB budget (the "
             "defaults). '5 ms per cold read' adds `--simulate-read-latency-us 5000`: every "
             "read of data not in the page cache first sleeps 5 ms, in the workers and in "
             f"readahead alike, as network storage would. Medians of {rounds} runs "
             "[min-max]; read latency is the workers' (Status).\n")
    a.append("| storage | readahead | images/s | worker read p50 | read p99 | read mean |")
    a.append("|---|---|---|---|---|---|")
    for r in cold:
        a.append(f"| {r['disk']} | {r['readahead']} | {r['images_per_s']:.0f} "
                 f"[{r['min']:.0f}-{r['max']:.0f}] | {r['read_p50_ms']} ms | "
                 f"{r['read_p99_ms']} ms | {r['read_mean_ms']:.2f} ms |")
    a.append("")
    for disk in ("own disk", "5 ms per cold read"):
        on = [r for r in cold if r["disk"] == disk and r["readahead"] == "readahead on"][0]
        off = [r for r in cold if r["disk"] == disk and r["readahead"] == "readahead off"][0]
        a.append(f"- {disk}: readahead gives {on['images_per_s'] / off['images_per_s']:.2f}x "
                 f"the images/s; last run's readahead counters: {on['readahead_stats']}.")
    a.append("")
    with open(path, "w") as f:
        f.write("\n".join(a))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    sys.path.insert(0, os.path.join(build, "python"))
    data = os.path.abspath(args.data)
    make_data.make_all(data, quick=args.quick)
    t0 = time.monotonic()
    log("==> indexing 1,000,000 entries")
    idx = indexing(build, data, args.quick)
    log("==> cold reads")
    cold = cold_reads(build, data, 1 if args.quick else args.rounds, args.quick)
    out = os.path.join(HERE, "SCALE.md")
    write(out, idx, cold, 1 if args.quick else args.rounds, time.monotonic() - t0)
    with open(os.path.join(HERE, "out", "scale.json"), "w") as f:
        json.dump(dict(indexing=idx, cold=cold), f, indent=1)
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
