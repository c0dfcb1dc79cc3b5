"""Arrays from any library: DLPack producers in without a copy where the memory allows, and
outputs handed back as NumPy or in the caller's library."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import onemodel
from onemodel.errors import ErrorKind

MODELS = Path(__file__).parent / "models"


class DLPackOnly:
    """An array from a library onemodel has never heard of: it offers DLPack and nothing else
    (no __array__, no __array_namespace__)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


@pytest.fixture(scope="module")
def session() -> onemodel.Session:
    return onemodel.Session.load(MODELS / "mlp.onnx", onemodel.SessionOptions(backend="numpy"))


@pytest.fixture(scope="module")
def batch() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((3, 32)).astype(np.float32)


def expected(session, batch) -> np.ndarray:
    return session.run(None, {"input": batch})[0]


def test_a_dlpack_only_array_is_read_in_place(session, batch, monkeypatch):
    from onemodel import arrays

    taken = []
    original = arrays.from_other_library

    def spy(value, xp, name):
        taken.append(original(value, xp, name))
        return taken[-1]

    monkeypatch.setattr("onemodel.session.from_other_library", spy)
    (y,) = session.run(None, {"input": DLPackOnly(batch)})
    np.testing.assert_array_equal(y, expected(session, batch))
    assert np.shares_memory(taken[0], batch)


def test_a_strided_dlpack_array_gives_the_same_result(session, batch):
    wide = np.repeat(batch, 2, axis=1)
    (y,) = session.run(None, {"input": DLPackOnly(wide[:, ::2])})
    np.testing.assert_array_equal(y, expected(session, batch))


def test_outputs_as_input_needs_a_namespace(session, batch):
    with pytest.raises(onemodel.SessionError, match="array API namespace") as caught:
        session.run(None, {"input": DLPackOnly(batch)}, outputs_as="input")
    assert caught.value.kind is ErrorKind.INVALID_INPUT


def test_outputs_as_is_checked_before_running(session, batch):
    with pytest.raises(onemodel.SessionError, match="outputs_as is one of"):
        session.run(None, {"input": batch}, outputs_as="torch")


def test_numpy_feeds_come_back_as_numpy_for_every_choice(session, batch):
    for choice in ("backend", "numpy", "input"):
        (y,) = session.run(None, {"input": batch}, outputs_as=choice)
        assert isinstance(y, np.ndarray)
        np.testing.assert_array_equal(y, expected(session, batch))


def test_sequences_of_outputs_are_converted_item_by_item(tmp_path):
    torch = pytest.importorskip("torch")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = onemodel.Session.load(model.SerializeToString())
    x = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    (parts,) = session.run(None, {"x": x}, outputs_as="input")
    assert [type(part) for part in parts] == [torch.Tensor] * 3
    torch.testing.assert_close(torch.cat(parts), x)


def test_torch_tensors_in_and_out(batch):
    torch = pytest.importorskip("torch")
    session = onemodel.Session.load(
        MODELS / "mlp.onnx", onemodel.SessionOptions(backend="numpy", outputs_as="input")
    )
    tensor = torch.from_numpy(batch.copy())
    (y,) = session.run(None, {"input": tensor})
    assert isinstance(y, torch.Tensor)
    (reference,) = session.run(None, {"input": batch}, outputs_as="numpy")
    np.testing.assert_array_equal(y.numpy(), reference)
    (as_numpy,) = session.run(None, {"input": tensor}, outputs_as="numpy")
    assert isinstance(as_numpy, np.ndarray)


def test_torch_tensors_are_read_in_place_and_outputs_wrapped_without_a_copy(batch):
    torch = pytest.importorskip("torch")
    from onemodel import arrays

    tensor = torch.from_numpy(batch)
    taken = arrays.from_other_library(tensor, np, "input")
    assert np.shares_memory(taken, batch)
    output = np.arange(6, dtype=np.float32).reshape(2, 3)
    (handed_back,) = arrays.output_converter("input", {"input": tensor}, np)([output])
    assert isinstance(handed_back, torch.Tensor)
    assert handed_back.data_ptr() == output.ctypes.data


def test_torch_in_and_out_matches_the_same_mlp_written_in_torch(batch):
    """The exported MLP is Linear, ReLU, Linear, exact GELU, Linear (tests/models/mlp.onnx)."""
    torch = pytest.importorskip("torch")
    import onnx
    from onnx import numpy_helper

    weights = {
        tensor.name: torch.from_numpy(numpy_helper.to_array(tensor).copy())
        for tensor in onnx.load(MODELS / "mlp.onnx").graph.initializer
    }

    def linear(x, layer):
        return x @ weights[f"net.{layer}.weight"].T + weights[f"net.{layer}.bias"]

    x = torch.from_numpy(batch)
    hidden = torch.nn.functional.gelu(linear(torch.relu(linear(x, 0)), 2))
    reference = linear(hidden, 4)
    session = onemodel.Session.load(MODELS / "mlp.onnx", onemodel.SessionOptions(backend="numpy"))
    (y,) = session.run(None, {"input": x}, outputs_as="input")
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, reference, rtol=1e-5, atol=1e-5)


def test_tensors_that_need_gradients_are_refused_with_the_input_named(session):
    torch = pytest.importorskip("torch")
    x = torch.zeros((1, 32), requires_grad=True)
    with pytest.raises(onemodel.SessionError, match="DLPack") as caught:
        session.run(None, {"input": x})
    assert caught.value.value == "input"


def test_a_wrong_element_type_through_dlpack_is_invalid_input(session):
    with pytest.raises(onemodel.SessionError, match="element type") as caught:
        session.run(None, {"input": DLPackOnly(np.zeros((1, 32), np.float64))})
    assert caught.value.kind is ErrorKind.INVALID_INPUT


def test_element_types_without_a_dlpack_form_stay_numpy():
    torch = pytest.importorskip("torch")
    import ml_dtypes
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["narrow"], to=TensorProto.BFLOAT16),
            helper.make_node("Neg", ["x"], ["negated"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [
            helper.make_tensor_value_info("narrow", TensorProto.BFLOAT16, [2]),
            helper.make_tensor_value_info("negated", TensorProto.FLOAT, [2]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = onemodel.Session.load(model.SerializeToString())
    x = torch.tensor([1.5, -2.0])
    narrow, negated = session.run(None, {"x": x}, outputs_as="input")
    assert isinstance(narrow, np.ndarray) and narrow.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(narrow.astype(np.float32), x.numpy())
    assert isinstance(negated, torch.Tensor)
    torch.testing.assert_close(negated, -x)
