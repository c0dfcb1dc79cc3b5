"""Exact mode keeps IEEE subnormals on a backend whose float32 arithmetic flushes them.

CuPy compiles every kernel with -ftz=true, so a float32 add, compare or conversion there reads
and writes subnormals as zeros. Exact mode promises NumPy's bits on every backend, so its
kernels must not rest on float32 arithmetic. The checked-device stand-in flushes as CuPy does;
each case below feeds values at and around the subnormal range and must give numpy-reference's
bits there (and on "cupy" on a GPU machine). The inputs are chosen so that the flushing would
show: a case whose stand-in result is compared against a flushing oracle fails.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onemodel import ExecutionMode, OptimizationLevel, Session, SessionOptions
from onemodel.backends import BackendUnavailableError, KernelPaths
from onemodel.graph.importer import model_from_proto
from tests.operator_harness import one_node_model
from tests.test_exact_operators import assert_bits, assert_reference_bits, exact_run

FLUSHING_PATHS = ["checked-device", pytest.param("cupy", marks=pytest.mark.gpu)]
TINY = np.float32(2.0**-126)  # the smallest normal float32


def tiny_values(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Subnormals (random bits with exponent 0), the smallest normals and zeros, both signs, and
    a few ordinary values: the range a flushing kernel gets wrong."""
    count = int(np.prod(shape))
    bits = rng.integers(1, 1 << 23, count, dtype=np.uint32)
    bits[rng.random(count) < 0.15] = 0x00800000  # 2^-126
    bits[rng.random(count) < 0.05] = 0
    bits |= (rng.random(count) < 0.5).astype(np.uint32) << 31
    values = bits.view(np.float32)
    ordinary = rng.random(count) < 0.1
    values[ordinary] = rng.standard_normal(int(ordinary.sum())).astype(np.float32)
    return values.reshape(shape)


def _cases() -> dict[str, tuple[str, list[np.ndarray], dict, int]]:
    rng = np.random.default_rng(5)
    image = tiny_values(rng, 2, 3, 6, 6)
    small = (rng.standard_normal((2, 3, 6, 6)) * 2.0**-120).astype(np.float32)
    weights = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    matrix = tiny_values(rng, 5, 7)
    return {
        "add": ("Add", [image, tiny_values(rng, 2, 3, 6, 6)], {}, 17),
        "sub": ("Sub", [image, tiny_values(rng, 6)], {}, 17),
        "mul": ("Mul", [small, np.float32([2.0**-5, 0.5, 3.0, -0.75, 1.0, 2.0**-20])], {}, 17),
        "div": ("Div", [small, np.float32([2.0**5, 3.0, -7.0, 1.5, 1e3, 2.0**10])], {}, 17),
        "max": ("Max", [image, tiny_values(rng, 2, 3, 6, 6)], {}, 17),
        "min": ("Min", [image, tiny_values(rng, 6, 6)], {}, 17),
        "abs": ("Abs", [image], {}, 17),
        "neg": ("Neg", [image], {}, 17),
        "relu": ("Relu", [image], {}, 17),
        "sqrt": ("Sqrt", [np.abs(image)], {}, 17),
        "floor": ("Floor", [image], {}, 17),
        "ceil": ("Ceil", [image], {}, 17),
        "round": ("Round", [image], {}, 17),
        "sign": ("Sign", [image], {}, 17),
        "equal": ("Equal", [image, np.zeros(6, np.float32)], {}, 17),
        "less": ("Less", [image, np.float32(TINY / 2).reshape(1)], {}, 17),
        "greater": ("Greater", [image, np.zeros(1, np.float32)], {}, 17),
        "greater_or_equal": ("GreaterOrEqual", [image, np.float32([TINY / 4])], {}, 17),
        "less_or_equal": ("LessOrEqual", [image, -image[..., ::-1]], {}, 17),
        "where": ("Where", [image > 0, image, -image], {}, 17),
        "cast_to_double": ("Cast", [image], {"to": 11}, 17),
        "cast_like": ("CastLike", [image.astype(np.float64) / 3, np.zeros(1, np.float32)], {}, 17),
        "cast_from_double": ("Cast", [image.astype(np.float64) * 0.75], {"to": 1}, 17),
        "cast_to_half": ("Cast", [np.concatenate([small * 2.0**100, image])], {"to": 10}, 17),
        "conv": ("Conv", [small, weights], {"pads": [1] * 4}, 17),
        "conv_bias": ("Conv", [small, weights, tiny_values(rng, 4)], {"pads": [1] * 4}, 17),
        "matmul": ("MatMul", [matrix, tiny_values(rng, 7, 3)], {}, 17),
        "gemm": ("Gemm", [matrix, tiny_values(rng, 7, 3), tiny_values(rng, 3)], {}, 17),
        "max_pool": ("MaxPool", [image], {"kernel_shape": [3, 3], "pads": [1] * 4}, 17),
        "average_pool": ("AveragePool", [small], {"kernel_shape": [2, 2]}, 17),
        "global_max": ("GlobalMaxPool", [image], {}, 17),
        "global_average": ("GlobalAveragePool", [small], {}, 17),
        "reduce_sum": ("ReduceSum", [image, np.int64([1, 3])], {}, 17),
        "reduce_mean": ("ReduceMean", [small], {"axes": [2]}, 17),
        "reduce_max": ("ReduceMax", [image], {"axes": [3]}, 17),
        "reduce_min": ("ReduceMin", [image], {"axes": [0, 1]}, 17),
        "softmax": (
            "Softmax",
            [np.float32(rng.standard_normal((2, 3, 6, 6)) * 40)],
            {"axis": 3},
            13,
        ),
        "log_softmax": ("LogSoftmax", [image], {"axis": 1}, 13),
        "exp": ("Exp", [(rng.random((4, 9)) * -20 - 85).astype(np.float32)], {}, 13),
        "log": ("Log", [np.abs(image)], {}, 13),
        "erf": ("Erf", [image], {}, 13),
        "layer_norm": (
            "LayerNormalization",
            [small, np.float32(rng.random(6) * 2.0**-10), tiny_values(rng, 6)],
            {"axis": -1, "epsilon": 2.0**-130},
            17,
        ),
        "batch_norm": ("BatchNormalization", [small, *_batch_norm_parameters(rng)], {}, 15),
        **_activation_cases(rng, image, small),
    }


def _activation_cases(
    rng: np.random.Generator, image: np.ndarray, small: np.ndarray
) -> dict[str, tuple[str, list[np.ndarray], dict, int]]:
    """The float64-formula activations: subnormal inputs, and inputs whose results are
    subnormal (sigmoid and softplus of x near −100, a reciprocal of x near 2^127)."""
    deep = (rng.random((4, 9)) * -15 - 88).astype(np.float32)
    return {
        "sigmoid": ("Sigmoid", [np.concatenate([deep.ravel(), image.ravel()])], {}, 13),
        "tanh": ("Tanh", [image], {}, 13),
        "softplus": ("Softplus", [deep], {}, 13),
        "softsign": ("Softsign", [image], {}, 13),
        "mish": ("Mish", [image], {}, 18),
        "elu": ("Elu", [image], {"alpha": 0.5}, 13),
        "selu": ("Selu", [image], {}, 13),
        "celu": ("Celu", [image], {"alpha": 2.0}, 13),
        "leaky_relu": ("LeakyRelu", [image], {"alpha": 0.1}, 16),
        "thresholded_relu": ("ThresholdedRelu", [image], {"alpha": float(TINY)}, 10),
        "prelu": ("PRelu", [image, np.float32([0.25, -0.5, 3.0, 2.0**-3, 1.0, 0.0])], {}, 16),
        "hard_sigmoid": ("HardSigmoid", [image], {"alpha": 2.0**-10, "beta": 0.0}, 6),
        "hard_swish": ("HardSwish", [image], {}, 14),
        "clip": ("Clip", [image, np.float32(-TINY / 2), np.float32(TINY / 4)], {}, 13),
        "gelu": ("Gelu", [image], {}, 20),
        "gelu_tanh": ("Gelu", [image], {"approximate": "tanh"}, 20),
        "reciprocal": ("Reciprocal", [np.float32(rng.random(12) * 2.0**127 + 2.0**126)], {}, 13),
        "pow": ("Pow", [np.abs(small), np.float32([1.0, 1.02, 1.0, 0.999, 1.0, 1.05])], {}, 15),
        "sum": ("Sum", [image, tiny_values(rng, 6), small], {}, 13),
        "mean": ("Mean", [image, small], {}, 13),
        "reduce_l1": ("ReduceL1", [image], {"axes": [1, 3]}, 13),
        "reduce_l2": ("ReduceL2", [image], {"axes": [2]}, 13),
        "reduce_sum_square": ("ReduceSumSquare", [image], {"axes": [3]}, 13),
        "reduce_prod": ("ReduceProd", [image], {"axes": [1]}, 13),
        "reduce_log_sum_exp": ("ReduceLogSumExp", [image], {"axes": [3]}, 13),
        "argmax": ("ArgMax", [image], {"axis": 3}, 13),
        "argmin": ("ArgMin", [image], {"axis": 1, "select_last_index": 1}, 13),
        "cumsum": ("CumSum", [image, np.int64(2)], {}, 14),
        "hardmax": ("Hardmax", [image], {"axis": -1}, 13),
        "instance_norm": ("InstanceNormalization", [small, *_channel_affine(rng)], {}, 6),
        "conv_transpose": (
            "ConvTranspose",
            [small, rng.standard_normal((3, 4, 3, 3)).astype(np.float32)],
            {"strides": [2, 2]},
            11,
        ),
        "resize_linear": (
            "Resize",
            [image, np.float32([]), np.float32([1, 1, 2, 1.5])],
            {"mode": "linear"},
            13,
        ),
        "einsum": (
            "Einsum",
            [tiny_values(rng, 5, 7), tiny_values(rng, 7, 3)],
            {"equation": "ij,jk->ik"},
            12,
        ),
        "sin": ("Sin", [image], {}, 7),
        "atan": ("Atan", [image], {}, 7),
        "mod": (
            "Mod",
            [small, np.float32([2.0**-128, 3.0, -(2.0**-130), 1.0, 2.0, -TINY])],
            {"fmod": 0},
            13,
        ),
    }


def _channel_affine(rng: np.random.Generator) -> list[np.ndarray]:
    """Scale and bias for three channels, the bias subnormal."""
    return [np.float32([2.0**-4, 1.0, -0.5]), tiny_values(rng, 3)]


def _batch_norm_parameters(rng: np.random.Generator) -> list[np.ndarray]:
    """Scale, bias, mean and variance for three channels, with subnormal biases."""
    scale = np.float32([2.0**-4, 1.0, -0.5])
    return [scale, tiny_values(rng, 3), np.zeros(3, np.float32), np.ones(3, np.float32)]


@pytest.mark.parametrize("backend", FLUSHING_PATHS)
@pytest.mark.parametrize("case", sorted(_cases()))
def test_exact_results_keep_subnormals_on_a_flushing_backend(case: str, backend: str) -> None:
    assert_reference_bits(case, *_cases()[case], backend)


def _fused_chain() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """MatMul, then Add, Relu and Mul: at level ALL one Fused step, which on CuPy could have
    been a generated kernel."""
    rng = np.random.default_rng(8)
    bias, scale = tiny_values(rng, 6), np.float32(rng.random(6) * 2.0**-8)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "bias"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Mul", ["r", "scale"], ["y"]),
    ]
    initializers = [
        numpy_helper.from_array(v, n)
        for n, v in (("w", np.float32(rng.standard_normal((5, 6)) * 2.0**-64)), ("bias", bias),
                     ("scale", scale))
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "fused_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": np.float32(rng.standard_normal((4, 5)) * 2.0**-64)}


@pytest.mark.parametrize("backend", FLUSHING_PATHS)
def test_a_fused_exact_chain_keeps_subnormals(backend: str) -> None:
    model, feeds = _fused_chain()
    fused = _session(model, backend, OptimizationLevel.ALL)
    assert fused.graph_summary["nodes"] == 1  # the four nodes are one Fused step
    want = _session(model, "numpy-reference", OptimizationLevel.NONE).run(None, feeds)[0]
    got = fused.run(None, feeds)[0]
    assert ((want != 0) & (np.abs(want) < TINY)).any()
    assert_bits(got, want, f"fused chain on {backend}")


def _session(model: onnx.ModelProto, backend: str, level: OptimizationLevel) -> Session:
    try:
        KernelPaths.get(backend)
    except BackendUnavailableError as error:
        pytest.skip(str(error))
    options = SessionOptions(
        mode=ExecutionMode.EXACT, backend=backend, outputs_as="numpy", optimization_level=level
    )
    return Session.create(model_from_proto(model), options)


def test_the_cases_reach_the_subnormal_range() -> None:
    """Each float case has a subnormal in an input or in numpy-reference's output: otherwise it
    could not tell a flushing kernel from an IEEE one."""
    for case, (op_type, inputs, attributes, opset) in _cases().items():
        model, feeds = one_node_model(op_type, inputs, attributes, opset=opset)
        values = [*inputs, *exact_run(model, feeds, "numpy-reference")]
        floats = [v for v in values if v.dtype.kind == "f"]
        subnormal = [(v != 0) & (np.abs(v) < np.finfo(v.dtype).tiny) for v in floats]
        assert any(s.any() for s in subnormal), case
