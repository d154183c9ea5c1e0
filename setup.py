"""Builds stoker's Python extension and executables with CMake for pip.

pyproject.toml holds the metadata; this file only adds the CMake step:
`build_ext` configures the repository's CMakeLists.txt (Release, Ninja when
found), builds the targets _native, stokerd, stoker-worker and stokerctl,
and copies them into the package (stoker/_native*.so, stoker/bin/*).

Environment:
    STOKER_CMAKE_BUILD_DIR  build there (and reuse what is built there)
                            instead of a fresh folder under build/pip.
    STOKER_CMAKE_ARGS       extra arguments for the configure step.
    CMAKE_BUILD_PARALLEL_LEVEL  build jobs (default: the CPU count).
"""

import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
EXECUTABLES = {"stokerd": "bin", "stoker-worker": "bin", "stokerctl": "bin"}


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("STOKER_CMAKE_BUILD_DIR") or os.path.join(ROOT, "build", "pip")
        build = os.path.abspath(build)
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            cmd = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                   f"-DPYTHON_EXECUTABLE={sys.executable}", "-DSTOKER_PYTHON=ON"]
            if shutil.which("ninja"):
                cmd += ["-G", "Ninja"]
            cmd += shlex.split(os.environ.get("STOKER_CMAKE_ARGS", ""))
            subprocess.check_call(cmd)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.check_call(["cmake", "--build", build, "-j", jobs, "--target", "_native",
                               *EXECUTABLES])
        built = glob.glob(os.path.join(build, "python", "stoker", "_native*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _native*.so in {build}/python/stoker, got {built}")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)
        bin_dir = os.path.join(os.path.dirname(dest), "bin")
        os.makedirs(bin_dir, exist_ok=True)
        for name, sub in EXECUTABLES.items():
            shutil.copy2(os.path.realpath(os.path.join(build, sub, name)),
                         os.path.join(bin_dir, name))


setup(ext_modules=[CMakeExtension("stoker._native")], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": os.path.join("build", "pip-setuptools")}})
