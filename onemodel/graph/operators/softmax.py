"""Softmax, LogSoftmax and Hardmax along an axis.

Before opset 13 the input is seen as a 2-D matrix: the axes before `axis` (default 1) are the
rows and all the axes from `axis` on form one row that is normalized as a whole. From opset 13
only the single axis `axis` (default −1) is. float16 is computed in float16 step by step, as
ONNX defines it; bfloat16 in float32. Exact mode (Softmax, LogSoftmax) computes every type in
float64 with the backend's exact max, exp, ordered sum and log, and rounds once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.blocking import row_blocks
from onemodel.backends.broadcasting import ufunc_into
from onemodel.backends.fp_errors import quiet
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.reductions import extremum_position, float_sum
from onemodel.graph.operators.unary import FLOATS, IEEE_FLOATS


class AxisNormalization(Operator):
    """The axis handling the three share; subclasses say what happens along the axis."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.coerce_2d = node.opset < 13
        self.axis = int(node.attr("axis", 1 if self.coerce_2d else -1))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        allowed = IEEE_FLOATS if self.node.opset < 13 else FLOATS
        self.check_types(ctx, allowed, 0)
        shape = ctx.shape(0)
        rank = max(len(shape), 1)
        if not -rank <= self.axis < rank + (1 if self.coerce_2d else 0):
            raise self.node.bad_input(
                f"{self.node.op_type}: axis {self.axis} is out of range for shape {shape}",
                self.node.inputs[0],
            )
        return [ctx.output(ctx.dtype(0), shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x = inputs[0]
        (out,) = outputs
        if x.size == 0:
            return
        if x.ndim == 0:
            x, out = x.reshape(1), out.reshape(1)
        axis = self.axis % x.ndim if self.axis < x.ndim else x.ndim
        if self.coerce_2d:
            rows = int(np.prod(x.shape[:axis]))
            x, out, axis = x.reshape(rows, -1), out.reshape(rows, -1), 1
        if ctx.exact:
            self._along_exact(ctx.kernels, x, axis, out)
            return
        xp = ctx.xp
        if x.dtype == out.dtype == np.float32:
            if (
                self.compiled_log is not None
                and axis == x.ndim - 1
                and ctx.kernels.compiled_softmax(x, out, self.compiled_log)
            ):
                return
            if self._into(xp, x, axis, out, ctx.scratch):
                return
        # float16 steps in float16, as ONNX's own definition and reference do (a tested
        # conformance case tells the two apart by 2 ulps); bfloat16, which NumPy cannot
        # compute in, widens to float32.
        keep = x.dtype in (np.float64, np.float16)
        values = x.astype(x.dtype if keep else xp.float32, copy=True)
        with np.errstate(all="ignore"):
            out[...] = self._along(xp, values, axis)

    def _along(self, xp: Any, values: Array, axis: int) -> Array:
        """The result along `axis` of a float16, float32 or float64 array (which may be reused)."""
        raise NotImplementedError

    def _into(self, xp: Any, x: Array, axis: int, out: Array, scratch: Any) -> bool:
        """Fast mode on float32: the result written into `out` (which may share x's memory)
        with no copy of x, a block of whole rows at a time when the axis is the last one;
        False where this operator has no such path."""
        if not self.has_fast_rows:
            return False
        if axis != x.ndim - 1 or not (x.flags.c_contiguous and out.flags.c_contiguous):
            with quiet():
                self._rows(xp, x, axis, out, scratch(x.shape, x.dtype))
            return True
        length = x.shape[-1]
        x, out = x.reshape(-1, length), out.reshape(-1, length)
        blocks = list(row_blocks(x.shape[0], length))
        work = scratch((blocks[0].stop, length), x.dtype)
        with quiet():
            for rows in blocks:
                self._rows(xp, x[rows], 1, out[rows], work[: rows.stop - rows.start])
        return True

    has_fast_rows = False
    # Softmax (False) and LogSoftmax (True) along the last axis have a backend's compiled form
    # to ask for first (`Kernels.compiled_softmax`); None: none.
    compiled_log: bool | None = None

    def _rows(self, xp: Any, x: Array, axis: int, out: Array, work: Array) -> None:
        """The fast float32 result along `axis` into `out`, with one work array like x."""
        raise NotImplementedError

    def _along_exact(self, kernels: Any, x: Array, axis: int, out: Array) -> None:
        """The exact-mode kernel of an operator with `supports_exact`."""
        raise NotImplementedError


class SoftmaxOp(AxisNormalization):
    """exp(x − max) / Σ exp(x − max): subtracting the max keeps exp from overflowing."""

    supports_exact = True

    def _along(self, xp: Any, values: Array, axis: int) -> Array:
        values -= xp.max(values, axis=axis, keepdims=True)
        xp.exp(values, out=values)
        values /= xp.sum(values, axis=axis, keepdims=True)
        return values

    has_fast_rows = True
    compiled_log = False

    def _rows(self, xp: Any, x: Array, axis: int, out: Array, work: Array) -> None:
        """exp(x − max) (or exp(x) where `_exp_cannot_overflow`), its sums along the axis and a
        product with their reciprocals: nothing copied."""
        if _exp_cannot_overflow(xp, x, x.shape[axis]):
            xp.exp(x, out=out)
        else:
            ufunc_into(xp, xp.subtract, x, xp.max(x, axis=axis, keepdims=True), out=out)
            xp.exp(out, out=out)
        total = _sum_keeping(xp, out, axis)
        ufunc_into(xp, xp.multiply, out, xp.reciprocal(total, out=total), out=out)

    def _along_exact(self, kernels: Any, x: Array, axis: int, out: Array) -> None:
        kernels.exact_softmax_arrays(x, axis, out)


class LogSoftmaxOp(AxisNormalization):
    """(x − max) − log Σ exp(x − max)."""

    supports_exact = True

    def _along(self, xp: Any, values: Array, axis: int) -> Array:
        values -= xp.max(values, axis=axis, keepdims=True)
        values -= xp.log(xp.sum(xp.exp(values), axis=axis, keepdims=True))
        return values

    has_fast_rows = True
    compiled_log = True

    def _rows(self, xp: Any, x: Array, axis: int, out: Array, work: Array) -> None:
        """The shifted values into `out`, their exp into the work array, two reductions."""
        ufunc_into(xp, xp.subtract, x, xp.max(x, axis=axis, keepdims=True), out=out)
        xp.exp(out, out=work)
        ufunc_into(xp, xp.subtract, out, xp.log(_sum_keeping(xp, work, axis)), out=out)

    def _along_exact(self, kernels: Any, x: Array, axis: int, out: Array) -> None:
        kernels.exact_log_softmax_arrays(x, axis, out)


# exp(x) is a float32 normal number for x ≥ −87 (e⁻⁸⁷ ≈ 1.6e-38) and n of them sum below
# float32's largest (3.4e38 ≈ e^88.7) when x ≤ 88 − ln n.
_EXP_NORMAL_FROM = -87.0
_EXP_SUMS_UP_TO = 88.0


def _exp_cannot_overflow(xp: Any, x: Array, length: int) -> bool:
    """Whether softmax may skip subtracting each row's max, on the host: every exp(x) is a
    normal float32 and a row of them sums finite. Two whole-array reductions (0.012 ms each at
    256k elements, AMD EPYC) then replace the row maxima and the subtraction (0.03 ms each),
    and exp(x) is as accurate as exp(x − max), whose argument is rounded (both are divided by
    their row's sum). NaN and infinities fail the test."""
    if xp is not np:  # a device's min and max would wait for it
        return False
    return bool(
        x.min() >= _EXP_NORMAL_FROM and x.max() <= _EXP_SUMS_UP_TO - math.log(max(length, 1))
    )


def _sum_keeping(xp: Any, values: Array, axis: int) -> Array:
    """The sum along `axis` with that axis kept (reductions.float_sum: a GEMV where it can)."""
    return xp.expand_dims(xp.asarray(float_sum(xp, values, (axis,))), axis)


class HardmaxOp(AxisNormalization):
    """1 at the first maximum along the axis, 0 elsewhere. Exact: the first maximum by
    reductions.extremum_position (compared in float64, the first NaN winning)."""

    supports_exact = True

    def _along(self, xp: Any, values: Array, axis: int) -> Array:
        first = xp.expand_dims(xp.argmax(values, axis=axis), axis)
        positions = xp.arange(values.shape[axis]).reshape((-1,) + (1,) * (values.ndim - 1 - axis))
        return positions == first

    def _along_exact(self, kernels: Any, x: Array, axis: int, out: Array) -> None:
        xp = kernels.xp
        first = xp.expand_dims(extremum_position(xp, x, axis, largest=True), axis)
        positions = xp.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - 1 - axis))
        out[...] = positions == first


DEFS: tuple[OpDef, ...] = (
    OpDef("Softmax", 1, SoftmaxOp),
    OpDef("LogSoftmax", 1, LogSoftmaxOp),
    OpDef("Hardmax", 1, HardmaxOp),
)
