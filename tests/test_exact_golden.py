"""Golden files: the exact-mode outputs of the exported models, compared bit for bit.

tests/golden/<model>.exact.npz holds what exact mode computed for tests/models/<model>.onnx on
its stored inputs (made by tools/update_golden.py). Every backend, with and without graph
passes, must give exactly those bits; the GPU run compares CuPy with the same files. The files
are no arbitrary anchor: they are checked to be within tolerance of onnxruntime's outputs
stored beside the models.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onemodel
from onemodel import ExecutionMode, OptimizationLevel, SessionOptions
from onemodel.backends import BackendUnavailableError, KernelPaths

TESTS = Path(__file__).parent
NAMES = ["mlp", "cnn", "transformer"]
# checked-device: CuPy's rules on the CPU, flushing float32 subnormals as CuPy does.
BACKENDS = [
    "numpy-reference", "numpy", "checked-device", pytest.param("cupy", marks=pytest.mark.gpu)
]  # fmt: skip


def _stored(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The model's stored inputs, and onnxruntime's outputs for them, by name."""
    with np.load(TESTS / "models" / f"{name}.inputs.npz") as data:
        arrays = {key: data[key] for key in data.files}
    inputs = {k: v for k, v in arrays.items() if not k.startswith("output:")}
    outputs = {k.removeprefix("output:"): v for k, v in arrays.items() if k.startswith("output:")}
    return inputs, outputs


def _golden(name: str) -> dict[str, np.ndarray]:
    with np.load(TESTS / "golden" / f"{name}.exact.npz") as data:
        return {key: data[key] for key in data.files}


def _exact_outputs(name: str, backend: str, level: OptimizationLevel) -> dict[str, np.ndarray]:
    try:
        KernelPaths.get(backend)
    except BackendUnavailableError as error:
        pytest.skip(str(error))
    options = SessionOptions(
        mode=ExecutionMode.EXACT, backend=backend, optimization_level=level, outputs_as="numpy"
    )
    session = onemodel.Session.load(str(TESTS / "models" / f"{name}.onnx"), options)
    inputs, _ = _stored(name)
    names = [value.name for value in session.outputs]
    return dict(zip(names, session.run(None, inputs), strict=True))


@pytest.mark.parametrize("level", [OptimizationLevel.NONE, OptimizationLevel.ALL])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_exact_outputs_equal_the_golden_file(
    name: str, backend: str, level: OptimizationLevel
) -> None:
    got = _exact_outputs(name, backend, level)
    golden = _golden(name)
    assert sorted(got) == sorted(golden)
    for output, wanted in golden.items():
        have = got[output]
        assert have.dtype == wanted.dtype and have.shape == wanted.shape, output
        differ = np.flatnonzero(have.view(np.uint8) != wanted.view(np.uint8))
        assert differ.size == 0, f"{name} {output} on {backend}: bytes {differ[:8]} differ"


@pytest.mark.parametrize("name", NAMES)
def test_golden_outputs_are_within_tolerance_of_onnxruntime(name: str) -> None:
    _, theirs = _stored(name)
    golden = _golden(name)
    assert sorted(golden) == sorted(theirs)
    for output, wanted in theirs.items():
        np.testing.assert_allclose(golden[output], wanted, rtol=1e-4, atol=1e-5, err_msg=output)
