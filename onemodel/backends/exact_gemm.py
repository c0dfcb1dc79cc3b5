"""Exact mode's matrix product: the correctly rounded value of the exact dot product.

For float32, float16 and bfloat16 operands each output element is Σ_k a_k·b_k computed exactly
and rounded once (to nearest, ties to even) into the output type. That value does not depend
on any order of additions, so it may be computed with the library's float64 BLAS and still give
the same bits on every machine:

1. `approx` = the float64 BLAS product. Every product of two such values is exact in float64,
   so whatever order or tree the BLAS adds in (with or without fused multiply-adds),
   |approx − x| ≤ γ_K·Σ|a_k·b_k| ≤ γ_K·‖a‖₂‖b‖₂, γ_K = K·u/(1 − K·u), u = 2^-53.
2. `radius` bounds that error from above, from the rows' and columns' squared norms (computed
   once per constant weight, see `prepare`), with a factor 2 to spare for its own roundings.
3. Where [approx − radius, approx + radius] lies inside one rounding cell of the output type,
   the cell's value is the answer (`_decide`). Elsewhere (a result near a rounding boundary,
   near zero, or under heavy cancellation) the dot product is summed exactly (`exact_dots`):
   the float64 products are cut into fixed-point digits whose sums are exact in any order, the
   digit sums are carried into a non-negative digit expansion and combined from the lowest digit
   up with round-to-odd additions, which gives x rounded to odd at 53 bits; one rounding to
   nearest into the ≤ 24-bit output type is then the correct rounding of x.
4. Non-finite operands follow the IEEE rules of the product sum (`_specials`): NaN if a product
   is NaN (a NaN operand, or ∞·0) or products of both infinite signs meet; else the infinity of
   the infinite products; finite products never overflow float64, so only the operands make
   infinities. An exact zero is +0.

docs/exact-mode.md proves each bound. float64 operands keep the ordered float64 sum
(`ordered_matmul`): their products are not exact in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from onemodel.backends.ieee_float32 import narrow, store, widen

Array = Any  # an array of the backend (numpy.ndarray or cupy.ndarray)

# The exact path works on (elements × K) blocks of about this many float64 values at a time
# (2 MiB: odd_sum's dozen passes over a block then stay in the cache; BERT-base's K = 3072
# products took 0.53 s with 16 MiB blocks, 0.34 s so).
_BLOCK_VALUES = 1 << 18
# The decision runs on blocks of about this many output elements: its dozen or so whole-array
# steps then read and write the cache rather than memory (4 to 10 times faster on a busy CPU).
_BLOCK_ELEMENTS = 1 << 15


@dataclass(frozen=True)
class ExactOperand:
    """One operand of the exact product, ready to multiply: `finite` its values in float64 with
    every non-finite entry set to 0, `values` the float64 values as given when some entry is not
    finite (None otherwise), `squares` the float64 sums of squares along K (axis `axis`: −1 for
    the left operand, −2 for the right one). Never written after `prepare` returns, so a plan's
    prepared weight serves concurrent runs."""

    finite: Array
    values: Array | None
    squares: Array
    axis: int

    def __getitem__(self, columns: tuple[slice, slice]) -> ExactOperand:
        """A right operand's columns `[:, start:stop]` (a gate's block of a recurrence
        matrix), prepared: its squares are per column, so they slice with it."""
        rows, kept = columns
        if self.axis != -2 or self.finite.ndim != 2 or rows != slice(None):
            raise ValueError("only a right operand's columns [:, a:b] are taken")
        values = None if self.values is None else self.values[:, kept]
        return ExactOperand(self.finite[:, kept], values, self.squares[kept], self.axis)


def prepare(xp: Any, x: Array, axis: int) -> ExactOperand:
    """`x` (a float32, float16 or bfloat16 matrix stack, or float64 holding such values) ready to
    be the operand of `matmul` whose K axis is `axis`."""
    wide = x if x.dtype == np.float64 else to_float64(xp, x)
    with np.errstate(all="ignore"):
        squares = _squares(xp, wide, axis)
        if bool(xp.all(xp.isfinite(squares))):  # a non-finite entry makes its sum non-finite
            return ExactOperand(wide, None, squares, axis)
        finite = xp.where(xp.isfinite(wide), wide, 0.0)
        return ExactOperand(finite, wide, _squares(xp, finite, axis), axis)


def _squares(xp: Any, x: Array, axis: int) -> Array:
    """Σ x² along the K axis, in any order (it only feeds an error bound): einsum makes no
    temporary of x's size."""
    batch = "abcdefghij"[: x.ndim - 2]  # explicit letters: NumPy's einsum is slower with "..."
    given = f"{batch}mk" if axis == -1 else f"{batch}kn"
    kept = f"{batch}m" if axis == -1 else f"{batch}n"
    return xp.einsum(f"{given},{given}->{kept}", x, x)


def to_float64(xp: Any, x: Array) -> Array:
    """x as float64, exactly, also where the library's conversion would flush subnormals."""
    return x.astype(np.float64) if xp is np else widen(xp, x)


def matmul(xp: Any, a: Array | ExactOperand, b: Array | ExactOperand, out: Array) -> None:
    """out[..., m, n] = Σ_k a[..., m, k]·b[..., k, n] exactly, rounded once into out's type;
    batch dims broadcast as numpy.matmul's do. `a` and `b` are arrays or `prepare`d operands;
    A float64 out takes `ordered_matmul` over the operands widened exactly (float32 products
    are then exact in float64, also on a library that flushes float32 subnormals)."""
    if out.dtype == np.float64:
        ordered_matmul(xp, _wide(xp, a), _wide(xp, b), out)
        return
    left = a if isinstance(a, ExactOperand) else prepare(xp, a, -1)
    right = b if isinstance(b, ExactOperand) else prepare(xp, b, -2)
    depth = left.finite.shape[-1]
    if depth == 0 or out.size == 0:
        out[...] = 0
        return
    with np.errstate(all="ignore"):
        approx = xp.matmul(left.finite, right.finite)
        *batch, rows, cols = approx.shape
        approx = approx.reshape(-1, cols)
        # the radius bound holds up to K = 2^24; beyond, nothing is decided (exact path)
        factor = _radius_factor(depth, out.dtype) if depth <= 1 << 24 else math.inf
        row_bounds = xp.sqrt(left.squares) * factor
        row_bounds = xp.broadcast_to(row_bounds, (*batch, rows)).reshape(-1, 1)
        col_bounds = xp.broadcast_to(xp.sqrt(right.squares), (*batch, cols)).reshape(-1, cols)
        specials = _specials(xp, left, right)
        if specials is not None:
            specials = tuple(s.reshape(-1, cols) for s in xp.broadcast_arrays(*specials))
        direct = out.flags.c_contiguous
        result = out.reshape(-1, cols) if direct else xp.empty(approx.shape, dtype=out.dtype)
        step = max(1, _BLOCK_ELEMENTS // cols)
        enclosed = out.dtype == np.float32 and factor < math.inf
        open_rows: list[Array] = []
        open_cols: list[Array] = []
        for start in range(0, approx.shape[0], step):  # blocks that stay in the cache
            part = slice(start, min(start + step, approx.shape[0]))
            batch_cols = col_bounds  # one batch, or each row's own batch's column bounds
            if col_bounds.shape[0] > 1 and rows == 1:  # a row per batch (depthwise): a view
                batch_cols = col_bounds[part]
            elif col_bounds.shape[0] > 1:
                batch_cols = col_bounds[xp.arange(part.start, part.stop) // rows]
            radius = row_bounds[part] * batch_cols
            if enclosed:
                ends = xp.empty((2, *radius.shape), dtype=xp.float64)
                xp.subtract(approx[part], radius, out=ends[0])
                xp.add(approx[part], radius, out=ends[1])
                value, undecided = enclose_float32(xp, ends, radius)
            else:
                value, decided = _decide(xp, approx[part], radius, out.dtype)
                value = _narrowed(xp, value, out.dtype)  # exactly representable there
                undecided = ~decided
            if specials is not None:  # inf and NaN results, as the finite part cannot decide
                where = specials[0][part]
                value[where] = specials[1][part][where].astype(out.dtype)
                if undecided is not None:
                    undecided &= ~where
            if undecided is not None and bool(xp.any(undecided)):
                rows_open, cols_open = xp.nonzero(undecided)
                open_rows.append(rows_open + start)
                open_cols.append(cols_open)
            result[part] = value
        if open_rows:  # all blocks' undecided elements summed exactly at once
            flat, columns = xp.concatenate(open_rows), xp.concatenate(open_cols)
            at = xp.unravel_index(flat // rows, tuple(batch)) if batch else ()
            exact = exact_dots(xp, left.finite, right.finite, (*at, flat % rows, columns))
            result[flat, columns] = _narrowed(xp, exact, out.dtype)
        if not direct:
            out[...] = result.reshape(out.shape)


def float32_values(xp: Any, x: Array) -> Array:
    """x rounded to nearest float32 (exact for the narrower float types), held in float64."""
    if x.dtype == np.float64:
        x = x.astype(np.float32) if xp is np else narrow(xp, x)
    return to_float64(xp, x)


def float32_rows(xp: Any, a: Array, right: ExactOperand) -> Array | None:
    """`matmul` into float32 of a few rows `a` (2-D, float32 values in float64) and a prepared
    finite 2-D right operand, widened to float64: a `RowProduct` used once. None where `a` is
    not finite: the caller then takes `matmul`."""
    if right.values is not None or a.ndim != 2 or right.finite.ndim != 2 or a.shape[-1] > 1 << 24:
        return None
    with np.errstate(all="ignore"):
        if not bool(xp.all(xp.isfinite(a))):  # an inf or NaN in a: `matmul`'s rules
            return None
        value = RowProduct(xp, RowMatrix.of(xp, right, contiguous=False), a.shape[0])(a)
    return None if value is None else to_float64(xp, value)


@dataclass(frozen=True)
class RowMatrix:
    """A prepared finite 2-D right operand as `RowProduct` multiplies it: the matrix (made
    C-contiguous where `of` is asked to: a BLAS gemv is fastest so) and its columns' norms
    times the radius factor, c·√σ_b, with both signs [2, 1, N]. Never written after `of`
    returns."""

    matrix: Array
    signed_norms: Array

    @classmethod
    def of(cls, xp: Any, right: ExactOperand, contiguous: bool = True) -> RowMatrix:
        if right.values is not None or right.finite.ndim != 2:
            raise ValueError("RowMatrix takes a finite 2-D right operand")
        norms = xp.sqrt(right.squares) * _radius_factor(right.finite.shape[0], np.float32)
        matrix = xp.ascontiguousarray(right.finite) if contiguous else right.finite
        return cls(matrix, xp.stack([-norms, norms])[:, None, :])


class RowProduct:
    """`matmul` into float32 of a fixed number of rows (float32 values in float64) against a
    `RowMatrix`, over and over (a recurrent layer's steps), in about ten array calls, as those
    cost more than the arithmetic there: the BLAS product, the radius from the columns' norms
    and the rows' squared norm, `enclose_float32`, and the exact path for the elements it
    leaves open, into buffers allocated once. Calling it with the rows returns the float32
    product, valid until the next call, or None where elements are left open and the rows
    are not finite (then `matmul`'s rules apply: every element it decides is right as it is,
    see docs/exact-mode.md)."""

    def __init__(self, xp: Any, right: RowMatrix, rows: int) -> None:
        self.xp = xp
        self.matrix, self.signed_norms = right.matrix, right.signed_norms
        columns = right.matrix.shape[1]
        self.approx = xp.empty((rows, columns), dtype=xp.float64)
        self.norms = xp.empty((rows, 1), dtype=xp.float64)
        self.radius = xp.empty((2, rows, columns), dtype=xp.float64)
        self.bounds = xp.empty((2, rows, columns), dtype=xp.float64)
        self.tested = (
            xp.empty((2, rows, columns), dtype=xp.float32),
            xp.empty((rows, columns), dtype=xp.bool_),
        )

    def __call__(self, a: Array) -> Array | None:
        xp, norms = self.xp, self.norms
        xp.matmul(a, self.matrix, out=self.approx)
        if xp is np:  # Σ a², any order
            np.vecdot(a, a, out=norms[:, 0])
        else:
            xp.matmul(a[:, None, :], a[:, :, None], out=norms[:, :, None])
        xp.sqrt(norms, out=norms)
        xp.multiply(norms, self.signed_norms, out=self.radius)
        xp.add(self.approx, self.radius, out=self.bounds)  # approx − r, approx + r
        value, undecided = enclose_float32(xp, self.bounds, self.radius[1], self.tested)
        if undecided is not None:
            if not bool(xp.all(xp.isfinite(norms))):
                return None
            # flatnonzero: ten times cheaper than nonzero for a projection's many rows
            rows, cols = xp.divmod(xp.flatnonzero(undecided), undecided.shape[1])
            exact = exact_dots(xp, a, self.matrix, (rows, cols))
            value[rows, cols] = _narrowed(xp, exact, xp.float32)
        return value


def _narrowed(xp: Any, value: Array, dtype: Any) -> Array:
    """float64 `value` (exact, or rounded to odd at 53 bits) rounded once into `dtype`."""
    if dtype != np.float32:
        value = _odd_at_24_bits(xp, value)
    if xp is np:  # NumPy's conversions are IEEE's, subnormals included: the same bits
        return value.astype(dtype)
    target = xp.empty(value.shape, dtype=dtype)
    store(xp, target, value)
    return target


def _wide(xp: Any, x: Array | ExactOperand) -> Array:
    """The values of an operand as given, in float64."""
    if not isinstance(x, ExactOperand):
        return x if x.dtype == np.float64 else to_float64(xp, x)
    return x.finite if x.values is None else x.values


def ordered_matmul(xp: Any, a: Array, b: Array, out: Array) -> None:
    """float64 operands: Σ_k a·b in float64 from +0 in the order k = 0, 1, …, K−1 (each product
    and each addition one float64 rounding)."""
    total = xp.zeros(out.shape, dtype=xp.float64)
    with np.errstate(all="ignore"):
        for k in range(a.shape[-1]):
            total += a[..., :, k, None] * b[..., None, k, :]
    out[...] = total


# -- the decision: one rounding cell around the BLAS value ---------------------------------


def _decide(xp: Any, approx: Array, radius: Array, dtype: Any) -> tuple[Array, Array]:
    """The rounded value of `approx` in `dtype` (as float64) and where the exact value is sure
    to round to it: where approx ± radius lies inside that value's rounding cell. `radius` is
    overwritten.

    With 2^(e−1) ≤ |approx| < 2^e, q = max(e, the normals' lowest e) and p the type's precision,
    |approx| is `scaled` units of 2^(q−p) and rounds to n = rint(scaled) units. The cell of n
    reaches (n − 1/2) units down (n − 1/4 when n = 2^(p−1), where the spacing below halves) and
    (n + 1/2) units up (more where the spacing above doubles); the test uses those smallest
    extents. Beyond the largest finite value the cell is [the overflow threshold, ∞). radius 0
    means every product is zero: the value is +0. Scalings are by exact powers of two made from
    their bits (cheaper than ldexp).
    """
    info = ml_dtypes.finfo(dtype)  # NumPy's finfo does not know bfloat16
    precision, lowest = info.nmant + 1, info.minexp + 1  # frexp exponents of the normals
    largest = float(info.max)
    threshold = largest + 2.0 ** (info.maxexp - precision - 1)  # half an ulp above the largest
    rare = bool(xp.any((radius == 0) | ~(approx <= largest) | ~(approx >= -largest)))
    # Whole-array steps in place: a few buffers of the output's size, not one per step.
    scaled = xp.abs(approx)
    scale = scaled.view(xp.int64) >> 52  # the biased exponent: |approx| is normal or 0
    xp.maximum(scale, lowest + 1022, out=scale)  # e = max(biased − 1022, e_min)
    xp.subtract(precision + 2045, scale, out=scale)  # the biased exponent of 2^(p − e)
    scale <<= 52
    scale = scale.view(xp.float64)
    xp.multiply(scaled, scale, out=scaled)  # exact
    units = xp.rint(scaled)
    offset = xp.subtract(scaled, units, out=scaled)  # exact: |offset| ≤ 1/2
    reach = xp.multiply(radius, scale, out=radius)  # exact; radius = reach / scale again
    bound = xp.subtract(0.5, offset)
    decided = reach < bound
    xp.add(offset, 0.5, out=bound)
    decided &= reach < bound
    decided &= units != 0
    xp.add(offset, 0.25, out=bound)
    decided &= (units != 2.0 ** (precision - 1)) | (reach < bound)
    value = xp.divide(units, scale, out=units)  # exact: a power of two
    xp.copysign(value, approx, out=value)
    if rare:  # overflow (and approx beyond the largest finite value), all-zero rows
        radius, size = reach / scale, xp.abs(approx)
        over = xp.abs(value) > largest
        decided = xp.where(over, size - threshold > radius, decided)
        value = xp.where(over, xp.copysign(xp.inf, approx), value)
        zero = radius == 0
        value, decided = xp.where(zero, 0.0, value), decided | zero
    return value, decided


def _radius_factor(depth: int, dtype: Any) -> float:
    """c = (K + 9)·u of the radius r = √σ_a·c·√σ_b (docs/exact-mode.md, step 2); for float32
    outputs (K + 11)·u, the two units more covering the roundings of `enclose_float32`'s ends
    approx ± r."""
    return (depth + (11 if dtype == np.float32 else 9)) * 2.0**-53


def enclose_float32(
    xp: Any, ends: Array, radius: Array, buffers: tuple[Array, Array] | None = None
) -> tuple[Array, Array | None]:
    """The float32 value of the exact result where the enclosure decides it. `ends` [2, ...]
    holds approx − r and approx + r (each rounded in float64; r from `_radius_factor`'s
    float32 factor, `radius`); both are converted to float32 (one rounding to nearest each),
    and where their bits agree that is the result: r's margin keeps the rounded ends outside
    every value the exact result can take, and rounding is monotone (docs/exact-mode.md,
    step 3). That covers signed zeros (a −0 BLAS sum with r = 0, an exact +0, has the ends −0
    and +0), infinite results and subnormals; on a library whose conversion flushes
    subnormals, zeros are left open. Returns that float32 array (a view) and where elements
    are left open, or None where none is; r = 0 elements are +0. `buffers` (a float32 array
    of `ends`' shape and a bool one of `radius`') receive the conversion and the test, for a
    caller that repeats them (a recurrent step: two allocations fewer)."""
    if buffers is None:
        rounded = ends.astype(xp.float32)
        undecided = None
    else:
        rounded, undecided = buffers
        xp.copyto(rounded, ends, casting="unsafe")
    bits = rounded.view(xp.int32)
    undecided = xp.not_equal(bits[0], bits[1], out=undecided)
    if xp is not np:  # a flushing conversion: its zeros may stand for subnormals
        undecided |= rounded[0] == 0
    value = rounded[0]
    if not int(xp.count_nonzero(undecided)):
        return value, None
    zero = radius == 0  # every product ±0: the exact +0 (a −0 BLAS sum is left open)
    value[zero] = 0
    undecided &= ~zero
    return value, undecided if int(xp.count_nonzero(undecided)) else None


def _power_of_two(xp: Any, exponent: Array) -> Array:
    """2.0**exponent for integer exponents in [−1022, 1023], from the float64 bits."""
    return ((exponent + 1023).astype(xp.int64) << 52).view(xp.float64)


# -- non-finite operands -------------------------------------------------------------------


def _specials(xp: Any, left: ExactOperand, right: ExactOperand) -> tuple[Array, Array] | None:
    """Where an output's products include a non-finite one, and its IEEE value there: NaN for a
    NaN product (a NaN operand or ∞·0) or for infinite products of both signs, else the signed
    infinity. Counts of each case are float64 products of 0/1 matrices (exact); None when both
    operands are finite."""
    if left.values is None and right.values is None:
        return None
    a = left.finite if left.values is None else left.values
    b = right.finite if right.values is None else right.values

    def flags(x: Array) -> dict[str, Array]:
        return {
            "nan": xp.isnan(x).astype(xp.float64),
            "zero": (x == 0).astype(xp.float64),
            "inf": xp.isinf(x).astype(xp.float64),
            "+inf": (x == xp.inf).astype(xp.float64),
            "-inf": (x == -xp.inf).astype(xp.float64),
            "+": (x > 0).astype(xp.float64),
            "-": (x < 0).astype(xp.float64),
        }

    fa, fb = flags(a), flags(b)

    def count(pairs: tuple[tuple[str, str], ...]) -> Array:
        rows = xp.concatenate([fa[p] for p, _ in pairs], axis=-1)
        cols = xp.concatenate([fb[q] for _, q in pairs], axis=-2)
        return xp.matmul(rows, cols)

    nan = count((("inf", "zero"), ("zero", "inf")))
    nan += xp.sum(fa["nan"], axis=-1)[..., :, None] + xp.sum(fb["nan"], axis=-2)[..., None, :]
    positive = count((("+inf", "+"), ("+", "+inf"), ("-inf", "-"), ("-", "-inf")))
    negative = count((("+inf", "-"), ("-", "+inf"), ("-inf", "+"), ("+", "-inf")))
    undefined = (nan > 0) | ((positive > 0) & (negative > 0))
    results = xp.where(undefined, xp.nan, xp.where(positive > 0, xp.inf, -xp.inf))
    return undefined | (positive > 0) | (negative > 0), results


# -- the exact path ------------------------------------------------------------------------


def exact_dots(xp: Any, a: Array, b: Array, index: tuple[Array, ...]) -> Array:
    """The dot products of a's rows and b's columns at `index` (nonzero's indices into the
    product's shape), each the exact sum rounded to odd at float64's 53 bits. a and b hold
    finite float32/float16/bfloat16 values as float64."""
    *batch_index, rows, cols = index
    depth = a.shape[-1]
    on_host = xp is np and rows.shape[0] * depth <= _FSUM_PRODUCTS
    if on_host and not batch_index:  # a recurrent step's one or two
        return _fsum_odd(a[rows] * b[:, cols].T)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    b_rows = xp.swapaxes(b, -1, -2)
    a_full = a if a.shape[:-2] == batch else xp.broadcast_to(a, (*batch, *a.shape[-2:]))
    if b.shape[:-2] != batch:
        b_rows = xp.broadcast_to(b_rows, (*batch, *b_rows.shape[-2:]))
    if on_host:
        at = tuple(batch_index)
        return _fsum_odd(a_full[(*at, rows)] * b_rows[(*at, cols)])
    block = max(1, _BLOCK_VALUES // depth)
    sums = []
    for start in range(0, rows.shape[0], block):
        part = slice(start, start + block)
        at = tuple(i[part] for i in batch_index)
        sums.append(odd_sum(xp, a_full[(*at, rows[part])] * b_rows[(*at, cols[part])]))
    return xp.concatenate(sums)


# Up to this many products (open elements times K), NumPy's exact path takes `_fsum_odd`
# (about 0.04 µs a product) rather than `odd_sum` (about 45 µs for up to a few dozen dot
# products of K ≤ 768, measured on an AMD EPYC): a recurrent step leaves one or two open, a
# projection X·Wᵀ of K = 128 or 256 a few; one dot product of K = 3072 is 3 times cheaper so.
_FSUM_PRODUCTS = 1024
_TWO_53 = 2.0**53


def _fsum_odd(terms: np.ndarray) -> np.ndarray:
    """`odd_sum` of a few rows on the host, the same values: s = math.fsum (the exact sum
    rounded to nearest, Shewchuk's algorithm; a faithful rounding would do) and the sign of
    the exact remainder Σ terms − s (fsum again, so exact); an inexact s with an even last
    bit moves one ulp toward the exact sum. That is the sum rounded to odd, whichever way it
    is computed (an exact zero is +0). An odd s stays as it is, so only an even one needs
    the remainder."""
    sums = []
    for row in terms.tolist():
        total = math.fsum(row)
        if total != 0 and int(math.frexp(total)[0] * _TWO_53) % 2 == 0:
            row.append(-total)
            rest = math.fsum(row)
            if rest != 0:
                total = math.nextafter(total, math.copysign(math.inf, rest))
        sums.append(total if total != 0 else 0.0)
    return np.asarray(sums, dtype=np.float64)


def odd_sum(xp: Any, terms: Array) -> Array:
    """Σ terms along axis 1, exactly, rounded to odd at 53 bits (float64), for finite float64
    terms each a multiple of 2^-1000 and below 2^1000 in magnitude (the sum too).

    Per row, with 2^top above every |term|: digits of width w = 52 − ⌈log2 K⌉ are peeled off
    the terms from 2^top down (rint of the term scaled to w bits, the rest exact), and each
    digit's column sum is exact in any order (K integers of magnitude ≤ 2^w). The digit sums are
    carried into balanced digits, the sign read off the leading non-zero digit, the digits made
    non-negative, and combined from the lowest up with round-to-odd additions.
    """
    width = 52 - max(1, math.ceil(math.log2(terms.shape[1])))
    peak = xp.max(xp.abs(terms), axis=1)
    top = xp.maximum((peak.view(xp.int64) >> 52) - 1022, -300)  # |terms| ≤ peak < 2^top
    rest = terms * _power_of_two(xp, width - top)[:, None]  # |rest| < 2^width: exact
    digits = []
    while True:
        digit = xp.rint(rest)
        digits.append(xp.sum(digit, axis=1))  # exact: K integers ≤ 2^width
        rest = (rest - digit) * 2.0**width  # exact: |rest − digit| ≤ 1/2
        if not bool(xp.any(rest != 0)):
            break
    base = 2.0**width
    for j in range(len(digits) - 1, 0, -1):  # balanced digits, |digit| ≤ 2^(width−1)
        carry = xp.rint(digits[j] / base)
        digits[j] = digits[j] - carry * base
        digits[j - 1] = digits[j - 1] + carry
    sign = xp.zeros_like(digits[0])
    for digit in digits:
        sign = xp.where(sign == 0, xp.sign(digit), sign)
    digits = [digit * sign for digit in digits]
    for j in range(len(digits) - 1, 0, -1):  # non-negative digits below 2^width
        borrow = (digits[j] < 0).astype(xp.float64)
        digits[j] = digits[j] + borrow * base
        digits[j - 1] = digits[j - 1] - borrow
    total = xp.ldexp(digits[-1], -width * (len(digits) - 1))
    for j in range(len(digits) - 2, -1, -1):
        total = _odd_add(xp, xp.ldexp(digits[j], -width * j), total)
    return total * sign * _power_of_two(xp, top - width)


def _odd_add(xp: Any, x: Array, y: Array) -> Array:
    """x + y rounded to odd: the float64 sum s by TwoSum with its exact error e; an inexact s
    with an even last bit moves one ulp toward s + e."""
    s = x + y
    y_part = s - x
    error = (x - (s - y_part)) + (y - y_part)
    even = (s.view(xp.uint64) & 1) == 0
    toward = xp.where(error > 0, xp.inf, -xp.inf)
    return xp.where((error != 0) & even, xp.nextafter(s, toward), s)


def _odd_at_24_bits(xp: Any, value: Array) -> Array:
    """float64 values rounded to odd at 24 significant bits (the 29 low significand bits
    dropped, the last kept one set if any was not zero): a rounding to nearest into float16 or
    bfloat16 after it, directly or through float32, is the one correct rounding."""
    bits = value.view(xp.uint64)
    low = bits & xp.uint64((1 << 29) - 1)
    sticky = (low != 0).astype(xp.uint64) << xp.uint64(29)
    return ((bits - low) | sticky).view(xp.float64)
