"""The pattern passes: layer norm, GELU, SiLU and scaled dot-product attention written out op by
op become one LayerNormalization, Gelu, Swish or Attention.

Each variant is a small onnx.helper graph in the form an exporter writes; the test checks that
the pass fires (the compiled graph's operators), that results match onnxruntime and the same
model without passes (OptimizationLevel.NONE), and that the pass stays away when an
intermediate has another reader, a constant is wrong, or the shapes cannot be proved right.
tests/models/patterns.onnx (tools/export_models.py, PyTorch at opset 14) holds all three as
PyTorch exports them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onemodel import (
    ErrorKind,
    ExecutionMode,
    OptimizationLevel,
    Session,
    SessionError,
    SessionOptions,
)
from onemodel.graph.importer import model_from_proto
from onemodel.graph.passes.table import selected

MODELS = Path(__file__).parent / "models"
PATTERN_PASSES = {
    "recognise-layer-normalization", "recognise-gelu", "recognise-swish", "recognise-attention",
}  # fmt: skip
PATTERN_OPERATORS = {"LayerNormalization", "Gelu", "Swish", "Attention"}
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
RNG = np.random.default_rng(5)


class Builder:
    """A graph written node by node; every node gets a fresh output name."""

    def __init__(self, dtype: type = np.float32) -> None:
        self.dtype = np.dtype(dtype)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, value, dtype=None) -> str:
        name = f"c{len(self.initializers)}"
        array = np.asarray(value, dtype=dtype or self.dtype)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, *inputs: str, **attributes) -> str:
        output = f"{op_type.lower()}{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], **attributes))
        return output

    def binary(self, op_type: str, a: str, b: str, swap: bool = False) -> str:
        return self.op(op_type, b, a) if swap else self.op(op_type, a, b)

    def model(self, inputs: dict[str, tuple], outputs: list[str], opset: int) -> onnx.ModelProto:
        elem = helper.np_dtype_to_tensor_dtype(self.dtype)
        graph = helper.make_graph(
            self.nodes,
            "pattern",
            [helper.make_tensor_value_info(n, elem, shape) for n, shape in inputs.items()],
            [helper.make_tensor_value_info(n, elem, None) for n in outputs],
            self.initializers,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def session(model: onnx.ModelProto, **options) -> Session:
    return Session.create(model_from_proto(model), SessionOptions(**options))


def operators(compiled: Session) -> list[str]:
    """The compiled graph's operator types, a fused step's members listed one by one."""
    names = []
    for node in compiled._graph.nodes:
        label = node.info.op_type
        names += label[len("fused(") : -1].split("+") if label.startswith("fused(") else [label]
    return names


def onnxruntime_unoptimised(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """onnxruntime with its own graph optimisations off, so it computes the graph as written
    (its layer-norm fusion, for one, ignores Pow's exponent)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    runner = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return runner.run(None, feeds)


def feeds_for(model: onnx.ModelProto, dtype=np.float32) -> dict[str, np.ndarray]:
    feeds = {}
    for value in model.graph.input:
        shape = [dim.dim_value for dim in value.type.tensor_type.shape.dim]
        feeds[value.name] = RNG.standard_normal(shape).astype(dtype)
    return feeds


def check(model: onnx.ModelProto, fires: str | None, *, oracle: bool = True, **tolerance):
    """The pass fires (`fires` is among the operators after compilation, or, when None, none
    of the pattern operators is), and results match onnxruntime and no passes."""
    tolerance = tolerance or TOLERANCE
    feeds = feeds_for(model)
    optimised = session(model)
    found = operators(optimised)
    if fires is None:
        assert not PATTERN_OPERATORS & set(found), found
    else:
        assert fires in found, found
    got = optimised.run(None, feeds)
    plain = session(model, optimization_level=OptimizationLevel.NONE).run(None, feeds)
    for have, want in zip(got, plain, strict=True):
        np.testing.assert_allclose(np.asarray(have), np.asarray(want), **tolerance)
    if oracle:
        for have, want in zip(got, onnxruntime_unoptimised(model, feeds), strict=True):
            np.testing.assert_allclose(np.asarray(have), want, **tolerance)
    return found


# -- layer normalization -----------------------------------------------------------------------


def layer_norm(
    *, square="pow", normalise="div", axes=(-1,), second_axes=None, opset=14, beta=True,
    gamma=True, swap=False, exponent=2.0, also_output=None,
) -> onnx.ModelProto:  # fmt: skip
    """x (2, 3, 8) normalised over `axes` as PyTorch (opset < 17) and TensorFlow write it."""
    b = Builder()
    extents = (2, 3, 8)

    def reduce_mean(value: str, over) -> str:
        if opset >= 18:
            return b.op("ReduceMean", value, b.const(list(over), np.int64))
        return b.op("ReduceMean", value, axes=list(over))

    mean = reduce_mean("x", axes)
    centred = b.op("Sub", "x", mean)
    if square == "pow":
        squared = b.op("Pow", centred, b.const(exponent))
    else:
        squared = b.op("Mul", centred, centred)
    variance = reduce_mean(squared, second_axes or axes)
    root = b.op("Sqrt", b.binary("Add", variance, b.const(1e-5), swap))
    if normalise == "div":
        y = b.op("Div", centred, root)
    else:
        y = b.binary("Mul", centred, b.op("Reciprocal", root), swap)
    normalised_shape = [extents[a] for a in axes]
    if gamma:
        y = b.binary("Mul", y, b.const(RNG.uniform(0.5, 1.5, normalised_shape)), swap)
    if beta:
        y = b.binary("Add", y, b.const(RNG.standard_normal(normalised_shape)), swap)
    outputs = [y] + ([{"mean": mean, "centred": centred}[also_output]] if also_output else [])
    return b.model({"x": extents}, outputs, opset)


@pytest.mark.parametrize("opset", [14, 18])
@pytest.mark.parametrize("normalise", ["div", "reciprocal"])
@pytest.mark.parametrize("square", ["pow", "mul"])
def test_layer_norm_forms_become_one_node(square, normalise, opset):
    found = check(layer_norm(square=square, normalise=normalise, opset=opset), "LayerNormalization")
    assert found == ["LayerNormalization"]


@pytest.mark.parametrize(
    "variant",
    [
        {"axes": (-2, -1)},
        {"beta": False},
        {"swap": True},
        {"opset": 18, "axes": (-2, -1), "swap": True},
    ],
    ids=["two-axes", "no-beta", "operands-swapped", "opset18-two-axes-swapped"],
)
def test_layer_norm_variants(variant):
    assert check(layer_norm(**variant), "LayerNormalization") == ["LayerNormalization"]


@pytest.mark.parametrize(
    "variant",
    [
        {"also_output": "mean"},
        {"also_output": "centred"},
        {"exponent": 3.0},
        {"axes": (2,)},
        {"axes": (-1,), "second_axes": (-2, -1)},
        {"gamma": False, "beta": False},
    ],
    ids=[
        "mean-read-elsewhere",
        "centred-read-elsewhere",
        "wrong-exponent",
        "positive-axis",
        "axes-differ",
        "no-gamma",
    ],
)
def test_layer_norm_left_alone(variant):
    check(layer_norm(**variant), None)


def test_layer_norm_gamma_wider_than_the_normalised_axes_is_left_alone():
    model = layer_norm()
    gamma = next(i for i in model.graph.initializer if i.name == "c2")
    gamma.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(gamma).reshape(1, 1, 8), "c2"))
    check(model, None)


# -- GELU --------------------------------------------------------------------------------------


ROOT_TWO = math.sqrt(2)


def half_x_times(b: Builder, x: str, one_plus: str, order: str, swap: bool, half=0.5) -> str:
    """0.5·x·(1 + f) in one of the three orders exporters write."""
    if order == "x-first":  # (x·(1 + f))·0.5: PyTorch
        return b.binary("Mul", b.binary("Mul", x, one_plus, swap), b.const(half), swap)
    if order == "half-x":  # (0.5·x)·(1 + f): TensorFlow, transformers' NewGELU
        return b.binary("Mul", b.binary("Mul", b.const(half), x, swap), one_plus, swap)
    return b.binary("Mul", x, b.binary("Mul", one_plus, b.const(half), swap), swap)


def erf_gelu(
    *, scale="div", order="x-first", swap=False, half=0.5, root_two=ROOT_TWO, opset=14,
    erf_is_output=False, dtype=np.float32,
) -> onnx.ModelProto:  # fmt: skip
    b = Builder(dtype)
    if scale == "div":
        scaled = b.op("Div", "x", b.const(root_two))
    else:
        scaled = b.binary("Mul", "x", b.const(1 / root_two), swap)
    erf = b.op("Erf", scaled)
    y = half_x_times(b, "x", b.binary("Add", erf, b.const(1.0), swap), order, swap, half)
    return b.model({"x": (4, 16)}, [y, erf] if erf_is_output else [y], opset)


def tanh_gelu(*, cube="pow", order="x-first", swap=False, kappa=0.044715) -> onnx.ModelProto:
    b = Builder()
    if cube == "pow":
        cubed = b.op("Pow", "x", b.const(3.0))
    elif cube == "x-xx":
        cubed = b.binary("Mul", "x", b.op("Mul", "x", "x"), swap)
    else:
        cubed = b.binary("Mul", b.op("Mul", "x", "x"), "x", swap)
    inner = b.binary("Add", "x", b.binary("Mul", b.const(kappa), cubed, swap), swap)
    tanh = b.op("Tanh", b.binary("Mul", b.const(math.sqrt(2 / math.pi)), inner, swap))
    y = half_x_times(b, "x", b.binary("Add", b.const(1.0), tanh, swap), order, swap)
    return b.model({"x": (4, 16)}, [y], 14)


ORDERS = ["x-first", "half-x", "x-last"]


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("scale", ["div", "mul"])
def test_erf_gelu_forms_become_one_node(scale, order, swap):
    assert check(erf_gelu(scale=scale, order=order, swap=swap), "Gelu") == ["Gelu"]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("cube", ["pow", "x-xx", "xx-x"])
def test_tanh_gelu_forms_become_one_node(cube, order):
    assert check(tanh_gelu(cube=cube, order=order), "Gelu") == ["Gelu"]
    assert check(tanh_gelu(cube=cube, order=order, swap=True), "Gelu") == ["Gelu"]


def test_gelu_in_a_model_of_opset_20_uses_its_opset():
    optimised = session(erf_gelu(opset=20))
    (node,) = optimised._graph.nodes
    assert (node.info.op_type, node.info.opset) == ("Gelu", 20)


def check_float16(model: onnx.ModelProto, operator: str) -> None:
    """The pattern becomes `operator` in float16 and matches the graph without passes within
    float16's rounding."""
    feeds = feeds_for(model, np.float16)
    optimised = session(model)
    assert operators(optimised) == [operator]
    want = session(model, optimization_level=OptimizationLevel.NONE).run(None, feeds)[0]
    np.testing.assert_allclose(optimised.run(None, feeds)[0], want, rtol=2e-3, atol=2e-3)


def test_float16_gelu_constants_match_with_float16_rounding():
    check_float16(erf_gelu(dtype=np.float16), "Gelu")


@pytest.mark.parametrize(
    "model",
    [
        erf_gelu(half=0.4),
        erf_gelu(root_two=1.5),
        erf_gelu(scale="mul", root_two=1.5, order="half-x"),
        erf_gelu(erf_is_output=True),
        tanh_gelu(kappa=0.05),
    ],
    ids=["half-is-0.4", "div-by-1.5", "mul-by-1/1.5", "extra-reader", "wrong-kappa"],
)
def test_gelu_left_alone(model):
    check(model, None)


# -- SiLU --------------------------------------------------------------------------------------


def silu(*, swap=False, gate_is_output=False, other=False, conv=False, opset=14, dtype=np.float32):
    """x · Sigmoid(x) as PyTorch exports nn.SiLU below opset 24, after a Conv when `conv`;
    `other`: the Sigmoid of another value than the Mul's other operand."""
    b = Builder(dtype)
    x = "x"
    if conv:
        weight = b.const(RNG.standard_normal((4, 3, 3, 3)) * 0.3)
        x = b.op("Conv", x, weight, b.const(RNG.standard_normal(4)), pads=[1, 1, 1, 1])
    gate = b.op("Sigmoid", b.op("Neg", x) if other else x)
    y = b.binary("Mul", x, gate, swap)
    outputs = [y, gate] if gate_is_output else [y]
    return b.model({"x": (2, 3, 5, 5) if conv else (4, 16)}, outputs, opset)


@pytest.mark.parametrize("swap", [False, True])
def test_silu_becomes_one_swish(swap):
    assert check(silu(swap=swap), "Swish") == ["Swish"]


def test_silu_after_a_conv_is_the_conv_steps_tail():
    optimised = session(silu(conv=True))
    assert [node.info.op_type for node in optimised._graph.nodes] == ["fused(Conv+Swish)"]
    check(silu(conv=True), "Swish")


def test_swish_in_a_model_of_opset_24_uses_its_opset():
    (node,) = session(silu(opset=24))._graph.nodes
    assert (node.info.op_type, node.info.opset) == ("Swish", 24)


def test_float16_silu_becomes_one_swish():
    check_float16(silu(dtype=np.float16), "Swish")


@pytest.mark.parametrize(
    "model", [silu(gate_is_output=True), silu(other=True)], ids=["gate-is-output", "other-value"]
)
def test_silu_left_alone(model):
    check(model, None)


# -- attention ---------------------------------------------------------------------------------

B, H, S, T, D = 2, 3, 5, 6, 4
ROOT_D = math.sqrt(D)


def attention(
    *, key_layout="bthd", scale="div", mask=None, softmax_axis=-1, opset=14,
    scores_are_output=False, dtype=np.float32, query_from_input=False, scale_from_input=False,
    divisor=ROOT_D,
) -> onnx.ModelProto:  # fmt: skip
    """softmax(Q·Kᵀ/√D [+ mask])·V on (B, H, S, D) heads made by Transposes, as transformers'
    exports write it. key_layout "bthd": Kᵀ = Transpose(k (B, T, H, D), [0, 2, 3, 1]) (the
    exporter's two transposes composed); "bhtd": Transpose(k (B, H, T, D), [0, 1, 3, 2])."""
    b = Builder(dtype)
    inputs = {"q": (B, S, H, D), "v": (B, T, H, D)}
    query = "q" if query_from_input else b.op("Transpose", "q", perm=[0, 2, 1, 3])
    if query_from_input:
        inputs["q"] = (B, H, S, D)
    if key_layout == "bthd":
        inputs["k"] = (B, T, H, D)
        key_t = b.op("Transpose", "k", perm=[0, 2, 3, 1])
    else:
        inputs["k"] = (B, H, T, D)
        key_t = b.op("Transpose", "k", perm=[0, 1, 3, 2])
    value = b.op("Transpose", "v", perm=[0, 2, 1, 3])
    raw = b.op("MatMul", query, key_t)
    if scale_from_input:
        inputs["scale"] = ()
        scores = b.op("Div", raw, "scale")
    elif scale == "div":
        scores = b.op("Div", raw, b.const(divisor))
    else:
        scores = b.op("Mul", b.const(1 / divisor), raw)
    if isinstance(mask, str):  # "input": a run-time mask
        inputs["mask"] = (B, 1, 1, T)
        scores = b.op("Add", scores, "mask")
    elif mask is not None:
        scores = b.op("Add", b.const(mask), scores)
    probs = b.op("Softmax", scores, axis=softmax_axis)
    y = b.op("MatMul", probs, value)
    return b.model(inputs, [y, scores] if scores_are_output else [y], opset)


def causal(rows: int, columns: int) -> np.ndarray:
    """An additive mask hiding later keys (bottom-right aligned, so no row is all hidden)."""
    hidden = np.triu(np.ones((rows, columns), dtype=bool), k=columns - rows + 1)
    return np.where(hidden, -1e4, 0).astype(np.float32)


@pytest.mark.parametrize("mask", [None, "input", "causal"])
@pytest.mark.parametrize("scale", ["div", "mul"])
@pytest.mark.parametrize("key_layout", ["bthd", "bhtd"])
def test_attention_becomes_one_node(key_layout, scale, mask):
    constant = causal(S, T) if mask == "causal" else mask
    found = check(attention(key_layout=key_layout, scale=scale, mask=constant), "Attention")
    # Q and V keep their Transposes; K needs one only when its Transpose moved more axes.
    transposes = 3 if key_layout == "bthd" else 2
    assert sorted(found) == sorted(["Attention"] + ["Transpose"] * transposes)


def single_head_attention(mask: str | None) -> onnx.ModelProto:
    """Rank 3: (B, S, D) queries from a Reshape, keys transposed by [0, 2, 1]."""
    b = Builder()
    query = b.op("Reshape", "q", b.const([0, 0, -1], np.int64))
    value = b.op("Reshape", "v", b.const([0, 0, -1], np.int64))
    raw = b.op("MatMul", query, b.op("Transpose", "k", perm=[0, 2, 1]))
    scores = b.op("Div", raw, b.const(math.sqrt(D)))
    inputs = {"q": (B, S, D), "k": (B, T, D), "v": (B, T, D)}
    if mask == "input":
        inputs["mask"] = (B, S, T)
        scores = b.op("Add", scores, "mask")
    elif mask == "causal":
        scores = b.op("Add", scores, b.const(causal(S, T)))
    return b.model(inputs, [b.op("MatMul", b.op("Softmax", scores, axis=2), value)], 14)


@pytest.mark.parametrize("mask", [None, "causal"])
def test_single_head_attention_uses_the_packed_layout(mask):
    assert "Attention" in check(single_head_attention(mask), "Attention")


@pytest.mark.parametrize(
    "model",
    [
        attention(softmax_axis=2),
        attention(opset=12),
        attention(scores_are_output=True),
        attention(scale_from_input=True),
        attention(query_from_input=True),
        attention(divisor=0.0),
        attention(scale="mul", divisor=-2.0),
        attention(mask=np.zeros((B, 1, S, 1), np.float32)),
        single_head_attention("input"),
    ],
    ids=[
        "softmax-over-queries", "softmax-opset-12", "extra-reader", "scale-not-constant",
        "query-rank-unknown", "divide-by-zero", "negative-scale", "mask-ends-in-1",
        "single-head-run-time-mask",
    ],
)  # fmt: skip
def test_attention_left_alone(model):
    check(model, None)


def test_float16_attention_is_left_alone():
    model = attention(dtype=np.float16)
    assert "Attention" not in operators(session(model))


# -- levels, exact mode, exported models -------------------------------------------------------


def test_pattern_passes_run_at_level_all_in_fast_mode_only():
    names = {p.name for p in selected(OptimizationLevel.ALL, exact=False)}
    assert names >= PATTERN_PASSES
    for level, exact in ((OptimizationLevel.ALL, True), (OptimizationLevel.BASIC, False)):
        assert not PATTERN_PASSES & {p.name for p in selected(level, exact)}


@pytest.mark.parametrize(
    "model",
    [layer_norm(square="mul"), erf_gelu(), silu(), attention(key_layout="bhtd")],
    ids=["layer-norm", "gelu", "silu", "attention"],
)
@pytest.mark.parametrize(
    "options",
    [
        {"mode": ExecutionMode.EXACT},
        {"optimization_level": OptimizationLevel.BASIC},
    ],
    ids=["exact", "basic"],
)
def test_exact_mode_and_basic_level_keep_the_pattern(model, options):
    """The written-out nodes stay. In exact mode a session may instead be refused for lacking
    exact kernels; the operators it names are then the pattern's own, which shows the same."""
    try:
        found = operators(session(model, **options))
    except SessionError as error:
        assert error.kind is ErrorKind.EXACT_MODE_UNAVAILABLE, error
        found = list(error.operators)
    assert not PATTERN_OPERATORS & set(found), found


def _stored(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    with np.load(MODELS / f"{name}.inputs.npz") as data:
        arrays = {key: data[key] for key in data.files}
    inputs = {k: v for k, v in arrays.items() if not k.startswith("output:")}
    outputs = {k.removeprefix("output:"): v for k, v in arrays.items() if k.startswith("output:")}
    return inputs, outputs


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("patterns", {"LayerNormalization": 1, "Gelu": 2, "Attention": 1}),
        ("transformer", {"Gelu": 2, "Attention": 2}),
    ],
)
def test_exported_models_are_recognised(name, expected):
    """PyTorch's own exports: the patterns fire as often as the model has them, the node count
    falls, and outputs match onnxruntime's stored ones and the graph without passes."""
    path = str(MODELS / f"{name}.onnx")
    inputs, outputs = _stored(name)
    optimised = Session.load(path)
    plain = Session.load(path, SessionOptions(optimization_level=OptimizationLevel.NONE))
    found = operators(optimised)
    assert {op: found.count(op) for op in expected} == expected
    assert len(optimised._graph.nodes) < len(plain._graph.nodes)
    got = optimised.run(None, inputs)
    for have, want, same in zip(got, outputs.values(), plain.run(None, inputs), strict=True):
        np.testing.assert_allclose(np.asarray(have), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(have), np.asarray(same), rtol=1e-4, atol=1e-5)
