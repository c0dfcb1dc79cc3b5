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
import time
from collections.abc import Callable

import numpy as np

from onemodel import bench_ops
from onemodel.backends import activations, casts
from onemodel.backends.broadcasting import ufunc_into
from onemodel.backends.fp_errors import run_scope

Step = Callable[[], object]
F32 = np.float32


def _sequences(rows: int, cols: int, channels: tuple[int, ...]) -> dict[str, tuple[str, Step]]:
    """Operator row name: (bench-ops case name, its fewest NumPy calls on arrays made here)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(F32)
    out, work = np.empty_like(x), [np.empty_like(x) for _ in range(2)]
    half = x.astype(np.float16)
    half_out = np.empty_like(half)
    whole = np.empty(x.shape, np.int32)
    ones = np.ones(cols, F32)
    mask, mask32 = np.empty(x.shape, bool), np.empty(x.shape, np.int32)
    image = rng.standard_normal(channels).astype(F32)
    image_out = np.empty_like(image)
    per_channel = rng.standard_normal((channels[1], 1, 1)).astype(F32)

    def kernel(function: Callable[..., None], *parameters: float) -> Step:
        return lambda: function(np, x, out, work, *parameters)

    def softmax() -> None:
        x.min(), x.max()  # the range test that lets exp(x) skip the row max
        np.exp(x, out=out)
        total = np.matmul(out, ones)[:, None]
        ufunc_into(np, np.multiply, out, np.reciprocal(total, out=total), out=out)

    def log_softmax() -> None:
        ufunc_into(np, np.subtract, x, np.maximum.reduce(x, axis=1, keepdims=True), out=out)
        np.exp(out, out=work[0])
        ufunc_into(np, np.subtract, out, np.log(np.matmul(work[0], ones))[:, None], out=out)

    def to_integer() -> None:
        x.min(), x.max()  # saturation: the plain conversion is right only in range
        np.copyto(whole, x, casting="unsafe")

    def thresholded_relu() -> None:
        np.greater(x, F32(0.5), out=mask)
        np.negative(mask.view(np.int8), out=mask32)
        np.bitwise_and(x.view(np.int32), mask32, out=out.view(np.int32))

    def batch_normalization() -> None:  # the per-channel scale and shift of constant statistics
        ufunc_into(np, np.multiply, image, per_channel, out=image_out)
        ufunc_into(np, np.add, image_out, per_channel, out=image_out)

    return {
        "Exp: exp": ("Exp", lambda: np.exp(x, out=out)),
        "Tanh: tanh (the cheapest transcendental)": ("Tanh", lambda: np.tanh(x, out=out)),
        "Erf: tanh + 14 passes": ("Erf", kernel(activations.erf)),
        "Gelu: tanh + 17 passes": ("Gelu", kernel(activations.gelu)),
        "Gelu tanh: tanh + 7 passes": ("Gelu tanh", kernel(activations.gelu_tanh)),
        "Sigmoid: tanh + 3 passes": ("Sigmoid", kernel(activations.sigmoid)),
        "Softmax: min, max, exp, GEMV, product": ("Softmax", softmax),
        "LogSoftmax: max, sub, exp, GEMV, log, sub": ("LogSoftmax", log_softmax),
        "Cast float32->float16: NumPy's astype": (
            "Cast float32->float16",
            lambda: np.copyto(half_out, x),
        ),
        "Cast float32->float16: 10+2 bit-op passes": (
            "Cast float32->float16",
            lambda: casts._float32_to_float16(x, half_out),
        ),
        "Cast float16->float32: NumPy's astype": (
            "Cast float16->float32",
            lambda: np.copyto(out, half),
        ),
        "Cast float16->float32: 3 bit-op passes": (
            "Cast float16->float32",
            lambda: casts._float16_to_float32(half, out),
        ),
        "Cast float32->int32: min, max, convert": ("Cast float32->int32", to_integer),
        "ThresholdedRelu: compare, widen, and": ("ThresholdedRelu", thresholded_relu),
        "HardSigmoid: mul, add, clip": ("HardSigmoid", kernel(activations.hard_sigmoid, 0.2, 0.5)),
        "HardSwish: mul, add, clip, mul": ("HardSwish", kernel(activations.hard_swish)),
        "Softsign: abs, add, divide": ("Softsign", kernel(activations.softsign)),
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


def _timed(steps: dict[str, Step], rounds: int) -> dict[str, float]:
    """Each step's median thread time in ms, the steps run in turn in every round."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    scope = run_scope()
    for _ in range(rounds):
        for name, step in steps.items():
            with scope:  # as in a run: NumPy's errors ignored, the cheap ufunc buffers
                begin = time.thread_time()
                step()
                times[name].append(time.thread_time() - begin)
    return {name: statistics.median(seconds) * 1e3 for name, seconds in times.items()}


def main(size: str = "medium") -> None:
    sequences = _sequences(*bench_ops.FLAT[size], bench_ops.IMAGE[size])
    steps: dict[str, Step] = {}
    for name, (case_name, sequence) in sequences.items():
        steps[f"floor {name}"] = sequence
        if f"ort {case_name}" not in steps:
            pattern = f"^{case_name}$"
            (case,) = [c for c in bench_ops.selected((size,), pattern) if c.size == size]
            steps[f"onemodel {case_name}"], steps[f"ort {case_name}"] = bench_ops._sessions(case)
    median = _timed(steps, 200 if size == "medium" else 15)
    print(f"{'':50s} {'floor ms':>9s} {'onemodel':>9s} {'ort ms':>8s} {'floor/ort':>9s} om/ort")
    for name, (case_name, _) in sequences.items():
        floor, theirs = median[f"floor {name}"], median[f"ort {case_name}"]
        ours = median[f"onemodel {case_name}"]
        print(
            f"{size:6s} {name:43s} {floor:9.4f} {ours:9.4f} {theirs:8.4f} "
            f"{floor / theirs:9.2f} {ours / theirs:6.2f}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
