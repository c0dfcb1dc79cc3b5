"""Element-wise functions of one tensor: Abs, Neg, Exp, ..., Erf, Not, IsNaN, IsInf, BitwiseNot.

One base class states the output (the input's shape, and its element type unless the function
answers BOOL); a subclass names its kernel. Most kernels are one ufunc of the array library
written straight into the output, so the output may share the input's memory. NumPy's float16
loops and ml_dtypes' bfloat16 loops compute each function in float32 and round once, which is as
accurate as those types can hold.

The element type sets here are shared by the other element-wise families.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from onemodel.backends import activations
from onemodel.backends.activations import float32_kernel
from onemodel.backends.fp_errors import quiet
from onemodel.backends.lazy_module import LazyModule
from onemodel.graph.onnx_proto import TensorProto
from onemodel.graph.operators.base import (
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
from onemodel.tensors import DType

# Exact mode's elementary functions (~20 ms to import): loaded by the first exact kernel.
exact_elementary: Any = LazyModule("onemodel.backends.exact_elementary")

FLOATS = frozenset({DType.FLOAT, DType.FLOAT16, DType.DOUBLE, DType.BFLOAT16})
# The floats of the operators that predate bfloat16 (which most of them took on later).
IEEE_FLOATS = frozenset({DType.FLOAT16, DType.FLOAT, DType.DOUBLE})
SIGNED_INTEGERS = frozenset({DType.INT8, DType.INT16, DType.INT32, DType.INT64})
UNSIGNED_INTEGERS = frozenset({DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64})
# The integers of MatMul, Gemm and the reductions.
WIDE_INTEGERS = frozenset({DType.INT32, DType.INT64, DType.UINT32, DType.UINT64})
INTEGERS = SIGNED_INTEGERS | UNSIGNED_INTEGERS
SIGNED = FLOATS | SIGNED_INTEGERS
NUMERIC = FLOATS | INTEGERS
BOOL = frozenset({DType.BOOL})
FLOAT8S = frozenset(
    {
        TensorProto.FLOAT8E4M3FN,
        TensorProto.FLOAT8E4M3FNUZ,
        TensorProto.FLOAT8E5M2,
        TensorProto.FLOAT8E5M2FNUZ,
    }
)


FLOAT32 = np.dtype(np.float32)
# At most this many elements, an element-wise step's Python layers cost more than its passes.
SMALL = 4096


def widened(xp: Any, x: Array) -> Array:
    """Floats narrower than float32 as float32, anything else as it is: composite formulas keep
    float32 precision in every step and round once, into the output."""
    if x.dtype.kind not in "biu" and x.dtype.itemsize < 4:
        return x.astype(xp.float32)
    return x


class ElementwiseUnary(Operator):
    """One input; one output of its shape, of its element type or of `result_type`."""

    in_place_input = 0
    types: ClassVar[frozenset[int]] = FLOATS
    result_type: ClassVar[int | None] = None

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, self.types, 0)
        dtype = ctx.dtype(0) if self.result_type is None else self.result_type
        return [ctx.output(dtype, ctx.shape(0))]

    # Fast mode on float32 and narrower floats: (kernel of backends/activations.py, work
    # arrays it takes); `fast_parameters` are its extra arguments.
    fast_kernel: ClassVar[tuple[Any, int] | None] = None

    def fast_parameters(self) -> tuple:
        return ()

    def run(self, ctx: RunContext, inputs: list[Array | None], outputs: list[Array]) -> None:
        # Overflow, log(0), 0/0 and friends have IEEE results that ONNX defines; warnings would
        # only make the backends behave differently.
        x, out = inputs[0], outputs[0]
        if x.dtype.char == out.dtype.char == "f" and x.size <= SMALL and not ctx.exact:
            self.run_small(ctx, x, out)
            return
        with quiet():
            if ctx.exact:
                self.compute_exact(ctx.kernels, x, outputs[0])
            elif self.fast_kernel is not None and x.dtype.kind in "fV" and x.dtype.itemsize < 8:
                kernel, work = self.fast_kernel
                parameters = self.fast_parameters()
                if not ctx.kernels.compiled_activation(kernel, x, outputs[0], parameters):
                    float32_kernel(kernel, work, ctx.xp, x, outputs[0], ctx.scratch, *parameters)
            else:
                self.compute(ctx.xp, x, outputs[0])

    def run_small(self, ctx: RunContext, x: Array, out: Array) -> None:
        """Fast mode on a small float32 x: the kernel called straight, without the widening,
        blocking and error-state layers, whose Python costs more than the work here."""
        with quiet():
            if self.fast_kernel is None:
                self.compute(ctx.xp, x, out)
                return
            kernel, count = self.fast_kernel
            work = list(ctx.scratch((count, *x.shape), FLOAT32)) if count else []
            kernel(ctx.xp, x, out, work, *self.fast_parameters())

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """`run_small` where it applies (fast mode, float32, small), its work arrays made
        once: they are this run state's."""
        spec, out = step.specs[0], step.outputs[0]
        if type(self).run is not ElementwiseUnary.run:  # a subclass decides more per run
            return None
        if spec.numpy_dtype != FLOAT32 or out.numpy_dtype != FLOAT32:
            return None
        if math.prod(spec.shape) > SMALL:
            return None
        return self.bind_small(ctx.xp, spec.shape)

    def bind_small(self, xp: Any, shape: tuple[int, ...]) -> BoundCall:
        """`run_small` for float32 x of `shape`."""
        if self.fast_kernel is None:
            compute = self.compute

            def computed(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
                compute(xp, inputs[0], outputs[0])

            return computed
        kernel, count = self.fast_kernel
        work = list(xp.empty((count, *shape), FLOAT32)) if count else []
        parameters = self.fast_parameters()

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            kernel(xp, inputs[0], outputs[0], work, *parameters)

        return call

    def compute(self, xp: Any, x: Array, out: Array) -> None:
        """Fill `out` from `x`; `out` may be the same array as `x`."""
        raise NotImplementedError

    def compute_exact(self, kernels: Any, x: Array, out: Array) -> None:
        """`compute` in exact mode: the same, for functions whose ufunc is one correctly rounded
        operation or a selection; functions built from more override it."""
        self.compute(kernels.exact_xp, x, out)


class Ufunc(ElementwiseUnary):
    """The array library's ufunc `ufunc`, written into the output in one pass. In exact mode
    `exact_function` (the name of a float64 function of exact_elementary), where set,
    replaces it."""

    ufunc: ClassVar[str]
    exact_function: ClassVar[str | None] = None

    def compute(self, xp: Any, x: Array, out: Array) -> None:
        getattr(xp, self.ufunc)(x, out=out)

    def bind_small(self, xp: Any, shape: tuple[int, ...]) -> BoundCall:
        """The ufunc itself, where `compute` is this one."""
        if self.fast_kernel is not None or type(self).compute is not Ufunc.compute:
            return super().bind_small(xp, shape)
        ufunc = getattr(xp, self.ufunc)

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            ufunc(inputs[0], out=outputs[0])

        return call

    def compute_exact(self, kernels: Any, x: Array, out: Array) -> None:
        if self.exact_function is None:
            super().compute_exact(kernels, x, out)
        else:
            function = getattr(exact_elementary, self.exact_function)
            kernels.exact_map_arrays(function, (x,), out)


class Formula(ElementwiseUnary):
    """A composite formula evaluated on `widened` values and rounded once into the output, which
    is only written at the end (so it may share the input's memory)."""

    def compute(self, xp: Any, x: Array, out: Array) -> None:
        xp.copyto(out, self.formula(xp, widened(xp, x)), casting="unsafe")

    def compute_exact(self, kernels: Any, x: Array, out: Array) -> None:
        """`exact_formula` on a float64 copy of x, rounded once (exact_map_arrays)."""
        kernels.exact_map_arrays(self.exact_formula, (x,), out)

    def formula(self, xp: Any, x: Array) -> Array:
        raise NotImplementedError

    def exact_formula(self, xp: Any, x: Array) -> Array:
        """Exact mode's formula (with supports_exact): float64 in and out, built only from
        correctly rounded operations and the exact elementary functions."""
        raise NotImplementedError


class Abs(Ufunc):
    """Exact: clears the sign (two's complement integers: |INT_MIN| wraps to INT_MIN)."""

    ufunc, types, supports_exact = "absolute", NUMERIC, True


class Neg(Ufunc):
    """Exact: flips the sign (two's complement integers: -INT_MIN wraps to INT_MIN)."""

    ufunc, types, supports_exact = "negative", SIGNED, True


class Exp(Ufunc):
    """Exact: exact_exp_arrays (a fixed range reduction and polynomial in float64)."""

    ufunc, supports_exact = "exp", True

    def compute_exact(self, kernels: Any, x: Array, out: Array) -> None:
        kernels.exact_exp_arrays(x, out)


class Log(Ufunc):
    """Exact: exact_log_arrays (a fixed range reduction and series in float64)."""

    ufunc, supports_exact = "log", True

    def compute_exact(self, kernels: Any, x: Array, out: Array) -> None:
        kernels.exact_log_arrays(x, out)


class Sqrt(Ufunc):
    """Exact: IEEE square root is correctly rounded (float16 and bfloat16 through float32 too:
    float32 has more than twice their precision plus two bits, so that rounding is innocuous)."""

    ufunc, supports_exact = "sqrt", True


class Reciprocal(Ufunc):
    """Exact: one correctly rounded division 1/x."""

    ufunc, supports_exact = "reciprocal", True


class Floor(Ufunc):
    """Exact: an integral value is exact in the type."""

    ufunc, supports_exact = "floor", True


class Ceil(Ufunc):
    """Exact: an integral value is exact in the type."""

    ufunc, supports_exact = "ceil", True


class Round(Ufunc):
    """Halves round to even, as ONNX says: rint, not the half-away-from-zero of C's round.
    Exact: an integral value is exact in the type."""

    ufunc, supports_exact = "rint", True


class Sign(Ufunc):
    """Exact: a selection between −1, 0 and 1 (NaN stays NaN)."""

    ufunc, types, supports_exact = "sign", NUMERIC, True


class Sin(Ufunc):
    """Exact: exact_elementary.sin64 (docs/exact-mode.md)."""

    ufunc, supports_exact = "sin", True
    exact_function = "sin64"


class Cos(Ufunc):
    """Exact: exact_elementary.cos64 (docs/exact-mode.md)."""

    ufunc, supports_exact = "cos", True
    exact_function = "cos64"


class Tan(Ufunc):
    """Exact: exact_elementary.tan64 (docs/exact-mode.md)."""

    ufunc, supports_exact = "tan", True
    exact_function = "tan64"


class Asin(Ufunc):
    """Exact: exact_elementary.asin64 (docs/exact-mode.md)."""

    ufunc, supports_exact = "arcsin", True
    exact_function = "asin64"


class Acos(Ufunc):
    """Exact: exact_elementary.acos64 (docs/exact-mode.md)."""

    ufunc, supports_exact = "arccos", True
    exact_function = "acos64"


class Atan(Ufunc):
    """Exact: exact_elementary.atan64 (docs/exact-mode.md)."""

    ufunc, supports_exact = "arctan", True
    exact_function = "atan64"


class Sinh(Ufunc):
    """Exact: exact_elementary.sinh64 (docs/exact-mode.md)."""

    ufunc, supports_exact = "sinh", True
    exact_function = "sinh64"


class Cosh(Ufunc):
    """Exact: exact_elementary.cosh64 (docs/exact-mode.md)."""

    ufunc, supports_exact = "cosh", True
    exact_function = "cosh64"


class Asinh(Ufunc):
    """Exact: exact_elementary.asinh64 (docs/exact-mode.md)."""

    ufunc, supports_exact = "arcsinh", True
    exact_function = "asinh64"


class Acosh(Ufunc):
    """Exact: exact_elementary.acosh64 (docs/exact-mode.md)."""

    ufunc, supports_exact = "arccosh", True
    exact_function = "acosh64"


class Atanh(Ufunc):
    """Exact: exact_elementary.atanh64 (docs/exact-mode.md)."""

    ufunc, supports_exact = "arctanh", True
    exact_function = "atanh64"


class Not(Ufunc):
    """Exact: a selection between two values."""

    ufunc, types, supports_exact = "logical_not", BOOL, True


class BitwiseNot(Ufunc):
    """Exact: an integer operation."""

    ufunc, types, supports_exact = "invert", INTEGERS, True


class IsNaN(Ufunc):
    """Exact: a classification."""

    ufunc, types, result_type, supports_exact = "isnan", FLOATS | FLOAT8S, DType.BOOL, True


class IsInf(ElementwiseUnary):
    """True for the infinities the attributes ask for (float8 E4M3 types have none).
    Exact: classifications and compares."""

    types, result_type, supports_exact = FLOATS | FLOAT8S, DType.BOOL, True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.positive = bool(node.attr("detect_positive", 1))
        self.negative = bool(node.attr("detect_negative", 1))

    def compute(self, xp: Any, x: Array, out: Array) -> None:
        xp.isinf(x, out=out)
        if not self.positive:
            xp.logical_and(out, x < 0, out=out)
        if not self.negative:
            xp.logical_and(out, x > 0, out=out)


class Erf(Formula):
    """The error function, which NumPy and CuPy lack. float64 inputs: W. J. Cody's rational
    Chebyshev approximations (Math. Comp. 23, 1969; netlib SPECFUN CALERF), relative error below
    1e-15. Narrower floats in fast mode: `backends.activations.erf`, tanh of a fitted odd polynomial
    in float32, within 4 float32 ulps.

    Erf 9 also listed integer types without saying how an integer result is rounded; they are
    refused. Exact: exact_erf_arrays (a positive series times the exact exp, in float64)."""

    supports_exact = True
    fast_kernel = (activations.erf, 2)

    def compute_exact(self, kernels: Any, x: Array, out: Array) -> None:
        kernels.exact_erf_arrays(x, out)

    def formula(self, xp: Any, x: Array) -> Array:
        return erf(xp, x.astype(xp.float64))


# Cody's coefficients: erf(x) = x·A(x²)/B(x²) for |x| ≤ 0.46875; erfc(y) = exp(-y²)·C(y)/D(y)
# for 0.46875 < y ≤ 4; erfc(y) = exp(-y²)/y·(1/√π + P(1/y²)/(y²·Q(1/y²))) for y > 4.
_A = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
      3.20937758913846947e03, 1.85777706184603153e-1)  # fmt: skip
_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
      2.84423683343917062e03)  # fmt: skip
_C = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
      2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
      2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)  # fmt: skip
_D = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
      1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
      3.43936767414372164e03, 1.23033935480374942e03)  # fmt: skip
_P = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
      1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)  # fmt: skip
_Q = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1,
      6.05183413124413191e-2, 2.33520497626869185e-3)  # fmt: skip
_ONE_OVER_SQRT_PI = 5.6418958354775628695e-1
_NEAR_ZERO = 0.46875


def erf(xp: Any, x: Array) -> Array:
    """erf of a float64 array, as a new float64 array."""
    y = _magnitude(xp, x)
    far = xp.copysign((0.5 - _erfc_beyond_threshold(xp, y)) + 0.5, x)
    return xp.where(y <= _NEAR_ZERO, _erf_near_zero(xp, x, y), far)


def erfc(xp: Any, x: Array) -> Array:
    """1 - erf(x) of a float64 array without cancellation where it is small (Gelu's tail)."""
    y = _magnitude(xp, x)
    tail = _erfc_beyond_threshold(xp, y)
    far = xp.where(x < 0, (0.5 - tail) + 1.5, tail)
    return xp.where(y <= _NEAR_ZERO, (0.5 - _erf_near_zero(xp, x, y)) + 0.5, far)


def _magnitude(xp: Any, x: Array) -> Array:
    """|x|, clamped where erfc(|x|) underflows to 0 so that infinities stay out of the formulas
    (NaN stays NaN). Every branch is computed everywhere and the right one selected, so there is
    no data-dependent indexing, which is cheap on a GPU too."""
    return xp.minimum(xp.absolute(x), 27.0)


def _erf_near_zero(xp: Any, x: Array, y: Array) -> Array:
    square = y * y
    num, den = _A[4] * square, square
    for a, b in zip(_A[:3], _B[:3], strict=True):
        num, den = (num + a) * square, (den + b) * square
    return x * (num + _A[3]) / (den + _B[3])


def _erfc_beyond_threshold(xp: Any, y: Array) -> Array:
    """erfc(y) for y > 0.46875 (garbage below, where it is not selected)."""
    num, den = _C[8] * y, y
    for c, d in zip(_C[:7], _D[:7], strict=True):
        num, den = (num + c) * y, (den + d) * y
    middle = (num + _C[7]) / (den + _D[7])
    inverse = 1.0 / (y * y)
    num, den = _P[5] * inverse, inverse
    for p, q in zip(_P[:4], _Q[:4], strict=True):
        num, den = (num + p) * inverse, (den + q) * inverse
    tail = (_ONE_OVER_SQRT_PI - inverse * (num + _P[4]) / (den + _Q[4])) / y
    return xp.where(y <= 4.0, middle, tail) * _exp_minus_square(xp, y)


def _exp_minus_square(xp: Any, y: Array) -> Array:
    """exp(-y²) without the rounding error of y² itself: y = h + l with h a multiple of 1/16,
    so h² is exact and exp(-y²) = exp(-h²)·exp(-(y - h)(y + h))."""
    high = xp.trunc(y * 16.0) / 16.0
    return xp.exp(-high * high) * xp.exp(-(y - high) * (y + high))


DEFS: tuple[OpDef, ...] = (
    OpDef("Abs", 1, Abs),
    OpDef("Neg", 1, Neg),
    OpDef("Exp", 1, Exp),
    OpDef("Log", 1, Log),
    OpDef("Sqrt", 1, Sqrt),
    OpDef("Reciprocal", 1, Reciprocal),
    OpDef("Floor", 1, Floor),
    OpDef("Ceil", 1, Ceil),
    OpDef("Round", 11, Round),
    OpDef("Sign", 9, Sign),
    OpDef("Sin", 7, Sin),
    OpDef("Cos", 7, Cos),
    OpDef("Tan", 7, Tan),
    OpDef("Asin", 7, Asin),
    OpDef("Acos", 7, Acos),
    OpDef("Atan", 7, Atan),
    OpDef("Sinh", 9, Sinh),
    OpDef("Cosh", 9, Cosh),
    OpDef("Asinh", 9, Asinh),
    OpDef("Acosh", 9, Acosh),
    OpDef("Atanh", 9, Atanh),
    OpDef("Erf", 9, Erf),
    OpDef("Not", 1, Not),
    OpDef("BitwiseNot", 18, BitwiseNot),
    OpDef("IsNaN", 9, IsNaN),
    OpDef("IsInf", 10, IsInf),
)
