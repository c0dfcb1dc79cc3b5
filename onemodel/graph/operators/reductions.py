"""Reductions over axes (ReduceSum, ReduceMean, …) and ArgMax / ArgMin along one axis.

The axes are an attribute before the opset where they became the optional second input
(ReduceSum 13, the others 18). No axes means every axis, or with noop_with_empty_axes (from
that same opset) the identity. A reduction over nothing (an axis of length 0) gives the
operation's identity: 0 for sums, 1 for products, −inf for max, +inf for min, −inf for logs
of sums.

Accumulation types: integers keep their type for sums, products, max and min (wrapping as
ONNX's integer arithmetic does) and go through float64 for means, norms and logs, truncated
back; float16 and bfloat16 are accumulated in float32.

Exact mode: floats go through the backend's exact reductions (ordered float64 sums rounded
once; compare and select in row-major order), the others built on them in float64 (SumSquare
Σ x·x, L1 Σ |x|, L2 sqrt(Σ x·x), Prod the ordered product from 1, LogSum log(Σ x), LogSumExp
log(Σ exp(x − m)) + m), rounded once; integer sums, products, max and min are exact in any
order and keep their fast path. ArgMax and ArgMin: the smallest (largest with
select_last_index) position holding the exact extremum, or the first NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from onemodel.backends.array_kernels import NARROW_FLOATS
from onemodel.backends.blocking import memory_order
from onemodel.backends.exact_arrays import exp64, log64, ordered_extremum, ordered_sum
from onemodel.backends.fp_errors import quiet
from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.operators.base import (
    REDUCES_PLANES,
    Array,
    BoundCall,
    BoundStep,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.unary import IEEE_FLOATS, WIDE_INTEGERS
from onemodel.tensors import DType


class Reduction(Operator):
    """keepdims, noop_with_empty_axes, axes as attribute or input; subclasses reduce."""

    axes_input_since: ClassVar[int] = 18
    # Whether integers stay integers through the whole computation (else float64, truncated).
    integer_exact: ClassVar[bool] = False

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.keepdims = bool(node.attr("keepdims", 1))
        self.axes_from_input = node.opset >= self.axes_input_since
        self.noop_with_empty_axes = self.axes_from_input and bool(
            node.attr("noop_with_empty_axes", 0)
        )
        attribute = None if self.axes_from_input else node.attr("axes", None)
        self.attribute_axes = None if attribute is None else tuple(int(a) for a in attribute)
        self._settings: dict[tuple, tuple[Any, Any]] = {}

    def _types(self) -> frozenset[int]:
        allowed = IEEE_FLOATS | WIDE_INTEGERS
        return allowed | {DType.BFLOAT16} if self.node.opset >= 13 else allowed

    def _given_axes(self, values: Any) -> tuple[int, ...] | None:
        """The axes the node names (None: not given), from the attribute or a host value."""
        if not self.axes_from_input:
            return self.attribute_axes
        if values is None:
            return None
        return tuple(int(a) for a in np.asarray(values).reshape(-1))

    def _axes(self, given: tuple[int, ...] | None, rank: int) -> tuple[int, ...] | None:
        """Normalized, checked axes; None when the node is the identity."""
        if not given:
            return None if self.noop_with_empty_axes else tuple(range(rank))
        if any(not -max(rank, 1) <= a < max(rank, 1) for a in given):
            raise self.node.bad_input(
                f"{self.node.op_type}: axes {given} out of range for rank {rank}",
                self.node.inputs[-1] if self.axes_from_input else self.node.inputs[0],
            )
        axes = tuple(sorted({a % rank for a in given})) if rank else ()
        if len(axes) != len(given):
            raise self.node.bad_input(f"{self.node.op_type}: axes {given} repeat an axis")
        return axes

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, self._types(), 0)
        if self.axes_from_input and ctx.has(1):
            self.check_types(ctx, frozenset({DType.INT64}), 1)
            given = self._given_axes(ctx.value(1))
        else:
            given = self._given_axes(None)
        shape = ctx.shape(0)
        axes = self._axes(given, len(shape))
        if axes is None:
            return [ctx.output(ctx.dtype(0), shape)]
        if self.keepdims:
            reduced = tuple(1 if i in axes else d for i, d in enumerate(shape))
        else:
            reduced = tuple(d for i, d in enumerate(shape) if i not in axes)
        return [ctx.output(ctx.dtype(0), reduced)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x = inputs[0]
        (out,) = outputs
        has_axes = self.axes_from_input and len(inputs) > 1 and inputs[1] is not None
        # The axes are shape data: one host copy per run (a device-to-host sync on a GPU).
        host = ctx.kernels.memory.to_host(inputs[1]) if has_axes else None
        xp = ctx.xp
        axes, compute = self._run_settings(xp, host, x)
        if axes is None:
            xp.copyto(out, x)
            return
        values = x.astype(compute, copy=False)
        with quiet():
            if any(x.shape[a] == 0 for a in axes):
                out[...] = self._identity(values.dtype)
            elif ctx.exact and values.dtype.kind == "f":
                self._reduce_exact(ctx.kernels, values, axes, out)
            else:
                self._reduce_into(xp, values, axes, out)

    def _reduce_into(self, xp: Any, values: Array, axes: tuple[int, ...], out: Array) -> None:
        """The fast-mode reduction written into `out`."""
        out[...] = self._reduce(xp, values, axes).reshape(out.shape)

    def _run_settings(self, xp: Any, host: Any, x: Array) -> tuple[Any, Any]:
        """The checked axes and the compute type, remembered per axes value, rank and type:
        working them out took ~10 µs a run, a quarter of a medium reduction's time."""
        key = (None if host is None else bytes(np.ascontiguousarray(host)), x.ndim, x.dtype)
        settings = self._settings.get(key)
        if settings is None:
            settings = self._axes(self._given_axes(host), x.ndim), self._compute_dtype(xp, x.dtype)
            if len(self._settings) >= 64:
                self._settings.clear()
            self._settings[key] = settings
        return settings

    def _compute_dtype(self, xp: Any, dtype: Any) -> Any:
        if dtype in NARROW_FLOATS:
            return xp.float32
        if dtype.kind in "iu" and not self.integer_exact:
            return xp.float64
        return dtype

    def _identity(self, dtype: Any) -> Any:
        """The result of reducing nothing."""
        return 0

    def _reduce(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        raise NotImplementedError

    def _reduce_exact(self, kernels: Any, values: Array, axes: tuple[int, ...], out: Array) -> None:
        """The exact-mode kernel of a reduction with `supports_exact`: by default `_exact` on a
        float64 copy, rounded once."""
        xp = kernels.xp
        store(xp, out, self._exact(xp, widen(xp, values), axes).reshape(out.shape))

    def _exact(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        """The float64 result of the reduction of float64 `values` (keepdims=False)."""
        raise NotImplementedError


# The longest run of values `float_sum` adds by a matrix-vector product: BLAS adds each of its
# 32 (or so) partial sums in sequence, so the rounding error grows with run / 32 (here at most
# 2048 float32 ulps in the worst case, about √2048 typically), where NumPy's pairwise sum grows
# with log2(run); longer runs go to `sum`, and so do arrays under GEMV_ABOVE elements, where
# the call costs more than the pass saves.
GEMV_RUN_LIMIT = 1 << 16
GEMV_ABOVE = 1 << 14


def float_sum(xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
    """The sum over `axes` (keepdims=False) of a float32 or float64 array. Consecutive axes of a
    C-contiguous array are one matrix-vector product with a vector of ones: BLAS reads the
    values once (0.12 ns an element here, AMD EPYC, 1 thread), where NumPy's pairwise sum along
    a contiguous axis takes 0.29 ns and onnxruntime 0.23 ns. x · 1 is exact, so infinities and
    NaN add as they would; an all -0 run sums to +0."""
    if values.size <= GEMV_ABOVE:  # first: the checks below cost more than a small sum
        return values.sum(axis=axes, dtype=values.dtype)  # the method: no wrapper's cost
    order = None if values.flags.c_contiguous else memory_order(values)
    if order is not None:  # values held channels last (graph/layouts.py), say
        kept_axes = [axis for axis in order if axis not in axes]
        if kept_axes == sorted(kept_axes):  # the result's axes keep their order
            permuted = values.transpose(order)
            return float_sum(xp, permuted, tuple(sorted(order.index(a) for a in axes)))
    first, last = axes[0], axes[-1]
    run = math.prod(values.shape[first : last + 1])
    if (
        values.dtype not in (np.float32, np.float64)
        or axes != tuple(range(first, last + 1))
        or not values.flags.c_contiguous
        or not 1 < run <= GEMV_RUN_LIMIT
    ):
        return xp.sum(values, axis=axes, dtype=values.dtype)
    outer = math.prod(values.shape[:first])
    inner = math.prod(values.shape[last + 1 :])
    kept = values.shape[:first] + values.shape[last + 1 :]
    ones = xp.ones(run, dtype=values.dtype)
    if inner == 1:
        total = xp.matmul(values.reshape(outer, run), ones)
    elif outer == 1:
        total = xp.matmul(ones, values.reshape(run, inner))
    else:
        total = xp.matmul(ones.reshape(1, run), values.reshape(outer, run, inner))
    return total.reshape(kept)


class ReduceSumOp(Reduction):
    axes_input_since = 13
    integer_exact = True
    supports_exact = True

    def _reduce(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return float_sum(xp, values, axes)

    def _reduce_exact(self, kernels: Any, values: Array, axes: tuple[int, ...], out: Array) -> None:
        kernels.exact_sum_arrays(values, axes, out)


class ReduceSumSquareOp(Reduction):
    integer_exact = True
    supports_exact = True

    def _reduce(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return xp.sum(values * values, axis=axes, dtype=values.dtype)

    def _exact(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return ordered_sum(xp, values * values, axes)


class ReduceL1Op(Reduction):
    integer_exact = True
    supports_exact = True

    def _reduce(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return xp.sum(xp.abs(values), axis=axes, dtype=values.dtype)

    def _exact(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return ordered_sum(xp, xp.abs(values), axes)


class ReduceL2Op(Reduction):
    supports_exact = True

    def _reduce(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return xp.sqrt(xp.sum(values * values, axis=axes))

    def _exact(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return xp.sqrt(ordered_sum(xp, values * values, axes))


class ReduceMeanOp(Reduction):
    layout_role = REDUCES_PLANES
    supports_exact = True

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x, out = inputs[0], outputs[0]
        given = self.axes_from_input and len(inputs) > 1 and inputs[1] is not None
        if not given and not ctx.exact and x.dtype.char in "fd" and 0 < x.size <= GEMV_ABOVE:
            axes = self._run_settings(ctx.xp, None, x)[0]
            if axes is not None:
                # Small, fast mode: `_reduce`'s sum and division straight into out.
                with quiet():
                    x.sum(axis=axes, dtype=x.dtype, out=out, keepdims=bool(self.keepdims))
                    ctx.xp.divide(out, math.prod(x.shape[a] for a in axes), out=out)
                return
        super().run(ctx, inputs, outputs)

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """`run`'s small fast-mode path with its axes and count worked out once."""
        spec = step.specs[0]
        given = self.axes_from_input and len(step.specs) > 1 and step.specs[1] is not None
        size = math.prod(spec.shape)
        if given or spec.numpy_dtype.char not in "fd" or not 0 < size <= GEMV_ABOVE:
            return None
        axes = self._axes(self._given_axes(None), len(spec.shape))
        if axes is None:
            return None
        dtype, keepdims, divide = spec.numpy_dtype, bool(self.keepdims), ctx.xp.divide
        count = math.prod(spec.shape[a] for a in axes)

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            out = outputs[0]
            inputs[0].sum(axis=axes, dtype=dtype, out=out, keepdims=keepdims)
            divide(out, count, out=out)

        return call

    def _reduce(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        """The sum (`float_sum`) divided by the count, as `mean` computes it."""
        total = xp.asarray(float_sum(xp, values, axes))  # an array even when it is one value
        return xp.divide(total, math.prod(values.shape[a] for a in axes), out=total)

    def _reduce_exact(self, kernels: Any, values: Array, axes: tuple[int, ...], out: Array) -> None:
        kernels.exact_mean_arrays(values, axes, out)

    def _identity(self, dtype: Any) -> Any:
        return float("nan")  # 0 / 0


class ReduceProdOp(Reduction):
    integer_exact = True
    supports_exact = True

    def _reduce(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return xp.prod(values, axis=axes, dtype=values.dtype)

    def _exact(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        """The float64 product from 1 over the reduced positions in row-major order."""
        rows = xp.moveaxis(values, axes, tuple(range(len(axes))))
        rows = rows.reshape(math.prod(values.shape[a] for a in axes), *rows.shape[len(axes) :])
        total = xp.ones(rows.shape[1:], dtype=xp.float64)
        for row in range(rows.shape[0]):
            total *= rows[row]
        return total

    def _identity(self, dtype: Any) -> Any:
        return 1


class ReduceLogSumOp(Reduction):
    supports_exact = True

    def _types(self) -> frozenset[int]:
        return super()._types() - WIDE_INTEGERS if self.node.opset >= 28 else super()._types()

    def _reduce(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return xp.log(xp.sum(values, axis=axes))

    def _exact(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return log64(xp, ordered_sum(xp, values, axes))

    def _identity(self, dtype: Any) -> Any:
        return -np.inf


class ReduceLogSumExpOp(ReduceLogSumOp):
    """log Σ exp(x − m) + m with m the max: exp cannot overflow. An infinite m is left out."""

    def _reduce(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        peak = xp.max(values, axis=axes, keepdims=True)
        peak = xp.where(xp.isfinite(peak), peak, 0)
        total = xp.sum(xp.exp(values - peak), axis=axes, keepdims=True)
        return xp.log(total) + peak

    def _exact(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        peak = ordered_extremum(xp, values, axes, largest=True)
        peak = xp.where(xp.isfinite(peak), peak, 0.0)
        shifted = values - xp.expand_dims(peak, axes)
        return log64(xp, ordered_sum(xp, exp64(xp, shifted), axes)) + peak


class ExtremumReduction(Reduction):
    """Max and min: integer types stay integers, int8/uint8 from opset 12, bool from 20."""

    integer_exact = True
    host_ufunc: ClassVar[Any]  # np.maximum or np.minimum, whose reduce is xp.max or xp.min

    def _reduce_into(self, xp: Any, values: Array, axes: tuple[int, ...], out: Array) -> None:
        """On the host the ufunc's reduce straight into `out`: no wrapper, no result array
        copied (ReduceMax at 256×1024 over the last axis: 0.051 ms a run, 0.031 for the
        reduction itself)."""
        if xp is not np:
            super()._reduce_into(xp, values, axes, out)
            return
        self.host_ufunc.reduce(values, axis=axes, out=out, keepdims=out.ndim == values.ndim)

    def _types(self) -> frozenset[int]:
        allowed = super()._types()
        if self.node.opset >= 12:
            allowed |= {DType.INT8, DType.UINT8}
        if self.node.opset >= 20:
            allowed |= {DType.BOOL}
        return allowed


class ReduceMaxOp(ExtremumReduction):
    supports_exact = True
    host_ufunc = np.maximum

    def _reduce(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return xp.max(values, axis=axes)

    def _reduce_exact(self, kernels: Any, values: Array, axes: tuple[int, ...], out: Array) -> None:
        kernels.exact_max_arrays(values, axes, out)

    def _identity(self, dtype: Any) -> Any:
        if dtype.kind in "iu":
            return np.iinfo(dtype).min
        return False if dtype.kind == "b" else -np.inf


class ReduceMinOp(ExtremumReduction):
    supports_exact = True
    host_ufunc = np.minimum

    def _reduce(self, xp: Any, values: Array, axes: tuple[int, ...]) -> Array:
        return xp.min(values, axis=axes)

    def _reduce_exact(self, kernels: Any, values: Array, axes: tuple[int, ...], out: Array) -> None:
        kernels.exact_min_arrays(values, axes, out)

    def _identity(self, dtype: Any) -> Any:
        if dtype.kind in "iu":
            return np.iinfo(dtype).max
        return True if dtype.kind == "b" else np.inf


class ArgExtremum(Operator):
    """The int64 position of the first (or, with select_last_index, last) extremum along
    `axis`; NaN counts as the extremum, as in NumPy. Exact: the extremum by xp.max/xp.min
    of a float64 copy (a selection: order cannot matter) with NaNs set aside, then the least
    (or greatest) position equal to it by an integer min (max), or the first (last) NaN."""

    supports_exact = True
    largest: ClassVar[bool]

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", 0))
        self.keepdims = bool(node.attr("keepdims", 1))
        self.last = bool(node.attr("select_last_index", 0))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        allowed = {
            DType.FLOAT16, DType.FLOAT, DType.DOUBLE, DType.INT8, DType.INT16, DType.INT32,
            DType.INT64, DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64,
        }  # fmt: skip
        if self.node.opset >= 13:
            allowed.add(DType.BFLOAT16)
        self.check_types(ctx, frozenset(allowed), 0)
        shape = ctx.shape(0)
        rank = len(shape)
        if not -rank <= self.axis < rank or shape[self.axis] == 0:
            raise self.node.bad_input(
                f"{self.node.op_type}: axis {self.axis} is out of range or empty for shape {shape}",
                self.node.inputs[0],
            )
        axis = self.axis % rank
        if self.keepdims:
            reduced = (*shape[:axis], 1, *shape[axis + 1 :])
        else:
            reduced = (*shape[:axis], *shape[axis + 1 :])
        return [ctx.output(DType.INT64, reduced)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x = inputs[0]
        (out,) = outputs
        xp = ctx.xp
        axis = self.axis % x.ndim
        if ctx.exact:
            xp = ctx.kernels.xp
            out[...] = self._exact_find(xp, x, axis).reshape(out.shape)
            return
        if x.dtype in NARROW_FLOATS:
            x = x.astype(xp.float32)  # exact, so positions do not change
        if self.last:
            flipped = xp.flip(x, axis=axis)
            found = x.shape[axis] - 1 - self._find(xp, flipped, axis)
        else:
            found = self._find(xp, x, axis)
        out[...] = found.reshape(out.shape)

    def _find(self, xp: Any, values: Array, axis: int) -> Array:
        raise NotImplementedError

    def _exact_find(self, xp: Any, x: Array, axis: int) -> Array:
        return extremum_position(xp, x, axis, self.largest, self.last)


def extremum_position(xp: Any, x: Array, axis: int, largest: bool, last: bool = False) -> Array:
    """Exact mode's arg max (min) along `axis`, int64: the least (with `last` the greatest)
    position equal to the extremum of a float64 copy with NaNs set aside, or of the first
    (last) NaN where there is one. Selections and an integer min: no library tie order."""
    floating = x.dtype.kind == "f"
    values = widen(xp, x) if floating else x
    extremum = xp.max if largest else xp.min
    if floating:
        nan = xp.isnan(values)
        values = xp.where(nan, -xp.inf if largest else xp.inf, values)
    hit = values == extremum(values, axis=axis, keepdims=True)
    if floating:
        hit = xp.where(xp.any(nan, axis=axis, keepdims=True), nan, hit)
    length = x.shape[axis]
    place = xp.arange(length, dtype=xp.int64).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    if last:
        return xp.max(xp.where(hit, place, -1), axis=axis)
    return xp.min(xp.where(hit, place, length), axis=axis)


class ArgMaxOp(ArgExtremum):
    largest = True

    def _find(self, xp: Any, values: Array, axis: int) -> Array:
        return xp.argmax(values, axis=axis)


class ArgMinOp(ArgExtremum):
    largest = False

    def _find(self, xp: Any, values: Array, axis: int) -> Array:
        return xp.argmin(values, axis=axis)


DEFS: tuple[OpDef, ...] = (
    OpDef("ReduceSum", 1, ReduceSumOp),
    OpDef("ReduceMean", 1, ReduceMeanOp),
    OpDef("ReduceMax", 1, ReduceMaxOp),
    OpDef("ReduceMin", 1, ReduceMinOp),
    OpDef("ReduceProd", 1, ReduceProdOp),
    OpDef("ReduceL1", 1, ReduceL1Op),
    OpDef("ReduceL2", 1, ReduceL2Op),
    OpDef("ReduceLogSum", 1, ReduceLogSumOp),
    OpDef("ReduceLogSumExp", 1, ReduceLogSumExpOp),
    OpDef("ReduceSumSquare", 1, ReduceSumSquareOp),
    OpDef("ArgMax", 1, ArgMaxOp),
    OpDef("ArgMin", 1, ArgMinOp),
)
