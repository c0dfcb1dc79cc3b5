"""Operators of the com.microsoft domain that onnxruntime's optimizers and quantizers leave in
exported models: fused activations, FusedMatMul, FusedConv and the fused layer normalizations.

Each reuses its ONNX family's code (activation formulas, Conv's shape checks and kernel,
MatMul's shapes and kernel, the standardization of LayerNormalization); what is added here is
only the fusion around it. Narrow floats compute in float32 and round once into the output.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from onemodel.backends.activations import float32_kernel
from onemodel.backends.broadcasting import ufunc_into
from onemodel.backends.fp_errors import quiet
from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.operators import activations
from onemodel.graph.operators.attention import (
    AttentionMath,
    DotProductAttention,
    ExactAttentionMath,
    RMSNormalizationOp,
    RotaryEmbeddingOp,
    SwishOp,
)
from onemodel.graph.operators.base import (
    MICROSOFT,
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.binary import check_same_type
from onemodel.graph.operators.broadcast import unidirectional
from onemodel.graph.operators.conv import SlidingWindows, conv_channels, conv_group
from onemodel.graph.operators.matmul import as_matrices, matmul_shape
from onemodel.graph.operators.normalization import (
    Standardization,
    exact_affine,
    root_mean_square_rows,
)
from onemodel.graph.operators.quantize import DynamicQuantizeLinearOp, QuantizedProduct
from onemodel.graph.operators.unary import FLOATS, IEEE_FLOATS, Formula, widened
from onemodel.tensors import DType


def _bad(node: NodeInfo, index: int, message: str) -> Exception:
    return node.bad_input(f"{node.op_type}: {message}", node.inputs[index])


def _working_type(xp: Any, dtype: Any) -> Any:
    """float64 for double inputs, else float32 (float16 and bfloat16 compute widened)."""
    return xp.float64 if dtype == np.float64 else xp.float32


# -- fused activations ------------------------------------------------------------------------


class QuickGelu(SwishOp):
    """Swish with alpha 1.702 by default (the sigmoid approximation of Gelu; 1: SiLU)."""

    default_alpha = 1.702


class BiasActivation(Operator):
    """An activation of X + bias, the bias (optional for FastGelu) broadcasting to X's last
    axis; the sum is formed widened and the activation's formula applied before one rounding.
    Exact: the float64 sum, then the activation's exact formula, rounded once."""

    in_place_input = 0
    supports_exact = True
    activation: ClassVar[type[Formula]]
    approximate: ClassVar[str]

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.formula = self.activation(
            NodeInfo(node.name, "Gelu", "", 20, node.inputs[:1], node.outputs[:1],
                     {"approximate": self.approximate})
        )  # fmt: skip

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS)
        check_same_type(ctx, (0, 1))
        if ctx.has(1):
            bias = ctx.shape(1)
            if len(bias) != 1 or not ctx.shape(0) or bias[0] != ctx.shape(0)[-1]:
                raise _bad(
                    self.node, 1, f"bias of shape {bias} is not X's last axis {ctx.shape(0)}"
                )
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        if ctx.exact:
            given = [x for x in inputs if x is not None]
            ctx.kernels.exact_map_arrays(self._exact, given, outputs[0])
            return
        xp = ctx.xp
        x = widened(xp, inputs[0])
        bias = inputs[1] if len(inputs) > 1 else None
        out = outputs[0]
        if x.dtype == out.dtype == np.float32 and (bias is None or bias.dtype == np.float32):
            # float32: the sum rounds to float32 either way; then the Gelu's fast kernel in
            # place (backends/activations.py), not its float64 formula (7x its time at 256k).
            kernel, work = self.formula.fast_kernel
            with quiet():
                if bias is None:
                    xp.copyto(out, x)
                else:
                    ufunc_into(xp, xp.add, x, bias, out=out)
                float32_kernel(kernel, work, xp, out, out, ctx.scratch)
            return
        with np.errstate(all="ignore"):
            if bias is not None:
                x = x + widened(xp, bias)
            xp.copyto(outputs[0], self.formula.formula(xp, x), casting="unsafe")

    def _exact(self, xp: Any, x: Array, bias: Array | None = None) -> Array:
        return self.formula.exact_formula(xp, x if bias is None else x + bias)


class FastGelu(BiasActivation):
    """Gelu's tanh approximation of X (+ bias)."""

    activation, approximate = activations.Gelu, "tanh"


class BiasGelu(BiasActivation):
    """Gelu (erf form) of A + B."""

    activation, approximate = activations.Gelu, "none"

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        if not ctx.has(1):
            raise self.node.invalid("BiasGelu needs its bias input B")
        return super().infer(ctx)


# -- FusedMatMul ------------------------------------------------------------------------------


class FusedMatMul(Operator):
    """alpha · op(A) · op(B): transA/transB swap the last two axes; transBatchA/transBatchB
    first move axis 0 behind the batch axes (so a (M, B…, K) operand multiplies as (B…, M, K)),
    which is how onnxruntime folds a Transpose into the product. Exact: the exact matmul
    rounded once, then alpha one rounded product (Gemm's rule)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 1.0))
        self.trans = (bool(node.attr("transA", 0)), bool(node.attr("transB", 0)))
        self.trans_batch = (bool(node.attr("transBatchA", 0)), bool(node.attr("transBatchB", 0)))

    def _permutation(self, rank: int, index: int) -> tuple[int, ...]:
        axes = list(range(rank))
        if rank >= 2 and self.trans_batch[index]:
            axes = [*axes[1:-1], 0, rank - 1]
        if rank >= 2 and self.trans[index]:
            axes[-2], axes[-1] = axes[-1], axes[-2]
        return tuple(axes)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS)
        check_same_type(ctx, (0, 1))
        shapes = [
            tuple(ctx.shape(i)[axis] for axis in self._permutation(len(ctx.shape(i)), i))
            for i in (0, 1)
        ]
        return [ctx.output(ctx.dtype(0), matmul_shape(self.node, *shapes))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        a, b = (xp.transpose(x, self._permutation(x.ndim, i)) for i, x in enumerate(inputs[:2]))
        a, b = as_matrices(a, b)
        (out,) = outputs
        batch = out.shape[: max(a.ndim, b.ndim) - 2]
        product = out.reshape(*batch, a.shape[-2], b.shape[-1])
        kernels = ctx.kernels
        (kernels.exact_matmul_arrays if ctx.exact else kernels.matmul_arrays)(a, b, product)
        if self.alpha != 1.0:
            xp.multiply(product, product.dtype.type(self.alpha), out=product)


# -- FusedConv --------------------------------------------------------------------------------


def _activation(node: NodeInfo, name: str, params: list[float]) -> Operator | None:
    """The ONNX activation `name` with `params` as its attributes, as onnxruntime's fused
    activations take them (LeakyRelu alpha; HardSigmoid alpha, beta; Clip min, max)."""
    kinds: dict[str, tuple[type[Operator], tuple[str, ...]]] = {
        "Relu": (activations.Relu, ()),
        "Tanh": (activations.Tanh, ()),
        "Sigmoid": (activations.Sigmoid, ()),
        "LeakyRelu": (activations.LeakyRelu, ("alpha",)),
        "HardSigmoid": (activations.HardSigmoid, ("alpha", "beta")),
        "Clip": (activations.Clip, ("min", "max")),
    }
    if not name:
        return None
    if name not in kinds:
        raise node.unsupported(f"FusedConv activation {name!r} is not supported")
    kind, names = kinds[name]
    if len(params) < len(names):
        raise node.invalid(f"FusedConv activation {name} needs activation_params {names}")
    attributes = {key: float(value) for key, value in zip(names, params, strict=False)}
    # Opset 6: Clip's bounds are attributes there.
    return kind(NodeInfo(node.name, name, "", 6, node.outputs[:1], node.outputs[:1], attributes))


class FusedConv(Operator):
    """activation(Conv(X, W, B) + Z): Conv's attributes and checks, then the optional sum
    input Z (of Y's shape) and a fused activation applied in place. Exact: the same bits as
    the unfused Conv, Add and activation (exact conv, then one rounded add each, then the
    activation's exact path)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.windows = SlidingWindows(node)
        self.group = conv_group(node)
        params = [float(p) for p in node.attr("activation_params", [])]
        self.activation = _activation(node, str(node.attr("activation", "")), params)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, IEEE_FLOATS)
        check_same_type(ctx, tuple(range(len(ctx))))
        x, w = ctx.shape(0), ctx.shape(1)
        _, channels = conv_channels(self.node, x, w, self.group)
        if ctx.has(2) and ctx.shape(2) != (channels,):
            raise _bad(self.node, 2, f"B of shape {ctx.shape(2)} must be ({channels},)")
        kernel = self.windows.kernel_for(w[2:], len(x) - 2)
        y = (x[0], channels, *self.windows.place(x[2:], kernel).out_spatial)
        if len(ctx) > 3 and ctx.has(3) and ctx.shape(3) != y:
            raise _bad(self.node, 3, f"Z of shape {ctx.shape(3)} is not the output's {y}")
        return [ctx.output(ctx.dtype(0), y)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        x, w = inputs[0], inputs[1]
        bias, z = [*inputs[2:4], None, None][:2]
        (out,) = outputs
        if out.size == 0:
            return
        placement = self.windows.place(x.shape[2:], w.shape[2:])
        window = (placement.strides, placement.pads_begin, placement.dilations, self.group)
        if ctx.exact:
            ctx.kernels.exact_conv_arrays(x, w, out, *window)
        else:
            ctx.kernels.conv_arrays(x, w, out, *window, scratch=ctx.scratch)
        with np.errstate(all="ignore"):
            if bias is not None:
                xp.add(out, bias.reshape(-1, *(1,) * (out.ndim - 2)), out=out)
            if z is not None:
                xp.add(out, z, out=out)
            if self.activation is not None:
                self.activation.run(ctx, [out], [out])


# -- fused layer normalizations ---------------------------------------------------------------


class SkipNormalization(Standardization):
    """Normalization over the last axis of input + skip (+ bias), with gamma (and beta).

    Outputs: the result, then optional mean, inverse standard deviation (float, the
    statistics' shape) and the sum input + skip + bias itself. The skip is input's shape or
    broadcasts to it from its last two axes; gamma, beta and bias are 1-D of the hidden size.
    `root_mean_square` drops the centring (the "simplified", RMS form, which has no beta).
    Exact: the sum (input + skip) + bias in float64, standardize64 of it over the last axis,
    · gamma (+ beta), each output rounded once from its float64 value.
    """

    supports_exact = True

    root_mean_square: ClassVar[bool]

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.epsilon = float(node.attr("epsilon", 1e-5))

    def _vector_inputs(self) -> dict[int, str]:
        """Index → name of the 1-D inputs of the hidden size."""
        if self.root_mean_square:
            return {2: "gamma", 3: "bias"}
        return {2: "gamma", 3: "beta", 4: "bias"}

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS)
        check_same_type(ctx, tuple(range(len(ctx))))
        x = ctx.shape(0)
        if len(x) not in (2, 3):
            raise _bad(self.node, 0, f"input of shape {x} is not (B, S, H) or (T, H)")
        hidden = x[-1]
        unidirectional(ctx, 1, x)
        if len(ctx.shape(1)) < 2 and len(x) == 3:
            raise _bad(self.node, 1, f"skip of shape {ctx.shape(1)} does not fit input {x}")
        for index, name in self._vector_inputs().items():
            if index < len(ctx) and ctx.has(index) and ctx.shape(index) != (hidden,):
                raise _bad(
                    self.node, index, f"{name} of shape {ctx.shape(index)} is not ({hidden},)"
                )
        stats = (*x[:-1], 1)
        specs = [ctx.output(ctx.dtype(0), x)]
        for position in range(1, len(self.node.outputs)):
            if position < 3:
                specs.append(ctx.output(DType.FLOAT, stats))
            else:
                specs.append(ctx.output(ctx.dtype(0), x))
        return specs

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        given = list(inputs) + [None] * 5
        x, skip, gamma = given[0], given[1], given[2]
        beta = None if self.root_mean_square else given[3]
        bias = given[3] if self.root_mean_square else given[4]
        if ctx.exact:
            self._run_exact(ctx.kernels.xp, x, skip, gamma, beta, bias, outputs)
            return
        if self._run_rows(ctx, x, skip, gamma, beta, bias, outputs):
            return
        compute = _working_type(xp, x.dtype)
        total = x.astype(compute) + skip.astype(compute)
        if bias is not None:
            total += bias.astype(compute)
        if len(outputs) > 3:
            outputs[3][...] = total
        values, mean, inv_std = self._statistics(xp, total, compute)
        self._affine(
            xp, values, gamma.astype(compute), None if beta is None else beta.astype(compute),
            outputs[0],
        )  # fmt: skip
        for out, statistic in zip(outputs[1:3], (mean, inv_std), strict=False):
            out[...] = statistic

    def _run_rows(
        self,
        ctx: RunContext,
        x: Array,
        skip: Array,
        gamma: Array,
        beta: Array | None,
        bias: Array | None,
        outputs: Any,
    ) -> bool:
        """Fast mode on float32 without the statistics outputs: the sum written once (into
        the sum output when there is one, else the result), then standardized or RMS-scaled
        row by row from it (`_standardize_rows`, normalization.root_mean_square_rows).
        False: the general path."""
        xp = ctx.xp
        out = outputs[0]
        wanted = [bool(name) for name in self.node.outputs[1:3]]
        operands = [a for a in (x, skip, gamma, beta, bias) if a is not None]
        if (
            any(wanted)
            or any(a.dtype != np.float32 for a in operands)
            or out.dtype != np.float32
            or not out.flags.c_contiguous
            or not x.size
        ):
            return False
        total = outputs[3] if len(outputs) > 3 and self.node.outputs[3] else out
        if not total.flags.c_contiguous:
            return False
        with quiet():
            ufunc_into(xp, xp.add, x, skip, out=total)
            if bias is not None:
                ufunc_into(xp, xp.add, total, bias, out=total)
        rows = (-1, x.shape[-1])
        if self.root_mean_square:
            root_mean_square_rows(xp, total.reshape(rows), self.epsilon, out.reshape(rows), gamma)
        else:
            self._standardize_rows(
                ctx, total.reshape(rows), self.epsilon, out.reshape(rows), gamma, beta
            )
        return True

    def _run_exact(
        self,
        xp: Any,
        x: Array,
        skip: Array,
        gamma: Array,
        beta: Array | None,
        bias: Array | None,
        outputs: Any,
    ) -> None:
        with np.errstate(all="ignore"):
            total = widen(xp, x) + widen(xp, skip)
            if bias is not None:
                total += widen(xp, bias)
        if len(outputs) > 3:
            store(xp, outputs[3], total)
        mean, inv_std = exact_affine(
            xp, total, (total.ndim - 1,), self.epsilon, gamma, beta, outputs[0],
            centered=not self.root_mean_square,
        )  # fmt: skip
        if mean is None:  # the RMS form's mean output is zero, as in fast mode
            mean = xp.zeros_like(inv_std)
        for out, statistic in zip(outputs[1:3], (mean, inv_std), strict=False):
            store(xp, out, statistic)

    def _statistics(self, xp: Any, total: Array, compute: Any) -> tuple[Array, Array, Array]:
        if not self.root_mean_square:
            return self._standardize(xp, total, (-1,), self.epsilon, compute)
        with np.errstate(all="ignore"):
            inv_std = 1 / xp.sqrt(xp.mean(total * total, axis=-1, keepdims=True) + self.epsilon)
            return total * inv_std, xp.zeros_like(inv_std), inv_std


class SkipLayerNormalization(SkipNormalization):
    root_mean_square = False


class SkipSimplifiedLayerNormalization(SkipNormalization):
    root_mean_square = True


class SimplifiedLayerNormalization(RMSNormalizationOp):
    """RMS normalization over the axes from `axis` on: X / √(mean(X²) + ε) · scale, with the
    optional second output the inverse root mean square (stash_type, the statistics' shape).
    The statistics are computed in stash_type but never narrower than float32. The attributes
    are RMSNormalization's; the outputs differ (X's type, and the optional statistics)."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS)
        x = ctx.shape(0)
        if not -len(x) <= self.axis < len(x):
            raise _bad(self.node, 0, f"axis {self.axis} is outside X's rank {len(x)}")
        axis = self.axis % len(x)
        unidirectional(ctx, 1, x[axis:])
        specs = [ctx.output(ctx.dtype(0), x)]
        if len(self.node.outputs) > 1:
            specs.append(ctx.output(self.stash_type, (*x[:axis], *(1,) * (len(x) - axis))))
        return specs

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        if ctx.exact:  # RMSNormalization's exact recipe, which also writes the statistic
            super().run(ctx, inputs, outputs)
            return
        xp = ctx.xp
        x, scale = inputs[:2]
        if self._run_rows(x, scale, outputs[0], outputs[1] if len(outputs) > 1 else None, xp):
            return
        compute = xp.float64 if self.stash_type == DType.DOUBLE else xp.float32
        values = x.astype(compute)
        axes = tuple(range(self.axis % x.ndim, x.ndim))
        with np.errstate(all="ignore"):
            inv_rms = 1 / xp.sqrt(xp.mean(values * values, axis=axes, keepdims=True) + self.epsilon)
            values *= inv_rms
            values *= scale.astype(compute)
        outputs[0][...] = values
        if len(outputs) > 1:
            outputs[1][...] = inv_rms


# -- attention --------------------------------------------------------------------------------


class HeadsAttention(DotProductAttention):
    """What the contrib attentions share: num_heads, scale and mask_filter_value, and
    softmax(Q·Kᵀ·scale + additive mask)·V over (B, N, S, H) heads in the working type.

    Masked keys get mask_filter_value added (not −inf), as onnxruntime does; `unidirectional`
    sets the future keys' scores to the lowest float, so a query whose past keys are all masked
    still attends to them evenly rather than to its future. Exact: ExactAttentionMath (float64
    throughout but the products, rounded into float32 for the narrower types; the lowest float
    is float64's), the projections by its product, the output rounded once."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.heads = int(node.attr("num_heads"))
        if self.heads < 1:
            raise node.invalid(f"{node.op_type}: num_heads {self.heads} must be ≥ 1")
        scale = float(node.attr("scale", 0.0))
        self.scale = scale or None
        self.mask_filter = float(node.attr("mask_filter_value", -10000.0))
        self.causal = bool(node.attr("unidirectional", 0))

    def _check_attention_bias(
        self, ctx: InferContext, index: int, batch: int, queries: int, keys: int
    ) -> None:
        if index < len(ctx) and ctx.has(index):
            bias = ctx.shape(index)
            if (
                len(bias) != 4
                or bias[0] not in (1, batch)
                or bias[1] not in (1, self.heads)
                or bias[2:] != (queries, keys)
            ):
                raise _bad(
                    self.node, index,
                    f"attention_bias of shape {bias} is not ({batch} or 1, {self.heads} or 1, "
                    f"{queries}, {keys})",
                )  # fmt: skip

    def _key_mask(self, xp: Any, mask: Array | None, shape: tuple[int, ...], compute: Any) -> Array:
        """The additive mask of a key-padding `mask`: (B,) valid lengths, (B, T) or (B, S, T)
        flags (nonzero keeps), as (B, 1, S or 1, T); plus the causal mask."""
        batch, _, queries, keys = shape
        additive = xp.zeros((batch, 1, 1, keys), dtype=compute)
        if mask is not None:
            if mask.ndim == 1:
                keep = xp.arange(keys)[None, :] < mask[:, None]
                additive = xp.where(keep, 0.0, self.mask_filter)[:, None, None, :]
            else:
                keep = mask.reshape(batch, 1, -1, keys) != 0
                additive = xp.where(keep, 0.0, self.mask_filter)
            additive = additive.astype(compute)
        if self.causal:
            past = keys - queries
            future = xp.arange(keys)[None, :] > xp.arange(queries)[:, None] + past
            lowest = compute(np.finfo(compute).min)
            additive = xp.where(future, lowest, additive + xp.zeros_like(future, dtype=compute))
        return additive

    def _attend(
        self, ops: AttentionMath, q: Array, k: Array, v: Array, additive: Array,
        bias: Array | None,
    ) -> Array:  # fmt: skip
        """softmax(q·kᵀ·scale + additive (+ bias))·v for (B, N, S, H) heads → (B, S, N·Hv)."""
        xp, compute = ops.xp, ops.compute
        scale = self.scale if self.scale is not None else 1 / math.sqrt(q.shape[-1])
        with np.errstate(all="ignore"):
            scores = ops.matmul(ops.cast(q), xp.swapaxes(ops.cast(k), -1, -2))
            scores *= compute(scale)
            scores += additive
            if bias is not None:
                scores += ops.cast(bias)
            probs = ops.softmax(scores)
            context = ops.matmul(probs, ops.cast(v))
        b, n, s, h = context.shape
        return xp.transpose(context, (0, 2, 1, 3)).reshape(b, s, n * h)

    @staticmethod
    def _heads(xp: Any, x: Array, heads: int) -> Array:
        """(B, S, N·H) → (B, N, S, H)."""
        b, s, hidden = x.shape
        return xp.transpose(x.reshape(b, s, heads, hidden // heads), (0, 2, 1, 3))

    def _check_mask(
        self, ctx: InferContext, index: int, batch: int, queries: int, keys: int
    ) -> None:
        if index >= len(ctx) or not ctx.has(index):
            return
        self.check_types(ctx, frozenset({DType.INT32}), index)
        mask = ctx.shape(index)
        if mask not in ((batch,), (batch, keys), (batch, queries, keys)):
            raise self.node.unsupported(
                f"{self.node.op_type}: mask of shape {mask} is not one onemodel runs "
                f"(({batch},) lengths, ({batch}, {keys}) or ({batch}, {queries}, {keys}) flags)",
                self.node.inputs[index],
            )


class ContribAttention(HeadsAttention):
    """Attention (com.microsoft): self-attention of input (B, S, D) through packed weights
    (D, Dq + Dk + Dv) and bias, with mask_index and attention_bias; no KV cache (past,
    present, past_sequence_length), rotary or Megatron/start-end masks, which are refused."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        sizes = [int(v) for v in node.attr("qkv_hidden_sizes", [])]
        if sizes and (len(sizes) != 3 or sizes[0] != sizes[1] or min(sizes) < 1):
            raise node.invalid(f"Attention: qkv_hidden_sizes {sizes} must be 3 positive sizes "
                               "with Dq = Dk")  # fmt: skip
        self.sizes = sizes or None
        if node.attr("do_rotary", 0):
            raise node.unsupported("Attention with do_rotary is not supported")
        if len(node.outputs) > 1 and node.outputs[1]:
            raise node.unsupported("Attention's present output (a KV cache) is not supported")

    def _split(self, total: int) -> list[int]:
        if self.sizes is not None:
            return self.sizes
        return [total // 3] * 3

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        self.check_types(ctx, FLOATS, 0, 1, 2)
        check_same_type(ctx, (0, 1, 2))
        for index in (4, 6):
            if index < len(ctx) and ctx.has(index):
                raise node.unsupported("Attention with a KV cache is not supported")
        x, w = ctx.shape(0), ctx.shape(1)
        if len(x) != 3 or len(w) != 2 or w[0] != x[2]:
            raise _bad(node, 1, f"weights of shape {w} do not project input {x}")
        sizes = self._split(w[1])
        if sum(sizes) != w[1] or any(size % self.heads for size in sizes):
            raise _bad(node, 1, f"weights {w} do not split into Q, K, V of {self.heads} heads")
        if ctx.has(2) and ctx.shape(2) != (w[1],):
            raise _bad(node, 2, f"bias of shape {ctx.shape(2)} is not ({w[1]},)")
        batch, queries = x[0], x[1]
        self._check_mask(ctx, 3, batch, queries, queries)
        self._check_attention_bias(ctx, 5, batch, queries, queries)
        return [ctx.output(ctx.dtype(0), (batch, queries, sizes[2]))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        given = list(inputs) + [None] * 6
        x, w, bias, mask, attention_bias = given[0], given[1], given[2], given[3], given[5]
        ops = _attention_math(ctx, x.dtype)
        xp, compute = ops.xp, ops.compute
        projected = ops.matmul(ops.cast(x), ops.cast(w))
        if bias is not None:
            projected += ops.cast(bias)
        dq, dk, _ = self._split(w.shape[1])
        q, k, v = (
            self._heads(xp, part, self.heads)
            for part in (
                projected[..., :dq],
                projected[..., dq : dq + dk],
                projected[..., dq + dk :],
            )
        )
        additive = self._key_mask(xp, mask, (x.shape[0], 1, x.shape[1], x.shape[1]), compute)
        ops.store(outputs[0], self._attend(ops, q, k, v, additive, attention_bias))


class MultiHeadAttention(HeadsAttention):
    """MultiHeadAttention (com.microsoft): query (B, S, D), key (B, L, D), value (B, L, Dv)
    projected already, with the optional packed bias (D + D + Dv) added, key_padding_mask and
    attention_bias. Packed QKV/KV inputs, per-head (B, N, L, H) keys and the KV cache are
    refused."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if any(node.outputs[1:]):
            raise node.unsupported("MultiHeadAttention's present outputs are not supported")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        present = [i for i in range(len(ctx)) if ctx.has(i)]
        if not {1, 2} <= set(present) or any(i >= 6 for i in present):
            raise node.unsupported("MultiHeadAttention needs separate key and value, without "
                                   "a KV cache")  # fmt: skip
        self.check_types(ctx, FLOATS, 0, 1, 2, 3, 5)
        check_same_type(ctx, (0, 1, 2, 3, 5))
        q, k, v = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        if len(q) != 3 or len(k) != 3 or len(v) != 3:
            raise node.unsupported(f"MultiHeadAttention of query {q}, key {k}, value {v}: only "
                                   "3-D (B, S, D) ones are supported")  # fmt: skip
        if k[:2] != v[:2] or k[0] != q[0] or k[2] != q[2] or q[2] % self.heads or v[2] % self.heads:
            raise _bad(node, 1, f"query {q}, key {k} and value {v} do not fit {self.heads} heads")
        if ctx.has(3) and ctx.shape(3) != (2 * q[2] + v[2],):
            raise _bad(node, 3, f"bias of shape {ctx.shape(3)} is not ({2 * q[2] + v[2]},)")
        self._check_mask(ctx, 4, q[0], q[1], k[1])
        self._check_attention_bias(ctx, 5, q[0], q[1], k[1])
        return [ctx.output(ctx.dtype(0), (q[0], q[1], v[2]))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        given = list(inputs) + [None] * 6
        q, k, v, bias, mask, attention_bias = given[:6]
        ops = _attention_math(ctx, q.dtype)
        xp, compute = ops.xp, ops.compute
        q, k, v = (ops.cast(x) for x in (q, k, v))
        if bias is not None:
            d = q.shape[2]
            bias = ops.cast(bias)
            q, k, v = q + bias[:d], k + bias[d : 2 * d], v + bias[2 * d :]
        heads = [self._heads(xp, x, self.heads) for x in (q, k, v)]
        shape = (q.shape[0], 1, q.shape[1], k.shape[1])
        additive = self._key_mask(xp, mask, shape, compute)
        ops.store(outputs[0], self._attend(ops, *heads, additive, attention_bias))


def _attention_math(ctx: RunContext, dtype: Any) -> AttentionMath:
    """Exact mode's attention numerics, or fast mode's in the working type of `dtype`."""
    if ctx.exact:
        return ExactAttentionMath(ctx.kernels, dtype)
    return AttentionMath(ctx.xp, _working_type(ctx.xp, dtype))


class ContribRotaryEmbedding(Operator):
    """RotaryEmbedding (com.microsoft): ONNX's rotation (its operator runs it) with inputs
    (input, position_ids, cos_cache, sin_cache). position_ids are (B, S) rows of the caches, or
    one (1,) offset p meaning rows p … p + S − 1. A 3-D (B, S, N·H) input without num_heads has
    heads of the rotated size 2 · cache columns. Exact: RotaryEmbedding's."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.heads = int(node.attr("num_heads", 0))
        self.rotary_dim = int(node.attr("rotary_embedding_dim", 0))
        if node.attr("is_packed_batching", 0):
            raise node.unsupported("RotaryEmbedding with is_packed_batching is not supported")
        if self.rotary_dim and not self.heads:
            raise node.invalid("RotaryEmbedding with rotary_embedding_dim needs num_heads")
        attributes = {"interleaved": int(node.attr("interleaved", 0))}
        if self.rotary_dim:
            attributes["rotary_embedding_dim"] = self.rotary_dim
        self.rotation = RotaryEmbeddingOp(
            NodeInfo(node.name, "RotaryEmbedding", "", 23, node.inputs, node.outputs, attributes)
        )

    def _head_size(self, x: tuple[int, ...], cache: tuple[int, ...]) -> int:
        if len(x) == 4:
            return x[3]
        return x[2] // self.heads if self.heads else 2 * cache[1]

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        self.check_types(ctx, FLOATS, 0, 2, 3)
        check_same_type(ctx, (0, 2, 3))
        self.check_types(ctx, frozenset({DType.INT64}), 1)
        x, positions, cos, sin = (ctx.shape(i) for i in range(4))
        if len(x) not in (3, 4) or len(cos) != 2 or sin != cos:
            raise _bad(node, 2, f"input {x} with caches {cos} and {sin} is not (B, S, N·H) or "
                       "(B, N, S, H) with (P, d/2) caches")  # fmt: skip
        batch, length = x[0], x[1] if len(x) == 3 else x[2]
        head = self._head_size(x, cos)
        rotary = self.rotary_dim or head
        if head < 1 or (len(x) == 3 and x[2] % head) or rotary > head or cos[1] * 2 != rotary:
            raise _bad(node, 2, f"caches {cos} do not rotate {rotary} of {head} features of {x}")
        if positions not in ((batch, length), (1,)):
            raise _bad(node, 1, f"position_ids of shape {positions} is not ({batch}, {length}) "
                       "or (1,)")  # fmt: skip
        return [ctx.output(ctx.dtype(0), x)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        x, positions, cos, sin = inputs[:4]
        out = outputs[0]
        if x.ndim == 3:  # (B, S, N·H) as a (B, N, S, H) view
            head = self._head_size(x.shape, cos.shape)
            split = (*x.shape[:2], x.shape[2] // head, head)
            x = xp.transpose(x.reshape(split), (0, 2, 1, 3))
            out = xp.transpose(out.reshape(split), (0, 2, 1, 3))
        if positions.shape == (1,):
            rows = positions.reshape(1, 1) + xp.arange(x.shape[2], dtype=positions.dtype)
            positions = xp.broadcast_to(rows, (x.shape[0], x.shape[2]))
        self.rotation.run(ctx, [x, cos, sin, positions], [out])


# -- quantized products -----------------------------------------------------------------------


class DynamicQuantizeMatMul(QuantizedProduct):
    """A (float32) quantized to uint8 as DynamicQuantizeLinear does, times the int8/uint8 B
    shifted by its zero point, rescaled by both scales (b's per tensor or per column), plus the
    optional bias (N,). The integer product is exact (float64). Exact: the quantization's and
    the integer product's rules, then (a_scale · b_scale), the product converted to float32 and
    multiplied by it, + bias: one correctly rounded float32 operation each."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.quantize = DynamicQuantizeLinearOp(
            NodeInfo(node.name, "DynamicQuantizeLinear", "", 11, node.inputs[:1], ("", "", ""))
        )

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, frozenset({DType.FLOAT}), 0, 2, 4)
        self.check_types(ctx, frozenset({DType.INT8, DType.UINT8}), 1, 3)
        shape = matmul_shape(self.node, ctx.shape(0), ctx.shape(1))
        if len(ctx.shape(1)) < 2:
            raise _bad(self.node, 1, f"B of shape {ctx.shape(1)} is not a matrix")
        self.check_operand_parameter(ctx, 2, 1, per_row=False)
        if ctx.has(3):
            self.check_zero_point(ctx, 3, 1)
            self.check_operand_parameter(ctx, 3, 1, per_row=False)
        columns = ctx.shape(1)[-1]
        if len(ctx) > 4 and ctx.has(4) and ctx.shape(4) != (columns,):
            raise _bad(self.node, 4, f"bias of shape {ctx.shape(4)} is not ({columns},)")
        return [ctx.output(DType.FLOAT, shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        given = list(inputs) + [None] * 5
        a, b, b_scale, b_zero, bias = given[:5]
        quantized = [xp.empty(a.shape, dtype=xp.uint8), xp.empty((), dtype=xp.float32),
                     xp.empty((), dtype=xp.uint8)]  # fmt: skip
        self.quantize.run(ctx, [a], quantized)
        a_q, a_scale, a_zero = quantized
        product = self.multiply(ctx, a_q, a_zero, b, b_zero)
        scale = xp.multiply(a_scale, self.shaped(b_scale, b, per_row=False))
        result = xp.multiply(product.astype(xp.float32), scale)
        if bias is not None:
            result = xp.add(result, bias)
        outputs[0][...] = result.reshape(outputs[0].shape)


class MatMulNBits(Operator):
    """A (…, K) · Bᵀ with B (N, K) stored as `bits`-bit integers in blocks of block_size along
    K, each block with its scale and zero point: B = (q − zero) · scale. Values are packed low
    bits first; the zero points are packed the same way per row of N (default 2^(bits − 1)),
    or given as floats of A's type. g_idx (act-order) is refused. Exact: the weights
    (q − zero) · scale, one float32 rounding each; A · Wᵀ by the exact matmul rounded once
    into the output; + bias one rounded addition."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.k = int(node.attr("K"))
        self.n = int(node.attr("N"))
        self.bits = int(node.attr("bits", 4))
        self.block = int(node.attr("block_size"))
        if self.bits not in (2, 4, 8):
            raise node.unsupported(f"MatMulNBits with bits = {self.bits} is not supported")
        if self.block < 16 or self.block & (self.block - 1) or min(self.k, self.n) < 1:
            raise node.invalid(f"MatMulNBits: block_size {self.block} must be a power of 2 "
                               f"≥ 16, K {self.k} and N {self.n} positive")  # fmt: skip
        self.blocks = -(-self.k // self.block)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        self.check_types(ctx, frozenset({DType.FLOAT, DType.FLOAT16, DType.BFLOAT16}), 0, 2)
        check_same_type(ctx, (0, 2))
        self.check_types(ctx, frozenset({DType.UINT8, DType.INT32}), 1)
        a = ctx.shape(0)
        blob = self.block * self.bits // 8
        if not a or a[-1] != self.k:
            raise _bad(node, 0, f"A of shape {a} does not end in K = {self.k}")
        if ctx.shape(1) != (self.n, self.blocks, blob) or ctx.dtype(1) != DType.UINT8:
            raise _bad(node, 1, f"B of shape {ctx.shape(1)} is not uint8 ({self.n}, "
                       f"{self.blocks}, {blob})")  # fmt: skip
        if math.prod(ctx.shape(2)) != self.n * self.blocks:
            raise _bad(node, 2, f"scales of shape {ctx.shape(2)} do not hold N × blocks")
        if len(ctx) > 3 and ctx.has(3):
            packed = -(-self.blocks * self.bits // 8)
            if ctx.dtype(3) == DType.UINT8:
                expected = self.n * packed
            else:
                check_same_type(ctx, (0, 3))
                expected = self.n * self.blocks
            if math.prod(ctx.shape(3)) != expected:
                raise _bad(node, 3, f"zero_points of shape {ctx.shape(3)} do not hold N × blocks")
        if len(ctx) > 4 and ctx.has(4):
            raise node.unsupported("MatMulNBits with g_idx is not supported")
        if len(ctx) > 5 and ctx.has(5):
            check_same_type(ctx, (0, 5))
            if ctx.shape(5) != (self.n,):
                raise _bad(node, 5, f"bias of shape {ctx.shape(5)} is not ({self.n},)")
        return [ctx.output(ctx.dtype(0), (*a[:-1], self.n))]

    def _unpack(self, xp: Any, packed: Array, count: int) -> Array:
        """(rows, bytes) of low-bits-first values → (rows, count) of them, as float32."""
        per_byte = 8 // self.bits
        shifts = xp.arange(per_byte, dtype=xp.uint8) * self.bits
        values = (packed[..., None] >> shifts) & ((1 << self.bits) - 1)
        return values.reshape(packed.shape[0], -1)[:, :count].astype(xp.float32)

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        given = list(inputs) + [None] * 6
        a, b, scales, zeros, bias = given[0], given[1], given[2], given[3], given[5]
        padded = self.blocks * self.block
        q = self._unpack(xp, b.reshape(self.n, -1), padded).reshape(self.n, self.blocks, -1)
        if zeros is None:
            zero = xp.float32(1 << (self.bits - 1))
        elif zeros.dtype == xp.uint8:
            zero = self._unpack(xp, zeros.reshape(self.n, -1), self.blocks)[..., None]
        else:
            zero = zeros.astype(xp.float32).reshape(self.n, self.blocks, 1)
        weights = xp.multiply(
            xp.subtract(q, zero), scales.astype(xp.float32).reshape(self.n, self.blocks, 1)
        )
        weights = weights.reshape(self.n, padded)[:, : self.k]
        if ctx.exact:
            out = outputs[0]
            product = out.reshape(-1, out.shape[-1])
            ctx.kernels.exact_matmul_arrays(a.reshape(-1, self.k), weights.T, product)
            if bias is not None:
                xp.add(out, bias, out=out)
            return
        result = xp.matmul(a.astype(xp.float32), weights.T)
        if bias is not None:
            result += bias.astype(xp.float32)
        xp.copyto(outputs[0], result, casting="unsafe")


DEFS: tuple[OpDef, ...] = (
    OpDef("Gelu", 1, activations.Gelu, domain=MICROSOFT),
    OpDef("FastGelu", 1, FastGelu, domain=MICROSOFT),
    OpDef("BiasGelu", 1, BiasGelu, domain=MICROSOFT),
    OpDef("QuickGelu", 1, QuickGelu, domain=MICROSOFT),
    OpDef("FusedMatMul", 1, FusedMatMul, domain=MICROSOFT),
    OpDef("FusedConv", 1, FusedConv, domain=MICROSOFT),
    OpDef("Attention", 1, ContribAttention, domain=MICROSOFT),
    OpDef("MultiHeadAttention", 1, MultiHeadAttention, domain=MICROSOFT),
    OpDef("RotaryEmbedding", 1, ContribRotaryEmbedding, domain=MICROSOFT),
    OpDef("DynamicQuantizeMatMul", 1, DynamicQuantizeMatMul, domain=MICROSOFT),
    OpDef("MatMulNBits", 1, MatMulNBits, domain=MICROSOFT),
    OpDef("SkipLayerNormalization", 1, SkipLayerNormalization, domain=MICROSOFT),
    OpDef("SkipSimplifiedLayerNormalization", 1, SkipSimplifiedLayerNormalization,
          domain=MICROSOFT),
    # onnxruntime registers this one in the default domain (exporters write it so).
    OpDef("SimplifiedLayerNormalization", 1, SimplifiedLayerNormalization),
)  # fmt: skip
