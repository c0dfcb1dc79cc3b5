"""The backend table: names, lookup, the best path, and the CuPy backend's absence handled."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from onemodel.backends import BackendUnavailableError, KernelPaths, Kernels, cupy_gpu
from onemodel.tensors import HOST

CUPY_HERE = cupy_gpu.available()


@pytest.fixture
def without_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import cupy` fail, as on a machine without it, even where CuPy is installed."""
    monkeypatch.setitem(sys.modules, "cupy", None)


def test_names_are_the_static_table() -> None:
    assert KernelPaths.names() == ["numpy-reference", "numpy", "cupy", "checked-device"]


def test_available_lists_the_cpu_paths_and_cupy_only_with_cuda() -> None:
    cpu = ["numpy-reference", "numpy"]
    expected = [*cpu, "cupy", "checked-device"] if CUPY_HERE else [*cpu, "checked-device"]
    assert KernelPaths.available() == expected


@pytest.mark.parametrize("name", ["numpy-reference", "numpy"])
def test_get_returns_one_shared_host_backend_per_name(name: str) -> None:
    kernels = KernelPaths.get(name)
    assert isinstance(kernels, Kernels)
    assert kernels.name == name
    assert kernels.memory is HOST and kernels.xp is np
    assert kernels.supports_exact is False
    assert KernelPaths.get(name) is kernels


def test_unknown_name_lists_the_known_paths() -> None:
    with pytest.raises(ValueError, match=r"'tpu'.*'numpy-reference', 'numpy', 'cupy', 'checked"):
        KernelPaths.get("tpu")


def test_best_is_cupy_with_cuda_else_numpy() -> None:
    assert KernelPaths.best().name == ("cupy" if CUPY_HERE else "numpy")


@pytest.mark.skipif(CUPY_HERE, reason="this machine has CuPy and a CUDA device")
def test_cupy_is_unavailable_here() -> None:
    assert not cupy_gpu.available()
    with pytest.raises(BackendUnavailableError, match="cupy backend is unavailable"):
        KernelPaths.get("cupy")


@pytest.mark.usefixtures("without_cupy")
def test_missing_cupy_is_reported_not_raised_on_import() -> None:
    assert not cupy_gpu.available()
    assert "ModuleNotFoundError" in cupy_gpu.unavailable_reason()
    with pytest.raises(BackendUnavailableError, match="ModuleNotFoundError"):
        cupy_gpu.CupyKernels()
    with pytest.raises(BackendUnavailableError, match="ModuleNotFoundError"):
        KernelPaths.get("cupy")
    assert KernelPaths.available() == ["numpy-reference", "numpy", "checked-device"]
    assert KernelPaths.best().name == "numpy"


def test_backends_import_without_cupy() -> None:
    code = "import sys; sys.modules['cupy'] = None; import onemodel.backends.cupy_gpu"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.gpu
@pytest.mark.skipif(not CUPY_HERE, reason="needs CuPy and a CUDA device")
def test_cupy_backend_round_trips_through_device_memory() -> None:
    kernels = KernelPaths.get("cupy")
    assert kernels.name == "cupy" and kernels.memory.name == "cupy"
    values = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    tensor = kernels.from_host(values)
    assert tensor.buffer.storage.data.ptr % 64 == 0
    np.testing.assert_array_equal(kernels.to_host(tensor), values)
