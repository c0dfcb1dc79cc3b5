"""The checked-device stand-in: CuPy's rules on the CPU, so host-only code fails in CI.

The library's refusals are checked first (each one is what lets a later test fail); then the
exported models and a sample of operators run on it and must give the NumPy backend's results,
and a warm run must copy nothing to the host besides what the caller and the plan need.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from operator_harness import run_node

from onemodel.backends import KernelPaths
from onemodel.backends.checked_device import TRANSFERS, DeviceArray, checked_xp
from onemodel.graph.operators.base import NodeInfo, Operator, RunContext
from onemodel.graph.plan import StepKind
from onemodel.graph.weights import WeightStorage
from onemodel.session import ExecutionMode, Session, SessionOptions

MODELS = Path(__file__).parent / "models"
DEVICE = "checked-device"
RNG = np.random.default_rng(11)


def device(values: np.ndarray) -> DeviceArray:
    return checked_xp.asarray(values)


# -- the library's rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "convert",
    [np.asarray, np.array, lambda x: np.add(x, 1), np.concatenate, memoryview],
    ids=["asarray", "array", "ufunc", "function", "buffer"],
)
def test_a_device_array_refuses_implicit_host_conversion(convert) -> None:
    x = device(np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(TypeError):
        convert(x) if convert is not np.concatenate else convert([x, x])


@pytest.mark.parametrize("convert", [float, int, bool, lambda x: x.tolist()])
def test_python_scalars_come_only_from_0d_arrays(convert) -> None:
    with pytest.raises(TypeError):
        convert(device(np.ones(3, np.float32)))


def test_host_arrays_are_refused_as_operands_and_accepted_as_uploads() -> None:
    x, host = device(np.ones(3, np.float32)), np.ones(3, np.float32)
    for combine in (lambda: x + host, lambda: host + x, lambda: checked_xp.add(x, host)):
        with pytest.raises(TypeError, match="host NumPy array"):
            combine()
    x[...] = host * 2  # assignment uploads, as CuPy's does
    np.testing.assert_array_equal(checked_xp.asnumpy(x), host * 2)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, object])
def test_only_cupys_element_types_exist_on_the_device(dtype) -> None:
    with pytest.raises(TypeError, match="no dtype"):
        checked_xp.zeros(3, dtype=dtype)
    with pytest.raises(TypeError, match="no dtype"):
        device(np.zeros(4, np.uint8)).view(dtype)


@pytest.mark.parametrize(
    "lookup",
    [
        lambda: checked_xp.insert,  # NumPy functions CuPy does not have
        lambda: checked_xp.errstate,
        lambda: checked_xp.lib.stride_tricks.broadcast_to,
        lambda: device(np.zeros(3, np.float32)).resize,  # nor this ndarray method
    ],
    ids=["insert", "errstate", "submodule", "method"],
)
def test_only_the_names_cupy_has_exist_on_the_device(lookup) -> None:
    with pytest.raises(AttributeError, match="has no"):
        lookup()
    assert checked_xp.lib.stride_tricks.as_strided is not None  # while CuPy's own ones exist


def test_every_device_to_host_copy_is_counted_with_its_origin() -> None:
    x = device(np.arange(4, dtype=np.int64))
    with TRANSFERS.recording() as transfers:
        total = int(x.sum())
        host = checked_xp.asnumpy(x)
        first = x[0].item()
    assert (total, first) == (int(np.arange(4).sum()), 0)
    np.testing.assert_array_equal(host, np.arange(4))
    assert [t.how for t in transfers.to_host] == ["int()", "get()", "item()"]
    assert all(t.origin.startswith(__file__) for t in transfers.to_host)


def test_results_keep_identity_through_out_and_views_share_memory() -> None:
    a = device(np.arange(6, dtype=np.float32))
    out = checked_xp.empty(6, dtype=np.float32)
    assert checked_xp.multiply(a, 2, out=out) is out
    view = out.reshape(2, 3)
    view[0, 0] = 7
    assert float(out[0]) == 7.0


def test_ufunc_at_exists_only_where_cupy_scatters() -> None:
    out = checked_xp.zeros(3, dtype=np.float32)
    checked_xp.add.at(out, device(np.array([0, 0, 2])), 1.0)
    np.testing.assert_array_equal(checked_xp.asnumpy(out), [2, 0, 1])
    with pytest.raises(NotImplementedError):
        checked_xp.multiply.at(out, device(np.array([0])), 2.0)


SUBNORMALS = np.array([1e-40, -1e-41, 1.0, -0.0, np.inf], np.float32)
FLUSHED = np.array([0.0, -0.0, 1.0, -0.0, np.inf], np.float32)


def _bits(values: DeviceArray) -> np.ndarray:
    return checked_xp.asnumpy(values).view(np.uint32)


@pytest.mark.parametrize(
    "compute",
    [
        lambda x: x + 0,
        lambda x: checked_xp.negative(-x),
        lambda x: checked_xp.maximum(x, -1.0),
        lambda x: checked_xp.multiply(x, 1, out=checked_xp.empty_like(x)),
        lambda x: x.astype(np.float64).astype(np.float32),
        lambda x: checked_xp.where(x == 0, 0, x),  # the comparison reads zeros: 0 is picked
    ],
    ids=["operator", "negation", "ufunc", "out", "conversions", "comparison"],
)
def test_float32_arithmetic_flushes_subnormals_as_cupys_does(compute) -> None:
    """CuPy compiles every kernel with -ftz=true; the stand-in must behave so, or code that
    depends on subnormals would pass here and fail on a GPU."""
    np.testing.assert_array_equal(checked_xp.asnumpy(compute(device(SUBNORMALS))), FLUSHED)


@pytest.mark.parametrize(
    "move",
    [
        lambda x: x.copy(),
        lambda x: x.reshape(5)[::1],
        lambda x: checked_xp.concatenate([x]),
        lambda x: checked_xp.where(checked_xp.isnan(x), 0, x),
        lambda x: checked_xp.take(x, device(np.arange(5))),
    ],
    ids=["copy", "view", "concatenate", "where", "take"],
)
def test_moves_keep_the_bits_of_subnormals(move) -> None:
    np.testing.assert_array_equal(_bits(move(device(SUBNORMALS))), SUBNORMALS.view(np.uint32))


class _HostRoundTrip(Operator):
    """What the stand-in is for: an operator that computes on the host by mistake."""

    def run(self, ctx, inputs, outputs):
        outputs[0][...] = ctx.xp.asarray(np.sort(np.asarray(inputs[0])))


def test_an_operator_with_a_host_round_trip_fails_on_the_stand_in() -> None:
    node = NodeInfo("sort", "Sort", "", 1, ("x",), ("y",))
    values = RNG.standard_normal(5).astype(np.float32)
    host_out = np.empty(5, np.float32)
    _HostRoundTrip(node).run(RunContext(KernelPaths.get("numpy"), False), [values], [host_out])
    np.testing.assert_array_equal(host_out, np.sort(values))
    kernels = KernelPaths.get(DEVICE)
    with pytest.raises(TypeError, match="implicit conversion"):
        _HostRoundTrip(node).run(
            RunContext(kernels, False), [device(values)], [checked_xp.empty(5, np.float32)]
        )


# -- the graph runtime on the stand-in -------------------------------------------------------


def _stored(name: str) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    with np.load(MODELS / f"{name}.inputs.npz") as data:
        inputs = {k: data[k] for k in data.files if not k.startswith("output:")}
        outputs = [data[k] for k in data.files if k.startswith("output:")]
    return inputs, outputs


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_exported_models_give_the_numpy_backends_results(name: str, mode: str) -> None:
    feeds, _ = _stored(name)
    path = str(MODELS / f"{name}.onnx")
    results = {}
    for backend in ("numpy", DEVICE):
        session = Session.load(path, SessionOptions(mode=ExecutionMode(mode), backend=backend))
        assert session.backend == backend
        results[backend] = session.run(None, feeds, outputs_as="numpy")
        assert all(isinstance(r, np.ndarray) for r in results[backend])
        raw = session.run(None, feeds)
        expected_type = DeviceArray if backend == DEVICE else np.ndarray
        assert all(isinstance(r, expected_type) for r in raw)
    for ours, numpy_backend in zip(results[DEVICE], results["numpy"], strict=True):
        if mode == "exact":  # the same bits everywhere is exact mode's promise
            np.testing.assert_array_equal(ours.view(np.uint8), numpy_backend.view(np.uint8))
        else:
            np.testing.assert_allclose(ours, numpy_backend, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("storage", [WeightStorage.BINARY16, WeightStorage.BFLOAT16])
def test_reduced_precision_weights_stay_reduced_on_the_device(storage: WeightStorage) -> None:
    """The device has no bfloat16: stored weights are held as uint16 bits there and widened by
    bit formulas, so the results are the NumPy backend's, bit for bit (exact mode)."""
    feeds, _ = _stored("cnn")
    path = str(MODELS / "cnn.onnx")
    results, weight_bytes = {}, {}
    for backend in ("numpy", DEVICE):
        options = SessionOptions(mode=ExecutionMode.EXACT, backend=backend, weight_storage=storage)
        session = Session.load(path, options)
        results[backend] = session.run(None, feeds, outputs_as="numpy")
        weight_bytes[backend] = session.graph_summary["weight_bytes"]
    original = Session.load(path, SessionOptions(backend=DEVICE)).graph_summary["weight_bytes"]
    assert weight_bytes[DEVICE] == weight_bytes["numpy"] < original * 0.6
    for ours, numpy_backend in zip(results[DEVICE], results["numpy"], strict=True):
        np.testing.assert_array_equal(ours.view(np.uint8), numpy_backend.view(np.uint8))


def _gather_steps(session: Session) -> int:
    (plan,) = session.plans()
    return sum(
        step.node.info.op_type == "Gather" and step.kind is StepKind.STATIC for step in plan.steps
    )


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_a_warm_run_copies_nothing_to_the_host_but_index_checks(name: str) -> None:
    """Zero device-to-host copies per run, except one flag per Gather (the index range check
    that reports a bad index: see docs/gpu.md) and the outputs asked for on the host."""
    feeds, _ = _stored(name)
    # checked=False: checked mode (ONEMODEL_CHECKED=1) reads canary bytes on the host on purpose
    options = SessionOptions(backend=DEVICE, checked=False)
    session = Session.load(str(MODELS / f"{name}.onnx"), options)
    session.run(None, feeds)  # planning reads constants on the host; runs must not
    with TRANSFERS.recording() as transfers:
        session.run(None, feeds)
    assert [t.how for t in transfers.to_host] == ["bool()"] * _gather_steps(session)
    assert all("checked_indices" in t.origin for t in transfers.to_host)
    with TRANSFERS.recording() as transfers:
        session.run(None, feeds, outputs_as="numpy")
    copies = [t for t in transfers.to_host if t.how == "get()"]
    assert len(copies) == len(session.outputs)


def test_a_computed_reshape_reads_only_its_shape_on_the_host() -> None:
    """The one kind of host data a plan genuinely needs: a shape computed in the run."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "computed_reshape",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = SessionOptions(backend=DEVICE, checked=False)  # no canary reads on the host
    session = Session.load(model.SerializeToString(), options)
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    shape = np.array([3, 4], np.int64)
    session.run(None, {"x": x, "shape": shape})
    with TRANSFERS.recording() as transfers:
        (y,) = session.run(None, {"x": x, "shape": shape})
    assert [(t.how, t.nbytes) for t in transfers.to_host] == [("get()", shape.nbytes)]
    np.testing.assert_array_equal(checked_xp.asnumpy(y), x.reshape(3, 4))


# -- a sample of operators, each against the NumPy backend -----------------------------------


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


SAMPLE = {
    "Add": (["Add", [_f32(2, 3), _f32(3)]], {}),
    "MatMul": (["MatMul", [_f32(2, 3, 4), _f32(4, 5)]], {}),
    "Conv": (["Conv", [_f32(1, 2, 5, 5), _f32(3, 2, 3, 3)]], {"pads": [1, 1, 1, 1]}),
    "ConvTranspose": (["ConvTranspose", [_f32(1, 2, 3, 3), _f32(2, 3, 2, 2)]], {}),
    "MaxPool": (["MaxPool", [_f32(1, 2, 5, 5)]], {"kernel_shape": [2, 2]}),
    "AveragePool": (["AveragePool", [_f32(1, 2, 5, 5)]], {"kernel_shape": [3, 3]}),
    # -1000 keeps the host on the shared path: its exp(x) shortcut, taken where no exp can
    # overflow or leave float32's normal range (softmax._exp_cannot_overflow), is host-only.
    "Softmax": (["Softmax", [np.concatenate([_f32(2, 4), np.float32([[-1000], [1]])], 1)]], {}),
    "LayerNormalization": (["LayerNormalization", [_f32(2, 4), _f32(4), _f32(4)]], {}),
    "ReduceSum": (["ReduceSum", [_f32(2, 3, 4), np.array([1], np.int64)]], {}),
    "ReduceMax": (["ReduceMax", [_f32(2, 3, 4), np.array([-1], np.int64)]], {"opset": 18}),
    "Gather": (["Gather", [_f32(4, 3), np.array([[0, -1], [2, 1]], np.int64)]], {}),
    "ScatterElements add": (
        ["ScatterElements", [_f32(3, 3), np.array([[0, 0, 1]], np.int64), _f32(1, 3)]],
        {"reduction": "add"},
    ),
    "ScatterElements mul": (
        ["ScatterElements", [_f32(3, 3), np.array([[0, 0, 1]], np.int64), _f32(1, 3)]],
        {"reduction": "mul"},
    ),
    "ScatterND": (["ScatterND", [_f32(4, 2), np.array([[1], [3]], np.int64), _f32(2, 2)]], {}),
    "Pad": (["Pad", [_f32(2, 3), np.array([0, 1, 1, 0], np.int64), np.float32(2.5)]], {}),
    "Resize": (
        ["Resize", [_f32(1, 1, 2, 3), None, np.array([1, 1, 2, 2], np.float32)]],
        {"mode": "linear"},
    ),
    "TopK": (["TopK", [_f32(3, 5), np.array([2], np.int64)]], {"outputs": 2}),
    "CumSum": (["CumSum", [_f32(2, 4), np.array(1, np.int64)]], {}),
    "Einsum": (["Einsum", [_f32(2, 3), _f32(3, 4)]], {"equation": "ij,jk->ik"}),
    "Where": (["Where", [_f32(2, 3) > 0, _f32(2, 3), _f32(3)]], {}),
    "Cast": (["Cast", [_f32(7) * 1e3]], {"to": TensorProto.FLOAT16}),
    "NonZero": (["NonZero", [np.array([[0, 1], [2, 0]], np.float32)]], {}),
    "Slice": (
        ["Slice", [_f32(4, 5), np.array([1, 0], np.int64), np.array([3, 5], np.int64)]],
        {},
    ),
    "Expand": (["Expand", [_f32(3, 1), np.array([2, 3, 4], np.int64)]], {}),
    "Erf": (["Erf", [_f32(6)]], {}),
}


@pytest.mark.parametrize("case", list(SAMPLE), ids=list(SAMPLE))
@pytest.mark.parametrize("exact", [False, True], ids=["fast", "exact"])
def test_operators_give_the_same_bits_as_the_numpy_backend(case: str, exact: bool) -> None:
    (op_type, inputs), options = SAMPLE[case]
    options = dict(options)
    opset, outputs = options.pop("opset", 17), options.pop("outputs", 1)
    inputs = [None if x is None else np.asarray(x) for x in inputs]
    results = {
        backend: run_node(
            op_type, inputs, options, opset=opset, outputs=outputs, backend=backend, exact=exact
        )
        for backend in ("numpy", DEVICE)
    }
    for ours, theirs in zip(results[DEVICE], results["numpy"], strict=True):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_array_equal(ours.view(np.uint8), theirs.view(np.uint8))
