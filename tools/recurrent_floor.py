"""What bounds the fast LSTM and GRU loops on NumPy: a step's matrix product and its ufunc
calls against onnxruntime's whole node, timed side by side (thread CPU time, runs in turn).

    python tools/recurrent_floor.py [REGEX]   (default: every LSTM and GRU layer case)

A step of backends/recurrent.py is one BLAS product (a gemv h·R for one batch entry, a GEMM
[R | W | bias]·[h; x_t; 1] for a batch) and a fixed number of ufunc calls (LSTM 8, GRU with
linear_before_reset 10; one fewer for a batch, whose product adds the input projection), each
on a few hundred to a few thousand elements, so each costs about its call overhead. The rows
printed per case are onnxruntime's node, onemodel's session, the fused cells alone (no
session), the products alone on held buffers (what NumPy's BLAS needs at best) and the cells
with their products skipped (the ufunc calls, the loop and its set-up): products + calls is
the floor of that call sequence.
"""

from __future__ import annotations

import statistics
import sys

import numpy as np
from normalization_floor import _timed

from onemodel import bench_ops
from onemodel.backends import recurrent

PRODUCTS = ("dot", "matmul")


class _Skipping:
    """NumPy with its matrix products made no-ops: the fused cells' loop with only its ufunc
    calls (a skipped product costs a Python call, about 0.05 µs)."""

    def __getattr__(self, name: str) -> object:
        return _nothing if name in PRODUCTS else getattr(np, name)


def _nothing(*args: object, **kwargs: object) -> None:
    return None


def _cells(case: bench_ops.OpCase) -> recurrent.Cells:
    if case.op == "LSTM":
        return recurrent.LSTMCells()
    return recurrent.GRUCells(bool(case.attrs.get("linear_before_reset", 0)))


def _primitives(case: bench_ops.OpCase) -> dict[str, object]:
    """At the case's shapes: the fused cells, their products alone on held buffers (BLAS's
    floor), and the cells with their products skipped (the ufunc calls and the loop)."""
    steps, batch, _ = case.inputs[0].shape
    w, r, b = (case.weights[k] for k in ("W", "R", "B"))
    directions, units, hidden = r.shape[0], r.shape[1], r.shape[2]
    cells = _cells(case)
    weights = [cells.prepare(np, w[d], r[d], b[d, :units], b[d, units:]) for d in range(directions)]
    x = bench_ops.case_feeds(case)["x0"]
    y = np.zeros((steps, directions, batch, hidden), np.float32)
    initial = [np.zeros((batch, hidden), np.float32)] * cells.states
    pool: dict[tuple, np.ndarray] = {}

    def scratch(shape: tuple[int, ...], dtype: object) -> np.ndarray:
        # zeros: a skipped call leaves its output as it was, and subnormals would slow BLAS
        return pool.setdefault((shape, np.dtype(dtype).str), np.zeros(shape, dtype))

    def fused(xp: object) -> object:
        def run() -> None:
            for d in range(directions):
                cells.run(xp, x, weights[d], initial, y[:, d], d == 1, scratch)

        return run

    if batch == 1:  # the projection GEMM, then a gemv per step
        extended = np.ones((steps, x.shape[2] + 1), np.float32)
        matrices = [weight.rows[0] for weight in weights]
        operand = np.ones((1, matrices[0].shape[0]), np.float32)
        out = np.empty((1, matrices[0].shape[1]), np.float32)
        projected = np.empty((steps, weights[0].inputs.shape[0]), np.float32)

        def products() -> None:
            for weight in weights:
                np.matmul(extended, weight.inputs.T, out=projected)
            for matrix in matrices * steps:
                np.dot(operand, matrix, out)
    else:  # a GEMM per step
        matrices = [weight.columns[0] for weight in weights]
        operand = np.ones((matrices[0].shape[1], batch), np.float32)
        out = np.empty((matrices[0].shape[0], batch), np.float32)

        def products() -> None:
            for matrix in matrices * steps:
                np.matmul(matrix, operand, out)

    return {"fused cells": fused(np), "products": products, "ufunc calls": fused(_Skipping())}


def main(pattern: str = "^(LSTM|GRU) ") -> None:
    for case in bench_ops.selected(("layer",), pattern):
        ours, theirs = bench_ops._sessions(case)
        steps = {"onnxruntime": theirs, "onemodel": ours, **_primitives(case)}
        times = _timed(steps, 30)
        median = {name: statistics.median(seconds) * 1e3 for name, seconds in times.items()}
        base = median["onnxruntime"]
        for name, value in median.items():
            print(f"{case.name:38s} {name:12s} {value:7.3f} ms  {value / base:5.2f}x")
        floor = median["products"] + median["ufunc calls"]
        print(f"{case.name:38s} {'floor':12s} {floor:7.3f} ms  {floor / base:5.2f}x")


if __name__ == "__main__":
    main(*sys.argv[1:])
