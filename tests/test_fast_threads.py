"""SessionOptions.intra_op_threads sets NumPy's BLAS threads for each run.

Fast-mode bits may differ between thread counts (OpenBLAS chooses other GEMM kernels when
threaded, and threaded gemv splits the sum over k); the values agree to float32 rounding.
Exact mode's thread-count independence is tested in test_exact_determinism.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onemodel import Session, SessionOptions
from onemodel.backends.numpy_cpu.threads import THREAD_VARIABLES
from onemodel.graph.importer import model_from_proto

threadpoolctl = pytest.importorskip("threadpoolctl")


def _cnn_with_vector_products() -> object:
    """Conv (GEMM), a 1×1 conv on a 1×1 plane (matrix-vector), then batch-1 MatMul and Gemm
    with K = 4096 (vector-matrix: the products whose threaded BLAS splits the sum over k)."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> object:
        scale = 1.0 / np.sqrt(np.prod(shape[1:]) if len(shape) > 1 else shape[0])
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("GlobalAveragePool", ["r1"], ["p"]),
        helper.make_node("Conv", ["p", "w2"], ["c2"]),
        helper.make_node("Flatten", ["c2"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["h"]),
        helper.make_node("Gemm", ["h", "g"], ["y"]),
    ]
    weights = [
        weight("w1", 64, 16, 3, 3),
        weight("w2", 4096, 64, 1, 1),
        weight("m", 4096, 1000),
        weight("g", 1000, 512),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])
    graph = helper.make_graph(nodes, "cnn", [x], [y], weights)
    return helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 13)])


def _blas_threads() -> set[int]:
    return {
        info["num_threads"]
        for info in threadpoolctl.threadpool_info()
        if info["user_api"] == "blas"
    }


def test_one_and_two_threads_set_blas_and_agree() -> None:
    model = model_from_proto(_cnn_with_vector_products())
    x = np.random.default_rng(1).standard_normal((1, 16, 32, 32)).astype(np.float32)
    results = {}
    for threads in (1, 2, 1):
        session = Session(model, SessionOptions(intra_op_threads=threads))
        (results[threads],) = session.run(None, {"x": x})
        if _blas_threads():  # some BLAS is loaded: the run set its threads
            assert _blas_threads() == {threads}
    np.testing.assert_allclose(results[2], results[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("options_from", ["shim", "onnxruntime"])
def test_the_onnxruntime_drop_in_honours_intra_op_num_threads(options_from: str) -> None:
    """onemodel.InferenceSession takes intra_op_num_threads from onnxruntime's SessionOptions
    (the shim's or onnxruntime's own object) and sets the BLAS threads in each run, as
    onnxruntime bounds its intra-op pool."""
    import onnxruntime

    import onemodel
    from onemodel.compat import onnxruntime as shim

    model = _cnn_with_vector_products().SerializeToString()
    x = np.random.default_rng(1).standard_normal((1, 16, 32, 32)).astype(np.float32)
    kind = shim if options_from == "shim" else onnxruntime
    for threads in (1, 2, 1):
        options = kind.SessionOptions()
        options.intra_op_num_threads = threads
        session = onemodel.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        assert session.get_session_options().intra_op_num_threads == threads
        session.run(None, {"x": x})
        if _blas_threads():
            assert _blas_threads() == {threads}


def test_the_blas_starts_with_the_count_all_cores_asks_for() -> None:
    """A session asking for all cores (intra_op_threads=0) leaves the BLAS alone when no
    thread variable is set, on the premise that it then starts with one thread per core."""
    code = (
        "import numpy, threadpoolctl;"
        "from onemodel.backends.numpy_cpu.threads import start_up_count;"
        "print(start_up_count(), sorted({i['num_threads'] for i in threadpoolctl.threadpool_info()"
        " if i['user_api'] == 'blas'}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split(maxsplit=1)
    assert output[1].strip() in ("[]", f"[{output[0]}]")
