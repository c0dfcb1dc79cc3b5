"""Exact mode's matrix product as a function: for the operators whose exact recipes contain
matrix products (recurrent layers, attention, Einsum, DFT, AffineGrid, the linear models), so
that every one goes through the backend's exact_matmul_arrays (docs/exact-mode.md: MatMul's
definition). A recipe working in float64 from float32, float16 or bfloat16 inputs takes
`float32_product` (its operands rounded to float32, each element the exact dot product rounded
once into float32 and widened: order-free, so one float64 BLAS product and the decision test);
from float64 inputs `exact_product` (the ordered float64 sum, MatMul's float64 definition);
`working_product` picks between them. `float64_constant_product` multiplies by a float64
constant (DFT's twiddles, AffineGrid's base points) exactly, by splitting it into float32
parts."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onemodel.backends.exact_gemm import ExactOperand, float32_rows, float32_values
from onemodel.backends.ieee_float32 import widen

Array = Any

# A float64 constant splits exactly into this many float32 parts (24 + 24 + 5 bits).
_PARTS = 3
# ... where its magnitude is 0 or at least this: its last bit is then a float32 value.
_SMALLEST_SPLIT = 2.0**-97


def working_product(kernels: Any, dtype: Any) -> Callable[[Array, Array], Array]:
    """The exact product of a recipe working in float64 from inputs of type `dtype`:
    `exact_product` for float64, `float32_product` for the narrower types."""
    product = exact_product if dtype == np.float64 else float32_product
    return functools.partial(product, kernels)


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


def constant_product(kernels: Any, a: Array, constant: np.ndarray, dtype: Any) -> Array:
    """a @ constant, `constant` a float64 host matrix (K × N) and `a` the values of an input of
    type `dtype`, as float64: for float32, float16 and bfloat16 inputs each element the exact
    Σ_k a_k·c_k (a rounded to float32) rounded once into float32 and widened, for float64
    inputs the ordered float64 sum (`exact_product`).

    The exact sum is one exact dot product of length 3K of float32 values: c = c₁ + c₂ + c₃
    exactly (`float32_parts`) and a·c = a·c₁ + a·c₂ + a·c₃, so [a, a, a]·[c₁; c₂; c₃]. The two
    later copies of `a` have its non-finite entries set to 0, so an inf or NaN of `a` meets
    only c₁, which is zero exactly where c is: the IEEE rules of the product sum stay c's.
    A later part that is zero everywhere (c holds float32 values) is left out."""
    xp = kernels.xp
    if dtype == np.float64:
        return exact_product(kernels, a, xp.asarray(constant))
    left = float32_values(xp, a)
    parts = float32_parts(constant).reshape(_PARTS, *constant.shape)
    parts = [parts[0]] + [p for p in parts[1:] if p.any()]  # a zero part adds nothing
    with np.errstate(invalid="ignore"):
        finite = xp.where(xp.isfinite(left), left, 0.0)
    tiled = xp.concatenate([left] + [finite] * (len(parts) - 1), axis=-1)
    out = xp.empty((*left.shape[:-1], constant.shape[-1]), dtype=xp.float32)
    kernels.exact_matmul_arrays(tiled, xp.asarray(np.concatenate(parts)), out)
    return widen(xp, out)


def float32_parts(constant: np.ndarray) -> np.ndarray:
    """A finite float64 matrix (K × N) whose entries are 0 or of magnitude in [2^-97, 2^127]
    as three float32 values per entry, c = c₁ + c₂ + c₃ exactly, stacked along K (3K × N, in
    float64): c₁ = RN32(c), c₂ = RN32(c − c₁), c₃ = c − c₁ − c₂ (docs/exact-mode.md: c − c₁
    has at most 29 significant bits, c₃ at most 5, all above c's last bit 2^-149 or more)."""
    size = np.abs(constant)
    if not bool(np.all((size == 0) | ((size >= _SMALLEST_SPLIT) & (size <= 2.0**127)))):
        raise ValueError("a constant of the exact product lies outside the float32 split's range")
    first = constant.astype(np.float32).astype(np.float64)
    rest = constant - first
    second = rest.astype(np.float32).astype(np.float64)
    return np.concatenate([first, second, rest - second], axis=0)


def _shape(x: Array | ExactOperand) -> tuple[int, ...]:
    return x.finite.shape if isinstance(x, ExactOperand) else x.shape


def exact_einsum(kernels: Any, terms: Sequence[str], output: str, inputs: Sequence[Array]) -> Array:
    """Exact mode's Einsum of float inputs, as a float64 array in `output`'s letter order.

    `terms` and `output` are letters only (the caller spells the ellipsis out in letters of its
    own). On float64 copies of the inputs: a letter repeated in one term takes the diagonal; a
    letter no other term and not the output uses is summed out at once (the product with a
    column of ones); then the operands are folded left to right, each pair by one matrix
    product (its common letters needed later as the batch, the others contracted). Every
    product is `working_product`'s for the inputs' type, so for float32, float16 and bfloat16
    each sum is an exact dot product rounded once into float32. Letters of extent 1 broadcast."""
    xp = kernels.xp
    product = working_product(kernels, inputs[0].dtype)
    operands = [_diagonals(xp, term, widen(xp, x)) for term, x in zip(terms, inputs, strict=True)]
    extents: dict[str, int] = {}
    for term, value in operands:
        for letter, extent in zip(term, value.shape, strict=True):
            extents[letter] = max(extents.get(letter, 1), extent)
    term, value = operands[0]
    for index in range(1, len(operands)):
        later = set(output).union(*(t for t, _ in operands[index + 1 :]))
        other, other_value = operands[index]
        term, value = _sum_out(xp, product, term, value, later | set(other))
        other, other_value = _sum_out(xp, product, other, other_value, later | set(term))
        term, value = _pair(xp, product, term, value, other, other_value, later, extents)
    term, value = _sum_out(xp, product, term, value, set(output))
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


def _sum_out(xp: Any, product: Any, term: str, value: Array, keep: set[str]) -> tuple[str, Array]:
    """The letters not in `keep` summed out: the kept axes (flattened) times the others
    (flattened in row-major order) by `product` with a column of ones."""
    gone = [i for i, c in enumerate(term) if c not in keep]
    if not gone:
        return term, value
    kept = [i for i, c in enumerate(term) if c in keep]
    moved = xp.transpose(value, (*kept, *gone))
    shape = moved.shape[: len(kept)]
    rows = moved.reshape(math.prod(shape), math.prod(moved.shape[len(kept) :]))
    total = product(rows, xp.ones((rows.shape[1], 1), dtype=xp.float64))
    return "".join(term[i] for i in kept), total.reshape(shape)


def _pair(
    xp: Any,
    product: Any,
    a_term: str,
    a: Array,
    b_term: str,
    b: Array,
    later: set[str],
    extents: dict[str, int],
) -> tuple[str, Array]:
    """a ⊗ b contracted over their common letters that nothing later needs, by one batched
    matrix product: (batch, a-only, common) · (batch, common, b-only)."""
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
    letters = batch + a_only + b_only
    return "".join(letters), product(left, right).reshape(tuple(extents[c] for c in letters))
