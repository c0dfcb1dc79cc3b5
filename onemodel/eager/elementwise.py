"""Element-wise operations and their gradients.

Binary operations broadcast like NumPy; the gradient of a broadcast operand is summed back to
its shape. `maximum` and `minimum` send the gradient of a tie to the first operand. Where a
function's derivative is undefined (relu and abs at 0) the gradient is 0.
"""

from __future__ import annotations

from collections.abc import Callable

from onemodel.backends import BinaryOp, UnaryOp
from onemodel.eager import calls
from onemodel.eager.calls import Scalar
from onemodel.eager.record import BackwardRecord, OpKind, attach, recording
from onemodel.tensors import Tensor

Operand = Tensor | Scalar
Grads = tuple[Tensor | None, ...]


# -- binary ----------------------------------------------------------------------------------


def add(a: Operand, b: Operand) -> Tensor:
    return _binary(OpKind.ADD, a, b)


def sub(a: Operand, b: Operand) -> Tensor:
    return _binary(OpKind.SUB, a, b)


def mul(a: Operand, b: Operand) -> Tensor:
    return _binary(OpKind.MUL, a, b)


def div(a: Operand, b: Operand) -> Tensor:
    return _binary(OpKind.DIV, a, b)


def maximum(a: Operand, b: Operand) -> Tensor:
    return _binary(OpKind.MAXIMUM, a, b)


def minimum(a: Operand, b: Operand) -> Tensor:
    return _binary(OpKind.MINIMUM, a, b)


_BINARY_KERNEL = {
    OpKind.ADD: BinaryOp.ADD,
    OpKind.SUB: BinaryOp.SUB,
    OpKind.MUL: BinaryOp.MUL,
    OpKind.DIV: BinaryOp.DIV,
    OpKind.MAXIMUM: BinaryOp.MAX,
    OpKind.MINIMUM: BinaryOp.MIN,
}


def _binary(kind: OpKind, a: Operand, b: Operand) -> Tensor:
    a, b = calls.as_operands(a, b)
    result = calls.binary(_BINARY_KERNEL[kind], a, b)
    if recording(a, b):
        # Slot 0 holds a, slot 1 holds b; a product's slots only where the other one's
        # gradient reads them.
        saved: tuple[Tensor | None, ...] = (a, b)
        if kind is OpKind.MUL:
            saved = (a if b.requires_grad else None, b if a.requires_grad else None)
        elif kind in (OpKind.ADD, OpKind.SUB):
            saved = ()
        attach(result, kind, (a, b), saved=saved)
    return result


def _to_inputs(record: BackwardRecord, *grads: Callable[[], Tensor]) -> Grads:
    """Per input, its gradient (computed only if it needs one), summed to its shape."""
    return tuple(
        calls.sum_to(grad(), record.input_shape(i)) if record.needs_grad(i) else None
        for i, grad in enumerate(grads)
    )


def _add_backward(record: BackwardRecord, g: Tensor) -> Grads:
    return _to_inputs(record, lambda: g, lambda: g)


def _sub_backward(record: BackwardRecord, g: Tensor) -> Grads:
    return _to_inputs(record, lambda: g, lambda: calls.unary(UnaryOp.NEG, g))


def _mul_backward(record: BackwardRecord, g: Tensor) -> Grads:
    return _to_inputs(
        record,
        lambda: calls.binary(BinaryOp.MUL, g, record.saved(1)),
        lambda: calls.binary(BinaryOp.MUL, g, record.saved(0)),
    )


def _div_backward(record: BackwardRecord, g: Tensor) -> Grads:
    """d(a/b) = da/b − (a/b)·db/b."""
    a, b = record.saved(0), record.saved(1)
    over_b = calls.binary(BinaryOp.DIV, g, b)

    def grad_b() -> Tensor:
        quotient = calls.binary(BinaryOp.DIV, a, b)
        return calls.unary(UnaryOp.NEG, calls.binary(BinaryOp.MUL, over_b, quotient))

    return _to_inputs(record, lambda: over_b, grad_b)


def _extremum_backward(maximum: bool) -> Callable[[BackwardRecord, Tensor], Grads]:
    """maximum: a takes the gradient unless b > a; minimum: unless a > b (ties go to a)."""

    def backward(record: BackwardRecord, g: Tensor) -> Grads:
        a, b = record.saved(0), record.saved(1)
        high, low = (b, a) if maximum else (a, b)
        zero = calls.constant(0, g)
        return _to_inputs(
            record,
            lambda: calls.select_greater(high, low, zero, g),
            lambda: calls.select_greater(high, low, g, zero),
        )

    return backward


# -- unary -----------------------------------------------------------------------------------


def neg(x: Tensor) -> Tensor:
    return _unary(OpKind.NEG, x)


def abs(x: Tensor) -> Tensor:
    return _unary(OpKind.ABS, x)


def relu(x: Tensor) -> Tensor:
    return _unary(OpKind.RELU, x)


def sqrt(x: Tensor) -> Tensor:
    return _unary(OpKind.SQRT, x)


def exp(x: Tensor) -> Tensor:
    return _unary(OpKind.EXP, x)


def log(x: Tensor) -> Tensor:
    return _unary(OpKind.LOG, x)


def tanh(x: Tensor) -> Tensor:
    return _unary(OpKind.TANH, x)


def sigmoid(x: Tensor) -> Tensor:
    return _unary(OpKind.SIGMOID, x)


# Per operation: its kernel, and whether the gradient reads the input or the output.
_UNARY = {
    OpKind.NEG: (UnaryOp.NEG, None),
    OpKind.ABS: (UnaryOp.ABS, "input"),
    OpKind.RELU: (UnaryOp.RELU, "input"),
    OpKind.SQRT: (UnaryOp.SQRT, "output"),
    OpKind.EXP: (UnaryOp.EXP, "output"),
    OpKind.LOG: (UnaryOp.LOG, "input"),
    OpKind.TANH: (UnaryOp.TANH, "output"),
    OpKind.SIGMOID: (UnaryOp.SIGMOID, "output"),
}
_TRANSCENDENTAL = {OpKind.EXP, OpKind.LOG, OpKind.TANH, OpKind.SIGMOID}


def _unary(kind: OpKind, x: Tensor) -> Tensor:
    op, reads = _UNARY[kind]
    if kind in _TRANSCENDENTAL:
        calls.inexact(kind.value, x)
    result = calls.unary(op, x)
    if recording(x):
        saved = {None: (), "input": (x,), "output": (result,)}[reads]
        attach(result, kind, (x,), saved=saved)
    return result


def _unary_backward(
    local: Callable[[BackwardRecord, Tensor], Tensor],
) -> Callable[[BackwardRecord, Tensor], Grads]:
    """The backward of a unary operation from its local formula (gradient of the input)."""

    def backward(record: BackwardRecord, g: Tensor) -> Grads:
        return (local(record, g),)

    return backward


def _one_minus(t: Tensor) -> Tensor:
    return calls.binary(BinaryOp.SUB, calls.constant(1, t), t)


def _mul(a: Tensor, b: Tensor) -> Tensor:
    return calls.binary(BinaryOp.MUL, a, b)


def _abs_grad(record: BackwardRecord, g: Tensor) -> Tensor:
    x, zero = record.saved(0), calls.constant(0, g)
    negative = calls.select_greater(zero, x, calls.unary(UnaryOp.NEG, g), zero)
    return calls.select_greater(x, zero, g, negative)


def _relu_grad(record: BackwardRecord, g: Tensor) -> Tensor:
    zero = calls.constant(0, g)
    return calls.select_greater(record.saved(0), zero, g, zero)


def _sqrt_grad(record: BackwardRecord, g: Tensor) -> Tensor:
    y = record.saved(0)
    return calls.binary(BinaryOp.DIV, g, calls.binary(BinaryOp.ADD, y, y))


def _sigmoid_grad(record: BackwardRecord, g: Tensor) -> Tensor:
    y = record.saved(0)
    return _mul(g, _mul(y, _one_minus(y)))


BACKWARD = {
    OpKind.ADD: _add_backward,
    OpKind.SUB: _sub_backward,
    OpKind.MUL: _mul_backward,
    OpKind.DIV: _div_backward,
    OpKind.MAXIMUM: _extremum_backward(maximum=True),
    OpKind.MINIMUM: _extremum_backward(maximum=False),
    OpKind.NEG: _unary_backward(lambda record, g: calls.unary(UnaryOp.NEG, g)),
    OpKind.ABS: _unary_backward(_abs_grad),
    OpKind.RELU: _unary_backward(_relu_grad),
    OpKind.SQRT: _unary_backward(_sqrt_grad),
    OpKind.EXP: _unary_backward(lambda record, g: _mul(g, record.saved(0))),
    OpKind.LOG: _unary_backward(lambda record, g: calls.binary(BinaryOp.DIV, g, record.saved(0))),
    OpKind.TANH: _unary_backward(
        lambda record, g: _mul(g, _one_minus(_mul(record.saved(0), record.saved(0))))
    ),
    OpKind.SIGMOID: _unary_backward(_sigmoid_grad),
}
