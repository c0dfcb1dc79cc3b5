"""Convolutions (Conv, ConvTranspose) and the window placement they share with pooling.

`SlidingWindows` turns the attributes every windowed operator has (auto_pad, pads, strides,
dilations) into the output extent and the leading pads of each spatial axis, once per shape.
The arithmetic runs on the backend: `conv_arrays` (im2col and one matmul per group) and
`conv_transpose_arrays` (matmul to columns, an add per kernel offset into the stride phases).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onemodel.graph.operators.base import (
    HELD_CONV,
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
from onemodel.graph.operators.conv_taps import LiveTaps, live_taps, run_live_taps
from onemodel.graph.operators.prepared import PreparesConstants
from onemodel.tensors import DType

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_MAX_REMEMBERED = 64  # input shapes whose window placement is kept


@dataclass(frozen=True)
class Placement:
    """Where the windows of one input shape lie: per spatial axis, the output extent and the
    pads before and after the input (`pads_end` may reach past what the windows read)."""

    out_spatial: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]


class SlidingWindows:
    """The window attributes of Conv, ConvTranspose and the pooling operators, checked once.

    `strides`, `dilations` and `pads` may be absent (ones, ones, zeros); their lengths are
    checked against the spatial rank when a shape is known.
    """

    def __init__(self, node: NodeInfo) -> None:
        self.node = node
        auto_pad = node.attr("auto_pad", "NOTSET")
        self.auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
        if self.auto_pad not in _AUTO_PADS:
            raise node.invalid(f"{node.op_type}: auto_pad must be one of {_AUTO_PADS}")
        self.strides = self.ints("strides", minimum=1)
        self.dilations = self.ints("dilations", minimum=1)
        self.pads = self.ints("pads", minimum=0)
        if self.pads is not None and len(self.pads) % 2:
            raise node.invalid(f"{node.op_type}: pads {self.pads} must have an even length")
        self.kernel_shape = self.ints("kernel_shape", minimum=1)
        self._placements: dict[tuple, Placement] = {}

    def ints(self, name: str, minimum: int) -> tuple[int, ...] | None:
        """An optional list-of-ints attribute, each value checked to be at least `minimum`."""
        values = self.node.attr(name, None)
        if values is None:
            return None
        values = tuple(int(v) for v in values)
        if any(v < minimum for v in values):
            raise self.node.invalid(
                f"{self.node.op_type}: every value of {name} {values} must be ≥ {minimum}"
            )
        return values

    def per_axis(
        self, name: str, values: tuple[int, ...] | None, rank: int, default: int
    ) -> tuple[int, ...]:
        """`values` checked to have one entry per spatial axis (`default` each when absent)."""
        if values is None:
            return (default,) * rank
        if len(values) != rank:
            raise self.node.invalid(
                f"{self.node.op_type}: {name} {values} needs {rank} values for {rank} spatial axes"
            )
        return values

    def kernel_for(self, weights_kernel: tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
        """The kernel shape: the attribute, or the weights' spatial shape (which must agree)."""
        if weights_kernel is not None:
            if self.kernel_shape is not None and self.kernel_shape != weights_kernel:
                raise self.node.bad_input(
                    f"{self.node.op_type}: kernel_shape {self.kernel_shape} differs from the "
                    f"weights' spatial shape {weights_kernel}",
                    self.node.inputs[1],
                )
            return weights_kernel
        if self.kernel_shape is None:
            raise self.node.invalid(f"{self.node.op_type} needs the attribute 'kernel_shape'")
        return self.per_axis("kernel_shape", self.kernel_shape, rank, 1)

    def place(
        self, spatial: tuple[int, ...], kernel: tuple[int, ...], ceil_mode: bool = False
    ) -> Placement:
        """The windows over an input of spatial shape `spatial` (Conv's and pooling's rule).

        With ceil_mode a last window that would start past the input and its leading pad is
        dropped. An input too small for one window is refused. Remembered per arguments, since
        every run asks again (a bounded cache; refusals are not remembered).
        """
        key = (tuple(spatial), tuple(kernel), ceil_mode)
        placement = self._placements.get(key)
        if placement is None:
            if len(self._placements) >= _MAX_REMEMBERED:
                self._placements.clear()
            placement = self._placements[key] = self._place(*key)
        return placement

    def _place(
        self, spatial: tuple[int, ...], kernel: tuple[int, ...], ceil_mode: bool
    ) -> Placement:
        rank = len(spatial)
        strides = self.per_axis("strides", self.strides, rank, 1)
        dilations = self.per_axis("dilations", self.dilations, rank, 1)
        pads = self.per_axis("pads", self.pads, 2 * rank, 0)
        begin, end = list(pads[:rank]), list(pads[rank:])
        if self.auto_pad != "NOTSET":
            begin, end = [0] * rank, [0] * rank
        out = []
        for i, (size, k, s, d) in enumerate(zip(spatial, kernel, strides, dilations, strict=True)):
            reach = (k - 1) * d + 1
            if self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                extent = -(-size // s)
                total = max(0, (extent - 1) * s + reach - size)
                lower = total // 2 if self.auto_pad == "SAME_UPPER" else total - total // 2
                begin[i], end[i] = lower, total - lower
            else:
                span = size + begin[i] + end[i] - reach
                extent = (-(-span // s) if ceil_mode else span // s) + 1
                if ceil_mode and (extent - 1) * s >= size + begin[i]:
                    extent -= 1
            if extent < 1 or size < 1:
                raise self.node.bad_input(
                    f"{self.node.op_type}: a window of {reach} (kernel {k}, dilation {d}) does "
                    f"not fit spatial axis {i} of size {size} padded by {begin[i]} and {end[i]}",
                    self.node.inputs[0],
                )
            out.append(extent)
        return Placement(tuple(out), tuple(begin), tuple(end), strides, dilations)


_CONV_FLOATS = frozenset({DType.FLOAT16, DType.FLOAT, DType.DOUBLE})


def conv_group(node: NodeInfo) -> int:
    """The `group` attribute of a convolution: 1 when absent, else at least 1."""
    group = int(node.attr("group", 1))
    if group < 1:
        raise node.invalid(f"{node.op_type}: group {group} must be ≥ 1")
    return group


def conv_channels(
    node: NodeInfo,
    x: tuple[int, ...],
    w: tuple[int, ...],
    group: int,
    *,
    transposed: bool = False,
    weights: int = 1,
    names: tuple[str, str] = ("X", "W"),
) -> tuple[int, int]:
    """The input and output channels of a convolution of `x` by `w` (input `weights` of the
    node), once both are checked to have one rank ≥ 3 and to agree on the channels: W is
    (M, C / group, *kernel), transposed (C, M / group, *kernel). `names` are the spec's
    names of x and w, for the messages."""
    x_name, w_name = names
    if len(x) < 3 or len(w) != len(x):
        raise node.bad_input(
            f"{node.op_type} needs {x_name} (N, C, D1, …) and {w_name} of the same rank ≥ 3, "
            f"not {x_name} {x} and {w_name} {w}",
            node.inputs[0],
        )
    in_channels, out_channels = (w[0], w[1] * group) if transposed else (w[1] * group, w[0])
    if x[1] != in_channels or w[0] % group:
        raise node.bad_input(
            f"{node.op_type} with group {group}: {x_name} {x} and {w_name} {w} do not agree on "
            "the channels",
            node.inputs[weights],
        )
    return in_channels, out_channels


class Convolution(Operator):
    """What Conv and ConvTranspose share: attributes, type and shape checks, and the bias."""

    transposed: bool  # whether W is (C, M / group, *kernel) rather than (M, C / group, *kernel)

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.windows = SlidingWindows(node)
        self.group = conv_group(node)

    def _check(self, ctx: InferContext) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """Input shape, kernel shape and output channels, after every check."""
        allowed = _CONV_FLOATS | ({DType.BFLOAT16} if self.node.opset >= 22 else set())
        self.check_types(ctx, frozenset(allowed))
        if len({ctx.dtype(i) for i in range(len(ctx)) if ctx.has(i)}) > 1:
            raise self.node.invalid(f"{self.node.op_type} needs X, W and B of one element type")
        x, w = ctx.shape(0), ctx.shape(1)
        _, out_channels = conv_channels(self.node, x, w, self.group, transposed=self.transposed)
        if ctx.has(2) and ctx.shape(2) != (out_channels,):
            raise self.node.bad_input(
                f"{self.node.op_type}: B of shape {ctx.shape(2)} must be ({out_channels},)",
                self.node.inputs[2],
            )
        return x, self.windows.kernel_for(w[2:], len(x) - 2), out_channels

    @staticmethod
    def _add_bias(ctx: RunContext, out: Array, bias: Array | None) -> None:
        if bias is not None:
            ctx.xp.add(out, bias.reshape(-1, *(1,) * (out.ndim - 2)), out=out)


class ConvOp(Convolution, PreparesConstants):
    """Y = X ⋆ W + B: N-D grouped cross-correlation (depthwise when group = C).

    Exact: each element the exact sum of its products (the exact matmul over im2col's columns),
    rounded once; the bias is then one rounded add. A constant W is prepared once per plan in
    both modes.

    Fast: a constant W is prepared once per plan as the matrix the kernel multiplies; the
    kernel adds the bias in its last pass over the output (the same one rounded add), where a
    fused activation would follow (see FusedConv)."""

    layout_role = HELD_CONV

    transposed = False
    supports_exact = True

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        x, kernel, out_channels = self._check(ctx)
        placement = self.windows.place(x[2:], kernel)
        return [ctx.output(ctx.dtype(0), (x[0], out_channels, *placement.out_spatial))]

    def prepare(self, ctx: RunContext, constants: Sequence[Array | None]) -> Any:
        w = constants[1]
        if w is None or w.size == 0:
            return None
        if ctx.exact:
            return ctx.kernels.exact_conv_weights(w, self.group)
        return ctx.kernels.conv_weights(w, self.group)

    def prepare_for_plan(
        self,
        ctx: RunContext,
        constants: Sequence[Array | None],
        specs: Sequence[TensorSpec | None],
    ) -> Any:
        """`prepare`, or in fast mode for a dilated kernel of one group `LiveTaps`: each tap
        over the outputs it reads x for (operators/conv_taps.py)."""
        w, x = constants[1], specs[0]
        if (
            not ctx.exact
            and self.group == 1
            and w is not None
            and x is not None
            and len(x.shape) > 2
            and all(isinstance(extent, int) for extent in x.shape)
            and w.dtype in (ctx.xp.float32, ctx.xp.float64)
            and x.numpy_dtype == w.dtype
        ):
            spatial = tuple(x.shape[2:])
            placement = self.windows.place(spatial, tuple(w.shape[2:]))
            taps = live_taps(
                w, spatial, placement.strides, placement.pads_begin, placement.dilations,
                placement.out_spatial, ctx.xp,
            )  # fmt: skip
            if taps is not None:
                return taps
        return self.prepare(ctx, constants)

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """A constant W: the backend's held convolution (`held_conv`: its buffers, views and
        GEMMs made once for this run state, numpy_cpu/held_conv.py), falling back to
        `run_prepared` for an output it cannot write in place; None where it has none."""
        x, w, out = step.specs[0], step.specs[1], step.outputs[0]
        if step.prepared is None or step.constants[1] is None or 0 in out.shape:
            return None
        if isinstance(step.prepared, LiveTaps):
            return None  # run_prepared runs the taps
        placement = self.windows.place(x.shape[2:], w.shape[2:])
        held = ctx.kernels.held_conv(
            x.shape, x.numpy_dtype, out.shape, w.shape[2:], placement.strides,
            placement.pads_begin, placement.dilations, self.group, step.prepared,
            x_channels_last=0 in step.channels_last_inputs,
            out_channels_last=0 in step.channels_last_outputs,
        )  # fmt: skip
        if held is None:
            return None
        prepared, run_prepared = step.prepared, self.run_prepared
        has_bias = len(step.specs) > 2 and step.specs[2] is not None

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            if not held(inputs[0], outputs[0], inputs[2] if has_bias else None):
                run_prepared(ctx, prepared, inputs, outputs)

        return call

    def run_prepared(
        self, ctx: RunContext, prepared: Any, inputs: Sequence[Array | None], outputs: Any
    ) -> None:
        x, w = inputs[0], inputs[1]
        (out,) = outputs
        if out.size == 0:  # batch 0 or no output channels: nothing to compute
            return
        placement = self.windows.place(x.shape[2:], w.shape[2:])
        bias = inputs[2] if len(inputs) > 2 else None
        if isinstance(prepared, LiveTaps):
            if prepared.spatial == tuple(x.shape[2:]):
                run_live_taps(
                    ctx.xp, ctx.kernels.matmul_arrays, prepared, x, out, bias, ctx.scratch
                )
                return
            prepared = self.prepare(ctx, inputs)  # a run of another shape than the plan's
        window = (placement.strides, placement.pads_begin, placement.dilations, self.group)
        if ctx.exact:
            ctx.kernels.exact_conv_arrays(x, w, out, *window, weights=prepared)
            self._add_bias(ctx, out, bias)
        else:
            ctx.kernels.conv_arrays(
                x, w, out, *window, scratch=ctx.scratch, weights=prepared, bias=bias
            )


class ConvTransposeOp(Convolution):
    """The gradient of Conv with respect to its input: each input element scatters W into the
    output. The output extent comes from `output_shape` (pads then follow), from auto_pad
    SAME_* (input × stride), or from pads and `output_padding`.

    Exact: per group, the columns W^T·X by exact_matmul_arrays, each the exact dot product over
    the channels rounded once into float32 (float64: the ordered float64 sum); each output the
    float64 sum from +0 of its columns in kernel-offset row-major order, rounded once; the bias
    then one rounded add."""

    transposed = True
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.output_padding = self.windows.ints("output_padding", minimum=0)
        self.output_shape = self.windows.ints("output_shape", minimum=1)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        x, kernel, out_channels = self._check(ctx)
        out_spatial, _ = self._place(x[2:], kernel)
        return [ctx.output(ctx.dtype(0), (x[0], out_channels, *out_spatial))]

    def _place(
        self, spatial: tuple[int, ...], kernel: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Output spatial shape and leading pads (negative when the output starts early)."""
        windows, rank = self.windows, len(spatial)
        strides = windows.per_axis("strides", windows.strides, rank, 1)
        dilations = windows.per_axis("dilations", windows.dilations, rank, 1)
        extra = windows.per_axis("output_padding", self.output_padding, rank, 0)
        natural = [
            s * (n - 1) + o + (k - 1) * d + 1
            for n, s, o, k, d in zip(spatial, strides, extra, kernel, dilations, strict=True)
        ]
        wanted = None
        if self.output_shape is not None:
            wanted = self.output_shape[-rank:]
            if len(wanted) != rank:
                raise self.node.invalid(f"ConvTranspose: output_shape needs {rank} values")
        elif windows.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            wanted = tuple(n * s for n, s in zip(spatial, strides, strict=True))
        if wanted is None:
            pads = windows.per_axis("pads", windows.pads, 2 * rank, 0)
            begin = pads[:rank]
            out = tuple(f - b - e for f, b, e in zip(natural, begin, pads[rank:], strict=True))
        else:
            totals = [f - w for f, w in zip(natural, wanted, strict=True)]
            upper = windows.auto_pad == "SAME_UPPER"
            begin = tuple(t // 2 if upper else t - t // 2 for t in totals)
            out = tuple(wanted)
        if any(o < 1 for o in out):
            raise self.node.bad_input(
                f"ConvTranspose of spatial shape {spatial} with kernel {kernel} gives the empty "
                f"output {out}",
                self.node.inputs[0],
            )
        return out, begin

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x, w = inputs[0], inputs[1]
        (out,) = outputs
        if out.size == 0:
            return
        rank = x.ndim - 2
        _, begin = self._place(x.shape[2:], w.shape[2:])
        strides = self.windows.per_axis("strides", self.windows.strides, rank, 1)
        dilations = self.windows.per_axis("dilations", self.windows.dilations, rank, 1)
        ctx.kernels.conv_transpose_arrays(
            x, w, out, strides, begin, dilations, self.group, scratch=ctx.scratch, exact=ctx.exact
        )
        self._add_bias(ctx, out, inputs[2] if len(inputs) > 2 else None)


DEFS: tuple[OpDef, ...] = (
    OpDef("Conv", 1, ConvOp),
    OpDef("ConvTranspose", 1, ConvTransposeOp),
)
