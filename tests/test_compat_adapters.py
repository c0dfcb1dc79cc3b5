"""onemodel.compat's LoRA adapters: onnxruntime's adapter files written and read by either side
are read by the other, and a run with an active adapter gives onnxruntime's output."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onemodel.compat import onnxruntime as shim
from tests.compat_models import module_ids, modules

both = pytest.mark.parametrize("rt", modules(), ids=module_ids())
PARAMS = {
    "lora_a": np.arange(8, dtype=np.float32).reshape(4, 2),
    "lora_b": np.arange(8, dtype=np.float32).reshape(2, 4) / 8,
    "steps": np.array([1, -2, 3], np.int64),
}


def _write(rt, path, params=PARAMS):
    adapter = rt.AdapterFormat()
    adapter.set_adapter_version(3)
    adapter.set_model_version(2)
    kept = {name: rt.OrtValue.ortvalue_from_numpy(value) for name, value in params.items()}
    adapter.set_parameters(kept)
    adapter.export_adapter(str(path))


def _lora_model() -> bytes:
    """y = x @ W + (x @ A) @ B, A and B overridable initializers of rank 0 extent by default."""
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["base"]),
            helper.make_node("MatMul", ["x", "lora_a"], ["down"]),
            helper.make_node("MatMul", ["down", "lora_b"], ["up"]),
            helper.make_node("Add", ["base", "up"], ["y"]),
        ],
        "lora",
        [
            value("x", TensorProto.FLOAT, [3, 4]),
            value("lora_a", TensorProto.FLOAT, [4, "r"]),
            value("lora_b", TensorProto.FLOAT, ["r", 4]),
        ],
        [value("y", TensorProto.FLOAT, [3, 4])],
        [
            numpy_helper.from_array(np.eye(4, dtype=np.float32), "w"),
            numpy_helper.from_array(np.zeros((4, 0), np.float32), "lora_a"),
            numpy_helper.from_array(np.zeros((0, 4), np.float32), "lora_b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


@pytest.mark.parametrize("writer", modules(), ids=module_ids())
@both
def test_adapter_files_read_back_on_either_side(rt, writer, tmp_path):
    path = tmp_path / "params.onnx_adapter"
    _write(writer, path)
    read = rt.AdapterFormat.read_adapter(str(path))
    assert (read.get_adapter_version(), read.get_model_version()) == (3, 2)
    params = read.get_parameters()
    assert sorted(params) == sorted(PARAMS)
    for name, value in params.items():
        assert value.element_type() == (7 if name == "steps" else 1)
        np.testing.assert_array_equal(value.numpy(), PARAMS[name])


@both
def test_a_run_with_an_active_adapter_feeds_its_parameters(rt, tmp_path):
    path = tmp_path / "lora.onnx_adapter"
    _write(shim, path, {"lora_a": PARAMS["lora_a"], "lora_b": PARAMS["lora_b"]})
    adapter = rt.LoraAdapter()
    adapter.Load(str(path))
    session = rt.InferenceSession(_lora_model(), providers=["CPUExecutionProvider"])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (plain,) = session.run(None, {"x": x})
    np.testing.assert_allclose(plain, x)
    options = rt.RunOptions()
    options.add_active_adapter(adapter)
    (adapted,) = session.run(None, {"x": x}, options)
    np.testing.assert_allclose(adapted, x + x @ PARAMS["lora_a"] @ PARAMS["lora_b"], rtol=1e-6)
