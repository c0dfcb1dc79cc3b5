"""Image operators: DeformConv (convolution that samples its input at learned offsets) and
ImageDecoder (encoded image bytes to pixels).

DeformConv gathers, for every output position and kernel tap, the input interpolated
(multilinearly, zero outside the input) at the tap's place moved by its offset and scaled by
its mask; the gathered columns then meet the weights in one matmul per group, as Conv's im2col
does. float16 and bfloat16 are computed in float32 and rounded once, into the output.

ImageDecoder decodes on the host with Pillow, an optional dependency imported when a node
runs.
"""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.conv import Placement, SlidingWindows
from onemodel.graph.operators.exact_products import working_product
from onemodel.graph.operators.selection import DataDependentOperator
from onemodel.tensors import DType

_DEFORM_FLOATS = frozenset({DType.FLOAT16, DType.FLOAT, DType.DOUBLE})


class DeformConvOp(Operator):
    """Y[n, o] = B[o] + Σ W[o, c, k] · mask[n, g, k, p] · X[n, c](p·stride − pad + k·dilation
    + offset[n, g, k, p]) over the input channels c of o's group and the kernel taps k, where g
    is c's offset group. Offsets are laid out (offset_group, *kernel, spatial axis) along
    axis 1; a sample between input elements interpolates its 2ⁿ neighbours, and neighbours
    outside the input count as zero.

    Exact: the sampling in float64 from exactly widened X, offsets and mask, one operation
    each as `_columns` writes it (position = offset + origin; f = position − floor; a
    corner's weight the product from 1 of its axes' f or 1 − f in axis order, times the mask;
    each column the sum from +0 of where(inside, value·weight, 0) over the corners in
    row-major (0, 1)ⁿ order); then Conv's product: the columns rounded to float32 and W ·
    columns per group by the exact matmul, each element the exact dot product rounded once
    into float32 (float64: both in float64, the ordered float64 sum); the bias one float64
    add; rounded once into the output."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.windows = SlidingWindows(node)
        self.group = int(node.attr("group", 1))
        self.offset_group = int(node.attr("offset_group", 1))
        if self.group < 1 or self.offset_group < 1:
            raise node.invalid(
                f"DeformConv: group {self.group} and offset_group {self.offset_group} must be ≥ 1"
            )

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        types = _DEFORM_FLOATS | ({DType.BFLOAT16} if self.node.opset >= 22 else set())
        self.check_types(ctx, frozenset(types))
        present = [i for i in range(len(ctx.specs)) if ctx.has(i)]
        if len({ctx.dtype(i) for i in present}) > 1:
            raise self.node.invalid("DeformConv needs all its inputs of one element type")
        x, w = ctx.shape(0), ctx.shape(1)
        if len(x) < 3 or len(w) != len(x):
            raise self.node.bad_input(
                f"DeformConv needs X (N, C, D1, …) and W (oC, C/group, k1, …) of the same rank, "
                f"not shapes {x} and {w}",
                self.node.inputs[1],
            )
        batch, channels, spatial = x[0], x[1], x[2:]
        if channels != w[1] * self.group or w[0] % self.group or channels % self.offset_group:
            raise self.node.bad_input(
                f"DeformConv with group {self.group} and offset_group {self.offset_group}: X "
                f"{x} and W {w} need C = W[1]·group, oC divisible by group and C divisible by "
                "offset_group",
                self.node.inputs[1],
            )
        kernel = self.windows.kernel_for(w[2:], len(spatial))
        placement = self.windows.place(spatial, kernel)
        taps = self.offset_group * math.prod(kernel)
        expected = {
            2: (batch, taps * len(spatial), *placement.out_spatial),
            3: (w[0],),
            4: (batch, taps, *placement.out_spatial),
        }
        for index, shape in expected.items():
            if ctx.has(index) and ctx.shape(index) != shape:
                raise self.node.bad_input(
                    f"DeformConv of X {x} with W {w}: input {index} has shape "
                    f"{ctx.shape(index)}, not {shape}",
                    self.node.inputs[index],
                )
        return [ctx.output(ctx.dtype(0), (batch, w[0], *placement.out_spatial))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x, w, offset = inputs[:3]
        bias = inputs[3] if len(inputs) > 3 else None
        mask = inputs[4] if len(inputs) > 4 else None
        (out,) = outputs
        xp = ctx.xp
        compute = xp.float64 if x.dtype == np.float64 else xp.float32
        if ctx.exact:
            xp, compute = ctx.kernels.xp, np.float64
            x, w, offset = (widen(xp, a) for a in (x, w, offset))
            bias, mask = (None if a is None else widen(xp, a) for a in (bias, mask))
        batch = x.shape[0]
        kernel = tuple(w.shape[2:])
        placement = self.windows.place(tuple(x.shape[2:]), kernel)
        columns = self._columns(xp, x.astype(compute, copy=False), offset, mask, kernel, placement)
        # (N, G, K·P, C/G) → (N, group, C/group · K, P): channel-major, as W is laid out
        taps, positions = math.prod(kernel), math.prod(placement.out_spatial)
        columns = columns.reshape(batch, self.offset_group, taps, positions, -1)
        columns = columns.transpose(0, 1, 4, 2, 3).reshape(batch, self.group, -1, positions)
        weights = w.astype(compute, copy=False).reshape(self.group, w.shape[0] // self.group, -1)
        if ctx.exact:
            product = working_product(ctx.kernels, out.dtype)
            result = product(weights, columns).reshape(out.shape)
        else:
            result = xp.matmul(weights, columns).reshape(out.shape)
        if bias is not None:
            result += bias.astype(compute).reshape(1, -1, *(1,) * len(kernel))
        if ctx.exact:
            store(xp, out, result)
            return
        xp.copyto(out, result, casting="unsafe")

    def _columns(
        self,
        xp: Any,
        x: Array,
        offset: Array,
        mask: Array | None,
        kernel: tuple[int, ...],
        placement: Placement,
    ) -> Array:
        """The sampled input, (N, offset_group, taps · positions, channels per offset group)."""
        batch, channels, spatial = x.shape[0], x.shape[1], x.shape[2:]
        rank, groups = len(spatial), self.offset_group
        taps, positions = math.prod(kernel), math.prod(placement.out_spatial)
        dtype = x.dtype
        # where each tap of each window lies before its offset: (rank, K, P)
        tap_at = xp.indices(kernel).reshape(rank, taps, 1)
        window_at = xp.indices(placement.out_spatial).reshape(rank, 1, positions)
        dilations = xp.asarray(placement.dilations).reshape(rank, 1, 1)
        strides = xp.asarray(placement.strides).reshape(rank, 1, 1)
        begins = xp.asarray(placement.pads_begin).reshape(rank, 1, 1)
        origin = (tap_at * dilations + window_at * strides - begins).astype(dtype)
        moved = offset.astype(dtype).reshape(batch, groups, taps, rank, positions)
        at = moved.transpose(0, 1, 3, 2, 4) + origin  # (N, G, rank, K, P)
        low = xp.floor(at)
        fraction = at - low
        low = low.astype(xp.int64)
        scale = None if mask is None else mask.astype(dtype).reshape(batch, groups, taps, -1)
        # (N, G, flat spatial, channels of the group): one gather takes all channels at once
        source = x.reshape(batch, groups, channels // groups, -1).transpose(0, 1, 3, 2)
        samples = xp.arange(batch).reshape(-1, 1, 1)
        offset_groups = xp.arange(groups).reshape(1, -1, 1)
        columns = xp.zeros((batch, groups, taps * positions, channels // groups), dtype=dtype)
        for corner in itertools.product((0, 1), repeat=rank):
            weight = xp.ones((batch, groups, taps, positions), dtype=dtype)
            flat = xp.zeros((batch, groups, taps, positions), dtype=xp.int64)
            inside = xp.ones((batch, groups, taps, positions), dtype=bool)
            for axis, (step, size) in enumerate(zip(corner, spatial, strict=True)):
                index = low[:, :, axis] + step
                share = fraction[:, :, axis]
                weight *= share if step else 1 - share
                inside &= (index >= 0) & (index < size)
                flat = flat * size + xp.clip(index, 0, size - 1)
            if scale is not None:
                weight *= scale
            gathered = source[samples, offset_groups, flat.reshape(batch, groups, -1)]
            shape = (batch, groups, taps * positions, 1)
            columns += xp.where(inside.reshape(shape), gathered * weight.reshape(shape), 0)
        return columns


class ImageDecoderOp(DataDependentOperator):
    """Decodes a 1-D uint8 tensor of BMP, JPEG, JPEG 2000, TIFF, PNG, WebP or PNM bytes into
    (height, width, channels) uint8 pixels: 3 channels in RGB or BGR order, or 1 for
    Grayscale (ITU-R 601-2 luma, as Pillow converts). Bytes that do not decode as one of those
    formats give an empty (0, 0, channels) tensor, as the operator defines."""

    _FORMATS = ("RGB", "BGR", "Grayscale")
    _PILLOW_FORMATS = ("BMP", "JPEG", "JPEG2000", "TIFF", "PNG", "WEBP", "PPM")

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        pixel_format = node.attr("pixel_format", "RGB")
        self.pixel_format = (
            pixel_format.decode() if isinstance(pixel_format, bytes) else str(pixel_format)
        )
        if self.pixel_format not in self._FORMATS:
            raise node.invalid(
                f"ImageDecoder: pixel_format must be one of {self._FORMATS}, not "
                f"{self.pixel_format!r}"
            )

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> list[Array]:
        self.check_array_types(frozenset({DType.UINT8}), inputs)
        (encoded,) = inputs
        if encoded.ndim != 1:
            raise self.node.bad_input(
                f"ImageDecoder needs a 1-D tensor of encoded bytes, not shape {encoded.shape}",
                self.node.inputs[0],
            )
        try:
            from PIL import Image
        except ImportError:
            raise self.node.unsupported(
                "ImageDecoder needs Pillow: pip install onemodel[image]"
            ) from None
        data = np.asarray(ctx.kernels.memory.to_host(encoded)).tobytes()
        mode = "L" if self.pixel_format == "Grayscale" else "RGB"
        try:
            with Image.open(io.BytesIO(data), formats=self._PILLOW_FORMATS) as image:
                pixels = np.asarray(image.convert(mode))
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
            pixels = np.zeros((0, 0, 3), dtype=np.uint8)  # undecodable: empty, as defined
        if mode == "L":
            pixels = pixels.reshape(*pixels.shape[:2], 1)
        elif self.pixel_format == "BGR":
            pixels = pixels[:, :, ::-1]
        return [ctx.xp.asarray(np.ascontiguousarray(pixels))]


DEFS: tuple[OpDef, ...] = (
    OpDef("DeformConv", 19, DeformConvOp),
    OpDef("ImageDecoder", 20, ImageDecoderOp),
)
