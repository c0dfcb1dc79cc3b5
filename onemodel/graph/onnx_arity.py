"""A node's most inputs and outputs, from the generated table of onnx's schemas
(`onnx_arity_table`, written by tools/update_onnx_arity.py); opsets newer than the table ask the
installed onnx."""

from __future__ import annotations

from onemodel.graph.onnx_arity_table import COVERED, LIMITS


def arity_limits(domain: str, op_type: str, opset: int) -> tuple[int, int] | None:
    """The most inputs and outputs of `op_type` at `opset`, or None where onnx defines no
    schema for it. An opset newer than `COVERED` asks the installed onnx."""
    covered = COVERED.get(domain)
    if covered is None:  # a domain onnx has no schemas for (com.microsoft, ours)
        return None
    if opset > covered:
        return _asked_of_onnx(domain, op_type, opset)
    limits = None
    for since, inputs, outputs in LIMITS.get((domain, op_type), ()):
        if since > opset:
            break
        limits = (inputs, outputs)
    return limits


def _asked_of_onnx(domain: str, op_type: str, opset: int) -> tuple[int, int] | None:
    import onnx

    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    return schema.max_input, schema.max_output
