"""Private daemons: a `stokerd` a Loader starts for its own process.

When a Loader is given no daemon address (no ``socket=`` and no
``$STOKER_SOCKET``), it starts a stokerd of its own with the dataset's folder
as the data root, on a fresh owner-only socket, and stops it when the last
Loader using it closes, or at interpreter exit. The daemon also watches its
parent (``--parent-pid``): if the trainer dies without cleaning up (SIGKILL),
it drains and removes its rings and socket by itself within a second.

Loaders of one process that share a data root share one private daemon.
"""

from __future__ import annotations

import atexit
import collections
import functools
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Tuple, Union

from . import _native

#: Names the stokerd executable explicitly (overrides the search below).
STOKERD_ENV = "STOKERD"
#: The private daemon's log level when $STOKER_LOG_LEVEL does not name one.
PRIVATE_LOG_LEVEL_ENV = "STOKER_PRIVATE_LOG_LEVEL"


@functools.lru_cache(maxsize=None)
def daemon_flags() -> Dict[str, Dict[str, Any]]:
    """DaemonConfig field -> its row of ``_native.daemon_flags()`` (flag, env,
    type, default, ...): the daemon's own table, read once."""
    return {f["field"]: f for f in _native.daemon_flags()}


def daemon_args(**fields: Any) -> List[str]:
    """stokerd's flags for the DaemonConfig `fields` (``data_root="/x"`` is
    ``--data-root=/x``), spelled by the daemon's own table
    (proto/stoker/v1/config.proto, through ``_native.daemon_flags()``): no
    flag is spelled in Python. A name that is not a field is a TypeError."""
    table = daemon_flags()
    out = []
    for name, value in fields.items():
        f = table.get(name)
        if f is None:
            raise TypeError(f"stokerd has no setting {name!r} (proto/stoker/v1/config.proto)")
        if isinstance(value, bool):
            value = "on" if value else "off"
        elif isinstance(value, float):
            value = f"{value:g}"
        out.append(f"{f['flag']}={value}")
    return out



_log = logging.getLogger("stoker.daemon")
# Re-entrant: the garbage collector runs wherever it likes, and a Loader it
# finalizes while this thread holds the lock (in release(), say) releases its
# own daemon under it. (Inside acquire() releases are deferred: _acquiring.)
_lock = threading.RLock()
# Per thread: the releases that arrived while that thread was in acquire().
_acquiring = threading.local()
_daemons: Dict[Tuple[str, int], "PrivateDaemon"] = {}


def find_stokerd() -> str:
    """The stokerd executable: ``$STOKERD``, else ``bin/stokerd`` beside this
    module (a pip install or a build tree), else ``stokerd`` on PATH.

    Raises:
        DaemonUnavailableError: none is found.
    """
    env = os.environ.get(STOKERD_ENV)
    if env:
        if os.access(env, os.X_OK):
            return env
        raise _native.DaemonUnavailableError(f"${STOKERD_ENV}={env!r} is not an executable file")
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "stokerd")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("stokerd")
    if found:
        return found
    raise _native.DaemonUnavailableError(
        f"no stokerd daemon was given (socket=None and ${'STOKER_SOCKET'} unset) and none can be "
        f"started: no stokerd beside the stoker module ({here}), none on PATH and "
        f"${STOKERD_ENV} unset")


def rank_cpu_share() -> Optional[float]:
    """The CPUs of this rank's private daemon when several ranks share the
    CPUs this process may use (torchrun's ``LOCAL_WORLD_SIZE`` ranks on a node
    each start their own): its share, for ``stokerd --cpu-budget``. None when
    this rank has them to itself (one rank, or pinned already by numactl or
    SLURM --cpu-bind): stokerd then reads its cgroup and affinity itself."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        local_ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local_ranks = 1
    if local_ranks == 1 or cpus < (os.cpu_count() or cpus):
        return None
    return max(1.0, cpus / local_ranks)


def data_root_for(dataset: str, data_root: Optional[str] = None) -> Tuple[str, str]:
    """(data_root, dataset) for a private daemon. Without `data_root` the root
    is "/": the daemon runs as this user and reads only what the user can, so
    links into other trees, ``..`` entries and annotation files anywhere all
    resolve. `data_root` confines it; the dataset must lie beneath it."""
    if "{" in dataset:  # WebDataset shards: "dir/train-{0000..0099}.tar"
        head, _, tail = dataset.partition("{")
        folder = os.path.realpath(os.path.dirname(head) or ".")
        if not os.path.isdir(folder):
            raise _native.InvalidRequestError(f"dataset {dataset!r}: no folder {folder!r}")
        root, path = folder, os.path.join(folder, os.path.basename(head) + "{" + tail)
    else:
        path = os.path.realpath(dataset)
        if os.path.isdir(path):
            root = path
        elif os.path.exists(path):
            root = os.path.dirname(path)
        else:
            raise _native.InvalidRequestError(f"dataset {dataset!r} does not exist")
    if data_root is None:
        root = "/"
    else:
        wide = os.path.realpath(os.fspath(data_root))
        if not os.path.isdir(wide):
            raise _native.InvalidRequestError(f"data_root {data_root!r} is not a folder")
        if os.path.commonpath([wide, root]) != wide:
            raise _native.InvalidRequestError(
                f"dataset {dataset!r} does not lie beneath data_root {data_root!r}")
        root = wide
    return root, path


class PrivateDaemon:
    """One stokerd child process; use `acquire` / `release`, not this directly."""

    def __init__(self, data_root: str, workers: Union[int, str]) -> None:
        self.data_root = data_root
        self.workers = workers
        self.refs = 0
        self.owner_pid = os.getpid()
        self.proc: Optional[subprocess.Popen] = None
        self._tail: Deque[str] = collections.deque(maxlen=40)
        base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
        if not os.access(base, os.W_OK):
            base = tempfile.gettempdir()
        # A name no other process uses; the daemon creates it mode 0600 and
        # removes it on exit (Unix socket paths stay under 108 bytes).
        self.socket = os.path.join(base, f"stoker-{os.getpid()}-{os.urandom(4).hex()}.sock")
        if len(self.socket) > 100:
            self.socket = os.path.join("/tmp", os.path.basename(self.socket))

    def start(self, timeout_s: float = 60.0) -> None:
        exe = find_stokerd()
        # What this daemon must be; then what the trainer's environment does
        # not set (STOKER_<NAME>, read by --from-env: any stokerd setting,
        # README "Private daemon"); the environment's value wins over these.
        fields: Dict[str, Any] = dict(socket=self.socket, data_root=self.data_root,
                                      workers=self.workers, parent_pid=os.getpid())
        soft: Dict[str, Any] = dict(log_level=os.environ.get(PRIVATE_LOG_LEVEL_ENV, "warn"))
        share = rank_cpu_share() if self.workers == "auto" else None
        if share is not None:
            soft["cpu_budget"] = share
        fields.update({k: v for k, v in soft.items()
                       if daemon_flags()[k]["env"] not in os.environ})
        cmd = [exe, "--from-env", *daemon_args(**fields)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, close_fds=True,
                                     start_new_session=True)  # Ctrl-C reaches the trainer only
        threading.Thread(target=self._pump, name="stokerd-log", daemon=True).start()
        try:
            self._wait_healthy(exe, timeout_s)
        except BaseException:
            self.stop()  # a timeout, a daemon that died, or Ctrl-C: none left behind
            raise
        _log.info("started a private stokerd (pid %d, workers %s) for %s", self.proc.pid,
                  self.workers, self.data_root)

    def _wait_healthy(self, exe: str, timeout_s: float) -> None:
        assert self.proc is not None
        client = _native.Client(self.socket, 2000)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise _native.DaemonUnavailableError(f"the private stokerd ({exe}) exited with "
                                   f"{self.proc.returncode} while starting:\n{self.log_tail()}")
            if os.path.exists(self.socket):
                try:
                    client.health()
                    break
                except _native.StokerError:
                    pass
            if time.monotonic() > deadline:
                raise _native.DaemonUnavailableError(f"the private stokerd ({exe}) did not become healthy within "
                                   f"{timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(0.02)

    def _pump(self) -> None:
        """Forwards the daemon's log lines (warnings and errors) to logging."""
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self._tail.append(line)
            level = (logging.ERROR if (" error " in line or " critical " in line)
                     else logging.WARNING if " warning " in line else logging.INFO)
            _log.log(level, "%s", line)

    def log_tail(self) -> str:
        return "\n".join(self._tail) or "(no output)"

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (the daemon removes its rings and socket), then SIGKILL."""
        if os.getpid() != self.owner_pid:
            return  # a forked child: the daemon belongs to the parent
        p, self.proc = self.proc, None
        if p is None:
            return
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p.stderr is not None:
            p.stderr.close()
        try:  # normally gone already; after a SIGKILL it is ours to remove
            os.unlink(self.socket)
        except OSError:
            pass


def acquire(dataset: str, workers: Optional[int],
            data_root: Optional[str] = None) -> Tuple[PrivateDaemon, str]:
    """The private daemon for `dataset` (started if needed) and the dataset
    path to attach with; pair with `release`."""
    root, path = data_root_for(dataset, data_root)
    # None: stokerd --workers auto (it sizes its pool to the trainer).
    n: Union[int, str] = "auto" if workers is None else int(workers)
    if n != "auto" and int(n) < 1:
        raise _native.InvalidRequestError(f"num_workers must be at least 1, got {workers}")
    # The garbage collector may finalize a Loader anywhere in here, and its
    # release() would re-enter the lock: releases wait until this acquire has
    # counted its reference, so that none stops the daemon being handed out.
    _acquiring.pending = []
    try:
        with _lock:
            d = _daemons.get((root, n))
            if d is None or d.proc is None or d.proc.poll() is not None:
                d = PrivateDaemon(root, n)
                d.start()
                _daemons[(root, n)] = d
            d.refs += 1
    finally:
        pending, _acquiring.pending = _acquiring.pending, None
        for p in pending:
            release(p)
    return d, path


def release(daemon: PrivateDaemon) -> None:
    """Drops one reference; the last one stops the daemon."""
    if getattr(_acquiring, "pending", None) is not None:
        _acquiring.pending.append(daemon)  # inside acquire() on this thread
        return
    with _lock:
        daemon.refs -= 1
        if daemon.refs > 0:
            return
        for k, v in list(_daemons.items()):
            if v is daemon:
                del _daemons[k]
    daemon.stop()


def running() -> List[PrivateDaemon]:
    """The private daemons of this process (for tests and diagnosis)."""
    with _lock:
        return list(_daemons.values())


@atexit.register
def _stop_all() -> None:
    with _lock:
        ds = list(_daemons.values())
        _daemons.clear()
    for d in ds:
        d.stop()
