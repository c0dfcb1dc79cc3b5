"""com.microsoft contrib operators against onnxruntime's own CPU kernels on one-node models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from operator_harness import assert_same, onnxruntime_run, refused, run_node

from onemodel.backends import activations
from onemodel.backends.numpy_cpu import compiled_activations
from onemodel.errors import ErrorKind

MS = "com.microsoft"
RNG = np.random.default_rng(7)


def contrib_model(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: Mapping[str, Any],
    outputs: Sequence[str],
    domain: str,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One `domain` node of in0, in1, … (None: an absent optional input) and its feeds, the
    outputs' types left to the runtime."""
    arrays = list(inputs)
    while arrays and arrays[-1] is None:
        arrays.pop()
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(arrays)]
    fed = {n: x for n, x in zip(names, arrays, strict=True) if x is not None}
    node = helper.make_node(op_type, names, list(outputs), domain=domain, **attributes)
    graph = helper.make_graph(
        [node],
        "one_node",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
            for n, x in fed.items()
        ],
        [helper.make_value_info(name, onnx.TypeProto()) for name in outputs if name],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8), fed


def check(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: Mapping[str, Any] | None = None,
    *,
    outputs: Sequence[str] = ("out0",),
    domain: str = MS,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> float:
    """Our outputs against onnxruntime's; the largest absolute difference."""
    attributes = dict(attributes or {})
    model, feeds = contrib_model(op_type, inputs, attributes, outputs, domain)
    expected = onnxruntime_run(model, feeds)
    ours = run_node(op_type, list(inputs), attributes, opset=1, outputs=len(outputs), domain=domain)
    worst = 0.0
    present = [i for i, name in enumerate(outputs) if name]
    for index, wanted in zip(present, expected, strict=True):
        assert_same(ours[index], wanted, rtol=rtol, atol=atol, label=f"{op_type} output {index}")
        if wanted.size:
            gap = np.abs(ours[index].astype(np.float64) - wanted.astype(np.float64)).max()
            worst = max(worst, float(gap))
    return worst


def normal(*shape: int, dtype: Any = np.float32, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(dtype)


# -- activations ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gelu_family(dtype: Any) -> None:
    x, bias = normal(2, 3, 8, dtype=dtype, scale=3), normal(8, dtype=dtype)
    tolerance = {"rtol": 1e-3, "atol": 1e-3} if dtype == np.float16 else {}
    check("Gelu", [x], **tolerance)
    check("FastGelu", [x], **tolerance)
    check("FastGelu", [x, bias], **tolerance)
    check("BiasGelu", [x, bias], **tolerance)
    check("QuickGelu", [x], **tolerance)
    check("QuickGelu", [x], {"alpha": 1.5}, **tolerance)


@pytest.mark.parametrize(("op_type", "approximate"), [("BiasGelu", "none"), ("FastGelu", "tanh")])
def test_float32_bias_gelus_are_the_fast_gelu_of_the_float32_sum(op_type, approximate) -> None:
    """Fast float32 BiasGelu and FastGelu add in float32 and run Gelu's fast kernel in place
    (its float64 formula took 160x onnxruntime's time at 256k elements): the bits of Add then
    Gelu, in the negative tail too."""
    x = np.concatenate([normal(3, 16, scale=3), -np.geomspace(1, 30, 16, dtype=np.float32)[None]])
    bias = normal(16)
    (ours,) = run_node(op_type, [x, bias], opset=1, domain=MS)
    (gelu,) = run_node("Gelu", [x + bias], {"approximate": approximate}, opset=20)
    np.testing.assert_array_equal(ours, gelu)
    if op_type == "FastGelu":  # its bias is optional
        (alone,) = run_node(op_type, [x], opset=1, domain=MS)
        (wanted,) = run_node("Gelu", [x], {"approximate": "tanh"}, opset=20)
        np.testing.assert_array_equal(alone, wanted)


@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_float32_quick_gelu_within_an_absolute_ulp_of_one_times_x(alpha: float, monkeypatch):
    """Fast QuickGelu without numba is x·(1/2 + tanh(alpha·x/2)/2), Sigmoid's fast form:
    within 2⁻²⁴·|x| plus 2 ulps of float64's x/(1 + exp(-alpha·x)); the sweep sees more than a
    quarter of that absolute term in the tail, which the exp form (relative error: the compiled
    form's, tests/test_compiled_activations.py) would not show."""
    monkeypatch.delitem(compiled_activations.COMPILED, activations.swish)
    x = np.arange(-30.0, 30.0, 2.0**-8, dtype=np.float32)
    (ours,) = run_node("QuickGelu", [x], {"alpha": alpha}, opset=1, domain=MS)
    wide = x.astype(np.float64)
    truth = wide / (1.0 + np.exp(-np.float32(alpha).astype(np.float64) * wide))
    spacing = np.spacing(np.abs(truth).astype(np.float32)).astype(np.float64)
    gap = np.abs(ours - truth)
    assert np.all(gap <= 2.0**-24 * np.abs(wide) + 2 * spacing)
    tail = (alpha * wide > -15) & (alpha * wide < -5)
    assert (gap[tail] / np.abs(wide[tail])).max() > 2.0**-26


def test_bias_gelu_needs_bias_of_last_axis() -> None:
    refused(ErrorKind.INVALID_INPUT, "BiasGelu", [normal(2, 4), normal(3)], domain=MS, opset=1)


# -- FusedMatMul ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "attributes"),
    [
        ((3, 4), (4, 5), {"alpha": 0.5}),
        ((2, 4, 3), (2, 4, 5), {"transA": 1}),
        ((2, 3, 4), (5, 4), {"transB": 1, "alpha": 2.0}),
        ((3, 2, 4), (2, 4, 5), {"transBatchA": 1}),
        ((2, 3, 4), (4, 2, 5), {"transBatchB": 1}),
        ((4, 2, 3), (5, 2, 4), {"transBatchA": 1, "transA": 1, "transBatchB": 1, "transB": 1}),
        ((3, 2, 6, 4), (2, 6, 4, 5), {"transBatchA": 1}),
        ((4,), (4, 5), {}),
    ],
)
def test_fused_matmul(a: tuple[int, ...], b: tuple[int, ...], attributes: dict) -> None:
    check("FusedMatMul", [normal(*a), normal(*b)], attributes, rtol=1e-5, atol=1e-5)


# -- FusedConv --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attributes",
    [
        {},
        {"activation": "Relu"},
        {"activation": "Tanh", "pads": [1, 1, 1, 1]},
        {"activation": "Sigmoid", "strides": [2, 2]},
        {"activation": "LeakyRelu", "activation_params": [0.2]},
        {"activation": "HardSigmoid", "activation_params": [0.3, 0.4], "group": 2},
        {"activation": "Clip", "activation_params": [-0.5, 0.5], "dilations": [2, 1]},
    ],
)
@pytest.mark.parametrize("with_z", [False, True])
def test_fused_conv(attributes: dict, with_z: bool) -> None:
    x, w, b = normal(2, 4, 7, 6), normal(6, 4 // attributes.get("group", 1), 3, 3), normal(6)
    inputs = [x, w, b]
    if with_z:
        y = run_node("FusedConv", inputs, attributes, opset=1, domain=MS)[0]
        inputs.append(normal(*y.shape))
    check("FusedConv", inputs, attributes, rtol=1e-4, atol=1e-5)


def test_fused_conv_refuses_unknown_activation() -> None:
    refused(
        ErrorKind.UNSUPPORTED, "FusedConv", [normal(1, 1, 3, 3), normal(1, 1, 1, 1)],
        {"activation": "Gelu"}, domain=MS, opset=1,
    )  # fmt: skip


# -- fused layer normalizations ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("skip_shape", [(2, 5, 8), (5, 8), (1, 5, 8)])
@pytest.mark.parametrize("with_beta_bias", [False, True])
def test_skip_layer_normalization(dtype: Any, skip_shape: tuple, with_beta_bias: bool) -> None:
    x, skip, gamma = (
        normal(2, 5, 8, dtype=dtype),
        normal(*skip_shape, dtype=dtype),
        normal(8, dtype=dtype),
    )
    beta, bias = (
        (normal(8, dtype=dtype), normal(8, dtype=dtype)) if with_beta_bias else (None, None)
    )
    # onnxruntime's kernel takes the variance as E[x²] − E[x]² in float32, which loses up to
    # ~3e-5 on these draws; ours is within 1.3e-6 of the float64 formula.
    tolerance = (
        {"rtol": 2e-3, "atol": 2e-3} if dtype == np.float16 else {"rtol": 1e-4, "atol": 1e-4}
    )
    outputs = ("out0", "out1", "out2", "out3")
    check("SkipLayerNormalization", [x, skip, gamma, beta, bias], {"epsilon": 1e-4},
          outputs=outputs, **tolerance)  # fmt: skip
    check("SkipSimplifiedLayerNormalization", [x, skip, gamma, bias], outputs=outputs, **tolerance)
    check("SkipLayerNormalization", [x, skip, gamma], outputs=("out0", "", "", "out3"),
          **tolerance)  # fmt: skip
    # the result alone: fast mode's row kernels (no statistics outputs)
    check("SkipLayerNormalization", [x, skip, gamma, beta, bias], {"epsilon": 1e-4}, **tolerance)
    check("SkipSimplifiedLayerNormalization", [x, skip, gamma, bias], **tolerance)


@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_simplified_layer_normalization(axis: int, dtype: Any) -> None:
    x, scale = normal(2, 3, 8, dtype=dtype), normal(*(3, 8)[1 if axis == -1 else 0 :], dtype=dtype)
    tolerance = {"rtol": 2e-3, "atol": 2e-3} if dtype == np.float16 else {}
    check("SimplifiedLayerNormalization", [x, scale], {"axis": axis, "epsilon": 1e-3},
          outputs=("out0", "out1"), domain="", **tolerance)  # fmt: skip


# -- attention --------------------------------------------------------------------------------


def _mask(kind: str, batch: int, queries: int, keys: int) -> np.ndarray | None:
    if kind == "lengths":
        return np.array([keys, keys - 2][:batch], dtype=np.int32)
    if kind == "2d":
        return (RNG.random((batch, keys)) > 0.3).astype(np.int32)
    if kind == "3d":
        return (RNG.random((batch, queries, keys)) > 0.3).astype(np.int32)
    return None


@pytest.mark.parametrize("mask", ["none", "lengths", "2d", "3d"])
@pytest.mark.parametrize(
    "attributes",
    [
        {"num_heads": 2},
        {"num_heads": 4, "unidirectional": 1},
        {"num_heads": 2, "scale": 0.3, "qkv_hidden_sizes": [8, 8, 12]},
    ],
)
def test_attention(mask: str, attributes: dict) -> None:
    sizes = attributes.get("qkv_hidden_sizes", [8, 8, 8])
    x, w, b = normal(2, 5, 6), normal(6, sum(sizes)), normal(sum(sizes))
    check("Attention", [x, w, b, _mask(mask, 2, 5, 5)], attributes, rtol=1e-4, atol=1e-5)


def test_attention_with_bias_and_no_projection_bias() -> None:
    x, w = normal(2, 5, 6), normal(6, 24)
    check("Attention", [x, w, None, None, None, normal(1, 2, 5, 5)], {"num_heads": 2},
          rtol=1e-4, atol=1e-5)  # fmt: skip


def test_attention_refuses_kv_cache() -> None:
    x, w = normal(2, 5, 6), normal(6, 24)
    refused(ErrorKind.UNSUPPORTED, "Attention", [x, w, None, None, normal(2, 2, 2, 3, 4)],
            {"num_heads": 2}, domain=MS, opset=1)  # fmt: skip


@pytest.mark.parametrize("mask", ["none", "lengths", "2d", "3d"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_multi_head_attention(mask: str, with_bias: bool) -> None:
    q, k, v = normal(2, 3, 8), normal(2, 5, 8), normal(2, 5, 4)
    bias = normal(20) if with_bias else None
    attention_bias = normal(2, 2, 3, 5) if with_bias else None
    check("MultiHeadAttention", [q, k, v, bias, _mask(mask, 2, 3, 5), attention_bias],
          {"num_heads": 2}, rtol=1e-4, atol=1e-5)  # fmt: skip


def test_multi_head_attention_causal_and_float16() -> None:
    q, k, v = (normal(1, 4, 8, dtype=np.float16) for _ in range(3))
    check("MultiHeadAttention", [q, k, v], {"num_heads": 2, "unidirectional": 1},
          rtol=2e-3, atol=2e-3)  # fmt: skip


# -- RotaryEmbedding --------------------------------------------------------------------------


def _caches(rows: int, half: int, dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray]:
    angles = RNG.random((rows, half)) * 3
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize(
    ("shape", "attributes", "half"),
    [
        ((2, 3, 16), {}, 4),
        ((2, 3, 16), {"num_heads": 2}, 4),
        ((2, 3, 16), {"num_heads": 2, "rotary_embedding_dim": 4}, 2),
        ((2, 2, 3, 8), {}, 4),
    ],
)
@pytest.mark.parametrize("offset", [False, True])
def test_rotary_embedding(
    interleaved: int, shape: tuple[int, ...], attributes: dict, half: int, offset: bool
) -> None:
    x = normal(*shape)
    length = shape[1] if len(shape) == 3 else shape[2]
    if offset:
        positions = np.array([2], dtype=np.int64)
    else:
        positions = RNG.integers(0, 6, (shape[0], length)).astype(np.int64)
    cos, sin = _caches(6, half)
    check("RotaryEmbedding", [x, positions, cos, sin], {**attributes, "interleaved": interleaved})


# -- quantized products -----------------------------------------------------------------------


@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("with_zero_and_bias", [False, True])
def test_dynamic_quantize_matmul(b_type: Any, per_column: bool, with_zero_and_bias: bool) -> None:
    a = normal(2, 3, 8, scale=2)
    # int8 weights within 7 bits: onnxruntime's AVX2 u8s8 kernel saturates pairs of products
    # to int16 beyond that (tests/test_quantized_models.py reproduces it).
    b = RNG.integers(-64 if b_type == np.int8 else 0, 64 if b_type == np.int8 else 100, (8, 5))
    b = b.astype(b_type)
    scale = (RNG.random(5 if per_column else ()) * 0.1).astype(np.float32)
    zero = bias = None
    if with_zero_and_bias:
        zero = RNG.integers(0, 20, scale.shape).astype(b_type)
        bias = normal(5)
    check("DynamicQuantizeMatMul", [a, b, np.asarray(scale), zero, bias], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("k", [32, 40])
@pytest.mark.parametrize("zeros", ["none", "packed", "float"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmul_n_bits(bits: int, k: int, zeros: str, dtype: Any) -> None:
    if bits == 8 and zeros == "float":
        pytest.skip("onnxruntime's CPU kernel refuses 8-bit weights with float zero points")
    n, block = 6, 16
    blocks = -(-k // block)
    a = normal(2, 3, k, dtype=dtype)
    b = RNG.integers(0, 256, (n, blocks, block * bits // 8)).astype(np.uint8)
    scales = (RNG.random(n * blocks) * 0.1).astype(dtype)
    zero_points = None
    if zeros == "packed":
        zero_points = RNG.integers(0, 256, (n, -(-blocks * bits // 8))).astype(np.uint8)
    elif zeros == "float":
        zero_points = (RNG.random(n * blocks) * 8).astype(dtype)
    bias = normal(n, dtype=dtype)
    attributes = {"K": k, "N": n, "bits": bits, "block_size": block}
    tolerance = (
        {"rtol": 2e-3, "atol": 2e-2} if dtype == np.float16 else {"rtol": 1e-4, "atol": 1e-4}
    )
    check("MatMulNBits", [a, b, scales, zero_points, None, bias], attributes, **tolerance)
