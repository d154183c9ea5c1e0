"""The benchmarks' harness: what every bench/*.py measures with.

One stokerd as a child (Daemon, on daemon_launcher.DaemonProcess, the test
suite's launcher too), the two sides' batch sources (DataLoaderSource,
StokerSource: the same files and transforms), measure() (a warm-up, then
timed batches with the producers' and the consumer's CPU from /proc),
side_by_side() (rounds in a rotated order, so drift hits every side alike),
and machine_info() (the CPU model and versions each report names).
bench.py re-exports these names, so ``bench.measure`` and the like work in
the other scripts as they always have. Nothing here asserts a timing.
"""
from __future__ import annotations

import gc
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from configs import BATCH, DL_PREFETCH, MEAN, RECIPE_OPS, RING_SLOTS, STD, WORKERS  # noqa: F401
from daemon_launcher import DaemonProcess, DaemonStartError

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


# ---------------------------------------------------------------------------
# The machine, as each report names it


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
