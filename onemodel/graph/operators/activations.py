"""Activation functions: Relu ... Shrink, element-wise, keeping the input's shape and type.

Formulas are evaluated with `unary.Formula`: float16 and bfloat16 in float32, rounded once into
the output; float attributes (float32 in ONNX) enter as Python floats, which keep the working
type. PRelu takes a second input and Clip optional bound inputs; both keep the input's shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from onemodel.backends import activations as kernels
from onemodel.backends.fp_errors import quiet
from onemodel.backends.lazy_module import LazyModule
from onemodel.graph.operators.base import (
    ELEMENTWISE,
    Array,
    BoundCall,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.binary import check_same_type
from onemodel.graph.operators.broadcast import unidirectional
from onemodel.graph.operators.unary import (
    FLOAT32,
    FLOATS,
    NUMERIC,
    SIGNED,
    ElementwiseUnary,
    Formula,
    Ufunc,
    erfc,
)
from onemodel.tensors.shapes import element_count

# Exact mode's activations: loaded by the first exact kernel (a fast session never needs them).
exact_activations: Any = LazyModule("onemodel.backends.exact_activations")


class Relu(ElementwiseUnary):
    """Exact: max(x, 0) then + 0, two correctly rounded operations written into the output
    without a temporary: NaN passes through maximum, and the addition turns the -0 that
    maximum(-0, 0) may keep into +0 (integers are unchanged by it)."""

    layout_role = ELEMENTWISE

    types = SIGNED
    supports_exact = True
    fast_kernel = (kernels.relu, 0)

    def compute(self, xp: Any, x: Array, out: Array) -> None:
        zero = x.dtype.type(0)
        xp.maximum(x, zero, out=out)
        xp.add(out, zero, out=out)

    def bind_small(self, xp: Any, shape: tuple[int, ...]) -> BoundCall:
        """Where `kernels.relu` is one maximum, that maximum with its zero operand made once
        (the same values for any x; `zero_operand` declines only where it would be slower)."""
        zeros = kernels.relu_operand(xp, shape, FLOAT32)
        if zeros is None:
            return super().bind_small(xp, shape)
        maximum = xp.maximum

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            maximum(inputs[0], zeros, out=outputs[0])

        return call


class Tanh(Ufunc):
    """Exact: exact_activations.tanh through exact_map_arrays."""

    layout_role = ELEMENTWISE

    ufunc, supports_exact = "tanh", True

    def compute_exact(self, kernels: Any, x: Array, out: Array) -> None:
        kernels.exact_map_arrays(exact_activations.tanh, (x,), out)


class Sigmoid(Formula):
    """1 / (1 + exp(-x)); exp overflowing to inf for very negative x correctly gives 0 (float32
    and narrower in fast mode: `backends.activations.sigmoid`, 1/2 + tanh(x/2)/2)."""

    layout_role = ELEMENTWISE

    fast_kernel = (kernels.sigmoid, 0)
    supports_exact = True

    def formula(self, xp: Any, x: Array) -> Array:
        return 1.0 / (1.0 + xp.exp(-x))

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.sigmoid(xp, x)


class Softsign(Formula):
    fast_kernel = (kernels.softsign, 1)
    supports_exact = True

    def formula(self, xp: Any, x: Array) -> Array:
        return x / (1.0 + xp.absolute(x))

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.softsign(xp, x)


class Softplus(Formula):
    """log(1 + exp(x)) as logaddexp(x, 0), which neither overflows nor loses small values
    (float32 and narrower in fast mode: `backends.activations.softplus`, from exp and log)."""

    supports_exact = True
    fast_kernel = (kernels.softplus, 3)

    def formula(self, xp: Any, x: Array) -> Array:
        return xp.logaddexp(x, 0.0)

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.softplus(xp, x)


class Mish(Formula):
    """x·tanh(softplus(x)) (float32 and narrower in fast mode: `backends.activations.mish`,
    x·n/(n + 2) with n = exp(x)·(exp(x) + 2))."""

    supports_exact = True
    fast_kernel = (kernels.mish, 2)

    def formula(self, xp: Any, x: Array) -> Array:
        return x * xp.tanh(xp.logaddexp(x, 0.0))

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.mish(xp, x)


class WithAlpha(Formula):
    """A formula with one float attribute, `alpha`."""

    default_alpha: ClassVar[float]
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", self.default_alpha))


class LeakyRelu(WithAlpha):
    layout_role = ELEMENTWISE
    default_alpha = 0.01
    fast_kernel = (kernels.leaky_relu, 1)

    def fast_parameters(self) -> tuple:
        return (self.alpha,)

    def formula(self, xp: Any, x: Array) -> Array:
        return xp.where(x < 0, x * self.alpha, x)

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.leaky_relu(xp, x, self.alpha)


class ThresholdedRelu(WithAlpha):
    default_alpha = 1.0
    fast_kernel = (kernels.thresholded_relu, 1)

    def fast_parameters(self) -> tuple:
        return (self.alpha,)

    def formula(self, xp: Any, x: Array) -> Array:
        return xp.where(x > self.alpha, x, 0.0)

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.thresholded_relu(xp, x, self.alpha)


class Elu(WithAlpha):
    """alpha·(exp(x) - 1) for x < 0 via expm1, which keeps small |x| accurate."""

    default_alpha = 1.0
    fast_kernel = (kernels.exp_linear, 1)

    def fast_parameters(self) -> tuple:
        return (1.0, self.alpha, 1.0)

    def formula(self, xp: Any, x: Array) -> Array:
        return xp.where(x < 0, self.alpha * xp.expm1(x), x)

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.elu(xp, x, self.alpha)


class Celu(WithAlpha):
    """max(0, x) + min(0, alpha·(exp(x/alpha) - 1)), as the spec writes it."""

    default_alpha = 1.0
    fast_kernel = (kernels.exp_linear, 1)

    def fast_parameters(self) -> tuple:
        return (1.0 / self.alpha, self.alpha, 1.0)

    def formula(self, xp: Any, x: Array) -> Array:
        return xp.maximum(x, 0.0) + xp.minimum(self.alpha * xp.expm1(x / self.alpha), 0.0)

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.celu(xp, x, self.alpha)


class Selu(Formula):
    fast_kernel = (kernels.exp_linear, 1)

    def fast_parameters(self) -> tuple:
        return (1.0, self.gamma * self.alpha, self.gamma)

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 1.67326319217681884765625))
        self.gamma = float(node.attr("gamma", 1.05070102214813232421875))

    def formula(self, xp: Any, x: Array) -> Array:
        return self.gamma * xp.where(x <= 0, self.alpha * xp.expm1(x), x)

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.selu(xp, x, self.alpha, self.gamma)


class HardSigmoid(Formula):
    layout_role = ELEMENTWISE
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 0.2))
        self.beta = float(node.attr("beta", 0.5))

    fast_kernel = (kernels.hard_sigmoid, 0)

    def fast_parameters(self) -> tuple:
        return (self.alpha, self.beta)

    def formula(self, xp: Any, x: Array) -> Array:
        return xp.clip(x * self.alpha + self.beta, 0.0, 1.0)

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.hard_sigmoid(xp, x, self.alpha, self.beta)


class HardSwish(Formula):
    """x · HardSigmoid(x) with alpha = 1/6 and beta = 1/2."""

    layout_role = ELEMENTWISE

    fast_kernel = (kernels.hard_swish, 1)
    supports_exact = True

    def formula(self, xp: Any, x: Array) -> Array:
        return x * xp.clip(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.hard_swish(xp, x)


class Gelu(Formula):
    """approximate="none": x/2·(1 + erf(x/√2)), evaluated in float64 as x/2·erfc(-x/√2), which
    keeps its relative accuracy for very negative x where 1 + erf cancels (narrower floats in
    fast mode: `backends.activations.gelu`, x/2·(1 + erf(x/√2)) with the fast erf, as
    onnxruntime evaluates it); "tanh": the tanh approximation x/2·(1 + tanh(u)),
    u = √(2/π)·(x + 0.044715·x³), as x / (1 + exp(-2u)), which is the same function without
    that cancellation (fast mode: `backends.activations.gelu_tanh`, x/2·(1 + tanh(u)) as
    onnxruntime evaluates it)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        approximate = node.attr("approximate", "none")
        if approximate not in ("none", "tanh"):
            raise node.invalid(f"Gelu needs approximate 'none' or 'tanh', got {approximate!r}")
        self.tanh = approximate == "tanh"
        self.fast_kernel = (kernels.gelu_tanh, 2) if self.tanh else (kernels.gelu, 2)

    def formula(self, xp: Any, x: Array) -> Array:
        if self.tanh:
            inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
            return x / (1.0 + xp.exp(-2.0 * inner))
        wide = x.astype(xp.float64)
        return 0.5 * wide * erfc(xp, -wide * math.sqrt(0.5))

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return (exact_activations.gelu_tanh if self.tanh else exact_activations.gelu)(xp, x)


class Shrink(Formula):
    """x + bias below -lambd, x - bias above lambd, else 0. Integer inputs compute in float64
    and truncate toward zero, as a C cast of the float result would."""

    types = NUMERIC
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.lambd = float(node.attr("lambd", 0.5))
        self.bias = float(node.attr("bias", 0.0))

    def formula(self, xp: Any, x: Array) -> Array:
        if x.dtype.kind in "iu":
            x = x.astype(xp.float64)
        shrunk = xp.where(x > self.lambd, x - self.bias, 0.0)
        return xp.where(x < -self.lambd, x + self.bias, shrunk)

    def exact_formula(self, xp: Any, x: Array) -> Array:
        return exact_activations.shrink(xp, x, self.lambd, self.bias)


class PRelu(Operator):
    """slope·x for x < 0, else x; the slope broadcasts unidirectionally to x (opset 7 on).

    Opsets 1 and 6 had Caffe2's rule, which exported models rely on: a 1-D slope as long as x's
    axis 1 holds one slope per channel. Other slopes follow the later rule there too.

    Exact: a compare, one correctly rounded product and a selection, through ctx.xp's
    functions (float16 and bfloat16 products are exact in the float32 their loops use)."""

    in_place_input = 0
    supports_exact = True
    types: ClassVar[frozenset[int]] = NUMERIC

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, self.types, 0, 1)
        check_same_type(ctx, (0, 1))
        if self._per_channel_shape(ctx.shape(0), ctx.shape(1)) is None:
            unidirectional(ctx, 1, ctx.shape(0))
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: list[Array | None], outputs: list[Array]) -> None:
        xp = ctx.xp
        x, slope = inputs
        per_channel = self._per_channel_shape(x.shape, slope.shape)
        if per_channel is not None:
            slope = slope.reshape(per_channel)
        with quiet():
            xp.copyto(outputs[0], xp.where(xp.less(x, 0), xp.multiply(x, slope), x))

    def _per_channel_shape(
        self, x: tuple[int, ...], slope: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """The slope's shape aligned to axis 1, where the legacy channel rule applies."""
        if self.node.opset >= 7 or len(slope) != 1 or len(x) < 2 or slope[0] != x[1]:
            return None
        return (slope[0],) + (1,) * (len(x) - 2)


class Clip(Operator):
    """min(max(x, low), high): a low above high gives high everywhere, as the spec says.

    Before opset 11 the bounds are the attributes `min` and `max`; from 11 they are optional
    scalar inputs. A missing bound does not clip (the spec's numeric_limits defaults).
    Exact: a max and a min, selections."""

    layout_role = ELEMENTWISE

    in_place_input = 0
    supports_exact = True
    types: ClassVar[frozenset[int]] = NUMERIC

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.attribute_bounds = node.opset < 11
        if self.attribute_bounds:
            self.low = node.attr("min", None)
            self.high = node.attr("max", None)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        if self.attribute_bounds:
            self.check_types(ctx, FLOATS, 0)
        else:
            self.check_types(ctx, self.types)
            check_same_type(ctx, (0, 1, 2))
            for index in (1, 2):
                if ctx.has(index) and element_count(ctx.shape(index)) != 1:
                    raise self.node.bad_input(
                        f"Clip needs a scalar bound, got input {index} of shape {ctx.shape(index)}",
                        self.node.inputs[index],
                    )
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: list[Array | None], outputs: list[Array]) -> None:
        xp, x, out = ctx.xp, inputs[0], outputs[0]
        if self.attribute_bounds:
            low, high = self.low, self.high
        else:
            bounds = [*inputs[1:3], None, None][:2]
            low, high = (None if bound is None else bound.reshape(()) for bound in bounds)
        if low is None and high is None:
            xp.copyto(out, x)
            return
        # One clip with both bounds (a missing one is the type's extreme): NumPy's clip with
        # two scalar bounds is one vectorised pass, maximum/minimum against a scalar a slow loop.
        extreme = xp.finfo(x.dtype) if x.dtype.kind == "f" else xp.iinfo(x.dtype)
        low = (
            x.dtype.type(-math.inf if x.dtype.kind == "f" else extreme.min) if low is None else low
        )
        high = (
            x.dtype.type(math.inf if x.dtype.kind == "f" else extreme.max) if high is None else high
        )
        with quiet():
            xp.clip(x, low, high, out=out)


DEFS: tuple[OpDef, ...] = (
    OpDef("Relu", 1, Relu),
    OpDef("LeakyRelu", 1, LeakyRelu),
    OpDef("PRelu", 1, PRelu),
    OpDef("Sigmoid", 1, Sigmoid),
    OpDef("HardSigmoid", 1, HardSigmoid),
    OpDef("HardSwish", 14, HardSwish),
    OpDef("Tanh", 1, Tanh),
    OpDef("Elu", 1, Elu),
    OpDef("Selu", 1, Selu),
    OpDef("Celu", 12, Celu),
    OpDef("Softplus", 1, Softplus),
    OpDef("Softsign", 1, Softsign),
    OpDef("Gelu", 20, Gelu),
    OpDef("Mish", 18, Mish),
    OpDef("ThresholdedRelu", 10, ThresholdedRelu),
    OpDef("Clip", 1, Clip),
    OpDef("Shrink", 9, Shrink),
)
