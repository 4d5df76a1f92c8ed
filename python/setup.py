"""Builds liblocks.so with CMake (the repository one level up) and puts it into the
package, unless LOCKS_LIBRARY names an existing build of it (then that file is copied).
LOCKS_CMAKE_FLAGS adds configure flags (e.g. "-DLOCKS_CUDA=ON")."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class BuildWithLib(build_py):
    def run(self) -> None:
        lib = os.environ.get("LOCKS_LIBRARY")
        if not lib:
            build = os.path.join(REPO, "build-python")
            flags = os.environ.get("LOCKS_CMAKE_FLAGS", "").split()
            subprocess.check_call(["cmake", "-S", REPO, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DLOCKS_PYTHON_TESTS=OFF", *flags])
            subprocess.check_call(["cmake", "--build", build, "--target", "locks_shared",
                                   "-j", str(os.cpu_count() or 2)])
            lib = os.path.join(build, "liblocks.so")
        shutil.copy(lib, os.path.join(HERE, "locks", "liblocks.so"))
        super().run()


setup(cmdclass={"build_py": BuildWithLib})
