"""Cold start (issue 16): loading and running a model reads the protobuf messages alone, not the
onnx package, and loads neither ml_dtypes, CuPy, the array API compat layer nor exact mode's
kernels unless the model or the call needs them. Behaviour, not timing: each test runs a fresh
interpreter and looks at what it imported."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onemodel.backends.numpy_cpu.threads import THREAD_VARIABLES

MLP = Path(__file__).parent / "models" / "mlp.onnx"

# What `import onnx` brings and a model's load and run must not: the package itself (its
# __init__ imports all of these), its helpers, and what it imports for them.
ONNX_PACKAGE = (
    "onnx", "onnx.helper", "onnx.numpy_helper", "onnx.checker", "onnx.shape_inference",
    "onnx.reference", "onnx.version_converter", "onnx.external_data_helper", "onnx.serialization",
    "onnx.onnx_cpp2py_export", "google.protobuf.json_format",
)  # fmt: skip
NOT_NEEDED = (
    "ml_dtypes", "cupy", "array_api_compat", "threadpoolctl", "onemodel.cli",
    "onemodel.backends.exact_elementary", "onemodel.backends.exact_activations",
    "onemodel.backends.exact_arrays", "onemodel.backends.exact_gemm",
)  # fmt: skip


def loaded_after(code: str) -> list[str]:
    """Which of ONNX_PACKAGE and NOT_NEEDED a fresh interpreter has loaded after `code`, run
    with no BLAS thread count in its environment (with one, a session that asks for all cores
    needs threadpoolctl to change it)."""
    watched = ONNX_PACKAGE + NOT_NEEDED
    script = (
        f"import sys, json\n{code}\nprint(json.dumps([m for m in {watched!r} if m in sys.modules]))"
    )
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(result.stdout.splitlines()[-1])


def test_loading_and_running_the_mlp_imports_neither_onnx_nor_what_it_does_not_use():
    code = (
        "import numpy as np, onemodel\n"
        f"session = onemodel.Session.load({str(MLP)!r})\n"
        "(y,) = session.run(None, {'input': np.ones((8, 32), np.float32)})\n"
        "assert y.shape == (8, 10) and np.isfinite(y).all()"
    )
    assert loaded_after(code) == []


def test_the_onnxruntime_drop_in_runs_a_model_without_onnx():
    code = (
        "import numpy as np, onemodel\n"
        f"session = onemodel.InferenceSession({str(MLP)!r})\n"
        "(y,) = session.run(None, {'input': np.ones((8, 32), np.float32)})\n"
        "assert y.shape == (8, 10)"
    )
    assert loaded_after(code) == []


def test_the_cli_runs_a_model_without_onnx():
    code = f"from onemodel.cli import main\nassert main(['run', {str(MLP)!r}]) == 0"
    assert loaded_after(code) == ["onemodel.cli"]


def test_the_watch_sees_onnx_when_it_is_imported():
    assert loaded_after("import onnx")[:1] == ["onnx"]


def test_a_bfloat16_model_loads_ml_dtypes_and_only_then():
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    code = (
        "import numpy as np, onemodel\n"
        "from onemodel.tensors import DType\n"
        f"session = onemodel.Session.load({model.SerializeToString()!r})\n"
        "before = 'ml_dtypes' in sys.modules\n"
        "x = np.array([1.5, -2.0], np.float32).astype(DType.BFLOAT16.numpy)\n"
        "(y,) = session.run(None, {'x': x})\n"
        "assert y.tolist() == [1.5, -2.0]"
    )
    assert "ml_dtypes" in loaded_after(code)


@pytest.mark.parametrize("onnx_first", [True, False], ids=["onnx-imported-first", "onnx-later"])
def test_our_messages_are_onnxs_classes_whichever_is_imported_first(onnx_first):
    imports = ["import onnx", "from onemodel.graph import onnx_proto"]
    code = "\n".join(imports if onnx_first else imports[::-1]) + (
        "\nassert onnx_proto.ModelProto is onnx.ModelProto"
        "\nassert onnx_proto.TensorProto is onnx.TensorProto"
        "\nassert onnx_proto.IR_VERSION == onnx.IR_VERSION"
        "\nassert onnx.onnx_ml_pb2.ModelProto is onnx.ModelProto"
    )
    assert loaded_after(code)[:1] == ["onnx"]


def test_a_model_proto_built_with_onnx_still_loads():
    from onemodel.graph.importer import model_from_proto
    from onemodel.session import Session

    session = Session.create(model_from_proto(onnx.load(MLP)))
    (y,) = session.run(None, {"input": np.ones((8, 32), np.float32)})
    assert y.shape == (8, 10)


def test_an_opset_above_what_the_ir_version_guarantees_is_still_checked_with_onnx():
    from onemodel.graph.onnx_proto import defines_default_opset

    newest = onnx.defs.onnx_opset_version()
    assert defines_default_opset(newest) and defines_default_opset(1)
    assert not defines_default_opset(newest + 1) and not defines_default_opset(0)
