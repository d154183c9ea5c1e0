"""``python -m stoker run``: a DataLoader script, unchanged, fed by stoker.

    python -m stoker run train.py ARGS...          # a script
    python -m stoker run -m package.module ARGS... # a module, as python -m
    python -m stoker run torchrun --nproc-per-node 2 train.py ARGS...
                                                   # a launcher: each process it starts

Every torch DataLoader the program makes is served by stoker where stoker
can honour its dataset and arguments, and is PyTorch's own elsewhere; a
report on standard error at exit says which, and why (stoker._dropin).
Processes the program starts (torchrun's ranks, mp.spawn's children) inherit
``STOKER_DATALOADER=1`` and a start-up hook on ``PYTHONPATH``, so they are
served too. ``STOKER_DATALOADER=1`` alone does the same for any Python that
has stoker's build folder (``build/python``) on its path.
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys

from . import _dropin

USAGE = ("usage: python -m stoker run SCRIPT.py [ARGS...] | -m MODULE [ARGS...] | "
         "LAUNCHER [ARGS...]")


def _hook_dir() -> str:
    """The folder holding stoker's start-up hook (sitecustomize.py): the
    build tree's python/ folder, or the package's _boot/ (a pip install)."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    parent = os.path.dirname(pkg)
    if os.path.exists(os.path.join(parent, "sitecustomize.py")):
        return parent
    return os.path.join(pkg, "_boot")


def _child_environment() -> None:
    os.environ[_dropin.ENV] = "1"
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for p in (pkg_parent, _hook_dir()):  # stoker importable, the hook found first
        if p not in paths:
            paths.insert(0, p)
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)


def run(argv: list) -> int:
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    _child_environment()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        _dropin.enable()
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    target = argv[0]
    if target.endswith(".py") or (os.path.isfile(target) and not os.access(target, os.X_OK)):
        if not os.path.isfile(target):
            print(f"stoker run: no such script: {target}", file=sys.stderr)
            return 2
        _dropin.enable()
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
        return 0
    exe = shutil.which(target)
    if exe is None:
        print(f"stoker run: {target!r} is neither a .py script nor a program on PATH\n{USAGE}",
              file=sys.stderr)
        return 2
    os.execv(exe, [target] + argv[1:])  # the launcher's Python children see the hook
    return 0  # not reached


def main() -> int:
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    if args[0] != "run":
        print(f"stoker: unknown command {args[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    rest = args[1:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
