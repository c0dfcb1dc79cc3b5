"""The array kernels of exact mode, written once against an array namespace `xp`.

Exact mode promises the same bits on every backend, so each kernel here is a fixed sequence of
correctly rounded single operations (add, subtract, multiply, divide, sqrt, compare, select,
ldexp, frexp, rint), each a separate `xp` call so nothing can be contracted into a fused
multiply-add, and every accumulation runs in one order written out as a Python loop. Floats are
widened to float64 first (exact for float16, bfloat16 and float32), the work is done there, and
the result is rounded once into `out`. float32 products are exact in float64, so a float32 sum of
products only rounds at its float64 additions, in the stated order, and at the end.

No library reduction, BLAS call or transcendental function is used: exp, log and erf are built
below from a fixed range reduction and a fixed polynomial (docs/exact-mode.md gives their
accuracy). NaN payloads are left to the runtime, which rewrites every NaN result canonically.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any

import numpy as np

# `wide`: x as float64, the working type of every floating exact kernel (a copy; float32
# subnormals rebuilt from their bits, so a flushing backend keeps them).
from onemodel.backends import exact_gemm
from onemodel.backends.ieee_float32 import store
from onemodel.backends.ieee_float32 import widen as wide

Array = Any  # an array of the backend (numpy.ndarray or cupy.ndarray)

# ln 2 split Cody–Waite style: LN2_HI keeps 32 significant bits, so k·LN2_HI is exact for any
# |k| < 2^21, and LN2_LO is the rest of ln 2 rounded to float64. Derived with Python's decimal
# module (correctly rounded, the same on every machine), not typed in.
_LN2 = Context(prec=60).ln(Decimal(2))
LN2_HI = math.ldexp(math.floor(math.ldexp(float(_LN2), 32)), -32)
LN2_LO = float(_LN2 - Decimal(LN2_HI))
INV_LN2 = float(1 / _LN2)
# exp: Taylor terms 1/n! up to degree 13; on |r| ≤ ln2/2 the first term left out is < 4e-18.
# `elementwise` works on NumPy in blocks of this many elements (128 KiB of float64).
_ELEMENTWISE_BLOCK = 1 << 14
# Up to this many elements in all, `horner_segments` evaluates its parts as one array.
_STACKED_HORNER_LIMIT = 1 << 14
EXP_TERMS = tuple(float(Fraction(1, math.factorial(n))) for n in range(14))
# Beyond ±746 every float64 (and so every float32) exp is 0 or inf; clamping there also turns
# ±inf into finite inputs whose result is already the right 0 or inf.
EXP_LIMIT = 746.0
# log(m) = 2·atanh(u), u = (m − 1)/(m + 1): the series Σ u^(2n+1)/(2n+1) up to n = 11; with
# m in [√½, √2), |u| ≤ 0.1716 and the first term left out is < 1e-19.
_ATANH_TERMS = tuple(float(Fraction(1, 2 * n + 1)) for n in range(12))
_SQRT_HALF = float(Context(prec=60).sqrt(Decimal(2)) / 2)
# erf(x) = 2/√π · x · exp(−x²) · Σ (2x²)^n / (2n+1)!!: every term is positive, so nothing
# cancels. From |x| = 6 on erf rounds to ±1 even in float64; 100 terms reach 1e-18 there.
_ERF_LIMIT = 6.0
_ERF_TERMS = tuple(float(Fraction(1, math.prod(range(1, 2 * n + 2, 2)))) for n in range(101))
_TWO_OVER_SQRT_PI = float.fromhex("0x1.20dd750429b6dp+0")  # 2/√π rounded to float64


# -- reductions ----------------------------------------------------------------------------


def _reduced_first(xp: Any, x: Array, axes: Sequence[int]) -> Array:
    """x as (R, *kept): the reduced axes moved to the front and flattened in row-major order,
    which is the canonical order of every reduction."""
    moved = xp.moveaxis(x, tuple(axes), tuple(range(len(axes))))
    reduced = math.prod(x.shape[a] for a in axes)  # not -1: ambiguous when a kept axis is 0
    return moved.reshape(reduced, *moved.shape[len(axes) :])


def ordered_sum(xp: Any, x: Array, axes: Sequence[int]) -> Array:
    """Σ over `axes` in float64, adding the reduced positions in row-major order from +0; the
    shape is x's without `axes`.

    On the host np.add.accumulate adds row after row by definition, whatever order its loops
    take (a plain reduce may go pairwise along a contiguous axis), for one pass instead of a
    Python step a row (MobileNetV3's squeeze-excite means over 28×28: 0.6 ms → 0.05); it starts
    from the first row rather than +0, which differs only where every row is −0: + 0.0 then
    gives the +0 that adding them to +0 gives (a sum from +0 is never −0 otherwise)."""
    rows = _reduced_first(xp, wide(xp, x), axes)
    if xp is np and rows.shape[0] > 1:
        return np.add.accumulate(rows, axis=0)[-1] + 0.0
    total = xp.zeros(rows.shape[1:], dtype=xp.float64)
    for row in range(rows.shape[0]):
        total += rows[row]
    return total


def ordered_extremum(xp: Any, x: Array, axes: Sequence[int], largest: bool) -> Array:
    """The max (or min) over `axes` by compare and select in row-major order: a later value
    wins only if strictly greater (smaller), so the first of equal values (−0 and +0 included)
    wins; the first NaN wins over any number. Floats compare (and come back) as float64,
    other types in their own; shape without `axes`."""
    floating = x.dtype.kind == "f"
    rows = _reduced_first(xp, wide(xp, x) if floating else x, axes)
    best = rows[0, ...].copy()  # an array even when every axis is reduced
    for row in range(1, rows.shape[0]):
        values = rows[row]
        take = values > best if largest else values < best
        if floating:
            take |= xp.isnan(values) & ~xp.isnan(best)
        xp.copyto(best, values, where=take)
    return best


def sum_arrays(xp: Any, x: Array, axes: Sequence[int], out: Array) -> None:
    """out = the ordered float64 sum over `axes`, rounded once (out: any shape of that size)."""
    store(xp, out, ordered_sum(xp, x, axes).reshape(out.shape))


def mean_arrays(xp: Any, x: Array, axes: Sequence[int], out: Array) -> None:
    """out = the ordered float64 sum over `axes`, divided once by the count, rounded once."""
    count = math.prod(x.shape[a] for a in axes)
    with np.errstate(all="ignore"):
        mean = (ordered_sum(xp, x, axes) / count).reshape(out.shape)
    store(xp, out, mean)


def extremum_arrays(xp: Any, x: Array, axes: Sequence[int], out: Array, largest: bool) -> None:
    """out = `ordered_extremum` over `axes` (a value of x, so nothing rounds)."""
    store(xp, out, ordered_extremum(xp, x, axes, largest).reshape(out.shape))


# -- windows: convolution and pooling ------------------------------------------------------


def _padded(
    xp: Any,
    x: Array,
    out_spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    fill: Any,
    dtype: Any,
) -> Array:
    """x (N, C, *S) in `dtype` inside a border of `fill`: `pads` before each axis, and after it
    as far as the windows reach (or cut where they stop reaching)."""
    reach = [
        (o - 1) * s + (k - 1) * d + 1
        for o, s, k, d in zip(out_spatial, strides, kernel, dilations, strict=True)
    ]
    padded = xp.full((*x.shape[:2], *reach), fill, dtype=dtype)
    kept = [max(0, min(n, r - p)) for n, r, p in zip(x.shape[2:], reach, pads, strict=True)]
    target = tuple(slice(p, p + k) for p, k in zip(pads, kept, strict=True))
    padded[(..., *target)] = x[(..., *(slice(0, k) for k in kept))]
    return padded


def _taps(
    padded: Array,
    out_spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> Iterator[tuple[tuple[int, ...], Array]]:
    """Per kernel offset, in row-major order: the offset and the view (..., *out_spatial) of
    `padded` holding that offset's element of every window."""
    for taps in itertools.product(*(range(k) for k in kernel)):
        view = tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s)
            for t, d, o, s in zip(taps, dilations, out_spatial, strides, strict=True)
        )
        yield taps, padded[(..., *view)]


def conv_weights(xp: Any, w: Array, group: int) -> exact_gemm.ExactOperand:
    """W (M, C/group, *K) as `conv_arrays` multiplies it: the left operand (group, M/group,
    C/group·ΠK) of the exact matmul, prepared (a constant W once per plan)."""
    return exact_gemm.prepare(xp, w.reshape(group, w.shape[0] // group, -1), -1)


def conv_arrays(
    xp: Any,
    x: Array,
    w: Array,
    out: Array,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    group: int,
    weights: exact_gemm.ExactOperand | None = None,
) -> None:
    """Cross-correlation of x (N, C, *S) with w (M, C/group, *K) into out (N, M, *O), no bias.

    The exact matmul of W's rows with im2col's columns: per output element the exact sum of
    its products (padding reads +0 and takes part), rounded once into `out`. `weights` is
    `conv_weights(w, group)` when the caller has it already.
    """
    batch, channels = x.shape[:2]
    out_spatial, kernel = out.shape[2:], w.shape[2:]
    per_group, maps = channels // group, w.shape[0] // group
    x = exact_gemm.to_float64(xp, x)
    pointwise = math.prod(kernel) == 1 and tuple(out_spatial) == tuple(x.shape[2:])
    if pointwise and all(s == 1 for s in strides) and not any(pads):
        columns = x.reshape(batch, group, per_group, -1)  # im2col of a 1x1 conv is x itself
    else:
        padded = _padded(xp, x, out_spatial, kernel, strides, pads, dilations, 0, xp.float64)
        columns = xp.empty((batch, channels, math.prod(kernel), *out_spatial), dtype=xp.float64)
        for tap, (_, view) in enumerate(_taps(padded, out_spatial, kernel, strides, dilations)):
            columns[:, :, tap] = view
        columns = columns.reshape(batch, group, per_group * math.prod(kernel), -1)
    shape = (batch, group, maps, columns.shape[-1])
    direct = out.flags.c_contiguous
    product = out.reshape(shape) if direct else xp.empty(shape, dtype=out.dtype)
    if weights is None:
        weights = conv_weights(xp, w, group)
    exact_gemm.matmul(xp, weights, columns, product)
    if not direct:
        out[...] = product.reshape(out.shape)


def max_pool_arrays(
    xp: Any,
    x: Array,
    out: Array,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    indices: Array | None = None,
) -> None:
    """Max of each window of x (N, C, *S) into out (N, C, *O) by compare and select, offsets in
    row-major order: a value wins if strictly greater or the first NaN, so the first of equal
    values wins; padding (the lowest value) never wins. `indices` (int64), when given, get the
    row-major position in its plane of each winner, or of the window's first real position when
    nothing beats the lowest value. Every window must hold a real position.
    """
    floating = x.dtype.kind == "f"
    lowest = -np.inf if floating else np.iinfo(x.dtype).min
    if floating:  # compared as float64 (exact), so a flushing backend keeps subnormals
        x, best = wide(xp, x), xp.empty(out.shape, dtype=xp.float64)
    else:
        best = out
    out_spatial = out.shape[2:]
    window = (out_spatial, kernel, strides, pads, dilations)
    values = _taps(
        _padded(xp, x, *window, lowest, x.dtype), out_spatial, kernel, strides, dilations
    )
    if indices is not None:
        spatial = x.shape[2:]
        plane = xp.arange(math.prod(spatial), dtype=xp.int64).reshape(1, 1, *spatial)
        padded_plane = _padded(xp, plane, *window, -1, xp.int64)
        positions = _taps(padded_plane, out_spatial, kernel, strides, dilations)
        indices[...] = -1
    best[...] = lowest
    for _, tap in values:
        take = tap > best
        if floating:
            take |= xp.isnan(tap) & ~xp.isnan(best)
        xp.copyto(best, tap, where=take)
        if indices is not None:
            _, position = next(positions)
            xp.copyto(indices, position, where=take | ((indices < 0) & (position >= 0)))
    if floating:
        store(xp, out, best)


def average_pool_arrays(
    xp: Any,
    x: Array,
    out: Array,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    divisor: Array,
) -> None:
    """Each window's float64 sum (from +0, offsets in row-major order; padding adds +0),
    divided once by `divisor` (broadcast to out's spatial shape), rounded once into out."""
    out_spatial = out.shape[2:]
    padded = _padded(xp, wide(xp, x), out_spatial, kernel, strides, pads, dilations, 0, xp.float64)
    total = xp.zeros(out.shape, dtype=xp.float64)
    with np.errstate(all="ignore"):
        for _, values in _taps(padded, out_spatial, kernel, strides, dilations):
            total += values
        total /= xp.asarray(divisor, dtype=xp.float64)
    store(xp, out, total)


# -- exp, log, erf -------------------------------------------------------------------------


def horner(xp: Any, t: Array, terms: Sequence[float]) -> Array:
    """Σ terms[n]·t^n by Horner's rule, one rounded multiply and one rounded add per step."""
    total = xp.full(t.shape, terms[-1], dtype=xp.float64)
    for term in reversed(terms[:-1]):
        total *= t
        total += term
    return total


def horner_segments(xp: Any, parts: Sequence[tuple[Array, Sequence[float]]]) -> list[Array]:
    """`horner` of each (t, terms) pair, the term lists of one length: for
    small arrays as one evaluation over the parts laid end to end, each element's own terms
    added as a vector (the same operations element by element, so the same bits, in a fraction
    of the array calls, which are what cost at this size); larger ones part by part."""
    sizes = tuple(int(t.size) for t, _ in parts)
    if sum(sizes) > _STACKED_HORNER_LIMIT:
        return [horner(xp, t, terms) for t, terms in parts]
    key = tuple(zip(sizes, (tuple(terms) for _, terms in parts), strict=True))
    table = _SEGMENT_TABLES.get(key)
    if table is None:
        table = np.concatenate(
            [
                np.repeat(np.asarray(terms)[:, None], n, axis=1)
                for n, (_, terms) in zip(sizes, parts, strict=True)
            ],
            axis=1,
        )
        _SEGMENT_TABLES[key] = table
    table = xp.asarray(table)
    t = xp.concatenate([x.reshape(-1) for x, _ in parts])
    total = table[-1] + xp.zeros_like(t)
    for n in range(table.shape[0] - 2, -1, -1):
        total *= t
        total += table[n]
    results, end = [], 0
    for x, _ in parts:
        results.append(total[end : end + x.size].reshape(x.shape))
        end += x.size
    return results


# horner_segments' coefficient tables by (size, terms) per part: a few term lists, the sizes
# of small arrays (a recurrent layer's gates), so the dictionary stays small.
_SEGMENT_TABLES: dict[tuple[tuple[int, tuple[float, ...]], ...], np.ndarray] = {}


def exp_reduced(xp: Any, x: Array) -> tuple[Array, Array]:
    """exp64's range reduction: r = (x − k·ln2_hi) − k·ln2_lo and k = rint(x/ln2) (int32), x
    clamped to ±746 first; exp(x) = ldexp(horner(r, EXP_TERMS), k)."""
    with np.errstate(all="ignore"):
        x = xp.minimum(xp.maximum(x, -EXP_LIMIT), EXP_LIMIT)  # clip's values, cheaper
        k = xp.rint(x * INV_LN2)
        r = x - k * LN2_HI
        r -= k * LN2_LO
        return r, k.astype(xp.int32)


def exp64(xp: Any, x: Array) -> Array:
    """exp of a float64 array: k = rint(x/ln2), r = (x − k·ln2_hi) − k·ln2_lo, the degree-13
    Taylor polynomial of exp(r) by Horner's rule, then ldexp by k (exact, or one rounding
    into the subnormals). NaN stays NaN; ±inf give inf and 0."""
    r, k = exp_reduced(xp, x)
    with np.errstate(all="ignore"):
        return xp.ldexp(horner(xp, r, EXP_TERMS), k)


def log64(xp: Any, x: Array) -> Array:
    """log of a float64 array: x = m·2^e with m in [√½, √2) (frexp, then one exact doubling),
    log x = e·ln2_hi + (e·ln2_lo + 2u·Σ u^2n/(2n+1)) with u = (m − 1)/(m + 1). 0 gives −inf,
    inf gives inf, negatives and NaN give NaN."""
    with np.errstate(all="ignore"):
        m, e = xp.frexp(x)
        low = m < _SQRT_HALF
        m = xp.where(low, m * 2, m)
        e = (e - low).astype(xp.float64)
        u = (m - 1) / (m + 1)
        series = horner(xp, u * u, _ATANH_TERMS)
        series *= u
        series *= 2
        series += e * LN2_LO
        result = e * LN2_HI
        result += series
        result = xp.where(x == xp.inf, xp.inf, result)
        result = xp.where(x == 0, -xp.inf, result)
        return xp.where(x < 0, xp.nan, result)


def erf64(xp: Any, x: Array) -> Array:
    """erf of a float64 array: 2/√π · a · exp(−a²) · Σ (2a²)^n/(2n+1)!! for a = x clamped to
    [−6, 6] (100 terms; every term positive). NaN stays NaN, ±inf give ±1."""
    with np.errstate(all="ignore"):
        a = xp.clip(x, -_ERF_LIMIT, _ERF_LIMIT)
        square = a * a
        result = horner(xp, square * 2, _ERF_TERMS)
        result *= exp64(xp, -square)
        result *= a
        result *= _TWO_OVER_SQRT_PI
        return result


def elementwise(
    xp: Any, function: Callable[..., Array], inputs: Sequence[Array], out: Array
) -> None:
    """out = function(xp, *float64 copies of inputs), rounded once (inputs broadcast to out),
    for an element-wise `function`. On NumPy a large out is done in blocks of
    _ELEMENTWISE_BLOCK elements, so the dozens of whole-array steps of a polynomial (erf64's
    200) work in the cache: the same operations element by element, so the same bits."""
    with np.errstate(all="ignore"):
        if xp is not np or out.size < 2 * _ELEMENTWISE_BLOCK or not out.flags.c_contiguous:
            store(xp, out, function(xp, *(wide(xp, x) for x in inputs)))
            return
        flat = [np.broadcast_to(x, out.shape).reshape(-1) for x in inputs]
        target = out.reshape(-1)
        for start in range(0, target.size, _ELEMENTWISE_BLOCK):
            part = slice(start, start + _ELEMENTWISE_BLOCK)
            store(xp, target[part], function(xp, *(wide(xp, x[part]) for x in flat)))


def exp_arrays(xp: Any, x: Array, out: Array) -> None:
    """out = exp(x) by `exp64`, rounded once."""
    elementwise(xp, exp64, (x,), out)


def log_arrays(xp: Any, x: Array, out: Array) -> None:
    """out = log(x) by `log64`, rounded once."""
    elementwise(xp, log64, (x,), out)


def erf_arrays(xp: Any, x: Array, out: Array) -> None:
    """out = erf(x) by `erf64`, rounded once."""
    elementwise(xp, erf64, (x,), out)


# -- softmax and layer normalization -------------------------------------------------------


def _shifted_exp(xp: Any, x: Array, axis: int) -> tuple[Array, Array, Array]:
    """d = x − max along `axis` (float64), exp64(d), and the ordered sum of exp64(d) along
    `axis` (keeping it as size 1)."""
    values = wide(xp, x)
    with np.errstate(all="ignore"):
        shifted = values - xp.expand_dims(ordered_extremum(xp, values, (axis,), True), axis)
    powers = exp64(xp, shifted)
    return shifted, powers, xp.expand_dims(ordered_sum(xp, powers, (axis,)), axis)


def softmax_arrays(xp: Any, x: Array, axis: int, out: Array) -> None:
    """out = exp64(d) / Σ exp64(d) along `axis`, d = x − max: one division, rounded once."""
    _, powers, total = _shifted_exp(xp, x, axis)
    with np.errstate(all="ignore"):
        store(xp, out, powers / total)


def log_softmax_arrays(xp: Any, x: Array, axis: int, out: Array) -> None:
    """out = d − log64(Σ exp64(d)) along `axis`, d = x − max: one subtraction, rounded once."""
    shifted, _, total = _shifted_exp(xp, x, axis)
    with np.errstate(all="ignore"):
        store(xp, out, shifted - log64(xp, total))


def layer_norm_arrays(
    xp: Any,
    x: Array,
    scale: Array,
    bias: Array | None,
    axis: int,
    epsilon: float,
    out: Array,
    mean_out: Array | None = None,
    inv_std_out: Array | None = None,
) -> None:
    """Standardize x over its axes from `axis` on, all in float64: mean = ordered sum / n,
    d = x − mean, var = ordered Σ d·d / n, inv_std = 1 / sqrt(var + ε), then
    out = ((d · inv_std) · scale) + bias rounded once; mean and inv_std rounded once into the
    optional outputs (shaped with the normalized axes as 1)."""
    axes = tuple(range(axis, x.ndim))
    count = math.prod(x.shape[axis:])
    kept = (*x.shape[:axis], *(1,) * len(axes))
    values = wide(xp, x)
    with np.errstate(all="ignore"):
        mean = (ordered_sum(xp, values, axes) / count).reshape(kept)
        values -= mean
        variance = (ordered_sum(xp, values * values, axes) / count).reshape(kept)
        inv_std = 1 / xp.sqrt(variance + float(epsilon))
        values *= inv_std
        values *= wide(xp, scale)
        if bias is not None:
            values += wide(xp, bias)
    store(xp, out, values)
    for target, statistic in ((mean_out, mean), (inv_std_out, inv_std)):
        if target is not None:
            store(xp, target, statistic)
