"""What bounds fast-mode pooling on NumPy: the primitives a 3×3/2 window needs against
onnxruntime's whole node and onemodel's kernel, timed side by side (thread CPU time, runs in
turn, min and median).

    python tools/pooling_floor.py [medium|large]

A stride-2 window reads every other input column, and NumPy reads one value in two only in a
strided loop: at best one strided copy of the input into its two column phases (or strided
ufunc reads, which measure slower), or, for float32, a truncating uint64→uint32 cast of the
input viewed as column pairs (numpy_cpu/pair_pool.py), about half the copy. After that the
3×3 max is at least four contiguous passes (two per axis, separably) over half and quarter
sized arrays; the row-major sums of AveragePool (opset 19 on) cannot be separated: eight adds
over the four row and column phases, whose casts pay a NumPy inner loop per (strided) row.
The rows printed are those steps one by one, onemodel's kernels, and onnxruntime's nodes.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from onemodel import bench_ops
from onemodel.backends import KernelPaths
from onemodel.backends.numpy_cpu.pair_pool import PairMaxPool, PairSumPool

SHAPES = {"medium": (1, 64, 64, 64), "large": (1, 64, 256, 256)}


def main(size: str = "medium") -> None:
    shape = SHAPES[size]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    half = np.empty(flat.size // 2, np.float32)
    other = np.empty_like(half)
    out = np.empty((*shape[:2], shape[2] // 2, shape[3] // 2), np.float32)
    kernels = KernelPaths.get("numpy")
    pool = ([3, 3], [2, 2], [1, 1], [1, 1])
    nodes = {
        name: bench_ops._sessions(
            next(c for c in bench_ops.selected((size,), f"^{name}") if c.size == size)
        )[1]
        for name in ("MaxPool 3x3/2", "AveragePool 3x3/2")
    }
    pair_max, pair_sum = PairMaxPool(shape), PairSumPool(shape, np.float32(9))
    rows = x[:, :, 0::2].reshape(-1, shape[3])
    quarter = np.empty((rows.shape[0], shape[3] // 2), np.float32)
    steps = {
        "onnxruntime MaxPool 3x3/2 node": nodes["MaxPool 3x3/2"],
        "onnxruntime AveragePool 3x3/2 node": nodes["AveragePool 3x3/2"],
        "onemodel max_pool_arrays": lambda: kernels.max_pool_arrays(x, out, *pool),
        "onemodel sum_pool_arrays, row-major": lambda: kernels.sum_pool_arrays(
            x, out, *pool, row_major=True
        ),
        "onemodel PairMaxPool": lambda: pair_max(x, out),
        "onemodel PairSumPool": lambda: pair_sum(x, out),
        "one column phase: copy of x[..., 0::2]": lambda: np.copyto(half, flat[0::2]),
        "one column phase: uint64->uint32 cast": lambda: np.copyto(
            half.view(np.uint32), flat.view(np.uint64), casting="unsafe"
        ),
        "a row and column phase: cast of rows": lambda: np.copyto(
            quarter.view(np.uint32), rows.view(np.uint64), casting="unsafe"
        ),
        "one contiguous max over half of x": lambda: np.maximum(half, other, out=other),
        "one contiguous add over a quarter": lambda: np.add(
            half[: half.size // 2], other[: half.size // 2], out=other[: half.size // 2]
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(40 if size == "medium" else 10):
        for name, step in steps.items():
            begin = time.thread_time()
            step()
            times[name].append(time.thread_time() - begin)
    for name, seconds in times.items():
        print(
            f"{size:6s} {name:40s} min {min(seconds) * 1e3:8.3f} ms  "
            f"median {statistics.median(seconds) * 1e3:8.3f} ms"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
