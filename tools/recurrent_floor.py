"""What bounds the fast LSTM and GRU loops on NumPy: a step's matrix product and its ufunc
calls against onnxruntime's whole node, timed side by side (thread CPU time, runs in turn).

    python tools/recurrent_floor.py [REGEX]   (of bench ops' LSTM and GRU layer cases, and
                                               the CRNN OCR model's layer shape)

A step of backends/recurrent.py is one or a few BLAS products (a gemv h·R for one batch
entry; for a batch GEMMs M·H, over the column [x_t; 1; h] unless the input is projected) and a
fixed number of ufunc calls (LSTM 8, GRU with linear_before_reset 10; one fewer where the
products add the input projection), each on a few hundred to a few thousand elements, so each
costs about its call overhead. A bidirectional layer over one batch entry whose recurrence
matrices fit `recurrent.JOINT_BYTES` runs both directions in one loop (`Cells.run_both`): a
step is then one stacked `matmul` per product and one direction's ufunc calls. The rows
printed per case are onnxruntime's node, onemodel's session, the fused cells alone (no
session), the products alone on held buffers (with the projection GEMM where there is one:
what NumPy's BLAS needs at best) and the cells with their products skipped (the ufunc calls,
the loop and its set-up): products + calls is the
floor of that call sequence.
"""

from __future__ import annotations

import re
import statistics
import sys

import numpy as np
from normalization_floor import _timed

from onemodel import bench_ops
from onemodel.backends import recurrent

PRODUCTS = ("dot", "matmul")


def _crnn_cases() -> list[bench_ops.OpCase]:
    """The bidirectional layers of the bench set's CRNN OCR model (crnn_ocr.onnx: T = 32, one
    entry, 256 inputs, 128 hidden units), and a GRU of the same shape."""
    cases = []
    for op, gates in (("LSTM", 4), ("GRU", 3)):
        attrs = {"hidden_size": 128, "direction": "bidirectional"}
        if op == "GRU":
            attrs["linear_before_reset"] = 1
        cases.append(
            bench_ops.OpCase(
                f"{op} T32 I256 H128 bidirectional b1 (CRNN)",
                "layer",
                op,
                [bench_ops.Input((32, 1, 256))],
                attrs,
                {
                    "W": bench_ops._weight(2, gates * 128, 256),
                    "R": bench_ops._weight(2, gates * 128, 128),
                    "B": bench_ops._weight(2, 2 * gates * 128),
                },
            )
        )
    return cases


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
    joint = None  # both directions in one loop, as the fast backend runs them here
    if directions == 2 and batch == 1 and cells.joins(hidden, 4):
        joint = recurrent.LayerWeights(cells, tuple(weights)).joint

    def scratch(shape: tuple[int, ...], dtype: object) -> np.ndarray:
        # zeros: a skipped call leaves its output as it was, and subnormals would slow BLAS
        return pool.setdefault((shape, np.dtype(dtype).str), np.zeros(shape, dtype))

    def fused(xp: object) -> object:
        def run() -> None:
            if joint is not None:
                cells.run_both(xp, x, joint, [initial] * 2, y, scratch)
                return
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
        projected = np.empty((steps * batch, weights[0].inputs.shape[1]), np.float32)
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

    if joint is not None:  # a step's products: one matmul of a stack per product
        operand = np.ones((1, 2, 1, hidden + cells.ones_row), np.float32)
        call = np.matmul
        each = [
            (operand[..., : m.shape[2]], m, np.empty((m.shape[0], 2, 1, hidden), np.float32))
            for m in joint.rows
        ]

    def products() -> None:
        if extended is not None:
            for weight in weights:
                np.matmul(extended, weight.inputs, out=projected)
        for _ in range(steps):
            for a, b, out in each:
                call(a, b, out)

    return {"fused cells": fused(np), "products": products, "ufunc calls": fused(_Skipping())}


def main(pattern: str = "") -> None:
    wanted = re.compile(pattern, re.IGNORECASE)
    cases = bench_ops.selected(("layer",), pattern) + [
        case for case in _crnn_cases() if wanted.search(case.name)
    ]
    for case in cases:
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
