"""Builds liblocks.so with CMake (the repository one level up; CMake >= 3.25 and a C
compiler) and puts it into the wheel, unless LOCKS_LIBRARY names an existing build of it
(then that file is copied). The build runs outside the source tree (LOCKS_BUILD_DIR, or
a temporary directory removed afterwards) and says what it builds and why on stderr
(``pip install -v ./python`` also shows CMake's progress).

The CUDA backend is built only when it can be used, and then only for the GPUs present:

    LOCKS_CUDA=AUTO (default)  CUDA when nvcc is found and nvidia-smi lists a GPU,
                               for that GPU's architecture (compute capability)
    LOCKS_CUDA=ON              CUDA (CMake fails without nvcc), for the GPUs present
                               or, with none visible, CMake's default (sm_90)
    LOCKS_CUDA=OFF             CPU only
    LOCKS_CUDA_ARCH=80;90      the architectures to build for (overrides the detection)

LOCKS_CMAKE_FLAGS adds configure flags. The wheel is tagged for its platform
(py3-none-<platform>): it holds a native library, no Python extension."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1 (pyproject.toml asks for a newer one)
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def say(msg: str) -> None:
    print(f"locks: {msg}", file=sys.stderr, flush=True)


def gpu_archs() -> List[str]:
    """The compute capabilities of the GPUs nvidia-smi lists ("90" for 9.0), sorted,
    no repeats; empty without nvidia-smi or a GPU."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    caps = {line.strip().replace(".", "") for line in out.splitlines()}
    return sorted(c for c in caps if c.isdigit())


def cuda_config(env: Dict[str, str], nvcc: Optional[str], archs: List[str]) -> Tuple[List[str], str]:
    """The CMake flags choosing the CUDA backend, and the reason in words, from the
    environment (LOCKS_CUDA, LOCKS_CUDA_ARCH), the nvcc found (or None) and the GPUs'
    architectures (gpu_archs())."""
    mode = env.get("LOCKS_CUDA", "AUTO").upper()
    if mode not in ("AUTO", "ON", "OFF"):
        raise ValueError(f"LOCKS_CUDA={env['LOCKS_CUDA']!r}: AUTO, ON or OFF")
    arch = env.get("LOCKS_CUDA_ARCH", "").strip() or ";".join(archs)
    if mode == "OFF":
        return ["-DLOCKS_CUDA=OFF"], "CPU only (LOCKS_CUDA=OFF)"
    if mode == "AUTO" and not nvcc:
        return ["-DLOCKS_CUDA=OFF"], "CPU only (no nvcc; LOCKS_CUDA=ON to require CUDA)"
    if mode == "AUTO" and not archs and not env.get("LOCKS_CUDA_ARCH", "").strip():
        return ["-DLOCKS_CUDA=OFF"], "CPU only (nvcc found but no GPU visible; LOCKS_CUDA=ON to build CUDA anyway)"
    flags = ["-DLOCKS_CUDA=ON"] + ([f"-DLOCKS_CUDA_ARCH={arch}"] if arch else [])
    return flags, f"CUDA backend for sm_{arch or '90 (CMake default)'}"


class BuildWithLib(build_py):
    def run(self) -> None:
        super().run()
        dest = os.path.join(self.build_lib, "locks", "liblocks.so")
        lib = os.environ.get("LOCKS_LIBRARY")
        if lib:
            say(f"using LOCKS_LIBRARY={lib}")
            shutil.copy(lib, dest)
            return
        if not os.path.exists(os.path.join(REPO, "CMakeLists.txt")):
            raise RuntimeError(f"locks: no CMakeLists.txt in {REPO}: build from the repository's python/ "
                               "directory, or set LOCKS_LIBRARY to a built liblocks.so")
        if not shutil.which("cmake"):
            raise RuntimeError("locks: cmake (>= 3.25) not found: install it (pip install cmake, or the system's)")
        flags, why = cuda_config(dict(os.environ), shutil.which("nvcc"), gpu_archs())
        flags += os.environ.get("LOCKS_CMAKE_FLAGS", "").split()
        build = os.environ.get("LOCKS_BUILD_DIR") or tempfile.mkdtemp(prefix="locks-build-")
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
        say(f"building liblocks.so: {why}, in {build}")
        try:
            subprocess.check_call(["cmake", "-S", REPO, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DLOCKS_PYTHON_TESTS=OFF", *flags])
            say(f"compiling ({jobs} jobs)")
            subprocess.check_call(["cmake", "--build", build, "--target", "locks_shared", "-j", jobs])
            shutil.copy(os.path.join(build, "liblocks.so"), dest)
            say(f"liblocks.so: {os.path.getsize(dest) / 1e6:.1f} MB")
        finally:
            if not os.environ.get("LOCKS_BUILD_DIR"):
                shutil.rmtree(build, ignore_errors=True)


CMDCLASS = {"build_py": BuildWithLib}
if bdist_wheel is not None:
    class PlatformWheel(bdist_wheel):
        """py3-none-<platform>: the wheel carries liblocks.so (native, loaded by ctypes)."""

        def finalize_options(self) -> None:
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):  # type: ignore[no-untyped-def]
            return ("py3", "none", super().get_tag()[2])

    CMDCLASS["bdist_wheel"] = PlatformWheel


def build_base() -> str:
    """setuptools' own build directory (build/lib, build/bdist.*), outside the source
    tree: LOCKS_BUILD_BASE, or a temporary directory removed when the process ends."""
    base = os.environ.get("LOCKS_BUILD_BASE")
    if not base:
        base = tempfile.mkdtemp(prefix="locks-setuptools-")
        atexit.register(shutil.rmtree, base, True)
    return base


if __name__ == "__main__":  # setuptools' build backend runs this file as __main__
    setup(cmdclass=CMDCLASS, options={"build": {"build_base": build_base()}})
