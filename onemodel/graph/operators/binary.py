"""Element-wise operators of two broadcast inputs (Add ... BitwiseXor) and the variadic Max, Min,
Sum and Mean.

From opset 7 (8 for the variadic ones) inputs broadcast multidirectionally. Before, Add, Sub, Mul,
Div, Pow, And, Or, Xor, Equal, Less and Greater broadcast B to A only, and only when the
attribute `broadcast` is 1 (B's shape matched against A's at `axis`, or at its end), and the
variadic ones take equal shapes only.

Kernels write their output with `out=` or at the very end, so the output may share input 0's
memory (`in_place_input = 0`) even when input 1 broadcasts or is the same array.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from onemodel.backends.broadcasting import ROW_BUFFER_ABOVE, held_operand, ufunc_into
from onemodel.backends.fp_errors import quiet
from onemodel.graph.onnx_proto import TensorProto
from onemodel.graph.operators.base import (
    ELEMENTWISE,
    Array,
    BoundCall,
    BoundStep,
    HeldOperand,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.broadcast import multidirectional
from onemodel.graph.operators.unary import BOOL, FLOATS, INTEGERS, NUMERIC, exact_elementary
from onemodel.tensors import DType, onnx_name

LAST_LEGACY_BROADCAST_OPSET = 6


def check_same_type(ctx: InferContext, indices: Sequence[int]) -> None:
    """Inputs that the spec ties to one type variable T must have one element type."""
    node = ctx.node
    first = ctx.dtype(indices[0])
    for index in indices[1:]:
        if ctx.has(index) and ctx.dtype(index) != first:
            raise node.invalid(
                f"{node.op_type} needs inputs of one element type, got {onnx_name(first)} and "
                f"{onnx_name(ctx.dtype(index))}",
                node.inputs[index],
            )


class ElementwiseBinary(Operator):
    """Two inputs, broadcast; the result has input 0's element type unless `result_type`."""

    in_place_input = 0
    types: ClassVar[frozenset[int]] = NUMERIC
    result_type: ClassVar[int | None] = None
    # Pow's exponent has types of its own; every other operator ties both inputs to one type.
    second_types: ClassVar[frozenset[int] | None] = None

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.legacy = node.opset <= LAST_LEGACY_BROADCAST_OPSET
        if self.legacy:
            self.broadcast = bool(node.attr("broadcast", 0))
            self.axis: int | None = node.attr("axis", None)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        if self.second_types is None:
            self.check_types(ctx, self.types, 0, 1)
            check_same_type(ctx, (0, 1))
        else:
            self.check_types(ctx, self.types, 0)
            self.check_types(ctx, self.second_types, 1)
        if self.legacy:
            self._legacy_shape_of_b(ctx.shape(0), ctx.shape(1))
            shape = ctx.shape(0)
        else:
            shape = multidirectional(ctx, (0, 1))
        dtype = ctx.dtype(0) if self.result_type is None else self.result_type
        return [ctx.output(dtype, shape)]

    def run(self, ctx: RunContext, inputs: list[Array | None], outputs: list[Array]) -> None:
        a, b = inputs
        if self.legacy:
            b = b.reshape(self._legacy_shape_of_b(a.shape, b.shape))
        # Overflow, x/0 and friends have results ONNX or IEEE define; warnings would only make
        # the backends behave differently.
        with quiet():
            if ctx.exact:
                self.compute_exact(ctx.kernels, a, b, outputs[0])
            else:
                self.compute(ctx.xp, a, b, outputs[0])

    def compute(self, xp: Any, a: Array, b: Array, out: Array) -> None:
        """Fill `out`, which may be the same array as `a` (and `b`, when a is b)."""
        raise NotImplementedError

    def compute_exact(self, kernels: Any, a: Array, b: Array, out: Array) -> None:
        """`compute` in exact mode: the same through exact mode's namespace, for kernels that
        are one correctly rounded operation or a selection; those built from more override it."""
        self.compute(kernels.exact_xp, a, b, out)

    def _legacy_shape_of_b(self, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        """B's shape padded with 1s to A's rank at `axis`, which NumPy then broadcasts."""
        if not self.broadcast:
            if a != b:
                raise self.node.bad_input(
                    f"{self.node.op_type} (opset {self.node.opset}) without broadcast=1 needs "
                    f"inputs of one shape, got {a} and {b}",
                    self.node.inputs[1],
                )
            return b
        axis = len(a) - len(b) if self.axis is None else self.axis
        fits = 0 <= axis <= len(a) - len(b) and all(
            extent in (1, a[axis + i]) for i, extent in enumerate(b)
        )
        if not fits:
            raise self.node.bad_input(
                f"{self.node.op_type} (opset {self.node.opset}) cannot broadcast B of shape {b} "
                f"to A of shape {a} at axis {axis}",
                self.node.inputs[1],
            )
        return (1,) * axis + b + (1,) * (len(a) - axis - len(b))


class BinaryUfunc(ElementwiseBinary):
    """The array library's two-input ufunc `ufunc`, written into the output in one pass (with
    a broadcast operand, one row's ufunc buffer: backends/broadcasting.py)."""

    ufunc: ClassVar[str]

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        # The small-output path below is `compute` only where no subclass replaced it.
        self.plain = not self.legacy and type(self).compute is BinaryUfunc.compute

    def run(self, ctx: RunContext, inputs: list[Array | None], outputs: list[Array]) -> None:
        out = outputs[0]
        if out.size <= ROW_BUFFER_ABOVE and not ctx.exact and self.plain:
            # Small: the ufunc straight into out (no buffer setting to weigh, no layers).
            with quiet():
                getattr(ctx.xp, self.ufunc)(inputs[0], inputs[1], out=out)
            return
        super().run(ctx, inputs, outputs)

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """A small output: the ufunc itself, straight into out (as `run` calls it), a constant
        operand that would broadcast made full once (`held_operand`), out given by position
        (60 ns less a call than by keyword in NumPy 2.4)."""
        if not self.plain or math.prod(step.outputs[0].shape) > ROW_BUFFER_ABOVE:
            return None
        if type(self).run is not BinaryUfunc.run:  # a subclass decides more per run
            return None
        ufunc = getattr(ctx.xp, self.ufunc)
        shape = tuple(step.outputs[0].shape)
        first, second = step.constants[:2]
        if first is None and second is not None:  # a bias, a scale: broadcast once
            held = held_operand(ctx.xp, second, shape)

            def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
                ufunc(inputs[0], held, outputs[0])

            call.held_operand = HeldOperand(ufunc, 1, held)  # type: ignore[attr-defined]
            return call
        if second is None and first is not None:
            held = held_operand(ctx.xp, first, shape)

            def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
                ufunc(held, inputs[1], outputs[0])

            call.held_operand = HeldOperand(ufunc, 0, held)  # type: ignore[attr-defined]
            return call

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            ufunc(inputs[0], inputs[1], out=outputs[0])

        return call

    def compute(self, xp: Any, a: Array, b: Array, out: Array) -> None:
        ufunc_into(xp, getattr(xp, self.ufunc), a, b, out=out)


class Add(BinaryUfunc):
    """Exact: one correctly rounded IEEE addition per element (integers wrap)."""

    layout_role = ELEMENTWISE

    ufunc, supports_exact = "add", True


class Sub(BinaryUfunc):
    """Exact: one correctly rounded IEEE subtraction per element (integers wrap)."""

    layout_role = ELEMENTWISE

    ufunc, supports_exact = "subtract", True


class Mul(BinaryUfunc):
    """Exact: one correctly rounded IEEE multiplication per element (integers wrap)."""

    layout_role = ELEMENTWISE

    ufunc, supports_exact = "multiply", True


class Div(ElementwiseBinary):
    """Exact: one correctly rounded IEEE division per element; integers truncate toward zero,
    as C and onnxruntime do (x / 0 is 0, where C leaves it undefined)."""

    layout_role = ELEMENTWISE

    supports_exact = True

    def compute(self, xp: Any, a: Array, b: Array, out: Array) -> None:
        if a.dtype.kind != "i":  # floats; unsigned integers, where floor is truncation
            divide = xp.floor_divide if a.dtype.kind == "u" else xp.divide
            divide(a, b, out=out)
            return
        remainder = xp.fmod(a, b)  # C's remainder: the sign of a, so a - r is a multiple of b
        xp.copyto(out, xp.floor_divide(a - remainder, b))


class Pow(ElementwiseBinary):
    """The result has the base's type; the exponent may have another.

    Float bases compute in float32 when both operands are exact in it, else in float64, and
    round once. Integer bases with integer exponents are exact (wrapping like repeated
    multiplication); a negative exponent gives trunc(a^b): 1 for a = 1, ±1 for a = -1, else 0
    (also for 0^-n, which has no integer value). With a float exponent the float64 power is
    truncated toward zero.

    Exact: integer powers as above (exact by nature); otherwise exact_elementary.pow64 on
    float64 copies, rounded once (truncated for an integer base)."""

    types = FLOATS | {DType.INT32, DType.INT64}
    second_types = NUMERIC
    supports_exact = True

    def compute(self, xp: Any, a: Array, b: Array, out: Array) -> None:
        if a.dtype.kind == "i" and b.dtype.kind in "iu":
            result = _integer_power(xp, a, b)
        elif a.dtype.kind == "i":
            result = xp.trunc(xp.power(a.astype(xp.float64), b.astype(xp.float64)))
        else:
            wide = xp.float32 if _exact_in_float32(a.dtype, b.dtype) else xp.float64
            result = xp.power(a.astype(wide), b.astype(wide))
        xp.copyto(out, result, casting="unsafe")

    def compute_exact(self, kernels: Any, a: Array, b: Array, out: Array) -> None:
        if a.dtype.kind == "i" and b.dtype.kind in "iu":
            self.compute(kernels.exact_xp, a, b, out)
        elif a.dtype.kind == "i":
            kernels.exact_map_arrays(_truncated_power, (a, b), out)
        else:
            kernels.exact_map_arrays(exact_elementary.pow64, (a, b), out)


def _truncated_power(xp: Any, a: Array, b: Array) -> Array:
    return xp.trunc(exact_elementary.pow64(xp, a, b))


def _exact_in_float32(*dtypes: Any) -> bool:
    """16-bit and 8-bit types, and float32 itself, hold only values float32 holds exactly."""
    return all(dtype.itemsize <= 2 or dtype == np.float32 for dtype in dtypes)


def _integer_power(xp: Any, a: Array, b: Array) -> Array:
    """a^b in int64 for int32/int64 bases (see Pow); the caller casts to a's type."""
    if b.dtype == np.uint64:  # beyond 2^62 the result no longer changes with the exponent
        b = xp.minimum(b, np.uint64(2**62))
    exponent = b.astype(xp.int64)
    base = a.astype(xp.int64)
    negative = exponent < 0
    power = xp.power(base, xp.where(negative, 0, exponent))
    fraction = xp.where(xp.absolute(base) == 1, xp.where(exponent % 2 == 0, 1, base), 0)
    return xp.where(negative, fraction, power)


class Mod(ElementwiseBinary):
    """fmod=0: the remainder of floor division, with the divisor's sign (Python's %); fmod=1:
    C's fmod, with the dividend's sign. Integer x mod 0 is 0, where C leaves it undefined.

    Float floor remainders are built from fmod, which is exact, as NumPy's own loop does: CuPy's
    `remainder` gives NaN for a finite x mod ±inf, where opset 28 says x or the divisor.
    Exact: fmod is exact, and the move by one divisor one correctly rounded addition."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        fmod = node.attr("fmod", 0)
        if fmod not in (0, 1):
            raise node.invalid(f"Mod needs fmod 0 or 1, got {fmod}")
        self.fmod = bool(fmod)

    def compute(self, xp: Any, a: Array, b: Array, out: Array) -> None:
        if self.fmod:
            xp.fmod(a, b, out=out)
        elif a.dtype.kind in "iu":
            xp.remainder(a, b, out=out)
        else:
            xp.copyto(out, _floor_remainder(xp, a, b))


def _floor_remainder(xp: Any, a: Array, b: Array) -> Array:
    """fmod moved by one divisor where its sign differs from the divisor's; a zero remainder
    takes the divisor's sign (one rounding: r + b)."""
    remainder = xp.fmod(a, b)
    moved = xp.not_equal(remainder, 0) & (xp.less(remainder, 0) != xp.less(b, 0))
    remainder = xp.where(moved, xp.add(remainder, b), remainder)
    zero = xp.equal(remainder, 0)
    return xp.where(zero, xp.copysign(xp.zeros_like(remainder), b), remainder)


class BitShift(ElementwiseBinary):
    """Shifts by amounts outside 0 .. bits-1 give what the sign extension alone gives (-1 for a
    right shift of a negative value, else 0), as opset 28 defines for every backend; signed types
    shift arithmetically right. Opsets 11-27 define unsigned types only, where this agrees.
    Exact: integer operations."""

    types = INTEGERS
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        direction = node.attr("direction")
        if direction not in ("LEFT", "RIGHT"):
            raise node.invalid(f"BitShift needs direction LEFT or RIGHT, got {direction!r}")
        self.left = direction == "LEFT"

    def compute(self, xp: Any, a: Array, b: Array, out: Array) -> None:
        inside = (b >= 0) & (b < a.dtype.itemsize * 8)
        amount = xp.where(inside, b, 0)
        if self.left:
            shifted, fill = xp.left_shift(a, amount), 0
        else:
            shifted = xp.right_shift(a, amount)
            fill = xp.where(a < 0, -1, 0) if a.dtype.kind == "i" else 0
        xp.copyto(out, xp.where(inside, shifted, fill), casting="unsafe")


class Comparison(BinaryUfunc):
    """Exact: a comparison of the two values. Element type BOOL."""

    result_type = DType.BOOL
    supports_exact = True


class Equal(Comparison):
    ufunc, types = "equal", NUMERIC | BOOL


class EqualWithStrings(Equal):
    """Equal from opset 19, which adds STRING: strings are host object arrays, whose
    comparison NumPy makes element by element (str.__eq__) into the BOOL output."""

    types = NUMERIC | BOOL | {TensorProto.STRING}

    def compute(self, xp: Any, a: Array, b: Array, out: Array) -> None:
        if a.dtype == object:
            np.equal(a, b, out=out)
        else:
            super().compute(xp, a, b, out)


class Less(Comparison):
    ufunc = "less"


class Greater(Comparison):
    ufunc = "greater"


class LessOrEqual(Comparison):
    ufunc = "less_equal"


class GreaterOrEqual(Comparison):
    ufunc = "greater_equal"


class Logical(BinaryUfunc):
    """Exact: a boolean function of two booleans."""

    types = BOOL
    supports_exact = True


class And(Logical):
    ufunc = "logical_and"


class Or(Logical):
    ufunc = "logical_or"


class Xor(Logical):
    ufunc = "logical_xor"


class Bitwise(BinaryUfunc):
    """Exact: integer operations."""

    types = INTEGERS
    supports_exact = True


class BitwiseAnd(Bitwise):
    ufunc = "bitwise_and"


class BitwiseOr(Bitwise):
    ufunc = "bitwise_or"


class BitwiseXor(Bitwise):
    ufunc = "bitwise_xor"


def ordered_total(xp: Any, *inputs: Array) -> Array:
    """Σ inputs in float64 from the first, in input order (broadcast)."""
    first, *rest = inputs
    total = xp.empty(xp.broadcast_shapes(*(x.shape for x in inputs)), dtype=xp.float64)
    total[...] = first
    for x in rest:
        total += x
    return total


def ordered_mean(xp: Any, *inputs: Array) -> Array:
    return ordered_total(xp, *inputs) / len(inputs)


class Variadic(Operator):
    """1..N inputs of one type folded left to right with the two-input ufunc `ufunc`.

    Inputs broadcast multidirectionally from opset 8; before, they must share one shape."""

    in_place_input = 0
    types: ClassVar[frozenset[int]] = NUMERIC
    ufunc: ClassVar[str]

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        if not any(ctx.has(i) for i in range(len(ctx))):
            raise node.invalid(f"{node.op_type} needs at least one input")
        indices = range(len(ctx))
        self.check_types(ctx, self.types)
        check_same_type(ctx, indices)
        if node.opset < 8 and len({ctx.shape(i) for i in indices}) > 1:
            shapes = ", ".join(str(ctx.shape(i)) for i in indices)
            raise node.bad_input(
                f"{node.op_type} (opset {node.opset}) needs inputs of one shape, got {shapes}"
            )
        return [ctx.output(ctx.dtype(0), multidirectional(ctx, indices))]

    def run(self, ctx: RunContext, inputs: list[Array | None], outputs: list[Array]) -> None:
        xp, out = ctx.xp, outputs[0]
        fold = getattr(xp, self.ufunc)
        first, *rest = inputs
        if ctx.exact and self.exact_formula is not None:
            ctx.kernels.exact_map_arrays(self.exact_formula, inputs, out)
            return
        with quiet():
            if not rest:
                xp.copyto(out, first)
            elif len(rest) == 1:
                fold(first, rest[0], out=out)
            else:
                # A later input may be input 0 again, whose memory `out` may be: fold into a
                # temporary so no input is read after the output has been written.
                total = xp.empty_like(out)
                fold(first, rest[0], out=total)
                for x in rest[1:]:
                    fold(total, x, out=total)
                xp.copyto(out, total)
            self.finish(xp, out, len(inputs))

    def finish(self, xp: Any, out: Array, count: int) -> None:
        """A last step on the folded result."""

    # Exact mode's float64 formula of all inputs (exact_map_arrays), where the fold would round
    # more than once.
    exact_formula: ClassVar[Any] = None


class Max(Variadic):
    """Exact: every element is one of the inputs' (NaN wins), for any number of inputs."""

    ufunc, supports_exact = "maximum", True


class Min(Variadic):
    """Exact: every element is one of the inputs' (NaN wins), for any number of inputs."""

    ufunc, supports_exact = "minimum", True


class Sum(Variadic):
    """Exact: the float64 sum from the first input in input order, rounded once."""

    ufunc, types, supports_exact = "add", FLOATS, True
    exact_formula = staticmethod(ordered_total)


class Mean(Variadic):
    """Exact: Sum's float64 sum divided once by the count, rounded once."""

    ufunc, types, supports_exact = "add", FLOATS, True
    exact_formula = staticmethod(ordered_mean)

    def finish(self, xp: Any, out: Array, count: int) -> None:
        xp.divide(out, count, out=out)


DEFS: tuple[OpDef, ...] = (
    OpDef("Add", 1, Add),
    OpDef("Sub", 1, Sub),
    OpDef("Mul", 1, Mul),
    OpDef("Div", 1, Div),
    OpDef("Pow", 1, Pow),
    OpDef("Mod", 10, Mod),
    OpDef("BitShift", 11, BitShift),
    OpDef("And", 1, And),
    OpDef("Or", 1, Or),
    OpDef("Xor", 1, Xor),
    OpDef("Equal", 1, Equal, until=18),
    OpDef("Equal", 19, EqualWithStrings),
    OpDef("Less", 1, Less),
    OpDef("Greater", 1, Greater),
    OpDef("LessOrEqual", 12, LessOrEqual),
    OpDef("GreaterOrEqual", 12, GreaterOrEqual),
    OpDef("BitwiseAnd", 18, BitwiseAnd),
    OpDef("BitwiseOr", 18, BitwiseOr),
    OpDef("BitwiseXor", 18, BitwiseXor),
    OpDef("Max", 1, Max),
    OpDef("Min", 1, Min),
    OpDef("Sum", 1, Sum),
    OpDef("Mean", 1, Mean),
)
