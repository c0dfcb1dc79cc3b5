"""What bounds fast-mode normalization on NumPy: the passes each kernel is made of against
onnxruntime's whole node, timed side by side (thread CPU time, runs in turn, min and median).

    python tools/normalization_floor.py [medium|large]

onnxruntime reads x twice (its statistics, then the output) and writes the output once, in
one fused loop per row. NumPy has no fused multiply-add ufunc, so each of (x − mean), · r (the
per-row 1/√(var + ε)), · γ and + β is a read-and-write pass of its own; the statistics are two
read-only BLAS passes (a GEMV with ones for the sums, a batch of row dot products for the
squared deviations, which must be taken after centring: E[x²] − E[x]² in float32 loses the
variance of offset data). LayerNormalization is therefore at least 2 reads + 4 read-write
passes, InstanceNormalization 2 + 3, RMS normalization 1 + 2, BatchNormalization (constant
statistics) 2 read-write passes. The rows printed are those primitives on preallocated
arrays, the sum of a kernel's passes (its floor), onemodel's session and onnxruntime's node.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from onemodel import bench_ops
from onemodel.backends.broadcasting import ufunc_into
from onemodel.backends.fp_errors import run_scope

STEPS = (  # the primitives each kernel's passes are, in the order of PASSES' counts
    "read: row sums, GEMV with ones",
    "read: row dot products, batched matmul",
    "read-write: out = x - per-row value",
    "read-write: out *= per-column value",
)
PASSES = {  # kernel: how many of each step (its one pass from x to out, then in place)
    "LayerNormalization": (1, 1, 1, 3),
    "InstanceNormalization": (1, 1, 1, 2),
    "SimplifiedLayerNormalization": (0, 1, 1, 1),
    "BatchNormalization": (0, 0, 1, 1),
}


def _timed(steps: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in steps}
    scope = run_scope()
    for _ in range(rounds):
        for name, step in steps.items():
            with scope:  # as in a run: NumPy's errors ignored, the cheap ufunc buffers
                begin = time.thread_time()
                step()
                times[name].append(time.thread_time() - begin)
    return times


def main(size: str = "medium") -> None:
    rows, cols = bench_ops.FLAT[size]
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    out = np.empty_like(x)
    ones = np.ones(cols, np.float32)
    per_row = np.random.default_rng(1).standard_normal((rows, 1)).astype(np.float32)
    per_column = np.random.default_rng(2).standard_normal(cols).astype(np.float32)
    primitives = (
        lambda: np.matmul(x, ones),
        lambda: np.matmul(x[:, None, :], x[:, :, None]),
        lambda: ufunc_into(np, np.subtract, x, per_row, out=out),
        lambda: ufunc_into(np, np.multiply, out, per_column, out=out),
    )
    steps: dict[str, Callable[[], object]] = dict(zip(STEPS, primitives, strict=True))
    nodes = {}
    for name in PASSES:
        pattern = f"^{name}$"
        (case,) = [c for c in bench_ops.selected((size,), pattern) if c.size == size]
        ours, theirs = bench_ops._sessions(case)
        nodes[name] = case
        steps[f"onemodel {name}"] = ours
        steps[f"onnxruntime {name}"] = theirs
    times = _timed(steps, 100 if size == "medium" else 10)
    median = {name: statistics.median(seconds) * 1e3 for name, seconds in times.items()}
    for name, seconds in times.items():
        print(
            f"{size:6s} {name:48s} min {min(seconds) * 1e3:7.3f} ms  median {median[name]:7.3f} ms"
        )
    for name, counts in PASSES.items():
        elements = int(np.prod(nodes[name].inputs[0].shape))
        scale = elements / (rows * cols)
        floor = sum(n * median[step] for n, step in zip(counts, STEPS, strict=True)) * scale
        reads, writes = sum(counts[:2]), sum(counts[2:])
        theirs = median[f"onnxruntime {name}"]
        print(
            f"{size:6s} {name:30s} floor {reads}R+{writes}RW = {floor:7.3f} ms "
            f"({floor / theirs:.2f}x onnxruntime), onemodel "
            f"{median[f'onemodel {name}'] / theirs:.2f}x"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
