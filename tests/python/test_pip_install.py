"""`pip install` into a user's own environment, with Debian's tools and no network.

A venv (with the system site packages, for Debian's numpy and torch) gets
`pip install --no-build-isolation --no-index .`: setup.py runs the CMake build
(here reusing the test build folder through STOKER_CMAKE_BUILD_DIR, so the
test does not compile everything twice) and puts the module, stokerd,
stoker-worker and stokerctl in the venv. The installed package is then used
from outside the source tree: a Loader with no socket starts the stokerd
found beside the installed module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, make_dataset

pytest.importorskip("torch")


def test_pip_install_builds_the_module_and_daemon_into_a_venv(build_dir, tmp_path):
    if subprocess.run([sys.executable, "-m", "venv", "--help"],
                      capture_output=True).returncode != 0:
        pytest.skip("python3-venv is not installed")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=300)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "STOKER_SOCKET", "STOKERD")}
    env["STOKER_CMAKE_BUILD_DIR"] = build_dir
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--no-deps", "--disable-pip-version-check", REPO],
                       capture_output=True, text=True, timeout=1800, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]

    data = tmp_path / "pets"
    make_dataset(str(data), classes=2, per_class=5, sizes=(40, 90), seed=41)
    script = textwrap.dedent(f"""
        import os, stoker
        pkg = os.path.dirname(stoker.__file__)
        assert pkg.startswith({str(venv)!r}), pkg
        for exe in ("stokerd", "stoker-worker", "stokerctl"):
            p = os.path.join(pkg, "bin", exe)
            assert os.access(p, os.X_OK) and not os.path.islink(p), p
        with stoker.Loader({str(data)!r}, batch_size=5, size=32, epochs=1,
                           num_workers=1) as ld:
            n = sum(len(y) for _, y in ld)
        print("installed", pkg, n)
    """)
    env.pop("STOKER_CMAKE_BUILD_DIR")
    r = subprocess.run([py, "-c", script], capture_output=True, text=True, timeout=300, env=env,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split()[-1] == "10"
    r = subprocess.run([str(venv / "bin" / "stokerd"), "--version"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 0 and "0.1.0" in r.stdout + r.stderr, r.stdout + r.stderr
