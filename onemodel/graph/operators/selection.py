"""Selecting, ordering and accumulating elements: TopK, NonZero, Unique, Compress,
NonMaxSuppression, CumSum, CumProd; the algebra of Einsum and Det; BitCast and TensorScatter;
MeanVarianceNormalization; and the random generators (RandomUniform, RandomNormal, their
`Like` forms, Bernoulli, Multinomial).

NonZero, Unique and NonMaxSuppression have outputs whose shapes depend on the input values, so
they return new arrays. Compress is static when its condition is known at plan time and is
shaped again in every run otherwise. Narrow floats (float16, bfloat16) are computed in float32
and rounded once, into the output.

The random generators draw from `xp.random.RandomState`: with a `seed` attribute every run
draws the same values (the operator keeps no state between runs, which may be concurrent);
without one every run draws fresh values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from onemodel.backends.exact_normalization import mean_variance_normalize64
from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.operators.axes import INDEX_TYPES, INT64_ONLY, normalize_axes, normalize_axis
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.exact_products import exact_einsum
from onemodel.graph.operators.unary import BOOL, FLOATS, NUMERIC, widened
from onemodel.tensors import DType, numpy_dtype_for_onnx, onnx_code_for_numpy, onnx_name

_NO_BF16 = frozenset({DType.BFLOAT16})
_CLASSIC_FLOATS = FLOATS - _NO_BF16
_CUMULATIVE = frozenset({DType.UINT32, DType.UINT64, DType.INT32, DType.INT64, *FLOATS})


def _types_at(opset: int, types: frozenset[int], bfloat16_since: int) -> frozenset[int]:
    """`types` without bfloat16 before the opset that added it to an operator."""
    return types if opset >= bfloat16_since else types - _NO_BF16


def _host_scalar(ctx: RunContext, array: Array) -> Any:
    """The single value of a small input (k, axis, a threshold), on the host."""
    return ctx.kernels.memory.to_host(array).reshape(-1)[0]


class DataDependentOperator(Operator):
    """An operator whose output shapes follow the input values: `run` makes its outputs."""

    outputs_data_dependent = True

    def check_array_types(self, allowed: frozenset[int], inputs: Sequence[Array | None]) -> None:
        """Refuse element types the operator does not define (no `infer` sees them first)."""
        for index, array in enumerate(inputs):
            if array is None:
                continue
            code = onnx_code_for_numpy(array.dtype)
            if code not in allowed:
                raise self.node.invalid(
                    f"{self.node.op_type} does not accept element type {onnx_name(code)} for "
                    f"input {index}",
                    self.node.inputs[index],
                )


# -- TopK ------------------------------------------------------------------------------------


class TopKOp(Operator):
    """The k largest (or smallest) along `axis`, always sorted (any order is allowed for
    sorted = 0); equal values keep the lower index first. k is an attribute before opset 10
    and a 1-element input after. Exact: floats are ranked by a stable sort of a float64 copy
    (compares of exact values; NaN counts as the largest), and the values gathered."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", -1))
        self.largest = bool(node.attr("largest", 1)) if node.opset >= 11 else True
        self.k = int(node.attr("k")) if node.opset < 10 else None
        if self.k is not None and self.k < 0:
            raise node.invalid(f"TopK k must not be negative, got {self.k}")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        opset = self.node.opset
        allowed = _CLASSIC_FLOATS if opset < 11 else _types_at(opset, NUMERIC, 24)
        self.check_types(ctx, allowed, 0)
        shape = ctx.shape(0)
        axis = normalize_axis(self.node, self.axis, len(shape), value=self.node.inputs[0])
        if self.k is None:
            self.check_types(ctx, INT64_ONLY, 1)
            k_value = ctx.value(1)
            if k_value.size != 1:
                raise self.node.bad_input(
                    f"TopK k must hold one value, got shape {list(k_value.shape)}",
                    self.node.inputs[1],
                )
            k = int(k_value.reshape(-1)[0])
        else:
            k = self.k
        if not 0 <= k <= shape[axis]:
            raise self.node.bad_input(
                f"TopK k = {k} is outside [0, {shape[axis]}] for axis {axis} of input shape "
                f"{list(shape)}",
                self.node.inputs[1] if self.k is None else self.node.inputs[0],
            )
        result = (*shape[:axis], k, *shape[axis + 1 :])
        return [ctx.output(ctx.dtype(0), result), ctx.output(DType.INT64, result)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp, x = ctx.xp, inputs[0]
        axis = normalize_axis(self.node, self.axis, x.ndim)
        k = outputs[1].shape[axis]
        ranked = widen(ctx.kernels.xp, x) if ctx.exact and x.dtype.kind == "f" else x
        order = self.ranking(xp, ranked, axis)
        top = order[(slice(None),) * axis + (slice(0, k),)]
        outputs[1][...] = top
        outputs[0][...] = xp.take_along_axis(x, top, axis=axis)

    def ranking(self, xp: Any, x: Array, axis: int) -> Array:
        """Every index along `axis`, best first, equal values in index order.

        For the largest, a stable ascending sort of the reversed axis, reversed again, puts
        equal values back in increasing index order."""
        if not self.largest:
            return xp.argsort(x, axis=axis, kind="stable")
        backwards = xp.argsort(xp.flip(x, axis=axis), axis=axis, kind="stable")
        return (x.shape[axis] - 1) - xp.flip(backwards, axis=axis)


# -- NonZero, Unique, Compress ---------------------------------------------------------------


class NonZeroOp(DataDependentOperator):
    """The coordinates of non-zero elements, one column each, in row-major order: [rank, n].
    A scalar gives [0, n] (unlike numpy.nonzero). Exact: compares and positions."""

    supports_exact = True

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> list[Array]:
        self.check_array_types(_types_at(self.node.opset, NUMERIC | BOOL, 13), inputs[:1])
        xp, x = ctx.xp, inputs[0]
        if x.ndim == 0:
            return [ctx.empty((0, int(bool(x != 0))), DType.INT64)]
        return [xp.stack(xp.nonzero(x)).astype(xp.int64, copy=False)]


class UniqueOp(DataDependentOperator):
    """Unique values (or slices along `axis`), sorted or in order of first occurrence, with
    the first-occurrence indices, the inverse indices and the counts (all int64). Exact:
    floats are compared as float64 copies, and each unique value is its first occurrence's
    bits (so −0 and +0 give the first one)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        axis = node.attr("axis", None)
        self.axis = None if axis is None else int(axis)
        self.sorted = bool(node.attr("sorted", 1))

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> list[Array]:
        self.check_array_types(_types_at(self.node.opset, NUMERIC | BOOL, 28), inputs[:1])
        xp, x = ctx.xp, inputs[0]
        axis = 0
        if self.axis is not None:
            axis = normalize_axis(self.node, self.axis, x.ndim, value=self.node.inputs[0])
        if self.axis is None:
            x = x.reshape(-1)
        keys = widen(ctx.kernels.xp, x) if ctx.exact and x.dtype.kind == "f" else x
        found = xp.unique(
            keys, return_index=True, return_inverse=True, return_counts=True,
            **({} if self.axis is None else {"axis": axis}),
        )  # fmt: skip
        values, first, inverse, counts = found
        if keys is not x:
            values = xp.take(x, first, axis=axis)
        inverse = inverse.reshape(-1)
        if not self.sorted:
            order = xp.argsort(first, kind="stable")
            rank = xp.empty_like(order)
            rank[order] = xp.arange(order.size, dtype=order.dtype)
            first, inverse, counts = first[order], rank[inverse], counts[order]
            values = xp.take(x, first, axis=axis)
        indices = [a.astype(xp.int64, copy=False) for a in (first, inverse, counts)]
        return [values, *indices][: len(self.node.outputs)]


class CompressOp(Operator):
    """The slices along `axis` (or elements of the flattened input) where the condition is
    true. The output is static when the condition is known at plan time; otherwise the node
    is shaped again in every run. A condition longer than the axis is cut to it (as
    onnxruntime does); a shorter one selects only among the first elements. Exact: data
    movement."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        axis = node.attr("axis", None)
        self.axis = None if axis is None else int(axis)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _types_at(self.node.opset, NUMERIC | BOOL, 28), 0)
        self.check_types(ctx, BOOL, 1)
        shape, condition_shape = ctx.shape(0), ctx.shape(1)
        if len(condition_shape) != 1:
            raise self.node.bad_input(
                f"Compress needs a 1-D condition, got shape {list(condition_shape)}",
                self.node.inputs[1],
            )
        axis = self._axis(len(shape))
        extent = int(np.prod(shape)) if axis is None else shape[axis]
        kept = int(np.count_nonzero(ctx.value(1)[:extent]))
        if axis is None:
            return [ctx.output(ctx.dtype(0), (kept,))]
        return [ctx.output(ctx.dtype(0), (*shape[:axis], kept, *shape[axis + 1 :]))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp, x, condition = ctx.xp, inputs[0], inputs[1]
        axis = self._axis(x.ndim)
        if axis is None:
            x, axis = x.reshape(-1), 0
        positions = xp.nonzero(condition[: x.shape[axis]])[0]
        xp.take(x, positions, axis=axis, out=outputs[0])

    def _axis(self, rank: int) -> int | None:
        if self.axis is None:
            return None
        return normalize_axis(self.node, self.axis, rank, value=self.node.inputs[0])


# -- NonMaxSuppression -----------------------------------------------------------------------


class NonMaxSuppressionOp(DataDependentOperator):
    """Greedy selection per batch and class: boxes by decreasing score (equal scores in index
    order), above `score_threshold` when given, each kept unless its IoU with a box already
    kept exceeds `iou_threshold`, at most `max_output_boxes_per_class` (absent: 0) of them.

    The selection is sequential: it costs one device-to-host read per kept box.

    Exact: the boxes and scores widened exactly to float64 and every step below one float64
    operation (center form: half = size / 2, corners centre ∓ half; else the corners the
    coordinate min and max; area = Δx·Δy; intersection extents max(min(high) − max(low), 0);
    overlap = ex·ey; union = (areaᵢ + area) − overlap; suppressed when overlap > 0, both
    areas > 0, union > 0 and overlap / union > iou_threshold, the threshold widened from its
    float32 value); the scores ranked by a stable sort of their float64 negations. Only
    indices come out, so the result is a function of those correctly rounded operations."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.center_point_box = int(node.attr("center_point_box", 0))
        if self.center_point_box not in (0, 1):
            raise node.invalid(
                f"NonMaxSuppression center_point_box must be 0 or 1, got {self.center_point_box}"
            )

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> list[Array]:
        xp = ctx.xp
        boxes, scores = inputs[0], inputs[1]
        self.check_array_types(frozenset({DType.FLOAT}), [boxes, scores])
        self._check_shapes(boxes, scores)
        limit, iou_threshold, score_threshold = self._limits(ctx, inputs)
        if limit == 0:
            return [ctx.empty((0, 3), DType.INT64)]
        if ctx.exact:
            xp = ctx.kernels.xp
            boxes, scores = widen(xp, boxes), widen(xp, scores)
        low, high = self._corners(xp, boxes)
        size = high - low
        area = size[..., 0] * size[..., 1]
        rows: list[tuple[int, int, int]] = []
        for batch in range(boxes.shape[0]):
            for cls in range(scores.shape[1]):
                kept = self._select(
                    xp, (low[batch], high[batch], area[batch]), scores[batch, cls],
                    limit, iou_threshold, score_threshold,
                )  # fmt: skip
                rows.extend((batch, cls, box) for box in kept)
        return [xp.asarray(rows, dtype=xp.int64).reshape(len(rows), 3)]

    def _check_shapes(self, boxes: Array, scores: Array) -> None:
        if (
            boxes.ndim != 3
            or boxes.shape[2] != 4
            or scores.ndim != 3
            or scores.shape[0] != boxes.shape[0]
            or scores.shape[2] != boxes.shape[1]
        ):
            raise self.node.bad_input(
                "NonMaxSuppression needs boxes [batches, boxes, 4] and scores [batches, "
                f"classes, boxes], got {list(boxes.shape)} and {list(scores.shape)}",
                self.node.inputs[0],
            )

    def _limits(
        self, ctx: RunContext, inputs: Sequence[Array | None]
    ) -> tuple[int, float, float | None]:
        def given(index: int) -> Array | None:
            array = inputs[index] if index < len(inputs) else None
            return None if array is None or array.size == 0 else array

        count, iou, score = given(2), given(3), given(4)
        limit = 0 if count is None else max(int(_host_scalar(ctx, count)), 0)
        iou_threshold = 0.0 if iou is None else float(_host_scalar(ctx, iou))
        if not 0.0 <= iou_threshold <= 1.0:
            raise self.node.bad_input(
                f"NonMaxSuppression iou_threshold must be within [0, 1], got {iou_threshold}",
                self.node.inputs[3],
            )
        score_threshold = None if score is None else float(_host_scalar(ctx, score))
        return limit, iou_threshold, score_threshold

    def _corners(self, xp: Any, boxes: Array) -> tuple[Array, Array]:
        """Each box's lower and upper corner, [.., 2] each (coordinates may come flipped)."""
        if self.center_point_box:
            half = boxes[..., 2:] / 2
            return boxes[..., :2] - half, boxes[..., :2] + half
        return xp.minimum(boxes[..., :2], boxes[..., 2:]), xp.maximum(
            boxes[..., :2], boxes[..., 2:]
        )

    @staticmethod
    def _select(
        xp: Any,
        geometry: tuple[Array, Array, Array],
        scores: Array,
        limit: int,
        iou_threshold: float,
        score_threshold: float | None,
    ) -> list[int]:
        """The box indices kept for one batch and class, in the order they were kept."""
        low, high, area = geometry
        candidates = xp.arange(scores.shape[0])
        if score_threshold is not None:
            candidates = candidates[scores > score_threshold]
        order = candidates[xp.argsort(-scores[candidates], kind="stable")]
        low, high, area = low[order], high[order], area[order]
        # alive[n] stays true: argmax finds the next live candidate, or n when none is left.
        alive = xp.ones(order.shape[0] + 1, dtype=bool)
        kept: list[int] = []
        while len(kept) < limit:
            i = int(xp.argmax(alive))
            if i == order.shape[0]:
                break
            kept.append(int(order[i]))
            alive[: i + 1] = False
            extent = xp.clip(xp.minimum(high[i], high) - xp.maximum(low[i], low), 0, None)
            overlap = extent[:, 0] * extent[:, 1]
            union = area[i] + area - overlap
            with np.errstate(all="ignore"):
                suppressed = (overlap > 0) & (area[i] > 0) & (area > 0) & (union > 0)
                suppressed &= overlap / union > iou_threshold
            alive[:-1] &= ~suppressed
        return kept


# -- CumSum and CumProd ----------------------------------------------------------------------


class CumulativeOp(Operator):
    """An inclusive (or exclusive: the identity first) running reduction along the axis
    input, forwards or in `reverse`; narrow floats accumulate in float32. Exact (floats): a
    float64 running total from the identity, adding (multiplying) the elements one by one in
    the direction of the run, each running value rounded once into the output; integers wrap
    and are exact in any order."""

    supports_exact = True

    accumulate: ClassVar[str]
    identity: ClassVar[int]
    bfloat16_since: ClassVar[int]

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.exclusive = bool(node.attr("exclusive", 0))
        self.reverse = bool(node.attr("reverse", 0))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _types_at(self.node.opset, _CUMULATIVE, self.bfloat16_since), 0)
        self.check_types(ctx, INDEX_TYPES, 1)
        if len(ctx.shape(1)) > 1 or int(np.prod(ctx.shape(1))) != 1:
            raise self.node.bad_input(
                f"{self.node.op_type} axis must be a scalar, got shape {list(ctx.shape(1))}",
                self.node.inputs[1],
            )
        axis = ctx.constant(1)
        if axis is not None:
            self._axis(int(axis.reshape(-1)[0]), len(ctx.shape(0)))
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp, x = ctx.xp, widened(ctx.xp, inputs[0])
        axis = self._axis(int(_host_scalar(ctx, inputs[1])), x.ndim)
        if ctx.exact and x.dtype.kind == "f":
            self._run_exact(ctx.kernels.xp, inputs[0], axis, outputs[0])
            return
        if self.reverse:
            x = xp.flip(x, axis=axis)
        if self.exclusive:
            head = xp.full((*x.shape[:axis], 1, *x.shape[axis + 1 :]), self.identity, x.dtype)
            x = xp.concatenate([head, x], axis=axis)[(slice(None),) * axis + (slice(0, -1),)]
        result = getattr(xp, self.accumulate)(x, axis=axis, dtype=x.dtype)
        outputs[0][...] = xp.flip(result, axis=axis) if self.reverse else result

    def _axis(self, axis: int, rank: int) -> int:
        return normalize_axis(self.node, axis, rank, value=self.node.inputs[1])

    def _run_exact(self, xp: Any, x: Array, axis: int, out: Array) -> None:
        values = xp.moveaxis(widen(xp, x), axis, 0)
        result = xp.empty(values.shape, dtype=xp.float64)
        total = xp.full(values.shape[1:], float(self.identity), dtype=xp.float64)
        steps = range(values.shape[0] - 1, -1, -1) if self.reverse else range(values.shape[0])
        combine = xp.multiply if self.accumulate == "cumprod" else xp.add
        with np.errstate(all="ignore"):
            for step in steps:
                if self.exclusive:
                    result[step] = total
                combine(total, values[step], out=total)
                if not self.exclusive:
                    result[step] = total
        store(xp, out, xp.moveaxis(result, 0, axis))


class CumSumOp(CumulativeOp):
    accumulate = "cumsum"
    identity = 0
    bfloat16_since = 14


class CumProdOp(CumulativeOp):
    accumulate = "cumprod"
    identity = 1
    bfloat16_since = 26


# -- Einsum and Det --------------------------------------------------------------------------

_ELLIPSIS = "..."


class EinsumOp(Operator):
    """Einstein summation, run by the array library on an explicit equation: the implicit
    form's output (the ellipsis, then the letters used once, in ASCII order) is written out
    so that both backends agree. Letters of extent 1 broadcast, as in numpy.einsum. Exact
    (floats): exact_products.exact_einsum, rounded once; integers wrap, exact by nature."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        equation = node.attr("equation")
        text = (equation.decode() if isinstance(equation, bytes) else str(equation)).replace(
            " ", ""
        )
        left, arrow, right = text.partition("->")
        self.terms = tuple(left.split(","))
        for term in (*self.terms, right):
            self._check_term(term, text)
        used = "".join(t.replace(_ELLIPSIS, "") for t in self.terms)
        if arrow:
            letters = right.replace(_ELLIPSIS, "")
            if len(set(letters)) != len(letters) or not set(letters) <= set(used):
                raise node.invalid(
                    f"Einsum equation '{text}' has an output letter that repeats or is not "
                    "in any input"
                )
            self.output = right
        else:
            once = "".join(sorted(c for c in set(used) if used.count(c) == 1))
            ellipsis = any(_ELLIPSIS in t for t in self.terms)
            self.output = (_ELLIPSIS if ellipsis else "") + once
        self.equation = ",".join(self.terms) + "->" + self.output

    def _check_term(self, term: str, text: str) -> None:
        letters = term.replace(_ELLIPSIS, "", 1)
        if not all(c.isascii() and c.isalpha() for c in letters):
            raise self.node.invalid(
                f"Einsum equation '{text}' has a term '{term}' that is not letters with at "
                "most one ellipsis"
            )

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _types_at(self.node.opset, NUMERIC, 28))
        if len(ctx) != len(self.terms):
            raise self.node.invalid(
                f"Einsum equation '{self.equation}' has {len(self.terms)} inputs, the node "
                f"{len(ctx)}"
            )
        if len({ctx.dtype(i) for i in range(len(ctx))}) > 1:
            raise self.node.invalid(
                f"Einsum needs inputs of one element type, got "
                f"{[onnx_name(ctx.dtype(i)) for i in range(len(ctx))]}",
                self.node.inputs[0],
            )
        extents: dict[str, int] = {}
        ellipses: list[tuple[int, ...]] = []
        for index, term in enumerate(self.terms):
            for letter, extent in self._label(ctx, index, term, ellipses):
                known = extents.get(letter, extent)
                if known != extent and 1 not in (known, extent):
                    raise self._mismatch(ctx, f"letter '{letter}' has extents {known} and {extent}")
                extents[letter] = extent if known == 1 else known
        try:
            ellipsis = tuple(np.broadcast_shapes(*ellipses)) if ellipses else ()
        except ValueError:
            raise self._mismatch(ctx, "the ellipsis dimensions do not broadcast") from None
        if ellipsis and _ELLIPSIS not in self.output:
            raise self.node.unsupported(
                f"Einsum equation '{self.equation}' sums over ellipsis dimensions, which is "
                "not supported"
            )
        before, _, after = self.output.partition(_ELLIPSIS)
        shape = [extents[c] for c in before]
        if _ELLIPSIS in self.output:
            shape += ellipsis
        shape += [extents[c] for c in after]
        return [ctx.output(ctx.dtype(0), shape)]

    def _label(
        self, ctx: InferContext, index: int, term: str, ellipses: list[tuple[int, ...]]
    ) -> list[tuple[str, int]]:
        """The (letter, extent) pairs of one input; its ellipsis dimensions go to `ellipses`."""
        shape = ctx.shape(index)
        before, dots, after = term.partition(_ELLIPSIS)
        hidden = len(shape) - len(before) - len(after)
        if hidden < 0 or (not dots and hidden != 0):
            raise self._mismatch(ctx, f"term '{term}' does not fit input {index}'s rank")
        if dots:
            ellipses.append(shape[len(before) : len(before) + hidden])
        return [
            *zip(before, shape, strict=False),
            *zip(after, shape[len(shape) - len(after) :], strict=True),
        ]

    def _mismatch(self, ctx: InferContext, why: str) -> Exception:
        shapes = [list(ctx.shape(i)) for i in range(len(ctx))]
        return self.node.bad_input(
            f"Einsum '{self.equation}': {why} (input shapes {shapes})", self.node.inputs[0]
        )

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        if ctx.exact and inputs[0].dtype.kind == "f":
            terms, output = self._spelled_out(inputs)
            result = exact_einsum(ctx.kernels, terms, output, inputs)
            store(ctx.kernels.xp, outputs[0], result.reshape(outputs[0].shape))
            return
        operands = [widened(xp, x) for x in inputs]
        outputs[0][...] = xp.einsum(self.equation, *operands, optimize=len(operands) > 2)

    def _spelled_out(self, inputs: Sequence[Array]) -> tuple[list[str], str]:
        """The terms and output with each ellipsis written as letters of its own (the
        ellipsis dimensions right-aligned, as they broadcast)."""
        spare = [chr(c) for c in range(0x100, 0x140)]  # not ASCII: never a letter of the node
        hidden = [
            x.ndim - len(term.replace(_ELLIPSIS, "")) if _ELLIPSIS in term else 0
            for term, x in zip(self.terms, inputs, strict=True)
        ]
        widest = "".join(spare[: max(hidden, default=0)])
        terms = [
            term.replace(_ELLIPSIS, widest[len(widest) - n :] if n else "")
            for term, n in zip(self.terms, hidden, strict=True)
        ]
        return terms, self.output.replace(_ELLIPSIS, widest)


class DetOp(Operator):
    """Determinants of the square matrices on the last two axes: [*, M, M] -> [*].

    Exact mode: Gaussian elimination with partial pivoting in float64 (`exact_determinant`),
    rounded once."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _types_at(self.node.opset, FLOATS, 22), 0)
        shape = ctx.shape(0)
        if len(shape) < 2 or shape[-1] != shape[-2]:
            raise self.node.bad_input(
                f"Det needs square matrices on the last two axes, got shape {list(shape)}",
                self.node.inputs[0],
            )
        return [ctx.output(ctx.dtype(0), shape[:-2])]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        if ctx.exact:
            xp = ctx.kernels.xp
            store(xp, outputs[0], exact_determinant(xp, widen(xp, inputs[0])))
            return
        xp = ctx.xp
        outputs[0][...] = xp.linalg.det(widened(xp, inputs[0]))


def exact_determinant(xp: Any, a: Array) -> Array:
    """det of float64 [*, M, M] by a fixed sequence: for k = 0..M−1 the pivot row is the
    first of rows k.. with the largest |a[i, k]| (swapped to row k, each swap negating the
    sign); each row i > k loses (a[i, k] / pivot) · row k, one rounded division, product and
    subtraction per element; det = sign · the product of the pivots from 1 in order. A zero
    pivot (the column zero from row k down) makes the determinant 0."""
    size, shape = a.shape[-1], a.shape[:-2]
    a = a.reshape(math.prod(shape), size, size).copy()
    sign = xp.ones(a.shape[0], dtype=xp.float64)
    batch = xp.arange(a.shape[0])
    with np.errstate(all="ignore"):
        for k in range(size):
            pivot_row = xp.argmax(xp.absolute(a[:, k:, k]), axis=1) + k
            rows = a[batch, pivot_row].copy()
            a[batch, pivot_row] = a[:, k]
            a[:, k] = rows
            sign = xp.where(pivot_row != k, -sign, sign)
            pivot = a[:, k, k]
            usable = xp.where(pivot == 0, 1.0, pivot)  # a zero column: nothing to eliminate
            factors = a[:, k + 1 :, k] / usable[:, None]
            a[:, k + 1 :, k:] -= factors[:, :, None] * a[:, k, None, k:]
        determinant = sign
        for k in range(size):
            determinant = determinant * a[:, k, k]
    return determinant.reshape(shape)


# -- BitCast and TensorScatter ---------------------------------------------------------------

# Element widths in bits where they differ from NumPy's storage (one byte per element).
_SUB_BYTE_BITS = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2}


def _bits(code: int) -> int:
    return _SUB_BYTE_BITS.get(code, numpy_dtype_for_onnx(code).itemsize * 8)


class BitCastOp(Operator):
    """The same bits read as element type `to`, of the same width. Exact: no arithmetic."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.to = int(node.attr("to"))
        if self.to == 8:
            raise node.invalid("BitCast to STRING is not defined")
        try:
            numpy_dtype_for_onnx(self.to)
        except Exception:
            raise node.invalid(f"BitCast 'to' is not an element type: {self.to}") from None

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        source = ctx.dtype(0)
        if source == 8 or _bits(source) != _bits(self.to):
            raise self.node.invalid(
                f"BitCast needs types of one width, got {onnx_name(source)} and "
                f"{onnx_name(self.to)}",
                self.node.inputs[0],
            )
        return [ctx.output(self.to, ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        out = outputs[0]
        out[...] = ctx.xp.ascontiguousarray(inputs[0]).view(out.dtype)


class TensorScatterOp(Operator):
    """A KV cache update: `update` written into a copy of `past_cache` along `axis`, from
    each batch entry's write index (0 when absent), wrapping in "circular" mode. Exact: data
    movement (the positions of one batch entry are distinct)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", -2))
        mode = node.attr("mode", "linear")
        self.mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        if self.mode not in ("linear", "circular"):
            raise node.invalid(f"TensorScatter mode must be linear or circular, got {mode!r}")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INT64_ONLY, 2)
        if ctx.dtype(1) != ctx.dtype(0):
            raise self.node.invalid(
                "TensorScatter needs past_cache and update of one element type",
                self.node.inputs[1],
            )
        cache, update = ctx.shape(0), ctx.shape(1)
        axis = self._axis(len(cache))
        fits = len(update) == len(cache) and all(
            u == c if a != axis else u <= c
            for a, (u, c) in enumerate(zip(update, cache, strict=True))
        )
        if not fits:
            raise self.node.bad_input(
                f"TensorScatter update {list(update)} does not fit past_cache {list(cache)} "
                f"(axis {axis})",
                self.node.inputs[1],
            )
        if ctx.has(2) and ctx.shape(2) != cache[:1]:
            raise self.node.bad_input(
                f"TensorScatter write_indices must have shape [{cache[0]}], got "
                f"{list(ctx.shape(2))}",
                self.node.inputs[2],
            )
        return [ctx.output(ctx.dtype(0), cache)]

    def _axis(self, rank: int) -> int:
        axis = normalize_axis(self.node, self.axis, rank, value=self.node.inputs[0])
        if axis == 0:
            raise self.node.bad_input("TensorScatter axis must not be the batch axis 0")
        return axis

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        cache, update, out = inputs[0], inputs[1], outputs[0]
        axis = self._axis(cache.ndim)
        batch, length, steps = cache.shape[0], cache.shape[axis], update.shape[axis]
        starts = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        if starts is None:
            starts = xp.zeros(batch, dtype=xp.int64)
        positions = starts[:, None] + xp.arange(steps)[None, :]
        if self.mode == "circular":
            positions = positions % length
        elif positions.size and bool(((positions < 0) | (positions >= length)).any()):
            raise self.node.bad_input(
                f"TensorScatter writes {steps} positions from write_indices "
                f"{ctx.kernels.memory.to_host(starts).tolist()} past the cache length {length}",
                self.node.inputs[2],
            )
        xp.copyto(out, cache)
        rank = axis + 1
        where = [
            xp.arange(cache.shape[a]).reshape((1,) * a + (-1,) + (1,) * (rank - a - 1))
            for a in range(axis)
        ]
        where.append(positions.reshape((batch,) + (1,) * (axis - 1) + (steps,)))
        out[tuple(where)] = update


# -- MeanVarianceNormalization ---------------------------------------------------------------


class MeanVarianceNormalizationOp(Operator):
    """(X - mean) / (std + 1e-9) over `axes` (default [0, 2, 3]), as ONNX's function body;
    the variance is taken as the mean of squared deviations, which cannot go negative.
    Exact: exact_normalization.mean_variance_normalize64, rounded once."""

    in_place_input = 0
    epsilon = 1e-9
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axes = tuple(int(a) for a in node.attr("axes", (0, 2, 3)))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _types_at(self.node.opset, FLOATS, 13), 0)
        normalize_axes(self.node, self.axes, len(ctx.shape(0)), value=self.node.inputs[0])
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp, x = ctx.xp, widened(ctx.xp, inputs[0])
        axes = normalize_axes(self.node, self.axes, x.ndim)
        if ctx.exact:
            xp = ctx.kernels.xp
            store(xp, outputs[0], mean_variance_normalize64(xp, widen(xp, inputs[0]), axes))
            return
        with np.errstate(all="ignore"):
            centered = x - xp.mean(x, axis=axes, keepdims=True)
            spread = xp.sqrt(xp.mean(centered * centered, axis=axes, keepdims=True))
            outputs[0][...] = centered / (spread + self.epsilon)


# -- Random generators -----------------------------------------------------------------------


class RandomOp(Operator):
    """A generator of random values: the `seed` attribute, when given, fixes the draws; without
    one every run draws anew, so the node is never folded into a plan constant."""

    foldable = False
    float_types_since: ClassVar[int] = 22

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        seed = node.attr("seed", None)
        self.seed = None if seed is None else int(seed) & 0xFFFFFFFF

    def generator(self, xp: Any) -> Any:
        return xp.random.RandomState(self.seed)

    def float_types(self) -> frozenset[int]:
        return _types_at(self.node.opset, FLOATS, self.float_types_since)

    def check_output_type(self, dtype: int, allowed: frozenset[int]) -> int:
        if dtype not in allowed:
            raise self.node.invalid(
                f"{self.node.op_type} cannot make element type {onnx_name(dtype)}"
            )
        return dtype


class RandomTensorOp(RandomOp):
    """RandomUniform and RandomNormal: a shape attribute; the `Like` forms take the input's
    shape (and element type, unless `dtype` is given)."""

    like: ClassVar[bool] = False

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        dtype = node.attr("dtype", None if self.like else DType.FLOAT)
        self.dtype = None if dtype is None else int(dtype)
        self.shape = None if self.like else tuple(int(d) for d in node.attr("shape"))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        if self.like:
            dtype = ctx.dtype(0) if self.dtype is None else self.dtype
            shape = ctx.shape(0)
        else:
            dtype, shape = self.dtype, self.shape
            if any(d < 0 for d in shape):
                raise self.node.invalid(f"{self.node.op_type} shape {list(shape)} is negative")
        return [ctx.output(self.check_output_type(dtype, self.float_types()), shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        out = outputs[0]
        out[...] = self.sample(self.generator(ctx.xp), out.shape)

    def sample(self, generator: Any, shape: tuple[int, ...]) -> Array:
        raise NotImplementedError


class RandomUniformOp(RandomTensorOp):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.low = float(node.attr("low", 0.0))
        self.high = float(node.attr("high", 1.0))

    def sample(self, generator: Any, shape: tuple[int, ...]) -> Array:
        return generator.uniform(self.low, self.high, size=shape)


class RandomUniformLikeOp(RandomUniformOp):
    like = True


class RandomNormalOp(RandomTensorOp):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.mean = float(node.attr("mean", 0.0))
        self.scale = float(node.attr("scale", 1.0))

    def sample(self, generator: Any, shape: tuple[int, ...]) -> Array:
        return generator.normal(self.mean, self.scale, size=shape)


class RandomNormalLikeOp(RandomNormalOp):
    like = True


class BernoulliOp(RandomOp):
    """1 with the probability each input element gives, else 0, in `dtype` (default: the
    input's type)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        dtype = node.attr("dtype", None)
        self.dtype = None if dtype is None else int(dtype)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, self.float_types(), 0)
        dtype = ctx.dtype(0) if self.dtype is None else self.dtype
        self.check_output_type(dtype, NUMERIC | BOOL)
        return [ctx.output(dtype, ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        out = outputs[0]
        draws = self.generator(ctx.xp).random_sample(size=out.shape)
        out[...] = draws < widened(ctx.xp, inputs[0])


class MultinomialOp(RandomOp):
    """`sample_size` class indices per batch row, drawn with the softmax of the row (its
    values are unnormalized log-probabilities)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.samples = int(node.attr("sample_size", 1))
        self.dtype = self.check_output_type(int(node.attr("dtype", DType.INT32)), INDEX_TYPES)
        if self.samples < 1:
            raise node.invalid(f"Multinomial sample_size must be positive, got {self.samples}")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, self.float_types(), 0)
        shape = ctx.shape(0)
        if len(shape) != 2 or shape[1] < 1:
            raise self.node.bad_input(
                f"Multinomial needs an input [batch, classes], got {list(shape)}",
                self.node.inputs[0],
            )
        return [ctx.output(self.dtype, (shape[0], self.samples))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp, out = ctx.xp, outputs[0]
        logits = inputs[0].astype(xp.float64)
        weights = xp.exp(logits - logits.max(axis=1, keepdims=True))
        cumulative = xp.cumsum(weights, axis=1)
        draws = self.generator(xp).random_sample(size=out.shape) * cumulative[:, -1:]
        last = logits.shape[1] - 1
        for row in range(out.shape[0]):
            picked = xp.searchsorted(cumulative[row], draws[row], side="right")
            out[row] = xp.minimum(picked, last)


DEFS: tuple[OpDef, ...] = (
    OpDef("TopK", 1, TopKOp),
    OpDef("NonZero", 9, NonZeroOp),
    OpDef("Unique", 11, UniqueOp),
    OpDef("Compress", 9, CompressOp),
    OpDef("NonMaxSuppression", 10, NonMaxSuppressionOp),
    OpDef("CumSum", 11, CumSumOp),
    OpDef("CumProd", 26, CumProdOp),
    OpDef("Einsum", 12, EinsumOp),
    OpDef("Det", 11, DetOp),
    OpDef("BitCast", 26, BitCastOp),
    OpDef("TensorScatter", 24, TensorScatterOp),
    OpDef("MeanVarianceNormalization", 9, MeanVarianceNormalizationOp),
    OpDef("RandomUniform", 1, RandomUniformOp),
    OpDef("RandomNormal", 1, RandomNormalOp),
    OpDef("RandomUniformLike", 1, RandomUniformLikeOp),
    OpDef("RandomNormalLike", 1, RandomNormalLikeOp),
    OpDef("Bernoulli", 15, BernoulliOp),
    OpDef("Multinomial", 7, MultinomialOp),
)
