"""onemodel.compat's InferenceSession beyond `run`: options that take effect (optimised model,
profiling, free dimensions, added initializers, config read from the model), run_async, and
onnxruntime's error types and texts. Each test runs on the shim and on the real onnxruntime
(where installed) and checks the same facts."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onemodel.compat import onnxruntime as shim
from tests.compat_models import WEIGHT, add_mul_add, module_ids, modules, scale

both = pytest.mark.parametrize("rt", modules(), ids=module_ids())
X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
CPU = ["CPUExecutionProvider"]


@both
def test_version_build_info_and_api_version(rt):
    assert rt.__version__.split(".")[:2] == ["1", "32"] or rt is not shim
    assert shim.__version__ == shim.get_version_string() == "1.32.0"
    assert "Build Info" in rt.get_build_info()


@both
def test_optimized_model_filepath_writes_the_model(rt, tmp_path):
    options = rt.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimised.onnx")
    rt.InferenceSession(scale().SerializeToString(), options, providers=CPU)
    written = onnx.load(tmp_path / "optimised.onnx")
    again = rt.InferenceSession(written.SerializeToString(), providers=CPU)
    np.testing.assert_array_equal(again.run(None, {"X": X})[0], X * WEIGHT)


@both
def test_optimized_model_with_external_initializers(rt, tmp_path):
    options = rt.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimised.onnx")
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", "weights.bin"
    )
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "8"
    )
    rt.InferenceSession(scale().SerializeToString(), options, providers=CPU)
    assert (tmp_path / "weights.bin").stat().st_size >= WEIGHT.nbytes
    again = rt.InferenceSession(str(tmp_path / "optimised.onnx"), providers=CPU)
    np.testing.assert_array_equal(again.run(None, {"X": X})[0], X * WEIGHT)


@both
def test_profiling_writes_onnxruntimes_json_with_an_event_per_node(rt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = rt.SessionOptions()
    options.enable_profiling = True
    options.graph_optimization_level = rt.GraphOptimizationLevel.ORT_DISABLE_ALL  # no fusions
    session = rt.InferenceSession(add_mul_add().SerializeToString(), options, providers=CPU)
    start = session.get_profiling_start_time_ns()
    feed = {name: np.ones((2, 4), np.float32) for name in "ABC"}
    session.run(None, feed)
    path = session.end_profiling()
    text = Path(path).read_text()
    lines = text.splitlines()
    assert lines[0].startswith("[") and lines[-1].endswith("]")
    events = json.loads(text)
    for event in events:
        assert {"pid", "dur", "ts", "ph", "name", "args", "cat"} <= event.keys()
    nodes = {e["name"] for e in events if e["cat"] == "Node" and e["name"].endswith("_kernel_time")}
    assert {"add_0_kernel_time", "mul_0_kernel_time", "add_1_kernel_time"} <= nodes
    assert {e["args"]["op_name"] for e in events if e["name"] == "mul_0_kernel_time"} == {"Mul"}
    assert any(e["name"] == "model_run" for e in events)
    later = rt.InferenceSession(add_mul_add().SerializeToString(), options, providers=CPU)
    assert 0 < start <= later.get_profiling_start_time_ns()


def _free_dims_model() -> bytes:
    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["Dim1", "Dim2", 5])
    dims = value.type.tensor_type.shape.dim
    dims[0].denotation, dims[1].denotation = "DATA_BATCH", "DATA_CHANNEL"
    graph = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["y"])],
        "free",
        [value],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["Dim1", "Dim2", 5])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@both
def test_free_dimension_overrides_fix_the_dims_they_name(rt):
    by_name = rt.SessionOptions()
    by_name.add_free_dimension_override_by_name("Dim1", 4)
    by_name.add_free_dimension_override_by_name("Dim2", 6)
    session = rt.InferenceSession(_free_dims_model(), by_name, providers=CPU)
    assert session.get_inputs()[0].shape == [4, 6, 5]
    assert session.run(None, {"x": -np.ones((4, 6, 5), np.float32)})[0].min() == 1.0
    with pytest.raises(rt.capi._pybind_state.InvalidArgument):
        session.run(None, {"x": np.ones((3, 6, 5), np.float32)})
    by_denotation = rt.SessionOptions()
    by_denotation.add_free_dimension_override_by_denotation("DATA_BATCH", 3)
    by_denotation.add_free_dimension_override_by_denotation("DATA_CHANNEL", 5)
    session = rt.InferenceSession(_free_dims_model(), by_denotation, providers=CPU)
    assert session.get_inputs()[0].shape == [3, 5, 5]


@both
def test_add_initializer_replaces_the_models(rt):
    options = rt.SessionOptions()
    replacement = np.array([[2.0, 1.0], [4.0, 3.0], [6.0, 5.0]], np.float32)
    kept = rt.OrtValue.ortvalue_from_numpy(replacement)  # onnxruntime needs it kept alive
    options.add_initializer("W", kept)
    session = rt.InferenceSession(scale().SerializeToString(), options, providers=CPU)
    np.testing.assert_array_equal(session.run(["Y"], {"X": X})[0], X * replacement)


def _model_with_missing_external_data() -> bytes:
    """y = x + offsets, the offsets' data in a file that does not exist."""
    offsets = numpy_helper.from_array(np.zeros(4, np.float32), "offsets")
    offsets.ClearField("raw_data")
    offsets.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "offsets_not_on_disk.bin"), ("length", "16")):
        offsets.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "offsets"], ["y"])],
        "offset",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [offsets],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@both
def test_external_initializers_given_by_the_caller(rt):
    offsets = np.array([0.0, 0.5, 1.0, 1.5], np.float32)
    x = np.ones(4, np.float32)
    by_value = rt.SessionOptions()
    kept = rt.OrtValue.ortvalue_from_numpy(offsets)  # onnxruntime needs it kept alive
    by_value.add_external_initializers(["offsets"], [kept])
    session = rt.InferenceSession(_model_with_missing_external_data(), by_value, providers=CPU)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x + offsets)
    in_memory = rt.SessionOptions()
    data = offsets.tobytes()
    in_memory.add_external_initializers_from_files_in_memory(
        ["offsets_not_on_disk.bin"], [data], [len(data)]
    )
    session = rt.InferenceSession(_model_with_missing_external_data(), in_memory, providers=CPU)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x + offsets)


@both
def test_session_options_exist_without_being_passed_and_load_from_the_model(rt, monkeypatch):
    model = scale()
    config = {"session_options": {"inter_op_num_threads": 5, "intra_op_num_threads": 2}}
    helper.set_model_props(model, {"ort_config": json.dumps(config)})
    plain = rt.InferenceSession(model.SerializeToString(), providers=CPU)
    assert plain.get_session_options().intra_op_num_threads == 0
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    session = rt.InferenceSession(model.SerializeToString(), providers=CPU)
    options = session.get_session_options()
    assert (options.inter_op_num_threads, options.intra_op_num_threads) == (5, 2)
    assert options.execution_mode == rt.ExecutionMode.ORT_SEQUENTIAL


@both
def test_run_async_calls_back_with_the_outputs(rt):
    session = rt.InferenceSession(scale().SerializeToString(), providers=CPU)
    done, received = threading.Event(), {}

    def callback(outputs, data, error):
        received.update(outputs=outputs, data=data, error=error)
        done.set()

    session.run_async(["Y"], {"X": X}, callback, "mine")
    assert done.wait(30)
    assert (received["data"], received["error"]) == ("mine", "")
    np.testing.assert_array_equal(received["outputs"][0], X * WEIGHT)


@both
def test_errors_have_onnxruntimes_types_and_texts(rt):
    session = rt.InferenceSession(add_mul_add().SerializeToString(), providers=CPU)
    with pytest.raises(
        ValueError, match=r"Required inputs \(\['C'\]\) are missing from input feed"
    ):
        session.run(None, {"A": np.ones((1, 4), np.float32), "B": np.ones((1, 4), np.float32)})
    with pytest.raises(RuntimeError, match="SessionOptions does not have configuration with key"):
        rt.SessionOptions().get_session_config_entry("nothing")
    native = rt.capi._pybind_state
    with pytest.raises(native.InvalidArgument) as caught:
        session.run(None, {name: np.ones((1, 4), np.float32) for name in "ABCD"})
    assert str(caught.value).startswith("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ")
    with pytest.raises(native.NoSuchFile) as caught:
        rt.InferenceSession("no/such/model.onnx")
    assert str(caught.value).startswith("[ONNXRuntimeError] : 3 : NO_SUCHFILE : ")
    with pytest.raises(RuntimeError, match="Unknown Provider Type: InvalidProvider"):
        session.set_providers(["InvalidProvider"])  # leaves the session empty, as onnxruntime
    with pytest.raises(rt.capi._pybind_state.Fail, match="record_ep_graph_assignment_info"):
        rt.InferenceSession(add_mul_add().SerializeToString()).get_provider_graph_assignment_info()


@both
def test_provider_assignment_memory_infos_and_ep_devices(rt):
    options = rt.SessionOptions()
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    session = rt.InferenceSession(add_mul_add().SerializeToString(), options, providers=CPU)
    subgraphs = session.get_provider_graph_assignment_info()
    assert {s.ep_name for s in subgraphs} == {"CPUExecutionProvider"}
    nodes = sorted(f"{n.domain}:{n.op_type}/{n.name}" for s in subgraphs for n in s.get_nodes())
    assert nodes == [":Add/add_0", ":Add/add_1", ":Mul/mul_0"]
    assert len(session.get_input_memory_infos()) == 3
    assert session.get_output_memory_infos()[0].name == "Cpu"
    assert len(session.get_input_epdevices()) == 3


@both
def test_logger_callback_is_checked_and_receives_messages(rt):
    messages = []
    rt.set_default_logger_callback(lambda *record: messages.append(record), severity=0)
    try:
        rt.InferenceSession(scale().SerializeToString(), providers=CPU)
        assert messages and all(isinstance(m[4], str) for m in messages)
        with pytest.raises(RuntimeError):
            rt.set_default_logger_callback(print, severity=5)
        with pytest.raises(RuntimeError):
            rt.set_default_logger_callback("not callable")
    finally:
        rt.set_default_logger_callback(None)
        rt.set_default_logger_severity(2)
