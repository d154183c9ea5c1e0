"""`stoker.Client`: a connection to one stokerd, for status, health and raw sessions."""

from __future__ import annotations

import base64
import json
import os
from typing import Any, Dict, Mapping, Optional, Union

from . import _native

#: The environment variable naming the daemon's socket when none is given.
SOCKET_ENV = "STOKER_SOCKET"


def _exact_names(status: Dict[str, Any]) -> None:
    """File-system names that are not UTF-8 come in the status as a display
    form (their bad bytes as \\xNN) beside their bytes (base64 in JSON): the
    name becomes the str os.fsdecode makes of the bytes, as os.listdir and
    torchvision give it (os.fsencode gives the bytes back)."""
    def fix(obj: Dict[str, Any], key: str) -> None:
        raw = obj.pop(key + "_bytes", None)
        if raw:  # (JSON gives every field: "" when the name is UTF-8)
            obj[key] = os.fsdecode(base64.b64decode(raw))

    for s in status.get("sessions", ()):
        fix(s, "dataset")
        for f in s.get("failures", ()):
            fix(f, "path")
    for d in status.get("dataset_failures", ()):
        fix(d, "dataset")
        for f in d.get("failures", ()):
            fix(f, "path")


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

        ``config`` is the daemon's effective configuration (stoker.v1.DaemonConfig,
        proto/stoker/v1/config.proto: one field per stokerd flag; ``workers`` 0
        is auto). Raises DaemonUnavailableError when the daemon cannot be
        reached.
        """
        d = json.loads(self._native.status_json(include_failures))
        _exact_names(d)
        return d

    def health(self) -> bool:
        """True when the daemon answers and reports SERVING, else False."""
        try:
            self._native.health()
            return True
        except _native.StokerError:
            return False

    def attach(self, dataset: str, pipeline: Union[Mapping[str, Any], str, None] = None,
               **options: Any) -> _native.Session:
        """A raw session (numpy, no torch): see `stoker.Session.next`.

        Args:
            pipeline: the pipeline keywords (pipeline/pipeline_spec.h), a
                dict such as ``{"pipeline": "eval", "size": 32, "dtype":
                "float32"}`` or ``{"ops": [{"RandomCrop": {"size": [32]}}]}``,
                or that object as JSON text. None: ``{}``, the train preset at
                224 x 224, uint8 NHWC. The daemon's effective pipeline is in
                ``session.info["effective_pipeline_json"]``.
            options: the other AttachOptions of the C++ client, spelled in
                snake_case (``batch_size``, ``epochs`` (0: without end),
                ``seed``, ``shuffle``, ``ring_slots``, ...).

        Raises InvalidRequestError for a bad keyword, op or option. Most users
        want `stoker.Loader` instead.
        """
        if pipeline is not None and not isinstance(pipeline, str):
            pipeline = json.dumps(dict(pipeline))
        return self._native.attach(os.fspath(dataset), pipeline_json=pipeline, **options)

    def __repr__(self) -> str:
        return f"stoker.Client({self.socket!r})"
