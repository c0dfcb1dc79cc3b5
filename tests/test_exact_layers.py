"""Exact mode's layers and fused operators that ONNX's conformance cases do not cover (the
com.microsoft operators) or cover only thinly (recurrent layers with every option): each must
give numpy-reference's bits on the flushing checked-device stand-in (and on CuPy, gpu mark),
and stay close to fast mode, which the operator tests hold to onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from onemodel.backends.exact_elementary import sigmoid64, tanh64
from tests.operator_harness import one_node_model, run_node
from tests.test_exact_gemm import oracle
from tests.test_exact_operators import assert_bits, exact_run

MICROSOFT = "com.microsoft"
ML = "ai.onnx.ml"
FLUSHING_PATHS = ["checked-device", pytest.param("cupy", marks=pytest.mark.gpu)]


def _f32(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _cases() -> dict[str, tuple[str, list, dict, int, str, int]]:
    """name → (op, inputs, attributes, opset, domain, outputs)."""
    rng = np.random.default_rng(11)
    seq, batch, width, hidden = 5, 2, 4, 3
    x = _f32(rng, seq, batch, width)
    lengths = np.int32([5, 3])
    rnn = {"hidden_size": hidden}
    return {
        "lstm": ("LSTM", [x, _f32(rng, 1, 4 * hidden, width), _f32(rng, 1, 4 * hidden, hidden),
                          _f32(rng, 1, 8 * hidden)], rnn, 14, "", 3),
        "lstm_peepholes_lengths_bidirectional": (
            "LSTM",
            [x, _f32(rng, 2, 4 * hidden, width), _f32(rng, 2, 4 * hidden, hidden),
             _f32(rng, 2, 8 * hidden), lengths, _f32(rng, 2, batch, hidden),
             _f32(rng, 2, batch, hidden), _f32(rng, 2, 3 * hidden)],
            {**rnn, "direction": "bidirectional", "clip": 2.0}, 14, "", 3),
        "gru_linear_before_reset": (
            "GRU", [x, _f32(rng, 1, 3 * hidden, width), _f32(rng, 1, 3 * hidden, hidden),
                    _f32(rng, 1, 6 * hidden)], {**rnn, "linear_before_reset": 1}, 14, "", 2),
        "rnn_reverse": ("RNN", [x, _f32(rng, 1, hidden, width), _f32(rng, 1, hidden, hidden)],
                        {**rnn, "direction": "reverse", "activations": ["Relu"]}, 14, "", 2),
        "conv_transpose": ("ConvTranspose", [_f32(rng, 1, 4, 5, 5), _f32(rng, 4, 2, 3, 3),
                                             _f32(rng, 4)],
                           {"strides": [2, 2], "group": 2, "pads": [1, 0, 0, 1]}, 11, "", 1),
        "skip_layer_norm": ("SkipLayerNormalization",
                            [_f32(rng, 2, 3, 8), _f32(rng, 2, 3, 8), _f32(rng, 8), _f32(rng, 8),
                             _f32(rng, 8)], {}, 1, MICROSOFT, 4),
        "skip_simplified_layer_norm": ("SkipSimplifiedLayerNormalization",
                                       [_f32(rng, 2, 3, 8), _f32(rng, 2, 3, 8), _f32(rng, 8)],
                                       {}, 1, MICROSOFT, 1),
        "fast_gelu": ("FastGelu", [_f32(rng, 3, 8, scale=3.0), _f32(rng, 8)], {}, 1, MICROSOFT, 1),
        "bias_gelu": ("BiasGelu", [_f32(rng, 3, 8, scale=3.0), _f32(rng, 8)], {}, 1, MICROSOFT, 1),
        "quick_gelu": ("QuickGelu", [_f32(rng, 3, 8, scale=3.0)], {}, 1, MICROSOFT, 1),
        "fused_matmul": ("FusedMatMul", [_f32(rng, 2, 4, 3), _f32(rng, 2, 5, 4)],
                         {"alpha": 0.5, "transA": 1, "transB": 1}, 1, MICROSOFT, 1),
        "fused_conv": ("FusedConv", [_f32(rng, 1, 3, 6, 6), _f32(rng, 4, 3, 3, 3), _f32(rng, 4)],
                       {"activation": "Relu"}, 1, MICROSOFT, 1),
        "attention": ("Attention", [_f32(rng, 2, 4, 8), _f32(rng, 8, 24), _f32(rng, 24)],
                      {"num_heads": 2, "unidirectional": 1}, 1, MICROSOFT, 1),
        "multi_head_attention": ("MultiHeadAttention",
                                 [_f32(rng, 2, 3, 8), _f32(rng, 2, 5, 8), _f32(rng, 2, 5, 8)],
                                 {"num_heads": 2}, 1, MICROSOFT, 1),
        "group_norm": ("GroupNormalization", [_f32(rng, 2, 4, 3, 3), _f32(rng, 4), _f32(rng, 4)],
                       {"num_groups": 2}, 21, "", 1),
        "rms_norm": ("RMSNormalization", [_f32(rng, 2, 3, 8), _f32(rng, 8)], {}, 23, "", 1),
        "bias_add": ("BiasAdd", [_f32(rng, 2, 3, 8), _f32(rng, 8), _f32(rng, 2, 3, 8)], {}, 1,
                     MICROSOFT, 1),
        "gemm_fast_gelu": ("GemmFastGelu", [_f32(rng, 3, 8, scale=2.0), _f32(rng, 8, 5),
                                            _f32(rng, 5)], {}, 1, MICROSOFT, 1),
        "det": ("Det", [_f32(rng, 2, 3, 4, 4)], {}, 11, "", 1),
        "max_unpool_repeated_indices": (
            "MaxUnpool",
            [_f32(rng, 1, 2, 2, 2), np.int64([[[[0, 5], [5, 15]], [[16, 16], [31, 20]]]])],
            {"kernel_shape": [2, 2], "strides": [2, 2]}, 11, "", 1),
        "scaler": ("Scaler", [_f32(rng, 4, 3)],
                   {"offset": [0.5, -1.0, 2.0], "scale": [3.0, 0.1, -2.0]}, 1, ML, 1),
        "normalizer_l2": ("Normalizer", [_f32(rng, 4, 5)], {"norm": "L2"}, 1, ML, 1),
        "normalizer_l1": ("Normalizer", [_f32(rng, 4, 5)], {"norm": "L1"}, 1, ML, 1),
        "linear_regressor": ("LinearRegressor", [_f32(rng, 4, 3)],
                             {"coefficients": [0.5, -1.5, 2.0, 1.0, 0.25, -0.75], "targets": 2,
                              "intercepts": [0.1, -0.2]}, 1, ML, 1),
        "linear_classifier_softmax": (
            "LinearClassifier", [_f32(rng, 4, 3)],
            {"coefficients": [0.5, -1.5, 2.0, 1.0, 0.25, -0.75, 0.3, 0.3, 0.3],
             "intercepts": [0.1, -0.2, 0.0], "classlabels_ints": [3, 5, 7],
             "post_transform": "SOFTMAX"}, 1, ML, 2),
        "linear_classifier_logistic": (
            "LinearClassifier", [_f32(rng, 4, 3)],
            {"coefficients": [0.5, -1.5, 2.0], "intercepts": [0.1], "classlabels_ints": [0, 1],
             "post_transform": "LOGISTIC"}, 1, ML, 2),
        "label_encoder_floats": (
            "LabelEncoder", [np.float32([0.5, -1.0, 1e-40, 0.0, 2.5, np.nan])],
            {"keys_floats": [0.5, 1e-40, 0.0, 2.5], "values_int64s": [1, 2, 3, 4]}, 2, ML, 1),
    }  # fmt: skip


def _model(
    op_type: str, inputs: list, attributes: dict, opset: int, domain: str, outputs: int
) -> tuple[onnx.ModelProto, dict]:
    """one_node_model, with a com.microsoft node imported beside the default domain (whose IR
    version onnx's helper cannot tell from a contrib opset alone)."""
    if not domain:
        return one_node_model(op_type, inputs, attributes, opset=opset, outputs=outputs)
    model, feeds = one_node_model(op_type, inputs, attributes, opset=17, outputs=outputs)
    model.graph.node[0].domain = domain
    model.opset_import.append(helper.make_opsetid(domain, opset))
    return model, feeds


@pytest.mark.parametrize("backend", FLUSHING_PATHS)
@pytest.mark.parametrize("name", sorted(_cases()))
def test_exact_layers_give_numpy_references_bits(name: str, backend: str) -> None:
    op_type, inputs, attributes, opset, domain, outputs = _cases()[name]
    model, feeds = _model(op_type, inputs, attributes, opset, domain, outputs)
    want = exact_run(model, feeds, "numpy-reference")
    got = exact_run(model, feeds, backend)
    for index, (result, wanted) in enumerate(zip(got, want, strict=True)):
        assert_bits(result, wanted, f"{name} output {index} on {backend}")


@pytest.mark.parametrize("name", sorted(_cases()))
def test_exact_layers_stay_close_to_fast_mode(name: str) -> None:
    """Within 1e-4 relative, 1e-5 absolute: fast mode works in float32 and rounds at every
    step (measured: the largest difference, 2.7e-6, is Attention's on an output of 0.04)."""
    op_type, inputs, attributes, opset, domain, outputs = _cases()[name]
    common = {"opset": opset, "domain": domain, "outputs": outputs}
    fast = run_node(op_type, inputs, attributes, **common)
    exact = run_node(op_type, inputs, attributes, exact=True, **common)
    for index, (a, b) in enumerate(zip(exact, fast, strict=True)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"{name} output {index}")


# -- the recurrent recipe against an oracle -------------------------------------------------


def _rounded_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The recipe's matrix product: both operands rounded to float32, each element the exact
    dot product rounded once into float32 (the Fraction oracle of test_exact_gemm), widened."""
    return oracle(a.astype(np.float32), b.astype(np.float32), np.float32).astype(np.float64)


def _recipe(op_type: str, x, w, r, b, linear_before_reset: int = 0) -> list[np.ndarray]:
    """docs/exact-mode.md's RNN/GRU/LSTM recipe, one direction from zero states, written out
    step by step in float64 (sigmoid64 and tanh64 are the tested elementary functions)."""
    hidden = r.shape[-1]
    sigmoid = lambda v: sigmoid64(np, v)  # noqa: E731
    tanh = lambda v: tanh64(np, v)  # noqa: E731
    wb, rb = b[0, : b.shape[1] // 2].astype(np.float64), b[0, b.shape[1] // 2 :].astype(np.float64)
    projected = _rounded_product(x.reshape(-1, x.shape[2]), w[0].T).reshape(
        x.shape[0], x.shape[1], -1
    )
    projected = projected + wb
    outside = 2 * hidden if linear_before_reset else rb.size  # Rb the reset gate multiplies
    projected[..., :outside] += rb[:outside]
    h = np.zeros((x.shape[1], hidden))
    c = np.zeros_like(h)
    ys = []
    for t in range(x.shape[0]):
        if op_type == "RNN":
            h = tanh(projected[t] + _rounded_product(h, r[0].T))
        elif op_type == "LSTM":
            gates = projected[t] + _rounded_product(h, r[0].T)
            i, o, f = (sigmoid(gates[:, k * hidden : (k + 1) * hidden]) for k in range(3))
            c = f * c + i * tanh(gates[:, 3 * hidden :])
            h = o * tanh(c)
        elif linear_before_reset:
            products = _rounded_product(h, r[0].T)
            zr = sigmoid(projected[t, :, : 2 * hidden] + products[:, : 2 * hidden])
            z, reset = zr[:, :hidden], zr[:, hidden:]
            candidate = tanh(
                projected[t, :, 2 * hidden :]
                + reset * (products[:, 2 * hidden :] + rb[2 * hidden :])
            )
            h = candidate + z * (h - candidate)
        else:
            zr = sigmoid(projected[t, :, : 2 * hidden] + _rounded_product(h, r[0, : 2 * hidden].T))
            z, reset = zr[:, :hidden], zr[:, hidden:]
            hidden_part = _rounded_product(reset * h, r[0, 2 * hidden :].T)
            candidate = tanh(projected[t, :, 2 * hidden :] + hidden_part)
            h = candidate + z * (h - candidate)
        ys.append(h)
    outputs = [np.stack(ys)[:, None], h[None]] + ([c[None]] if op_type == "LSTM" else [])
    return [o.astype(np.float32) for o in outputs]


@pytest.mark.parametrize(
    ("op_type", "gates", "linear_before_reset"),
    [("LSTM", 4, 0), ("GRU", 3, 0), ("GRU", 3, 1), ("RNN", 1, 0)],
)
def test_exact_recurrent_layers_follow_their_recipe(
    op_type: str, gates: int, linear_before_reset: int
) -> None:
    """The products are the correctly rounded exact dot products into float32 (so order-free,
    at BLAS speed) of the state rounded to float32; everything else float64 in the written
    order. Inputs of mixed scales, so some products cancel and the decision is tested."""
    rng = np.random.default_rng(5)
    seq, batch, width, hidden = 6, 2, 5, 4
    x = _f32(rng, seq, batch, width, scale=2.0)
    x[2, 0] *= 1e-3
    w = _f32(rng, 1, gates * hidden, width, scale=0.7)
    r = _f32(rng, 1, gates * hidden, hidden, scale=0.9)
    b = _f32(rng, 1, 2 * gates * hidden, scale=0.3)
    attributes = {"hidden_size": hidden}
    if op_type == "GRU":
        attributes["linear_before_reset"] = linear_before_reset
    outputs = 3 if op_type == "LSTM" else 2
    model, feeds = one_node_model(op_type, [x, w, r, b], attributes, opset=14, outputs=outputs)
    want = _recipe(op_type, x, w, r, b, linear_before_reset)
    for backend in ("numpy-reference", "numpy", "checked-device"):
        got = exact_run(model, feeds, backend)
        for index, (result, wanted) in enumerate(zip(got, want, strict=True)):
            assert_bits(result, wanted, f"{op_type} output {index} on {backend}")
