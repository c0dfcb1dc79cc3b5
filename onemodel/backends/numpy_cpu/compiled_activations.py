"""Float32 activations compiled by numba (numpy_cpu/compiled.py): one pass each, where
backends/activations.py's NumPy forms take two to five whole-array passes.

Each kernel reads x and writes out element by element over flat runs, so out may be x's
memory. HardSigmoid, HardSwish, LeakyRelu and ThresholdedRelu round each operation as NumPy
does: the NumPy forms' bits, NaN, ±0 and ±inf included. Sigmoid, Swish and Gelu (both forms)
are x·1/(1 + e^(-x·Q(x²))) or its gate alone (numpy_cpu/compiled_exponentials.py): Gelu's
h·(1 + tanh(u)) with h = x/2 is x/(1 + e^(-2u)), with no 1 + tanh(u) to cancel in the negative
tail; Sigmoid and Swish are within 3·2^-24 relative, where the NumPy forms' tanh is within
2^-24 absolute. Erf is the NumPy form's tanh(x·P(x²)) with Cephes' tanhf for the tanh.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from onemodel.backends import activations
from onemodel.backends.blocking import in_memory_order
from onemodel.backends.numpy_cpu.compiled import jitted
from onemodel.backends.numpy_cpu.compiled_exponentials import (
    GATE,
    GATE_TIMES_X,
    NO_PEAKS,
    TANH_OF_ODD,
    block_buffers,
    exponentials,
)

# What `_one_pass` computes (its `which`).
HARD_SIGMOID, HARD_SWISH, LEAKY_RELU, THRESHOLDED_RELU = 0, 1, 2, 3


def _one_pass(x, out, in_place, which, alpha, beta):
    """out = the activation `which` of x, alpha and beta its parameters: HardSigmoid
    clip(alpha·x + beta, 0, 1), HardSwish x·clip(x/6 + 1/2, 0, 1) (both NaN kept), LeakyRelu
    x for x ≥ 0 (and NaN) and alpha·x below, ThresholdedRelu x where x > alpha, else +0 (NaN
    too, as backends/activations.py gives it). The compiler makes a loop per `which` (it is
    the same for a whole call). Where `in_place` (out is x's memory) the loop runs over out
    alone: one that reads and writes one array through two arguments is left scalar, the
    compiler's overlap check failing (HardSwish at 256k in place 0.106 ms against 0.012)."""
    zero, one = np.float32(0), np.float32(1)
    sixth, half = np.float32(1.0 / 6.0), np.float32(0.5)

    def f(v):
        if which == HARD_SIGMOID:
            gate = min(max(v * alpha + beta, zero), one)
            return v if v != v else gate
        if which == HARD_SWISH:
            return v * min(max(v * sixth + half, zero), one)
        if which == LEAKY_RELU:
            return v * alpha if v < 0 else v
        return v if v > alpha else zero

    if in_place:
        for i in range(out.shape[0]):
            out[i] = f(out[i])
    else:
        for i in range(x.shape[0]):
            out[i] = f(x[i])


def _gate(coefficients: tuple, mode: int) -> tuple:
    """`exponentials`' arguments after x and out for a gate: no row maxima, Q, the mode, its
    block buffers."""
    return NO_PEAKS, coefficients, mode, *block_buffers()


_F = np.float32
# Gelu = h·(1 + tanh(u)) with h = x/2 = x/(1 + e^(-2u)): erf's form u = h·P'(h²)
# (backends/activations.py) gives 2u = x·Σ P'_k·(x²/4)^k; the tanh form's u = √(2/π)·(x +
# 0.044715·x³) gives 2u = x·(2√(2/π) + 2√(2/π)·0.044715·x²). No 1 + tanh to cancel.
_GELU_ERF = tuple(_F(c / 4.0**k) for k, c in enumerate(activations.GELU_ERF_TANH))
_ERF = tuple(_F(c) for c in activations.ERF_TANH)
_GELU_TANH_FORM = (_F(2 * math.sqrt(2 / math.pi)), _F(2 * math.sqrt(2 / math.pi) * 0.044715))
# backends/activations.py's kernel → (its compiled one-pass form, its arguments after x and
# out from the kernel's parameters). 256k elements, ms, compiled against NumPy (AMD EPYC, one
# thread, one run): HardSigmoid 0.039 against 0.118, HardSwish 0.047 against 0.191, LeakyRelu
# 0.039 against 0.086, ThresholdedRelu 0.038 against 0.124, SiLU 0.11 against 0.24.
COMPILED: dict[Callable[..., None], tuple[Callable[..., None], Callable[..., tuple]]] = {
    activations.hard_sigmoid: (_one_pass, lambda alpha, beta: (HARD_SIGMOID, _F(alpha), _F(beta))),
    activations.hard_swish: (_one_pass, lambda: (HARD_SWISH, _F(0), _F(0))),
    activations.leaky_relu: (_one_pass, lambda alpha: (LEAKY_RELU, _F(alpha), _F(0))),
    activations.thresholded_relu: (_one_pass, lambda alpha: (THRESHOLDED_RELU, _F(alpha), _F(0))),
    activations.swish: (exponentials, lambda alpha: _gate((_F(alpha),), GATE_TIMES_X)),
    activations.sigmoid: (exponentials, lambda: _gate((_F(1),), GATE)),
    activations.gelu: (exponentials, lambda: _gate(_GELU_ERF, GATE_TIMES_X)),
    activations.gelu_tanh: (exponentials, lambda: _gate(_GELU_TANH_FORM, GATE_TIMES_X)),
    activations.erf: (exponentials, lambda: _gate(_ERF, TANH_OF_ODD)),
}


def run_compiled(kernel: Callable[..., None], x: Any, out: Any, parameters: tuple) -> bool:
    """out = `kernel`'s activation of x by its compiled form, for float32 x and out of one
    shape and layout; False, with nothing written, where it has none, numba is missing or the
    arrays are of another type or layout."""
    entry = COMPILED.get(kernel)
    if entry is None or x.dtype != np.float32 or out.dtype != np.float32:
        return False
    if not (x.flags.c_contiguous and out.flags.c_contiguous):
        ordered = in_memory_order(x, out)
        if ordered is None or not ordered[0].flags.c_contiguous:
            return False
        x, out = ordered
    function, arguments = entry
    # `_one_pass` gives the NumPy forms' bits (each operation rounded as NumPy rounds it); the
    # exp kernels are their own functions, contracted into fused multiply-adds.
    compiled = jitted(function, contract=function is exponentials)
    if compiled is None:
        return False
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    in_place = _address(flat_x) == _address(flat_out)
    if not in_place and np.may_share_memory(flat_x, flat_out):
        return False  # overlapping but not the same elements: NumPy's ufuncs buffer that
    if function is exponentials:  # one row; it reads x into a block buffer first
        compiled(flat_x.reshape(1, -1), flat_out.reshape(1, -1), *arguments(*parameters))
    else:
        compiled(flat_x, flat_out, in_place, *arguments(*parameters))
    return True


def _address(values: np.ndarray) -> int:
    return values.__array_interface__["data"][0]
