"""com.microsoft.EmbedLayerNormalization: BERT's embedding layer as onnxruntime's transformer
optimizer fuses it (word + position + optional segment embedding, then layer normalization),
with the optional mask index (per batch row, the number of mask entries equal to 1); and
QEmbedLayerNormalization, the same on 8-bit tables, as quantize_dynamic writes it.

Ids are int32 (the optimizer inserts the casts); position ids default to 0..S-1 and may be one
row (1, S) shared by every batch row. The normalization is LayerNormalization's standardization
over the hidden axis, computed in float32 (float64 for double) and rounded once. Exact: the rows
widened exactly to float64, (word + position) + segment, then LayerNormalization's exact recipe
(normalization.exact_affine) with gamma and beta; each output rounded once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.operators.base import (
    MICROSOFT,
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.normalization import Standardization, exact_affine
from onemodel.graph.operators.unary import FLOATS
from onemodel.tensors import DType

_EIGHT_BITS = frozenset({DType.INT8, DType.UINT8})

INPUT_IDS, SEGMENT_IDS, WORDS, POSITIONS, SEGMENTS, GAMMA, BETA, MASK, POSITION_IDS = range(9)
_IDS = (INPUT_IDS, SEGMENT_IDS, MASK, POSITION_IDS)
_TABLES = {WORDS: "word_embedding", POSITIONS: "position_embedding", SEGMENTS: "segment_embedding"}


def _as_type(dtype: Any, values: Array) -> Array:
    """values converted to `dtype` (a copy: the sum is formed in it in place)."""
    return values.astype(dtype)


class EmbedLayerNormalization(Standardization):
    """LayerNorm(word[ids] + position[position_ids] + segment[segment_ids]) · gamma + beta.

    Outputs: the normalized embedding (B, S, H), the int32 mask index (B,) and the sum before
    normalization (B, S, H). Ids outside a table are refused when the run sees them."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.epsilon = float(node.attr("epsilon", 1e-12))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        for index in _IDS:
            if index < len(ctx) and ctx.has(index) and ctx.dtype(index) != DType.INT32:
                raise node.invalid(
                    f"EmbedLayerNormalization: input {index} must be int32", node.inputs[index]
                )
        for index in (WORDS, POSITIONS, GAMMA, BETA):
            if not ctx.has(index):
                raise node.invalid(
                    f"EmbedLayerNormalization: input {index} is required",
                    node.inputs[index] if index < len(node.inputs) else None,
                )
        self.check_types(ctx, FLOATS, WORDS, POSITIONS, GAMMA, BETA)
        ids = ctx.shape(INPUT_IDS)
        if len(ids) != 2:
            raise node.bad_input(
                f"EmbedLayerNormalization: input_ids of shape {ids} is not (batch, sequence)",
                node.inputs[INPUT_IDS],
            )
        hidden = ctx.shape(WORDS)[-1]
        dtype = ctx.dtype(WORDS)
        for index, name in _TABLES.items():
            if index < len(ctx) and ctx.has(index):
                shape = ctx.shape(index)
                if len(shape) != 2 or shape[1] != hidden or ctx.dtype(index) != dtype:
                    raise node.bad_input(
                        f"EmbedLayerNormalization: {name} of shape {shape} is not (rows, {hidden})"
                        " of the word embedding's type",
                        node.inputs[index],
                    )
        for index, name in ((GAMMA, "gamma"), (BETA, "beta")):
            if ctx.shape(index) != (hidden,):
                raise node.bad_input(
                    f"EmbedLayerNormalization: {name} of shape {ctx.shape(index)} is not "
                    f"({hidden},)",
                    node.inputs[index],
                )
        batch, sequence = ids
        allowed = {SEGMENT_IDS: [ids], MASK: [ids], POSITION_IDS: [ids, (1, sequence)]}
        for index, shapes in allowed.items():
            if index < len(ctx) and ctx.has(index) and ctx.shape(index) not in shapes:
                raise node.bad_input(
                    f"EmbedLayerNormalization: input {index} of shape {ctx.shape(index)} does "
                    f"not match input_ids {ids}",
                    node.inputs[index],
                )
        if ctx.has(SEGMENT_IDS) != (len(ctx) > SEGMENTS and ctx.has(SEGMENTS)):
            raise node.invalid(
                "EmbedLayerNormalization: segment_ids and segment_embedding come together",
                node.inputs[SEGMENT_IDS] or None,
            )
        output = ctx.output(dtype, (batch, sequence, hidden))
        specs = [output, ctx.output(DType.INT32, (batch,)), output]
        return specs[: len(node.outputs)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        given = list(inputs) + [None] * (9 - len(inputs))

        def rows(table: int, ids: Array, ids_index: int) -> Array:
            return self._rows(ctx, given[table], ids, table, ids_index)

        self._embed(ctx, given, outputs, rows, given[GAMMA], given[BETA])

    def _embed(
        self, ctx: RunContext, given: list[Array | None], outputs: Any,
        rows: Callable[[int, Array, int], Array], gamma: Array, beta: Array,
    ) -> None:  # fmt: skip
        """The three outputs from `rows(table, ids, ids input)`, each table's rows of the
        tables' type (float32 once dequantized), summed in the working type: float32 (float64
        for double), or exact mode's float64."""
        xp = ctx.kernels.xp if ctx.exact else ctx.xp
        if ctx.exact:
            working = functools.partial(widen, xp)
        else:
            compute = xp.float64 if given[WORDS].dtype == xp.float64 else xp.float32
            working = functools.partial(_as_type, compute)
        ids = given[INPUT_IDS]
        sequence = ids.shape[1]
        positions = given[POSITION_IDS] if len(given) > POSITION_IDS else None
        if positions is None:
            positions = xp.arange(sequence, dtype=xp.int32).reshape(1, sequence)
        with np.errstate(all="ignore"):
            total = working(rows(WORDS, ids, INPUT_IDS))
            total += working(rows(POSITIONS, positions, POSITION_IDS))
            if given[SEGMENT_IDS] is not None:
                total += working(rows(SEGMENTS, given[SEGMENT_IDS], SEGMENT_IDS))
        if len(outputs) > 2 and outputs[2] is not None:
            store(xp, outputs[2], total)
        if ctx.exact:
            exact_affine(xp, total, (2,), self.epsilon, gamma, beta, outputs[0])
        else:
            values, _, _ = self._standardize(xp, total, (-1,), self.epsilon, compute)
            self._affine(xp, values, gamma.astype(compute), beta.astype(compute), outputs[0])
        if len(outputs) > 1 and outputs[1] is not None:
            mask = given[MASK]
            if mask is None:
                outputs[1][...] = 0
            else:
                xp.sum(mask == 1, axis=1, dtype=xp.int32, out=outputs[1])

    def _rows(self, ctx: RunContext, table: Array, ids: Array, table_index: int,
              ids_index: int) -> Array:  # fmt: skip
        """table[ids], refusing ids outside the table."""
        rows = table.shape[0]
        outside = (ids < 0) | (ids >= rows)
        if bool(outside.any()):
            first = int(ctx.kernels.memory.to_host(ids[outside][:1])[0])
            name = self.node.inputs[ids_index] if ids_index < len(self.node.inputs) else ""
            raise self.node.bad_input(
                f"{self.node.op_type}: id {first} is outside {_TABLES[table_index]} of {rows} rows",
                name or self.node.inputs[INPUT_IDS],
            )
        return ctx.xp.take(table, ids, axis=0)


# QEmbedLayerNormalization's inputs after the quantized tables, gamma, beta and mask (0..7):
# a float32 scale, then a zero point of the table's type, for each of the five.
_QUANTIZED = (WORDS, POSITIONS, SEGMENTS, GAMMA, BETA)
_SCALE = {index: 8 + k for k, index in enumerate(_QUANTIZED)}
_ZERO = {index: 13 + k for k, index in enumerate(_QUANTIZED)}


class QEmbedLayerNormalization(EmbedLayerNormalization):
    """EmbedLayerNormalization on uint8/int8 tables, gamma and beta, each with one float32
    scale and zero point, as quantize_dynamic writes it for the transformer optimizer's fused
    embedding: every value dequantized in float32, (q − zero point) · scale (exact, then one
    rounding), as onnxruntime's CPU kernel does; no position ids, two outputs. Exact: the same
    dequantization (the difference exact, the product one float32 rounding), then
    EmbedLayerNormalization's exact recipe."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        if len(ctx) != 18 or len(node.outputs) > 2:
            raise node.invalid(
                "QEmbedLayerNormalization: takes 18 inputs (ids, tables, gamma, beta, mask, "
                "their scales and zero points) and makes at most 2 outputs",
                node.inputs[0] if node.inputs else None,
            )
        for index in _QUANTIZED:
            if index != SEGMENTS or ctx.has(index):
                self.check_types(ctx, _EIGHT_BITS, index)
                self.check_types(ctx, {DType.FLOAT}, _SCALE[index])
                self._check_scalar(ctx, _SCALE[index])
                if ctx.has(_ZERO[index]):
                    self._check_scalar(ctx, _ZERO[index])
                    if ctx.dtype(_ZERO[index]) != ctx.dtype(index):
                        raise node.invalid(
                            "QEmbedLayerNormalization: a zero point has its table's type",
                            node.inputs[_ZERO[index]],
                        )
        # EmbedLayerNormalization's checks of shapes and ids, on the tables seen as float32.
        specs = [
            TensorSpec(DType.FLOAT, spec.shape) if index in _QUANTIZED and spec else spec
            for index, spec in enumerate(ctx.specs[:8])
        ]
        return super().infer(InferContext(node, specs, [None] * 8))[:2]

    def _check_scalar(self, ctx: InferContext, index: int) -> None:
        if math.prod(ctx.shape(index)) != 1:
            raise self.node.bad_input(
                f"QEmbedLayerNormalization: input {index} of shape {ctx.shape(index)} is not "
                "one value (per-tensor quantization)",
                self.node.inputs[index],
            )

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp  # exact mode's namespace: float32 products keep subnormals on CuPy
        given = list(inputs[:8])

        def dequantized(index: int, values: Array) -> Array:
            zero = inputs[_ZERO[index]]
            shifted = values.astype(xp.float32)
            if zero is not None:
                shifted = xp.subtract(shifted, zero.reshape(()).astype(xp.float32))
            return xp.multiply(shifted, inputs[_SCALE[index]].reshape(()).astype(xp.float32))

        def rows(table: int, ids: Array, ids_index: int) -> Array:
            return dequantized(table, self._rows(ctx, given[table], ids, table, ids_index))

        gamma, beta = dequantized(GAMMA, given[GAMMA]), dequantized(BETA, given[BETA])
        self._embed(ctx, given, outputs, rows, gamma, beta)


DEFS = (
    OpDef("EmbedLayerNormalization", 1, EmbedLayerNormalization, domain=MICROSOFT),
    OpDef("QEmbedLayerNormalization", 1, QEmbedLayerNormalization, domain=MICROSOFT),
)
