"""Issue 35's "one definition": each daemon flag and Attach default is defined
once (proto/stoker/v1/config.proto, stoker.proto's AttachDefaults) and every
front end derives it. These read the sources: a second copy fails here."""
from __future__ import annotations

import ast
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(rel: str) -> str:
    with open(os.path.join(REPO, rel), encoding="utf-8") as f:
        return f.read()


def _sources(*folders: str):
    for folder in folders:
        for root, _, files in os.walk(os.path.join(REPO, folder)):
            for name in files:
                if name.endswith((".cc", ".h", ".py", ".sh")) and not name.endswith("_test.cc"):
                    path = os.path.join(root, name)
                    yield os.path.relpath(path, REPO), open(path, encoding="utf-8").read()


def _code_strings(rel: str) -> str:
    """The string literals of a file's code (comments and docstrings left out)."""
    text = _read(rel)
    if rel.endswith(".py"):
        tree = ast.parse(text)
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        return "\n".join(n.value for n in ast.walk(tree)
                         if isinstance(n, ast.Constant) and isinstance(n.value, str)
                         and id(n) not in docs)
    comment = "#" if rel.endswith(".sh") else "//"
    code = "\n".join(line.split(comment, 1)[0] if not line.lstrip().startswith(comment) else ""
                     for line in text.splitlines())
    return code if rel.endswith(".sh") else "\n".join(re.findall(r'"((?:[^"\\]|\\.)*)"', code))


def test_no_front_end_spells_a_daemon_flag(stoker):
    """stokerd's command line, the container's entrypoint and the private
    daemon's arguments name no flag: they walk DaemonConfig."""
    from stoker import _native
    flags = [f["flag"] for f in _native.daemon_flags()]
    assert "--data-root" in flags and "--ring-budget-mb" in flags and len(flags) >= 30
    for rel in ("server/control/main.cc", "docker/entrypoint.sh",
                "client/python/stoker/_private.py"):
        text = _code_strings(rel)
        spelled = [f for f in flags if re.search(re.escape(f) + r"(?![\w-])", text)]
        assert spelled == [], f"{rel} spells {spelled}: derive them from config.proto"


def test_every_daemon_flag_is_defined_in_config_proto_only(stoker):
    """A flag's default lives in its FlagSpec: no add_option for it elsewhere."""
    from stoker import _native
    proto = _read("proto/stoker/v1/config.proto")
    for f in _native.daemon_flags():
        assert re.search(r"\b%s = \d+ \[\(flag\)" % f["field"], proto), f["field"]
    for rel, text in _sources("server", "client", "docker"):  # stokerctl: its own flags
        for f in _native.daemon_flags():
            assert f'add_option("{f["flag"]}"' not in text, (rel, f["flag"])


def test_the_attach_defaults_have_one_definition(stoker):
    """batch 64 and the ring's depth 4 (16 at most) are stoker.proto's
    AttachDefaults; the C++ client, stokerctl and the Loader use them."""
    from stoker import _native
    import inspect
    d = _native.attach_defaults()
    assert d == {"batch_size": 64, "ring_depth": 4, "ring_max_depth": 16}
    assert inspect.signature(stoker.Loader).parameters["batch_size"].default == d["batch_size"]
    pattern = re.compile(r"\bbatch_size\s*(?::\s*int\s*)?=\s*64\b|kDefaultSlots\s*=\s*4\b|"
                         r"kMaxAdaptiveSlots\s*=\s*16\b|heartbeat_timeout_ms\w*\s*=\s*3000\b")
    copies = [(rel, m.group(0)) for rel, text in _sources("server", "tools", "client", "pipeline")
              for m in pattern.finditer(text)]
    assert copies == [], f"second definitions of an Attach default: {copies}"


def test_python_reads_exactly_the_op_tables_torchvision_transforms(stoker):
    """The op table (pipeline/op_table.h) says which ops exist; Python's
    readers of torchvision objects cover exactly its torchvision.transforms
    rows, and its "what is served" list comes from it."""
    from stoker import _native, _transforms
    rows = {r["name"]: r for r in _native.op_table()}
    assert len(rows) >= 28 and rows["RandomIoUCrop"]["needs_boxes"]
    tv = {n for n, r in rows.items() if r["source"] == "torchvision.transforms"}
    assert set(_transforms._READERS) == tv, (
        "readers without a row", set(_transforms._READERS) - tv, "rows without a reader",
        tv - set(_transforms._READERS))
    assert set(_transforms._OPS) == tv
    assert _transforms._TENSOR_OPS == ("RandomErasing",)
    for name in tv:
        assert name in _transforms._SUPPORTED
    assert "RandomZoomOut" not in _transforms._SUPPORTED  # given by name in ops=, not read
    # The recipe-class rows are what _recipe_ops reads such classes into.
    from stoker import _recipe_ops
    recipe = {n for n, r in rows.items() if r["source"] == "recipe_class"}
    assert recipe == set(_recipe_ops.MAKES) - tv, recipe
