"""Fixtures shared by the tests: every backend, and every backend's memory.

GPU parameters carry the `gpu` mark and skip cleanly where CuPy or a CUDA device is missing, so
the same test bodies are the CPU tests here and the parity checks on a GPU machine.
"""

from __future__ import annotations

import pytest

from onemodel.backends import BackendUnavailableError, KernelPaths, Kernels
from onemodel.tensors import Memory


def _backend_params() -> list:
    return [
        pytest.param(name, marks=pytest.mark.gpu) if name == "cupy" else name
        for name in KernelPaths.names()
    ]


@pytest.fixture(params=_backend_params())
def kernels(request: pytest.FixtureRequest) -> Kernels:
    """Each backend by name: numpy-reference, numpy and cupy."""
    try:
        return KernelPaths.get(request.param)
    except BackendUnavailableError as error:
        pytest.skip(str(error))


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def memory(request: pytest.FixtureRequest) -> Memory:
    """The memory of the NumPy backend and, with CUDA, of the CuPy backend."""
    try:
        return KernelPaths.get(request.param).memory
    except BackendUnavailableError as error:
        pytest.skip(str(error))
