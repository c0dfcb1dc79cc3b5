"""The float32 kernels built on exp, compiled by numba (numpy_cpu/compiled.py) as one family:
a sigmoid gate 1/(1 + e^(-x·Q(x²))) (Sigmoid, Swish, Gelu in both forms) and Erf's
tanh(x·P(x²)) in one pass over memory, and the shifted exponentials e^(x - max) of Softmax and
LogSoftmax along rows.

numba has no vectorised exp, so exp(t) is Cephes' expf written out: t = k·ln 2 + r with |r| ≤
ln 2 / 2 (k rounded by the 1.5·2^23 trick), e^r a degree-6 polynomial (within 2 float32 ulps),
and 2^(k-1) made from its exponent bits (k + 126) << 23, read as float32 through a second
view of a block buffer in a second loop (numba has no bit cast of a scalar). The argument and
what becomes of e^t are the member's (`mode`); the branches on it are the same for a whole
call, so the compiler hoists them out of the loops.
"""

from __future__ import annotations

import numpy as np

from onemodel.backends.numpy_cpu.compiled import jitted

# exp's argument is clamped to [-86, 89]: below -86, e^t is taken as 0 (1 + e^t is 1, and a
# softmax term under 2^-124 of its row's largest is below float32's resolution of any sum); above
# 88.73 e^t overflows to +inf, which makes a gate 0, as it should be. 2^k is made as 2^(k-1)·2
# so that k = 128 (t from 88.38) is still a float32 exponent.
EXP_LOW, EXP_HIGH = -86.0, 89.0
# Elements a block of the exponentials and their exponent bits holds (in L1 between loops).
BLOCK = 512
# The fewest elements a compiled Softmax takes: below, its five calls cost more than they save.
SOFTMAX_FROM = 4096
# What `exponentials` computes (its `mode`).
GATE, GATE_TIMES_X, EXP_SHIFTED, TANH_OF_ODD = 0, 1, 2, 3
# Below this |u|, tanh(u) is Cephes' odd polynomial u + u·z·T(z), z = u², T lowest first;
# above, (1 - e^(-2|u|))/(1 + e^(-2|u|)), which no longer cancels much there.
TANH_POLYNOMIAL_BELOW = 0.625
# Below this |u|, tanh(u) is u to float32's precision (u³/3 is under 2^-25·|u|), which also
# keeps -0's sign (u + u·z·T(z) would make it +0).
TANH_LINEAR_BELOW = 2.0**-12
TANH_POLYNOMIAL = tuple(
    np.float32(c)
    for c in (-3.33332819422e-1, 1.33314422036e-1, -5.37397155531e-2, 2.06390887954e-2,
              -5.70498872745e-3)
)  # fmt: skip


# The row maxima a call without rows of its own (every mode but EXP_SHIFTED) passes.
NO_PEAKS = np.zeros(1, np.float32)


def block_buffers() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`exponentials`' block buffers: the gate, the exponent bits, the held values."""
    return np.empty(BLOCK, np.float32), np.empty(BLOCK, np.int32), np.empty(BLOCK, np.float32)


def exponentials(x, out, peaks, coefficients, mode, gate, bits, held):
    """Along each row of x and out (2-D, C-contiguous, float32; out may be x):
    GATE: g = 1/(1 + e^(-x·Q(x²))), Q's `coefficients` lowest first (a tuple: its length is the
    specialisation's), NaN kept; GATE_TIMES_X: x·g; EXP_SHIFTED: e^(x - peaks[row]), NaN
    where x - peaks[row] is NaN; TANH_OF_ODD: tanh(u), u = x·Q(x²), as Cephes' tanhf (u is
    kept in out between the block's two loops). `gate`, `bits` and `held` are block buffers:
    the second loop reads x's values (or u) from `held`, never from x, because a loop that
    reads and writes one array through two arguments is left scalar (the compiler's overlap
    check fails when out is x: 7× slower in place)."""
    low, high = np.float32(EXP_LOW), np.float32(EXP_HIGH)
    log2e, rounding = np.float32(1.4426950408889634), np.float32(12582912.0)
    zero, one, two = np.float32(0), np.float32(1), np.float32(2)
    ln2_high, ln2_low = np.float32(0.693359375), np.float32(-2.12194440e-4)
    c0, c1, c2 = (
        np.float32(1.9875691500e-4),
        np.float32(1.3981999507e-3),
        np.float32(8.3334519073e-3),
    )
    c3, c4, c5 = (
        np.float32(4.1665795894e-2),
        np.float32(1.6666665459e-1),
        np.float32(5.0000001201e-1),
    )
    degree = len(coefficients) - 1
    scales = bits.view(np.float32)
    size = gate.shape[0]
    rows, length = x.shape
    rowwise = mode == EXP_SHIFTED
    odd = mode == TANH_OF_ODD
    polynomial_below = np.float32(TANH_POLYNOMIAL_BELOW)
    linear_below = np.float32(TANH_LINEAR_BELOW)
    t0, t1, t2, t3, t4 = TANH_POLYNOMIAL
    for row in range(rows):
        source, target = x[row], out[row]
        shift = peaks[row] if rowwise else zero
        for start in range(0, length, size):
            count = min(size, length - start)
            part, result = source[start : start + count], target[start : start + count]
            for i in range(count):
                v = part[i]
                lost = zero
                if rowwise:  # x - max and what its rounding lost (Knuth's two-sum)
                    t = v - shift
                    moved = t - v
                    lost = (v - (t - moved)) - (shift + moved)
                else:
                    square = v * v
                    q = coefficients[degree]
                    for k in range(degree - 1, -1, -1):
                        q = q * square + coefficients[k]
                    t = -(v * q)
                    if odd:
                        held[i] = -t
                        t = -two * abs(t)
                    else:
                        held[i] = v
                below = t < low
                t = low if below else t  # NaN stays NaN
                t = high if t > high else t
                k = (t * log2e + rounding) - rounding
                r = t - k * ln2_high - k * ln2_low + lost
                p = ((((c0 * r + c1) * r + c2) * r + c3) * r + c4) * r + c5
                p = p * r * r + r + one
                gate[i] = zero if below else p
                bits[i] = (np.int32(k) + np.int32(126)) << np.int32(23)
            if odd:
                for i in range(count):
                    u = held[i]
                    e = gate[i] * scales[i] * two
                    far = (one - e) / (one + e)
                    far = -far if u < zero else far
                    z = u * u
                    near = u + u * z * ((((t4 * z + t3) * z + t2) * z + t1) * z + t0)
                    near = u if abs(u) < linear_below else near
                    result[i] = near if abs(u) < polynomial_below else far
            elif mode <= GATE_TIMES_X:
                for i in range(count):
                    gate[i] = one / (one + gate[i] * scales[i] * two)
                if mode == GATE_TIMES_X:
                    for i in range(count):
                        result[i] = held[i] * gate[i]
                else:
                    for i in range(count):
                        v = held[i]
                        result[i] = v if v != v else gate[i]
            else:
                for i in range(count):
                    result[i] = gate[i] * scales[i] * two


def _rows_finished(source, factors, target, log, in_place):
    """target = source - factors[row] (`log`) or source · factors[row], row by row; over
    target alone where `in_place` (see compiled_activations.py: such a loop is left scalar
    otherwise)."""

    def f(v, factor):
        return v - factor if log else v * factor

    for row in range(source.shape[0]):
        factor, result = factors[row], target[row]
        if in_place:
            for i in range(result.shape[0]):
                result[i] = f(result[i], factor)
        else:
            values = source[row]
            for i in range(result.shape[0]):
                result[i] = f(values[i], factor)


def compiled_softmax(x: np.ndarray, out: np.ndarray, log: bool) -> bool:
    """Softmax (or LogSoftmax, `log`) of float32 x along its last axis into out, both
    C-contiguous, of at least SOFTMAX_FROM elements, by `exponentials`; False, with nothing
    written, otherwise or without numba."""
    if x.dtype != np.float32 or out.dtype != np.float32 or x.ndim == 0 or x.size < SOFTMAX_FROM:
        return False
    if not (x.flags.c_contiguous and out.flags.c_contiguous):
        return False
    kernel = jitted(exponentials)
    if kernel is None:
        return False
    rows, target = x.reshape(-1, x.shape[-1]), out.reshape(-1, x.shape[-1])
    # NumPy's row maxima are vectorised, numba's loop for a maximum is not; a GEMV with ones
    # sums rows in a quarter of np.sum's time.
    peaks = np.maximum.reduce(rows, axis=1)
    # LogSoftmax reads x again after the exponentials: they go elsewhere where out is x.
    exps = np.empty_like(rows) if log and np.may_share_memory(x, out) else target
    kernel(rows, exps, peaks, (np.float32(0),), EXP_SHIFTED, *block_buffers())
    totals = np.matmul(exps, np.ones(rows.shape[1], np.float32))
    if log:  # (x - max) - log Σ e^(x - max)
        factors = np.add(np.log(totals, out=totals), peaks, out=totals)
    else:
        factors = np.reciprocal(totals, out=totals)
    source = rows if log else exps
    in_place = source.__array_interface__["data"][0] == target.__array_interface__["data"][0]
    jitted(_rows_finished)(source, factors, target, log, in_place)
    return True
