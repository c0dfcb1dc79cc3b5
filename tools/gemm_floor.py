"""What bounds MatMul and Gemm on NumPy: NumPy's own BLAS product of the layer's operands
against onnxruntime's whole node, timed side by side (thread CPU time, runs in turn).

    python tools/gemm_floor.py [REGEX]   (of bench ops' MatMul and Gemm layer cases)

A fast-mode MatMul or Gemm is one BLAS call (np.matmul for a batch of matrices, np.dot for
one) into the output, plus the bias for Gemm: the product alone, on held operands and output,
is what NumPy's BLAS needs at best. Its rate depends on the kernels OpenBLAS runs: it reads
OPENBLAS_CORETYPE once, when NumPy loads it (this tool prints the value and the kernels
threadpoolctl reports), so compare a run with it as the environment sets it against one with
it unset.
"""

from __future__ import annotations

import os
import statistics
import sys

import numpy as np
from normalization_floor import _timed
from threadpoolctl import threadpool_info

from onemodel import bench_ops


def _product(case: bench_ops.OpCase):
    """The case's product alone, into a held output: np.dot of the rows against a weight
    matrix (leading axes flattened), np.matmul for a batch of both operands."""
    feeds = bench_ops.case_feeds(case)
    a = feeds["x0"]
    b = feeds["x1"] if "x1" in feeds else next(iter(case.weights.values()))
    if case.op == "Gemm" and case.attrs.get("transB"):
        b = b.T
    out = np.empty((*a.shape[:-1], b.shape[-1]), np.float32)
    if b.ndim == 2:
        rows, flat = a.reshape(-1, a.shape[-1]), out.reshape(-1, b.shape[-1])
        return lambda: np.dot(rows, b, out=flat)
    return lambda: np.matmul(a, b, out=out)


def main(pattern: str = "") -> None:
    kernels = sorted({str(i["architecture"]) for i in threadpool_info() if "architecture" in i})
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')!r}; BLAS kernels: {kernels}")
    for case in bench_ops.selected(("layer",), pattern):
        if case.op not in ("MatMul", "Gemm"):
            continue
        ours, theirs = bench_ops._sessions(case)
        steps = {"onnxruntime": theirs, "onemodel": ours, "product alone": _product(case)}
        median = {
            name: statistics.median(seconds) * 1e3 for name, seconds in _timed(steps, 30).items()
        }
        base = median["onnxruntime"]
        for name, value in median.items():
            print(f"{case.name:38s} {name:14s} {value:8.3f} ms  {value / base:5.2f}x")


if __name__ == "__main__":
    main(*sys.argv[1:])
