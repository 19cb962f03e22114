"""Builds pagellm's extension module with the project's CMake for `pip install .` (pyproject.toml
holds the metadata). The CMake build folder is build-pip/ unless PAGELLM_CMAKE_BUILD_DIR names one,
e.g. an existing `build` to reuse its compiled engine; CMAKE_BUILD_PARALLEL_LEVEL sets the jobs."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_dir = Path(os.environ.get("PAGELLM_CMAKE_BUILD_DIR", ROOT / "build-pip" / "cmake"))
        build_dir = build_dir if build_dir.is_absolute() else ROOT / build_dir
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.run([
                "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
                "-DCMAKE_BUILD_TYPE=Release", "-DPAGELLM_PYTHON=ON", "-DPAGELLM_TESTS=OFF",
                f"-DPython3_EXECUTABLE={sys.executable}",
            ], check=True)
        # An existing folder keeps its configuration (its interpreter, its flags): only the module
        # is brought up to date, and it must suit this interpreter.
        build = ["cmake", "--build", str(build_dir), "--target", "_pagellm"]
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL")
        if jobs:
            build += ["-j", jobs]
        subprocess.run(build, check=True)
        built = build_dir / "python" / "pagellm" / ("_pagellm" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not built.exists():
            raise RuntimeError(
                f"{build_dir} holds no _pagellm module for this Python ({built.name}): it was "
                "configured for another interpreter; remove it or name another folder"
            )
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


setup(
    ext_modules=[Extension("pagellm._pagellm", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(ROOT / "build-pip")}},
)
