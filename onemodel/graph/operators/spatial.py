"""Spatial rearrangements: DepthToSpace, SpaceToDepth, Col2Im, MaxUnpool, CenterCropPad,
ReverseSequence and Trilu.

All of them move elements without arithmetic (Col2Im adds overlapping blocks), so each is a
reshape and transpose, strided slices, or one gather or scatter on the backend; index tables
that depend only on small inputs (sequence lengths) are built on the host.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.operators.axes import INDEX_TYPES, INT64_ONLY, host_ints, normalize_axes
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.unary import FLOATS, NUMERIC, widened


def host_values(ctx: RunContext, array: Array) -> list[int]:
    return [int(v) for v in np.asarray(ctx.kernels.memory.to_host(array)).reshape(-1)]


# -- DepthToSpace, SpaceToDepth ----------------------------------------------------------------


class BlockRearrangeOp(Operator):
    """Moves blocksize x blocksize blocks between the channels and the two spatial axes of a
    4-D input: a reshape to six axes, a transpose, a reshape. `mode_since` is the first opset
    with the `mode` attribute (DCR before it). Exact: data movement."""

    supports_exact = True

    mode_since: ClassVar[int]

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.blocksize = int(node.attr("blocksize"))
        if self.blocksize < 1:
            raise node.invalid(f"{node.op_type} blocksize must be positive, got {self.blocksize}")
        self.mode = str(node.attr("mode", "DCR")) if node.opset >= self.mode_since else "DCR"
        if self.mode not in ("DCR", "CRD"):
            raise node.invalid(f"{node.op_type} mode '{self.mode}' is not one of ['DCR', 'CRD']")

    def staged(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The six-axis view of the input and the permutation that orders it as the output."""
        raise NotImplementedError

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError

    def check(self, shape: tuple[int, ...], divides: bool, what: str) -> None:
        if len(shape) != 4 or not divides:
            raise self.node.bad_input(
                f"{self.node.op_type} needs a 4-D input whose {what} divides by blocksize "
                f"{self.blocksize}, got shape {list(shape)}",
                self.node.inputs[0],
            )

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        return [ctx.output(ctx.dtype(0), self.output_shape(ctx.shape(0)))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        view, perm = self.staged(inputs[0].shape)
        staged = inputs[0].reshape(view)
        moved_shape = tuple(view[p] for p in perm)
        ctx.kernels.transpose_arrays(staged, perm, outputs[0].reshape(moved_shape))


class DepthToSpaceOp(BlockRearrangeOp):
    """DepthToSpace (1; mode DCR or CRD from 11)."""

    mode_since = 11

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        self.check(shape, len(shape) == 4 and shape[1] % self.blocksize**2 == 0, "channels")
        b = self.blocksize
        n, c, h, w = shape
        return (n, c // (b * b), h * b, w * b)

    def staged(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        b = self.blocksize
        n, c, h, w = shape
        if self.mode == "DCR":
            return (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
        return (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)


class SpaceToDepthOp(BlockRearrangeOp):
    """SpaceToDepth (1; mode DCR or CRD from 28)."""

    mode_since = 28

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        b = self.blocksize
        self.check(shape, len(shape) == 4 and shape[2] % b == shape[3] % b == 0, "height and width")
        n, c, h, w = shape
        return (n, c * b * b, h // b, w // b)

    def staged(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        b = self.blocksize
        n, c, h, w = shape
        perm = (0, 3, 5, 1, 2, 4) if self.mode == "DCR" else (0, 1, 3, 5, 2, 4)
        return (n, c, h // b, b, w // b, b), perm


# -- Col2Im ----------------------------------------------------------------------------------


class Col2ImOp(Operator):
    """Col2Im (18): adds sliding blocks (N, C * prod(block), L) back into images
    (N, C, *image_shape). One strided slice per kernel offset: for a fixed offset, distinct
    blocks land on distinct pixels. float16 and bfloat16 accumulate in float32. Exact
    (floats): the sum in float64 from +0 over the kernel offsets in row-major order, rounded
    once; integers wrap, exact by nature."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.dilations = [int(d) for d in node.attr("dilations", [])]
        self.pads = [int(p) for p in node.attr("pads", [])]
        self.strides = [int(s) for s in node.attr("strides", [])]

    def geometry(
        self, shape: tuple[int, ...], image: list[int], block: list[int]
    ) -> tuple[list[int], list[int], list[int], list[int]]:
        """Dilations, begin pads, strides and block counts per axis, checked against the
        input."""
        rank = len(image)
        dilations = self.dilations or [1] * rank
        pads = self.pads or [0] * (2 * rank)
        strides = self.strides or [1] * rank
        fits = (
            rank > 0
            and (len(block), len(dilations), len(strides), len(pads))
            == (rank, rank, rank, 2 * rank)
            and min(image + block + dilations + strides) >= 1
            and min(pads) >= 0
            and len(shape) == 3
            and shape[1] % math.prod(block) == 0
        )
        counts = [
            (image[i] + pads[i] + pads[i + rank] - dilations[i] * (block[i] - 1) - 1) // strides[i]
            + 1
            for i in range(rank if fits else 0)
        ]
        if not fits or min(counts) < 1 or shape[2] != math.prod(counts):
            raise self.node.bad_input(
                f"Col2Im cannot fold an input of shape {list(shape)} into image {image} with "
                f"blocks {block}, dilations {dilations}, pads {pads} and strides {strides}",
                self.node.inputs[0],
            )
        return dilations, pads[:rank], strides, counts

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, NUMERIC, 0)
        self.check_types(ctx, INT64_ONLY, 1, 2)
        shape = ctx.shape(0)
        image, block = host_ints(ctx, 1), host_ints(ctx, 2)
        self.geometry(shape, image, block)
        return [ctx.output(ctx.dtype(0), (shape[0], shape[1] // math.prod(block), *image))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        data, out = inputs[0], outputs[0]
        image, block = host_values(ctx, inputs[1]), host_values(ctx, inputs[2])
        dilations, pads, strides, counts = self.geometry(data.shape, image, block)
        exact = ctx.exact and data.dtype.kind == "f"
        xp = ctx.kernels.xp if exact else xp
        values = widen(xp, data) if exact else widened(xp, data)
        columns = values.reshape(*out.shape[:2], math.prod(block), *counts)
        total = xp.zeros(out.shape, dtype=columns.dtype)
        for k, offsets in enumerate(itertools.product(*(range(b) for b in block))):
            pixels, blocks = [], []
            for offset, dilation, pad, stride, count, size in zip(
                offsets, dilations, pads, strides, counts, image, strict=True
            ):
                start = offset * dilation - pad  # the pixel of block 0
                first = max(0, -(start // stride))
                last = min(count, (size - 1 - start) // stride + 1)
                pixels.append(
                    slice(start + first * stride, start + (last - 1) * stride + 1, stride)
                )
                blocks.append(slice(first, last))
            if all(b.stop > b.start for b in blocks):
                total[(Ellipsis, *pixels)] += columns[(slice(None), slice(None), k, *blocks)]
        if exact:
            store(xp, out, total)
        else:
            xp.copyto(out, total, casting="unsafe")


# -- MaxUnpool -------------------------------------------------------------------------------


class MaxUnpoolOp(Operator):
    """MaxUnpool (9; 11 and 22 change only types): scatters X to its indices in a zero tensor
    of the unpooled shape (N, C, (in - 1) * stride - pads + kernel ...). Indices count over
    that whole tensor. With output_shape, that tensor fills the top-left corner of a zero
    tensor of output_shape: the conformance data (and the reference) say so, where
    onnxruntime counts the indices over output_shape instead.

    Exact mode defines repeated indices: the last of them in X's row-major order wins (the
    winners found by a stable sort, then one scatter to distinct places: any backend)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.kernel = [int(k) for k in node.attr("kernel_shape")]
        rank = len(self.kernel)
        self.strides = [int(s) for s in node.attr("strides", [1] * rank)]
        self.pads = [int(p) for p in node.attr("pads", [0] * (2 * rank))]
        if (
            len(self.strides) != rank
            or len(self.pads) != 2 * rank
            or min(self.kernel + self.strides, default=1) < 1
            or min(self.pads, default=0) < 0
        ):
            raise node.invalid(
                f"MaxUnpool kernel_shape {self.kernel}, strides {self.strides} and pads "
                f"{self.pads} do not fit together"
            )

    def unpooled(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        rank = len(self.kernel)
        if len(shape) != rank + 2:
            raise self.node.bad_input(
                f"MaxUnpool with kernel_shape {self.kernel} needs a {rank + 2}-D input, got "
                f"shape {list(shape)}",
                self.node.inputs[0],
            )
        return (
            *shape[:2],
            *(
                (d - 1) * s - self.pads[i] - self.pads[i + rank] + k
                for i, (d, s, k) in enumerate(
                    zip(shape[2:], self.strides, self.kernel, strict=True)
                )
            ),
        )

    def output_shape(self, shape: tuple[int, ...], given: list[int] | None) -> tuple[int, ...]:
        unpooled = self.unpooled(shape)
        if given is None:
            return unpooled
        if len(given) != len(shape) or any(g < u for g, u in zip(given, unpooled, strict=True)):
            raise self.node.bad_input(
                f"MaxUnpool output_shape {given} must have rank {len(shape)} and hold the "
                f"unpooled shape {list(unpooled)}",
                self.node.inputs[2],
            )
        return tuple(given)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS, 0)
        self.check_types(ctx, INT64_ONLY, 1, 2)
        if ctx.shape(1) != ctx.shape(0):
            raise self.node.bad_input(
                f"MaxUnpool indices of shape {list(ctx.shape(1))} do not match X of shape "
                f"{list(ctx.shape(0))}",
                self.node.inputs[1],
            )
        given = host_ints(ctx, 2) if ctx.has(2) else None
        return [ctx.output(ctx.dtype(0), self.output_shape(ctx.shape(0), given))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        data, indices, out = inputs[0], inputs[1].reshape(-1), outputs[0]
        out.fill(0)
        if indices.size == 0:
            return
        unpooled = self.unpooled(data.shape)
        limit = math.prod(unpooled)
        low, high = (
            int(v) for v in ctx.kernels.memory.to_host(xp.stack([indices.min(), indices.max()]))
        )
        if low < 0 or high >= limit:
            raise self.node.bad_input(
                f"MaxUnpool indices must lie in [0, {limit}) for the unpooled shape "
                f"{list(unpooled)}, got values in [{low}, {high}]",
                self.node.inputs[1],
            )
        if out.shape != unpooled:
            indices = xp.ravel_multi_index(xp.unravel_index(indices, unpooled), out.shape)
        values = data.reshape(-1)
        if ctx.exact:  # the last of repeated indices wins: one scatter to distinct places
            order = xp.argsort(indices, kind="stable")
            places = indices[order]
            last = xp.concatenate([places[1:] != places[:-1], xp.ones(1, dtype=bool)])
            indices, values = places[last], values[order[last]]
        out.reshape(-1)[indices] = values


# -- CenterCropPad ---------------------------------------------------------------------------


class CenterCropPadOp(Operator):
    """CenterCropPad (18): crops or zero-pads the given axes to `shape` around the centre
    (the odd element goes to the end). Exact: data movement."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        axes = node.attr("axes", None)
        self.axes = None if axes is None else [int(a) for a in axes]

    def target(self, shape: tuple[int, ...], sizes: list[int]) -> list[int]:
        rank = len(shape)
        axes = range(rank) if self.axes is None else normalize_axes(self.node, self.axes, rank)
        if len(sizes) != len(axes) or min(sizes, default=0) < 0:
            raise self.node.bad_input(
                f"CenterCropPad needs {len(axes)} non-negative sizes for input shape "
                f"{list(shape)}, got {sizes}",
                self.node.inputs[1],
            )
        target = list(shape)
        for axis, size in zip(axes, sizes, strict=True):
            target[axis] = size
        return target

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INDEX_TYPES, 1)
        return [ctx.output(ctx.dtype(0), self.target(ctx.shape(0), host_ints(ctx, 1)))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        data, out = inputs[0], outputs[0]
        crop, place = [], []
        for have, want in zip(data.shape, out.shape, strict=True):
            start = abs(have - want) // 2
            kept = min(have, want)
            (crop if have > want else place).append(slice(start, start + kept))
            (place if have > want else crop).append(slice(0, kept))
        if data.shape != out.shape:
            out.fill(0)
        out[tuple(place)] = data[tuple(crop)]


# -- ReverseSequence -------------------------------------------------------------------------


class ReverseSequenceOp(Operator):
    """ReverseSequence (10): reverses the first sequence_lens[b] steps of each batch entry,
    one gather of (batch, time) index pairs. Exact: data movement."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.batch_axis = int(node.attr("batch_axis", 1))
        self.time_axis = int(node.attr("time_axis", 0))
        if {self.batch_axis, self.time_axis} != {0, 1}:
            raise node.invalid(
                f"ReverseSequence needs batch_axis and time_axis to be 0 and 1, got "
                f"{self.batch_axis} and {self.time_axis}"
            )

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INT64_ONLY, 1)
        shape = ctx.shape(0)
        if len(shape) < 2 or ctx.shape(1) != (shape[self.batch_axis],):
            raise self.node.bad_input(
                f"ReverseSequence needs sequence_lens of shape [batch] for input shape "
                f"{list(shape)} (batch_axis {self.batch_axis}), got {list(ctx.shape(1))}",
                self.node.inputs[1],
            )
        return [ctx.output(ctx.dtype(0), shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        data, out = inputs[0], outputs[0]
        steps = data.shape[self.time_axis]
        lengths = np.asarray(host_values(ctx, inputs[1]), dtype=np.int64)[:, None]
        if lengths.size and (lengths.min() < 0 or lengths.max() > steps):
            raise self.node.bad_input(
                f"ReverseSequence sequence_lens must lie in [0, {steps}], got "
                f"{lengths.ravel().tolist()}",
                self.node.inputs[1],
            )
        time = np.arange(steps)[None, :]
        source = np.where(time < lengths, lengths - 1 - time, time)  # (batch, time)
        batch = np.broadcast_to(np.arange(len(lengths))[:, None], source.shape)
        pairs = (batch, source) if self.batch_axis == 0 else (source.T, batch.T)
        xp.copyto(out, data[tuple(xp.asarray(p) for p in pairs)])


# -- Trilu -----------------------------------------------------------------------------------


class TriluOp(Operator):
    """Trilu (14): keeps the upper (or lower) triangle of the last two axes from diagonal k,
    zeroing the rest in place. Exact: data movement."""

    in_place_input = 0
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.upper = bool(node.attr("upper", 1))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INT64_ONLY, 1)
        shape = ctx.shape(0)
        if len(shape) < 2 or (ctx.has(1) and math.prod(ctx.shape(1)) != 1):
            raise self.node.bad_input(
                f"Trilu needs an input of rank 2 or more and one k, got shapes {list(shape)} "
                f"and {list(ctx.shape(1)) if ctx.has(1) else None}",
                self.node.inputs[0],
            )
        return [ctx.output(ctx.dtype(0), shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        data, out = inputs[0], outputs[0]
        k = host_values(ctx, inputs[1])[0] if len(inputs) > 1 and inputs[1] is not None else 0
        rows, cols = data.shape[-2:]
        diagonal = xp.arange(cols)[None, :] - xp.arange(rows)[:, None]
        dropped = diagonal < k if self.upper else diagonal > k
        xp.copyto(out, data)
        xp.copyto(out, xp.zeros((), dtype=out.dtype), where=dropped)


DEFS: tuple[OpDef, ...] = (
    OpDef("DepthToSpace", 1, DepthToSpaceOp),
    OpDef("SpaceToDepth", 1, SpaceToDepthOp),
    OpDef("Col2Im", 18, Col2ImOp),
    OpDef("MaxUnpool", 9, MaxUnpoolOp),
    OpDef("CenterCropPad", 18, CenterCropPadOp),
    OpDef("ReverseSequence", 10, ReverseSequenceOp),
    OpDef("Trilu", 14, TriluOp),
)
