"""`stoker.Client`: a connection to one stokerd, for status, health and raw sessions."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

from . import _native

#: The environment variable naming the daemon's socket when none is given.
SOCKET_ENV = "STOKER_SOCKET"


def resolve_socket(socket: Optional[str]) -> str:
    """Returns `socket`, or ``$STOKER_SOCKET`` when it is None.

    Raises:
        InvalidRequestError: neither is set.
    """
    if socket:
        return os.fspath(socket)
    env = os.environ.get(SOCKET_ENV)
    if env:
        return env
    raise _native.InvalidRequestError(
        "no stokerd socket: pass socket='/path/to/stoker.sock' or set the "
        f"{SOCKET_ENV} environment variable (start a daemon with "
        "`stokerd --socket PATH --data-root DIR`)")


class Client:
    """A connection to one stokerd. Thread-safe; connects lazily.

    Args:
        socket: the daemon's Unix socket path (or ``unix:PATH``); None means
            ``$STOKER_SOCKET``.
        rpc_timeout_ms: deadline of each control RPC (0: 30 s).
    """

    def __init__(self, socket: Optional[str] = None, *, rpc_timeout_ms: int = 0) -> None:
        self.socket: str = resolve_socket(socket)
        self._native = _native.Client(self.socket, rpc_timeout_ms)

    def status(self, include_failures: bool = False) -> Dict[str, Any]:
        """The daemon's status (stoker.v1.StatusResponse) as a dict.

        ``config_json`` is parsed into ``config``. Raises DaemonUnavailableError
        when the daemon cannot be reached.
        """
        d = json.loads(self._native.status_json(include_failures))
        cfg = d.get("config_json")
        if cfg:
            try:
                d["config"] = json.loads(cfg)
            except ValueError:
                pass
        return d

    def health(self) -> bool:
        """True when the daemon answers and reports SERVING, else False."""
        try:
            self._native.health()
            return True
        except _native.StokerError:
            return False

    def attach(self, dataset: str, **options: Any) -> _native.Session:
        """A raw session (numpy, no torch): see `stoker.Session.next`.

        Options are those of the C++ AttachOptions, spelled in snake_case
        (``batch_size``, ``pipeline``, ``height``, ``width``, ``dtype``,
        ``layout``, ``epochs`` (0: without end), ``seed``, ...). Most users
        want `stoker.Loader` instead.
        """
        return self._native.attach(os.fspath(dataset), **options)

    def __repr__(self) -> str:
        return f"stoker.Client({self.socket!r})"
