"""Cast and CastLike: element type conversions.

Between the tensor layer's 13 types the conversion is `onemodel.tensors.conversions.cast`, the
bit-exact reference rules (one rounding from integers, saturation from floats to integers, the
spec's double rounding from float64 to the 16-bit floats). The graph layer's narrow formats
(float8, float8e8m0, int4/uint4, float4, int2/uint2, float6) go through ml_dtypes: from them by
way of float32, which holds each of their values exactly; to them by ml_dtypes' conversion, after
saturation where the `saturate` attribute asks for it (float8) and by the spec's exponent rules
for float8e8m0. Strings and complex numbers are refused.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from onemodel.backends.casts import fast_cast
from onemodel.graph.onnx_proto import TensorProto
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.unary import FLOAT8S
from onemodel.tensors import DType, numpy_dtype_for_onnx, onnx_code_for_numpy, onnx_name
from onemodel.tensors.conversions import cast

_TENSOR_LAYER = frozenset(DType)
_REFUSED = frozenset(
    {TensorProto.UNDEFINED, TensorProto.STRING, TensorProto.COMPLEX64, TensorProto.COMPLEX128}
)
CASTABLE = frozenset(
    code for code in TensorProto.DataType.values() if code not in _REFUSED
)  # fmt: skip
_NARROW_INTEGERS = frozenset(
    {TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.UINT2}
)
_ROUND_MODES = ("up", "down", "nearest")


class Conversion(Operator):
    """Converts input 0 to the output's element type, fixed by `target` (Cast) or by input 1
    (CastLike). `saturate` (opset 19) and `round_mode` (opset 24) only concern float8 targets.

    Fast: `fast_cast`, one conversion pass where it gives the reference answer. Exact: the
    conversions are bit-exact formulas, the same on every device."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.saturate = bool(node.attr("saturate", 1))
        self.round_mode = node.attr("round_mode", "up")
        if self.round_mode not in _ROUND_MODES:
            raise node.invalid(f"{node.op_type} needs round_mode up, down or nearest")

    def target(self, ctx: InferContext) -> int:
        raise NotImplementedError

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, CASTABLE, 0)
        return [ctx.output(self.target(ctx), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: list[Array | None], outputs: list[Array]) -> None:
        xp, x, out = ctx.xp, inputs[0], outputs[0]
        if not ctx.exact and (ctx.kernels.compiled_cast(x, out) or fast_cast(xp, x, out)):
            return
        source, target = onnx_code_for_numpy(x.dtype), onnx_code_for_numpy(out.dtype)
        with np.errstate(all="ignore"):  # overflow to inf and NaN to integers are defined here
            xp.copyto(out, self._convert(xp, x, source, target))

    def _convert(self, xp: Any, x: Array, source: int, target: int) -> Array:
        if source not in _TENSOR_LAYER:
            x, source = x.astype(xp.float32), DType.FLOAT
        if target in _TENSOR_LAYER:
            return cast(x, DType(source), DType(target))
        dtype = numpy_dtype_for_onnx(target)
        if target in _NARROW_INTEGERS:  # ml_dtypes, as the reference: truncate, then wrap
            return x.astype(dtype)
        # float64 rounds to float32 first, as ml_dtypes itself does; integers in the range of
        # the narrow floats are exact in float32, and larger ones saturate or overflow anyway.
        x = x.astype(xp.float32)
        if target == TensorProto.FLOAT8E8M0:
            return _to_e8m0(xp, x, self.saturate, self.round_mode)
        if target in FLOAT8S and self.saturate:
            limit = float(ml_dtypes.finfo(dtype).max)
            x = xp.clip(x, -limit, limit)  # NaN stays NaN; infinities become ±max
        return x.astype(dtype)


def _to_e8m0(xp: Any, x: Array, saturate: bool, round_mode: str) -> Array:
    """float32 to float8e8m0 (a bare exponent) as onnx.numpy_helper.to_float8e8m0 rounds: the
    float32 exponent, raised by one when the mantissa rounds up; the sign is ignored (negative
    values are unspecified). NaN gives NaN; an infinity gives the largest value when saturating
    (the spec's table; the reference gives NaN) and NaN otherwise."""
    bits = x.view(xp.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(xp.uint16)
    if round_mode == "up":
        up = (bits & 0x7FFFFF) != 0
    elif round_mode == "nearest":
        guard, rest = (bits & 0x400000) != 0, (bits & 0x3FFFFF) != 0
        up = guard & (rest | (exponent > 0))
    else:
        up = xp.zeros(bits.shape, dtype=bool)
    special = exponent == 0xFF
    if saturate:
        up &= exponent != 0xFE
    exponent = xp.where(special, 0xFF, exponent + up.astype(xp.uint16))
    infinite = special & ((bits & 0x7FFFFF) == 0)
    if saturate:
        exponent = xp.where(infinite, 0xFE, exponent)
    return exponent.astype(xp.uint8).view(ml_dtypes.float8_e8m0fnu)


class Cast(Conversion):
    """`to` is an element type code; opset 1 spelled it as a type name."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        to = node.attr("to")
        if isinstance(to, str):
            try:
                to = TensorProto.DataType.Value(to.upper())
            except ValueError:
                raise node.invalid(f"Cast to the unknown element type {to!r}") from None
        if to not in CASTABLE:
            raise node.invalid(f"Cast to {onnx_name(to)} is not supported")
        self.to = int(to)

    def target(self, ctx: InferContext) -> int:
        return self.to


class CastLike(Conversion):
    """Casts input 0 to the element type of input 1, whose values are not read."""

    def target(self, ctx: InferContext) -> int:
        self.check_types(ctx, CASTABLE, 1)
        return ctx.dtype(1)


DEFS: tuple[OpDef, ...] = (
    OpDef("Cast", 1, Cast),
    OpDef("CastLike", 15, CastLike),
)
