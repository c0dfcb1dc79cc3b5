"""The arity table agrees with onnx's schemas on every opset it covers."""

from __future__ import annotations

import onnx
import pytest

from onemodel.graph import onnx_arity


def _schema_limits(domain: str, op_type: str, opset: int) -> tuple[int, int] | None:
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    return schema.max_input, schema.max_output


def test_the_table_holds_onnx_limits_for_every_operator_and_covered_opset():
    names = {(s.domain, s.name) for s in onnx.defs.get_all_schemas_with_history()}
    differing = [
        (domain, op_type, opset)
        for domain, op_type in sorted(names)
        if domain in onnx_arity.COVERED
        for opset in range(1, onnx_arity.COVERED[domain] + 1)
        if onnx_arity.arity_limits(domain, op_type, opset) != _schema_limits(domain, op_type, opset)
    ]
    assert differing == [], "run: python tools/update_onnx_arity.py"


@pytest.mark.parametrize("domain", ["com.microsoft", "onemodel.internal"])
def test_domains_onnx_does_not_define_have_no_limits(domain):
    assert onnx_arity.arity_limits(domain, "Gemm", 1) is None


def test_an_opset_beyond_the_table_asks_onnx():
    newest = onnx_arity.COVERED[""]
    assert onnx_arity.arity_limits("", "Gemm", newest + 5) == _schema_limits("", "Gemm", newest + 5)


def test_a_node_with_more_outputs_than_onnx_allows_is_refused_by_name():
    from onnx import TensorProto, helper

    from onemodel import ErrorKind, Session, SessionError

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    node = helper.make_node("Relu", ["x"], ["y", "z"], name="two_outputs")
    graph = helper.make_graph([node], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 17)])
    with pytest.raises(SessionError) as raised:
        Session.load(model.SerializeToString())
    assert raised.value.kind == ErrorKind.INVALID_MODEL
    assert raised.value.node == "two_outputs"
    assert "at most 1" in str(raised.value)
