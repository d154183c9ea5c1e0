"""Console scripts of a pip install: run the executables inside the package."""

import os
import sys


def _exec(name: str) -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)
    if not os.access(exe, os.X_OK):
        sys.exit(f"{name}: not found beside the stoker module ({exe})")
    os.execv(exe, [name] + sys.argv[1:])


def stokerd() -> None:
    """The `stokerd` command."""
    _exec("stokerd")


def stokerctl() -> None:
    """The `stokerctl` command."""
    _exec("stokerctl")
