"""torch, imported on first use (`import stoker` does not pay for it), and
the guard that keeps Ctrl-C from cutting that import in two."""

from __future__ import annotations

import signal
import threading
from typing import Any, List


_torch = None


def _torch_module():
    global _torch
    if _torch is None:
        with _interrupts_deferred():
            import torch  # noqa: PLC0415

        _torch = torch
    return _torch


class _interrupts_deferred:
    """Holds Ctrl-C back for the duration of a block that must not be cut in
    two: a KeyboardInterrupt inside a first ``import torch`` leaves torch
    half-imported for good (``name '_C' is not defined`` at the next import).
    On the main thread, SIGINT's Python handler is swapped for one that only
    notes it; the interrupt is raised (or the handler called) when the block
    ends. (Masking the signal would not do: any other thread may take it.)"""

    def __enter__(self) -> "_interrupts_deferred":
        self._caught: List[Any] = []
        self._old: Any = None
        if threading.current_thread() is threading.main_thread():
            try:
                self._old = signal.signal(signal.SIGINT,
                                          lambda *a: self._caught.append(a))
            except ValueError:  # not the main interpreter
                self._old = None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._old is None:
            return
        signal.signal(signal.SIGINT, self._old)
        if self._caught and exc[0] is None:
            if self._old is signal.default_int_handler:
                raise KeyboardInterrupt
            if callable(self._old):
                self._old(*self._caught[0])
