"""The kernel calls every eager operation is built from: allocate the result, call the seam.

Nothing here records; forward passes and backward formulas share these. Each call asks the
thread's kernel choice for the tensors' memory, so the same code runs on NumPy and CuPy, and
in exact mode matmuls and sums take the canonical order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onemodel.backends import BinaryOp, Kernels, UnaryOp
from onemodel.eager.context import KernelChoice, kernel_choice
from onemodel.tensors import DType, Tensor, TensorError, TensorShapeError, shapes

Scalar = int | float


def choice(like: Tensor) -> KernelChoice:
    return kernel_choice(like.memory)


def kernels(like: Tensor) -> Kernels:
    return kernel_choice(like.memory).kernels


def inexact(what: str, like: Tensor) -> None:
    """Refuse, in exact mode, an operation that calls the array library's transcendentals."""
    if choice(like).exact:
        raise TensorError(
            f"{what} has no exact-mode definition: it calls the array library's exp, log or "
            "tanh, whose rounding differs between libraries and machines"
        )


def empty(shape: Sequence[int], like: Tensor, dtype: DType | None = None) -> Tensor:
    """A new contiguous tensor in `like`'s memory (of its type unless told)."""
    return Tensor.empty(shape, like.dtype if dtype is None else dtype, memory=like.memory)


def constant(value: Scalar, like: Tensor) -> Tensor:
    """A rank-0 tensor of `like`'s type and memory, to be broadcast against it."""
    return Tensor.from_array(np.asarray(value, dtype=like.dtype.numpy), memory=like.memory)


def as_operands(a: Tensor | Scalar, b: Tensor | Scalar) -> tuple[Tensor, Tensor]:
    """Two tensors of one floating type and memory; a Python number takes the other's."""
    if not isinstance(a, Tensor):
        if not isinstance(b, Tensor):
            raise TensorError("an element-wise operation needs at least one tensor operand")
        a = constant(a, b)
    elif not isinstance(b, Tensor):
        b = constant(b, a)
    if a.dtype is not b.dtype or a.memory is not b.memory:
        raise TensorError(
            f"operands must share type and memory: {a.dtype.name} in {a.memory.name} and "
            f"{b.dtype.name} in {b.memory.name}"
        )
    return a, b


def binary(op: BinaryOp, a: Tensor, b: Tensor) -> Tensor:
    """a op b with NumPy broadcasting, the operands expanded to stride 0 first (§9)."""
    shape = shapes.broadcast_shapes(a.shape, b.shape)
    out = empty(shape, a)
    kernels(a).binary(op, a.broadcast_to(shape), b.broadcast_to(shape), out)
    return out


def unary(op: UnaryOp, x: Tensor) -> Tensor:
    out = empty(x.shape, x)
    kernels(x).unary(op, x, out)
    return out


def select_greater(a: Tensor, b: Tensor, if_greater: Tensor, otherwise: Tensor) -> Tensor:
    """if_greater where a > b, else otherwise; all four broadcast together."""
    shape = shapes.broadcast_shapes(a.shape, b.shape, if_greater.shape, otherwise.shape)
    out = empty(shape, a)
    operands = (t.broadcast_to(shape) for t in (a, b, if_greater, otherwise))
    kernels(a).select_greater(*operands, out)
    return out


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """(…, M, K) @ (…, K, N) with the batch dimensions broadcast to stride 0."""
    if a.rank < 2 or b.rank < 2 or a.shape[-1] != b.shape[-2]:
        raise TensorShapeError(f"matmul needs (…, M, K) @ (…, K, N), not {a.shape} @ {b.shape}")
    batch = shapes.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = a.broadcast_to((*batch, *a.shape[-2:]))
    b = b.broadcast_to((*batch, *b.shape[-2:]))
    out = empty((*batch, a.shape[-2], b.shape[-1]), a)
    chosen = choice(a)
    if chosen.exact:
        chosen.kernels.exact_matmul_arrays(a.data(), b.data(), out.mutable_data())
    else:
        chosen.kernels.matmul(a, b, out)
    return out


def reduce_sum(x: Tensor, shape: Sequence[int]) -> Tensor:
    """Σ of x down to `shape` (x's rank, extent 1 where summed); canonical order if exact."""
    out = empty(shape, x)
    chosen = choice(x)
    if chosen.exact:
        chosen.kernels.exact_reduce_sum(x, out)
    else:
        chosen.kernels.reduce_sum(x, out)
    return out


def reduce_max(x: Tensor, shape: Sequence[int]) -> Tensor:
    out = empty(shape, x)
    kernels(x).reduce_max(x, out)
    return out


def sum_to(grad: Tensor, shape: Sequence[int]) -> Tensor:
    """The gradient of a broadcast: `grad` summed over the dimensions broadcasting added."""
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    summed = reduce_sum(grad, (1,) * (grad.rank - len(shape)) + shape)
    return summed.reshape(shape)


def keep_axis(shape: Sequence[int], axis: int) -> tuple[int, ...]:
    """`shape` with extent 1 at `axis`: the shape of a reduction along it that keeps dims."""
    return tuple(1 if i == axis else extent for i, extent in enumerate(shape))
