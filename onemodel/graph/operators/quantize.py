"""Linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear, and the
quantized products MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.

Quantizing is `saturate(round(x / scale) + zero_point)`: the quotient is formed in the precision
the spec names (the `precision` attribute, else the scale's type), integers round half to even
and saturate to their range, and the narrow floats (float8, float4, float6) round half to even
through ml_dtypes, float8 saturating to ±max when `saturate` asks for it. Dequantizing is
`(x − zero_point) · scale`.

The products shift both operands by their zero points and multiply in float64: the shifted
values are integers of at most 9 bits, so every product and partial sum is an integer below
2^53 and the BLAS float64 result is exact whatever its summation order. Integer outputs wrap
to 32 bits as the spec allows ("accumulation may overflow if and only if in 32 bits");
quantized outputs scale the exact sum in float64 and round once.

Exact mode: the integer steps are exact by nature, and in exact mode the products go through
the exact matmul and convolution (which give the same exact integers); the float steps are the
fast path's, each one correctly rounded operation through exact mode's namespace (the quotient
x / scale rounded to the scale's precision, then rint; (x − zero_point) · scale; the
QLinear* rescaling product · (a_scale · b_scale) / y_scale in float64, then rint). Dynamic
quantization's range is the exact max and min (compared in float64).

The spec's formula adds a float zero point (float8, float4, float6) too, while onnxruntime
ignores it when quantizing and refuses it when dequantizing; a non-zero float zero point is
therefore refused rather than given either meaning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from onemodel.backends.ieee_float32 import narrow, widen
from onemodel.graph.onnx_proto import TensorProto as T
from onemodel.graph.operators.axes import normalize_axis
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.conv import SlidingWindows, conv_channels, conv_group
from onemodel.graph.operators.matmul import as_matrices, matmul_shape
from onemodel.tensors import numpy_dtype_for_onnx, onnx_code_for_numpy, onnx_name

# Saturation ranges of the integer quantized types.
_INTEGER_RANGES = {
    T.UINT8: (0, 255), T.INT8: (-128, 127), T.UINT16: (0, 65535), T.INT16: (-32768, 32767),
    T.UINT4: (0, 15), T.INT4: (-8, 7), T.UINT2: (0, 3), T.INT2: (-2, 1),
}  # fmt: skip
_FLOAT8S = frozenset({T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ})
_NARROW_FLOATS = _FLOAT8S | {T.FLOAT4E2M1, T.FLOAT6E2M3, T.FLOAT6E3M2}
_EIGHT_BITS = frozenset({T.INT8, T.UINT8})
# The quantized types QuantizeLinear and DequantizeLinear gain at each opset.
_QUANTIZED_SINCE = (
    (10, _EIGHT_BITS),
    (19, _FLOAT8S),
    (21, {T.INT16, T.UINT16, T.INT4, T.UINT4}),
    (23, {T.FLOAT4E2M1}),
    (25, {T.INT2, T.UINT2}),
    (28, {T.FLOAT6E2M3, T.FLOAT6E3M2}),
)
_HALF_AND_SINGLE = frozenset({T.FLOAT, T.FLOAT16, T.BFLOAT16})
_PRECISIONS = _HALF_AND_SINGLE | {T.DOUBLE}


def quantized_types(opset: int) -> frozenset[int]:
    """The quantized element types of QuantizeLinear's output and DequantizeLinear's input."""
    return frozenset(code for since, codes in _QUANTIZED_SINCE if opset >= since for code in codes)


def encode(xp: Any, values: Array, target: int, zero_point: Array | None, saturate: bool) -> Array:
    """`values` (x / scale) in the quantized type `target`.

    Integers: rounded half to even, shifted by the zero point and saturated, in float32 (or
    float64 for float64 values): the sum is exact wherever it does not saturate anyway. NaN
    gives the lowest value (onnxruntime's and the reference's result). Floats: one rounding by
    ml_dtypes from float32 (exact for float16 and bfloat16 values; float64 ones round to float32
    first, as ml_dtypes itself converts), after clipping to ±max for float8 with `saturate` (NaN
    stays NaN). float4 and float6 have no infinity or NaN, so ml_dtypes saturates them itself
    (and gives NaN as −0, as the reference does)."""
    dtype = numpy_dtype_for_onnx(target)
    if target in _INTEGER_RANGES:
        low, high = _INTEGER_RANGES[target]
        wide = xp.float64 if values.dtype == xp.float64 else xp.float32
        rounded = xp.rint(values.astype(wide))
        if zero_point is not None:
            rounded = rounded + zero_point.astype(wide)
        clipped = xp.clip(rounded, low, high)
        return xp.where(xp.isnan(clipped), low, clipped).astype(xp.int32).astype(dtype)
    values = values.astype(xp.float32)
    if target in _FLOAT8S and saturate:
        limit = float(ml_dtypes.finfo(dtype).max)
        values = xp.clip(values, -limit, limit)
    return values.astype(dtype)


class QuantizedOperator(Operator):
    """Shared checks of the quantization family: zero points of their operand's type, size-one
    parameters, and float zero points that must be zero. Exact: see the module docstring."""

    supports_exact = True

    def check_zero_point(self, ctx: InferContext, zero_point: int, operand: int) -> None:
        if ctx.has(zero_point) and ctx.dtype(zero_point) != ctx.dtype(operand):
            raise self.node.invalid(
                f"{self.node.op_type}: zero point {onnx_name(ctx.dtype(zero_point))} differs "
                f"from the type {onnx_name(ctx.dtype(operand))} of input {operand}",
                self.node.inputs[zero_point],
            )

    def check_single(self, ctx: InferContext, *indices: int) -> None:
        """Per-tensor parameters: one element (a scalar, or the (1,) that exporters write)."""
        for index in indices:
            if ctx.has(index) and math.prod(ctx.shape(index)) != 1:
                raise self.node.bad_input(
                    f"{self.node.op_type}: input {index} of shape {ctx.shape(index)} must hold "
                    "one value (per-tensor quantization)",
                    self.node.inputs[index],
                )

    def refuse_float_zero_point(
        self, ctx: RunContext, inputs: Sequence[Array | None], index: int
    ) -> None:
        """A float zero point (float8, float4, float6) must be zero; see the module docstring."""
        zero_point = inputs[index] if index < len(inputs) else None
        if zero_point is None or onnx_code_for_numpy(zero_point.dtype) not in _NARROW_FLOATS:
            return
        if bool(ctx.xp.any(zero_point.astype(ctx.xp.float32) != 0)):
            raise self.node.unsupported(
                f"{self.node.op_type}: a non-zero zero point of type "
                f"{onnx_name(onnx_code_for_numpy(zero_point.dtype))} has no agreed meaning "
                "(the spec adds it, onnxruntime ignores or refuses it)",
                self.node.inputs[index],
            )


def _shift(xp: Any, values: Array, zero_point: Array | None, dtype: Any) -> Array:
    """values − zero_point in the float `dtype` (float32 is exact for quantized types of up to
    16 bits, float64 for int32 too)."""
    shifted = values.astype(dtype)
    if zero_point is not None:
        shifted = shifted - zero_point.astype(dtype)
    return shifted


# -- QuantizeLinear / DequantizeLinear -------------------------------------------------------


class LinearQuantization(QuantizedOperator):
    """What QuantizeLinear and DequantizeLinear share: input 1 is the scale and input 2 the
    optional zero point, per tensor (one value), per axis (1-D along `axis`) or blocked (x's
    shape with `axis` cut into blocks of `block_size`, the last one possibly shorter)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", 1))
        self.block_size = int(node.attr("block_size", 0))
        if self.block_size < 0:
            raise node.invalid(f"{node.op_type}: block_size {self.block_size} must be ≥ 0")

    def check_parameters(self, ctx: InferContext) -> None:
        if self.node.opset < 13:  # per-tensor only before the axis attribute
            self.check_single(ctx, 1, 2)
            return
        x, scale = ctx.shape(0), ctx.shape(1)
        if ctx.has(2) and ctx.shape(2) != scale and math.prod(ctx.shape(2)) * math.prod(scale) != 1:
            raise self.node.bad_input(
                f"{self.node.op_type}: zero point of shape {ctx.shape(2)} and scale of shape "
                f"{scale} differ",
                self.node.inputs[2],
            )
        if math.prod(scale) == 1:
            return
        axis = normalize_axis(self.node, self.axis, len(x), value=self.node.inputs[0])
        if self.block_size:
            blocks = -(-x[axis] // self.block_size)
            expected = (*x[:axis], blocks, *x[axis + 1 :])
            how = f"x's shape with axis {axis} in blocks of {self.block_size}"
        else:
            expected, how = (x[axis],), f"one value per element of axis {axis}"
        if scale != expected:
            raise self.node.bad_input(
                f"{self.node.op_type}: scale of shape {scale} for x of shape {x} must hold one "
                f"value or be {expected} ({how})",
                self.node.inputs[1],
            )

    def along_x(self, xp: Any, value: Array | None, shape: tuple[int, ...]) -> Array | None:
        """A scale or zero point shaped to broadcast against x of `shape`."""
        if value is None or value.size == 1:
            return None if value is None else value.reshape(())
        axis = self.axis % len(shape)
        if self.block_size:
            repeated = xp.repeat(value, self.block_size, axis=axis)
            return repeated[(slice(None),) * axis + (slice(0, shape[axis]),)]
        return value.reshape((1,) * axis + (-1,) + (1,) * (len(shape) - axis - 1))


class QuantizeLinearOp(LinearQuantization):
    """y = saturate(round(x / scale) + zero_point) into the zero point's type (`output_dtype`
    from opset 21, else uint8). The division is rounded to the precision type first: the
    `precision` attribute (opset 23), else the scale's type — float16 in float16 (NumPy forms
    the quotient in float32, so the one rounding to float16 is correct; before opset 23, which
    leaves it open, in float32 unrounded as onnxruntime does), bfloat16 likewise by way of
    float32, an int32 scale in float64, a float8e8m0 scale (a power of two) in float32.
    """

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.saturate = bool(node.attr("saturate", 1))
        self.output_dtype = int(node.attr("output_dtype", 0))
        self.precision = int(node.attr("precision", 0))
        if self.output_dtype and self.output_dtype not in quantized_types(node.opset):
            raise node.invalid(
                f"QuantizeLinear: output_dtype {onnx_name(self.output_dtype)} is not a "
                f"quantized type of {node.label}"
            )
        if self.precision and self.precision not in _PRECISIONS:
            raise node.invalid(
                f"QuantizeLinear: precision {onnx_name(self.precision)} must be a float type"
            )

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        opset = self.node.opset
        x_types = {T.FLOAT, T.INT32} | (_HALF_AND_SINGLE if opset >= 19 else set())
        self.check_types(ctx, frozenset(x_types), 0)
        if opset < 19:
            self.check_types(ctx, frozenset({T.FLOAT}), 1)
        elif opset < 23:
            if ctx.dtype(1) != ctx.dtype(0):
                raise self.node.invalid(
                    f"{self.node.label} needs x and its scale of one type",
                    self.node.inputs[1],
                )
        else:
            scale_types = x_types | ({T.FLOAT8E8M0} if opset >= 24 else set())
            self.check_types(ctx, frozenset(scale_types), 1)
        target = self._target(ctx)
        self.check_parameters(ctx)
        return [ctx.output(target, ctx.shape(0))]

    def _target(self, ctx: InferContext) -> int:
        target = self.output_dtype or T.UINT8
        if ctx.has(2):
            if self.output_dtype and self.output_dtype != ctx.dtype(2):
                raise self.node.invalid(
                    f"QuantizeLinear: output_dtype {onnx_name(self.output_dtype)} differs from "
                    f"the zero point's type {onnx_name(ctx.dtype(2))}",
                    self.node.inputs[2],
                )
            target = ctx.dtype(2)
        if target not in quantized_types(self.node.opset):
            raise self.node.invalid(
                f"{self.node.label} does not quantize to {onnx_name(target)}",
                self.node.inputs[2] if ctx.has(2) else None,
            )
        return target

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp, x, scale = ctx.xp, inputs[0], inputs[1]
        zero_point = inputs[2] if len(inputs) > 2 else None
        (out,) = outputs
        target = onnx_code_for_numpy(out.dtype)
        self.refuse_float_zero_point(ctx, inputs, 2)
        with np.errstate(all="ignore"):  # a zero scale gives ±inf or NaN, then saturates
            quotient = self._divide(xp, x, self.along_x(xp, scale, x.shape))
            shift = None if target in _NARROW_FLOATS else self.along_x(xp, zero_point, x.shape)
            out[...] = encode(xp, quotient, target, shift, self.saturate)

    def _divide(self, xp: Any, x: Array, scale: Array) -> Array:
        code = self.precision or onnx_code_for_numpy(scale.dtype)
        if code == T.FLOAT16 and self.node.opset < 23:
            # Before opset 23 ONNX leaves the quotient's precision open; onnxruntime forms
            # a float16 quotient in float32, unrounded (from 23 it follows `precision`).
            return x.astype(xp.float32) / scale.astype(xp.float32)
        if code == T.FLOAT16:
            return xp.divide(x.astype(xp.float16), scale.astype(xp.float16))
        if code == T.BFLOAT16:
            bfloat16 = numpy_dtype_for_onnx(T.BFLOAT16)
            wide = [v.astype(bfloat16).astype(xp.float32) for v in (x, scale)]
            return xp.divide(wide[0], wide[1]).astype(bfloat16)
        if code in (T.INT32, T.DOUBLE):
            return xp.divide(widen(xp, x), widen(xp, scale))
        return xp.divide(x.astype(xp.float32), scale.astype(xp.float32))


class DequantizeLinearOp(LinearQuantization):
    """y = (x − zero_point) · scale in the scale's type (`output_dtype` from opset 23).

    x − zero_point is exact, then converted to float32 (which rounds only int32 values beyond
    2^24, as onnxruntime and the reference do). Its product with the scale is one float32
    multiplication for float32 outputs; for float16 and bfloat16 it is formed exactly in float64
    and rounded once (bfloat16 by way of float32, as ml_dtypes converts)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.output_dtype = int(node.attr("output_dtype", 0))
        if self.output_dtype and self.output_dtype not in _HALF_AND_SINGLE:
            raise node.invalid(
                f"DequantizeLinear: output_dtype {onnx_name(self.output_dtype)} must be float, "
                "float16 or bfloat16"
            )

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        opset = self.node.opset
        self.check_types(ctx, quantized_types(opset) | {T.INT32}, 0)
        scale_types = {T.FLOAT} | (_HALF_AND_SINGLE if opset >= 19 else set())
        self.check_types(
            ctx, frozenset(scale_types | ({T.FLOAT8E8M0} if opset >= 24 else set())), 1
        )
        self.check_zero_point(ctx, 2, 0)
        target = self.output_dtype or ctx.dtype(1)
        if target not in _HALF_AND_SINGLE:
            raise self.node.invalid(
                f"DequantizeLinear with a {onnx_name(target)} scale needs output_dtype",
                self.node.inputs[1],
            )
        self.check_parameters(ctx)
        return [ctx.output(target, ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp, x, scale = ctx.xp, inputs[0], inputs[1]
        zero_point = inputs[2] if len(inputs) > 2 else None
        (out,) = outputs
        self.refuse_float_zero_point(ctx, inputs, 2)
        if onnx_code_for_numpy(x.dtype) in _NARROW_FLOATS:
            zero_point = None
        wide = xp.float64 if x.dtype == xp.int32 else xp.float32
        shifted = _shift(xp, x, self.along_x(xp, zero_point, x.shape), wide).astype(xp.float32)
        scale = self.along_x(xp, scale, x.shape)
        with np.errstate(all="ignore"):
            if out.dtype == xp.float32:
                xp.multiply(shifted, scale.astype(xp.float32), out=out)
            else:
                out[...] = shifted.astype(xp.float64) * scale.astype(xp.float64)


class DynamicQuantizeLinearOp(QuantizedOperator):
    """x (float32) to uint8 with a scale and zero point chosen from x's range widened to hold 0:
    scale = (max − min) / 255, zero point = round(saturate(−min / scale)), both in float32.

    Beyond the spec: an all-zero x (max = min) gets the scale 1, as onnxruntime (the spec's
    formula divides by zero); NaN elements are left out of the range and quantize to 0
    (onnxruntime's range then depends on where they are)."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, frozenset({T.FLOAT}), 0)
        return [ctx.output(T.UINT8, ctx.shape(0)), ctx.output(T.FLOAT, ()), ctx.output(T.UINT8, ())]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp, x = ctx.xp, inputs[0]
        zero = xp.zeros((), dtype=xp.float32)
        counted = xp.where(xp.isnan(x), zero, x)  # NaN as 0: the range holds 0 anyway
        if ctx.exact:  # compared in float64, so a flushing backend keeps subnormals
            counted = widen(ctx.kernels.xp, counted)
        high = xp.maximum(narrow(xp, xp.max(counted)), zero) if x.size else zero
        low = xp.minimum(narrow(xp, xp.min(counted)), zero) if x.size else zero
        with np.errstate(all="ignore"):
            spread = xp.divide(xp.subtract(high, low), xp.float32(255))
            scale = xp.where(xp.equal(high, low), xp.float32(1), spread)
            point = xp.rint(xp.clip(xp.divide(xp.negative(low), scale), 0, 255))
            point = xp.where(xp.isnan(point), zero, point)
            outputs[0][...] = encode(xp, xp.divide(x, scale), T.UINT8, point, saturate=True)
        outputs[1][...] = scale
        outputs[2][...] = point.astype(xp.uint8)


# -- quantized matrix products ---------------------------------------------------------------


def _operand_parameter(
    parameter: tuple[int, ...], operand: tuple[int, ...], per_row: bool
) -> tuple[int, ...] | None:
    """The shape that broadcasts a zero point or scale against its matmul operand: one value
    (per tensor), a vector (per row of a: (M,) → (M, 1); per column of b: (N,)), or the operand's
    rank with 1 in the reduced axis. None when `parameter` is none of these."""
    if math.prod(parameter) == 1:
        return ()
    if len(operand) < 2:
        return None
    rows, cols = operand[-2:]
    if len(parameter) == 1 and parameter[0] == (rows if per_row else cols):
        return (rows, 1) if per_row else (cols,)
    target = (*operand[:-1], 1) if per_row else (*operand[:-2], 1, cols)
    if len(parameter) == len(operand) and parameter[-2:] == target[-2:]:
        try:
            if np.broadcast_shapes(parameter, target) == target:
                return parameter
        except ValueError:
            return None
    return None


class QuantizedProduct(QuantizedOperator):
    """The exact product of two zero-point-shifted operands (see the module docstring)."""

    def check_operand_parameter(
        self, ctx: InferContext, index: int, operand: int, per_row: bool
    ) -> None:
        if (
            ctx.has(index)
            and _operand_parameter(ctx.shape(index), ctx.shape(operand), per_row) is None
        ):
            side = "per row of" if per_row else "per column of"
            raise self.node.bad_input(
                f"{self.node.op_type}: input {index} of shape {ctx.shape(index)} is neither one "
                f"value nor one {side} input {operand} of shape {ctx.shape(operand)}",
                self.node.inputs[index],
            )

    @staticmethod
    def shaped(value: Array | None, operand: Array, per_row: bool) -> Array | None:
        if value is None:
            return None
        return value.reshape(_operand_parameter(value.shape, operand.shape, per_row))

    def multiply(
        self, ctx: RunContext, a: Array, a_zero: Array | None, b: Array, b_zero: Array | None
    ) -> Array:
        """(a − a_zero) @ (b − b_zero) in float64 as a (…, M, N) stack of matrices (a 1-D a is
        one row, a 1-D b one column); callers reshape to numpy.matmul's result. The operands
        are integers of at most 9 bits, so every partial sum is an exact integer (K < 2^37) in
        whatever order the BLAS adds: exact mode takes the same product, a zero made +0 (the
        exact matmul's zero)."""
        xp = ctx.xp
        a_shifted = _shift(xp, a, self.shaped(a_zero, a, per_row=True), xp.float64)
        b_shifted = _shift(xp, b, self.shaped(b_zero, b, per_row=False), xp.float64)
        a_matrix, b_matrix = as_matrices(a_shifted, b_shifted)
        batch = np.broadcast_shapes(a_matrix.shape[:-2], b_matrix.shape[:-2])
        product = xp.empty((*batch, a_matrix.shape[-2], b_matrix.shape[-1]), dtype=xp.float64)
        ctx.kernels.matmul_arrays(a_matrix, b_matrix, product)
        if ctx.exact:
            product += 0.0  # −0 + +0 = +0
        return product


class MatMulIntegerOp(QuantizedProduct):
    """int32 (A − a_zero_point) @ (B − b_zero_point) of int8/uint8 operands; a's zero point per
    tensor or per row, b's per tensor or per column."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _EIGHT_BITS)
        self.check_zero_point(ctx, 2, 0)
        self.check_zero_point(ctx, 3, 1)
        self.check_operand_parameter(ctx, 2, 0, per_row=True)
        self.check_operand_parameter(ctx, 3, 1, per_row=False)
        return [ctx.output(T.INT32, matmul_shape(self.node, ctx.shape(0), ctx.shape(1)))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        a, b = inputs[0], inputs[1]
        a_zero = inputs[2] if len(inputs) > 2 else None
        b_zero = inputs[3] if len(inputs) > 3 else None
        product = self.multiply(ctx, a, a_zero, b, b_zero)
        (out,) = outputs
        out[...] = product.astype(ctx.xp.int64).astype(ctx.xp.int32).reshape(out.shape)


class QLinearMatMulOp(QuantizedProduct):
    """y = saturate(round((a − a_zp) @ (b − b_zp) · a_scale · b_scale / y_scale) + y_zp).

    a's scale and zero point are per tensor or per row, b's per tensor or per column, y's per
    tensor. Opset 21 adds float8 operands and float16/bfloat16 scales."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        opset = self.node.opset
        quantized = _EIGHT_BITS | (_FLOAT8S if opset >= 21 else set())
        self.check_types(ctx, frozenset(quantized), 0, 2, 3, 5, 7)
        scales = _HALF_AND_SINGLE if opset >= 21 else frozenset({T.FLOAT})
        self.check_types(ctx, scales, 1, 4, 6)
        if len({ctx.dtype(i) for i in (1, 4, 6)}) > 1:
            raise self.node.invalid("QLinearMatMul needs its three scales of one type")
        for zero_point, operand in ((2, 0), (5, 3)):
            self.check_zero_point(ctx, zero_point, operand)
        for index, operand, per_row in ((1, 0, True), (2, 0, True), (4, 3, False), (5, 3, False)):
            self.check_operand_parameter(ctx, index, operand, per_row)
        self.check_single(ctx, 6, 7)
        shape = matmul_shape(self.node, ctx.shape(0), ctx.shape(3), b_input=3)
        return [ctx.output(ctx.dtype(7), shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = inputs[:8]
        (out,) = outputs
        for index in (2, 5, 7):
            self.refuse_float_zero_point(ctx, inputs, index)
        product = self.multiply(ctx, a, a_zero, b, b_zero)
        a_scale = widen(xp, self.shaped(a_scale, a, per_row=True))
        b_scale = widen(xp, self.shaped(b_scale, b, per_row=False))
        target = onnx_code_for_numpy(out.dtype)
        with np.errstate(all="ignore"):
            real = product * (a_scale * b_scale) / widen(xp, y_scale.reshape(()))
            shift = None if target in _NARROW_FLOATS else y_zero.reshape(())
            out[...] = encode(xp, real, target, shift, saturate=True).reshape(out.shape)


# -- quantized convolutions ------------------------------------------------------------------


class QuantizedConvolution(QuantizedOperator):
    """What ConvInteger and QLinearConv share: Conv's window attributes and shape rules, and
    the exact convolution of the zero-point-shifted operands (x's zero point per tensor, w's
    per tensor or per output channel)."""

    weights: int  # the index of w among the inputs
    x_zero: int
    w_zero: int

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.windows = SlidingWindows(node)
        self.group = conv_group(node)

    def output_shape(self, ctx: InferContext) -> tuple[int, ...]:
        """(N, M, *spatial) after checking x, w and the zero points."""
        x, w = ctx.shape(0), ctx.shape(self.weights)
        conv_channels(self.node, x, w, self.group, weights=self.weights, names=("x", "w"))
        self.check_zero_point(ctx, self.x_zero, 0)
        self.check_zero_point(ctx, self.w_zero, self.weights)
        self.check_single(ctx, self.x_zero)
        self.check_per_channel(ctx, self.w_zero, w[0])
        kernel = self.windows.kernel_for(w[2:], len(x) - 2)
        return (x[0], w[0], *self.windows.place(x[2:], kernel).out_spatial)

    def check_per_channel(self, ctx: InferContext, index: int, channels: int) -> None:
        if ctx.has(index) and math.prod(ctx.shape(index)) != 1 and ctx.shape(index) != (channels,):
            raise self.node.bad_input(
                f"{self.node.op_type}: input {index} of shape {ctx.shape(index)} must hold one "
                f"value or one per output channel ({channels},)",
                self.node.inputs[index],
            )

    @staticmethod
    def per_channel(value: Array, rank: int) -> Array:
        """A per-tensor or per-output-channel value shaped against an (M, …) array of `rank`."""
        return value.reshape(()) if value.size == 1 else value.reshape((-1,) + (1,) * (rank - 1))

    def accumulate(
        self, ctx: RunContext, inputs: Sequence[Array | None], out_shape: tuple[int, ...]
    ) -> Array:
        """conv(x − x_zero, w − w_zero) in float64; padding reads as x's zero point."""
        xp = ctx.xp
        x, w = inputs[0], inputs[self.weights]
        x_zero = inputs[self.x_zero] if len(inputs) > self.x_zero else None
        w_zero = inputs[self.w_zero] if len(inputs) > self.w_zero else None
        x_zero = None if x_zero is None else x_zero.reshape(())
        w_zero = None if w_zero is None else self.per_channel(w_zero, w.ndim)
        x_shifted = _shift(xp, x, x_zero, xp.float64)
        w_shifted = _shift(xp, w, w_zero, xp.float64)
        placement = self.windows.place(x.shape[2:], w.shape[2:])
        total = xp.empty(out_shape, dtype=xp.float64)
        kernels = ctx.kernels
        (kernels.exact_conv_arrays if ctx.exact else kernels.conv_arrays)(
            x_shifted, w_shifted, total, placement.strides, placement.pads_begin,
            placement.dilations, self.group,
        )  # fmt: skip
        return total


class ConvIntegerOp(QuantizedConvolution):
    """int32 conv(x − x_zero_point, w − w_zero_point) of int8/uint8 operands."""

    weights, x_zero, w_zero = 1, 2, 3

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _EIGHT_BITS)
        return [ctx.output(T.INT32, self.output_shape(ctx))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        (out,) = outputs
        total = self.accumulate(ctx, inputs, out.shape)
        out[...] = total.astype(ctx.xp.int64).astype(ctx.xp.int32)


class QLinearConvOp(QuantizedConvolution):
    """y = saturate(round((conv(x − x_zp, w − w_zp) + B) · x_scale · w_scale / y_scale) + y_zp)
    with B an int32 bias quantized by x_scale · w_scale; w's scale and zero point per tensor or
    per output channel, the others per tensor."""

    weights, x_zero, w_zero = 3, 2, 5

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _EIGHT_BITS, 0, 2, 3, 5, 7)
        self.check_types(ctx, frozenset({T.FLOAT}), 1, 4, 6)
        self.check_types(ctx, frozenset({T.INT32}), 8)
        shape = self.output_shape(ctx)
        self.check_single(ctx, 1, 6, 7)
        self.check_per_channel(ctx, 4, shape[1])
        if ctx.has(8) and ctx.shape(8) != (shape[1],):
            raise self.node.bad_input(
                f"QLinearConv: B of shape {ctx.shape(8)} must be ({shape[1]},)",
                self.node.inputs[8],
            )
        return [ctx.output(ctx.dtype(7), shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        (out,) = outputs
        x_scale, w_scale, y_scale, y_zero = inputs[1], inputs[4], inputs[6], inputs[7]
        bias = inputs[8] if len(inputs) > 8 else None
        total = self.accumulate(ctx, inputs, out.shape)
        rank = out.ndim - 1
        if bias is not None:
            total += self.per_channel(bias, rank).astype(xp.float64)
        scale = widen(xp, x_scale.reshape(())) * widen(xp, self.per_channel(w_scale, rank))
        with np.errstate(all="ignore"):
            real = total * scale / widen(xp, y_scale.reshape(()))
            out[...] = encode(xp, real, onnx_code_for_numpy(out.dtype), y_zero.reshape(()), True)


DEFS: tuple[OpDef, ...] = (
    OpDef("QuantizeLinear", 10, QuantizeLinearOp),
    OpDef("DequantizeLinear", 10, DequantizeLinearOp),
    OpDef("DynamicQuantizeLinear", 11, DynamicQuantizeLinearOp),
    OpDef("MatMulInteger", 10, MatMulIntegerOp),
    OpDef("ConvInteger", 10, ConvIntegerOp),
    OpDef("QLinearMatMul", 10, QLinearMatMulOp),
    OpDef("QLinearConv", 10, QLinearConvOp),
)
