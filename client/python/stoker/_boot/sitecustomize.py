"""stoker's start-up hook. Python imports `sitecustomize` at start-up from the
first folder of its path that holds one; stoker's build folder (and
``python -m stoker run``) puts this one there.

It does nothing unless $STOKER_DATALOADER is set: then torch's DataLoader is
served by stoker in this process (stoker._dropin), from the moment
torch.utils.data is imported. Either way it then runs the sitecustomize this
one hides (Debian's /etc/python3.X/sitecustomize.py), if there is one.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("STOKER_DATALOADER", "").strip():
    try:
        from stoker import _dropin

        _dropin.enable_from_env()
    except Exception as e:  # noqa: BLE001 (never break the interpreter's start)
        print(f"stoker: STOKER_DATALOADER is set, but the DataLoader hook failed: {e}",
              file=sys.stderr)
_chain()
