"""The Python half of the GPU check (tests/gpu_check_loader.py, run by
scripts/gpu-check.sh on a machine with a GPU) dry-run here with CPU tensors
standing in for CUDA ones: its comparisons (device normalize and padding
against the daemon's, MixUp/CutMix applied to a copy against the CPU) must
run and pass, so that the script a scarce GPU lease runs does not rot.
Its rates mean nothing here and are not looked at."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import make_dataset

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# The rows that compare the device path with the CPU's (the rate row is not one).
COMPARISONS = (
    "Loader float32 on the device vs normalized by the daemon",
    "any-size batches padded on the device vs CPU",
    "MixUp/CutMix on CUDA tensors vs CPU (same draws)",
    "Loader(batch_transform=RandomChoice(MixUp, CutMix)) CUDA vs CPU",
)


def test_gpu_check_loader_stand_in(daemon_factory, build_dir, tmp_short):
    root = os.path.join(tmp_short, "data")
    make_dataset(os.path.join(root, "ds"), classes=4, per_class=48, sizes=(48, 160), seed=5)
    d = daemon_factory(workers=2, data_root=root)
    env = dict(os.environ, PYTHONPATH=os.path.join(build_dir, "python"))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "gpu_check_loader.py"),
                        d.socket, "ds", "32", "--stand-in", "--seconds", "0.5"],
                       capture_output=True, text=True, timeout=300, env=env)
    rows = {}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT|"):
            _, name, value, _, status = line.split("|")
            rows[name] = (value, status)
    for name in COMPARISONS:
        assert name in rows, (name, r.stdout, r.stderr)
        assert rows[name][1] == "PASS", (name, rows[name], r.stderr)
    assert rows["MixUp/CutMix on CUDA tensors vs CPU (same draws)"][0] == "32/32 bit-equal"
