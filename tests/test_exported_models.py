"""Real models exported from PyTorch, run end to end through `onemodel.InferenceSession`.

tests/models/ holds an MLP, a small CNN (BatchNormalization kept) and a two-layer transformer
encoder, made by tools/export_models.py with the TorchScript exporter at opset 17, each with a
dynamic batch axis (and a dynamic sequence axis for the transformer). Beside each model its
`.inputs.npz` holds one input set and the outputs onnxruntime computed for it, under
`output:<name>`, so the first test needs neither torch nor onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import onemodel

MODELS = Path(__file__).parent / "models"
NAMES = ["mlp", "cnn", "transformer"]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
# Sizes for the live test's symbolic dimensions: different from the stored batch 2, seq 7.
DIMS = {"batch": 3, "seq": 5}
VOCAB = 100  # the transformer's token ids are in [0, VOCAB)


def _stored(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The stored inputs by input name and onnxruntime's outputs by output name."""
    with np.load(MODELS / f"{name}.inputs.npz") as data:
        arrays = {key: data[key] for key in data.files}
    inputs = {key: value for key, value in arrays.items() if not key.startswith("output:")}
    outputs = {
        key.removeprefix("output:"): value
        for key, value in arrays.items()
        if key.startswith("output:")
    }
    return inputs, outputs


def _output_names(path: Path) -> list[str]:
    return [output.name for output in onnx.load(str(path), load_external_data=False).graph.output]


def _random_feeds(path: Path, seed: int) -> dict[str, np.ndarray]:
    """Inputs of the model's declared types, with DIMS filling its symbolic dimensions."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in onnx.load(str(path), load_external_data=False).graph.input:
        tensor_type = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        shape = tuple(
            DIMS[dim.dim_param] if dim.dim_param else dim.dim_value for dim in tensor_type.shape.dim
        )
        if np.issubdtype(dtype, np.integer):
            feeds[value.name] = rng.integers(0, VOCAB, size=shape, dtype=dtype)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _compare(got: list[np.ndarray], want: list[np.ndarray], names: list[str]) -> None:
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    for name, have, expected in zip(names, got, want, strict=True):
        have = np.asarray(have)
        assert have.dtype == expected.dtype, f"{name}: dtype {have.dtype}, not {expected.dtype}"
        assert have.shape == expected.shape, f"{name}: shape {have.shape}, not {expected.shape}"
        np.testing.assert_allclose(have, expected, err_msg=name, **TOLERANCE)


@pytest.mark.parametrize("name", NAMES)
def test_matches_stored_onnxruntime_outputs(name: str) -> None:
    path = MODELS / f"{name}.onnx"
    inputs, outputs = _stored(name)
    names = _output_names(path)
    assert sorted(outputs) == sorted(names)

    session = onemodel.InferenceSession(str(path))
    assert [value.name for value in session.get_inputs()] == list(inputs)
    got = session.run(None, inputs)

    _compare(got, [outputs[output] for output in names], names)


@pytest.mark.parametrize("name", NAMES)
def test_matches_live_onnxruntime_on_new_shapes(name: str) -> None:
    onnxruntime = pytest.importorskip("onnxruntime")
    path = MODELS / f"{name}.onnx"
    feeds = _random_feeds(path, seed=NAMES.index(name))
    names = _output_names(path)

    reference = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = reference.run(None, feeds)
    assert want[0].shape[0] == DIMS["batch"]

    session = onemodel.InferenceSession(str(path))
    got = session.run(None, feeds)

    _compare(got, want, names)
