"""What bounds fast-mode element-wise operators, activations, Cast, softmax and reductions on
NumPy: the fewest NumPy calls each kernel needs, on preallocated arrays, against onnxruntime's
whole node, timed side by side (thread CPU time, runs in turn, medians).

    python tools/elementwise_floor.py [medium|large]

onnxruntime evaluates each of these operators in one fused loop: x read once, the output
written once, the arithmetic in registers (MLAS's vectorised exp, tanh, erf and logistic, and
the F16C conversion instructions for Cast). NumPy has no fused ufunc, so every multiply, add or
clamp of a formula is a read-and-write pass of its own (0.02 ms at 256k float32 elements here,
about onnxruntime's whole Abs), and its only transcendental cheaper than onnxruntime's node is
tanh (SVML on AVX-512: 0.06 ms at 256k, exp 0.13, where onnxruntime's Exp takes ~0.04). The
float16 conversions are a scalar loop in NumPy (3 ns an element; its baseline, x86-64-v2,
lacks F16C), so fast mode converts by bit operations instead.

Each row is one such call sequence, the minimal one we found for the stated accuracy (a
degree-5 tanh fit for erf misses 4 ulps with 8–10; exp-free forms of Exp or Softmax lose
float32's relative accuracy). Printed: the sequence's median time (its floor), onemodel's
session and onnxruntime's node for the same bench-ops case, and floor/onnxruntime: above 1.5
the sequence alone cannot meet issue 15's figure, whatever the Python around it costs.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable

import numpy as np
from normalization_floor import _timed

from onemodel import bench_ops
from onemodel.backends import activations, casts
from onemodel.backends.broadcasting import ufunc_into

Step = Callable[[], object]
ROUNDS = {"medium": 300, "large": 20}
F32 = np.float32


def _sequences(rows: int, cols: int, channels: tuple[int, ...]) -> dict[str, tuple[str, Step]]:
    """Operator row name: (bench-ops case name, its fewest NumPy calls on arrays made here)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(F32)
    out, work = np.empty_like(x), np.empty_like(x)
    half = x.astype(np.float16)
    half_out = np.empty_like(half)
    whole = np.empty(x.shape, np.int32)
    ones = np.ones(cols, F32)
    mask = np.empty(x.shape, bool)
    image = rng.standard_normal(channels).astype(F32)
    image_out = np.empty_like(image)
    per_channel = rng.standard_normal((channels[1], 1, 1)).astype(F32)

    pools: dict[tuple, np.ndarray] = {}

    def scratch(shape: tuple[int, ...], dtype: object) -> np.ndarray:
        """Work arrays made once, as a run state's scratch is."""
        return pools.setdefault((shape, dtype), np.empty(shape, dtype))

    def kernel(function: Callable[..., None], work_count: int, *parameters: float) -> Step:
        """The kernel's passes, a cache-sized block at a time where x is large (as in a run)."""
        return lambda: activations.run_blocked(
            function, np, x, out, scratch, work_count, *parameters
        )

    def softmax() -> None:
        x.min(), x.max()  # the range test that lets exp(x) skip the row max
        np.exp(x, out=out)
        total = np.matmul(out, ones)[:, None]
        ufunc_into(np, np.multiply, out, np.reciprocal(total, out=total), out=out)

    def log_softmax() -> None:
        ufunc_into(np, np.subtract, x, np.maximum.reduce(x, axis=1, keepdims=True), out=out)
        np.exp(out, out=work)
        ufunc_into(np, np.subtract, out, np.log(np.matmul(work, ones))[:, None], out=out)

    def to_integer() -> None:
        x.min(), x.max()  # saturation: the plain conversion is right only in range
        np.copyto(whole, x, casting="unsafe")

    def thresholded_relu() -> None:
        np.greater(x, F32(0.5), out=mask)
        np.multiply(x.view(np.int32), mask.view(np.uint8), out=out.view(np.int32), dtype=np.int32)

    def batch_normalization() -> None:  # the per-channel scale and shift of constant statistics
        ufunc_into(np, np.multiply, image, per_channel, out=image_out)
        ufunc_into(np, np.add, image_out, per_channel, out=image_out)

    return {
        "Exp: exp": ("Exp", lambda: np.exp(x, out=out)),
        "Tanh: tanh (the cheapest transcendental)": ("Tanh", lambda: np.tanh(x, out=out)),
        "Erf: tanh + 14 passes": ("Erf", kernel(activations.erf, 2)),
        "Gelu: tanh + 17 passes": ("Gelu", kernel(activations.gelu, 2)),
        "Gelu tanh: tanh + 7 passes": ("Gelu tanh", kernel(activations.gelu_tanh, 2)),
        "Sigmoid: tanh + 3 passes": ("Sigmoid", kernel(activations.sigmoid, 0)),
        "Softmax: min, max, exp, GEMV, product": ("Softmax", softmax),
        "LogSoftmax: max, sub, exp, GEMV, log, sub": ("LogSoftmax", log_softmax),
        "Cast float32->float16: NumPy's astype": (
            "Cast float32->float16",
            lambda: np.copyto(half_out, x),
        ),
        "Cast float32->float16: 10+2 bit-op passes": (
            "Cast float32->float16",
            lambda: casts.fast_cast(np, x, half_out),
        ),
        "Cast float16->float32: NumPy's astype": (
            "Cast float16->float32",
            lambda: np.copyto(out, half),
        ),
        "Cast float16->float32: 3 bit-op passes": (
            "Cast float16->float32",
            lambda: casts.fast_cast(np, half, out),
        ),
        "Cast float32->int32: min, max, convert": ("Cast float32->int32", to_integer),
        "ThresholdedRelu: compare, integer multiply": ("ThresholdedRelu", thresholded_relu),
        "HardSigmoid: mul, add, clip": (
            "HardSigmoid",
            kernel(activations.hard_sigmoid, 0, 0.2, 0.5),
        ),
        "HardSwish: mul, add, clip, mul": ("HardSwish", kernel(activations.hard_swish, 1)),
        "Softsign: abs, add, divide": ("Softsign", kernel(activations.softsign, 1)),
        "ReduceMax last: maximum.reduce": (
            "ReduceMax last",
            lambda: np.maximum.reduce(x, axis=1),
        ),
        "ReduceMin last: minimum.reduce": (
            "ReduceMin last",
            lambda: np.minimum.reduce(x, axis=1),
        ),
        "BatchNormalization: 2 per-channel passes": ("BatchNormalization", batch_normalization),
    }


def _medians(steps: dict[str, Step], rounds: int) -> dict[str, float]:
    """Each step's median thread time in ms, the steps run in turn in every round."""
    return {name: statistics.median(t) * 1e3 for name, t in _timed(steps, rounds).items()}


def main(size: str = "medium") -> None:
    sequences = _sequences(*bench_ops.FLAT[size], bench_ops.IMAGE[size])
    print(f"{'':50s} {'floor ms':>9s} {'onemodel':>9s} {'ort ms':>8s} {'floor/ort':>9s} om/ort")
    for name, (case_name, sequence) in sequences.items():
        (case,) = [c for c in bench_ops.selected((size,), f"^{case_name}$") if c.size == size]
        ours, theirs = bench_ops._sessions(case)
        # One operator's three in turn, so that each finds its arrays in cache as in a loop
        # of runs (round-robin over every operator would leave the sessions' inputs cold).
        median = _medians({"floor": sequence, "ours": ours, "theirs": theirs}, ROUNDS[size])
        print(
            f"{size:6s} {name:43s} {median['floor']:9.4f} {median['ours']:9.4f} "
            f"{median['theirs']:8.4f} {median['floor'] / median['theirs']:9.2f} "
            f"{median['ours'] / median['theirs']:6.2f}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
