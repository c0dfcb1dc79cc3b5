"""Pooling: MaxPool, AveragePool and LpPool over sliding windows, and their global forms.

Windows are placed by conv's `SlidingWindows` (auto_pad, pads, strides, dilations, ceil_mode).
Padding never takes part: MaxPool compares real positions only, AveragePool divides by the
number of real positions (or, with count_include_pad, of positions inside the explicit pads),
LpPool adds nothing for padding. A window that holds no real position has no defined maximum
or average and is refused. float16 and bfloat16 are accumulated in float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onemodel.backends.array_kernels import NARROW_FLOATS, WindowAxis, window_axes
from onemodel.backends.exact_elementary import pow64
from onemodel.backends.fp_errors import quiet
from onemodel.backends.ieee_float32 import store, widen
from onemodel.backends.padded_pool import PADDED_POOL_MAX, PaddedPool
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
from onemodel.graph.operators.conv import Placement, SlidingWindows
from onemodel.graph.operators.reductions import float_sum
from onemodel.graph.operators.unary import IEEE_FLOATS
from onemodel.tensors import DType

# A kernel a bound step holds, made once per input shape with its work arrays: (x, out).
HeldPool = Callable[[Any, Any], None]
_MAX_REMEMBERED = 64  # input shapes whose AveragePool divisor is kept


def _float_types(opset: int) -> frozenset[int]:
    """float16, float and double; bfloat16 from opset 22."""
    return IEEE_FLOATS | ({DType.BFLOAT16} if opset >= 22 else frozenset())


def _compute_dtype(xp: Any, dtype: Any) -> Any:
    """float32 for float16 and bfloat16 (NumPy has no fast loops for them), else `dtype`."""
    return xp.float32 if dtype in NARROW_FLOATS else dtype


class WindowPool(Operator):
    """What the sliding-window pools share: attributes, the placement, and the output spec."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.windows = SlidingWindows(node)
        if self.windows.kernel_shape is None:
            raise node.invalid(f"{node.op_type} needs the attribute 'kernel_shape'")
        self.ceil_mode = bool(node.attr("ceil_mode", 0))

    def _types(self) -> frozenset[int]:
        return _float_types(self.node.opset)

    def _place(self, shape: tuple[int, ...]) -> Placement:
        rank = len(shape) - 2
        if rank < 1:
            raise self.node.bad_input(
                f"{self.node.op_type} needs an input (N, C, D1, …), not shape {shape}",
                self.node.inputs[0],
            )
        kernel = self.windows.kernel_for(None, rank)
        return self.windows.place(shape[2:], kernel, self.ceil_mode)

    def _axes(self, shape: tuple[int, ...], placement: Placement) -> list[WindowAxis]:
        return window_axes(
            shape[2:],
            placement.out_spatial,
            self.windows.kernel_shape,
            placement.strides,
            placement.pads_begin,
            placement.dilations,
        )

    def _refuse_windows_of_padding(self, shape: tuple[int, ...], placement: Placement) -> None:
        for i, axis in enumerate(self._axes(shape, placement)):
            if axis.windows_without_real():
                raise self.node.bad_input(
                    f"{self.node.op_type} of shape {shape}: along spatial axis {i} some windows "
                    f"hold padding only (pads {placement.pads_begin[i]}/{placement.pads_end[i]}, "
                    f"kernel {axis.kernel}, dilation {axis.dilation}), which have no value",
                    self.node.inputs[0],
                )

    def _output_spec(self, ctx: InferContext) -> tuple[TensorSpec, Placement]:
        self.check_types(ctx, self._types(), 0)
        shape = ctx.shape(0)
        placement = self._place(shape)
        return ctx.output(ctx.dtype(0), (*shape[:2], *placement.out_spatial)), placement

    def _padded(
        self, xp: Any, shape: tuple[int, ...], dtype: Any, types: str, **options: Any
    ) -> PaddedPool | None:
        """A `PaddedPool` for a fast run of a 2-D pooling of this input shape and type (NumPy
        type characters `types`), or None where the shared kernels run it."""
        if len(shape) != 4 or np.dtype(dtype).char not in types:
            return None
        if not 0 < math.prod(shape) <= PADDED_POOL_MAX:
            return None
        placement = self._place(shape)
        return PaddedPool(
            xp, shape, placement.out_spatial, self.windows.kernel_shape, placement.strides,
            placement.pads_begin, placement.dilations, dtype, **options,
        )  # fmt: skip

    def _held(self, kernels: Any, shape: tuple[int, ...], dtype: Any, divisor: Any) -> Any:
        """The backend's own kernel for this 1-D or 2-D pooling (`held_pool`), or None."""
        if len(shape) not in (3, 4) or 0 in shape:
            return None
        placement = self._place(shape)
        return kernels.held_pool(
            shape, dtype, placement.out_spatial, self.windows.kernel_shape, placement.strides,
            placement.pads_begin, placement.dilations, divisor,
        )  # fmt: skip

    def _bind_kernel(self, kernel: HeldPool | None) -> BoundCall | None:
        if kernel is None:
            return None

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            kernel(inputs[0], outputs[0])

        return call

    def _kernel_args(self, x: Array) -> tuple[Any, ...]:
        placement = self._place(x.shape)
        return (
            self.windows.kernel_shape,
            placement.strides,
            placement.pads_begin,
            placement.dilations,
        )


class MaxPoolOp(WindowPool):
    """The largest real value of each window; NaN wins, ties keep the first in row-major order.

    The optional Indices output (int64) is the flat position of each winner in the whole input,
    its plane part row-major (storage_order 0) or column-major (storage_order 1). Exact: compare
    and select only, in exact_max_pool_arrays' order.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.column_major = bool(node.attr("storage_order", 0))
        self.wants_indices = len(node.outputs) > 1 and bool(node.outputs[1])
        if len(node.outputs) > 1 and node.opset < 8:
            raise node.invalid("MaxPool has the Indices output from opset 8")

    def _types(self) -> frozenset[int]:
        extra = {DType.INT8, DType.UINT8} if self.node.opset >= 12 else set()
        return _float_types(self.node.opset) | extra

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        spec, placement = self._output_spec(ctx)
        self._refuse_windows_of_padding(ctx.shape(0), placement)
        if len(self.node.outputs) < 2:
            return [spec]
        return [spec, ctx.output(DType.INT64, spec.shape)]

    def _max_kernel(self, ctx: RunContext, shape: tuple[int, ...], dtype: Any) -> HeldPool | None:
        """A kernel for a fast run without Indices: the backend's own (NumPy: 3×3/2 float32 by
        column pairs), else for a small input the padded kernel (float32, float64, int8,
        uint8)."""
        if self.wants_indices:
            return None
        held = self._held(ctx.kernels, shape, dtype, None)
        return held or self._padded(ctx.xp, shape, dtype, "fdbB", maximum=True)

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """Its held kernel (pair or padded, which `run` also takes) made once."""
        if ctx.exact:
            return None
        spec = step.specs[0]
        return self._bind_kernel(self._max_kernel(ctx, spec.shape, spec.numpy_dtype))

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x = inputs[0]
        indices = outputs[1] if self.wants_indices else None
        kernel = None if ctx.exact else self._max_kernel(ctx, x.shape, x.dtype)
        if kernel is not None:
            with quiet():
                kernel(x, outputs[0])
            return
        if ctx.exact:
            ctx.kernels.exact_max_pool_arrays(x, outputs[0], *self._kernel_args(x), indices=indices)
        else:
            ctx.kernels.max_pool_arrays(
                x, outputs[0], *self._kernel_args(x), indices=indices, scratch=ctx.scratch
            )
        if indices is not None:
            self._globalize(ctx.xp, indices, x.shape)

    def _globalize(self, xp: Any, indices: Array, shape: tuple[int, ...]) -> None:
        """Plane positions (row-major) to positions in the whole input, in place."""
        spatial = shape[2:]
        plane = int(np.prod(spatial))
        if self.column_major:
            # Peel coordinates off the last axis first; Horner's rule over them in that order
            # builds the position with the first axis varying fastest.
            remaining, column_major = indices.copy(), xp.zeros_like(indices)
            for size in reversed(spatial):
                remaining, coordinate = xp.divmod(remaining, size)
                column_major *= size
                column_major += coordinate
            indices[...] = column_major
        planes = xp.arange(shape[0] * shape[1], dtype=xp.int64).reshape(shape[0], shape[1])
        indices += planes.reshape(*planes.shape, *(1,) * len(spatial)) * plane


class AveragePoolOp(WindowPool):
    """The mean of each window's real positions; with count_include_pad, padding counts as
    zeros but positions past the explicit pads (added by ceil_mode) still do not. The float
    sum runs in onnxruntime's order for the node's opset (see `sum_pool_arrays`). Exact: the
    ordered float64 window sum divided once by that count (exact_average_pool_arrays)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.count_include_pad = bool(node.attr("count_include_pad", 0))
        # onnxruntime's summation order: its pooling library's (one axis at a time) before
        # opset 19, a row-major loop from 19 and for ceil_mode windows that count padding.
        self._row_major = node.opset >= 19 or (self.ceil_mode and self.count_include_pad)
        # Divisors by input shape and compute type, made once rather than in every run.
        self._divisors: dict[tuple, Any] = {}

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        spec, placement = self._output_spec(ctx)
        if not self.count_include_pad:
            self._refuse_windows_of_padding(ctx.shape(0), placement)
        return [spec]

    def _divisor(self, shape: tuple[int, ...], placement: Placement) -> np.ndarray:
        """Per output position, how many positions of its window count (a host array)."""
        counts = []
        for i, axis in enumerate(self._axes(shape, placement)):
            low, high = 0, axis.size
            if self.count_include_pad:
                low, high = -placement.pads_begin[i], axis.size + placement.pads_end[i]
            positions = (
                np.arange(axis.extent)[:, None] * axis.stride
                - axis.pad
                + np.arange(axis.kernel)[None, :] * axis.dilation
            )
            counts.append(np.count_nonzero((positions >= low) & (positions < high), axis=1))
        divisor = np.ones((), dtype=np.int64)
        for count in counts:
            divisor = np.multiply.outer(divisor, count)
        return divisor

    def _cached_divisor(self, xp: Any, shape: tuple[int, ...], dtype: Any) -> Any:
        """`_divisor` as a backend array of `dtype`, remembered per shape (a bounded cache)."""
        key = (shape, dtype)
        divisor = self._divisors.get(key)
        if divisor is None:
            if len(self._divisors) >= _MAX_REMEMBERED:
                self._divisors.clear()
            divisor = xp.asarray(self._divisor(shape, self._place(shape)), dtype=dtype)
            self._divisors[key] = divisor
        return divisor

    def _sum_kernel(self, ctx: RunContext, shape: tuple[int, ...], dtype: Any) -> HeldPool | None:
        """A kernel for a fast run, dividing as it ends: in row-major order the backend's own
        (NumPy: 3×3/2 float32 by phase grids), else for a small input the padded kernel
        (float32, float64)."""
        if np.dtype(dtype).char not in "fd" or len(shape) != 4:
            return None
        xp = ctx.xp
        divisor = self._cached_divisor(xp, shape, dtype)
        held = self._held(ctx.kernels, shape, dtype, divisor) if self._row_major else None
        return held or self._padded(
            xp, shape, dtype, "fd", maximum=False, row_major=self._row_major, divisor=divisor
        )

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """Its held kernel (pair or padded, which `run` also takes) made once."""
        if ctx.exact:
            return None
        spec = step.specs[0]
        return self._bind_kernel(self._sum_kernel(ctx, spec.shape, spec.numpy_dtype))

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x = inputs[0]
        (out,) = outputs
        xp = ctx.xp
        kernel = None if ctx.exact else self._sum_kernel(ctx, x.shape, x.dtype)
        if kernel is not None:
            with quiet():
                kernel(x, out)
            return
        if ctx.exact:
            divisor = self._divisor(x.shape, self._place(x.shape))
            ctx.kernels.exact_average_pool_arrays(x, out, *self._kernel_args(x), divisor)
            return
        compute = _compute_dtype(xp, out.dtype)
        divisor = self._cached_divisor(xp, x.shape, compute)
        if compute == out.dtype:  # the kernel divides as it writes out
            ctx.kernels.sum_pool_arrays(
                x, out, *self._kernel_args(x), scratch=ctx.scratch,
                row_major=self._row_major, divisor=divisor,
            )  # fmt: skip
            return
        total = ctx.scratch(out.shape, compute)
        ctx.kernels.sum_pool_arrays(
            x, total, *self._kernel_args(x), scratch=ctx.scratch, row_major=self._row_major
        )
        xp.divide(total, divisor, out=out, casting="unsafe")


class LpPoolOp(WindowPool):
    """(Σ |x|^p)^(1/p) over each window; padding adds nothing. Exact: in float64, |x|^p as
    |x| (p = 1), x·x (p = 2) or pow64; the window sums in AveragePool's order (exact average
    pool with divisor 1); the root as the identity, sqrt or pow64(·, 1/p); rounded once."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.p = float(node.attr("p", 2))
        if self.p <= 0:
            raise node.invalid(f"LpPool: p {self.p} must be positive")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        return [self._output_spec(ctx)[0]]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x = inputs[0]
        (out,) = outputs
        xp = ctx.xp
        if ctx.exact:
            self._run_exact(ctx.kernels, x, out)
            return
        compute = _compute_dtype(xp, out.dtype)
        powers = xp.abs(x.astype(compute))
        total = out if compute == out.dtype else xp.empty(out.shape, dtype=compute)
        with quiet():
            xp.power(powers, self.p, out=powers)
            ctx.kernels.sum_pool_arrays(powers, total, *self._kernel_args(x))
            xp.power(total, 1.0 / self.p, out=out, casting="unsafe")

    def _run_exact(self, kernels: Any, x: Array, out: Array) -> None:
        xp = kernels.xp
        magnitude = xp.absolute(widen(xp, x))
        with quiet():
            if self.p == 2:
                magnitude = magnitude * magnitude
            elif self.p != 1:
                magnitude = pow64(xp, magnitude, xp.full(magnitude.shape, self.p))
            total = xp.empty(out.shape, dtype=xp.float64)
            kernels.exact_average_pool_arrays(
                magnitude, total, *self._kernel_args(x), np.ones((), np.float64)
            )
            if self.p == 2:
                total = xp.sqrt(total)
            elif self.p != 1:
                total = pow64(xp, total, xp.full(total.shape, 1.0 / self.p))
        store(xp, out, total)


class GlobalPool(Operator):
    """A reduction over every spatial axis, keeping them as size 1. Exact: the exact
    reductions (ordered float64 mean, compare-and-select max) over the spatial axes."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _float_types(self.node.opset), 0)
        shape = ctx.shape(0)
        if len(shape) < 3:
            raise self.node.bad_input(
                f"{self.node.op_type} needs an input (N, C, D1, …), not shape {shape}",
                self.node.inputs[0],
            )
        if any(d == 0 for d in shape[2:]):
            raise self.node.bad_input(
                f"{self.node.op_type} of shape {shape}: an empty spatial axis has no value",
                self.node.inputs[0],
            )
        return [ctx.output(ctx.dtype(0), (*shape[:2], *(1,) * (len(shape) - 2)))]


class GlobalAveragePoolOp(GlobalPool):
    layout_role = REDUCES_PLANES

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x = inputs[0]
        (out,) = outputs
        axes = tuple(range(2, x.ndim))
        if ctx.exact:
            ctx.kernels.exact_mean_arrays(x, axes, out)
            return
        if x.dtype.char in "fd":  # the sum as one matrix-vector product (`float_sum`)
            total = float_sum(ctx.xp, x, axes)
            ctx.xp.divide(total.reshape(out.shape), math.prod(x.shape[2:]), out=out)
            return
        compute = _compute_dtype(ctx.xp, out.dtype)
        out[...] = ctx.xp.mean(x, axis=axes, keepdims=True, dtype=compute)


class GlobalMaxPoolOp(GlobalPool):
    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x = inputs[0]
        (out,) = outputs
        axes = tuple(range(2, x.ndim))
        if ctx.exact:
            ctx.kernels.exact_max_arrays(x, axes, out)
            return
        out[...] = ctx.xp.max(x, axis=axes, keepdims=True)


DEFS: tuple[OpDef, ...] = (
    OpDef("MaxPool", 1, MaxPoolOp),
    OpDef("AveragePool", 1, AveragePoolOp),
    OpDef("LpPool", 1, LpPoolOp),
    OpDef("GlobalAveragePool", 1, GlobalAveragePoolOp),
    OpDef("GlobalMaxPool", 1, GlobalMaxPoolOp),
)
