"""Transformer building blocks: Attention, ai.onnx.preview FlexAttention, LinearAttention,
RMSNormalization, RotaryEmbedding, CausalConvWithState, Swish and SwiGLU.

float16 and bfloat16 are computed in float32 (float64 when an operand is double) and rounded
once into the outputs, where onnx's reference rounds after every step: results agree within the
conformance tolerance, and are closer to the exact values. The one rounding the specs define
on purpose is kept: attention scales Q and K by √scale *cast to Q's type* (the function bodies'
`Cast(ScaleFactorSqrt, to=T1)`), which for float16 and bfloat16 changes the scores measurably.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends import activations as activation_kernels
from onemodel.backends import exact_activations
from onemodel.backends.exact_arrays import exp64
from onemodel.backends.exact_elementary import tanh64
from onemodel.backends.fp_errors import quiet
from onemodel.backends.ieee_float32 import narrow, store, widen
from onemodel.backends.plain_attention import PlainAttention
from onemodel.backends.small_rows import SmallRootMeanSquare, fits_small_rows
from onemodel.graph.operators.activations import WithAlpha
from onemodel.graph.operators.axes import INT64_ONLY, normalize_axis
from onemodel.graph.operators.base import (
    ELEMENTWISE,
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
from onemodel.graph.operators.binary import check_same_type
from onemodel.graph.operators.broadcast import unidirectional
from onemodel.graph.operators.exact_products import working_product
from onemodel.graph.operators.normalization import exact_affine, root_mean_square_rows
from onemodel.graph.operators.unary import FLOATS, widened
from onemodel.tensors import DType, numpy_dtype_for_onnx
from onemodel.tensors.shapes import TensorShapeError, broadcast_shapes

NARROW_FLOATS = frozenset({DType.FLOAT, DType.FLOAT16, DType.BFLOAT16})
# Attention masks: bool (attend or not) or any number (added to the scores).
MASK_TYPES = frozenset(DType)
_NEG_INF = float("-inf")


def compute_dtype(xp: Any, *arrays: Array) -> Any:
    """float64 when any operand is double, else float32: the working type of a kernel."""
    return xp.float64 if any(a.dtype == np.float64 for a in arrays) else xp.float32


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _bad(node: NodeInfo, index: int, message: str) -> Exception:
    return node.bad_input(f"{node.op_type}: {message}", node.inputs[index])


# -- scaled dot-product attention -----------------------------------------------------------


class AttentionMath:
    """The numerics of the attention family in fast mode: the working type `compute` (float32,
    or float64 for double operands), the library's matmul, tanh and the in-place softmax."""

    exact = False

    def __init__(self, xp: Any, compute: Any) -> None:
        self.xp, self.compute = xp, compute

    def cast(self, x: Array) -> Array:
        return x.astype(self.compute)

    def matmul(self, a: Array, b: Array) -> Array:
        return self.xp.matmul(a, b)

    def tanh(self, x: Array) -> Array:
        return self.xp.tanh(x)

    def softmax(self, scores: Array) -> Array:
        return DotProductAttention._softmax(self.xp, scores)

    def store(self, out: Array, value: Array) -> None:
        out[...] = value


class ExactAttentionMath(AttentionMath):
    """Exact mode's: float64 from exactly widened operands of type `dtype`, the products
    `working_product`'s (float32, float16, bfloat16: the operands rounded to float32, each
    element the exact dot product rounded once into float32; float64: the ordered float64
    sum), tanh64 and the exact softmax (exact_activations.masked_softmax), every output
    rounded once."""

    exact = True

    def __init__(self, kernels: Any, dtype: Any) -> None:
        super().__init__(kernels.xp, kernels.xp.float64)
        self.product = working_product(kernels, dtype)

    def cast(self, x: Array) -> Array:
        return widen(self.xp, x)

    def matmul(self, a: Array, b: Array) -> Array:
        return self.product(a, b)

    def tanh(self, x: Array) -> Array:
        return tanh64(self.xp, x)

    def softmax(self, scores: Array) -> Array:
        return exact_activations.masked_softmax(self.xp, scores)

    def store(self, out: Array, value: Array) -> None:
        store(self.xp, out, value)


class DotProductAttention(Operator):
    """Scores Q·Kᵀ, a softmax over the keys and the weighted sum of V, for (B, H, S, D) inputs.

    Grouped-query attention shares each K/V head with `Hq / Hkv` consecutive query heads; the
    products run on (B, Hkv, group, S, D) views instead of repeating K and V.
    """

    @staticmethod
    def _grouped_scores(xp: Any, q: Array, k: Array, matmul: Any = None) -> Array:
        """q (B, Hq, Sq, D) · k (B, Hkv, T, D)ᵀ → (B, Hq, Sq, T), in their (equal) type."""
        b, hq, sq, d = q.shape
        hkv = k.shape[1]
        grouped = q.reshape(b, hkv, hq // hkv, sq, d)
        scores = (matmul or xp.matmul)(grouped, xp.swapaxes(k, -1, -2)[:, :, None])
        return scores.reshape(b, hq, sq, k.shape[2])

    @staticmethod
    def _grouped_values(xp: Any, probs: Array, v: Array, matmul: Any = None) -> Array:
        """probs (B, Hq, Sq, T) · v (B, Hkv, T, Dv) → (B, Hq, Sq, Dv)."""
        b, hq, sq, t = probs.shape
        hkv = v.shape[1]
        grouped = probs.reshape(b, hkv, hq // hkv, sq, t)
        return (matmul or xp.matmul)(grouped, v[:, :, None]).reshape(b, hq, sq, v.shape[3])

    @staticmethod
    def _scaled(ops: AttentionMath, x: Array, root: float) -> Array:
        """x · √scale in the working type; √scale was rounded to x's type as the spec does."""
        with np.errstate(all="ignore"):
            return ops.cast(x) * ops.compute(root)

    @staticmethod
    def _root_scale(scale: float | None, head_size: int, dtype: Any) -> float:
        """√scale rounded to the inputs' element type (the function bodies cast it to T1);
        scale defaults to 1/√head_size (1 for empty heads, whose scores are all 0 anyway)."""
        if scale is None:
            scale = 1 / math.sqrt(head_size) if head_size else 1.0
        return float(np.asarray(math.sqrt(scale), dtype=np.float64).astype(dtype))

    @staticmethod
    def _scale_attribute(node: NodeInfo) -> float | None:
        scale = node.attr("scale", None)
        if scale is not None and scale < 0:
            raise node.invalid(f"{node.op_type}: scale {scale} is negative (Q and K take √scale)")
        return None if scale is None else float(scale)

    @staticmethod
    def _softmax(xp: Any, scores: Array) -> Array:
        """Softmax over the last axis, in place; a row of −inf only gives zeros, not NaN."""
        peak = xp.max(scores, axis=-1, keepdims=True)
        peak[peak == _NEG_INF] = 0
        scores -= peak
        xp.exp(scores, out=scores)
        total = xp.sum(scores, axis=-1, keepdims=True)
        total[total == 0] = 1
        scores /= total
        return scores

    def _check_heads(self, hq: int, hkv: int) -> None:
        if hkv < 1 or hq % hkv:
            raise _bad(
                self.node, 1,
                f"{hq} query heads cannot share {hkv} key/value heads (Hq must be a multiple "
                "of Hkv)",
            )  # fmt: skip


class AttentionOp(DotProductAttention):
    """Attention (opsets 23, 24, 25): scaled dot-product attention with masks and a KV cache.

    Inputs Q, K, V (3-D packed (B, S, H·D) with q_num_heads / kv_num_heads, or 4-D), attn_mask,
    past_key, past_value and (from 24) nonpad_kv_seqlen; outputs Y, present_key, present_value
    and qk_matmul_output. Masks combine as the spec's additive bias: a boolean mask, the causal
    frontier (bottom-right aligned by the cache offset), the sliding window (25) and the
    padding of nonpad_kv_seqlen each make keys −inf; a float mask is added. A query row with
    every key masked gives zeros (the errata of onnx 1.23), not NaN. Exact: ExactAttentionMath
    (float64 throughout, whatever softmax_precision says), each output rounded once.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.scale = self._scale_attribute(node)
        self.is_causal = bool(node.attr("is_causal", 0))
        self.q_heads = _optional_int(node.attr("q_num_heads", None))
        self.kv_heads = _optional_int(node.attr("kv_num_heads", None))
        self.softcap = float(node.attr("softcap", 0.0))
        self.mode = int(node.attr("qk_matmul_output_mode", 0))
        precision = node.attr("softmax_precision", None)
        self.softmax_type = None if precision is None else int(precision)
        self.left = int(node.attr("left_window_size", -1)) if node.opset >= 25 else -1
        self.right = int(node.attr("right_window_size", -1)) if node.opset >= 25 else -1
        if self.mode not in (0, 1, 2, 3):
            raise node.invalid(f"Attention: qk_matmul_output_mode {self.mode} is not 0 to 3")
        if self.softmax_type not in (None, *FLOATS):
            raise node.invalid(f"Attention: softmax_precision {precision} is not a float type")
        if self.softcap < 0:
            raise node.invalid(f"Attention: softcap {self.softcap} is negative")
        if min(self.left, self.right) < -1:
            raise node.invalid("Attention: window sizes must be -1 (unbounded) or ≥ 0")
        for name, heads in (("q_num_heads", self.q_heads), ("kv_num_heads", self.kv_heads)):
            if heads is not None and heads < 1:
                raise node.invalid(f"Attention: {name} {heads} must be ≥ 1")

    # -- infer ---------------------------------------------------------------------------

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        self.check_types(ctx, FLOATS, 0, 1, 2, 4, 5)
        self.check_types(ctx, MASK_TYPES, 3)
        check_same_type(ctx, (0, 1, 4))
        check_same_type(ctx, (2, 5))
        if ctx.has(6):
            self.check_types(ctx, INT64_ONLY, 6)
        q, k, v = self._heads_layout(ctx)
        batch, hq, sq, d = q
        _, hkv, kv_len, dv = v
        if k != (batch, hkv, kv_len, d):
            raise _bad(
                node, 1,
                f"Q {ctx.shape(0)}, K {ctx.shape(1)} and V {ctx.shape(2)} do not agree on "
                "batch, heads, key length and head size",
            )  # fmt: skip
        self._check_heads(hq, hkv)
        past = self._past_length(ctx, batch, hkv, d, dv)
        total = past + kv_len
        if ctx.has(6) and ctx.shape(6) != (batch,):
            raise _bad(node, 6, f"nonpad_kv_seqlen of shape {ctx.shape(6)} is not ({batch},)")
        if ctx.has(3):
            self._check_mask(ctx, (batch, hq, sq, total))
        t1, t2 = ctx.dtype(0), ctx.dtype(2)
        y = (batch, sq, hq * dv) if len(ctx.shape(0)) == 3 else (batch, hq, sq, dv)
        specs = [
            ctx.output(t1, y),
            ctx.output(t1, (batch, hkv, total, d)),
            ctx.output(t2, (batch, hkv, total, dv)),
            ctx.output(t1, (batch, hq, sq, total)),
        ]
        return specs[: len(node.outputs)]

    def _heads_layout(self, ctx: InferContext) -> list[tuple[int, ...]]:
        """Q, K and V as (B, H, S, D) shapes."""
        node = self.node
        shapes = [ctx.shape(i) for i in range(3)]
        ranks = {len(s) for s in shapes}
        if ranks not in ({3}, {4}):
            raise _bad(node, 0, f"Q, K and V must all be 3-D or all 4-D, not {shapes}")
        if ranks == {4}:
            return [(b, h, s, d) for b, h, s, d in shapes]
        if self.q_heads is None or self.kv_heads is None:
            raise node.invalid("Attention with 3-D inputs needs q_num_heads and kv_num_heads")
        layouts = []
        for index, (b, s, hidden) in enumerate(shapes):
            heads = self.q_heads if index == 0 else self.kv_heads
            if hidden % heads:
                raise _bad(node, index, f"hidden size {hidden} is not a multiple of {heads} heads")
            layouts.append((b, heads, s, hidden // heads))
        return layouts

    def _past_length(self, ctx: InferContext, batch: int, hkv: int, d: int, dv: int) -> int:
        node = self.node
        if ctx.has(4) != ctx.has(5):
            raise node.invalid("Attention needs past_key and past_value together")
        if not ctx.has(4):
            return 0
        if ctx.has(6):
            raise node.invalid("Attention: nonpad_kv_seqlen cannot be used with past_key")
        past_key, past_value = ctx.shape(4), ctx.shape(5)
        if (
            len(past_key) != 4
            or past_key[:2] != (batch, hkv)
            or past_key[3] != d
            or past_value != (batch, hkv, past_key[2], dv)
        ):
            raise _bad(
                node, 4,
                f"past_key {past_key} and past_value {past_value} do not fit (B, Hkv, P, D) = "
                f"({batch}, {hkv}, P, {d}) and (B, Hkv, P, Dv) with Dv = {dv}",
            )  # fmt: skip
        return past_key[2]

    def _check_mask(self, ctx: InferContext, target: tuple[int, ...]) -> None:
        """The mask broadcasts to (B, Hq, Sq, T); a shorter last axis is padded with −inf."""
        shape = ctx.shape(3)
        fits = len(shape) <= 4 and (not shape or shape[-1] <= target[-1])
        if fits:
            padded = (*shape[:-1], target[-1]) if shape else shape
            try:
                fits = broadcast_shapes(padded, target) == target
            except TensorShapeError:
                fits = False
        if not fits:
            raise _bad(self.node, 3, f"attn_mask of shape {shape} does not broadcast to {target}")

    # -- run -----------------------------------------------------------------------------

    def _plain(self, arrays: Sequence[Any]) -> bool:
        """Whether a fast run with these inputs (arrays or specs, None where absent) is
        `PlainAttention`'s: 4-D float32 Q, K and V with one query head per key/value head, Y
        alone wanted, and nothing that masks, caps or caches."""
        if len(arrays) < 3 or any(a is not None for a in arrays[3:]):
            return False
        if any(self.node.outputs[1:]) or self.softcap > 0 or self.is_causal:
            return False
        if self.left >= 0 or self.right >= 0 or self.softmax_type not in (None, DType.FLOAT):
            return False
        q, k, v = arrays[:3]
        shapes = [a.shape for a in (q, k, v)]
        types = {a.dtype for a in (q, k, v)}
        return (
            all(len(shape) == 4 for shape in shapes)
            and types in ({DType.FLOAT}, {np.dtype(np.float32)})
            and shapes[0][1] == shapes[1][1]
            and min(shapes[0][2], shapes[1][2]) > 0
        )

    def _plain_kernel(self, xp: Any, q_shape: tuple[int, ...], k_shape: tuple[int, ...]) -> Any:
        root = self._root_scale(self.scale, q_shape[-1], np.float32)
        return PlainAttention(xp, q_shape, k_shape, root)

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """`PlainAttention` (which `run` also takes for such inputs) with its work arrays made
        once for this run state."""
        if ctx.exact or not self._plain(step.specs):
            return None
        kernel = self._plain_kernel(ctx.xp, step.specs[0].shape, step.specs[1].shape)

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            kernel(inputs[0], inputs[1], inputs[2], outputs[0])

        return call

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        if not ctx.exact and self._plain(inputs):
            with quiet():
                kernel = self._plain_kernel(xp, inputs[0].shape, inputs[1].shape)
                kernel(*inputs[:3], outputs[0])
            return
        q, k, v, mask, past_key, past_value = (*inputs[:6], *[None] * (6 - len(inputs[:6])))
        nonpad = inputs[6] if len(inputs) > 6 else None
        packed = q.ndim == 3
        if packed:
            q, k, v = (
                self._unpack(x, h) for x, h in ((q, self.q_heads), (k, self.kv_heads),
                                                (v, self.kv_heads))
            )  # fmt: skip
        if past_key is not None:
            k = xp.concatenate((past_key, k), axis=2)
            v = xp.concatenate((past_value, v), axis=2)
        wanted = [bool(name) for name in self.node.outputs] + [False] * 3
        for index, present in ((1, k), (2, v)):
            if wanted[index]:
                outputs[index][...] = present
        ops = (
            ExactAttentionMath(ctx.kernels, q.dtype)
            if ctx.exact
            else AttentionMath(xp, compute_dtype(xp, q, v))
        )
        y = self._attend(ops, q, k, v, mask, nonpad, past_key, outputs[3] if wanted[3] else None)
        if packed:
            y = xp.swapaxes(y, 1, 2).reshape(outputs[0].shape)
        ops.store(outputs[0], y)

    @staticmethod
    def _unpack(x: Array, heads: int) -> Array:
        """(B, S, H·D) → (B, H, S, D) view."""
        b, s, hidden = x.shape
        return x.reshape(b, s, heads, hidden // heads).swapaxes(1, 2)

    def _attend(
        self, ops: AttentionMath, q: Array, k: Array, v: Array, mask: Array | None,
        nonpad: Array | None, past_key: Array | None, qk_out: Array | None,
    ) -> Array:  # fmt: skip
        """Y (B, Hq, Sq, Dv) in the working type; writes qk_matmul_output when asked."""
        xp, compute = ops.xp, ops.compute
        root = self._root_scale(self.scale, q.shape[-1], q.dtype)
        scores = self._grouped_scores(
            xp, self._scaled(ops, q, root), self._scaled(ops, k, root), ops.matmul
        )
        if qk_out is not None and self.mode == 0:
            ops.store(qk_out, scores)
        if self.softcap > 0:
            scores = ops.tanh(scores / compute(self.softcap)) * compute(self.softcap)
        if qk_out is not None and self.mode == 1:
            ops.store(qk_out, scores)
        past = 0 if past_key is None else past_key.shape[2]
        bias = self._bias(xp, mask, nonpad, scores.shape, past, compute, ops.cast)
        if bias is not None:
            scores = scores + bias
        if qk_out is not None and self.mode == 2:
            ops.store(qk_out, scores)
        probs = self._probabilities(ops, scores)
        if bias is not None and scores.shape[-1]:
            masked_rows = xp.max(bias, axis=-1, keepdims=True) == _NEG_INF
            probs = xp.where(masked_rows, compute(0), probs)
        if qk_out is not None and self.mode == 3:
            ops.store(qk_out, probs)
        return self._grouped_values(xp, probs, ops.cast(v), ops.matmul)

    def _probabilities(self, ops: AttentionMath, scores: Array) -> Array:
        """The softmax, in softmax_precision where that is narrower or wider than the working
        type (scores rounded to it before, probabilities after); exact: in float64."""
        xp = ops.xp
        if scores.shape[-1] == 0:
            return scores
        if self.softmax_type is None or ops.exact:
            return ops.softmax(scores)
        precision = numpy_dtype_for_onnx(self.softmax_type)
        if precision.itemsize > scores.dtype.itemsize:
            return self._softmax(xp, scores.astype(precision))
        if precision.itemsize < scores.dtype.itemsize:
            rounded = scores.astype(precision).astype(scores.dtype)
            return self._softmax(xp, rounded).astype(precision).astype(scores.dtype)
        return self._softmax(xp, scores)

    def _bias(
        self, xp: Any, mask: Array | None, nonpad: Array | None, shape: tuple[int, ...],
        past: int, compute: Any, cast: Any,
    ) -> Array | None:  # fmt: skip
        """The additive bias, broadcastable to (B, Hq, Sq, T), or None when nothing masks
        (`cast`: a float mask into the working type)."""
        bias = None
        if mask is not None:
            bias = (
                xp.where(mask, compute(0), compute(_NEG_INF))
                if mask.dtype == np.bool_
                else cast(mask)
            )
            bias = bias.reshape((1,) * (4 - bias.ndim) + bias.shape)
            short = shape[-1] - bias.shape[-1]
            if short > 0 and mask.ndim > 0:
                pad = xp.full((*bias.shape[:-1], short), _NEG_INF, dtype=compute)
                bias = xp.concatenate((bias, pad), axis=-1)
        allowed = self._allowed(xp, nonpad, shape[2], shape[3], past)
        if allowed is None:
            return bias
        return xp.where(allowed, compute(0) if bias is None else bias, compute(_NEG_INF))

    def _allowed(
        self, xp: Any, nonpad: Array | None, q_len: int, total: int, past: int
    ) -> Array | None:
        """The keys each query may see by the causal frontier, the window and the padding:
        (Sq, T), (B, 1, Sq, T) with nonpad_kv_seqlen, or None when none of them applies."""
        keys = xp.arange(total)
        rows = xp.arange(q_len).reshape(-1, 1)
        if nonpad is not None:
            lengths = nonpad.astype(xp.int64).reshape(-1, 1, 1, 1)
            position = rows + (lengths - q_len)  # bottom-right: offset = nonpad − Sq
        else:
            lengths, position = None, rows + past
        conditions = []
        if self.is_causal:
            conditions.append(keys <= position)
        if self.left >= 0:
            conditions.append(keys >= position - self.left)
        if self.right >= 0:
            conditions.append(keys <= position + self.right)
        if lengths is not None:
            conditions.append(keys < lengths)
        if not conditions:
            return None
        allowed = conditions[0]
        for condition in conditions[1:]:
            allowed = allowed & condition
        return allowed


class FlexAttentionOp(DotProductAttention):
    """ai.onnx.preview FlexAttention (version 1): softmax(mod(Q·Kᵀ·scale))·V, rank-4 inputs.

    Grouped-query heads as in Attention. The scores, softmax and product with V are in
    softmax_precision: float32 by default (double for double inputs), and float32 for the
    narrower types. The optional score_mod and prob_mod subgraphs map the (B, Hq, L, S) scores
    and probabilities, fed in softmax_precision; they run as nested executors of the session
    (values they read from enclosing graphs follow Q, K and V as extra inputs).

    Exact: Attention's recipe (ExactAttentionMath: float64 from exactly widened Q, K and V,
    Q·√scale and K·√scale one product each with √scale rounded to the inputs' type, the
    scores and probabilities · V by working_product, the exact masked softmax),
    whatever softmax_precision says; a modifier subgraph is fed its values rounded once into
    softmax_precision, runs exactly, and its result is widened exactly back to float64; the
    output rounded once.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.scale = self._scale_attribute(node)
        precision = node.attr("softmax_precision", None)
        self.softmax_type = None if precision is None else int(precision)
        if self.softmax_type not in (None, *FLOATS):
            raise node.invalid(f"FlexAttention: softmax_precision {precision} is not a float")
        self.score_mod = self._body("score_mod")
        self.prob_mod = self._body("prob_mod")

    def _body(self, name: str) -> Any:
        graph = self.node.attr(name, None)
        if graph is None:
            return None
        if self.node.compile_body is None:
            raise self.node.unsupported(f"FlexAttention: {name} needs a session to run it")
        return self.node.compile_body(graph)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS, 0, 1, 2)
        check_same_type(ctx, (0, 1, 2))
        q, k, v = (ctx.shape(i) for i in range(3))
        if not len(q) == len(k) == len(v) == 4 or k[0] != q[0] or k[3] != q[3] or v[:3] != k[:3]:
            raise _bad(
                self.node, 0,
                f"Q {q}, K {k} and V {v} are not (B, Hq, L, E), (B, Hkv, S, E), (B, Hkv, S, Ev)",
            )  # fmt: skip
        self._check_heads(q[1], k[1])
        return [ctx.output(ctx.dtype(2), (*q[:3], v[3]))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        q, k, v = inputs[:3]
        if self.softmax_type is None:
            precision = np.dtype(np.float64 if q.dtype == np.float64 else np.float32)
        else:
            precision = numpy_dtype_for_onnx(self.softmax_type)
        compute = xp.float64 if precision == np.float64 else xp.float32
        root = self._root_scale(self.scale, q.shape[-1], q.dtype)
        ops = ExactAttentionMath(ctx.kernels, q.dtype) if ctx.exact else AttentionMath(xp, compute)
        xp = ops.xp
        q, k = self._scaled(ops, q, root), self._scaled(ops, k, root)
        scores = self._grouped_scores(xp, q, k, ops.matmul)
        captured = dict(zip(self.node.captured, inputs[3:], strict=True))
        if self.score_mod is not None:
            scores = self._modified(ctx, self.score_mod, scores, precision, captured)
        probs = ops.softmax(scores) if scores.shape[-1] else scores
        if self.prob_mod is not None:
            probs = self._modified(ctx, self.prob_mod, probs, precision, captured)
        ops.store(outputs[0], self._grouped_values(xp, probs, ops.cast(v), ops.matmul))

    def _modified(
        self, ctx: RunContext, body: Any, values: Array, precision: Any, captured: dict
    ) -> Array:
        """The body applied to `values` (given in softmax_precision), in the working type
        (exact: rounded once into softmax_precision, the result widened exactly)."""
        first, *outer = body.input_names
        given = values.astype(precision)
        if ctx.exact and precision == np.float32:
            given = narrow(ctx.kernels.xp, values)
        feeds = {first: given, **{name: captured[name] for name in outer}}
        (result,) = body.run_named(feeds, ctx.guard)
        if tuple(result.shape) != values.shape:
            raise self.node.bad_input(
                f"FlexAttention: a modifier subgraph turned shape {values.shape} into "
                f"{tuple(result.shape)}"
            )
        if ctx.exact:
            return widen(ctx.kernels.xp, result)
        return result.astype(values.dtype)


class LinearAttentionOp(Operator):
    """LinearAttention (opset 27): the recurrence over a (B, Hkv, dk, dv) state, token by token.

    update_rule: linear S += k⊗v; gated S = e^g·S + k⊗v; delta S += β·k⊗(v − Sᵀk); gated_delta
    the delta rule on the decayed state. o = scale·qᵀS, each K/V head (and its state) shared by
    Hq / Hkv consecutive query heads. The state is kept in float32 (float64 is not a type of
    this operator) and rounded into present_state, of past_state's type or else query's.
    Exact: the same recurrence in float64 from exactly widened inputs, e^g by exp64, every
    product Sᵀk and qᵀS by working_product (float32 operands rounded), each other step one float64
    operation; both outputs rounded once.
    """

    RULES = ("linear", "gated", "delta", "gated_delta")
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.q_heads = int(node.attr("q_num_heads"))
        self.kv_heads = int(node.attr("kv_num_heads"))
        self.scale = float(node.attr("scale", 0.0))
        rule = node.attr("update_rule", "gated_delta")
        self.rule = rule.decode() if isinstance(rule, bytes) else str(rule)
        if self.rule not in self.RULES:
            raise node.invalid(f"LinearAttention: update_rule '{self.rule}' is not one of "
                               f"{', '.join(self.RULES)}")  # fmt: skip
        if self.kv_heads < 1 or self.q_heads < 1 or self.q_heads % self.kv_heads:
            raise node.invalid(
                f"LinearAttention: q_num_heads {self.q_heads} must be a positive multiple of "
                f"kv_num_heads {self.kv_heads}"
            )
        self.gated = self.rule in ("gated", "gated_delta")
        self.delta = self.rule in ("delta", "gated_delta")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        self.check_types(ctx, NARROW_FLOATS)
        check_same_type(ctx, (0, 1, 2, 4, 5))
        q, k, v = (ctx.shape(i) for i in range(3))
        if not len(q) == len(k) == len(v) == 3 or k[:2] != q[:2] or v[:2] != q[:2]:
            raise _bad(node, 0, f"query {q}, key {k} and value {v} must be (B, T, H·D) alike")
        b, t = q[:2]
        dk, dv = q[2] // self.q_heads, v[2] // self.kv_heads
        if q[2] % self.q_heads or v[2] % self.kv_heads or k[2] != self.kv_heads * dk:
            raise _bad(
                node, 1,
                f"query {q}, key {k} and value {v} do not split into {self.q_heads} query and "
                f"{self.kv_heads} key/value heads of one key size",
            )  # fmt: skip
        state = (b, self.kv_heads, dk, dv)
        if ctx.has(3) and ctx.shape(3) != state:
            raise _bad(node, 3, f"past_state of shape {ctx.shape(3)} is not {state}")
        if ctx.has(4) != self.gated or ctx.has(5) != self.delta:
            raise node.invalid(
                f"LinearAttention update_rule '{self.rule}' "
                f"{'needs' if self.gated else 'forbids'} decay and "
                f"{'needs' if self.delta else 'forbids'} beta"
            )
        if ctx.has(4) and ctx.shape(4) not in ((b, t, self.kv_heads), (b, t, self.kv_heads * dk)):
            raise _bad(node, 4, f"decay of shape {ctx.shape(4)} is not (B, T, Hkv[·dk])")
        if ctx.has(5) and ctx.shape(5) not in ((b, t, self.kv_heads), (b, t, 1)):
            raise _bad(node, 5, f"beta of shape {ctx.shape(5)} is not (B, T, Hkv) or (B, T, 1)")
        state_type = ctx.dtype(3) if ctx.has(3) else ctx.dtype(0)
        return [ctx.output(ctx.dtype(0), (b, t, self.q_heads * dv)), ctx.output(state_type, state)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        exact = ctx.exact
        xp = ctx.kernels.xp if exact else ctx.xp
        work = xp.float64 if exact else xp.float32
        exp = functools.partial(exp64, xp) if exact else xp.exp
        query, key, value, past, decay, beta = (*inputs[:6], *[None] * (6 - len(inputs[:6])))
        matmul = working_product(ctx.kernels, query.dtype) if exact else xp.matmul
        b, t, _ = query.shape
        hkv, group = self.kv_heads, self.q_heads // self.kv_heads
        dk = query.shape[2] // self.q_heads

        def heads(x: Array, count: int) -> Array:
            """(B, T, H·D) → (B, T, H, D) in the working type."""
            values = widen(xp, x) if exact else x.astype(work)
            return values.reshape(b, t, count, x.shape[2] // count)

        q, k, v = heads(query, self.q_heads), heads(key, hkv), heads(value, hkv)
        q = q.reshape(b, t, hkv, group, dk)
        gates = None if decay is None else exp(heads(decay, hkv))  # (B, T, Hkv, 1 | dk)
        rates = None if beta is None else heads(beta, beta.shape[2])  # (B, T, Hkv | 1, 1)
        if past is None:
            state = xp.zeros(outputs[1].shape, dtype=work)
        else:
            state = widen(xp, past) if exact else past.astype(work)
        scale = self.scale or (1 / math.sqrt(dk) if dk else 1.0)
        result = xp.empty((b, t, hkv, group, v.shape[-1]), dtype=work)
        with np.errstate(all="ignore"):
            for step in range(t):
                k_t, v_t = k[:, step], v[:, step]
                if gates is not None:
                    state *= gates[:, step][..., None]
                if rates is not None:
                    retrieved = matmul(k_t[:, :, None], state)[:, :, 0]  # Sᵀk: (B, Hkv, dv)
                    v_t = rates[:, step] * (v_t - retrieved)
                state += k_t[..., :, None] * v_t[..., None, :]
                result[:, step] = matmul(q[:, step], state) * work(scale)
        store(xp, outputs[0], result.reshape(outputs[0].shape))
        store(xp, outputs[1], state)


# -- normalization and positions ------------------------------------------------------------


class RMSNormalizationOp(Operator):
    """RMSNormalization (opset 23): X / √(mean(X²) + ε) · scale over the axes from `axis` on.

    The statistics are computed in stash_type, but never narrower than float32; the output
    has scale's element type (V), as the schema says. Exact: in float64 whatever stash_type
    says, inv_rms = 1 / sqrt(Σ x·x / n + ε) (ordered sum), x · inv_rms · scale, rounded once.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", -1))
        self.epsilon = float(node.attr("epsilon", 1e-5))
        self.stash_type = int(node.attr("stash_type", DType.FLOAT))
        if self.stash_type not in FLOATS:
            raise node.invalid(f"{node.op_type}: stash_type {self.stash_type} is not a float")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS)
        x = ctx.shape(0)
        normalize_axis(self.node, self.axis, len(x), value=self.node.inputs[0])
        unidirectional(ctx, 1, x)
        return [ctx.output(ctx.dtype(1), x)]

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """Small float32 rows with a constant scale of the normalized axes' shape and no
        statistic output (`small_rows.SmallRootMeanSquare`, the bits `run` gives them): its
        work array and the tiled scale made once."""
        x, scale = step.specs[0], (*step.constants, None)[1]
        if (
            ctx.exact
            or len(step.outputs) != 1
            or self.stash_type != DType.FLOAT
            or scale is None
            or not x.dtype == step.specs[1].dtype == DType.FLOAT
        ):
            return None
        axis = self.axis % len(x.shape)
        rows, cols = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
        if scale.size != cols or not fits_small_rows(rows, cols):
            return None
        kernel = SmallRootMeanSquare(
            ctx.xp, rows, self.epsilon, ctx.xp.tile(scale.reshape(-1), (rows, 1))
        )
        shape = (rows, cols)

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            kernel(inputs[0].reshape(shape), outputs[0].reshape(shape))

        return call

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        x, scale = inputs[:2]
        axes = tuple(range(self.axis % x.ndim, x.ndim))
        if ctx.exact:
            _, inv_rms = exact_affine(
                ctx.kernels.xp, x, axes, self.epsilon, scale, None, outputs[0], centered=False
            )
            if len(outputs) > 1:  # SimplifiedLayerNormalization's statistic
                store(ctx.kernels.xp, outputs[1], inv_rms)
            return
        if self._run_rows(x, scale, outputs[0], None, xp):
            return
        compute = xp.float64 if self.stash_type == DType.DOUBLE else xp.float32
        values = x.astype(compute)
        with quiet():
            mean_square = xp.mean(values * values, axis=axes, keepdims=True)
            values /= xp.sqrt(mean_square + compute(self.epsilon))
            values *= scale.astype(compute)
        outputs[0][...] = values

    def _run_rows(self, x: Array, scale: Array, out: Array, inv_rms: Array | None, xp: Any) -> bool:
        """Fast mode on float32 with a scale of the normalized axes' whole shape:
        normalization.root_mean_square_rows over rows of those axes. False: the general path."""
        normalized = math.prod(x.shape[self.axis % x.ndim :])
        fast = (
            x.dtype == scale.dtype == out.dtype == np.float32
            and self.stash_type == DType.FLOAT
            and out.flags.c_contiguous
            and (inv_rms is None or inv_rms.flags.c_contiguous)
            and scale.size == normalized
            and x.size
        )
        if fast:
            rows = (-1, normalized)
            statistic = None if inv_rms is None else inv_rms.reshape(-1, 1)
            root_mean_square_rows(
                xp, x.reshape(rows), self.epsilon, out.reshape(rows), scale.reshape(-1), statistic
            )
        return bool(fast)


class RotaryEmbeddingOp(Operator):
    """RotaryEmbedding (opset 23): rotate pairs of each head's first rotary_embedding_dim
    features by the cached angles; the other features pass through.

    Pairs are the two halves of the rotated features, or neighbours when interleaved. X is
    (B, H, S, D), or (B, S, H·D) with num_heads; the caches are (B, S, d/2), or (P, d/2) rows
    picked by position_ids (B, S). Exact: cos·x₁ − sin·x₂ and sin·x₁ + cos·x₂ in float64 from
    exactly widened values, rounded once.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.interleaved = bool(node.attr("interleaved", 0))
        self.rotary_dim = int(node.attr("rotary_embedding_dim", 0))
        heads = node.attr("num_heads", None)
        self.heads = None if heads is None else int(heads)
        if self.rotary_dim < 0 or self.rotary_dim % 2:
            raise node.invalid(f"RotaryEmbedding: rotary_embedding_dim {self.rotary_dim} must "
                               "be even and ≥ 0")  # fmt: skip
        if self.heads is not None and self.heads < 1:
            raise node.invalid(f"RotaryEmbedding: num_heads {self.heads} must be ≥ 1")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        self.check_types(ctx, NARROW_FLOATS, 0, 1, 2)
        check_same_type(ctx, (0, 1, 2))
        if ctx.has(3):
            self.check_types(ctx, INT64_ONLY, 3)
        x = ctx.shape(0)
        if len(x) == 4:
            b, _, s, head = x
        elif len(x) == 3:
            if self.heads is None:
                raise node.invalid("RotaryEmbedding of a 3-D input needs num_heads")
            b, s, hidden = x
            if hidden % self.heads:
                raise _bad(node, 0, f"hidden size {hidden} is not a multiple of {self.heads}")
            head = hidden // self.heads
        else:
            raise _bad(node, 0, f"X of shape {x} is neither (B, H, S, D) nor (B, S, H·D)")
        rotary = self.rotary_dim or head
        if rotary > head or rotary % 2:
            raise _bad(node, 0, f"cannot rotate {rotary} of the {head} features of each head")
        half = rotary // 2
        if ctx.has(3):
            if ctx.shape(3) != (b, s):
                raise _bad(node, 3, f"position_ids of shape {ctx.shape(3)} is not ({b}, {s})")
            expected = ("(P, d/2)", lambda c: len(c) == 2 and c[1] == half)
        else:
            expected = (f"({b}, {s}, {half})", lambda c: c == (b, s, half))
        for index in (1, 2):
            if not expected[1](ctx.shape(index)):
                raise _bad(
                    node, index,
                    f"cache of shape {ctx.shape(index)} is not {expected[0]} with d/2 = {half}",
                )  # fmt: skip
        return [ctx.output(ctx.dtype(0), x)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.kernels.xp if ctx.exact else ctx.xp
        cast = functools.partial(widen, xp) if ctx.exact else functools.partial(widened, xp)
        x, cos, sin = inputs[:3]
        positions = inputs[3] if len(inputs) > 3 else None
        out = outputs[0]
        if x.ndim == 3:  # (B, S, H·D) → (B, S, H, D): the caches broadcast over axis 2
            x = x.reshape(*x.shape[:2], self.heads, x.shape[2] // self.heads)
            out = out.reshape(x.shape)
            cache_axis = 2
        else:  # (B, H, S, D): the caches broadcast over axis 1
            cache_axis = 1
        if positions is not None:
            cos, sin = self._rows(ctx, cos, positions), self._rows(ctx, sin, positions)
        cos = xp.expand_dims(cast(cos), cache_axis)
        sin = xp.expand_dims(cast(sin), cache_axis)
        rotary = self.rotary_dim or x.shape[-1]
        rotated = cast(x[..., :rotary])
        if self.interleaved:
            first, second = rotated[..., 0::2], rotated[..., 1::2]
            out_first, out_second = out[..., 0:rotary:2], out[..., 1:rotary:2]
        else:
            first, second = rotated[..., : rotary // 2], rotated[..., rotary // 2 :]
            out_first, out_second = out[..., : rotary // 2], out[..., rotary // 2 : rotary]
        with np.errstate(all="ignore"):
            store(xp, out_first, cos * first - sin * second)
            store(xp, out_second, sin * first + cos * second)
        out[..., rotary:] = x[..., rotary:]

    def _rows(self, ctx: RunContext, cache: Array, positions: Array) -> Array:
        """cache[positions]; positions outside the cache are refused (NumPy would wrap)."""
        xp = ctx.xp
        if positions.size and bool(xp.any((positions < 0) | (positions >= cache.shape[0]))):
            raise _bad(
                self.node, 3,
                f"position_ids must be in [0, {cache.shape[0]}) (the cache's rows)",
            )  # fmt: skip
        return cache[positions]


class CausalConvWithStateOp(Operator):
    """CausalConvWithState (opset 27): a depthwise causal 1-D convolution carrying its last
    k − 1 inputs as state, with an optional fused SiLU.

    The input is prefixed by past_state (zeros when absent); present_state is the last k − 1
    positions of that sequence. Sums run in float32 (float64 is not a type of this operator).
    Exact: in float64 from exactly widened values, the taps' products summed from +0 in tap
    order, + bias, SiLU as x · sigmoid64(x), rounded once.
    """

    supports_exact = True

    ACTIVATIONS = ("none", "silu", "swish")

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        activation = node.attr("activation", "none")
        self.activation = activation.decode() if isinstance(activation, bytes) else activation
        if self.activation not in self.ACTIVATIONS:
            raise node.invalid(f"CausalConvWithState: activation '{self.activation}' is not "
                               f"one of {', '.join(self.ACTIVATIONS)}")  # fmt: skip

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        self.check_types(ctx, NARROW_FLOATS)
        check_same_type(ctx, (0, 1, 2, 3))
        x, w = ctx.shape(0), ctx.shape(1)
        if len(x) != 3 or len(w) != 3 or w[:2] != (x[1], 1) or w[2] < 1:
            raise _bad(node, 1, f"input {x} and weight {w} are not (B, C, L) and (C, 1, k)")
        b, c, _ = x
        state = (b, c, w[2] - 1)
        if ctx.has(2) and ctx.shape(2) != (c,):
            raise _bad(node, 2, f"bias of shape {ctx.shape(2)} is not ({c},)")
        if ctx.has(3) and ctx.shape(3) != state:
            raise _bad(node, 3, f"past_state of shape {ctx.shape(3)} is not {state}")
        return [ctx.output(ctx.dtype(0), x), ctx.output(ctx.dtype(0), state)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        x, w, bias, past = (*inputs[:4], *[None] * (4 - len(inputs[:4])))
        b, c, length = x.shape
        k = w.shape[2]
        if past is None:
            past = xp.zeros((b, c, k - 1), dtype=x.dtype)
        sequence = xp.concatenate((past, x), axis=2)
        if ctx.exact:
            self._run_exact(ctx.kernels.xp, sequence, w, bias, outputs[0])
            outputs[1][...] = sequence[:, :, length:]
            return
        values = sequence.astype(xp.float32)
        taps = w.astype(xp.float32).reshape(1, c, k)
        total = xp.zeros((b, c, length), dtype=xp.float32)
        for j in range(k):
            total += taps[:, :, j : j + 1] * values[:, :, j : j + length]
        if bias is not None:
            total += bias.astype(xp.float32).reshape(1, c, 1)
        if self.activation != "none":
            with np.errstate(over="ignore"):
                total *= 1 / (1 + xp.exp(-total))
        outputs[0][...] = total
        outputs[1][...] = sequence[:, :, length:]

    def _run_exact(
        self, xp: Any, sequence: Array, w: Array, bias: Array | None, out: Array
    ) -> None:
        b, c, length = out.shape
        k = w.shape[2]
        values, taps = widen(xp, sequence), widen(xp, w).reshape(1, c, k)
        total = xp.zeros((b, c, length), dtype=xp.float64)
        with np.errstate(all="ignore"):
            for j in range(k):
                total += taps[:, :, j : j + 1] * values[:, :, j : j + length]
            if bias is not None:
                total += widen(xp, bias).reshape(1, c, 1)
            if self.activation != "none":
                total = exact_activations.swish(xp, total, 1.0)
        store(xp, out, total)


# -- gated activations ----------------------------------------------------------------------


class SwishOp(WithAlpha):
    """Swish (opset 24): x · sigmoid(alpha · x); SiLU for alpha 1 (the recognise-swish pass
    makes it from x · Sigmoid(x)). float32 and narrower in fast mode:
    `backends.activations.swish`."""

    layout_role = ELEMENTWISE

    default_alpha = 1.0
    fast_kernel = (activation_kernels.swish, 1)

    def fast_parameters(self) -> tuple:
        return (self.alpha,)

    def formula(self, xp: Any, x: Array) -> Array:
        return x / (1.0 + xp.exp(-self.alpha * x))

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.swish(xp, x, self.alpha)


class SwiGLUOp(Operator):
    """SwiGLU (opset 28): Swish_alpha(A) · B for A and B of one shape (no broadcasting).
    Exact: exact_activations.swish(A) · B in float64, rounded once."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 1.0))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS)
        check_same_type(ctx, (0, 1))
        if ctx.shape(0) != ctx.shape(1):
            raise _bad(
                self.node, 1,
                f"A {ctx.shape(0)} and B {ctx.shape(1)} must have one shape (no broadcasting)",
            )  # fmt: skip
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        if ctx.exact:
            ctx.kernels.exact_map_arrays(self._exact, inputs, outputs[0])
            return
        xp = ctx.xp
        gate, linear = widened(xp, inputs[0]), widened(xp, inputs[1])
        with quiet():
            outputs[0][...] = gate / (1.0 + xp.exp(-self.alpha * gate)) * linear

    def _exact(self, xp: Any, gate: Array, linear: Array) -> Array:
        return exact_activations.swish(xp, gate, self.alpha) * linear


DEFS: tuple[OpDef, ...] = (
    OpDef("Attention", 23, AttentionOp),
    OpDef("FlexAttention", 1, FlexAttentionOp, domain="ai.onnx.preview"),
    OpDef("LinearAttention", 27, LinearAttentionOp),
    OpDef("RMSNormalization", 23, RMSNormalizationOp),
    OpDef("RotaryEmbedding", 23, RotaryEmbeddingOp),
    OpDef("CausalConvWithState", 27, CausalConvWithStateOp),
    OpDef("Swish", 24, SwishOp),
    OpDef("SwiGLU", 28, SwiGLUOp),
)
