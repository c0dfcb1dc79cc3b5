"""Transformer operators: Attention, FlexAttention, LinearAttention, RMSNormalization,
RotaryEmbedding, CausalConvWithState, Swish and SwiGLU — the ONNX backend conformance node
cases of these op types through the operator harness, and onnxruntime as an oracle.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conformance_cases import case_params, node_cases, run_case
from onnx import helper
from operator_harness import assert_matches_onnxruntime, refused, run_node

from onemodel.errors import ErrorKind

OP_TYPES = frozenset({
    "Attention", "FlexAttention", "LinearAttention", "RMSNormalization", "RotaryEmbedding",
    "CausalConvWithState", "Swish", "SwiGLU",
})  # fmt: skip
PREVIEW = "ai.onnx.preview"

# -- the ONNX backend conformance node cases ------------------------------------------------

CASES = node_cases(OP_TYPES)

EXPECTED_FAILURES = {
    # score_mod / prob_mod subgraphs run as nested executors of a session: the one-node harness
    # has none, so it refuses them (the session-level conformance suite runs these cases).
    "test_flexattention_causal_mask",
    "test_flexattention_prob_mod",
    "test_flexattention_relative_positional",
    "test_flexattention_score_mod",
    "test_flexattention_soft_cap",
}


@pytest.mark.parametrize("name", case_params(CASES, EXPECTED_FAILURES))
def test_conformance(name: str) -> None:
    # onnx's runner allows two ulps of bfloat16 (rtol 2⁻⁶) and 1e-3 otherwise.
    run_case(CASES[name], bfloat16_rtol=2**-6)


def test_every_op_type_has_conformance_cases() -> None:
    covered = {case.op_type for case in CASES.values()}
    assert covered == OP_TYPES


# -- helpers ---------------------------------------------------------------------------------

RNG = np.random.default_rng(20261201)


def normal(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# -- Attention -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attributes", "mask_shape", "mask_type"),
    [
        ({}, None, None),
        ({"is_causal": 1}, None, None),
        ({"scale": 0.3, "softcap": 1.5}, (4, 7), np.float32),
        ({"is_causal": 1}, (2, 1, 4, 7), np.bool_),
        ({"qk_matmul_output_mode": 0, "softcap": 0.5}, None, None),
        ({"qk_matmul_output_mode": 1, "softcap": 0.5}, None, None),
        ({"qk_matmul_output_mode": 2}, (6, 4, 7), np.float32),
        ({"qk_matmul_output_mode": 3, "is_causal": 1}, None, None),
    ],
)
def test_attention_with_cache_matches_onnxruntime(
    attributes: dict, mask_shape: tuple | None, mask_type: type | None
) -> None:
    """Grouped-query heads (6 query, 2 key/value), a 3-step cache and 4 new keys."""
    q, k, v = normal(2, 6, 4, 8), normal(2, 2, 4, 8), normal(2, 2, 4, 5)
    past_key, past_value = normal(2, 2, 3, 8), normal(2, 2, 3, 5)
    mask = None
    if mask_shape is not None:
        mask = RNG.random(mask_shape) > 0.3 if mask_type is np.bool_ else normal(*mask_shape)
    assert_matches_onnxruntime(
        "Attention", [q, k, v, mask, past_key, past_value], attributes, opset=23, outputs=4
    )


def test_attention_3d_packed_heads_match_onnxruntime() -> None:
    q, k, v = normal(2, 5, 4 * 6), normal(2, 3, 2 * 6), normal(2, 3, 2 * 3)
    attributes = {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1}
    past_key, past_value = normal(2, 2, 2, 6), normal(2, 2, 2, 3)
    assert_matches_onnxruntime(
        "Attention", [q, k, v, None, past_key, past_value], attributes, opset=23, outputs=3
    )


def test_attention_sliding_window_with_external_cache() -> None:
    """Opset 25: left/right windows and nonpad_kv_seqlen, against the spec's formula."""
    q, k, v = normal(2, 2, 3, 4), normal(2, 2, 6, 4), normal(2, 2, 6, 4)
    nonpad = np.array([5, 3], dtype=np.int64)
    attributes = {"is_causal": 1, "left_window_size": 1}
    (y,) = run_node("Attention", [q, k, v, None, None, None, nonpad], attributes, opset=25)
    for b in range(2):
        offset = nonpad[b] - 3
        for i in range(3):
            keys = [j for j in range(6) if i + offset - 1 <= j <= i + offset and j < nonpad[b]]
            scores = np.einsum("hd,hkd->hk", q[b, :, i], k[b][:, keys]) / 2
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            weights /= weights.sum(-1, keepdims=True)
            expected = np.einsum("hk,hkd->hd", weights, v[b][:, keys])
            np.testing.assert_allclose(y[b, :, i], expected, rtol=1e-5, atol=1e-6)


def test_attention_fully_masked_rows_are_zero() -> None:
    q, k, v = normal(1, 2, 3, 4), normal(1, 2, 3, 4), normal(1, 2, 3, 4)
    mask = np.array([[False] * 3, [True, False, True], [False] * 3])
    y, qk = run_node(
        "Attention", [q, k, v, mask], {"qk_matmul_output_mode": 3}, opset=24, outputs=4
    )[::3]
    assert np.all(y[:, :, [0, 2]] == 0) and np.all(qk[:, :, [0, 2]] == 0)
    np.testing.assert_allclose(qk[:, :, 1].sum(-1), 1, rtol=1e-6)
    assert np.all(qk[:, :, 1, 1] == 0)


def test_attention_pads_a_short_mask_with_negative_infinity() -> None:
    q, k, v = normal(1, 1, 2, 4), normal(1, 1, 5, 4), normal(1, 1, 5, 4)
    short = np.zeros((2, 3), dtype=np.float32)
    full = np.concatenate([short, np.full((2, 2), -np.inf, np.float32)], axis=1)
    (a,) = run_node("Attention", [q, k, v, short], opset=24)
    (b,) = run_node("Attention", [q, k, v, full], opset=24)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_attention_narrow_floats_keep_their_type(dtype: object) -> None:
    import ml_dtypes

    dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    q = RNG.random((1, 2, 3, 8)).astype(dtype)
    y, present_key, _, qk = run_node(
        "Attention", [q, q, q], {"qk_matmul_output_mode": 3}, opset=23, outputs=4
    )
    assert y.dtype == present_key.dtype == qk.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(present_key, q)
    reference = run_node("Attention", [q.astype(np.float32)] * 3, opset=23)[0]
    np.testing.assert_allclose(y.astype(np.float32), reference, rtol=1e-2)


def test_attention_refuses_inconsistent_inputs() -> None:
    q, k = normal(1, 4, 3, 8), normal(1, 3, 3, 8)
    refused(ErrorKind.INVALID_INPUT, "Attention", [q, k, k], opset=23)
    refused(ErrorKind.INVALID_INPUT, "Attention", [q, normal(1, 2, 3, 4), k], opset=23)
    refused(ErrorKind.INVALID_INPUT, "Attention", [q, q, q, normal(3, 5)], opset=23)
    refused(ErrorKind.INVALID_MODEL, "Attention", [q, q, q, None, q], opset=23)
    refused(ErrorKind.INVALID_MODEL, "Attention", [normal(1, 3, 8)] * 3, opset=23)
    refused(ErrorKind.INVALID_MODEL, "Attention", [q, q, q], {"qk_matmul_output_mode": 4}, opset=23)


# -- FlexAttention ---------------------------------------------------------------------------


def test_flex_attention_score_mod_reads_outer_values() -> None:
    """A score_mod body adding a bias that the main graph computes: the body's outer value
    reaches it through the session's nested executor."""
    from onemodel import Session

    f32 = onnx.TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("Add", ["scores", "bias"], ["scores_out"])],
        "score_mod",
        [helper.make_tensor_value_info("scores", f32, None)],
        [helper.make_tensor_value_info("scores_out", f32, None)],
    )
    nodes = [
        helper.make_node("Neg", ["b"], ["bias"]),
        helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain=PREVIEW, score_mod=body),
    ]
    shapes = {"q": (1, 4, 3, 8), "k": (1, 2, 5, 8), "v": (1, 2, 5, 6), "b": (3, 5)}
    graph = helper.make_graph(
        nodes,
        "flex",
        [helper.make_tensor_value_info(n, f32, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", f32, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid(PREVIEW, 1)]
    )
    feeds = {n: normal(*s) for n, s in shapes.items()}
    (y,) = Session.load(model.SerializeToString()).run(None, feeds)
    keys, values = (np.repeat(feeds[n], 2, axis=1) for n in ("k", "v"))
    scores = feeds["q"] @ keys.transpose(0, 1, 3, 2) / np.sqrt(8) - feeds["b"]
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(y, weights @ values, rtol=1e-5, atol=1e-6)


def test_flex_attention_modifiers_need_a_session() -> None:
    graph = helper.make_graph([], "mod", [], [])
    q = normal(1, 1, 2, 4)
    refused(
        ErrorKind.UNSUPPORTED, "FlexAttention", [q, q, q], {"score_mod": graph}, opset=1,
        domain=PREVIEW,
    )  # fmt: skip


# -- RMSNormalization, RotaryEmbedding -------------------------------------------------------


@pytest.mark.parametrize(("axis", "scale_shape"), [(-1, (6,)), (1, (5, 6)), (0, (1, 6))])
def test_rms_normalization_matches_onnxruntime(axis: int, scale_shape: tuple) -> None:
    x, scale = normal(3, 5, 6), normal(*scale_shape)
    assert_matches_onnxruntime(
        "RMSNormalization", [x, scale], {"axis": axis, "epsilon": 1e-3}, opset=23
    )


def test_rms_normalization_of_float16_rounds_once() -> None:
    x, scale = normal(4, 16, dtype=np.float16), normal(16, dtype=np.float16)
    (y,) = run_node("RMSNormalization", [x, scale], opset=23)
    wide = x.astype(np.float64)
    expected = wide / np.sqrt((wide**2).mean(-1, keepdims=True) + 1e-5) * scale
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, expected.astype(np.float16))


@pytest.mark.parametrize(
    ("attributes", "positions"),
    [
        ({}, True),
        ({"interleaved": 1}, True),
        ({"rotary_embedding_dim": 4}, False),
        ({"interleaved": 1, "rotary_embedding_dim": 4}, True),
        ({"num_heads": 2}, True),
    ],
)
def test_rotary_embedding_matches_onnxruntime(attributes: dict, positions: bool) -> None:
    b, s, h, d = 2, 3, 2, 8
    x = normal(b, s, h * d) if "num_heads" in attributes else normal(b, h, s, d)
    half = attributes.get("rotary_embedding_dim", d) // 2
    if positions:
        angles = RNG.random((10, half)).astype(np.float32)
        ids = RNG.integers(0, 10, (b, s)).astype(np.int64)
    else:
        angles, ids = RNG.random((b, s, half)).astype(np.float32), None
    inputs = [x, np.cos(angles), np.sin(angles), ids]
    assert_matches_onnxruntime("RotaryEmbedding", inputs, attributes, opset=23)


def test_rotary_embedding_refuses_positions_outside_the_cache() -> None:
    x, cache = normal(1, 1, 2, 4), normal(3, 2)
    ids = np.array([[0, 3]], dtype=np.int64)
    refused(ErrorKind.INVALID_INPUT, "RotaryEmbedding", [x, cache, cache, ids], opset=23)


# -- LinearAttention, CausalConvWithState ----------------------------------------------------


def test_linear_attention_state_carries_across_calls() -> None:
    """Running a prefill in two halves, the second starting from the first's state, is the
    same as running it whole."""
    b, t, hq, hkv, dk, dv = 1, 6, 4, 2, 3, 2
    q, k, v = normal(b, t, hq * dk), normal(b, t, hkv * dk), normal(b, t, hkv * dv)
    decay = -RNG.random((b, t, hkv)).astype(np.float32)
    beta = RNG.random((b, t, hkv)).astype(np.float32)
    attributes = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": "gated_delta"}

    def run(part: slice, state: np.ndarray | None) -> list[np.ndarray]:
        inputs = [q[:, part], k[:, part], v[:, part], state, decay[:, part], beta[:, part]]
        return run_node("LinearAttention", inputs, attributes, opset=27, outputs=2)

    whole, whole_state = run(slice(None), None)
    first, state = run(slice(0, 3), None)
    second, final_state = run(slice(3, None), state)
    np.testing.assert_allclose(np.concatenate([first, second], 1), whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(final_state, whole_state, rtol=1e-5, atol=1e-6)


def test_linear_attention_refuses_inputs_its_rule_does_not_take() -> None:
    x = normal(1, 2, 4)
    attributes = {"q_num_heads": 2, "kv_num_heads": 2, "update_rule": "linear"}
    refused(ErrorKind.INVALID_MODEL, "LinearAttention", [x, x, x, None, x], attributes, opset=27)


def test_causal_conv_with_state_streams_like_one_call() -> None:
    x, w, bias = normal(2, 3, 7), normal(3, 1, 4), normal(3)
    attributes = {"activation": "silu"}
    whole, _ = run_node("CausalConvWithState", [x, w, bias], attributes, opset=27, outputs=2)
    first, state = run_node(
        "CausalConvWithState", [x[..., :2], w, bias], attributes, opset=27, outputs=2
    )
    second, _ = run_node(
        "CausalConvWithState", [x[..., 2:], w, bias, state], attributes, opset=27, outputs=2
    )
    np.testing.assert_allclose(np.concatenate([first, second], -1), whole, rtol=1e-6)


# -- Swish, SwiGLU ---------------------------------------------------------------------------


def test_swish_matches_onnxruntime() -> None:
    x = normal(3, 4)
    assert_matches_onnxruntime("Swish", [x], {"alpha": 1.7}, opset=24)


def test_swiglu_is_swish_times_the_linear_input() -> None:
    a, b = normal(3, 4), normal(3, 4)
    (swish,) = run_node("Swish", [a], {"alpha": 0.5}, opset=24)
    (y,) = run_node("SwiGLU", [a, b], {"alpha": 0.5}, opset=28)
    np.testing.assert_allclose(y, swish * b, rtol=1e-6)
    refused(ErrorKind.INVALID_INPUT, "SwiGLU", [a, b[:1]], opset=28)
