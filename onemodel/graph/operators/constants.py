"""Operators that make values rather than move them: Constant, ConstantOfShape, Range, EyeLike
and OneHot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from onemodel.graph.onnx_proto import TensorProto
from onemodel.graph.operators.axes import INT64_ONLY, host_ints, host_scalar
from onemodel.graph.operators.base import (
    Array,
    Constant,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.tensors import numpy_dtype_for_onnx, onnx_code_for_numpy, onnx_name
from onemodel.tensors.errors import UnsupportedDTypeError

T = TensorProto
NUMERIC = frozenset({
    T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16, T.INT8, T.INT16, T.INT32, T.INT64,
    T.UINT8, T.UINT16, T.UINT32, T.UINT64,
})  # fmt: skip


def device_value(ctx: RunContext, host: np.ndarray, like: Array) -> Array:
    """A host value on the backend in `like`'s array dtype.

    Both hold the same ONNX type, but CuPy keeps bfloat16 as its uint16 bits: the bits are
    reinterpreted, never converted as numbers."""
    if host.dtype != like.dtype:
        host = host.view(like.dtype)
    return ctx.xp.asarray(host)


def tensor_attribute(node: NodeInfo, name: str, array: object) -> np.ndarray:
    """A tensor attribute as a read-only array of an element type the runtime holds."""
    value = np.array(array)
    try:
        code = onnx_code_for_numpy(value.dtype)
    except UnsupportedDTypeError:
        code = None
    if code is None or code == T.STRING:
        raise node.invalid(f"{node.op_type} attribute '{name}' has an unsupported element type")
    value.setflags(write=False)
    return value


class ConstantOp(Operator):
    """Constant: exactly one of value, sparse_value (opset 11, already dense) or
    value_float(s)/value_int(s) (opset 12). String constants are not supported."""

    supports_exact = True
    _SCALAR_ATTRIBUTES: ClassVar[dict[str, type]] = {
        "value_float": np.float32, "value_floats": np.float32,
        "value_int": np.int64, "value_ints": np.int64,
    }  # fmt: skip
    _ATTRIBUTES = ("value", "sparse_value", *_SCALAR_ATTRIBUTES, "value_string", "value_strings")

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        given = [name for name in self._ATTRIBUTES if name in node.attributes]
        if len(given) != 1:
            raise node.invalid(f"Constant needs exactly one value attribute, got {given}")
        (name,) = given
        if name.startswith("value_string"):
            raise node.invalid("Constant strings are not supported")
        dtype = self._SCALAR_ATTRIBUTES.get(name)
        raw = node.attr(name)
        self.value = tensor_attribute(node, name, raw if dtype is None else np.array(raw, dtype))

    def infer(self, ctx: InferContext) -> list[Constant]:
        return [Constant(self.value)]


class ConstantOfShapeOp(Operator):
    """ConstantOfShape: the shape input filled with the one-element `value` (float 0)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        raw = node.attr("value", np.zeros(1, np.float32))
        self.value = tensor_attribute(node, "value", raw)
        if self.value.size != 1:
            raise node.invalid(f"ConstantOfShape value has {self.value.size} elements, not 1")
        self.dtype = onnx_code_for_numpy(self.value.dtype)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INT64_ONLY, 0)
        shape = host_ints(ctx, 0)
        if min(shape, default=0) < 0:
            raise self.node.bad_input(
                f"ConstantOfShape shape {shape} has a negative extent", self.node.inputs[0]
            )
        return [ctx.output(self.dtype, shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        outputs[0][...] = device_value(ctx, self.value.reshape(()), outputs[0])


class RangeOp(Operator):
    """Range: start + i * delta for i < max(ceil((limit - start) / delta), 0).

    The length depends on the values, so infer needs all three (the runtime re-infers at run
    time when they are computed), and with them the elements are known too: they are returned
    as a constant. Each element is computed in float64 or int64 and rounded once to the output
    type; for float16 and bfloat16 (opset 27) that is at least as precise as stash_type's
    float accumulation."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.allowed = frozenset({T.FLOAT, T.DOUBLE, T.INT16, T.INT32, T.INT64}) | (
            frozenset({T.FLOAT16, T.BFLOAT16}) if node.opset >= 27 else frozenset()
        )

    def infer(self, ctx: InferContext) -> list[Constant]:
        self.check_types(ctx, self.allowed)
        if len({ctx.dtype(i) for i in range(3)}) != 1:
            raise self.node.invalid("Range start, limit and delta differ in element type")
        start, limit, delta = (self.number(host_scalar(ctx, i)) for i in range(3))
        if delta == 0 or not all(math.isfinite(v) for v in (start, limit, delta)):
            raise self.node.bad_input(
                f"Range from {start} to {limit} by {delta} has no finite length",
                self.node.inputs[2],
            )
        if isinstance(delta, int):
            count = -((start - limit) // delta)
        else:
            count = math.ceil((limit - start) / delta)
        spec = ctx.output(ctx.dtype(0), (max(count, 0),))
        steps = np.arange(spec.shape[0], dtype=np.int64 if isinstance(start, int) else np.float64)
        return [Constant((start + steps * delta).astype(spec.numpy_dtype))]

    @staticmethod
    def number(value: np.generic) -> int | float:
        """A scalar as a Python int (integer types) or float, for exact arithmetic."""
        return np.asarray(value, np.int64 if value.dtype.kind in "iu" else np.float64).item()


class EyeLikeOp(Operator):
    """EyeLike: ones on the k-th diagonal of a 2-D tensor, in `dtype` or the input's type."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        dtype = node.attr("dtype", None)
        self.dtype = None if dtype is None else int(dtype)
        self.k = int(node.attr("k", 0))
        allowed = (NUMERIC if node.opset >= 22 else NUMERIC - {T.BFLOAT16}) | {T.BOOL}
        if self.dtype is not None and self.dtype not in allowed:
            raise node.invalid(f"EyeLike cannot make element type {onnx_name(self.dtype)}")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        shape = ctx.shape(0)
        if len(shape) != 2:
            raise self.node.bad_input(
                f"EyeLike needs a 2-D input, got shape {list(shape)}", self.node.inputs[0]
            )
        return [ctx.output(ctx.dtype(0) if self.dtype is None else self.dtype, shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        out = outputs[0]
        rows, columns = out.shape
        out.fill(0)
        diagonal = ctx.xp.arange(max(0, -self.k), min(rows, columns - self.k))
        code = onnx_code_for_numpy(inputs[0].dtype) if self.dtype is None else self.dtype
        one = np.ones((), numpy_dtype_for_onnx(code))
        out[diagonal, diagonal + self.k] = device_value(ctx, one, out)


class OneHotOp(Operator):
    """OneHot: a new axis of extent `depth` holding values[1] at each index, values[0]
    elsewhere. Indices outside [0, depth) give no one (negative ones count back from 11)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", -1))

    def output_axis(self, rank: int) -> int:
        """The new axis in the output, from an attribute in [-r-1, r] for rank-r indices."""
        if not -rank - 1 <= self.axis <= rank:
            raise self.node.bad_input(
                f"OneHot axis {self.axis} is out of range [{-rank - 1}, {rank}] for indices of "
                f"rank {rank}",
                self.node.inputs[0],
            )
        return self.axis + rank + 1 if self.axis < 0 else self.axis

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, NUMERIC - {T.BFLOAT16}, 0, 1)
        if ctx.shape(2) != (2,):
            raise self.node.bad_input(
                f"OneHot values must be [off, on], got shape {list(ctx.shape(2))}",
                self.node.inputs[2],
            )
        depth_value = ctx.value(1)
        if depth_value.size != 1:
            raise self.node.bad_input(
                f"OneHot depth must be one value, got shape {list(depth_value.shape)}",
                self.node.inputs[1],
            )
        depth = int(depth_value.reshape(()).item())
        if depth < 1:
            raise self.node.bad_input(f"OneHot depth {depth} is not positive", self.node.inputs[1])
        shape = list(ctx.shape(0))
        shape.insert(self.output_axis(len(shape)), depth)
        return [ctx.output(ctx.dtype(2), shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        indices, values, out = inputs[0], inputs[2], outputs[0]
        axis = self.output_axis(indices.ndim)
        depth = out.shape[axis]
        positions = indices.astype(xp.int64)
        if self.node.opset >= 11:
            positions = xp.where(positions < 0, positions + depth, positions)
        classes = xp.arange(depth).reshape([depth if a == axis else 1 for a in range(out.ndim)])
        hot = xp.expand_dims(positions, axis) == classes
        xp.copyto(out, xp.where(hot, values[1], values[0]))


DEFS: tuple[OpDef, ...] = (
    OpDef("Constant", 1, ConstantOp),
    OpDef("ConstantOfShape", 9, ConstantOfShapeOp),
    OpDef("Range", 11, RangeOp),
    OpDef("EyeLike", 9, EyeLikeOp),
    OpDef("OneHot", 9, OneHotOp),
)
