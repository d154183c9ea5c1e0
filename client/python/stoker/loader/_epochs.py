"""Loader's iteration: epochs, their iterators, and the waits for batches."""

from __future__ import annotations

import gc
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Iterator, Optional, Tuple


from .. import _native
from ._options import ConcurrentIterationError, Images
from ._torch import _torch_module
from ._views import BatchView

if TYPE_CHECKING:
    from ._loader import Loader


class _EpochsMixin:
    """Part of Loader (_loader.py): iteration over epochs."""

    # ------------------------------------------------------------------
    # Iteration

    def __iter__(self) -> Iterator[Tuple[Images, Any]]:
        """One epoch of (images, labels)."""
        self._check_process()
        return _EpochIterator(self, views=False)

    def iter_batches(self) -> Iterator[BatchView]:
        """One epoch of `BatchView` (images, labels, indices, epoch, ...)."""
        self._check_process()
        return _EpochIterator(self, views=True)

    def _live_iterator(self) -> Optional["_EpochIterator"]:
        """The iterator of the iteration under way, if it is still referenced
        and neither through its epoch nor ended by set_epoch and the like."""
        it = None if self._live is None else self._live()
        if it is None or it._ended or it._superseded or it._generation != self._generation:
            return None
        return it

    def _end_iteration(self) -> None:
        """set_epoch / load_state_dict: an open iterator ends (StopIteration)
        and the next iteration starts where they say."""
        self._in_epoch = None
        self._live = None
        self._generation += 1

    def _epoch_served(self, epoch: int) -> None:
        """All of `epoch`'s batches were yielded: the next iteration serves the next."""
        self._next_epoch, self._resume_batch = epoch + 1, 0
        self._in_epoch = None
        self._live = None

    def _begin_epoch(self, it: "_EpochIterator") -> Tuple[int, int, int]:
        """Makes `it` the iteration under way and positions the session at the
        epoch it serves; returns (epoch, first batch, generation)."""
        with self._lock:
            if self._closed:
                raise _native.StokerError("the loader is closed")
            prev = self._live_iterator()
            if prev is not None and prev is not it:
                if prev._thread is not threading.current_thread() and prev._thread.is_alive():
                    raise ConcurrentIterationError(
                        f"stoker.Loader: thread {prev._thread.name!r} is iterating this Loader "
                        f"and thread {threading.current_thread().name!r} started another "
                        "iteration. A Loader serves one iteration at a time: give each "
                        "thread its own Loader (they may share one daemon: the same socket=)")
                prev._superseded = True
            if self._in_epoch is not None:
                self._count_abandoned(self._in_epoch[0])
            self._follow_sampler()
            self.attach()
            self._generation += 1
            epoch, first = self._next_epoch, self._resume_batch
            if self.epochs is not None and epoch >= self.epochs:
                self._in_epoch = None
                self._live = None
                return epoch, first, self._generation
            if self._pin is None:
                self._pin = self._pinning()
            self._in_epoch = (epoch, first)
            self._live = weakref.ref(it)
            behind = epoch * self._bpe + first - self._next_global
            if behind > 0 and behind <= int(self._info["ring_slots"]) and self._session.held == 0:
                # set_epoch / load_state_dict went a little ahead: drop what is
                # probably already in the ring. (Not while one of its batches is
                # still alive: the slots that batch holds would come round
                # before the new epoch's first batches could.)
                for _ in range(behind):
                    try:
                        self._next_raw()
                    except _native.SampleError:
                        pass  # a failed batch nobody wants
            elif behind != 0:
                # Further ahead, or behind (an iteration stopped early and its
                # epoch is served again; set_epoch / load_state_dict went
                # back): restart the session there.
                self._reattach(epoch, first)
            return epoch, first, self._generation

    def _follow_sampler(self) -> None:
        """A DistributedSampler given: its set_epoch(e) since the last
        iteration is this loader's set_epoch(e)."""
        if self._sampler is None:
            return
        epoch = self._sampler.epoch
        if epoch != self._sampler_epoch:
            self._sampler_epoch = epoch
            self.set_epoch(epoch)

    def _count_abandoned(self, epoch: int) -> None:
        n = self._abandoned[epoch] = self._abandoned.get(epoch, 0) + 1
        if n >= 2 and not self._abandon_warned:
            self._abandon_warned = True
            warnings.warn(
                f"stoker.Loader: an iteration over epoch {epoch} stopped before the epoch's end "
                "again, so the next one serves epoch {epoch} again from where it began (a "
                "partly read epoch is not lost). A loop that stops early every epoch sees the "
                "same first batches each time: call loader.set_epoch(epoch) at the start of "
                "each epoch, as with DistributedSampler".replace("{epoch}", str(epoch)),
                RuntimeWarning, stacklevel=4)

    def _pinning(self) -> bool:
        """pin_memory=True: whether batches are copied to pinned memory (CUDA is
        present and batches are CPU tensors); warns once when it is not."""
        if not self.pin_memory or self._mode == "cuda":
            return False  # device='cuda' copies straight from the ring
        torch = _torch_module()
        if torch.cuda.is_available():
            return True
        warnings.warn(
            "stoker.Loader(pin_memory=True): no accelerator is found "
            "(torch.cuda.is_available() is False), so pinned memory is not used. With a GPU, "
            "device='cuda' copies each batch from the ring to the GPU with no pinned copy",
            RuntimeWarning, stacklevel=4)
        return False

    def _batches_left(self, epoch: int, first: int) -> int:
        """Batches an epoch yields from batch `first` on (none past the last)."""
        if self.epochs is not None and epoch >= self.epochs:
            return 0
        return max(0, self._bpe - first)

    def _wait(self) -> tuple:
        """The native wait for the next batch; under the PyTorch profiler it is
        the range "stoker.wait", so a trace shows data stalls where users look
        (a record_function costs ~15 us: entered only while profiling)."""
        assert self._session is not None
        torch = _torch_module()
        if torch.autograd._profiler_enabled():
            with torch.profiler.record_function("stoker.wait"):
                return self._session.next(self.timeout_ms)
        return self._session.next(self.timeout_ms)

    @property
    def _next_global(self) -> int:
        """The global batch number the session delivers next. Counted by the
        native session: a Ctrl-C that lands after it handed a batch out and
        before Python got it (the batch is lost with its lease) still counts
        it, so the next iteration sees it must reattach (_begin_epoch)."""
        s = self._session
        return self._session_origin + (0 if s is None else int(s.delivered))

    def _next_raw(self) -> tuple:
        assert self._session is not None
        try:
            return self._wait()
        except _native.RingExhaustedError:
            # Leases may be held only by garbage cycles: collect and retry once.
            gc.collect()
            return self._wait()


class _EpochIterator:
    """Iterates one epoch of a Loader (see Loader._begin_epoch)."""

    __slots__ = ("_loader", "_views", "_epoch", "_generation", "_left", "_started", "_batch",
                 "_thread", "_ended", "_superseded", "__weakref__")

    def __init__(self, loader: Loader, views: bool) -> None:
        self._loader = loader
        self._views = views
        self._started = False
        self._ended = False  # through its epoch, or ended by set_epoch and the like
        self._superseded = False  # a newer iteration of the loader began
        self._left = 0
        self._epoch = 0
        self._batch = 0  # the batch_in_epoch expected next
        self._generation = 0
        self._thread: Optional[threading.Thread] = None

    def __iter__(self) -> "_EpochIterator":
        return self

    def __next__(self) -> Any:
        ld = self._loader
        ld._check_process()
        if not self._started:
            # Attach and position at the first next(), as DataLoader starts its
            # workers: errors surface inside the for loop.
            self._thread = threading.current_thread()
            self._epoch, self._batch, self._generation = ld._begin_epoch(self)
            self._started = True
            self._left = ld._batches_left(self._epoch, self._batch)
        if self._superseded:
            raise ConcurrentIterationError(
                "stoker.Loader: this iterator was superseded by a newer iteration of the same "
                "Loader (iter() was called again before it was through its epoch). A Loader "
                "serves one iteration at a time; the newer one serves this epoch again")
        if (self._ended or self._left <= 0 or self._generation != ld._generation
                or ld._session is None):
            self._ended = True
            raise StopIteration
        try:
            raw = ld._next_raw()
        except _native.EndOfData:
            self._ended = True
            if self._generation == ld._generation:
                ld._epoch_served(self._epoch)
            raise StopIteration from None
        except _native.SampleError:
            self._advance(ld)  # that batch is gone; next() goes on with the following one
            raise
        if raw[4] != self._epoch or raw[5] != self._batch:
            raise _native.DataLossError(
                f"expected batch {self._batch} of epoch {self._epoch}, the ring gave batch "
                f"{raw[5]} of epoch {raw[4]}")
        self._advance(ld)
        return ld._make(raw, self._views)

    def _advance(self, ld: Loader) -> None:
        self._left -= 1
        self._batch += 1
        if self._generation != ld._generation:
            return
        with ld._lock:
            if self._left <= 0:  # the epoch's last batch: served, StopIteration or not
                self._ended = True
                ld._epoch_served(self._epoch)
            else:
                ld._in_epoch = (self._epoch, self._batch)

    def __len__(self) -> int:
        # Before the first next(): what this epoch will yield (attaching if
        # needed, as len(loader) does): the batches per epoch, less those a
        # restored state_dict skips; then what is left of it.
        if self._started:
            return self._left
        ld = self._loader
        ld.attach()  # for the batches per epoch, as len(loader)
        return ld._batches_left(ld._next_epoch, ld._resume_batch)
