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
import tempfile

import pytest

from conftest import make_dataset

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_gpu_check_loader_stand_in(daemon_factory, build_dir):
    top = tempfile.mkdtemp(prefix="stk", dir="/tmp")
    root = os.path.join(top, "data")
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
    equalities = [n for n in rows if "vs" in n and "images/s" not in rows[n][0]]
    assert len(equalities) == 4, (r.stdout, r.stderr)
    for name in equalities:
        assert rows[name][1] == "PASS", (name, rows[name], r.stderr)
    assert "MixUp/CutMix on CUDA tensors vs CPU (same draws)" in rows
    assert rows["MixUp/CutMix on CUDA tensors vs CPU (same draws)"][0] == "32/32 bit-equal"
