"""The zero-line trial: torch's DataLoader served by stoker where it can be.

``python -m stoker run train.py ARGS`` (or ``STOKER_DATALOADER=1`` in the
environment of any Python process that has stoker on its path, as under
torchrun) replaces ``torch.utils.data.DataLoader`` before the script runs.
Each DataLoader the script then makes is looked at once:

* its dataset and arguments are ones `stoker.Loader` honours (an ImageFolder
  with a transform stoker runs, DataLoader's keywords, a RandomSampler,
  SequentialSampler or DistributedSampler, a ``collate_fn`` that is
  ``default_collate`` or the reference recipes' mixup/cutmix closure): the
  script gets a loader served by stoker;
* otherwise: PyTorch's own DataLoader, as if stoker were not there, and the
  reason is kept.

Either way the object passes ``isinstance(x, torch.utils.data.DataLoader)``.
At exit one report on standard error names each loader, where it was made,
and for each one stoker did not serve, why (`report` returns the same).

What a served loader does differently from DataLoader, on purpose: its
``num_workers`` is not used (DataLoader's count is of Python workers; the
daemon sizes its decode pool itself, ``stokerd --workers auto``), and a
RandomChoice of mixup/cutmix draws its choice per batch from the loader's
seed instead of Python's ``random`` (the same distribution; see
`stoker.batch`).

Thread safety: `enable` is idempotent and may be called from any thread; a
DataLoader may be made on any thread.
"""

from __future__ import annotations

import atexit
import inspect
import os
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple

#: The environment variable that turns the trial on in every Python process
#: that imports stoker's start-up hook (sitecustomize) or calls `enable_from_env`.
ENV = "STOKER_DATALOADER"

_lock = threading.Lock()
_enabled = False
_original: Any = None  # torch's own DataLoader class
_entries: List[Dict[str, Any]] = []


def enabled_by_env() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "on", "true", "yes")


def report() -> List[Dict[str, Any]]:
    """One dict per DataLoader made since `enable`: 'where' (file:line),
    'dataset' (its repr, shortened), 'served' (bool), 'why' (the reason it
    was not served, '' when it was)."""
    with _lock:
        return [dict(e) for e in _entries]


def _print_report() -> None:
    entries = report()
    if not entries:
        return
    served = sum(e["served"] for e in entries)
    lines = [f"stoker run: {served} of {len(entries)} DataLoader(s) served by stoker"]
    for e in entries:
        if e["served"]:
            lines.append(f"  served  {e['where']}  {e['dataset']}")
        else:
            lines.append(f"  kept    {e['where']}  {e['dataset']}: PyTorch's DataLoader, "
                         f"because {e['why']}")
    try:
        print("\n".join(lines), file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed at exit
        pass


def _where() -> str:
    """file:line of the code that made the DataLoader (outside this module
    and torch)."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if name != __file__ and f"{os.sep}torch{os.sep}" not in name:
            return f"{os.path.basename(name)}:{f.f_lineno}"
        f = f.f_back
    return "?"


def _short(x: Any, n: int = 90) -> str:
    text = repr(x).replace("\n", " ")
    return text if len(text) <= n else text[: n - 3] + "..."


def _describe(dataset: Any) -> str:
    root = getattr(dataset, "root", None)
    if isinstance(root, (str, os.PathLike)):
        return f"{type(dataset).__name__}({os.fspath(root)!r})"
    return _short(dataset, 60)


def _mix_from_collate(fn: Any) -> Any:
    """The stoker batch transform for the reference recipes' collate_fn,
    ``lambda batch: mixupcutmix(*default_collate(batch))`` (torchvision's
    references/classification/train.py): a function of one argument that
    calls default_collate and one captured transform, a RandomChoice of
    RandomMixup / RandomCutmix (or torchvision v2's MixUp / CutMix), or one
    of them. Raises ValueError naming what it is not."""
    from . import batch as _batch  # noqa: PLC0415

    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    if (code is None or code.co_argcount != 1 or "default_collate" not in code.co_names
            or len(cells) != 1):
        raise ValueError(f"collate_fn={_short(fn, 60)} is code of its own, which cannot run "
                         "in the daemon (stoker reads default_collate, and the reference "
                         "recipes' mixup/cutmix collate_fn)")
    mix = cells[0].cell_contents

    def one(t: Any) -> Any:
        kind = type(t).__name__
        alpha, classes, p = getattr(t, "alpha", None), getattr(t, "num_classes", None), \
            float(getattr(t, "p", 1.0))
        if kind in ("RandomMixup", "MixUp") and alpha is not None and classes is not None:
            return _batch.MixUp(alpha=alpha, num_classes=classes, p=p)
        if kind in ("RandomCutmix", "CutMix") and alpha is not None and classes is not None:
            return _batch.CutMix(alpha=alpha, num_classes=classes, p=p)
        raise ValueError(f"collate_fn applies {_short(t, 60)}, which is not mixup or cutmix")

    if type(mix).__name__ == "RandomChoice" and hasattr(mix, "transforms"):
        return _batch.RandomChoice([one(t) for t in mix.transforms], p=getattr(mix, "p", None))
    return one(mix)


def _serve(original: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Any, str]:
    """(an attached stoker.Loader, '') for DataLoader(*args, **kwargs), or
    (None, why not)."""
    from . import _native  # noqa: PLC0415
    from .loader import Loader  # noqa: PLC0415

    try:
        bound = inspect.signature(original.__init__).bind(None, *args, **kwargs)
    except TypeError as e:
        return None, f"its arguments do not fit DataLoader's ({e})"
    given = dict(bound.arguments)
    given.pop("self", None)
    given.update(given.pop("kwargs", {}) or {})
    dataset = given.pop("dataset")
    batch_size = given.pop("batch_size", 1)
    if batch_size is None:
        return None, "batch_size=None (unbatched samples): stoker serves batches"
    shuffle = bool(given.pop("shuffle", None) or False)
    options: Dict[str, Any] = {}
    collate = given.pop("collate_fn", None)
    if collate is not None:
        if getattr(collate, "__name__", "") == "default_collate":
            pass
        else:
            try:
                options["batch_transform"] = _mix_from_collate(collate)
            except ValueError as e:
                return None, str(e)
    timeout = given.pop("timeout", 0)
    if timeout:
        options["timeout_ms"] = int(float(timeout) * 1000)
    given.pop("num_workers", None)  # the daemon sizes its own pool (module doc)
    for k in ("multiprocessing_context", "pin_memory_device"):
        if given.get(k) in (None, ""):
            given.pop(k, None)
    options.update(given)
    try:
        loader = Loader(dataset, batch_size, shuffle, **options)
    except (_native.StokerError, TypeError, ValueError) as e:
        return None, str(e)
    try:
        loader.attach()
    except _native.StokerError as e:
        loader.close()
        return None, f"stoker could not serve it: {e}"
    return loader, ""


def _make_classes(original: Any) -> Any:
    class DataLoader(original):  # type: ignore[misc, valid-type]
        __doc__ = original.__doc__

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            where = _where()
            dataset = args[0] if args else kwargs.get("dataset")
            entry = {"where": where, "dataset": _describe(dataset), "served": False, "why": ""}
            if cls is not DataLoader:
                entry["why"] = f"it is a subclass of DataLoader ({cls.__name__}) with code of its own"
                loader = None
            else:
                loader, entry["why"] = _serve(original, args, kwargs)
            with _lock:
                _entries.append(entry)
            if loader is None:
                return original.__new__(cls) if original.__new__ is not object.__new__ \
                    else object.__new__(cls)
            entry["served"] = True
            obj = object.__new__(_Served)
            obj.__dict__["_stoker"] = loader
            bound = inspect.signature(original.__init__).bind(None, *args, **kwargs)
            bound.apply_defaults()
            for k, v in bound.arguments.items():
                if k not in ("self", "kwargs"):
                    obj.__dict__[k] = v
            obj.__dict__["dataset"] = loader.dataset if not hasattr(dataset, "__len__") \
                else dataset
            return obj

    class _Served(DataLoader):
        """A DataLoader served by a stoker.Loader (``.stoker_loader``)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:  # made by __new__
            pass

        def __setattr__(self, name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        @property
        def stoker_loader(self) -> Any:
            return self.__dict__["_stoker"]

        @property
        def multiprocessing_context(self) -> Any:
            return None

        def __iter__(self) -> Any:
            return iter(self.__dict__["_stoker"])

        def __len__(self) -> int:
            return len(self.__dict__["_stoker"])

        def __getattr__(self, name: str) -> Any:  # what the DataLoader attributes lack
            if name.startswith("__"):
                raise AttributeError(name)
            return getattr(self.__dict__["_stoker"], name)

        def __repr__(self) -> str:
            return f"<DataLoader served by {self.__dict__['_stoker']!r}>"

    DataLoader.__module__ = original.__module__
    DataLoader.__qualname__ = original.__qualname__
    return DataLoader


def enable() -> None:
    """Replaces torch.utils.data.DataLoader (idempotent) and prints the
    report at exit."""
    global _enabled, _original
    with _lock:
        if _enabled:
            return
        _enabled = True
    import torch.utils.data.dataloader  # noqa: PLC0415

    # From sys.modules: called by the start-up hook while torch is still
    # importing, before torch.utils.data is an attribute of torch.utils.
    # torch.utils.data.dataloader.DataLoader stays torch's own: its methods
    # name it in super() calls, which the subclass would send round forever.
    data, dl = sys.modules["torch.utils.data"], sys.modules["torch.utils.data.dataloader"]
    _original = dl.DataLoader
    data.DataLoader = _make_classes(_original)
    atexit.register(_print_report)


class _TorchDataHook:
    """A meta-path finder that calls `enable` right after torch.utils.data is
    imported: the start-up hook turns the trial on without importing torch
    in processes that never use it."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch.utils.data":
            return None
        import importlib.machinery  # noqa: PLC0415

        sys.meta_path.remove(self)
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            sys.modules[name] = module
            enable()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def enable_from_env() -> None:
    """The start-up hook's call: with $STOKER_DATALOADER set, enables the
    trial now if torch.utils.data is imported already, else as soon as it is."""
    if not enabled_by_env():
        return
    if "torch.utils.data" in sys.modules:
        enable()
    elif not any(isinstance(f, _TorchDataHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchDataHook())
