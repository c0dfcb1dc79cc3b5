"""Zero-sized dimensions (batch 0, sequence 0, empty reductions) through whole sessions: every
case ends in a result whose shape ONNX's own shape inference agrees with, or in a clear
SessionError, never in another exception."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onemodel import ErrorKind, Session, SessionError
from onemodel.graph.importer import model_from_proto

F = np.float32
rng = np.random.default_rng(0)


def x(*shape, dtype=F):
    return rng.standard_normal(shape).astype(dtype)


CASES = [
    ("Relu", [x(0, 3)], {}),
    ("Sigmoid", [x(0, 3)], {}),
    ("Exp", [x(2, 0)], {}),
    ("Add", [x(0, 3), x(3)], {}),
    ("Mul", [x(0, 1), x(1, 5)], {}),
    ("Where", [np.zeros((0, 2), bool), x(0, 2), x(2)], {}),
    ("MatMul", [x(0, 4), x(4, 5)], {}),
    ("MatMul", [x(3, 0), x(0, 5)], {}),
    ("Gemm", [x(0, 4), x(4, 5), x(5)], {}),
    ("Conv", [x(0, 3, 8, 8), x(4, 3, 3, 3)], {"pads": [1, 1, 1, 1]}),
    ("MaxPool", [x(0, 3, 8, 8)], {"kernel_shape": [2, 2]}),
    ("AveragePool", [x(0, 3, 8, 8)], {"kernel_shape": [2, 2]}),
    ("GlobalAveragePool", [x(0, 3, 8, 8)], {}),
    ("BatchNormalization", [x(0, 3, 4), x(3), x(3), x(3), np.ones(3, F)], {}),
    ("LayerNormalization", [x(0, 4), x(4), x(4)], {}),
    ("Softmax", [x(0, 4)], {}),
    ("Softmax", [x(3, 0)], {}),
    ("LogSoftmax", [x(0, 4)], {}),
    ("ReduceSum", [x(0, 3), np.array([0], np.int64)], {"keepdims": 1}),
    ("ReduceMean", [x(3, 0), np.array([1], np.int64)], {"keepdims": 0}),
    ("ReduceMax", [x(0, 3), np.array([0], np.int64)], {"keepdims": 0}),
    ("ReduceProd", [x(0, 3), np.array([0], np.int64)], {"keepdims": 0}),
    ("ArgMax", [x(0, 3)], {"axis": 0}),
    ("ArgMax", [x(0, 3)], {"axis": 1}),
    ("ConvTranspose", [x(0, 3, 4, 4), x(3, 2, 3, 3)], {}),
    ("InstanceNormalization", [x(0, 3, 4), x(3), x(3)], {}),
    ("Einsum", [x(0, 3), x(3, 4)], {"equation": "ij,jk->ik"}),
    ("Attention", [x(0, 2, 3, 4), x(0, 2, 3, 4), x(0, 2, 3, 4)], {}),
    ("Concat", [x(0, 3), x(2, 3)], {"axis": 0}),
    ("Transpose", [x(0, 3, 2)], {"perm": [2, 0, 1]}),
    ("Reshape", [x(0, 6), np.array([0, 2, 3], np.int64)], {}),
    ("Reshape", [x(0, 6), np.array([-1, 6], np.int64)], {}),
    ("Gather", [x(4, 3), np.zeros((0,), np.int64)], {"axis": 0}),
    ("Slice", [x(4, 3), np.array([2]), np.array([2]), np.array([0])], {}),
    ("Split", [x(0, 4), np.array([2, 2], np.int64)], {"axis": 1}),
    ("Expand", [x(1, 3), np.array([0, 3], np.int64)], {}),
    ("Tile", [x(2, 3), np.array([0, 1], np.int64)], {}),
    ("Pad", [x(0, 3), np.array([0, 1, 0, 1], np.int64)], {}),
    ("TopK", [x(0, 5), np.array([2], np.int64)], {"axis": 1}),
    ("TopK", [x(3, 5), np.array([0], np.int64)], {"axis": 1}),
    ("NonZero", [x(0, 3)], {}),
    ("CumSum", [x(0, 3), np.array(1, np.int64)], {}),
    ("Cast", [x(0, 3)], {"to": TensorProto.INT32}),
    ("Flatten", [x(0, 3, 4)], {"axis": 1}),
    ("Resize", [x(0, 3, 4, 4), np.array([], F), np.array([1, 1, 2, 2], F)], {"mode": "nearest"}),
    ("LSTM", [x(5, 0, 3), x(1, 8, 3), x(1, 8, 2)], {"hidden_size": 2}),
    ("GRU", [x(5, 0, 3), x(1, 6, 3), x(1, 6, 2)], {"hidden_size": 2}),
    ("RNN", [x(0, 2, 3), x(1, 2, 3), x(1, 2, 2)], {"hidden_size": 2}),
]
OUTPUTS = {"Split": 2, "TopK": 2, "LSTM": 3, "GRU": 2, "RNN": 2}


def one_node(op_type, inputs, attributes):
    names = [f"in{i}" for i in range(len(inputs))]
    outputs = [f"out{i}" for i in range(OUTPUTS.get(op_type, 1))]
    graph = helper.make_graph(
        [helper.make_node(op_type, names, outputs, name="node", **attributes)],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in zip(names, inputs, strict=True)
        ],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


def inferred_shapes(model):
    """Output shapes by ONNX's shape inference, None where it cannot tell."""
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    known = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output)}
    shapes = []
    for output in model.graph.output:
        value = known.get(output.name)
        dims = value.type.tensor_type.shape.dim if value is not None else []
        if value is None or not value.type.tensor_type.HasField("shape"):
            shapes.append(None)
        elif all(d.HasField("dim_value") for d in dims):
            shapes.append(tuple(d.dim_value for d in dims))
        else:
            shapes.append(None)
    return shapes


@pytest.mark.parametrize(("op_type", "inputs", "attributes"), CASES, ids=lambda v: None)
def test_empty_dimensions_give_a_result_or_a_clear_error(op_type, inputs, attributes):
    model = one_node(op_type, inputs, attributes)
    session = Session.create(model_from_proto(model))
    feeds = {f"in{i}": v for i, v in enumerate(inputs)}
    try:
        results = session.run(None, feeds)
    except SessionError as error:
        assert error.kind in (ErrorKind.INVALID_INPUT, ErrorKind.UNSUPPORTED)
        assert error.node == "node"
        assert "failed during" not in str(error)  # a wrapped internal exception is a bug
        return
    for result, expected in zip(results, inferred_shapes(model), strict=True):
        if expected is not None:
            assert result.shape == expected
