"""Normalizations for inference: BatchNormalization (with stored statistics), the ones that
standardize by statistics of the input itself (LayerNormalization, InstanceNormalization,
GroupNormalization), LpNormalization and LRN.

Statistics are computed in float32 (float64 for double inputs): float16 and bfloat16 would lose
most of a variance's digits, and NumPy has no fast loops for them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.blocking import row_blocks
from onemodel.backends.broadcasting import ufunc_into
from onemodel.backends.exact_normalization import lp_normalize64, lrn64, standardize64
from onemodel.backends.fp_errors import quiet
from onemodel.backends.ieee_float32 import store, widen
from onemodel.backends.small_rows import SmallRows, fits_small_rows
from onemodel.graph.operators.base import (
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
from onemodel.graph.operators.prepared import PreparesConstants
from onemodel.graph.operators.reductions import GEMV_ABOVE, GEMV_RUN_LIMIT, float_sum
from onemodel.graph.operators.unary import FLOATS, IEEE_FLOATS
from onemodel.tensors import DType, numpy_dtype_for_onnx

# Rows standardized STANDARDIZE_BLOCKS x blocking.BLOCK elements (2**18) at a time: for
# [2048, 2048] LayerNormalization and [1, 64, 256, 256] InstanceNormalization (AMD EPYC, one
# thread) blocks of 2**17 to 2**20 elements measure alike, 2**16 1.5x slower and 2**15 2.2x
# (a dozen calls a block, a few microseconds each), the whole array at once 1.4x.
STANDARDIZE_BLOCKS = 4


def _compute_dtype(xp: Any, *dtypes: Any) -> Any:
    """float64 when any operand is double, else float32."""
    return xp.float64 if any(d == np.float64 for d in dtypes) else xp.float32


def _normalized_axis(op: Operator, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise op.node.bad_input(
            f"{op.node.op_type}: axis {axis} is out of range for rank {rank}",
            op.node.inputs[0],
        )
    return axis % rank


class BatchNormalizationOp(PreparesConstants):
    """Y = (X − mean) / √(var + ε) · scale + B per channel.

    For inference mean and var are the stored inputs. In training mode (training_mode = 1,
    opset 14 on) they are the batch's own statistics over every axis but the channel one
    (population variance), and the optional outputs give the running statistics
    input · momentum + batch · (1 − momentum) in the inputs' type.

    The training modes before opset 14 (is_test = 0 before opset 7, or the extra mean, var,
    saved_mean, saved_var outputs) are refused: the spec never defines what saved_mean and
    saved_var hold. Before opset 9, spatial = 0 gives each element of a sample its own
    statistics: the parameters then have X's shape minus N.

    Exact: inference is separate rounded operations (sqrt, divide, multiply, add, never fused);
    in exact mode the batch statistics are the backend's exact means.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.epsilon = float(node.attr("epsilon", 1e-5))
        self.momentum = float(node.attr("momentum", 0.9))
        extra_outputs = any(node.outputs[1:])
        self.training = node.opset >= 14 and bool(node.attr("training_mode", 0))
        if node.opset >= 14 and extra_outputs and not self.training:
            raise node.invalid(
                "BatchNormalization has the outputs running_mean and running_var only in "
                "training mode (training_mode = 1)"
            )
        if node.opset < 14 and ((node.opset < 7 and not node.attr("is_test", 0)) or extra_outputs):
            raise node.unsupported(
                f"BatchNormalization in training mode is not supported before opset 14 (this "
                f"model imports opset {node.opset}); export the model for inference"
            )
        self.per_element = node.opset < 9 and not node.attr("spatial", 1)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        opset = self.node.opset
        types = FLOATS if opset >= 14 else IEEE_FLOATS
        self.check_types(ctx, types)
        if opset < 14 and len({ctx.dtype(i) for i in range(5)}) > 1:
            raise self.node.invalid("BatchNormalization before opset 14 needs one element type")
        typed_alike = ((0, 1, 2), (3, 4)) if opset == 14 else ((1, 2), (3, 4))
        if opset >= 14 and any(len({ctx.dtype(i) for i in group}) > 1 for group in typed_alike):
            raise self.node.invalid(
                "BatchNormalization needs one element type for scale and B (and X at opset 14) "
                "and one for mean and var"
            )
        x = ctx.shape(0)
        if len(x) < 2:
            raise self.node.bad_input(
                f"BatchNormalization needs an input (N, C, …), not shape {x}", self.node.inputs[0]
            )
        expected = x[1:] if self.per_element else (x[1],)
        for i in range(1, 5):
            if ctx.shape(i) != expected:
                raise self.node.bad_input(
                    f"BatchNormalization of X {x}: input {i} has shape {ctx.shape(i)}, not "
                    f"{expected}",
                    self.node.inputs[i],
                )
        running = [ctx.output(ctx.dtype(3), expected) for _ in self.node.outputs[1:3]]
        return [ctx.output(ctx.dtype(0), x), *running]

    def prepare(self, ctx: RunContext, constants: Sequence[Array | None]) -> Any:
        """Fast inference with constant scale, B, mean and var: the per-channel factor and
        shift, once per plan (their five small ufunc calls and casts cost a tenth of the run
        at medium size). Exact mode computes them in every run, in its own namespace."""
        parameters = constants[1:5]
        if ctx.exact or self.training or any(p is None for p in parameters):
            return None
        compute = _compute_dtype(ctx.xp, *(p.dtype for p in parameters))
        with np.errstate(all="ignore"):
            return compute, *self._factor_and_shift(ctx.xp, *parameters, compute)

    def _factor_and_shift(
        self, xp: Any, scale: Array, bias: Array, mean: Array, var: Array, compute: Any
    ) -> tuple[Array, Array]:
        """scale / √(var + ε) and B − mean · that, in `compute`."""
        # Namespace calls, not array operators: exact mode's namespace keeps subnormals.
        deviation = xp.sqrt(xp.add(var.astype(compute), self.epsilon))
        factor = xp.divide(scale.astype(compute), deviation)
        shift = xp.subtract(bias.astype(compute), xp.multiply(mean.astype(compute), factor))
        return factor, shift

    def run_prepared(
        self, ctx: RunContext, prepared: Any, inputs: Sequence[Array | None], outputs: Any
    ) -> None:
        x, scale, bias, mean, var = inputs[:5]
        xp = ctx.xp
        with quiet():  # inside a run: nothing to enter, the cheap ufunc buffers apply
            if prepared is not None and _compute_dtype(xp, x.dtype, prepared[0]) == prepared[0]:
                compute, factor, shift = prepared
            else:
                compute = _compute_dtype(xp, x.dtype, *(a.dtype for a in inputs[1:5]))
                if self.training:
                    mean, var = self._batch_statistics(ctx, x, mean, var, compute, outputs[1:])
                factor, shift = self._factor_and_shift(xp, scale, bias, mean, var, compute)
            shape = (1, *factor.shape, *(1,) * (x.ndim - 1 - factor.ndim))
            out = outputs[0]
            if x.dtype == compute == out.dtype:  # no widening: straight into the output
                ufunc_into(xp, xp.multiply, x, factor.reshape(shape), out=out)
                ufunc_into(xp, xp.add, out, shift.reshape(shape), out=out)
            else:
                result = xp.multiply(x.astype(compute, copy=False), factor.reshape(shape))
                xp.add(result, shift.reshape(shape), out=out, casting="unsafe")

    def _batch_statistics(
        self,
        ctx: RunContext,
        x: Array,
        mean: Array,
        var: Array,
        compute: Any,
        running: Sequence[Array],
    ) -> tuple[Array, Array]:
        """The batch's mean and population variance per channel (in the compute type), after
        writing the running statistics into the outputs that `running` holds. Exact mode: the
        mean, then the mean of the squared deviations from it, by the exact means."""
        xp = ctx.xp
        axes = (0, *range(2, x.ndim))
        values = x.astype(compute, copy=False)
        if ctx.exact:
            batch_mean = xp.empty(mean.shape, dtype=compute)
            ctx.kernels.exact_mean_arrays(values, axes, batch_mean)
            deviations = values - batch_mean.reshape(-1, *(1,) * (x.ndim - 2))
            deviations *= deviations
            batch_var = xp.empty(mean.shape, dtype=compute)
            ctx.kernels.exact_mean_arrays(deviations, axes, batch_var)
        else:
            batch_mean = values.mean(axis=axes)
            batch_var = values.var(axis=axes)
        kept = compute(self.momentum)
        for out, stored, batch in zip(running, (mean, var), (batch_mean, batch_var), strict=False):
            xp.add(stored.astype(compute) * kept, batch * (1 - kept), out=out, casting="unsafe")
        return batch_mean, batch_var


class Standardization(Operator):
    """Normalizing by the mean and variance of the input itself over some axes."""

    def _standardize(
        self, xp: Any, x: Array, axes: tuple[int, ...], epsilon: float, compute: Any
    ) -> tuple[Array, Array, Array]:
        """(x − mean) / √(var + ε), the mean and 1 / √(var + ε), in `compute`."""
        values = x.astype(compute)
        with np.errstate(all="ignore"):
            mean = xp.mean(values, axis=axes, keepdims=True)
            values -= mean
            variance = xp.mean(values * values, axis=axes, keepdims=True)
            inv_std = 1 / xp.sqrt(variance + epsilon)
            values *= inv_std
        return values, mean, inv_std

    @staticmethod
    def _standardize_rows(
        ctx: RunContext,
        x: Array,
        epsilon: float,
        out: Array,
        scale: Array | None = None,
        bias: Array | None = None,
        per_row: bool = False,
    ) -> None:
        """Fast mode on float32: each row of the 2-D `x` standardized, (x − mean) / √(var + ε),
        straight into `out` (which may share x's memory), then times `scale` plus `bias` when
        given: one value per column, or with `per_row` one per row (InstanceNormalization's
        channels), the scale then folded into 1/√(var + ε); a block of rows at a time
        (onemodel/backends/blocking.py, STANDARDIZE_BLOCKS of its blocks), the affine step
        included while the block is cached."""
        xp = ctx.xp
        rows, cols = x.shape
        # The row sums as one matrix-vector product, its vector of ones made once per call
        # (`float_sum` makes one per block); runs BLAS would add too coarsely keep `float_sum`.
        by_gemv = x.size > GEMV_ABOVE and cols <= GEMV_RUN_LIMIT
        ones = xp.ones(cols, dtype=x.dtype) if by_gemv else None
        with quiet():
            for block in row_blocks(rows, cols, STANDARDIZE_BLOCKS):
                row_scale = scale[block].reshape(-1, 1) if per_row and scale is not None else None
                Standardization._standardize_block(
                    xp, x[block], epsilon, out[block], ones, row_scale
                )
                if per_row:
                    if bias is not None:
                        ufunc_into(
                            xp, xp.add, out[block], bias[block].reshape(-1, 1), out=out[block]
                        )
                else:
                    Standardization._affine_into(xp, scale, bias, out[block])

    @staticmethod
    def _standardize_block(
        xp: Any,
        x: Array,
        epsilon: float,
        out: Array,
        ones: Array | None,
        row_scale: Array | None = None,
    ) -> None:
        """The row sums (one GEMV with `ones`, else reductions.float_sum), a broadcast
        subtraction, the squared deviations' sums as a batch of row dot products (matmul of
        (1, n) by (n, 1): a third of einsum's time) and a broadcast multiplication (by
        `row_scale` / √(var + ε) when given), no copy of x; the broadcasts with one row's
        ufunc buffer (backends/broadcasting.py)."""
        f = x.dtype.type
        inverse_count = f(1.0 / x.shape[1])
        if ones is None:
            mean = xp.asarray(float_sum(xp, x, (1,))).reshape(-1, 1)
        else:
            mean = xp.matmul(x, ones).reshape(-1, 1)
        xp.multiply(mean, inverse_count, out=mean)
        ufunc_into(xp, xp.subtract, x, mean, out=out)
        inv_std = xp.matmul(out[:, None, :], out[:, :, None]).reshape(-1, 1)
        xp.multiply(inv_std, inverse_count, out=inv_std)
        xp.add(inv_std, f(epsilon), out=inv_std)
        xp.sqrt(inv_std, out=inv_std)
        if row_scale is None:
            xp.reciprocal(inv_std, out=inv_std)
        else:
            xp.divide(row_scale, inv_std, out=inv_std)
        ufunc_into(xp, xp.multiply, out, inv_std, out=out)

    @staticmethod
    def _affine_into(xp: Any, scale: Array | None, bias: Array | None, out: Array) -> None:
        """out = out · scale + bias in place (scale and bias shaped to broadcast; either may be
        None), NumPy's floating-point errors ignored by the caller."""
        if scale is not None:
            ufunc_into(xp, xp.multiply, out, scale, out=out)
        if bias is not None:
            ufunc_into(xp, xp.add, out, bias, out=out)

    @staticmethod
    def _affine(xp: Any, values: Array, scale: Array, bias: Array | None, out: Array) -> None:
        """out = values · scale + bias (already shaped to broadcast), rounded once."""
        with np.errstate(all="ignore"):
            values *= scale
            if bias is not None:
                values += bias
        out[...] = values


class LayerNormalizationOp(Standardization):
    """Standardize over the axes from `axis` on; Scale and B broadcast to those axes' shape.

    Mean and InvStdDev (optional outputs) have X's shape with the normalized axes set to 1 and
    the element type stash_type, which also sets the precision of the statistics. Exact:
    exact_layer_norm_arrays, in float64 whatever stash_type says, rounded once into each output.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", -1))
        self.epsilon = float(node.attr("epsilon", 1e-5))
        self.stash_type = int(node.attr("stash_type", DType.FLOAT))
        if self.stash_type not in (DType.FLOAT, DType.BFLOAT16, DType.DOUBLE, DType.FLOAT16):
            raise node.invalid(f"LayerNormalization: stash_type {self.stash_type} is not a float")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS)
        x = ctx.shape(0)
        axis = _normalized_axis(self, self.axis, len(x))
        normalized = x[axis:]
        for i in (1, 2):
            if ctx.has(i) and not _broadcasts_to(ctx.shape(i), normalized):
                raise self.node.bad_input(
                    f"LayerNormalization of X {x} over axes from {axis}: input {i} of shape "
                    f"{ctx.shape(i)} does not broadcast to {normalized}",
                    self.node.inputs[i],
                )
        stats = (*x[:axis], *(1,) * len(normalized))
        specs = [ctx.output(ctx.dtype(0), x)]
        specs += [ctx.output(self.stash_type, stats) for _ in self.node.outputs[1:3]]
        return specs

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """Small float32 rows with constant scale and bias (`small_rows.SmallRows`, which `run`
        also takes for them): its work arrays and the tiled scale and bias made once."""
        x, out = step.specs[0], step.outputs
        constants = (*step.constants, None)[1:3]
        given = (*step.specs, None)[1:3]
        if (
            len(out) != 1
            or self.stash_type != DType.FLOAT
            or not all(
                spec is None or (spec.dtype == DType.FLOAT and value is not None)
                for spec, value in zip((x, *given), (0, *constants), strict=True)
            )
        ):
            return None
        axis = self.axis % len(x.shape)
        cols = math.prod(x.shape[axis:])
        rows = math.prod(x.shape[:axis])
        if not fits_small_rows(rows, cols):
            return None
        tiled = [
            None if value is None else ctx.xp.tile(value.reshape(-1), (rows, 1))
            for value in constants
        ]
        if any(t is not None and t.shape != (rows, cols) for t in tiled):
            return None
        kernel = SmallRows(ctx.xp, rows, cols, self.epsilon, *tiled)
        shape = (rows, cols)

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            kernel(inputs[0].reshape(shape), outputs[0].reshape(shape))

        return call

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        xp = ctx.xp
        axis = self.axis % x.ndim
        if ctx.exact:
            statistics = (*outputs[1:], None, None)[:2]
            ctx.kernels.exact_layer_norm_arrays(
                x, scale, bias, axis, self.epsilon, outputs[0], *statistics
            )
            return
        stash = numpy_dtype_for_onnx(self.stash_type)
        compute = _compute_dtype(xp, x.dtype, stash)
        normalized = math.prod(x.shape[axis:])
        if (
            len(outputs) == 1
            and outputs[0].flags.c_contiguous
            and x.dtype == compute == outputs[0].dtype == scale.dtype == np.float32
            and x.size
            and scale.size == normalized
            and (bias is None or bias.size == normalized)
        ):
            rows = (-1, normalized)
            if fits_small_rows(x.size // normalized, normalized):
                kernel = SmallRows(
                    xp, x.size // normalized, normalized, self.epsilon, scale.reshape(-1),
                    None if bias is None else bias.reshape(-1),
                )  # fmt: skip
                with quiet():
                    kernel(x.reshape(rows), outputs[0].reshape(rows))
                return
            self._standardize_rows(
                ctx, x.reshape(rows), self.epsilon, outputs[0].reshape(rows),
                scale.reshape(-1), None if bias is None else bias.reshape(-1),
            )  # fmt: skip
            return
        values, mean, inv_std = self._standardize(
            xp, x, tuple(range(axis, x.ndim)), self.epsilon, compute
        )
        self._affine(
            xp, values, scale.astype(compute), None if bias is None else bias.astype(compute),
            outputs[0],
        )  # fmt: skip
        for out, statistic in zip(outputs[1:], (mean, inv_std), strict=False):
            out[...] = statistic


class InstanceNormalizationOp(Standardization):
    """Standardize each (sample, channel) over its spatial axes; scale and B per channel.
    Exact: exact_normalization.standardize64 over the spatial axes, then · scale + B, in
    float64, rounded once."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.epsilon = float(node.attr("epsilon", 1e-5))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS if self.node.opset >= 22 else IEEE_FLOATS)
        x = ctx.shape(0)
        if len(x) < 3:
            raise self.node.bad_input(
                f"InstanceNormalization needs an input (N, C, D1, …), not shape {x}",
                self.node.inputs[0],
            )
        for i in (1, 2):
            if ctx.shape(i) != (x[1],):
                raise self.node.bad_input(
                    f"InstanceNormalization of X {x}: input {i} has shape {ctx.shape(i)}, not "
                    f"({x[1]},)",
                    self.node.inputs[i],
                )
        return [ctx.output(ctx.dtype(0), x)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x, scale, bias = inputs[:3]
        xp = ctx.xp
        shape = (-1, *(1,) * (x.ndim - 2))
        if ctx.exact:
            exact_affine(
                ctx.kernels.xp, x, tuple(range(2, x.ndim)), self.epsilon,
                scale.reshape(shape), bias.reshape(shape), outputs[0],
            )  # fmt: skip
            return
        compute = _compute_dtype(xp, x.dtype)
        fast = x.dtype == compute == outputs[0].dtype == scale.dtype == bias.dtype == np.float32
        if fast and outputs[0].flags.c_contiguous:
            if x.size:
                rows = (x.shape[0] * x.shape[1], -1)
                per_row = (xp.tile(scale, x.shape[0]), xp.tile(bias, x.shape[0]))
                self._standardize_rows(
                    ctx, x.reshape(rows), self.epsilon, outputs[0].reshape(rows), *per_row, True
                )
            return
        values, _, _ = self._standardize(xp, x, tuple(range(2, x.ndim)), self.epsilon, compute)
        self._affine(
            xp, values, scale.astype(compute).reshape(shape),
            bias.astype(compute).reshape(shape), outputs[0],
        )  # fmt: skip


class GroupNormalizationOp(Standardization):
    """Standardize each sample's channels in `num_groups` groups of consecutive channels.

    Scale and bias are per group at opset 18 and per channel from opset 21, where stash_type
    sets the precision of the statistics (float32 by default). Exact: standardize64 over each
    group in float64 whatever stash_type says, then · scale + bias, rounded once.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.groups = int(node.attr("num_groups"))
        self.epsilon = float(node.attr("epsilon", 1e-5))
        self.stash_type = int(node.attr("stash_type", DType.FLOAT))
        if self.groups < 1:
            raise node.invalid(f"GroupNormalization: num_groups {self.groups} must be ≥ 1")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS)
        x = ctx.shape(0)
        if len(x) < 2 or x[1] % self.groups:
            raise self.node.bad_input(
                f"GroupNormalization needs an input (N, C, …) with C divisible by num_groups "
                f"{self.groups}, not shape {x}",
                self.node.inputs[0],
            )
        per = self.groups if self.node.opset < 21 else x[1]
        for i in (1, 2):
            if ctx.shape(i) != (per,):
                raise self.node.bad_input(
                    f"GroupNormalization of X {x}: input {i} has shape {ctx.shape(i)}, not "
                    f"({per},)",
                    self.node.inputs[i],
                )
        return [ctx.output(ctx.dtype(0), x)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x, scale, bias = inputs[:3]
        xp = ctx.xp
        if ctx.exact:
            self._run_exact(ctx.kernels.xp, x, scale, bias, outputs[0])
            return
        compute = _compute_dtype(xp, x.dtype, numpy_dtype_for_onnx(self.stash_type))
        out = outputs[0]
        fast = x.dtype == compute == out.dtype == scale.dtype == bias.dtype == np.float32
        if fast and out.flags.c_contiguous:
            if x.size:
                self._run_rows(ctx, x, scale, bias, out)
            return
        grouped = x.reshape(x.shape[0], self.groups, -1)
        values, _, _ = self._standardize(xp, grouped, (2,), self.epsilon, compute)
        if self.node.opset < 21:
            shape = (1, self.groups, 1)
        else:
            values = values.reshape(x.shape)
            shape = (1, -1, *(1,) * (x.ndim - 2))
        self._affine(
            xp, values, scale.astype(compute).reshape(shape),
            bias.astype(compute).reshape(shape), outputs[0].reshape(values.shape),
        )  # fmt: skip

    def _run_rows(self, ctx: RunContext, x: Array, scale: Array, bias: Array, out: Array) -> None:
        """Fast mode on float32: each (sample, group) one row of `_standardize_rows`, with the
        per-group scale folded in (opset 18), or then · scale + bias per channel (opset 21)."""
        xp = ctx.xp
        samples = x.shape[0]
        rows = (samples * self.groups, -1)
        if self.node.opset < 21:
            per_row = (xp.tile(scale, samples), xp.tile(bias, samples))
            self._standardize_rows(
                ctx, x.reshape(rows), self.epsilon, out.reshape(rows), *per_row, True
            )
            return
        self._standardize_rows(ctx, x.reshape(rows), self.epsilon, out.reshape(rows))
        channels = out.reshape(samples * x.shape[1], -1)
        with quiet():
            ufunc_into(xp, xp.multiply, channels, xp.tile(scale, samples)[:, None], out=channels)
            ufunc_into(xp, xp.add, channels, xp.tile(bias, samples)[:, None], out=channels)

    def _run_exact(self, xp: Any, x: Array, scale: Array, bias: Array, out: Array) -> None:
        grouped = widen(xp, x).reshape(x.shape[0], self.groups, -1)
        values, _, _ = standardize64(xp, grouped, (2,), self.epsilon)
        shape = (1, self.groups, 1) if self.node.opset < 21 else (1, -1, *(1,) * (x.ndim - 2))
        if self.node.opset >= 21:
            values = values.reshape(x.shape)
        with np.errstate(all="ignore"):
            values *= widen(xp, scale).reshape(shape)
            values += widen(xp, bias).reshape(shape)
        store(xp, out.reshape(values.shape), values)


def root_mean_square_rows(
    xp: Any, x: Array, epsilon: float, out: Array, scale: Array, inv_rms: Array | None = None
) -> None:
    """Fast mode on float32: each row of the 2-D `x` over its root mean square, times `scale`
    (one value per column), x · 1/√(mean(x²) + ε) · scale, into `out` (which may share x's
    memory), and the (rows, 1) statistic 1/√(mean(x²) + ε) into `inv_rms` when given: a
    batch of row dot products (one read of x), then two broadcast passes, a block of rows at a
    time (as `Standardization._standardize_rows`)."""
    rows, cols = x.shape
    f = x.dtype.type
    inverse_count = f(1.0 / cols)
    with quiet():
        for block in row_blocks(rows, cols, STANDARDIZE_BLOCKS):
            values, target = x[block], out[block]
            factor = xp.matmul(values[:, None, :], values[:, :, None]).reshape(-1, 1)
            xp.multiply(factor, inverse_count, out=factor)
            xp.add(factor, f(epsilon), out=factor)
            xp.sqrt(factor, out=factor)
            xp.reciprocal(factor, out=factor)
            ufunc_into(xp, xp.multiply, values, factor, out=target)
            ufunc_into(xp, xp.multiply, target, scale, out=target)
            if inv_rms is not None:
                inv_rms[block] = factor


def exact_affine(
    xp: Any,
    x: Array,
    axes: tuple[int, ...],
    epsilon: float,
    scale: Array,
    bias: Array | None,
    out: Array,
    centered: bool = True,
) -> tuple[Array | None, Array]:
    """Exact mode: out = standardize64(x) · scale (+ bias) in float64, rounded once; returns
    the float64 mean (None uncentered) and inverse deviation."""
    values, mean, inv_std = standardize64(xp, widen(xp, x), axes, epsilon, centered)
    with np.errstate(all="ignore"):
        values *= widen(xp, scale)
        if bias is not None:
            values += widen(xp, bias)
    store(xp, out, values)
    return mean, inv_std


class LpNormalizationOp(Operator):
    """x / ‖x‖_p along `axis` (p is 1 or 2); a zero norm gives 0 rather than NaN. Exact:
    exact_normalization.lp_normalize64, rounded once."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", -1))
        self.p = int(node.attr("p", 2))
        if self.p not in (1, 2):
            raise node.invalid(f"LpNormalization: p must be 1 or 2, not {self.p}")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS if self.node.opset >= 22 else IEEE_FLOATS)
        _normalized_axis(self, self.axis, len(ctx.shape(0)))
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x = inputs[0]
        xp = ctx.xp
        axis = self.axis % x.ndim
        if ctx.exact:
            xp = ctx.kernels.xp
            store(xp, outputs[0], lp_normalize64(xp, widen(xp, x), axis, self.p))
            return
        values = x.astype(_compute_dtype(xp, x.dtype))
        with np.errstate(all="ignore"):
            if self.p == 1:
                norm = xp.sum(xp.abs(values), axis=axis, keepdims=True)
            else:
                norm = xp.sqrt(xp.sum(values * values, axis=axis, keepdims=True))
            values /= xp.where(norm == 0, 1, norm)
        outputs[0][...] = values


class LRNOp(Operator):
    """Local response normalization across channels (AlexNet, Inception v1):
    y = x / (bias + alpha/size · Σ x²)^beta, the sum over channels c − ⌊(size−1)/2⌋ ..
    c + ⌈(size−1)/2⌉ that exist. The window sums come from one cumulative sum over the
    zero-padded channel axis. Exact: exact_normalization.lrn64 (the window added in channel
    order, the power by pow64), rounded once."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.size = int(node.attr("size"))
        if self.size < 1:
            raise node.invalid(f"LRN: size must be positive, not {self.size}")
        self.alpha = float(node.attr("alpha", 1e-4))
        self.beta = float(node.attr("beta", 0.75))
        self.bias = float(node.attr("bias", 1.0))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS if self.node.opset >= 13 else IEEE_FLOATS)
        if len(ctx.shape(0)) < 3:
            raise self.node.bad_input(
                f"LRN needs an (N, C, ...) input, got shape {list(ctx.shape(0))}",
                self.node.inputs[0],
            )
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x = inputs[0]
        xp = ctx.xp
        if ctx.exact:
            xp = ctx.kernels.xp
            lrn = lrn64(xp, widen(xp, x), self.size, self.alpha, self.beta, self.bias)
            store(xp, outputs[0], lrn)
            return
        values = x.astype(_compute_dtype(xp, x.dtype))
        before, after = (self.size - 1) // 2, self.size // 2
        squares = values * values
        padding = [(0, 0)] * x.ndim
        padding[1] = (before + 1, after)
        running = xp.cumsum(xp.pad(squares, padding), axis=1)
        channels = x.shape[1]
        window = running[:, self.size : self.size + channels] - running[:, :channels]
        with np.errstate(all="ignore"):
            scale = (self.bias + (self.alpha / self.size) * window) ** self.beta
            outputs[0][...] = values / scale


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether `shape` broadcasts one way (NumPy rules) to `target`."""
    return len(shape) <= len(target) and all(
        d in (1, t) for d, t in zip(shape[::-1], target[::-1], strict=False)
    )


DEFS: tuple[OpDef, ...] = (
    OpDef("BatchNormalization", 1, BatchNormalizationOp),
    OpDef("LayerNormalization", 17, LayerNormalizationOp),
    OpDef("InstanceNormalization", 1, InstanceNormalizationOp),
    OpDef("GroupNormalization", 18, GroupNormalizationOp),
    OpDef("LpNormalization", 1, LpNormalizationOp),
    OpDef("LRN", 1, LRNOp),
)
