"""Loader's position: set_epoch, and the state_dict token that resumes a
run exactly where it stood."""

from __future__ import annotations

from typing import Any, Dict

from .. import _native


class _ResumeMixin:
    """Part of Loader (_loader.py): the epoch to serve next, and resume."""

    # ------------------------------------------------------------------
    # Epochs and resume

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration serve `epoch` (DistributedSampler.set_epoch).

        Iterating already serves epochs 0, 1, 2, ... in turn, so calling this
        each epoch is harmless. Setting the epoch that a `load_state_dict`
        is about to resume keeps the resume position; any other epoch starts
        at its first batch.
        """
        epoch = int(epoch)
        if epoch < 0:
            raise _native.InvalidRequestError(f"epoch must be >= 0, got {epoch}")
        with self._lock:
            if epoch != self._next_epoch:
                self._next_epoch = epoch
                self._resume_batch = 0
            self._end_iteration()  # an iterator still open ends

    def state_dict(self) -> Dict[str, Any]:
        """Where the loader stands: a small JSON-able token for `load_state_dict`.

        Taken inside the loop over an epoch it points at the batch after the
        last one yielded; taken between epochs, at the next epoch's first
        batch; after an iteration stopped early (a ``break``, a peek), where
        the next iteration starts: that epoch again, from where the stopped
        iteration began. Ranks iterate in step, so rank 0's token restores
        every rank.
        """
        if not self._seed_known:
            self._draw_seed()  # the token must name the seed the run will use
        if self._in_epoch is not None and self._live_iterator() is not None:
            epoch, batch = self._in_epoch
        else:
            epoch, batch = self._next_epoch, self._resume_batch
        if self._bpe and batch >= self._bpe:
            epoch, batch = epoch + 1, 0
        o = self._options
        return {"stoker_loader": 1, "seed": int(o["seed"]), "epoch": int(epoch),
                "batch": int(batch), "batch_size": int(o["batch_size"]),
                "world_size": int(o["world_size"]), "shuffle": bool(o["shuffle"]),
                "drop_last": bool(o["drop_last"]),
                "dataset_size": None if self._info is None else int(self._info["dataset_size"])}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores a `state_dict` token: the next iteration continues exactly
        where the saved loader stood (the rest of that epoch, then the next
        ones), the same batches pixel for pixel.

        Raises InvalidRequestError if the token does not fit this loader
        (another batch size, world size, shuffle or drop_last; or, at attach,
        a dataset whose size changed).
        """
        if not isinstance(state, dict) or state.get("stoker_loader") != 1:
            raise _native.InvalidRequestError(
                f"load_state_dict: not a stoker.Loader state: {state!r}")
        o = self._options
        for key in ("batch_size", "world_size", "shuffle", "drop_last"):
            if key in state and state[key] != o[key]:
                raise _native.InvalidRequestError(
                    f"load_state_dict: the state was saved with {key}={state[key]!r}, this "
                    f"loader has {key}={o[key]!r}")
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if epoch < 0 or batch < 0:
            raise _native.InvalidRequestError(f"load_state_dict: bad position {epoch}/{batch}")
        if int(state["seed"]) != o["seed"] and self._session is not None:
            self._drop_session()  # the order depends on the seed: attach anew
        o["seed"] = int(state["seed"])
        self._seed_known = True
        with self._lock:
            self._next_epoch, self._resume_batch = epoch, batch
            self._epoch = epoch
            self._end_iteration()
        self._token_dataset_size = state.get("dataset_size")
        if self._session is not None:
            self._check_token_dataset_size()
