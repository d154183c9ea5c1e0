"""The sidecar image's build stage configures from exactly what it copies.

The Dockerfile's build stage copies only the folders CMake reads, so that an
edit to docs, scripts or bench/ does not invalidate the image's build. A new
`add_subdirectory` of a folder it does not copy breaks the image build, and
only the container test (scripts/container-test.sh, which needs a container
engine) would notice. This test copies the same paths into an empty folder
and configures them with the same CMake options, without an engine.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import List, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]


def build_stage(dockerfile: str) -> List[str]:
    """The instructions of the first stage, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    stage: List[str] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM ") and stage:
            break
        stage.append(line)
    return stage


def copies_and_options(stage: List[str]) -> Tuple[List[str], List[str]]:
    """(paths COPY'd from the context, -D options of the cmake configure)."""
    paths: List[str] = []
    options: List[str] = []
    for line in stage:
        words = shlex.split(line)
        if words[0].upper() == "COPY":
            assert not any(w.startswith("--from") for w in words), line
            paths.extend(words[1:-1])
        elif words[0].upper() == "RUN" and "cmake" in words and "-S" in words:
            start = words.index("-S")
            end = words.index("&&", start) if "&&" in words[start:] else len(words)
            options = [w for w in words[start:end] if w.startswith("-D")]
    return paths, options


def test_the_image_build_stage_configures_from_what_it_copies(tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("no cmake")
    stage = build_stage((REPO / "Dockerfile").read_text())
    paths, options = copies_and_options(stage)
    assert "CMakeLists.txt" in paths and "server" in paths, paths
    assert "-DSTOKER_CUDA=OFF" in options, options

    src = tmp_path / "src"
    src.mkdir()
    for rel in paths:
        origin = REPO / rel
        assert origin.exists(), f"the Dockerfile copies {rel}, which is not in the repository"
        if origin.is_dir():
            shutil.copytree(origin, src / rel, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(origin, src / rel)

    # The compiler launcher (ccache) matters to the image only, not to whether
    # CMake finds every folder it adds.
    options = [o for o in options if "COMPILER_LAUNCHER" not in o]
    proc = subprocess.run(["cmake", "-S", str(src), "-B", str(tmp_path / "build"), *options],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (
        "the image's build stage does not configure from the paths it copies "
        f"({' '.join(paths)}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
