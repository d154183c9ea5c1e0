"""examples/train_resnet.py: a real training loop (resnet18, SGD) on CPU.

It must train with finite loss on either loader, and a run stopped at a
checkpoint and resumed must see exactly the batches (samples and pixels) an
uninterrupted run sees.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, make_dataset

pytest.importorskip("torch")
pytest.importorskip("torchvision")

EXAMPLE = os.path.join(REPO, "examples", "train_resnet.py")


@pytest.fixture(scope="module")
def train_set(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("train"))
    make_dataset(os.path.join(root, "set"), classes=3, per_class=8, sizes=(48, 128), seed=51)
    return os.path.join(root, "set")


def run(build_dir, *args, timeout=600):
    env = {k: v for k, v in os.environ.items() if k != "STOKER_SOCKET"}
    env["PYTHONPATH"] = os.path.join(build_dir, "python")
    env["OMP_NUM_THREADS"] = "1"
    r = subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def steps(out):
    """{step: (loss, digest or None)} from the example's output."""
    pat = r"^step (\d+) loss (\S+)(?: epoch \d+ batch \d+ digest (\w+))?$"
    return {int(m.group(1)): (float(m.group(2)), m.group(3))
            for m in re.finditer(pat, out, re.M)}


COMMON = ["--batch-size", "8", "--image-size", "64", "--workers", "1", "--print-batches"]


# v2: torchvision's reference recipe (TrivialAugmentWide, RandomErasing,
# mixup / cutmix per batch): the resumed run sees the same mixed batches.
@pytest.mark.parametrize("recipe", ["v1", "v2"])
def test_trains_with_stoker_and_resumes_exactly(build_dir, train_set, tmp_path, recipe):
    common = [*COMMON, "--recipe", recipe]
    full = steps(run(build_dir, "--data", train_set, "--loader", "stoker", "--steps", "6",
                     *common))
    assert sorted(full) == list(range(6))
    ck = str(tmp_path / "ck.pt")
    first = steps(run(build_dir, "--data", train_set, "--steps", "4", "--checkpoint", ck,
                      "--checkpoint-every", "2", *common))
    out = run(build_dir, "--data", train_set, "--steps", "6", "--checkpoint", ck, "--resume",
              *common)
    assert "resumed from" in out and "at step 4" in out
    second = steps(out)
    assert sorted(first) == [0, 1, 2, 3] and sorted(second) == [4, 5]
    # 24 images, batch 8: steps 3-5 cross into epoch 1; same samples, same pixels.
    for s in range(6):
        got = (first if s < 4 else second)[s]
        assert got[1] == full[s][1], f"step {s}: batch differs from the uninterrupted run"
        assert got[0] == got[0] and got[0] < 1e3  # finite loss


def test_trains_with_dataloader(build_dir, train_set):
    out = steps(run(build_dir, "--data", train_set, "--loader", "dataloader", "--steps", "2",
                    "--batch-size", "8", "--image-size", "64", "--workers", "1"))
    assert sorted(out) == [0, 1] and all(v[0] == v[0] for v in out.values())
