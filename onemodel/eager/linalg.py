"""Matrix product and its gradient: (…, M, K) @ (…, K, N), batch dimensions broadcast."""

from __future__ import annotations

from onemodel.eager import calls
from onemodel.eager.record import BackwardRecord, OpKind, attach, recording
from onemodel.tensors import Tensor


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Through the seam's matmul, or in exact mode its canonical order (float64, k ascending)."""
    result = calls.matmul(a, b)
    if recording(a, b):
        # a's gradient reads b (slot 1), b's reads a (slot 0).
        saved = (a if b.requires_grad else None, b if a.requires_grad else None)
        attach(result, OpKind.MATMUL, (a, b), saved=saved)
    return result


def _transposed(t: Tensor) -> Tensor:
    """A view with the last two dimensions swapped."""
    order = [*range(t.rank - 2), t.rank - 1, t.rank - 2]
    return t.permute(order)


def _matmul_backward(record: BackwardRecord, g: Tensor) -> tuple[Tensor | None, ...]:
    """dA = G·Bᵀ and dB = Aᵀ·G, each summed over the batch dimensions its operand broadcast."""
    grad_a = grad_b = None
    if record.needs_grad(0):
        grad_a = calls.sum_to(calls.matmul(g, _transposed(record.saved(1))), record.input_shape(0))
    if record.needs_grad(1):
        grad_b = calls.sum_to(calls.matmul(_transposed(record.saved(0)), g), record.input_shape(1))
    return grad_a, grad_b


BACKWARD = {OpKind.MATMUL: _matmul_backward}
