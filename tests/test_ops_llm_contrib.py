"""EmbedLayerNormalization and GroupQueryAttention (com.microsoft) against onnxruntime's CPU
kernels on one-node models: the fused operators of onnxruntime's transformer optimizer (BERT
embeddings) and of onnxruntime-genai's model builder (decoder-only LLMs). BiasAdd and
GemmFastGelu, which onnxruntime runs only on GPUs, against onnxruntime running the unfused
graphs they stand for."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper
from operator_harness import assert_same, onnxruntime_run, refused, run_node
from test_ops_contrib import MS, check, normal

from onemodel.errors import ErrorKind

pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(17)


def _ids(high: int, *shape: int) -> np.ndarray:
    return RNG.integers(0, high, size=shape).astype(np.int32)


# -- EmbedLayerNormalization -------------------------------------------------------------------


@pytest.mark.parametrize("segments", [True, False], ids=["segments", "no-segments"])
@pytest.mark.parametrize("positions", ["default", "rows", "shared"])
def test_embed_layer_normalization(segments: bool, positions: str) -> None:
    batch, length, hidden = 2, 5, 16
    mask = np.ones((batch, length), np.int32)
    mask[1, 3:] = 0
    position_ids = {
        "default": None,
        "rows": _ids(8, batch, length),
        "shared": _ids(8, 1, length),
    }[positions]
    inputs = [
        _ids(30, batch, length),
        _ids(2, batch, length) if segments else None,
        normal(30, hidden),
        normal(8, hidden),
        normal(2, hidden) if segments else None,
        normal(hidden),
        normal(hidden),
        mask,
        position_ids,
    ]
    gap = check(
        "EmbedLayerNormalization",
        inputs,
        {"epsilon": 1e-12},
        outputs=("out0", "out1", "out2"),
        rtol=1e-5,
        atol=1e-5,
    )
    assert gap < 1e-5


def test_embed_layer_normalization_refuses_an_id_outside_the_table() -> None:
    ids = np.array([[1, 2, 31]], np.int32)
    inputs = [ids, None, normal(30, 4), normal(8, 4), None, normal(4), normal(4)]
    error = refused(
        ErrorKind.INVALID_INPUT, "EmbedLayerNormalization", inputs, domain=MS, outputs=1
    )
    assert "31" in str(error) and "word_embedding" in str(error)
    assert "embedlayernormalization_node" in str(error)


def test_embed_layer_normalization_refuses_int64_ids() -> None:
    inputs = [np.zeros((1, 3), np.int64), None, normal(30, 4), normal(8, 4), None]
    inputs += [normal(4), normal(4)]
    error = refused(ErrorKind.INVALID_MODEL, "EmbedLayerNormalization", inputs, domain=MS)
    assert "int32" in str(error) and "in0" in str(error)


# -- GroupQueryAttention -----------------------------------------------------------------------

HEADS, KV_HEADS, HEAD = 4, 2, 32


def _gqa_inputs(
    batch: int,
    length: int,
    past: int,
    seqlens: list[int],
    *,
    packed: bool = True,
    rotary: int = 0,
    dtype: Any = np.float32,
) -> list[np.ndarray | None]:
    total = max(seqlens) + 1
    width = (HEADS + 2 * KV_HEADS) * HEAD if packed else HEADS * HEAD
    inputs: list[np.ndarray | None] = [normal(batch, length, width, dtype=dtype)]
    if packed:
        inputs += [None, None]
    else:
        inputs += [normal(batch, length, KV_HEADS * HEAD, dtype=dtype) for _ in range(2)]
    inputs += [normal(batch, KV_HEADS, past, HEAD, dtype=dtype) for _ in range(2)]
    inputs += [np.array(seqlens, np.int32), np.array(total, np.int32)]
    if rotary:
        angles = np.arange(32)[:, None] * (1e-2 ** (np.arange(rotary // 2) / (rotary // 2)))
        inputs += [np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)]
    return inputs


CASES = {
    "prompt-packed": dict(batch=2, length=5, past=0, seqlens=[4, 4]),
    "prompt-separate-kv": dict(batch=2, length=5, past=0, seqlens=[4, 4], packed=False),
    "prompt-rotary": dict(batch=1, length=6, past=0, seqlens=[5], rotary=HEAD),
    "prompt-partial-rotary": dict(batch=2, length=3, past=0, seqlens=[2, 2], rotary=HEAD // 2),
    "decode-rotary": dict(batch=2, length=1, past=4, seqlens=[4, 4], rotary=HEAD),
    "decode-ragged-rows": dict(batch=2, length=1, past=6, seqlens=[6, 3], rotary=HEAD),
    "continued-prompt": dict(batch=1, length=3, past=4, seqlens=[6], rotary=HEAD),
    "float16": dict(batch=2, length=1, past=3, seqlens=[3, 3], rotary=HEAD, dtype=np.float16),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_group_query_attention(case: str) -> None:
    options = dict(CASES[case])
    rotary = options.get("rotary", 0)
    inputs = _gqa_inputs(**options)
    attributes = {"num_heads": HEADS, "kv_num_heads": KV_HEADS, "do_rotary": int(bool(rotary))}
    narrow = options.get("dtype") is np.float16
    tolerance = 2e-3 if narrow else 2e-5
    check(
        "GroupQueryAttention",
        inputs,
        attributes,
        outputs=("out0", "out1", "out2"),
        rtol=tolerance,
        atol=tolerance,
    )


@pytest.mark.parametrize(
    "attributes",
    [
        {"local_window_size": 2},
        {"softcap": 0.5, "scale": 0.7},
        {"smooth_softmax": 1},
        {"rotary_interleaved": 1, "do_rotary": 1},
    ],
    ids=["local-window", "softcap-scale", "smooth-softmax", "interleaved-rotary"],
)
def test_group_query_attention_attributes(attributes: dict[str, Any]) -> None:
    inputs = _gqa_inputs(1, 6, 0, [5], rotary=HEAD)
    check(
        "GroupQueryAttention",
        inputs,
        {"num_heads": HEADS, "kv_num_heads": KV_HEADS, **attributes},
        outputs=("out0", "out1", "out2"),
        rtol=2e-5,
        atol=2e-5,
    )


def test_group_query_attention_refuses_lengths_that_do_not_fit() -> None:
    inputs = _gqa_inputs(2, 1, 2, [4, 4])  # row pasts of 4 in a past buffer of 2
    error = refused(
        ErrorKind.INVALID_INPUT,
        "GroupQueryAttention",
        inputs,
        {"num_heads": HEADS, "kv_num_heads": KV_HEADS},
        domain=MS,
        outputs=3,
    )
    assert "seqlens_k" in str(error) and "in5" in str(error)


def test_group_query_attention_refuses_uneven_heads() -> None:
    error = refused(
        ErrorKind.INVALID_MODEL,
        "GroupQueryAttention",
        _gqa_inputs(1, 2, 0, [1]),
        {"num_heads": 3, "kv_num_heads": 2},
        domain=MS,
        outputs=3,
    )
    assert "kv_num_heads" in str(error)


# -- GPU-only fusions, against the graphs they replace -----------------------------------------


def _unfused(nodes: list, inputs: dict[str, np.ndarray]) -> np.ndarray:
    float32 = helper.np_dtype_to_tensor_dtype(np.dtype(np.float32))
    graph = helper.make_graph(
        nodes,
        "unfused",
        [helper.make_tensor_value_info(name, float32, x.shape) for name, x in inputs.items()],
        [helper.make_tensor_value_info("y", float32, None)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    (result,) = onnxruntime_run(
        helper.make_model(graph, opset_imports=opsets, ir_version=8), inputs
    )
    return result


def test_bias_add_is_x_plus_bias_plus_skip() -> None:
    x, bias, skip = normal(2, 3, 8), normal(8), normal(2, 3, 8)
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["t"]),
        helper.make_node("Add", ["t", "skip"], ["y"]),
    ]
    want = _unfused(nodes, {"x": x, "bias": bias, "skip": skip})
    (got,) = run_node("BiasAdd", [x, bias, skip], domain=MS, opset=1)
    assert_same(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_gemm_fast_gelu_is_fast_gelu_of_the_product(bias: bool) -> None:
    x, w, b = normal(2, 5, 8), normal(8, 6), normal(6)
    feeds = {"x": x, "w": w, **({"b": b} if bias else {})}
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["t"]),
        helper.make_node("FastGelu", ["t", "b"] if bias else ["t"], ["y"], domain=MS),
    ]
    want = _unfused(nodes, feeds)
    (got,) = run_node("GemmFastGelu", [x, w, b if bias else None], domain=MS, opset=1)
    assert_same(got, want, rtol=1e-5, atol=1e-6)


def test_bias_add_refuses_a_bias_of_the_wrong_width() -> None:
    error = refused(
        ErrorKind.INVALID_INPUT,
        "BiasAdd",
        [normal(2, 3, 8), normal(4), normal(2, 3, 8)],
        domain=MS,
        opset=1,
    )
    assert "in1" in str(error) and "(8,)" in str(error)


def test_relative_position_bias_refuses_more_queries_than_keys() -> None:
    lengths = [np.array(5, np.int64), np.array(3, np.int64)]
    error = refused(
        ErrorKind.INVALID_INPUT,
        "RelativePositionBias",
        [normal(32, 2), *lengths],
        {"max_distance": 128},
        domain=MS,
        opset=1,
    )
    assert "in1" in str(error) and "exceeds" in str(error)
