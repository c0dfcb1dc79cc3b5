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


_SUITE_CLASSES = {
    "OnnxBackendNodeModelTest": "node",
    "OnnxBackendSimpleModelTest": "simple",
    "OnnxBackendPyTorchConvertedModelTest": "pytorch-converted",
    "OnnxBackendPyTorchOperatorModelTest": "pytorch-operator",
    "OnnxBackendRealModelTest": "light",
}


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Pass counts of ONNX's conformance suite per kind and device, when it ran."""
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for outcome in ("passed", "failed", "xfailed"):
        for report in terminalreporter.stats.get(outcome, []):
            if report.when != "call" or "test_conformance.py" not in report.nodeid:
                continue
            parts = report.nodeid.split("::")
            kind = _SUITE_CLASSES.get(parts[1], parts[1])
            device = parts[-1].rsplit("_", 1)[-1]
            row = counts.setdefault((kind, device), {"passed": 0, "failed": 0, "xfailed": 0})
            row[outcome] += 1
    if not counts:
        return
    terminalreporter.section("ONNX conformance")
    for (kind, device), row in sorted(counts.items()):
        total = sum(row.values())
        terminalreporter.write_line(
            f"{kind:18} {device:5} {row['passed']:5} passed of {total:5}"
            f"  ({row['xfailed']} expected failures, {row['failed']} failed)"
        )
