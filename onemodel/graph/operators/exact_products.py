"""Exact mode's matrix product as a function: for the operators whose exact recipes contain
matrix products (recurrent layers, attention, Einsum), so that every one goes through the
backend's exact_matmul_arrays (docs/exact-mode.md: MatMul's definition): into float64
(`exact_product`), or rounded once into float32 and widened (`float32_product`, the recurrent
layers' products, which are then order-free and run at BLAS speed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from onemodel.backends.exact_arrays import ordered_sum
from onemodel.backends.exact_gemm import ExactOperand, float32_rows, float32_values
from onemodel.backends.ieee_float32 import widen

Array = Any


def exact_product(kernels: Any, a: Array, b: Array) -> Array:
    """a @ b (batch axes broadcast) by kernels.exact_matmul_arrays, as a new float64 array."""
    xp = kernels.xp
    batch = xp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = xp.empty((*batch, a.shape[-2], b.shape[-1]), dtype=xp.float64)
    kernels.exact_matmul_arrays(a, b, out)
    return out


def float32_product(kernels: Any, a: Array, b: Array | ExactOperand) -> Array:
    """a @ b with both operands rounded to nearest float32 (exact for float32, float16 and
    bfloat16 values), each element the exact dot product rounded once into float32 (MatMul's
    definition: order-free, so one float64 BLAS product and the decision test), widened to
    float64. `b` may be `float32_operand`'s prepared form of a constant right operand; then
    finite 2-D rows take `float32_rows`' short path (the same value in fewer array calls)."""
    xp = kernels.xp
    left = float32_values(xp, a)
    if isinstance(b, ExactOperand):
        rows = float32_rows(xp, left, b)
        if rows is not None:
            return rows
    right = b if isinstance(b, ExactOperand) else float32_values(xp, b)
    batch = xp.broadcast_shapes(left.shape[:-2], _shape(right)[:-2])
    out = xp.empty((*batch, left.shape[-2], _shape(right)[-1]), dtype=xp.float32)
    kernels.exact_matmul_arrays(left, right, out)
    return widen(xp, out)


def float32_operand(kernels: Any, b: Array) -> ExactOperand:
    """A right operand of `float32_product` (its K axis −2) rounded and prepared once."""
    return kernels.exact_matmul_operand(float32_values(kernels.xp, b), -2)


def _shape(x: Array | ExactOperand) -> tuple[int, ...]:
    return x.finite.shape if isinstance(x, ExactOperand) else x.shape


def exact_einsum(kernels: Any, terms: Sequence[str], output: str, inputs: Sequence[Array]) -> Array:
    """Exact mode's Einsum of float inputs, as a float64 array in `output`'s letter order.

    `terms` and `output` are letters only (the caller spells the ellipsis out in letters of its
    own). On float64 copies of the inputs: a letter repeated in one term takes the diagonal; a
    letter no other term and not the output uses is summed out at once (the ordered float64
    sum); then the operands are folded left to right, each pair by one exact matrix product
    (its common letters needed later as the batch, the others contracted), into float64.
    Letters of extent 1 broadcast."""
    xp = kernels.xp
    operands = [_diagonals(xp, term, widen(xp, x)) for term, x in zip(terms, inputs, strict=True)]
    extents: dict[str, int] = {}
    for term, value in operands:
        for letter, extent in zip(term, value.shape, strict=True):
            extents[letter] = max(extents.get(letter, 1), extent)
    term, value = operands[0]
    for index in range(1, len(operands)):
        later = set(output).union(*(t for t, _ in operands[index + 1 :]))
        other, other_value = operands[index]
        term, value = _sum_out(xp, term, value, later | set(other))
        other, other_value = _sum_out(xp, other, other_value, later | set(term))
        term, value = _pair(kernels, term, value, other, other_value, later, extents)
    term, value = _sum_out(xp, term, value, set(output))
    value = xp.broadcast_to(value, tuple(extents[c] for c in term))
    return xp.transpose(value, tuple(term.index(c) for c in output))


def _diagonals(xp: Any, term: str, value: Array) -> tuple[str, Array]:
    """Every letter repeated within the term replaced by its diagonal (appended last)."""
    while len(set(term)) < len(term):
        letter = next(c for c in term if term.count(c) > 1)
        first = term.index(letter)
        second = term.index(letter, first + 1)
        value = xp.diagonal(value, axis1=first, axis2=second)
        term = term[:first] + term[first + 1 : second] + term[second + 1 :] + letter
    return term, value


def _sum_out(xp: Any, term: str, value: Array, keep: set[str]) -> tuple[str, Array]:
    """The letters not in `keep` summed out in float64 (row-major order over them)."""
    axes = tuple(i for i, c in enumerate(term) if c not in keep)
    if not axes:
        return term, value
    return "".join(c for c in term if c in keep), ordered_sum(xp, value, axes)


def _pair(
    kernels: Any,
    a_term: str,
    a: Array,
    b_term: str,
    b: Array,
    later: set[str],
    extents: dict[str, int],
) -> tuple[str, Array]:
    """a ⊗ b contracted over their common letters that nothing later needs, by one batched
    exact matrix product: (batch, a-only, common) · (batch, common, b-only)."""
    xp = kernels.xp
    batch = [c for c in a_term if c in b_term and c in later]
    common = [c for c in a_term if c in b_term and c not in later]
    a_only = [c for c in a_term if c not in b_term]
    b_only = [c for c in b_term if c not in a_term]

    def arranged(term: str, value: Array, order: list[str], shape: list[list[str]]) -> Array:
        value = xp.transpose(value, tuple(term.index(c) for c in order))
        value = xp.broadcast_to(value, tuple(extents[c] for c in order))
        return value.reshape(tuple(math.prod(extents[c] for c in group) for group in shape))

    left = arranged(a_term, a, batch + a_only + common, [batch, a_only, common])
    right = arranged(b_term, b, batch + common + b_only, [batch, common, b_only])
    product = exact_product(kernels, left, right)
    letters = batch + a_only + b_only
    return "".join(letters), product.reshape(tuple(extents[c] for c in letters))
