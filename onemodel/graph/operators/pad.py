"""Pad: grow (or, with negative pads, crop) each axis at both ends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onemodel.graph.operators.axes import (
    INDEX_TYPES,
    INT64_ONLY,
    IntsReader,
    normalize_axes,
    plan_reader,
    run_reader,
)
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.tensors.shapes import element_count

# Above this many output elements only the padding is filled before the input is copied in
# (one pass over 4M float32 less: 22.8 -> ~13 ms); below, filling the whole output is one
# fast pass where the padding alone is many short runs (a 1-wide border of every row).
_FILL_BORDERS_ABOVE = 1 << 20


class PadOp(Operator):
    """Pad in mode constant, reflect, edge or wrap.

    Wrap is opset 19's, but taken at every opset, as onnxruntime takes it: torch's dynamo
    exporter writes it for F.pad(mode="circular") at opset_version=18 too.

    Pads are the `paddings` (opset 1) or `pads` (2-10) attribute, or input 1 (11+) restricted
    to the axes of input 3 (18+); the constant is the `value` attribute before 11, input 2
    after. Negative pads crop first; the other modes then extend what remains, as numpy.pad
    does (reflect may reflect more than once)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.mode = str(node.attr("mode", "constant"))
        modes = ("constant", "reflect", "edge", "wrap")
        if self.mode not in modes:
            raise node.invalid(f"Pad mode '{self.mode}' is not one of {list(modes)}")
        self.pads_attribute: list[int] | None = None
        self.value_attribute = 0.0
        if node.opset < 11:
            name = "paddings" if node.opset < 2 else "pads"
            self.pads_attribute = [int(p) for p in node.attr(name)]
            self.value_attribute = float(node.attr("value", 0.0))

    def widths(self, shape: tuple[int, ...], read: IntsReader) -> list[tuple[int, int]]:
        """(before, after) for every axis; checked so that every mode can fill the output."""
        value = None if self.pads_attribute is not None else self.node.inputs[1]
        pads = self.pads_attribute if self.pads_attribute is not None else read(1)
        if pads is None:
            raise self.node.invalid("Pad needs input 1 (pads)")
        axes = read(3) if self.node.opset >= 18 else None
        if axes is None:
            axes = tuple(range(len(shape)))
        else:
            axes = normalize_axes(self.node, axes, len(shape), value=self.node.inputs[3])
        if len(pads) != 2 * len(axes):
            raise self.node.bad_input(
                f"Pad needs {2 * len(axes)} pads for {len(axes)} axes of shape {list(shape)}, "
                f"got {pads}",
                value,
            )
        widths = [(0, 0)] * len(shape)
        for i, axis in enumerate(axes):
            widths[axis] = (pads[i], pads[i + len(axes)])
        for axis, (before, after) in enumerate(widths):
            kept = shape[axis] + min(before, 0) + min(after, 0)
            grows = max(before, 0) + max(after, 0) > 0
            if kept < 0 or (grows and kept == 0 and self.mode != "constant"):
                raise self.node.bad_input(
                    f"Pad {pads} in mode {self.mode} cannot pad axis {axis} of shape {list(shape)}",
                    value,
                )
        return widths

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        if self.pads_attribute is None:
            self.check_types(ctx, INT64_ONLY, 1)
            self.check_types(ctx, INDEX_TYPES, 3)
            if ctx.has(2) and (ctx.dtype(2) != ctx.dtype(0) or element_count(ctx.shape(2)) > 1):
                raise self.node.bad_input(
                    "Pad constant_value must be one value of the data's element type",
                    self.node.inputs[2],
                )
        shape = ctx.shape(0)
        widths = self.widths(shape, plan_reader(ctx))
        out_shape = tuple(
            d + before + after for d, (before, after) in zip(shape, widths, strict=True)
        )
        return [ctx.output(ctx.dtype(0), out_shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        data, out = inputs[0], outputs[0]
        widths = self.widths(data.shape, run_reader(ctx, inputs))
        kept = data[
            tuple(
                slice(-min(b, 0), d + min(a, 0))
                for d, (b, a) in zip(data.shape, widths, strict=True)
            )
        ]
        grown = [(max(b, 0), max(a, 0)) for b, a in widths]
        if self.mode != "constant":
            xp.copyto(out, xp.pad(kept, grown, mode=self.mode))
            return
        inside = tuple(slice(b, b + d) for (b, _), d in zip(grown, kept.shape, strict=True))
        value = self.constant(inputs, out)
        if out.size > _FILL_BORDERS_ABOVE:
            for axis, ((before, _), size) in enumerate(zip(grown, kept.shape, strict=True)):
                for part in (slice(0, before), slice(before + size, None)):
                    out[(*inside[:axis], part)] = value
        else:
            out[...] = value
        out[inside] = kept

    def constant(self, inputs: Sequence[Array | None], out: Array) -> Any:
        """The `value` attribute, else constant_value (absent or empty: 0, False)."""
        if self.pads_attribute is not None:
            return out.dtype.type(self.value_attribute)  # a scalar: no host array
        if len(inputs) > 2 and inputs[2] is not None and inputs[2].size == 1:
            return inputs[2].reshape(())
        return out.dtype.type(0)


DEFS: tuple[OpDef, ...] = (OpDef("Pad", 1, PadOp),)
