"""Fixtures shared by every Python test of stoker.

Run:  STOKER_BUILD_DIR=/work/main/build /usr/bin/python3 -m pytest -q tests/python

Fixtures (function scope unless said otherwise):
    stoker          (session) the `stoker` module, imported from the build.
    build_dir       (session) the CMake build folder: $STOKER_BUILD_DIR, else
                    <repo>/build. Skips the test when stokerd, stoker-worker,
                    stokerctl or the Python module are missing. Puts
                    <build>/python first on sys.path so `import stoker` works.
    make_dataset    the `make_dataset` function below (writes real JPEGs).
    tmp_short       a fresh short directory under /tmp (Unix socket paths
                    must stay under 107 bytes; pytest's tmp_path may not).
    daemon_factory  starts real daemons: ``daemon_factory(workers=2,
                    data_root=None, extra_args=())`` -> `Daemon`; every daemon
                    still running at teardown is stopped cleanly (asserted).
    daemon          one running daemon (2 workers) with an empty data root.
    video_tool      (session) the path of the build's stoker-video-tool.
    volume_tool     (session) the path of the build's stoker-volume-tool.

Helpers importable from here (``from conftest import ...``): make_dataset,
write_jpeg, imagefolder_samples, samples_in_order, read_terminal, Daemon,
start_daemon, stoker_shm_objects.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import pytest

# The transcode cache is on by default, in ~/.cache: the private daemons of
# the tests run without it unless a test sets this itself.
os.environ.setdefault("STOKER_TRANSCODE_CACHE", "off")
from PIL import Image

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bench"))
from daemon_launcher import DaemonProcess, DaemonStartError  # noqa: E402  (one launcher)

# Daemons the tests start without --index-cache (private daemons, examples)
# cache dataset indexes under $XDG_CACHE_HOME: keep that out of the user's home.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="stoker-test-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)

# A test that hangs longer than this dumps every thread's stack and ends the
# run (better than a CI job that times out without a word).
HANG_GUARD_S = float(os.environ.get("STOKER_TEST_HANG_GUARD_S", "120"))


# ---------------------------------------------------------------------------
# Build folder


def find_build_dir() -> str:
    return os.path.abspath(os.environ.get("STOKER_BUILD_DIR") or os.path.join(REPO, "build"))


def _missing_binaries(build: str) -> List[str]:
    need = [os.path.join(build, "bin", "stokerd"),
            os.path.join(build, "bin", "stoker-worker"),
            os.path.join(build, "bin", "stokerctl")]
    missing = [p for p in need if not os.access(p, os.X_OK)]
    pkg = os.path.join(build, "python", "stoker")
    if not os.path.isdir(pkg) or not any(f.startswith("_native") for f in os.listdir(pkg)):
        missing.append(os.path.join(pkg, "_native*.so"))
    return missing


@pytest.fixture(scope="session")
def build_dir() -> str:
    build = find_build_dir()
    missing = _missing_binaries(build)
    if missing:
        pytest.skip(f"stoker is not built in {build} (missing {', '.join(missing)}); "
                    "build it or set STOKER_BUILD_DIR")
    py = os.path.join(build, "python")
    if py not in sys.path:
        sys.path.insert(0, py)
    return build


def _built_tool(build_dir, name) -> str:
    """The path of the build's executable `name`; skips when it is not built."""
    path = os.path.join(build_dir, "bin", name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not built")
    return path


@pytest.fixture(scope="session")
def volume_tool(build_dir) -> str:
    """The build's stoker-volume-tool (server/volume/ without a daemon)."""
    return _built_tool(build_dir, "stoker-volume-tool")


@pytest.fixture(scope="session")
def video_tool(build_dir) -> str:
    """The build's stoker-video-tool (server/video/ without a daemon)."""
    return _built_tool(build_dir, "stoker-video-tool")


@pytest.fixture(scope="session")
def stoker(build_dir):
    """The `stoker` module of the build (modules may override this fixture)."""
    import stoker as mod
    return mod


@pytest.fixture(autouse=True)
def _hang_guard():
    faulthandler.dump_traceback_later(HANG_GUARD_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def tmp_short():
    d = tempfile.mkdtemp(prefix="stk", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------
# Datasets

# One noise field, reused by every image (sliced at random offsets): drawing
# fresh Gaussian noise per image would dominate the time to make a dataset.
_NOISE: Optional[np.ndarray] = None


def _noise() -> np.ndarray:
    global _NOISE
    if _NOISE is None:
        _NOISE = np.random.default_rng(1234).normal(0, 10, (520, 520, 3)).astype(np.float32)
    return _NOISE


def photo_like(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """An h x w x 3 uint8 image with gradients, a few soft discs and noise."""
    y = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None, None]
    x = np.linspace(0.0, 1.0, w, dtype=np.float32)[None, :, None]
    c0 = rng.uniform(40, 200, 3).astype(np.float32)
    cx = rng.uniform(-90, 90, 3).astype(np.float32)
    cy = rng.uniform(-90, 90, 3).astype(np.float32)
    img = c0 + cx * x + cy * y
    freq = np.float32(rng.uniform(2, 12))
    img = img + np.float32(25) * np.sin(freq * (x + 0.5 * y) * np.float32(np.pi))
    for _ in range(int(rng.integers(1, 4))):
        py, px, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.08, 0.35)
        d2 = (y - py) ** 2 + (x - px) ** 2
        m = np.clip(1.0 - d2 / np.float32(r * r), 0, 1)
        img = img * (1 - 0.7 * m) + m * (0.7 * rng.uniform(0, 255, 3).astype(np.float32))
    n = _noise()
    oy, ox = int(rng.integers(0, n.shape[0] - h + 1)), int(rng.integers(0, n.shape[1] - w + 1))
    img = img + n[oy:oy + h, ox:ox + w]
    return np.clip(img, 0, 255).astype(np.uint8)


# JPEG flavours, as PIL's `subsampling` spells them.
SUBSAMPLING = {"444": 0, "422": 1, "420": 2}


def write_jpeg(path: str, img: np.ndarray, *, subsampling: str = "420", quality: int = 90,
               progressive: bool = False, gray: bool = False) -> None:
    """Writes `img` (h x w x 3 uint8) as a JPEG of the given flavour."""
    im = Image.fromarray(img)
    if gray:
        im = im.convert("L")
        im.save(path, "JPEG", quality=quality, progressive=progressive)
    else:
        im.save(path, "JPEG", quality=quality, subsampling=SUBSAMPLING[subsampling],
                progressive=progressive)


def make_dataset(root: str, classes: int = 3, per_class: int = 10,
                 sizes: Tuple[int, int] = (64, 400), seed: int = 0,
                 flavours: Optional[Sequence[Dict]] = None,
                 class_prefix: str = "class_") -> List[Tuple[str, int]]:
    """Writes an ImageFolder tree root/<class>/img_NNNN.jpg of real JPEGs.

    Sizes are drawn per side in [sizes[0], sizes[1]]; content is photo-like;
    quality (60..95), chroma subsampling (4:2:0 mostly, 4:2:2, 4:4:4), and
    progressive/grayscale coding vary per file. `flavours`: cycle through
    these write_jpeg keyword sets instead (e.g. [{"subsampling": "444"},
    {"gray": True}]). Returns [(path, class_index)] in torchvision
    ImageFolder's order (sorted classes, sorted files), i.e. stoker's dataset
    index order. Fast: ~300 images of up to 400 px per second or more.
    """
    rng = np.random.default_rng(seed)
    lo, hi = sizes
    out: List[Tuple[str, int]] = []
    n = 0
    for k in range(classes):
        d = os.path.join(root, f"{class_prefix}{k:02d}")
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            h, w = int(rng.integers(lo, hi + 1)), int(rng.integers(lo, hi + 1))
            if flavours:
                kw = dict(flavours[n % len(flavours)])
            else:
                r = rng.random()
                kw = {"subsampling": "420" if r < 0.6 else "422" if r < 0.8 else "444",
                      "progressive": bool(rng.random() < 0.15),
                      "gray": bool(rng.random() < 0.05)}
            kw.setdefault("quality", int(rng.integers(60, 96)))
            p = os.path.join(d, f"img_{i:04d}.jpg")
            write_jpeg(p, photo_like(rng, h, w), **kw)
            out.append((p, k))
            n += 1
    return out


def imagefolder_samples(root: str) -> List[Tuple[str, int]]:
    """torchvision.datasets.ImageFolder(root).samples (imported lazily)."""
    from torchvision.datasets import ImageFolder
    return list(ImageFolder(root).samples)



def samples_in_order(stoker, socket: str, dataset: str, before_detach=None,
                     **attach) -> List[Tuple[np.ndarray, int]]:
    """Every sample of one unshuffled epoch, batch 1: [(pixels, label)], each
    pixel array a copy (its slot goes back at once); every sample must be ok.
    `attach`: Client.attach's options (``pipeline={...}``: the keywords).
    `before_detach`: called after the last batch, the session still attached
    (e.g. to read its status)."""
    s = stoker.Client(socket).attach(dataset, batch_size=1, shuffle=False, epochs=1, **attach)
    out = []
    try:
        while True:
            try:
                raw = s.next(30000)
            except stoker.EndOfData:
                break
            fields, statuses = raw[0], raw[3]
            images, labels = fields["image"][0], fields["label"][0]
            assert statuses.tolist() == [0], f"sample {len(out)} of {dataset}: {statuses}"
            out.append((np.array(images[0]), int(labels[0])))
        if before_detach is not None:
            before_detach()
    finally:
        s.detach()
    return out


def read_terminal(master: int, timeout_s: float = 20) -> bytes:
    """What a child wrote to the pty whose master end is `master`, until it
    closed its end (or `timeout_s` passed)."""
    out = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    return out


@pytest.fixture(name="make_dataset")
def make_dataset_fixture():
    return make_dataset


# ---------------------------------------------------------------------------
# Daemons


def stoker_shm_objects() -> List[str]:
    """Names in /dev/shm a stokerd could have made (rings are memfds now,
    named nowhere: this stays empty)."""
    try:
        return sorted(f for f in os.listdir("/dev/shm") if f.startswith("stoker-"))
    except FileNotFoundError:
        return []


def ring_mapping(ring_name: str, pid: str = "self") -> Optional[Tuple[int, int]]:
    """(start, end) of a process's mapping of the ring labelled `ring_name`
    ("memfd:stoker-<session>"), or None."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5] == "/" + ring_name:
                lo, hi = parts[0].split("-")
                return int(lo, 16), int(hi, 16)
    return None


def ring_fd_path(pid: int, ring_name: str) -> Optional[str]:
    """/proc/PID/fd/N of the daemon's fd of the ring `ring_name`, or None
    (os.stat through it reads the memfd's size and allocated blocks)."""
    fds = f"/proc/{pid}/fd"
    for n in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, n)).startswith("/" + ring_name + " "):
                return os.path.join(fds, n)
        except OSError:
            pass
    return None


def _children(pid: int) -> List[int]:
    kids: List[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(cond, timeout_s: float, what: str, interval_s: float = 0.02):
    """Polls `cond()` until truthy; returns its value or fails after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


class Daemon(DaemonProcess):
    """A real stokerd started as this process's child (bench/daemon_launcher.py's
    DaemonProcess, the benchmarks' launcher too), with the tests' defaults: an
    index cache of its own in `workdir` (never the user's ~/.cache), no
    transcode cache, no decode calibration. A failed start fails the test;
    stop() asserts a clean exit.

    Attributes: socket, data_root, workdir, log_path, proc, pid, build_dir.
    """

    def __init__(self, build_dir: str, workdir: str, data_root: str, workers: int = 2,
                 extra_args: Iterable[str] = ()) -> None:
        super().__init__(build_dir, data_root, workdir,
                         settings=dict(workers=workers, index_cache=os.path.join(workdir, "index")),
                         extra_args=extra_args)
        self.workers = workers
        self.stopped = False

    def start(self, timeout_s: float = 30.0) -> "Daemon":
        os.makedirs(self.data_root, exist_ok=True)
        try:
            super().start(timeout_s)
        except DaemonStartError as e:
            pytest.fail(str(e))
        return self

    def own_shm_objects(self) -> List[str]:
        """The /dev/shm objects of this daemon's rings ("stoker-<tag>-<pid>-<n>")."""
        pat = re.compile(rf"^stoker-[0-9a-f]+-{self.pid}-\d+$")
        return [f for f in stoker_shm_objects() if pat.match(f)]

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM; asserts a clean exit (code 0, socket and rings removed)."""
        if self.proc is None or self.stopped:
            return
        self.stopped = True
        rc = super().stop(timeout_s)  # None: it had to be killed
        if rc is None:
            pytest.fail(f"stokerd did not exit within {timeout_s} s of SIGTERM\n{self.log_tail()}")
        assert rc == 0, f"stokerd exited with {rc}\n{self.log_tail()}"
        assert not os.path.exists(self.socket), f"stokerd left its socket\n{self.log_tail()}"
        left = self.own_shm_objects()
        assert not left, f"stokerd left shm objects {left}\n{self.log_tail()}"

    def kill(self, timeout_s: float = 10.0) -> None:
        """SIGKILL, then waits for its workers to go; removes the rings it left."""
        if self.proc is None or self.stopped:
            return
        self.stopped = True
        workers = _children(self.pid)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=timeout_s)
        deadline = time.monotonic() + timeout_s
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.02)
        stuck = [p for p in workers if _alive(p)]
        for p in stuck:  # our daemon's workers, orphaned: do not leak them
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for f in self.own_shm_objects():
            try:
                os.unlink(os.path.join("/dev/shm", f))
            except FileNotFoundError:
                pass
        try:
            os.unlink(self.socket)
        except FileNotFoundError:
            pass
        assert not stuck, f"workers {stuck} outlived their killed daemon"


def start_daemon(build_dir: str, workdir: Optional[str] = None, data_root: Optional[str] = None,
                 workers: int = 2, extra_args: Iterable[str] = ()) -> Daemon:
    """Starts a daemon in `workdir` (default: a new /tmp/stk* dir) and waits until healthy."""
    workdir = workdir or tempfile.mkdtemp(prefix="stk", dir="/tmp")
    data_root = data_root or os.path.join(workdir, "data")
    return Daemon(build_dir, workdir, data_root, workers, extra_args).start()


class DaemonFactory:
    def __init__(self, build_dir: str) -> None:
        self.build_dir = build_dir
        self.daemons: List[Daemon] = []
        self.dirs: List[str] = []

    def __call__(self, workers: int = 2, data_root: Optional[str] = None,
                 extra_args: Iterable[str] = ()) -> Daemon:
        workdir = tempfile.mkdtemp(prefix="stk", dir="/tmp")
        self.dirs.append(workdir)
        d = Daemon(self.build_dir, workdir, data_root or os.path.join(workdir, "data"), workers,
                   extra_args)
        self.daemons.append(d)
        return d.start()

    def close(self) -> None:
        errors = []
        for d in self.daemons:
            try:
                d.stop()
            except BaseException as e:  # stop the others too; report all
                errors.append(e)
        for w in self.dirs:
            shutil.rmtree(w, ignore_errors=True)
        if errors:
            raise errors[0]


@pytest.fixture
def daemon_factory(build_dir):
    f = DaemonFactory(build_dir)
    yield f
    f.close()


@pytest.fixture
def daemon(daemon_factory):
    return daemon_factory(workers=2)


@pytest.fixture(scope="module")
def module_daemon_factory(build_dir):
    """Like daemon_factory, shared by the tests of one module (faster)."""
    f = DaemonFactory(build_dir)
    yield f
    f.close()
