"""Switching from DataLoader: a script written for it, with one line changed.

examples/dataloader_script.py is an ordinary training script for torch's
DataLoader (ImageFolder with its transform, DataLoader's keywords, a peek at
the first batch, len(loader.dataset), DistributedSampler.set_epoch, two epochs,
a checkpoint and a resume). This test runs it as written and with its import
of DataLoader replaced by stoker's Loader, and checks that both see the same
epochs, batch counts, labels and class list.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, make_dataset

pytest.importorskip("torch")
pytest.importorskip("torchvision")

SCRIPT = os.path.join(REPO, "examples", "dataloader_script.py")
ORIGINAL = "from torch.utils.data import DataLoader"
SWITCHED = "from stoker import Loader as DataLoader"
IMPORT_LINE = re.compile(r"(?m)^" + re.escape(ORIGINAL) + r"$")  # not the docstring's


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    """(the DataLoader script, its stoker twin): they differ in one line."""
    d = tmp_path_factory.mktemp("switch")
    text = open(SCRIPT).read()
    assert len(IMPORT_LINE.findall(text)) == 1
    switched = IMPORT_LINE.sub(SWITCHED, text)
    diff = [l for l in difflib.unified_diff(text.splitlines(), switched.splitlines(), n=0)
            if l[:1] in "+-" and not l.startswith(("+++", "---"))]
    assert diff == ["-" + ORIGINAL, "+" + SWITCHED]
    paths = {}
    for name, body in (("dataloader", text), ("stoker", switched)):
        p = d / f"{name}_script.py"
        p.write_text(body)
        paths[name] = str(p)
    return paths


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("photos") / "train")
    # 3 classes of 8: three batches of 8, so drop_last drops nothing and each
    # epoch's labels are the whole dataset's.
    make_dataset(root, classes=3, per_class=8, sizes=(40, 160), seed=77,
                 class_prefix="kind_")
    return root


def run(build_dir, script, *args):
    env = {k: v for k, v in os.environ.items()
           if k not in ("STOKER_SOCKET", "STOKERD", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = os.path.join(build_dir, "python")
    env["OMP_NUM_THREADS"] = "1"
    r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, f"{script} {args}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    out = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    peek, ds = out[0], out[1]
    epochs = {o["epoch"]: o for o in out[2:]}
    return peek, ds, epochs


@pytest.mark.parametrize("sampler", [False, True], ids=["shuffle", "DistributedSampler"])
def test_the_same_script_gets_the_same_epochs(build_dir, scripts, folder, sampler):
    args = ["--data", folder, "--epochs", "2"] + (["--sampler"] if sampler else [])
    want = run(build_dir, scripts["dataloader"], *args)
    got = run(build_dir, scripts["stoker"], *args)
    (wpeek, wds, wep), (gpeek, gds, gep) = want, got
    assert gpeek == wpeek == {"peek": [8, 3, 32, 32], "peek_labels": [8],
                              "dtype": "torch.float32"}
    assert gds == wds
    assert wds["len"] == 24 and wds["classes"] == ["kind_00", "kind_01", "kind_02"]
    assert wds["batches"] == 3
    every = {str(k): 8 for k in range(3)}  # each sample once per epoch
    assert sorted(wep) == sorted(gep) == [0, 1]
    for e in (0, 1):
        assert gep[e]["batches"] == wep[e]["batches"] == 3, (e, gep[e], wep[e])
        assert gep[e]["labels"] == wep[e]["labels"] == every, (e, gep[e], wep[e])


def test_the_same_script_checkpoints_and_resumes(build_dir, scripts, folder, tmp_path):
    for name in ("dataloader", "stoker"):
        ck = str(tmp_path / f"{name}.pt")
        _, _, first = run(build_dir, scripts[name], "--data", folder, "--epochs", "1",
                          "--sampler", "--checkpoint", ck)
        assert sorted(first) == [0], name
        _, _, rest = run(build_dir, scripts[name], "--data", folder, "--epochs", "2",
                         "--sampler", "--checkpoint", ck, "--resume")
        assert sorted(rest) == [1], (name, rest)
        assert rest[1]["batches"] == 3 and rest[1]["labels"] == {str(k): 8 for k in range(3)}
