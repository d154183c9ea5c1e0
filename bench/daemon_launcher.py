"""One stokerd launcher for the benchmarks (bench/*.py) and the test suite's
fixtures (tests/python/conftest.py): a real daemon as this process's child,
in a folder of its own.

Settings are DaemonConfig's field names (proto/stoker/v1/config.proto), turned
into flags by the daemon's own table (stoker._private.daemon_args): no flag is
spelled here. `extra_args` are flags as a caller writes them (tests of the
flags themselves).

    d = DaemonProcess(build, data_root, workdir, settings=dict(workers=2))
    d.start()            # healthy, or DaemonStartError with the log's tail
    ...
    rc = d.stop()        # SIGTERM, the exit status (SIGKILL after the timeout)

Needs `import stoker` to work (its build's python/ folder on sys.path).
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from typing import Any, Dict, Iterable, List, Optional


class DaemonStartError(RuntimeError):
    """stokerd exited while starting, or was not healthy in time."""


#: What every daemon started here runs with unless told otherwise: no
#: transcode or prepared cache (both on by default, in ~/.cache; measured and
#: tested on their own), no start-up decode calibration (measured afresh it could differ
#: between two daemons compared).
DEFAULT_SETTINGS: Dict[str, Any] = dict(transcode_cache="off", prepared_cache="off",
                                        decode_calibration=False)


class DaemonProcess:
    """stokerd started as this process's child.

    Attributes: build_dir, data_root, workdir, socket, log_path, proc, pid,
    stokerd, stokerctl.
    """

    def __init__(self, build_dir: str, data_root: str, workdir: str,
                 settings: Optional[Dict[str, Any]] = None, extra_args: Iterable[str] = (),
                 log_path: Optional[str] = None) -> None:
        self.build_dir = build_dir
        self.data_root = data_root
        self.workdir = workdir
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self.extra_args = list(extra_args)
        self.socket = os.path.join(workdir, "s.sock")
        self.log_path = log_path or os.path.join(workdir, "stokerd.log")
        self.stokerd = os.path.join(build_dir, "bin", "stokerd")
        self.stokerctl = os.path.join(build_dir, "bin", "stokerctl")
        self.proc: Optional[subprocess.Popen] = None
        self.pid = 0
        if len(self.socket) >= 100:
            raise ValueError(f"socket path too long for a Unix socket: {self.socket}")

    def command(self) -> List[str]:
        """The command line: settings (a flag given in extra_args wins), then
        extra_args, then $STOKER_TEST_DAEMON_ARGS (e.g. --no-worker-sandbox
        under ASan, scripts/sanitize.sh)."""
        from stoker import _private
        flags = _private.daemon_flags()
        given = {a.split("=", 1)[0] for a in self.extra_args if a.startswith("--")}
        settings = {k: v for k, v in self.settings.items()
                    if k not in flags or  # daemon_args names the unknown setting
                    not {flags[k]["flag"], "--no-" + flags[k]["flag"][2:]} & given}
        return [self.stokerd,
                *_private.daemon_args(socket=self.socket, data_root=self.data_root, **settings),
                *self.extra_args,
                *shlex.split(os.environ.get("STOKER_TEST_DAEMON_ARGS", ""))]

    def start(self, timeout_s: float = 30.0) -> "DaemonProcess":
        os.makedirs(self.workdir, exist_ok=True)
        cmd = self.command()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         close_fds=True)
        self.pid = self.proc.pid
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise DaemonStartError(f"stokerd exited with {self.proc.returncode} while "
                                       f"starting\n{self.log_tail()}")
            if os.path.exists(self.socket) and self.health():
                return self
            if time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                raise DaemonStartError(f"stokerd not healthy within {timeout_s} s\n"
                                       f"{self.log_tail()}")
            time.sleep(0.05)

    def health(self) -> bool:
        r = subprocess.run([self.stokerctl, "health", "--socket", self.socket],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        return r.returncode == 0

    def ctl(self, *args: str, timeout_s: float = 30) -> subprocess.CompletedProcess:
        """Runs `stokerctl ARGS --socket <ours>`; the completed process (text)."""
        return subprocess.run([self.stokerctl, *args, "--socket", self.socket],
                              capture_output=True, text=True, timeout=timeout_s)

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        text = self.log().splitlines()[-lines:]
        return "---- stokerd log (" + self.log_path + ") ----\n" + "\n".join(text)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 30.0) -> Optional[int]:
        """SIGTERM and wait; SIGKILL past `timeout_s`. The exit status (None
        when it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
