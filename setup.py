"""Builds jacond._jacond with the project's CMake for `pip install .` (see pyproject.toml).

The extension is the CMake target jacond_python of a JACOND_PYTHON_ONLY configure (the analysis
core and the module; python/CMakeLists.txt) for the interpreter running this script; the version
is CMake's project(VERSION), so jacond.__version__ is the C++ one. Environment:
  JACOND_CMAKE_ARGS   extra configure arguments, e.g. "-DCMAKE_BUILD_TYPE=Debug"
  CMAKE_BUILD_PARALLEL_LEVEL   compile jobs (default: the CPU count)
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def cmake_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(jacond VERSION ([0-9.]+)", text)
    if not match:
        raise RuntimeError("CMakeLists.txt: no `project(jacond VERSION x.y.z)`")
    return match.group(1)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = Path(self.build_temp).resolve() / "cmake"
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DJACOND_PYTHON_ONLY=ON",
                     f"-DPython_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if shutil.which("ccache"):
            configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        configure += shlex.split(os.environ.get("JACOND_CMAKE_ARGS", ""))
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "jacond_python", "-j", jobs], check=True)
        built = list((build_dir / "python" / "jacond").glob("_jacond*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _jacond*.so in {build_dir / 'python' / 'jacond'}, found {built}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)


# setuptools' own build folders go to build-python/, away from the CMake tree in build/.
(ROOT / "build-python").mkdir(exist_ok=True)
setup(version=cmake_version(), ext_modules=[CMakeExtension("jacond._jacond")], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": "build-python"}, "egg_info": {"egg_base": "build-python"}})
