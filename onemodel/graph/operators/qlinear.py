"""The com.microsoft quantized operators that onnxruntime.quantization writes beyond ONNX's own
(QuantizeLinear, MatMulInteger, QLinearConv... live in quantize.py).

Everything is per tensor: one scale and one zero point per quantized value, as the quantizer
writes them. Where ONNX's contrib spec only says "dequantize, compute, quantize", the float32
steps follow onnxruntime's CPU kernels so the integers agree with its own:

- QLinearAdd: with ratios rA = a_scale / c_scale and rB = b_scale / c_scale and the fixed part
  c_zp − (rA · a_zp + rB · b_zp), the result rounds (fixed + a · rA) + b · rB, except where b
  is one value along the innermost axis: then (fixed + b · rB) + a · rA.
- QLinearMul: (a − a_zp) · (b − b_zp), an exact integer, times (a_scale · b_scale) / c_scale,
  plus c_zp, rounded.
- QLinearSigmoid, QLinearLeakyRelu, and the re-quantized inputs of QLinearConcat and
  QLinearWhere, map each of the 256 values through a table: dequantized in float32
  (x_scale · (x − x_zp)), the function applied, quantized as QuantizeLinear does.
- QLinearGlobalAveragePool: the exact integer sum Σ(x − x_zp), times x_scale / (y_scale · n),
  rounded, plus y_zp.
- QLinearAveragePool: the float32 AveragePool (row-major window sums) of the dequantized x,
  then round(mean / y_scale + y_zp).
- QLinearSoftmax, QGemm: see their classes. MatMulIntegerToFloat and QAttention take the exact
  integer product (or the dequantized operands) into float32 as onnxruntime's fusions do.

Rounding is half to even, and results saturate to the output type.

DynamicQuantizeLSTM is an LSTM whose W (D, I, 4H) and R (D, H, 4H) are int8/uint8 with scales
and zero points per direction or per direction and gate column (quantize_dynamic writes it for
every LSTM). Its weights are dequantized once, (q − zero) · scale in float32, transposed to
LSTM's (D, 4H, ·) layout, and the float LSTM runs; onnxruntime instead quantizes X and each
step's h to uint8 for an integer product, so the two differ by that activation rounding
(well inside the 1e-2 the int8 comparisons allow).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from onemodel.graph.operators.axes import normalize_axis
from onemodel.graph.operators.base import (
    MICROSOFT,
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.broadcast import multidirectional
from onemodel.graph.operators.contrib import ContribAttention
from onemodel.graph.operators.matmul import gemm_shape, matmul_shape
from onemodel.graph.operators.pooling import AveragePoolOp
from onemodel.graph.operators.quantize import (
    DequantizeLinearOp,
    QuantizedOperator,
    QuantizedProduct,
    QuantizeLinearOp,
    encode,
)
from onemodel.graph.operators.recurrent import LSTMOp
from onemodel.tensors import DType, onnx_code_for_numpy

_EIGHT_BITS = frozenset({DType.INT8, DType.UINT8})
_FLOAT = frozenset({DType.FLOAT})
_W, _R = 1, 2
_W_SCALE, _W_ZERO, _R_SCALE, _R_ZERO = 8, 9, 10, 11


class PerTensorQuantized(QuantizedOperator):
    """Checks and parameters shared by the family: `quantized` inputs of one 8-bit type,
    `scales` float32 and `zero_points` of the quantized type, every parameter one value."""

    quantized: ClassVar[tuple[int, ...]]
    scales: ClassVar[tuple[int, ...]]
    zero_points: ClassVar[tuple[int, ...]]

    def check_parameters(self, ctx: InferContext) -> int:
        """The one quantized element type, after checking every parameter."""
        self.check_types(ctx, _EIGHT_BITS, *self.quantized, *self.zero_points)
        self.check_types(ctx, _FLOAT, *self.scales)
        types = {ctx.dtype(i) for i in (*self.quantized, *self.zero_points) if ctx.has(i)}
        if len(types) > 1:
            raise self.node.invalid(
                f"{self.node.op_type} needs its quantized inputs and zero points of one type"
            )
        self.check_single(ctx, *self.scales, *self.zero_points)
        return ctx.dtype(self.quantized[0])

    @staticmethod
    def scale(inputs: Sequence[Array | None], index: int) -> np.float32:
        return np.float32(np.asarray(inputs[index]).reshape(()))

    @staticmethod
    def zero_point(inputs: Sequence[Array | None], index: int) -> int:
        given = inputs[index] if index < len(inputs) else None
        return 0 if given is None else int(np.asarray(given).reshape(()))


def _table_indices(x: Array) -> Array:
    """The bytes of an 8-bit array as table positions 0..255 (int8 through its two's complement)."""
    return x.view(x.dtype.str.replace("i", "u"))


class LookupTable(PerTensorQuantized):
    """y = quantize(f(dequantize(x))) through a 256-entry table (see the module docstring);
    inputs X, X_scale, X_zero_point, Y_scale, Y_zero_point."""

    quantized, scales, zero_points = (0,), (1, 3), (2, 4)

    def function(self, xp: Any, values: Array) -> Array:
        raise NotImplementedError

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        return [ctx.output(self.check_parameters(ctx), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp, x = ctx.xp, inputs[0]
        table = self.table(xp, x.dtype, inputs)
        outputs[0][...] = table[_table_indices(x)]

    def table(self, xp: Any, dtype: Any, inputs: Sequence[Array | None]) -> Array:
        codes = xp.arange(256, dtype=xp.uint8).view(dtype).astype(xp.int32)
        shifted = (codes - self.zero_point(inputs, 2)).astype(xp.float32)
        real = xp.float32(self.scale(inputs, 1)) * shifted
        with np.errstate(all="ignore"):
            values = self.function(xp, real).astype(xp.float32)
            quotient = values / xp.float32(self.scale(inputs, 3))
        zero = xp.asarray(self.zero_point(inputs, 4), dtype=xp.float32)
        return encode(xp, quotient, onnx_code_for_numpy(np.dtype(dtype)), zero, saturate=True)


class QLinearSigmoidOp(LookupTable):
    def function(self, xp: Any, values: Array) -> Array:
        return xp.float32(1) / (xp.float32(1) + xp.exp(-values))


class QLinearLeakyReluOp(LookupTable):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = np.float32(node.attr("alpha", 0.01))

    def function(self, xp: Any, values: Array) -> Array:
        return xp.where(values >= 0, values, self.alpha * values)


class QLinearBinary(PerTensorQuantized):
    """QLinearAdd and QLinearMul: inputs A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp;
    A and B broadcast as numpy does."""

    quantized, scales, zero_points = (0, 3), (1, 4, 6), (2, 5, 7)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        dtype = self.check_parameters(ctx)
        return [ctx.output(dtype, multidirectional(ctx, (0, 3)))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        (out,) = outputs
        with np.errstate(all="ignore"):
            real = self.combine(ctx.xp, inputs, out.shape)
        out[...] = encode(ctx.xp, real, onnx_code_for_numpy(out.dtype), None, saturate=True)

    def combine(self, xp: Any, inputs: Sequence[Array | None], shape: tuple[int, ...]) -> Array:
        """The float32 value that rounds to the result, zero point included."""
        raise NotImplementedError


def _b_is_one_along_the_inner_axis(b_shape: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether b holds one value along the innermost axis of the result with more than one."""
    padded = (1,) * (len(shape) - len(b_shape)) + tuple(b_shape)
    inner = [axis for axis, extent in enumerate(shape) if extent > 1]
    return bool(inner) and padded[inner[-1]] == 1


class QLinearAddOp(QLinearBinary):
    def combine(self, xp: Any, inputs: Sequence[Array | None], shape: tuple[int, ...]) -> Array:
        f32 = xp.float32
        c_scale = self.scale(inputs, 6)
        ratio_a, ratio_b = self.scale(inputs, 1) / c_scale, self.scale(inputs, 4) / c_scale
        fixed = f32(self.zero_point(inputs, 7)) - (
            ratio_a * f32(self.zero_point(inputs, 2)) + ratio_b * f32(self.zero_point(inputs, 5))
        )
        a = inputs[0].astype(f32) * ratio_a
        b = inputs[3].astype(f32) * ratio_b
        if _b_is_one_along_the_inner_axis(inputs[3].shape, shape) and inputs[0].size > 1:
            return xp.broadcast_to((fixed + b) + a, shape)
        return xp.broadcast_to((fixed + a) + b, shape)


class QLinearMulOp(QLinearBinary):
    def combine(self, xp: Any, inputs: Sequence[Array | None], shape: tuple[int, ...]) -> Array:
        ratio = self.scale(inputs, 1) * self.scale(inputs, 4) / self.scale(inputs, 6)
        a = inputs[0].astype(xp.int32) - self.zero_point(inputs, 2)
        b = inputs[3].astype(xp.int32) - self.zero_point(inputs, 5)
        product = (a * b).astype(xp.float32)
        return xp.broadcast_to(product * ratio + xp.float32(self.zero_point(inputs, 7)), shape)


class QLinearGlobalAveragePoolOp(PerTensorQuantized):
    """The mean over the spatial axes (NCHW, or NHWC with channels_last = 1), kept as 1s;
    inputs X, x_scale, x_zero_point, y_scale, y_zero_point."""

    quantized, scales, zero_points = (0,), (1, 3), (2, 4)

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.channels_last = bool(node.attr("channels_last", 0))

    def _spatial(self, rank: int) -> tuple[int, ...]:
        return tuple(range(1, rank - 1)) if self.channels_last else tuple(range(2, rank))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        dtype = self.check_parameters(ctx)
        shape = ctx.shape(0)
        if len(shape) < 3:
            raise self.node.bad_input(
                f"QLinearGlobalAveragePool needs X of rank ≥ 3, not shape {shape}",
                self.node.inputs[0],
            )
        spatial = self._spatial(len(shape))
        return [ctx.output(dtype, [1 if a in spatial else d for a, d in enumerate(shape)])]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp, x = ctx.xp, inputs[0]
        (out,) = outputs
        spatial = self._spatial(x.ndim)
        count = int(np.prod([x.shape[a] for a in spatial]))
        total = xp.sum(x.astype(xp.int64), axis=spatial, keepdims=True)
        total = (total - self.zero_point(inputs, 2) * count).astype(xp.float32)
        scale = self.scale(inputs, 1) / (self.scale(inputs, 3) * np.float32(count))
        with np.errstate(all="ignore"):
            real = total * scale
        zero = xp.asarray(self.zero_point(inputs, 4), dtype=xp.float32)
        out[...] = encode(xp, real, onnx_code_for_numpy(out.dtype), zero, saturate=True)


class QLinearConcatOp(PerTensorQuantized):
    """Inputs Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input, joined along
    `axis`; an input with other parameters than Y's is re-quantized through a table."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis"))
        if len(node.inputs) < 5 or (len(node.inputs) - 2) % 3:
            raise node.invalid("QLinearConcat needs Y_scale, Y_zero_point and (X, scale, zero "
                               "point) triples")  # fmt: skip
        count = (len(node.inputs) - 2) // 3
        self.quantized = tuple(2 + 3 * k for k in range(count))
        self.scales = (0, *(3 + 3 * k for k in range(count)))
        self.zero_points = (1, *(4 + 3 * k for k in range(count)))
        self.requantize = _Requantize(node)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        dtype = self.check_parameters(ctx)
        first = ctx.shape(self.quantized[0])
        axis = normalize_axis(self.node, self.axis, len(first), value=self.node.inputs[2])
        extent = 0
        for index in self.quantized:
            shape = ctx.shape(index)
            if len(shape) != len(first) or any(
                d != e for a, (d, e) in enumerate(zip(shape, first, strict=True)) if a != axis
            ):
                raise self.node.bad_input(
                    f"QLinearConcat: input of shape {shape} does not join {first} along axis "
                    f"{axis}",
                    self.node.inputs[index],
                )
            extent += shape[axis]
        return [ctx.output(dtype, (*first[:axis], extent, *first[axis + 1 :]))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        parts = []
        target = (self.scale(inputs, 0), self.zero_point(inputs, 1))
        for index in self.quantized:
            x = inputs[index]
            if (self.scale(inputs, index + 1), self.zero_point(inputs, index + 2)) == target:
                parts.append(x)
                continue
            given = [x, inputs[index + 1], inputs[index + 2], inputs[0], inputs[1]]
            parts.append(self.requantize.table(xp, x.dtype, given)[_table_indices(x)])
        outputs[0][...] = xp.concatenate(parts, axis=self.axis % outputs[0].ndim)


class QLinearWhereOp(PerTensorQuantized):
    """where(condition, x, y) with x and y re-quantized to z's parameters through tables (a
    copy where they already match); inputs condition, x, x_scale, x_zp, y, y_scale, y_zp,
    z_scale, z_zp, broadcast as numpy does."""

    quantized, scales, zero_points = (1, 4), (2, 5, 7), (3, 6, 8)

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if len(node.inputs) != 9:
            raise node.invalid("QLinearWhere needs its 9 inputs")
        self.requantize = _Requantize(node)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        dtype = self.check_parameters(ctx)
        self.check_types(ctx, frozenset({DType.BOOL}), 0)
        return [ctx.output(dtype, multidirectional(ctx, (0, 1, 4)))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        target = (self.scale(inputs, 7), self.zero_point(inputs, 8))
        chosen = []
        for index in (1, 4):
            value = inputs[index]
            if (self.scale(inputs, index + 1), self.zero_point(inputs, index + 2)) != target:
                given = [value, inputs[index + 1], inputs[index + 2], inputs[7], inputs[8]]
                value = self.requantize.table(xp, value.dtype, given)[_table_indices(value)]
            chosen.append(value)
        outputs[0][...] = xp.where(inputs[0], chosen[0], chosen[1])


class _Requantize(LookupTable):
    """The identity through a table: x from its parameters to another's."""

    def function(self, xp: Any, values: Array) -> Array:
        return values


class QLinearAveragePoolOp(PerTensorQuantized):
    """AveragePool of the dequantized x (float32 sums in window order, divided by the count),
    quantized as round(mean / y_scale + y_zp); inputs X, x_scale, x_zp, y_scale, y_zp."""

    quantized, scales, zero_points = (0,), (1, 3), (2, 4)

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if node.attr("channels_last", 0):
            raise node.unsupported("QLinearAveragePool with channels_last = 1 is not supported")
        self.pool = AveragePoolOp(
            NodeInfo(node.name, "AveragePool", "", 19, node.inputs[:1], node.outputs[:1],
                     {k: v for k, v in node.attributes.items() if k != "channels_last"})
        )  # fmt: skip

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        dtype = self.check_parameters(ctx)
        float_x = TensorSpec(DType.FLOAT, ctx.shape(0))
        (spec,) = self.pool.infer(InferContext(self.node, [float_x], [None]))
        return [ctx.output(dtype, spec.shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp, x = ctx.xp, inputs[0]
        (out,) = outputs
        shifted = (x.astype(xp.int32) - self.zero_point(inputs, 2)).astype(xp.float32)
        real = shifted * xp.float32(self.scale(inputs, 1))
        mean = ctx.scratch(out.shape, xp.float32)
        self.pool.run(ctx, [real], [mean])
        with np.errstate(all="ignore"):
            shifted_mean = mean / xp.float32(self.scale(inputs, 3)) + xp.float32(
                self.zero_point(inputs, 4)
            )
        out[...] = encode(xp, shifted_mean, onnx_code_for_numpy(out.dtype), None, True)


class QLinearSoftmaxOp(PerTensorQuantized):
    """Softmax of quantized x as onnxruntime computes it: a table of exp over the 256 codes
    (float64 exp, stored float32), shifted so the row's maximum takes the top entry, summed in
    float32 in order, and y = round(e · floor(1 / y_scale) / Σe) + y_zp, bounded above. The `opset`
    attribute (the Softmax it replaces) chooses axis semantics: from 13 the one axis, before
    13 every axis from `axis` on; inputs X, X_scale, X_zp, Y_scale, Y_zp."""

    quantized, scales, zero_points = (0,), (1, 3), (2, 4)

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.opset = int(node.attr("opset", 13))
        self.axis = int(node.attr("axis", 1 if self.opset < 13 else -1))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        dtype = self.check_parameters(ctx)
        shape = ctx.shape(0)
        normalize_axis(self.node, self.axis, max(len(shape), 1), value=self.node.inputs[0])
        return [ctx.output(dtype, shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp, x = ctx.xp, inputs[0]
        (out,) = outputs
        if x.size == 0:
            return
        axis = self.axis % x.ndim
        if self.opset < 13:
            rows = x.reshape(int(np.prod(x.shape[:axis])), -1)
        else:
            rows = xp.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])
        length = rows.shape[1]
        table = xp.asarray(_exp_table(float(self.scale(inputs, 1)), length))
        codes = rows.astype(xp.int32)
        positions = codes - xp.max(codes, axis=1, keepdims=True) + 255  # max → entry 255
        values = table[positions]
        total = xp.zeros(rows.shape[0], dtype=xp.float32)
        for column in range(length):  # float32 in order, as onnxruntime sums
            total = total + values[:, column]
        y_scale = np.floor(np.float32(1) / self.scale(inputs, 3))
        with np.errstate(all="ignore"):
            quotient = values * y_scale / total[:, None]
        result = xp.rint(quotient).astype(xp.int64) + self.zero_point(inputs, 4)
        result = xp.minimum(result, np.iinfo(out.dtype).max).astype(out.dtype)  # y ≥ y_zp
        if self.opset < 13:
            out[...] = result.reshape(out.shape)
        else:
            moved = (*x.shape[:axis], *x.shape[axis + 1 :], x.shape[axis])
            out[...] = xp.moveaxis(result.reshape(moved), -1, axis)


def _exp_table(x_scale: float, length: int) -> np.ndarray:
    """exp((i − 255 + shift) · x_scale) for i = 0..255 as float32, the shift keeping a row's
    float32 sum of `length` entries finite (onnxruntime reserves 5 bits of exponent)."""
    limit = float(np.float32(np.finfo(np.float32).max) / np.float32(length))
    shift = max(0.0, math.log(limit) - 5.0) / x_scale
    codes = np.arange(256, dtype=np.float64)
    with np.errstate(over="ignore"):
        return np.exp((codes - 255 + shift) * x_scale).astype(np.float32)


class QGemmOp(QuantizedProduct):
    """alpha · op(A − a_zp) · op(B − b_zp) + C with C an int32 bias, as onnxruntime's QGemm:
    the exact integer sum (bias included) times the float32 scale alpha · a_scale · b_scale
    (per column for a per-column b), divided by y_scale when given; with y_zero_point the
    result is quantized (rounded, plus y_zp, saturated), else it is float32. Inputs A, a_scale,
    a_zp, B, b_scale, b_zp, C, y_scale, y_zp."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.trans_a = bool(node.attr("transA", 0))
        self.trans_b = bool(node.attr("transB", 0))
        self.alpha = np.float32(node.attr("alpha", 1.0))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _EIGHT_BITS, 0, 2, 3, 5, 8)
        self.check_types(ctx, _FLOAT, 1, 4, 7)
        self.check_types(ctx, frozenset({DType.INT32}), 6)
        self.check_zero_point(ctx, 2, 0)
        self.check_zero_point(ctx, 5, 3)
        rows, cols = gemm_shape(
            self.node, ctx.shape(0), ctx.shape(3), self.trans_a, self.trans_b, b_input=3
        )
        self.check_single(ctx, 1, 2, 7, 8)
        for index in (4, 5):
            if math.prod(ctx.shape(index)) != 1 and ctx.shape(index) != (cols,):
                raise self.node.bad_input(
                    f"QGemm: input {index} of shape {ctx.shape(index)} must hold one value or "
                    f"one per column ({cols},)",
                    self.node.inputs[index],
                )
        if ctx.has(6):
            c = ctx.shape(6)
            if len(c) > 2 or any(
                d not in (1, t) for d, t in zip(c[::-1], (cols, rows), strict=False)
            ):
                raise self.node.bad_input(
                    f"QGemm: C of shape {c} does not broadcast to ({rows}, {cols})",
                    self.node.inputs[6],
                )
        dtype = ctx.dtype(8) if len(ctx) > 8 and ctx.has(8) else DType.FLOAT
        return [ctx.output(dtype, (rows, cols))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        given = list(inputs) + [None] * (9 - len(inputs))
        a, a_scale, a_zero, b, b_scale, b_zero, bias, y_scale, y_zero = given[:9]
        a = a.T if self.trans_a else a
        b = b.T if self.trans_b else b
        total = self.multiply(ctx, a, a_zero, b, b_zero)
        if bias is not None:
            total = total + bias.astype(xp.float64)
        total = total.astype(xp.int64).astype(xp.int32).astype(xp.float32)
        scale = self.alpha * xp.float32(a_scale.reshape(())) * b_scale.astype(xp.float32)
        if y_scale is not None:
            scale = scale / xp.float32(y_scale.reshape(()))
        (out,) = outputs
        with np.errstate(all="ignore"):
            real = total * scale.reshape(-1)
        if y_zero is None:
            out[...] = real
            return
        out[...] = encode(xp, real, onnx_code_for_numpy(out.dtype), y_zero.reshape(()), True)


class MatMulIntegerToFloatOp(QuantizedProduct):
    """(A − a_zp) @ (B − b_zp) · a_scale · b_scale (+ bias), float32, as onnxruntime fuses
    MatMulInteger with its rescaling; inputs A, B, a_scale, b_scale, a_zp, b_zp, bias; b's
    parameters per tensor or per column."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _EIGHT_BITS, 0, 1, 4, 5)
        self.check_types(ctx, _FLOAT, 2, 3, 6)
        self.check_zero_point(ctx, 4, 0)
        self.check_zero_point(ctx, 5, 1)
        shape = matmul_shape(self.node, ctx.shape(0), ctx.shape(1))
        self.check_single(ctx, 2, 4)
        for index in (3, 5):
            self.check_operand_parameter(ctx, index, 1, per_row=False)
        columns = ctx.shape(1)[-1]
        if len(ctx) > 6 and ctx.has(6) and ctx.shape(6) != (columns,):
            raise self.node.bad_input(
                f"MatMulIntegerToFloat: bias of shape {ctx.shape(6)} is not ({columns},)",
                self.node.inputs[6],
            )
        return [ctx.output(DType.FLOAT, shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        given = list(inputs) + [None] * (7 - len(inputs))
        a, b, a_scale, b_scale, a_zero, b_zero, bias = given[:7]
        product = self.multiply(ctx, a, a_zero, b, b_zero).astype(xp.float32)
        scale = xp.float32(a_scale.reshape(())) * self.shaped(b_scale, b, per_row=False)
        result = product * scale.astype(xp.float32)
        if bias is not None:
            result = result + bias
        outputs[0][...] = result.reshape(outputs[0].shape)


class QAttentionOp(ContribAttention):
    """com.microsoft.Attention with its input (uint8, from DynamicQuantizeLinear) and packed
    weights (int8/uint8, per tensor or per column) quantized, as quantize_dynamic rewrites
    Attention: both are dequantized in float32 and Attention runs. Inputs input, weight, bias,
    input_scale, weight_scale, mask_index, input_zero_point, weight_zero_point, past
    (refused)."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        self.check_types(ctx, _EIGHT_BITS, 0, 1, 6, 7)
        self.check_types(ctx, _FLOAT, 2, 3, 4)
        for zero, operand in ((6, 0), (7, 1)):
            if len(ctx) > zero and ctx.has(zero) and ctx.dtype(zero) != ctx.dtype(operand):
                raise node.invalid(
                    f"QAttention: zero point '{node.inputs[zero]}' is not of the type of "
                    f"'{node.inputs[operand]}'",
                    node.inputs[zero],
                )
        columns = ctx.shape(1)[-1:]
        for index in (3, 4, 6, 7):
            if len(ctx) <= index or not ctx.has(index) or math.prod(ctx.shape(index)) == 1:
                continue
            if index not in (4, 7) or ctx.shape(index) != columns:
                raise node.bad_input(
                    f"QAttention: input '{node.inputs[index]}' of shape {ctx.shape(index)} "
                    f"must hold one value{' or one per column' if index in (4, 7) else ''}",
                    node.inputs[index],
                )
        if len(ctx) > 8 and ctx.has(8):
            raise node.unsupported("QAttention with a KV cache (past) is not supported")
        specs = [TensorSpec(DType.FLOAT, ctx.shape(0)), TensorSpec(DType.FLOAT, ctx.shape(1)),
                 ctx.specs[2], ctx.specs[5] if len(ctx) > 5 else None]  # fmt: skip
        return super().infer(InferContext(node, specs, [None] * len(specs)))

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        given = list(inputs) + [None] * (9 - len(inputs))
        real = []
        for value, scale, zero in ((given[0], given[3], given[6]), (given[1], given[4], given[7])):
            shifted = value.astype(xp.int32)  # parameters per tensor, or per last-axis column
            if zero is not None:
                shifted = shifted - zero.reshape(-1).astype(xp.int32)
            real.append(shifted.astype(xp.float32) * scale.reshape(-1).astype(xp.float32))
        super().run(ctx, [real[0], real[1], given[2], given[5]], outputs)


class DynamicQuantizeLSTMOp(LSTMOp):
    """LSTM with quantized W and R (see the module docstring); inputs 8–11 are W_scale,
    W_zero_point, R_scale and R_zero_point."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        if len(ctx) < 12 or not all(ctx.has(i) for i in (_W_SCALE, _W_ZERO, _R_SCALE, _R_ZERO)):
            raise node.invalid("DynamicQuantizeLSTM needs W/R scales and zero points (inputs 8–11)")
        self.check_types(ctx, _EIGHT_BITS, _W, _R)
        self.check_types(ctx, frozenset({DType.FLOAT}), 0, _W_SCALE, _R_SCALE)
        float_specs = list(ctx.specs[:8])
        for weights, scale, zero in ((_W, _W_SCALE, _W_ZERO), (_R, _R_SCALE, _R_ZERO)):
            shape = ctx.shape(weights)
            if len(shape) != 3:
                raise node.bad_input(
                    f"DynamicQuantizeLSTM input '{node.inputs[weights]}' of shape {shape} is not "
                    "(directions, rows, 4 · hidden)",
                    node.inputs[weights],
                )
            if ctx.dtype(zero) != ctx.dtype(weights):
                raise node.invalid(
                    f"DynamicQuantizeLSTM: zero point '{node.inputs[zero]}' is not of the type "
                    f"of '{node.inputs[weights]}'",
                    node.inputs[zero],
                )
            allowed = ((shape[0],), (shape[0], shape[2]))
            for index in (scale, zero):
                if ctx.shape(index) not in allowed:
                    raise node.bad_input(
                        f"DynamicQuantizeLSTM input '{node.inputs[index]}' of shape "
                        f"{ctx.shape(index)} is neither {allowed[0]} nor {allowed[1]}",
                        node.inputs[index],
                    )
            float_specs[weights] = TensorSpec(DType.FLOAT, (shape[0], shape[2], shape[1]))
        return super().infer(InferContext(node, float_specs, [None] * len(float_specs)))

    def prepare(self, ctx: RunContext, constants: Sequence[Array | None]) -> Any:
        """The LSTM's prepared weights from the dequantized W and R, when they and their
        scales and zero points are constants."""
        quantized = (_W, _R, _W_SCALE, _W_ZERO, _R_SCALE, _R_ZERO)
        if any(i >= len(constants) or constants[i] is None for i in quantized):
            return None
        return super().prepare(ctx, self._dequantized(ctx, constants))

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        given = self._dequantized(ctx, inputs)
        super().run_prepared(ctx, super().prepare(ctx, given), given, outputs)

    def run_prepared(
        self, ctx: RunContext, prepared: Any, inputs: Sequence[Array | None], outputs: Any
    ) -> None:
        super().run_prepared(ctx, prepared, self._dequantized(ctx, inputs), outputs)

    @staticmethod
    def _dequantized(ctx: RunContext, inputs: Sequence[Array | None]) -> list[Array | None]:
        """The LSTM's first 8 inputs, W and R as float32 (D, 4H, rows)."""
        xp = ctx.xp
        given = list(inputs[:8])
        for weights, scale, zero in ((_W, _W_SCALE, _W_ZERO), (_R, _R_SCALE, _R_ZERO)):
            q, s, z = inputs[weights], inputs[scale], inputs[zero]
            per_column = (s.shape[0], 1, -1)  # (D,) or (D, 4H) against (D, rows, 4H)
            shifted = q.astype(xp.float32) - z.reshape(per_column).astype(xp.float32)
            real = shifted * s.reshape(per_column).astype(xp.float32)
            given[weights] = xp.ascontiguousarray(real.transpose(0, 2, 1))
        return given


# com.microsoft's QuantizeLinear and DequantizeLinear carry ONNX's as they are from opset 21
# (8-, 16- and 4-bit integers, float16 or float32 scales, `axis`): quantize_static writes them
# with UseQDQContribOps, or for int4 weights in a model of an opset before 21.
CONTRIB_QDQ_OPSET = 21


class ContribQuantizeLinearOp(QuantizeLinearOp):
    """com.microsoft.QuantizeLinear: ONNX's QuantizeLinear of opset 21."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(dataclasses.replace(node, opset=CONTRIB_QDQ_OPSET))


class ContribDequantizeLinearOp(DequantizeLinearOp):
    """com.microsoft.DequantizeLinear: ONNX's DequantizeLinear of opset 21."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(dataclasses.replace(node, opset=CONTRIB_QDQ_OPSET))


DEFS: tuple[OpDef, ...] = (
    OpDef("QuantizeLinear", 1, ContribQuantizeLinearOp, domain=MICROSOFT),
    OpDef("DequantizeLinear", 1, ContribDequantizeLinearOp, domain=MICROSOFT),
    OpDef("DynamicQuantizeLSTM", 1, DynamicQuantizeLSTMOp, domain=MICROSOFT),
    OpDef("QLinearAdd", 1, QLinearAddOp, domain=MICROSOFT),
    OpDef("QLinearMul", 1, QLinearMulOp, domain=MICROSOFT),
    OpDef("QLinearSigmoid", 1, QLinearSigmoidOp, domain=MICROSOFT),
    OpDef("QLinearLeakyRelu", 1, QLinearLeakyReluOp, domain=MICROSOFT),
    OpDef("QLinearGlobalAveragePool", 1, QLinearGlobalAveragePoolOp, domain=MICROSOFT),
    OpDef("QLinearConcat", 1, QLinearConcatOp, domain=MICROSOFT),
    OpDef("QLinearAveragePool", 1, QLinearAveragePoolOp, domain=MICROSOFT),
    OpDef("QLinearSoftmax", 1, QLinearSoftmaxOp, domain=MICROSOFT),
    OpDef("QGemm", 1, QGemmOp, domain=MICROSOFT),
    OpDef("MatMulIntegerToFloat", 1, MatMulIntegerToFloatOp, domain=MICROSOFT),
    OpDef("QAttention", 1, QAttentionOp, domain=MICROSOFT),
    OpDef("QLinearWhere", 1, QLinearWhereOp, domain=MICROSOFT),
)
