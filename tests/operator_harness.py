"""Run one operator outside a session: resolve it in the table, infer, allocate, run.

Unit tests of operator families use this before (and besides) whole-model tests; every input is
given to `infer` as a known value, as constant evaluation in a plan would. The same node built
as a one-node ONNX model (`one_node_model`) runs in onnxruntime, the tests' oracle
(`onnxruntime_run`, `assert_matches_onnxruntime`), or in onnx's reference implementation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onemodel.backends import KernelPaths
from onemodel.errors import ErrorKind, SessionError
from onemodel.graph.operators import optable
from onemodel.graph.operators.base import Constant, InferContext, NodeInfo, RunContext, TensorSpec
from onemodel.tensors import onnx_code_for_numpy


def _as_stored(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes as a model stores them: ONNX's FLOAT and FLOATS are float32, so 0.1
    reaches an operator as 0.10000000149011612, as it does through the importer."""

    def stored(value: Any) -> Any:
        if isinstance(value, float):
            return float(np.float32(value))
        if isinstance(value, list) and value and all(isinstance(v, float) for v in value):
            return [float(np.float32(v)) for v in value]
        return value

    return {name: stored(value) for name, value in attributes.items()}


def run_node(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: Mapping[str, Any] | None = None,
    *,
    opset: int = 17,
    outputs: int = 1,
    domain: str = "",
    backend: str = "numpy",
    exact: bool = False,
    known: Sequence[bool] | None = None,
) -> list[np.ndarray]:
    """The outputs of one node on host arrays; `known[i]` False hides input i's value from infer."""
    definition = optable.resolve(domain, op_type, opset)
    if definition is None:
        raise LookupError(f"{op_type} (opset {opset}) is not in the operator table")
    names = tuple(f"in{i}" if x is not None else "" for i, x in enumerate(inputs))
    node = NodeInfo(
        f"{op_type.lower()}_node", op_type, domain, opset, names,
        tuple(f"out{i}" for i in range(outputs)), _as_stored(attributes or {}),
    )  # fmt: skip
    operator = definition.factory(node)
    kernels = KernelPaths.get(backend)
    ctx = RunContext(kernels, exact)
    device = [None if x is None else kernels.xp.asarray(x) for x in inputs]
    if operator.outputs_data_dependent:
        results = operator.run(ctx, device, None)
        return [kernels.memory.to_host(r) for r in results]
    specs = [
        None if x is None else TensorSpec(onnx_code_for_numpy(x.dtype), x.shape) for x in inputs
    ]
    visible = known or [True] * len(inputs)
    constants = [x if shown else None for x, shown in zip(inputs, visible, strict=True)]
    stated = operator.infer(InferContext(node, specs, constants))
    if all(isinstance(s, Constant) for s in stated):
        return [np.asarray(s.value) for s in stated]
    if operator.view_of_input is not None:
        (spec,) = stated
        return [kernels.memory.to_host(device[operator.view_of_input].reshape(spec.shape))]
    results = [kernels.xp.empty(s.shape, dtype=s.numpy_dtype) for s in stated]
    operator.run(ctx, device, results)
    return [kernels.memory.to_host(r) for r in results]


def refused(
    kind: ErrorKind,
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: Mapping[str, Any] | None = None,
    *,
    match: str | None = None,
    **options: Any,
) -> SessionError:
    """The SessionError of `kind` (its message matching `match`, when given) that `run_node`
    raises for this node."""
    with pytest.raises(SessionError, match=match) as caught:
        run_node(op_type, inputs, attributes, **options)
    assert caught.value.kind is kind, caught.value
    return caught.value


def assert_same(
    actual: np.ndarray, expected: np.ndarray, *, rtol: float, atol: float, label: str = "output"
) -> None:
    """One element type and shape; integers, booleans and strings equal, floating values
    (narrow ones such as bfloat16 and float8 through float64) within rtol and atol, NaN
    matching NaN."""
    assert actual.dtype == expected.dtype, f"{label}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{label}: shape {actual.shape} != {expected.shape}"
    if expected.dtype.kind in "biuOSU":
        np.testing.assert_array_equal(actual, expected, err_msg=label)
        return
    if expected.dtype.kind in "fV":
        actual, expected = actual.astype(np.float64), expected.astype(np.float64)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=label)


def _is_narrow(array: np.ndarray) -> bool:
    """An ml_dtypes type (bfloat16, float8, int4…): NumPy has no such type of its own."""
    return array.dtype.type.__module__ == "ml_dtypes"


def one_node_model(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: Mapping[str, Any] | None = None,
    *,
    opset: int = 17,
    domain: str = "",
    outputs: int | Sequence[str] = 1,
    output_types: int | Sequence[int | None] | None = None,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model of the one node `run_node` runs, and the feeds that run it.

    Inputs are named in0, in1, …; None is an absent optional input (an empty name), and
    trailing ones are dropped (onnxruntime crashes on trailing empty names). Inputs of the
    ml_dtypes types (float8, int4, …), which onnxruntime cannot be fed, are initializers.
    `outputs` is a count (out0, out1, …) or the names, an empty one an absent optional output.
    `output_types` declares one element type for every output, or one per present output, None
    leaving the type to the runtime. The IR version is the lowest the opset allows.
    """
    arrays = [None if x is None else np.asarray(x) for x in inputs]
    while arrays and arrays[-1] is None:
        arrays.pop()
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(arrays)]
    given = [(n, x) for n, x in zip(names, arrays, strict=True) if x is not None]
    fed = {n: x for n, x in given if not _is_narrow(x)}
    results = [f"out{i}" for i in range(outputs)] if isinstance(outputs, int) else list(outputs)
    present = [name for name in results if name]
    if output_types is None or isinstance(output_types, int):
        output_types = [output_types] * len(present)
    graph = helper.make_graph(
        [helper.make_node(op_type, names, results, domain=domain, **(attributes or {}))],
        "one_node",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
            for n, x in fed.items()
        ],
        [
            helper.make_value_info(name, onnx.TypeProto())
            if dtype is None
            else helper.make_tensor_value_info(name, dtype, None)
            for name, dtype in zip(present, output_types, strict=True)
        ],
        initializer=[numpy_helper.from_array(x, n) for n, x in given if _is_narrow(x)],
    )
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    return model, fed


def onnxruntime_run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The model's outputs from onnxruntime (an oracle only: the package never imports it), on
    one thread and without its warnings."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, dict(feeds))


def onnxruntime_outputs(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: Mapping[str, Any] | None = None,
    *,
    opset: int = 17,
    outputs: int = 1,
    output_types: int | Sequence[int | None] | None = None,
) -> list[np.ndarray]:
    """One node run by onnxruntime. Its outputs are declared of the first given input's type
    unless `output_types` says otherwise (as in `one_node_model`: None in it leaves a type to
    onnxruntime); a list of types also gives the number of outputs."""
    if output_types is None:
        first = next(np.asarray(x) for x in inputs if x is not None)
        output_types = helper.np_dtype_to_tensor_dtype(first.dtype)
    elif not isinstance(output_types, int):
        outputs = len(output_types)
    model, feeds = one_node_model(
        op_type, inputs, attributes, opset=opset, outputs=outputs, output_types=output_types
    )
    return onnxruntime_run(model, feeds)


def assert_matches_onnxruntime(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: Mapping[str, Any] | None = None,
    *,
    opset: int = 17,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    **declared: Any,
) -> list[np.ndarray]:
    """`run_node`'s outputs, checked with `assert_same` against onnxruntime's for the same node
    (`onnxruntime_outputs`, given `declared`: outputs, output_types). onnxruntime gives float8
    outputs as their uint8 bits; ours are compared so."""
    expected = onnxruntime_outputs(op_type, inputs, attributes, opset=opset, **declared)
    results = run_node(op_type, inputs, attributes, opset=opset, outputs=len(expected))
    for index, (result, wanted) in enumerate(zip(results, expected, strict=True)):
        shown = result.view(np.uint8) if _is_narrow(result) and wanted.dtype == np.uint8 else result
        assert_same(shown, wanted, rtol=rtol, atol=atol, label=f"{op_type} output {index}")
    return results
