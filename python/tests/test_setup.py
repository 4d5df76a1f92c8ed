"""python/setup.py's build configuration (the choice of the CUDA backend and its
architecture), without building anything: a real ``pip install ./python`` takes
minutes, too long for the suite."""
import os
import runpy

import pytest

pytest.importorskip("setuptools")
SETUP = runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "setup.py"), run_name="locks_setup")
cuda_config = SETUP["cuda_config"]


@pytest.mark.parametrize("env,nvcc,archs,flags,why", [
    # nvcc on the PATH but no GPU: no CUDA (was: every kernel, 4 minutes, 24 MB)
    ({}, "/usr/local/cuda/bin/nvcc", [], ["-DLOCKS_CUDA=OFF"], "no GPU"),
    ({}, None, ["90"], ["-DLOCKS_CUDA=OFF"], "no nvcc"),
    ({}, "/usr/bin/nvcc", ["90"], ["-DLOCKS_CUDA=ON", "-DLOCKS_CUDA_ARCH=90"], "sm_90"),
    ({}, "/usr/bin/nvcc", ["80", "90"], ["-DLOCKS_CUDA=ON", "-DLOCKS_CUDA_ARCH=80;90"], "sm_80;90"),
    ({"LOCKS_CUDA": "off"}, "/usr/bin/nvcc", ["90"], ["-DLOCKS_CUDA=OFF"], "LOCKS_CUDA=OFF"),
    ({"LOCKS_CUDA": "ON"}, "/usr/bin/nvcc", [], ["-DLOCKS_CUDA=ON"], "CMake default"),
    ({"LOCKS_CUDA": "ON"}, None, [], ["-DLOCKS_CUDA=ON"], "CMake default"),  # CMake then says nvcc is missing
    ({"LOCKS_CUDA_ARCH": "89"}, "/usr/bin/nvcc", ["90"], ["-DLOCKS_CUDA=ON", "-DLOCKS_CUDA_ARCH=89"], "sm_89"),
    ({"LOCKS_CUDA_ARCH": "89"}, "/usr/bin/nvcc", [], ["-DLOCKS_CUDA=ON", "-DLOCKS_CUDA_ARCH=89"], "sm_89"),
])
def test_cuda_only_when_usable(env, nvcc, archs, flags, why):
    got, reason = cuda_config(env, nvcc, archs)
    assert got == flags
    assert why in reason


def test_bad_setting_is_refused():
    with pytest.raises(ValueError, match="AUTO, ON or OFF"):
        cuda_config({"LOCKS_CUDA": "yes"}, None, [])


def test_wheel_is_platform_tagged():
    cls = SETUP["CMDCLASS"].get("bdist_wheel")
    if cls is None:
        pytest.skip("no bdist_wheel here (setuptools < 70.1 and no wheel package)")
    from setuptools.dist import Distribution
    cmd = cls(Distribution({"name": "locks", "version": "0"}))
    cmd.ensure_finalized()
    py, abi, plat = cmd.get_tag()
    assert (py, abi) == ("py3", "none") and plat != "any"


def test_gpu_archs_without_nvidia_smi(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert SETUP["gpu_archs"]() == []
