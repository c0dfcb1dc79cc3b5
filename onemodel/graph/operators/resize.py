"""Resampling: Resize and Upsample, GridSample, AffineGrid and RoiAlign.

Resize is separable: an N-D resize is a 1-D resize along each resized axis in turn. For each
axis the output positions are mapped to input coordinates once, on the host, into a table of
`output length x taps` indices and weights (it depends only on shapes, scales and attributes);
the backend then gathers and weighs the data tap by tap. The tables follow the ONNX reference
implementation (onnx.reference.ops.op_resize), which the conformance data come from, where it
and onnxruntime disagree: align_corners and tf_crop_and_resize divide by the fractional output
length `scale * input length`. They depart from it where it is inconsistent or against the
spec: a coordinate is integral or not once (the reference decides twice, before and after
padding, and can pick a neighbour off by one), scales from sizes stay exact ratios, and
pytorch_half_pixel maps a single output to 0 (the spec and onnxruntime; the reference: -0.5).

GridSample and RoiAlign sample at data-dependent positions: their taps (2 or 4 per axis, or
RoiAlign's sampling points) are a short Python loop, each tap one gather over every output.

Integer data are interpolated in float64 and rounded half to even, then saturated, as the
reference's saturate_cast does; float16 and bfloat16 data are interpolated in float32.

Exact mode (Resize, Upsample): the tables are host float64 arithmetic in a fixed order (their
normalizing sums add the taps in order), the same on every machine; nearest is a gather; linear
and cubic interpolate every float type in float64 with the float64 weights, taps summed in
order from the first, axis after axis without rounding between them, rounded once at the end.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onemodel.backends.ieee_float32 import store as store_float
from onemodel.backends.ieee_float32 import widen
from onemodel.backends.pixel_doubling import doubles_last_axes
from onemodel.graph.onnx_proto import TensorProto
from onemodel.graph.operators.axes import INT64_ONLY, host_ints, normalize_axes
from onemodel.graph.operators.base import (
    Array,
    BoundCall,
    BoundStep,
    InferContext,
    NeedsRunTimeValues,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.exact_products import constant_product
from onemodel.graph.operators.unary import FLOATS, NUMERIC
from onemodel.tensors import DType

ALL_TYPES = frozenset(DType)
FLOAT_ONLY = frozenset({TensorProto.FLOAT})

# Reads optional input i as a host array; None when it is absent or empty.
ValueReader = Callable[[int], np.ndarray | None]


def plan_values(ctx: InferContext) -> ValueReader:
    """Optional inputs as `infer` sees them (NeedsRunTimeValues when given but not known)."""

    def read(index: int) -> np.ndarray | None:
        if not ctx.has(index):
            return None
        value = np.asarray(ctx.value(index))
        return value if value.size else None

    return read


def run_values(ctx: RunContext, inputs: Sequence[Array | None]) -> ValueReader:
    """Optional inputs copied to the host, as `run` reads again what `infer` read."""

    def read(index: int) -> np.ndarray | None:
        if index >= len(inputs) or inputs[index] is None or inputs[index].size == 0:
            return None
        return np.asarray(ctx.kernels.memory.to_host(inputs[index]))

    return read


def working_dtype(dtype: Any) -> np.dtype:
    """The float type interpolation computes in: float64 for double and integers, else
    float32."""
    dtype = np.dtype(dtype)
    wide = dtype.kind in "biu" or dtype.itemsize == 8
    return np.dtype(np.float64 if wide else np.float32)


def store(xp: Any, value: Array, out: Array) -> None:
    """Write interpolated values: integers rounded half to even and saturated."""
    if out.dtype.kind in "iu":
        info = np.iinfo(out.dtype)
        high = float(info.max)
        if high > info.max:  # 64-bit: the largest float below 2**63 or 2**64
            high = float(np.nextafter(high, 0))
        value = xp.clip(xp.rint(value), float(info.min), high)
    xp.copyto(out, value, casting="unsafe")


def along(axis: int, index: Any) -> tuple:
    """An index tuple selecting `index` on `axis` and everything on the axes before it."""
    return (slice(None),) * axis + (index,)


# -- Resize and Upsample ---------------------------------------------------------------------

TRANSFORMS = (
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
    "tf_half_pixel_for_nn", "tf_crop_and_resize",
)  # fmt: skip
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
# Resize-10 and Upsample have no nearest_mode: onnxruntime truncates when enlarging an axis
# and takes the ceiling when shrinking it; this is that rule.
LEGACY_NEAREST = "legacy"


@dataclass(frozen=True, slots=True)
class AxisTable:
    """One resized axis: for each output position, the input indices (clamped into the axis)
    and weights of its taps, and which positions take the extrapolation value instead."""

    axis: int
    indices: np.ndarray
    weights: np.ndarray
    outside: np.ndarray | None


def _doubling(tables: list[AxisTable], in_shape: Sequence[int], out_shape: Sequence[int]) -> bool:
    """Whether nearest `tables` double the last two axes and nothing else (pixel_doubling)."""
    if len(tables) != 2 or any(t.outside is not None and t.outside.any() for t in tables):
        return False
    by_axis = {t.axis: t.indices[:, 0] for t in tables}
    rows, columns = by_axis.get(len(in_shape) - 2), by_axis.get(len(in_shape) - 1)
    if rows is None or columns is None:
        return False
    return doubles_last_axes(in_shape, out_shape, rows, columns)


def last_axis_early(tables: list[AxisTable], data: Array, out: Array) -> list[AxisTable]:
    """Shrinking axes first, then the last axis if it grows, then the other growing ones: a
    gather along the last axis moves single elements, along the others whole rows, so it is
    cheapest on the smallest array (nearest x2 on 64×64×64 float32: 0.6 ms against 3, AMD
    EPYC). The sort is stable: the shrink order stays."""
    last = data.ndim - 1

    def order(t: AxisTable) -> tuple[bool, bool]:
        return out.shape[t.axis] > data.shape[t.axis], t.axis != last

    return sorted(tables, key=order)


@dataclass(frozen=True, slots=True)
class AxisTarget:
    """What one axis is resized to: the output length, the scale `factor / per` and the roi
    (start, end). A scale from sizes stays the ratio of two integers, so that coordinates are
    `y * in / out` rather than `y / (out / in)`, which can land just off an integer and flip
    floor, ceil or a nearest tie."""

    length: int
    factor: float
    roi: tuple[float, float] = (0.0, 1.0)
    per: float = 1.0

    @property
    def scale(self) -> float:
        return self.factor / self.per

    def unscale(self, value: np.ndarray) -> np.ndarray:
        return value * self.per / self.factor


@dataclass(frozen=True, slots=True)
class Interpolation:
    """The attributes of a Resize that shape its per-axis tables."""

    mode: str
    transform: str = "half_pixel"
    nearest_mode: str = "round_prefer_floor"
    cubic_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False
    extrapolation: float = 0.0

    def source(self, size: int, target: AxisTarget) -> tuple[np.ndarray, np.ndarray | None]:
        """Each output position's input coordinate, and where tf_crop_and_resize leaves the
        input (the extrapolated positions)."""
        y = np.arange(target.length, dtype=np.float64)
        unscale = target.unscale
        width = target.factor * size / target.per  # fractional, as the reference divides by it
        match self.transform:
            case "half_pixel":
                return unscale(y + 0.5) - 0.5, None
            case "half_pixel_symmetric":
                offset = size / 2 * (1 - target.length / width)
                return offset + unscale(y + 0.5) - 0.5, None
            case "pytorch_half_pixel":
                if target.length > 1:
                    return unscale(y + 0.5) - 0.5, None
                return np.zeros_like(y), None
            case "align_corners":
                if width == 1:
                    return np.zeros_like(y), None
                return y * (size - 1) / (width - 1), None
            case "asymmetric":
                return unscale(y), None
            case "tf_half_pixel_for_nn":
                return unscale(y + 0.5), None
        start, end = target.roi
        if width == 1:
            x = np.full_like(y, (end - start) * (size - 1) / 2)
        else:
            x = y * (end - start) * (size - 1) / (width - 1)
        x = x + start * (size - 1)
        return x, (x < 0) | (x > size - 1)

    def coefficients(self, ratio: np.ndarray, scale: float) -> np.ndarray:
        """The taps' weights for each fractional position `ratio` in (0, 1]."""
        a = self.cubic_a
        if self.mode == "linear" and not self.antialias:
            return np.stack([1 - ratio, ratio], axis=1)
        if self.mode == "cubic" and not self.antialias:
            distances = np.stack([ratio + 1, ratio, 1 - ratio, 2 - ratio], axis=1)
            return cubic_kernel(distances, a)
        stretch = min(scale, 1.0)  # antialias widens the filter when shrinking
        reach = 1 if self.mode == "linear" else 2
        first = math.floor(-reach / stretch) + 1
        offsets = np.arange(first, 2 - first, dtype=np.float64)
        distances = np.abs(offsets[None, :] - ratio[:, None]) * stretch
        if self.mode == "linear":
            weights = np.clip(1 - distances, 0, 1)
        else:
            weights = cubic_kernel(distances, a)
        return weights / tap_sum(weights)

    def nearest(self, x: np.ndarray, scale: float) -> np.ndarray:
        floor = np.floor(x)
        whole = x == floor
        frac = x - floor
        match self.nearest_mode:
            case "round_prefer_floor":
                up = frac > 0.5
            case "round_prefer_ceil":
                up = frac >= 0.5
            case "floor":
                up = np.zeros_like(whole)
            case "ceil":
                up = ~whole
            case _:
                up = ~whole if scale < 1 else np.zeros_like(whole)
        return np.where(whole, x, floor + up)

    def table(self, axis: int, size: int, target: AxisTarget) -> AxisTable:
        x, outside = self.source(size, target)
        if self.mode == "nearest":
            indices = self.nearest(x, target.scale)[:, None].astype(np.int64)
            weights = np.ones(indices.shape, dtype=np.float64)
        else:
            floor = np.floor(x)
            ratio = np.where(x == floor, 1.0, x - floor)  # prefer the pixel left of x
            weights = self.coefficients(ratio, target.scale)
            indices = window(x, weights.shape[1])
            if self.exclude_outside:
                weights = np.where((indices < 0) | (indices >= size), 0.0, weights)
                total = tap_sum(weights)
                weights = weights / np.where(total == 0, 1.0, total)
        indices = np.clip(indices, 0, size - 1)
        return AxisTable(axis, indices, weights, outside)


def tap_sum(weights: np.ndarray) -> np.ndarray:
    """Each row's sum, the taps added in order (a fixed order, unlike NumPy's pairwise sum)."""
    return functools.reduce(operator.add, weights.T)[:, None]


def cubic_kernel(distance: Array, a: float, xp: Any = np) -> Array:
    """Keys' cubic convolution kernel (coefficient a) at |distance|."""
    d = xp.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return xp.where(d <= 1, near, xp.where(d < 2, far, 0.0))


def window(x: np.ndarray, taps: int) -> np.ndarray:
    """The `taps` (an even count) input indices nearest each coordinate, ties to the smaller
    index (the reference's neighbour rule), as an (outputs, taps) array: an integral
    coordinate is the last of the left half."""
    floor = np.floor(x)
    start = floor + np.where(x == floor, -(taps // 2), 1 - taps // 2)
    return start.astype(np.int64)[:, None] + np.arange(taps)


@dataclass(frozen=True, slots=True)
class _Shaped:
    """A shape where `last_axis_early` and the table order want an array (plan time)."""

    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)


class InterpolationOp(Operator):
    """Resize's machinery; subclasses say how attributes and inputs give the targets."""

    interpolation: Interpolation
    supports_exact = True

    def targets(self, shape: tuple[int, ...], read: ValueReader) -> list[AxisTarget]:
        raise NotImplementedError

    def check_inputs(self, ctx: InferContext) -> None:
        if self.interpolation.mode != "nearest":
            self.check_types(ctx, NUMERIC, 0)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_inputs(ctx)
        shape = ctx.shape(0)
        targets = self.targets(shape, plan_values(ctx))
        return [ctx.output(ctx.dtype(0), tuple(t.length for t in targets))]

    def from_scales(self, shape: tuple[int, ...], scales: np.ndarray, value: str) -> list[float]:
        if scales.ndim != 1 or len(scales) != len(shape):
            raise self.node.bad_input(
                f"{self.node.op_type} needs {len(shape)} scales for an input of shape "
                f"{list(shape)}, got shape {list(scales.shape)}",
                value,
            )
        if not np.all(scales > 0):
            raise self.node.bad_input(
                f"{self.node.op_type} scales must be positive, got {scales.tolist()}", value
            )
        return [float(s) for s in scales]

    def resized(self, shape: tuple[int, ...], scales: Sequence[float]) -> list[AxisTarget]:
        """Targets from one scale per axis: floor(length * scale)."""
        return [AxisTarget(int(d * s), s) for d, s in zip(shape, scales, strict=True)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        data, out = inputs[0], outputs[0]
        if out.size == 0:
            return
        targets = self.targets(data.shape, run_values(ctx, inputs))
        tables = self._ordered_tables(data, out, targets, ctx.exact)
        if self.interpolation.mode == "nearest":
            self.pick(ctx, data, tables, out)
        else:  # exact bits follow one order of the float64 sums
            self.weigh(ctx.xp, data, tables, out, exact=ctx.exact)

    def _ordered_tables(
        self, data: Any, out: Any, targets: list[AxisTarget], exact: bool
    ) -> list[AxisTable]:
        """The tables of the axes that change, in the order `run` applies them: shrinking
        axes first (less to do for the others), and but for exact sums `last_axis_early`.
        `data` and `out` need only their shapes."""
        tables = [
            self.interpolation.table(axis, size, target)
            for axis, (size, target) in enumerate(zip(data.shape, targets, strict=True))
            if not self.is_identity(size, target)
        ]
        tables.sort(key=lambda t: out.shape[t.axis] / data.shape[t.axis])
        if exact and self.interpolation.mode != "nearest":
            return tables
        return last_axis_early(tables, data, out)

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """Roi, scales and sizes known when planning: the tables made once, not in every run
        (most of a small Resize's time), then `run`'s gathers and weighted sums."""
        spec, out = step.specs[0], step.outputs[0]
        if ctx.exact or not math.prod(out.shape):
            return None
        memory = ctx.kernels.memory

        def read(index: int) -> np.ndarray | None:
            if index >= len(step.specs) or step.specs[index] is None:
                return None
            value = step.constants[index]
            if value is None:
                raise NeedsRunTimeValues
            value = np.asarray(memory.to_host(value))
            return value if value.size else None

        try:
            targets = self.targets(spec.shape, read)
        except NeedsRunTimeValues:
            return None
        tables = self._ordered_tables(_Shaped(spec.shape), _Shaped(out.shape), targets, False)
        if self.interpolation.mode == "nearest" and _doubling(tables, spec.shape, out.shape):

            def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
                if not ctx.kernels.double_last_axes_arrays(inputs[0], outputs[0], ctx.scratch):
                    self.pick(ctx, inputs[0], tables, outputs[0])

        elif self.interpolation.mode == "nearest":

            def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
                self.pick(ctx, inputs[0], tables, outputs[0])

        elif spec.numpy_dtype == working_dtype(spec.numpy_dtype) == out.numpy_dtype:
            held = HeldWeights(ctx.kernels, spec, out.shape, tables, self.interpolation)

            def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
                held(inputs[0], outputs[0])

        else:

            def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
                self.weigh(ctx.xp, inputs[0], tables, outputs[0])

        return call

    def is_identity(self, size: int, target: AxisTarget) -> bool:
        cropping = self.interpolation.transform == "tf_crop_and_resize"
        return (
            math.isclose(target.scale, 1.0)
            and target.length == size
            and (not cropping or target.roi == (0.0, 1.0))
        )

    def pick(self, ctx: RunContext, data: Array, tables: list[AxisTable], out: Array) -> None:
        """Nearest: a gather per axis, exact for every element type, the last one straight
        into out."""
        xp = ctx.xp
        result = data
        for i, t in enumerate(tables):
            shape = list(result.shape)
            shape[t.axis] = out.shape[t.axis]
            target = out if i == len(tables) - 1 else ctx.scratch(shape, out.dtype)
            ctx.kernels.take_arrays(result, xp.asarray(t.indices[:, 0]), t.axis, target)
            result = target
        if result is data:
            xp.copyto(out, data)
        fill = None
        for t in tables:
            if t.outside is not None and t.outside.any():
                if fill is None:
                    fill = xp.empty((), dtype=out.dtype)
                    store(xp, xp.asarray(self.interpolation.extrapolation), fill)
                out[along(t.axis, xp.asarray(t.outside))] = fill

    def weigh(
        self, xp: Any, data: Array, tables: list[AxisTable], out: Array, exact: bool = False
    ) -> None:
        """Linear and cubic: a weighted sum of gathered taps per axis (exact: all in float64,
        float32 data entering and leaving through their bits, see the module docstring)."""
        work = np.dtype(np.float64) if exact else working_dtype(data.dtype)
        result = widen(xp, data) if exact else data.astype(work, copy=False)
        for t in tables:
            trailing = (1,) * (data.ndim - t.axis - 1)
            total = None
            for tap in range(t.indices.shape[1]):
                weight = xp.asarray(t.weights[:, tap].astype(work)).reshape((-1, *trailing))
                term = xp.take(result, xp.asarray(t.indices[:, tap]), axis=t.axis)
                term *= weight
                total = term if total is None else xp.add(total, term, out=total)
            if t.outside is not None and t.outside.any():
                total[along(t.axis, xp.asarray(t.outside))] = self.interpolation.extrapolation
            result = total
        if exact and out.dtype.kind == "f":
            store_float(xp, out, result)
        else:
            store(xp, result, out)


# A step whose result is larger than _BLOCKED_ABOVE bytes runs in blocks of about
# _BLOCK_BYTES over the axes before its own, so that its gathers, products and sums stay in
# cache: LR-ASPP's ×8 bilinear upsampling of 21 planes to 320×320 (8.6 MB) took 2.8 ms for its
# row axis in whole passes over memory (a multiply 0.9 ms, an add 0.6), the whole Resize 3.2 ms
# against 2.2 in blocks (AMD EPYC, 1 thread). Results of 4 MB and less measured no gain (64
# planes to 128×128: 1.8 whole, 2.0 in blocks).
_BLOCKED_ABOVE = 1 << 22
_BLOCK_BYTES = 1 << 18


class HeldWeights:
    """`InterpolationOp.weigh` in fast mode for float data of the working type, as a bound
    call: the same gathers, products and sums in the same order (the same bits), with the
    taps' indices and weights on the backend and every intermediate array made once. A new
    array per tap and axis was most of a medium Resize's time (megabytes each, fresh pages
    in every run); the last axis sums straight into the output, and large steps run in
    blocks of the axes before theirs (`_BLOCK_BYTES`)."""

    def __init__(
        self,
        kernels: Any,
        spec: TensorSpec,
        out_shape: tuple[int, ...],
        tables: list[AxisTable],
        interpolation: Interpolation,
    ) -> None:
        xp, shape, dtype = kernels.xp, spec.shape, spec.numpy_dtype
        self.xp, self.take = xp, kernels.take_arrays
        self.steps = []
        current = list(shape)
        for index, t in enumerate(tables):
            current[t.axis] = out_shape[t.axis]
            trailing = (1,) * (len(shape) - t.axis - 1)
            taps = [
                (
                    xp.asarray(t.indices[:, tap]),
                    xp.asarray(t.weights[:, tap].astype(dtype)).reshape((-1, *trailing)),
                )
                for tap in range(t.indices.shape[1])
            ]
            outside = None
            if t.outside is not None and t.outside.any():
                outside = along(t.axis, xp.asarray(t.outside))
            last = index == len(tables) - 1
            total = None if last else xp.empty(tuple(current), dtype=dtype)
            blocks = _blocks(current, t.axis, np.dtype(dtype).itemsize)
            block_shape = tuple(current) if blocks is None else (blocks[1], *current[t.axis :])
            term = xp.empty(block_shape, dtype=dtype) if len(taps) > 1 else None
            self.steps.append((t.axis, taps, total, term, outside, blocks))
        self.extrapolation = interpolation.extrapolation

    def __call__(self, data: Array, out: Array) -> None:
        xp = self.xp
        result = data
        if not self.steps:
            xp.copyto(out, result)
            return
        for axis, taps, total, term, outside, blocks in self.steps:
            total = out if total is None else total
            if blocks is None:
                self._weigh(result, taps, axis, total, term)
            elif not (result.flags.c_contiguous and total.flags.c_contiguous):  # a slice's out
                whole = None if term is None else xp.empty(total.shape, dtype=total.dtype)
                self._weigh(result, taps, axis, total, whole)
            else:  # the axes before `axis` merged into one, cut into blocks
                lead, step = blocks
                source = result.reshape(lead, *result.shape[axis:])
                target = total.reshape(lead, *total.shape[axis:])
                for start in range(0, lead, step):
                    part = slice(start, start + step)
                    piece = None if term is None else term[: min(step, lead - start)]
                    self._weigh(source[part], taps, 1, target[part], piece)
            if outside is not None:
                total[outside] = self.extrapolation
            result = total

    def _weigh(self, result: Array, taps: list, axis: int, total: Array, term: Any) -> None:
        """total = Σ taps' weights · result gathered along `axis`, in tap order."""
        xp, take = self.xp, self.take
        (first, weight), rest = taps[0], taps[1:]
        take(result, first, axis, total)
        xp.multiply(total, weight, out=total)
        for indices, weight in rest:
            take(result, indices, axis, term)
            xp.multiply(term, weight, out=term)
            xp.add(total, term, out=total)


def _blocks(shape: Sequence[int], axis: int, itemsize: int) -> tuple[int, int] | None:
    """(extent of the axes before `axis` merged, how many of them a block takes) for a result
    of `shape` above _BLOCKED_ABOVE with more than one such position; else None."""
    lead = math.prod(shape[:axis])
    per_lead = math.prod(shape[axis:]) * itemsize
    if lead <= 1 or lead * per_lead <= _BLOCKED_ABOVE:
        return None
    step = max(1, _BLOCK_BYTES // per_lead)
    return (lead, step) if step < lead else None


class ResizeOp(InterpolationOp):
    """Resize: opset 10 (scales input; asymmetric, nearest or linear), 11-12 (roi, scales,
    sizes; every coordinate transform), 13 (roi and scales optional), 18 (axes, antialias,
    keep_aspect_ratio_policy), 19 (half_pixel_symmetric).

    Like onnxruntime, every coordinate transform is accepted from opset 11 on; the output
    length of tf_crop_and_resize with scales is floor(length * scale), as both onnxruntime and
    the reference compute it (the roi does not shrink it). Antialias and exclude_outside have
    no effect on nearest (the spec defines them for the filters)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        opset = node.opset
        mode = str(node.attr("mode", "nearest"))
        modes = ("nearest", "linear") if opset < 11 else ("nearest", "linear", "cubic")
        if mode not in modes:
            raise node.invalid(f"Resize mode '{mode}' is not one of {list(modes)}")
        self.axes: list[int] | None = None
        self.policy = "stretch"
        if opset < 11:
            self.interpolation = Interpolation(mode, "asymmetric", LEGACY_NEAREST)
            return
        transform = str(node.attr("coordinate_transformation_mode", "half_pixel"))
        if transform not in TRANSFORMS:
            raise node.invalid(
                f"Resize coordinate_transformation_mode '{transform}' is not one of "
                f"{list(TRANSFORMS)}"
            )
        nearest_mode = str(node.attr("nearest_mode", "round_prefer_floor"))
        if nearest_mode not in NEAREST_MODES:
            raise node.invalid(
                f"Resize nearest_mode '{nearest_mode}' is not one of {list(NEAREST_MODES)}"
            )
        if opset >= 18:
            axes = node.attr("axes", None)
            self.axes = None if axes is None else [int(a) for a in axes]
            self.policy = str(node.attr("keep_aspect_ratio_policy", "stretch"))
            policies = ("stretch", "not_larger", "not_smaller")
            if self.policy not in policies:
                raise node.invalid(
                    f"Resize keep_aspect_ratio_policy '{self.policy}' is not one of "
                    f"{list(policies)}"
                )
        self.interpolation = Interpolation(
            mode,
            transform,
            nearest_mode,
            float(node.attr("cubic_coeff_a", -0.75)),
            bool(node.attr("exclude_outside", 0)),
            mode != "nearest" and opset >= 18 and bool(node.attr("antialias", 0)),
            float(node.attr("extrapolation_value", 0.0)),
        )

    def check_inputs(self, ctx: InferContext) -> None:
        super().check_inputs(ctx)
        if self.node.opset < 11:
            self.check_types(ctx, FLOAT_ONLY, 1)
            return
        self.check_types(ctx, FLOATS, 1)
        self.check_types(ctx, FLOAT_ONLY, 2)
        self.check_types(ctx, INT64_ONLY, 3)

    def targets(self, shape: tuple[int, ...], read: ValueReader) -> list[AxisTarget]:
        node = self.node
        if node.opset < 11:
            scales = read(1)
            if scales is None:
                raise node.bad_input("Resize needs scales (input 1)")
            return self.resized(shape, self.from_scales(shape, scales, node.inputs[1]))
        rank = len(shape)
        axes = list(range(rank))
        if self.axes is not None:
            axes = list(normalize_axes(node, self.axes, rank))
        scales, sizes = read(2), read(3)
        if (scales is None) == (sizes is None):
            raise node.bad_input("Resize needs exactly one of scales (input 2) and sizes (input 3)")
        targets = [AxisTarget(d, 1.0) for d in shape]
        if scales is not None:
            picked = self.from_scales(tuple(shape[a] for a in axes), scales, node.inputs[2])
            for axis, scale in zip(axes, picked, strict=True):
                targets[axis] = AxisTarget(int(shape[axis] * scale), scale)
        else:
            targets = self.from_sizes(shape, axes, sizes, targets)
        roi = read(1) if self.interpolation.transform == "tf_crop_and_resize" else None
        if roi is not None:
            if roi.size != 2 * len(axes):
                raise node.bad_input(
                    f"Resize roi needs {2 * len(axes)} values for {len(axes)} axes, got {roi.size}",
                    node.inputs[1],
                )
            flat = roi.astype(np.float64).reshape(-1)
            for i, axis in enumerate(axes):
                roi_pair = (float(flat[i]), float(flat[i + len(axes)]))
                targets[axis] = dataclasses.replace(targets[axis], roi=roi_pair)
        return targets

    def from_sizes(
        self, shape: tuple[int, ...], axes: list[int], sizes: np.ndarray, targets: list[AxisTarget]
    ) -> list[AxisTarget]:
        """Targets from `sizes`, kept to the input's aspect ratio when the policy says so (one
        scale for every resized axis, lengths rounded half up)."""
        wanted = [int(s) for s in sizes.reshape(-1)]
        if sizes.ndim != 1 or len(wanted) != len(axes) or min(wanted, default=0) < 0:
            raise self.node.bad_input(
                f"Resize needs {len(axes)} non-negative sizes for axes {axes} of shape "
                f"{list(shape)}, got {sizes.tolist()}",
                self.node.inputs[3],
            )
        ratios = []  # (out, in) per resized axis
        for axis, size in zip(axes, wanted, strict=True):
            if shape[axis] == 0 and size != 0:
                raise self.node.bad_input(
                    f"Resize cannot resize the empty axis {axis} of shape {list(shape)} to {size}",
                    self.node.inputs[0],
                )
            ratios.append((float(size), float(shape[axis])) if shape[axis] else (1.0, 1.0))
        targets = list(targets)
        if self.policy == "stretch":
            for axis, size, (factor, per) in zip(axes, wanted, ratios, strict=True):
                targets[axis] = AxisTarget(size, factor, per=per)
            return targets
        pick = min if self.policy == "not_larger" else max
        factor, per = pick(ratios, key=lambda r: r[0] / r[1])
        for axis in axes:
            length = int(factor * shape[axis] / per + 0.5)
            targets[axis] = AxisTarget(length, factor, per=per)
        return targets


class UpsampleOp(InterpolationOp):
    """Upsample (7: scales attribute; 9: scales input), deprecated at 10 for Resize-10, whose
    semantics it has: asymmetric coordinates, nearest or linear. Scales below 1 are refused,
    as the spec and onnxruntime do."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        mode = str(node.attr("mode", "nearest"))
        if mode not in ("nearest", "linear"):
            raise node.invalid(f"Upsample mode '{mode}' is not one of ['nearest', 'linear']")
        self.interpolation = Interpolation(mode, "asymmetric", LEGACY_NEAREST)
        self.scales_attribute = None
        if node.opset < 9:
            self.scales_attribute = np.array(node.attr("scales"), dtype=np.float32)
            if not np.all(self.scales_attribute >= 1):
                raise node.invalid(
                    f"Upsample scales must be at least 1, got {self.scales_attribute.tolist()}"
                )

    def check_inputs(self, ctx: InferContext) -> None:
        super().check_inputs(ctx)
        if self.scales_attribute is None:
            self.check_types(ctx, FLOAT_ONLY, 1)

    def targets(self, shape: tuple[int, ...], read: ValueReader) -> list[AxisTarget]:
        scales = self.scales_attribute if self.scales_attribute is not None else read(1)
        if scales is None:
            raise self.node.bad_input("Upsample needs scales (input 1)")
        value = None if self.scales_attribute is not None else self.node.inputs[1]
        if not np.all(scales >= 1):
            raise self.node.bad_input(
                f"Upsample scales must be at least 1, got {scales.tolist()}", value
            )
        return self.resized(shape, self.from_scales(shape, scales, value))


# -- GridSample --------------------------------------------------------------------------------

GRID_MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest",
              "cubic": "cubic", "bicubic": "cubic"}  # fmt: skip
PADDING_MODES = ("zeros", "border", "reflection")


@dataclass(frozen=True, slots=True)
class GridTap:
    """One tap along one axis for every output position: the index to read (kept inside the
    axis), its weight (None for nearest) and, padding with zeros, whether it lies inside."""

    index: Array
    weight: Array | None
    inside: Array | None


def reflect(xp: Any, x: Array, low: float, high: float) -> Array:
    """Coordinates reflected at `low` and `high` until inside them (GridSample's reflection)."""
    span = high - low
    if span <= 0:
        return xp.full_like(x, low)
    below, above = low - x, x - high
    distance = xp.where(below > 0, below, above)
    folds = xp.trunc(distance / span)
    rest = distance - folds * span
    even = folds % 2 == 0
    from_low = xp.where(even, low + rest, high - rest)
    from_high = xp.where(even, high - rest, low + rest)
    return xp.where(below > 0, from_low, xp.where(above > 0, from_high, x))


class GridSampleOp(Operator):
    """GridSample (16: 4-D, modes bilinear/nearest/bicubic; 20: N-D, linear/nearest/cubic).

    Both spellings of the modes are accepted at every opset, and N-D inputs at 16 too. Follows
    the reference: nearest rounds half to even before padding; border and reflection move a
    coordinate outside [low, high] first, then fetch each tap with the padding rule; cubic uses
    a = -0.75. Except cubic with border padding, which clamps each tap only, as PyTorch (where
    the operator comes from) and onnxruntime do: the reference also clamps the coordinate.

    Exact: the coordinates, taps and weights in float64 from the exactly widened grid (each
    step one float64 operation as written below); each tap's weight the product of its axes'
    weights in axis order; the taps' value · weight summed in float64 in tap order (row-major
    over the axes), rounded once. nearest is a gather."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        default = "bilinear" if node.opset < 20 else "linear"
        mode = str(node.attr("mode", default))
        if mode not in GRID_MODES:
            raise node.invalid(f"GridSample mode '{mode}' is not one of {list(GRID_MODES)}")
        self.mode = GRID_MODES[mode]
        self.padding = str(node.attr("padding_mode", "zeros"))
        if self.padding not in PADDING_MODES:
            raise node.invalid(
                f"GridSample padding_mode '{self.padding}' is not one of {list(PADDING_MODES)}"
            )
        self.align_corners = bool(node.attr("align_corners", 0))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, ALL_TYPES if self.mode == "nearest" else NUMERIC, 0)
        self.check_types(ctx, FLOATS, 1)
        x, grid = ctx.shape(0), ctx.shape(1)
        spatial = len(x) - 2
        if spatial < 1 or len(grid) != len(x) or grid[0] != x[0] or grid[-1] != spatial:
            raise self.node.bad_input(
                f"GridSample needs a grid of shape (N, *output, {max(spatial, 1)}) for an input "
                f"of shape {list(x)}, got {list(grid)}",
                self.node.inputs[1],
            )
        return [ctx.output(ctx.dtype(0), (x[0], x[1], *grid[1:-1]))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        data, grid, out = inputs[0], inputs[1], outputs[0]
        if out.size == 0:
            return
        sizes = data.shape[2:]
        if 0 in sizes:
            raise self.node.bad_input(
                f"GridSample cannot sample an empty input of shape {list(data.shape)}",
                self.node.inputs[0],
            )
        n, channels = data.shape[:2]
        exact = ctx.exact
        if exact:
            xp = ctx.kernels.xp
            grid = widen(xp, grid.reshape(n, -1, len(sizes)))
        else:
            grid = grid.reshape(n, -1, len(sizes)).astype(working_dtype(grid.dtype), copy=False)
        per_axis = [
            self.taps(xp, grid[:, :, len(sizes) - 1 - i], size) for i, size in enumerate(sizes)
        ]
        strides = [math.prod(sizes[i + 1 :]) for i in range(len(sizes))]
        flat = data.reshape(n, channels, -1)
        batch = xp.arange(n)[:, None, None]
        channel = xp.arange(channels)[None, :, None]

        def gather(taps: tuple[GridTap, ...]) -> tuple[Array, Array | None]:
            """The values at one tap per axis, and where they lie inside (zeros padding)."""
            index = sum(tap.index * stride for tap, stride in zip(taps, strides, strict=True))
            masks = [tap.inside for tap in taps if tap.inside is not None]
            inside = functools.reduce(operator.and_, masks) if masks else None
            return flat[batch, channel, index[:, None, :]], inside

        if self.mode == "nearest":  # one tap per axis: an exact copy
            value, inside = gather(tuple(taps[0] for taps in per_axis))
            if inside is not None:
                value = xp.where(inside[:, None, :], value, xp.zeros((), dtype=value.dtype))
            xp.copyto(out.reshape(n, channels, -1), value)
            return
        work = np.dtype(np.float64) if exact else working_dtype(data.dtype)
        total = None
        for taps in itertools.product(*per_axis):
            value, inside = gather(taps)
            weight = math.prod(tap.weight for tap in taps)
            if inside is not None:
                weight = xp.where(inside, weight, 0)
            value = widen(xp, value) if exact else value.astype(work)
            term = value * weight[:, None, :].astype(work)
            total = term if total is None else xp.add(total, term, out=total)
        if exact and out.dtype.kind == "f":
            store_float(xp, out, total.reshape(out.shape))
        else:
            store(xp, total.reshape(out.shape), out)

    def taps(self, xp: Any, normalized: Array, size: int) -> list[GridTap]:
        """The taps along one axis for every output position."""
        if self.align_corners:
            x = (normalized + 1) / 2 * (size - 1)
            low, high = 0.0, size - 1.0
        else:
            x = ((normalized + 1) * size - 1) / 2
            low, high = -0.5, size - 0.5
        if self.mode == "nearest":
            x = xp.rint(x)
        if self.padding == "border" and self.mode != "cubic":
            x = xp.where((x < low) | (x > high), xp.clip(x, 0, size - 1), x)
        elif self.padding == "reflection":
            x = reflect(xp, x, low, high)
        x = self.defined(xp, x, size)
        if self.mode == "nearest":
            return [self.fetch(xp, xp.trunc(x), size, low, high, None)]
        floor = xp.floor(x)
        t = x - floor
        if self.mode == "linear":
            return [
                self.fetch(xp, floor, size, low, high, 1 - t),
                self.fetch(xp, floor + 1, size, low, high, t),
            ]
        offsets = xp.asarray([-1.0, 0.0, 1.0, 2.0], dtype=t.dtype)[:, None, None]
        weights = cubic_kernel(t[None] - offsets, -0.75, xp)
        return [
            self.fetch(xp, floor + offset, size, low, high, weight)
            for offset, weight in zip((-1, 0, 1, 2), weights, strict=True)
        ]

    def defined(self, xp: Any, x: Array, size: int) -> Array:
        """A NaN coordinate (a NaN in the grid, a reflected infinity) moved to a defined place:
        outside the input with zeros padding, so it reads 0, and at the first position with
        border and reflection, as PyTorch's grid_sample clamps it. (Cast to an index it is
        undefined: onnxruntime reads wherever it lands; PyTorch's interpolating modes give NaN
        with zeros padding, its nearest 0.)"""
        if self.padding == "zeros":
            return xp.where(xp.isfinite(x), x, -100.0)
        return xp.where(xp.isnan(x), 0.0, x)

    def fetch(
        self, xp: Any, index: Array, size: int, low: float, high: float, weight: Array | None
    ) -> GridTap:
        """A tap at an integral coordinate under the padding mode."""
        inside = None
        if self.padding == "zeros":
            inside = (index >= 0) & (index < size)
        elif self.padding == "reflection":
            index = xp.trunc(reflect(xp, index, low, high))
        return GridTap(xp.clip(index, 0, size - 1).astype(np.int64), weight, inside)


# -- AffineGrid ------------------------------------------------------------------------------


def base_coordinates(size: int, align_corners: bool) -> np.ndarray:
    """Evenly spaced positions in [-1, 1] along one axis (PyTorch's affine_grid: a single
    position is 0)."""
    steps = np.arange(size, dtype=np.float64)
    if not align_corners:
        return (2 * steps + 1) / size - 1
    return steps * 2 / (size - 1) - 1 if size > 1 else np.zeros(size)


class AffineGridOp(Operator):
    """AffineGrid (20): theta (N, 2, 3) or (N, 3, 4) applied to the base grid of `size`.
    Exact: θ times the host float64 base points by exact_products.constant_product (the exact
    sum rounded once into float32), rounded once into the output."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.align_corners = bool(node.attr("align_corners", 0))

    def sizes(self, theta: tuple[int, ...], size: list[int]) -> list[int]:
        spatial = len(size) - 2
        if spatial not in (2, 3) or theta != (size[0], spatial, spatial + 1) or min(size) < 0:
            raise self.node.bad_input(
                f"AffineGrid needs theta of shape (N, 2, 3) with size (N, C, H, W) or (N, 3, 4) "
                f"with size (N, C, D, H, W); got theta {list(theta)} and size {size}",
                self.node.inputs[1],
            )
        return size[2:]

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS, 0)
        self.check_types(ctx, INT64_ONLY, 1)
        size = host_ints(ctx, 1)
        spatial = self.sizes(ctx.shape(0), size)
        return [ctx.output(ctx.dtype(0), (size[0], *spatial, len(spatial)))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        theta, out = inputs[0], outputs[0]
        size = [int(s) for s in ctx.kernels.memory.to_host(inputs[1]).reshape(-1)]
        spatial = self.sizes(theta.shape, size)
        axes = [base_coordinates(s, self.align_corners) for s in spatial]
        mesh = np.meshgrid(*axes, indexing="ij")
        # Homogeneous (x, y[, z], 1): x runs along the last axis.
        points = np.stack([*reversed(mesh), np.ones(mesh[0].shape)], axis=-1)
        if ctx.exact:
            points = points.reshape(-1, len(spatial) + 1).T  # θ·pointsᵀ: the constant right
            grid = constant_product(ctx.kernels, theta, points, theta.dtype)
            store_float(ctx.kernels.xp, out, grid.transpose(0, 2, 1).reshape(out.shape))
            return
        work = working_dtype(theta.dtype)
        points = xp.asarray(points.reshape(-1, len(spatial) + 1).astype(work))
        grid = xp.matmul(points, theta.astype(work, copy=False).transpose(0, 2, 1))
        store(xp, grid.reshape(out.shape), out)


# -- RoiAlign ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SampleTaps:
    """For one sampling point of every bin along one axis: the two bilinear taps (indices)
    and their weights (zero for points outside the map or beyond the roi's sampling count),
    and which rois take this point at all."""

    taken: np.ndarray
    low: np.ndarray
    high: np.ndarray
    low_weight: np.ndarray
    high_weight: np.ndarray


class RoiAlignOp(Operator):
    """RoiAlign (10: legacy output_half_pixel coordinates; 16: coordinate_transformation_mode,
    half_pixel by default). Max mode takes the largest weighted tap of each sampling point, as
    the reference and onnxruntime do.

    Exact: the sampling points, taps and weights are host float64 arithmetic in the order
    `axis_samples` writes (avg: each axis weight (1 − f)·(1/count) or f·(1/count)), a tap's
    weight wy·wx; in float64 from the exactly widened input, each sampling point the sum of
    its four taps' value·weight in the order (low y, low x), (low y, high x), (high y, low x),
    (high y, high x); avg adds the points from +0 in row-major point order, max keeps the
    running maximum; rounded once."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.mode = str(node.attr("mode", "avg"))
        if self.mode not in ("avg", "max"):
            raise node.invalid(f"RoiAlign mode '{self.mode}' is not one of ['avg', 'max']")
        transform = "output_half_pixel"
        if node.opset >= 16:
            transform = str(node.attr("coordinate_transformation_mode", "half_pixel"))
        if transform not in ("half_pixel", "output_half_pixel"):
            raise node.invalid(
                f"RoiAlign coordinate_transformation_mode '{transform}' is not one of "
                "['half_pixel', 'output_half_pixel']"
            )
        self.half_pixel = transform == "half_pixel"
        self.output_size = (int(node.attr("output_height", 1)), int(node.attr("output_width", 1)))
        self.sampling_ratio = int(node.attr("sampling_ratio", 0))
        self.spatial_scale = float(node.attr("spatial_scale", 1.0))
        if min(self.output_size) < 1 or self.sampling_ratio < 0:
            raise node.invalid(
                f"RoiAlign needs positive output sizes and a non-negative sampling_ratio, got "
                f"{list(self.output_size)} and {self.sampling_ratio}"
            )

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS, 0, 1)
        self.check_types(ctx, INT64_ONLY, 2)
        x, rois, indices = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        if len(x) != 4 or len(rois) != 2 or rois[1] != 4 or indices != (rois[0],):
            raise self.node.bad_input(
                f"RoiAlign needs X (N, C, H, W), rois (R, 4) and batch_indices (R,); got "
                f"{list(x)}, {list(rois)} and {list(indices)}",
                self.node.inputs[1],
            )
        return [ctx.output(ctx.dtype(0), (rois[0], x[1], *self.output_size))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        data, out = inputs[0], outputs[0]
        if out.size == 0:
            return
        n, _, height, width = data.shape
        batch = np.asarray(ctx.kernels.memory.to_host(inputs[2])).astype(np.int64)
        if height == 0 or width == 0 or batch.min() < 0 or batch.max() >= n:
            raise self.node.bad_input(
                f"RoiAlign batch_indices must lie in [0, {n}) and X must not be empty; got "
                f"{batch.tolist()} for X of shape {list(data.shape)}",
                self.node.inputs[2],
            )
        rois = np.asarray(ctx.kernels.memory.to_host(inputs[1])).astype(np.float64)
        offset = 0.5 if self.half_pixel else 0.0
        start = rois * self.spatial_scale - offset  # x1, y1, x2, y2
        extent = start[:, 2:] - start[:, :2]  # width, height
        if not self.half_pixel:
            extent = np.maximum(extent, 1.0)  # malformed rois become 1x1
        rows = self.axis_samples(start[:, 1], extent[:, 1], self.output_size[0], height)
        cols = self.axis_samples(start[:, 0], extent[:, 0], self.output_size[1], width)
        work = working_dtype(data.dtype)
        if ctx.exact:
            xp, work = ctx.kernels.xp, np.dtype(np.float64)
            data = widen(xp, data)
        channels_last = xp.ascontiguousarray(data.transpose(0, 2, 3, 1))
        result = xp.zeros((len(batch), *self.output_size, data.shape[1]), dtype=work)
        # Point (0, 0) comes first and every roi that samples at all takes it.
        for step, (row, col) in enumerate(itertools.product(rows, cols)):
            taking = np.flatnonzero(row.taken & col.taken)  # only rois with this many points
            if taking.size == 0:
                continue
            value = self.sample(xp, channels_last, batch, row, col, taking, work)
            taking = xp.asarray(taking)
            if self.mode == "avg":
                result[taking] += value
            elif step == 0:
                result[taking] = value
            else:
                result[taking] = xp.maximum(result[taking], value)
        if ctx.exact:
            store_float(xp, out, result.transpose(0, 3, 1, 2))
            return
        store(xp, result.transpose(0, 3, 1, 2), out)

    def axis_samples(
        self, start: np.ndarray, extent: np.ndarray, bins: int, size: int
    ) -> list[SampleTaps]:
        """The sampling points of every roi's bins along one axis, one entry per point index
        (up to the largest count any roi needs). Averaging's 1/count is in the weights."""
        bin_size = extent / bins
        if self.sampling_ratio > 0:
            counts = np.full(len(start), self.sampling_ratio)
        else:
            counts = np.maximum(np.ceil(extent / bins), 0).astype(np.int64)
        samples = []
        for point in range(int(counts.max(initial=0))):
            taken = point < counts
            spacing = bin_size / np.maximum(counts, 1)
            y = (
                start[:, None]
                + np.arange(bins) * bin_size[:, None]
                + (point + 0.5) * spacing[:, None]
            )
            inside = taken[:, None] & (y >= -1.0) & (y <= size)
            y = np.maximum(y, 0.0)
            low = np.floor(y).astype(np.int64)
            edge = low >= size - 1
            low = np.where(edge, size - 1, low)
            high = np.where(edge, size - 1, low + 1)
            fraction = np.where(edge, 0.0, y - low)
            scale = 1.0 / np.maximum(counts, 1)[:, None] if self.mode == "avg" else 1.0
            samples.append(
                SampleTaps(
                    taken,
                    low,
                    high,
                    np.where(inside, (1 - fraction) * scale, 0.0),
                    np.where(inside, fraction * scale, 0.0),
                )
            )
        return samples

    def sample(
        self,
        xp: Any,
        data: Array,
        batch: np.ndarray,
        row: SampleTaps,
        col: SampleTaps,
        rois: np.ndarray,
        work: np.dtype,
    ) -> Array:
        """One sampling point of every bin of the given rois: bilinear (avg) or the largest
        weighted tap (max), as (rois, output_height, output_width, channels)."""
        images = xp.asarray(batch[rois])[:, None, None]
        terms = []
        for y, wy in ((row.low, row.low_weight), (row.high, row.high_weight)):
            for x, wx in ((col.low, col.low_weight), (col.high, col.high_weight)):
                ys, xs = xp.asarray(y[rois])[:, :, None], xp.asarray(x[rois])[:, None, :]
                weight = wy[rois][:, :, None] * wx[rois][:, None, :]
                terms.append(
                    data[images, ys, xs].astype(work) * xp.asarray(weight.astype(work))[..., None]
                )
        if self.mode == "avg":
            return terms[0] + terms[1] + terms[2] + terms[3]
        return xp.maximum(xp.maximum(terms[0], terms[1]), xp.maximum(terms[2], terms[3]))


DEFS: tuple[OpDef, ...] = (
    OpDef("Upsample", 7, UpsampleOp, until=9),
    OpDef("Resize", 10, ResizeOp),
    OpDef("GridSample", 16, GridSampleOp),
    OpDef("AffineGrid", 20, AffineGridOp),
    OpDef("RoiAlign", 10, RoiAlignOp),
)
