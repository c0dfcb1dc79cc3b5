"""Every element type each simple operator declares, through whole sessions.

For every default-domain operator whose inputs all take the one type constraint of its output
and that needs no attribute, each type the schema allows is run on small values: the result must
have that type and (where onnxruntime has a kernel for it) onnxruntime's values, or the session
must refuse it with a SessionError; never any other exception.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import defs, helper

from onemodel import Session, SessionError
from onemodel.graph.importer import model_from_proto
from onemodel.graph.operators import optable
from onemodel.tensors import numpy_dtype_for_onnx

OPSET = 21
_TYPE_CODES = {f"tensor({name.lower()})": code for name, code in onnx.TensorProto.DataType.items()}
_SKIP = frozenset(
    # Random, shape- or value-producing, or needing particular values / attributes to make sense;
    # then those that need inputs of particular ranks or companions (their own tests sweep them).
    """Bernoulli RandomNormalLike RandomUniformLike Multinomial Shape Size NonZero Unique Dropout
    Identity Optional OptionalHasElement BitShift StringNormalizer Mod Pow Det Einsum Col2Im
    CenterCropPad Resize DFT Conv ConvTranspose GlobalAveragePool GlobalMaxPool
    LayerNormalization MeanVarianceNormalization""".split()  # noqa: SIM905
)
_TRANSPOSED_SECOND = {"MatMul", "Gemm"}  # (2, 3) x (3, 2)


def _sweep_cases():
    cases = []
    for op_type in sorted({d.op_type for d in optable.TABLE if d.domain == ""} - _SKIP):
        try:
            schema = defs.get_schema(op_type, OPSET)
        except Exception:
            continue
        if schema.deprecated or any(a.required for a in schema.attributes.values()):
            continue
        inputs = [
            i for i in schema.inputs if i.option != defs.OpSchema.FormalParameterOption.Optional
        ]
        if not 1 <= len(inputs) <= 2 or len(schema.outputs) < 1:
            continue
        constraint = schema.outputs[0].type_str
        if any(i.type_str != constraint for i in inputs):
            continue
        allowed = next(
            (
                c.allowed_type_strs
                for c in schema.type_constraints
                if c.type_param_str == constraint
            ),
            [],
        )
        for type_str in allowed:
            code = _TYPE_CODES.get(type_str)
            if code is not None and code != onnx.TensorProto.STRING:
                cases.append(pytest.param(op_type, len(inputs), code, id=f"{op_type}-{type_str}"))
    return cases


def _values(op_type: str, code: int, count: int) -> list[np.ndarray]:
    dtype = numpy_dtype_for_onnx(code)
    second = np.array([[2, 1, 1], [1, 3, 2]], np.float32)
    if op_type in _TRANSPOSED_SECOND:
        second = second.T.copy()
    base = [np.array([[1, 2, 3], [0, 1, 2]], np.float32), second]
    if dtype == np.bool_:
        return [b.astype(bool) for b in base[:count]]
    return [b.astype(dtype) for b in base[:count]]


def _model(op_type: str, count: int, code: int) -> onnx.ModelProto:
    values = _values(op_type, code, count)
    graph = helper.make_graph(
        [helper.make_node(op_type, [f"x{i}" for i in range(count)], ["y"], name="node")],
        "g",
        [helper.make_tensor_value_info(f"x{i}", code, v.shape) for i, v in enumerate(values)],
        [helper.make_tensor_value_info("y", code, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


@pytest.mark.parametrize(("op_type", "count", "code"), _sweep_cases())
def test_every_declared_type_runs_or_is_refused(op_type, count, code):
    model = _model(op_type, count, code)
    feeds = {f"x{i}": v for i, v in enumerate(_values(op_type, code, count))}
    try:
        (result,) = Session.create(model_from_proto(model)).run(None, feeds)
    except SessionError:
        return
    assert result.dtype == numpy_dtype_for_onnx(code)
    try:
        import onnxruntime

        reference = onnxruntime.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        ).run(None, feeds)[0]
    except Exception:
        return  # onnxruntime has no kernel for this type (or cannot exchange it through NumPy)
    if result.dtype in (ml_dtypes.bfloat16, np.float16):
        np.testing.assert_allclose(
            result.astype(np.float32), reference.astype(np.float32), rtol=1e-2
        )
    elif np.issubdtype(result.dtype, np.floating):
        np.testing.assert_allclose(result, reference, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(result, reference)
