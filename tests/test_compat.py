"""`onemodel.compat`: programs written the way packages use onnxruntime, run once on the real
onnxruntime and once through the shim, must give the same results."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onemodel
from onemodel import compat
from onemodel.backends import KernelPaths

ort = pytest.importorskip("onnxruntime")
MODELS = Path(__file__).parent / "models"

# Each program defines main(model_path) -> dict of JSON-able values and arrays, as a package's
# own code would call onnxruntime. They are run in this process (sys.modules restored after).
PROGRAMS = {
    "session_options_and_provider_list": """
        import numpy as np
        import onnxruntime as ort

        def main(model_path):
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.enable_cpu_mem_arena = False
            options.log_severity_level = 3
            wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"]
            providers = [p for p in wanted if p in ort.get_available_providers()]
            session = ort.InferenceSession(model_path, sess_options=options, providers=providers)
            first = session.get_inputs()[0]
            wide = np.random.default_rng(0).standard_normal((5, 64)).astype(np.float32)
            batch = wide[:, ::2]  # a strided view, as slicing a larger batch gives
            (logits,) = session.run(None, {first.name: batch})
            return {
                "input": [first.name, first.shape, first.type],
                "outputs": [[o.name, o.shape, o.type] for o in session.get_outputs()],
                "providers": session.get_providers(),
                "logits": logits,
                "device": ort.get_device(),
            }
    """,
    "metadata_lookups_and_provider_tuples": """
        import json
        import numpy as np
        import onnxruntime

        def main(model_path):
            session = onnxruntime.InferenceSession(
                model_path,
                providers=[("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})],
            )
            meta = session.get_modelmeta()
            labels = json.loads(meta.custom_metadata_map["labels"])
            x = np.linspace(-1, 1, 4 * 32, dtype=np.float32).reshape(4, 32)
            output = session.get_outputs()[0].name
            (logits,) = session.run([output], {session.get_inputs()[0].name: x})
            return {
                "meta": [meta.producer_name, meta.graph_name, meta.version, meta.description,
                         meta.domain, meta.graph_description],
                "predicted": [labels[i] for i in logits.argmax(axis=1)],
                "logits": logits,
            }
    """,
    "list_feeds_scalars_and_run_options": """
        import numpy as np
        import onnxruntime as ort
        from onnxruntime.capi._pybind_state import get_available_providers
        from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

        ort.set_default_logger_severity(3)
        ort.disable_telemetry_events()
        assert tuple(int(p) for p in ort.__version__.split(".")[:2]) >= (1, 14)

        def main(model_path):
            session = ort.InferenceSession(model_path, providers=get_available_providers())
            run_options = ort.RunOptions()
            run_options.log_severity_level = 3
            results = {}
            for label, scale in (("zero_d", np.array(2.5, np.float32)),
                                 ("zero_d_view", np.arange(3, dtype=np.float32)[1, ...])):
                (y,) = session.run(["y"], {"x": [[1, 2, 3], [4, 5, 6]], "scale": scale},
                                   run_options)
                results[label] = y
            try:
                session.run(None, {"x": [1.0, 2.0, 3.0], "scale": np.array(1, np.float32)})
            except InvalidArgument:
                results["wrong_rank"] = "InvalidArgument"
            return results
    """,
    "classifier_with_zipmap": """
        import numpy as np
        import onnxruntime as rt

        def main(model_path):
            session = rt.InferenceSession(model_path, providers=["CPUExecutionProvider"])
            input_name = session.get_inputs()[0].name
            label_name, proba_name = (o.name for o in session.get_outputs())
            X = np.load(model_path.replace(".onnx", ".npz"))["X"].astype(np.float32)
            labels, probabilities = session.run([label_name, proba_name], {input_name: X[:6]})
            return {
                "types": [o.type for o in session.get_outputs()],
                "labels": labels,
                "probabilities": np.array(
                    [[row[k] for k in sorted(row)] for row in probabilities], np.float32
                ),
                "classes": [sorted(int(k) for k in row) for row in probabilities],
            }
    """,
}


def scale_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["y"])],
        "scale",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 3]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("compat")
    mlp = onnx.load(MODELS / "mlp.onnx")
    mlp.doc_string = "an MLP with labels"
    mlp.graph.doc_string = "two layers"
    mlp.model_version = 7
    onnx.helper.set_model_props(mlp, {"labels": json.dumps([f"class {i}" for i in range(10)])})
    onnx.save(mlp, folder / "mlp.onnx")
    onnx.save(scale_model(), folder / "scale.onnx")
    zipmap = MODELS / "sklearn" / "logistic_regression_zipmap.onnx"
    return {
        "session_options_and_provider_list": str(MODELS / "mlp.onnx"),
        "metadata_lookups_and_provider_tuples": str(folder / "mlp.onnx"),
        "list_feeds_scalars_and_run_options": str(folder / "scale.onnx"),
        "classifier_with_zipmap": str(zipmap),
    }


@pytest.fixture()
def restore_onnxruntime():
    yield
    compat.uninstall()
    assert sys.modules["onnxruntime"] is ort


def run_program(path: Path, model: str, *, shim: bool) -> dict:
    if shim:
        compat.install()
    try:
        return runpy.run_path(str(path))["main"](model)
    finally:
        compat.uninstall()


def assert_same(ours: dict, theirs: dict) -> None:
    assert ours.keys() == theirs.keys()
    for key, reference in theirs.items():
        if isinstance(reference, np.ndarray):
            assert ours[key].dtype == reference.dtype, key
            np.testing.assert_allclose(ours[key], reference, rtol=1e-5, atol=1e-6, err_msg=key)
        else:
            assert ours[key] == reference, key


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_gives_the_same_results_through_the_shim(name, models, tmp_path):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(PROGRAMS[name]))
    theirs = run_program(path, models[name], shim=False)
    ours = run_program(path, models[name], shim=True)
    assert sys.modules["onnxruntime"] is ort
    assert_same(ours, theirs)


def test_python_dash_m_runs_a_program_on_onemodel(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(
        textwrap.dedent("""
        import sys
        import onnxruntime
        import onnxruntime.capi._pybind_state as native
        session = onnxruntime.InferenceSession(sys.argv[1])
        print(type(session).__module__, native.__name__, sys.argv[2:])
        """)
    )
    completed = subprocess.run(
        [sys.executable, "-m", "onemodel.compat", str(script), str(MODELS / "mlp.onnx"), "x"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert completed.stdout.split() == [
        "onemodel.compat.onnxruntime.inference_session",
        "onemodel.compat.onnxruntime.capi._pybind_state",
        "['x']",
    ]


def test_install_registers_the_submodules_and_uninstall_restores_onnxruntime(
    restore_onnxruntime,
):
    compat.install()
    import onnxruntime as shim
    from onnxruntime.capi import _pybind_state, onnxruntime_pybind11_state

    assert shim is compat.onnxruntime
    assert _pybind_state is onnxruntime_pybind11_state
    assert compat.installed()
    compat.install()  # twice is harmless
    compat.uninstall()
    assert sys.modules["onnxruntime"] is ort
    assert not compat.installed()


def test_errors_are_onnxruntimes_classes_and_session_errors(models, tmp_path):
    shim = compat.onnxruntime
    session = shim.InferenceSession(models["list_feeds_scalars_and_run_options"])
    with pytest.raises(shim.InvalidArgument) as caught:
        session.run(None, {"x": np.zeros((2, 4), np.float32), "scale": 1.0})
    assert isinstance(caught.value, onemodel.SessionError)
    assert caught.value.value == "x"
    with pytest.raises(shim.NoSuchFile):
        shim.InferenceSession(tmp_path / "missing.onnx")
    with pytest.raises(shim.InvalidProtobuf):
        shim.InferenceSession(b"not a model")


def test_terminate_in_run_options_stops_runs_until_it_is_cleared(models):
    shim = compat.onnxruntime
    session = shim.InferenceSession(models["list_feeds_scalars_and_run_options"])
    feed = {"x": np.ones((1, 3), np.float32), "scale": 2.0}
    options = shim.RunOptions()
    options.terminate = True
    with pytest.raises(shim.Fail, match="CANCELLED"):
        session.run(None, feed, options)
    options.terminate = False
    np.testing.assert_array_equal(session.run(None, feed, options)[0], np.full((1, 3), 2.0))


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("ORT_DISABLE_ALL", onemodel.OptimizationLevel.NONE),
        ("ORT_ENABLE_BASIC", onemodel.OptimizationLevel.BASIC),
        ("ORT_ENABLE_EXTENDED", onemodel.OptimizationLevel.ALL),
        ("ORT_ENABLE_ALL", onemodel.OptimizationLevel.ALL),
    ],
)
def test_optimization_levels_map_to_onemodels(level, expected):
    shim = compat.onnxruntime
    options = shim.SessionOptions()
    options.graph_optimization_level = getattr(shim.GraphOptimizationLevel, level)
    options.intra_op_num_threads = 3
    session = shim.InferenceSession(str(MODELS / "mlp.onnx"), options)
    assert session.session.options.optimization_level == expected
    assert session.session.options.intra_op_threads == 3


def test_onemodels_own_options_are_accepted():
    options = onemodel.SessionOptions(max_cached_plans=3, backend="numpy-reference")
    session = compat.onnxruntime.InferenceSession(str(MODELS / "mlp.onnx"), options)
    assert session.session.options is options
    assert session.session.backend == "numpy-reference"
    session.set_providers(["CPUExecutionProvider"])  # providers given: they pick the backend
    assert session.session.backend == "numpy"
    assert session.session.options.max_cached_plans == 3


def test_providers_without_a_backend_are_skipped_with_a_warning():
    shim = compat.onnxruntime
    with pytest.warns(RuntimeWarning, match="TensorrtExecutionProvider"):
        session = shim.InferenceSession(
            str(MODELS / "mlp.onnx"),
            providers=["TensorrtExecutionProvider", "CPUExecutionProvider"],
        )
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert session.get_provider_options() == {"CPUExecutionProvider": {}}
    with pytest.raises(ValueError, match="same length"):
        shim.InferenceSession(str(MODELS / "mlp.onnx"), providers=["A", "B"], provider_options=[{}])
    with pytest.raises(ValueError, match="name or a"):
        shim.InferenceSession(str(MODELS / "mlp.onnx"), providers=[42])


def test_cuda_provider_answers_with_the_cupy_backend_or_warns():
    shim = compat.onnxruntime
    cuda = ("CUDAExecutionProvider", {"device_id": 0})
    if "cupy" in KernelPaths.available():
        session = shim.InferenceSession(str(MODELS / "mlp.onnx"), providers=[cuda])
        assert session.session.backend == "cupy"
        assert session.get_providers() == ["CUDAExecutionProvider", "CPUExecutionProvider"]
        assert shim.get_device() == "GPU"
    else:
        with pytest.warns(RuntimeWarning, match="CuPy cannot reach"):
            session = shim.InferenceSession(str(MODELS / "mlp.onnx"), providers=[cuda])
        assert session.session.backend == "numpy"
        assert shim.get_available_providers() == ["CPUExecutionProvider"]
        assert shim.get_device() == "CPU"


def test_set_providers_rebuilds_the_session_on_the_chosen_backend():
    session = compat.onnxruntime.InferenceSession(str(MODELS / "mlp.onnx"))
    before = session.session
    session.set_providers(["CPUExecutionProvider"])
    assert session.session is not before
    assert session.get_providers() == ["CPUExecutionProvider"]


def test_overridable_initializers_are_not_inputs(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("bias", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        initializer=[helper.make_tensor("bias", TensorProto.FLOAT, [2], [1.0, 2.0])],
    )
    for ir_version in (3, 8):
        data = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=ir_version
        ).SerializeToString()
        ours, theirs = compat.onnxruntime.InferenceSession(data), ort.InferenceSession(data)
        for method in ("get_inputs", "get_overridable_initializers"):
            assert [(a.name, a.type, a.shape) for a in getattr(ours, method)()] == [
                (a.name, a.type, a.shape) for a in getattr(theirs, method)()
            ], (ir_version, method)


def test_type_strings_and_shapes_match_onnxruntime_for_sequences_and_unknown_dims():
    graph = helper.make_graph(
        [helper.make_node("SequenceLength", ["s"], ["n"]), helper.make_node("Abs", ["x"], ["y"])],
        "g",
        [
            helper.make_tensor_sequence_value_info("s", TensorProto.INT64, None),
            helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["N", None, 3]),
        ],
        [
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
            helper.make_tensor_value_info("y", TensorProto.DOUBLE, None),
        ],
    )
    data = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8
    ).SerializeToString()
    ours = compat.onnxruntime.InferenceSession(data)
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert [(a.name, a.type, a.shape) for a in ours.get_inputs()] == [
        (a.name, a.type, a.shape) for a in theirs.get_inputs()
    ]
    assert [a.type for a in ours.get_outputs()] == [a.type for a in theirs.get_outputs()]


def test_scalars_and_python_numbers_are_accepted_for_0d_inputs(models):
    session = compat.onnxruntime.InferenceSession(models["list_feeds_scalars_and_run_options"])
    x = np.array([[1.0, -2.0, 3.0]], np.float32)
    for scale in (np.float32(1.5), 1.5):
        (y,) = session.run(None, {"x": x, "scale": scale})
        np.testing.assert_array_equal(y, x * np.float32(1.5))
