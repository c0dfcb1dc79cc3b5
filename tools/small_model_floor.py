"""What bounds the small transformer test model (tests/models/transformer.onnx: input_ids
2x7, d_model 64, two encoder layers) on NumPy: the fewest ufunc and BLAS calls its nodes
need, on arrays of its shapes, timed side by side with onemodel's and onnxruntime's whole
runs (thread CPU time, runs in turn, medians).

    python tools/small_model_floor.py

Every array here has a few hundred values, so each call costs its dispatch (0.3-1 us) and
nothing else: the floor is the call count. The sequence is onemodel's own where its kernels
are minimal (the bound LayerNormalization and Attention of backends/small_rows.py and
plain_attention.py, a product and a bias per projection, the materialized Transposes); Gelu is
counted as its tanh form (NumPy has no erf), the least any NumPy Gelu needs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime

import onemodel
from onemodel.backends.plain_attention import PlainAttention
from onemodel.backends.small_rows import SmallRows

MODEL = Path(__file__).resolve().parent.parent / "tests" / "models" / "transformer.onnx"
ROWS, WIDTH, HEADS, FEED = 14, 64, 4, 128


def _layer_calls(rng: np.random.Generator) -> list[Callable[[], object]]:
    """One encoder layer as the fewest calls: projections, head transposes, attention,
    residuals, two LayerNorms and the feed-forward block."""
    f = np.float32

    def matrix(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(f)

    x, w, bias = matrix(ROWS, WIDTH), matrix(WIDTH, WIDTH), matrix(ROWS, WIDTH)
    q, k, v, y = (np.empty((ROWS, WIDTH), f) for _ in range(4))
    heads = [np.empty((2, HEADS, 7, 16), f) for _ in range(4)]
    attention = PlainAttention(np, heads[0].shape, heads[1].shape, 0.5)
    norm = SmallRows(np, ROWS, WIDTH, 1e-5, matrix(ROWS, WIDTH), matrix(ROWS, WIDTH))
    w1, w2, b1 = matrix(WIDTH, FEED), matrix(FEED, WIDTH), matrix(ROWS, FEED)
    hidden, cube = np.empty((ROWS, FEED), f), np.empty((ROWS, FEED), f)
    calls: list[Callable[[], object]] = []
    for target in (q, k, v):
        calls += [lambda t=target: np.dot(x, w, out=t), lambda t=target: np.add(t, bias, out=t)]
    for source, target in zip((q, k, v), heads, strict=False):
        view = source.reshape(2, 7, HEADS, 16).transpose(0, 2, 1, 3)
        calls.append(lambda s=view, t=target: np.copyto(t, s))
    calls.append(lambda: attention(heads[0], heads[1], heads[2], heads[3]))
    calls.append(lambda: np.copyto(y.reshape(2, 7, HEADS, 16), heads[3].transpose(0, 2, 1, 3)))
    calls += [lambda: np.dot(y, w, out=q), lambda: np.add(q, bias, out=q)]
    calls += [lambda: np.add(q, x, out=q), lambda: norm(q, k)]
    calls += [lambda: np.dot(k, w1, out=hidden), lambda: np.add(hidden, b1, out=hidden)]
    calls += [  # 0.5·h·(1 + tanh(√(2/π)·(h + 0.044715·h³)))
        lambda: np.multiply(hidden, hidden, out=cube),
        lambda: np.multiply(cube, f(0.044715), out=cube),
        lambda: np.add(cube, f(1), out=cube),
        lambda: np.multiply(cube, hidden, out=cube),
        lambda: np.multiply(cube, f(0.7978846), out=cube),
        lambda: np.tanh(cube, out=cube),
        lambda: np.add(cube, f(1), out=cube),
        lambda: np.multiply(cube, hidden, out=hidden),
        lambda: np.multiply(hidden, f(0.5), out=hidden),
    ]
    calls += [lambda: np.dot(hidden, w2, out=v), lambda: np.add(v, bias, out=v)]
    calls += [lambda: np.add(v, k, out=v), lambda: norm(v, y)]
    return calls


def _floor_calls() -> list[Callable[[], object]]:
    rng = np.random.default_rng(0)
    table = rng.standard_normal((100, WIDTH)).astype(np.float32)
    ids = rng.integers(0, 100, ROWS)
    embedded = np.empty((ROWS, WIDTH), np.float32)
    out = np.empty_like(embedded)
    norm = SmallRows(np, ROWS, WIDTH, 1e-5, embedded, embedded)
    calls: list[Callable[[], object]] = [
        lambda: table.take(ids, axis=0, out=embedded, mode="clip"),
        lambda: np.multiply(embedded, np.float32(8), out=embedded),
    ]
    for _ in range(2):
        calls += _layer_calls(rng)
    calls.append(lambda: norm(embedded, out))
    return calls


def main() -> None:
    feeds = {
        name: value
        for name, value in np.load(MODEL.with_suffix(".inputs.npz")).items()
        if not name.startswith("output:")
    }
    ours = onemodel.Session.load(str(MODEL), onemodel.SessionOptions(intra_op_threads=1))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    theirs = onnxruntime.InferenceSession(str(MODEL), options, providers=["CPUExecutionProvider"])
    calls = _floor_calls()

    def floor() -> None:
        for call in calls:
            call()

    runs = {
        "onnxruntime run": lambda: theirs.run(None, feeds),
        "onemodel run": lambda: ours.run(None, feeds),
        "NumPy floor": floor,
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    with np.errstate(all="ignore"):
        for _ in range(300):
            for name, run in runs.items():
                begin = time.thread_time()
                run()
                times[name].append(time.thread_time() - begin)
    reference = statistics.median(times["onnxruntime run"])
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{name:28s} median {median * 1e3:7.4f} ms  ({median / reference:.2f}x onnxruntime)")


if __name__ == "__main__":
    main()
