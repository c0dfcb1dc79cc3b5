"""What bounds the fast LSTM and GRU loops on NumPy: a step's matrix product and its ufunc
calls against onnxruntime's whole node, timed side by side (thread CPU time, runs in turn).

    python tools/recurrent_floor.py [REGEX]   (of bench ops' LSTM and GRU layer cases)

A step of backends/recurrent.py is one or a few BLAS products (a gemv h·R for one batch
entry; for a batch GEMMs M·H, over the column [x_t; 1; h] unless the input is projected) and a
fixed number of ufunc calls (LSTM 8, GRU with linear_before_reset 10; one fewer where the
products add the input projection), each on a few hundred to a few thousand elements, so each
costs about its call overhead. The rows printed per case are onnxruntime's node, onemodel's
session, the fused cells alone (no session), the products alone on held buffers (with the
projection GEMM where there is one: what NumPy's BLAS needs at best) and the cells with
their products skipped (the ufunc calls, the loop and its set-up): products + calls is the
floor of that call sequence.
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

    def held(left: np.ndarray, right: np.ndarray) -> tuple:
        """left·right into a held output."""
        out = np.empty((left.shape[0], right.shape[1]), np.float32)
        return left, right, out

    # Each step's products on held buffers, in the walk's form (`Cells.projects`).
    matrices = [m for weight in weights for m in weight.rows]
    if cells.projects(batch, x.shape[2], hidden):
        extended = np.ones((steps * batch, x.shape[2] + 1), np.float32)
        projected = np.empty((steps * batch, weights[0].inputs.shape[0]), np.float32)
        if batch == 1:  # gemvs row·M
            call = np.dot
            each = [held(np.ones((1, m.shape[0]), np.float32), m) for m in matrices]
        else:
            call = np.matmul
            each = [held(m.T, np.ones((m.shape[0], batch), np.float32)) for m in matrices]
    else:
        extended = projected = None
        call = np.matmul
        columns = [m for weight in weights for m in weight.columns]
        each = [held(m, np.ones((m.shape[1], batch), np.float32)) for m in columns]

    def products() -> None:
        if extended is not None:
            for weight in weights:
                np.matmul(extended, weight.inputs.T, out=projected)
        for _ in range(steps):
            for a, b, out in each:
                call(a, b, out)

    return {"fused cells": fused(np), "products": products, "ufunc calls": fused(_Skipping())}


def main(pattern: str = "") -> None:
    for case in bench_ops.selected(("layer",), pattern):
        if case.op not in ("LSTM", "GRU"):
            continue
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
