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


def _reader_mismatches(rows, readers, makes):
    """Where Python's readers and the op table disagree: an op with a
    torchvision.transforms row and no reader or the reverse, a recipe_class
    row that _recipe_ops makes nothing of or the reverse."""
    tv = {n for n, r in rows.items() if r["source"] == "torchvision.transforms"}
    recipe = {n for n, r in rows.items() if r["source"] == "recipe_class"}
    return sorted([f"{n}: a row, no reader" for n in tv - set(readers)] +
                  [f"{n}: a reader, no row" for n in set(readers) - tv] +
                  [f"{n}: a recipe_class row _recipe_ops never makes" for n in recipe - set(makes)] +
                  [f"{n}: made by _recipe_ops, no row" for n in set(makes) - tv - recipe])


def test_python_reads_exactly_the_op_tables_torchvision_transforms(stoker):
    """The op table (pipeline/op_table.h) says which ops exist; Python's
    readers of torchvision objects cover exactly its torchvision.transforms
    rows, and its "what is served" list comes from it."""
    from stoker import _native, _recipe_ops, _transforms
    rows = {r["name"]: r for r in _native.op_table()}
    assert len(rows) >= 28 and rows["RandomIoUCrop"]["needs_boxes"]
    assert _reader_mismatches(rows, _transforms._READERS, _recipe_ops.MAKES) == []
    tv = {n for n, r in rows.items() if r["source"] == "torchvision.transforms"}
    assert set(_transforms._OPS) == tv
    assert _transforms._TENSOR_OPS == ("RandomErasing",)
    for name in tv:
        assert name in _transforms._SUPPORTED
    assert "RandomZoomOut" not in _transforms._SUPPORTED  # given by name in ops=, not read
    # An op added on one side only is named: a row without a reader, a
    # reader without a row, a recipe class made into an op the table lacks.
    added = dict(rows, RandomFoo={"source": "torchvision.transforms"},
                 ImageFilterFoo={"source": "recipe_class"})
    assert _reader_mismatches(added, _transforms._READERS, _recipe_ops.MAKES) == [
        "ImageFilterFoo: a recipe_class row _recipe_ops never makes", "RandomFoo: a row, no reader"]
    assert _reader_mismatches(rows, set(_transforms._READERS) | {"RandomFoo"},
                              set(_recipe_ops.MAKES) | {"Foo"}) == [
        "Foo: made by _recipe_ops, no row", "RandomFoo: a reader, no row"]
