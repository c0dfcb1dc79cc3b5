"""CPU time of exact mode's products beyond MatMul, Gemm and Conv, as one-node sessions.

Prints, as JSON, the median per-thread CPU milliseconds of 7 exact runs (NumPy backend, one
BLAS thread) of ConvTranspose, Attention, Einsum, DFT and AffineGrid at typical shapes. To
compare two definitions, run it against each tree in turn from this checkout (the models are
built by this tree's tests/operator_harness.py, the runtime is whatever PYTHONPATH holds):

    for t in /path/to/other/tree $PWD $PWD/../other $PWD; do
        OPENBLAS_NUM_THREADS=1 PYTHONPATH=$t python tools/exact_products_cost.py; done
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from operator_harness import one_node_model

from onemodel import ExecutionMode, Session, SessionOptions
from onemodel.graph.importer import model_from_proto


def _cases() -> dict[str, tuple[str, list, dict, int]]:
    rng = np.random.default_rng(0)

    def f(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    heads = (1, 12, 128, 64)
    return {
        "ConvTranspose 16→16 2×2/2 on 160×160": (
            "ConvTranspose", [f(1, 16, 160, 160), f(16, 16, 2, 2)], {"strides": [2, 2]}, 17
        ),
        "ConvTranspose 64→32 4×4/2 pad 1 on 40×40": (
            "ConvTranspose",
            [f(1, 64, 40, 40), f(64, 32, 4, 4)],
            {"strides": [2, 2], "pads": [1, 1, 1, 1]},
            17,
        ),
        "Attention (1, 12, 128, 64)": ("Attention", [f(*heads), f(*heads), f(*heads)], {}, 23),
        "Einsum bhqd,bhkd->bhqk (1, 12, 128, 64)": (
            "Einsum", [f(*heads), f(*heads)], {"equation": "bhqd,bhkd->bhqk"}, 12
        ),
        "DFT real (8, 512, 1)": ("DFT", [f(8, 512, 1)], {}, 20),
        "AffineGrid (4, 2, 3) to 128×128": (
            "AffineGrid", [f(4, 2, 3), np.array([4, 3, 128, 128], dtype=np.int64)], {}, 20
        ),
    }  # fmt: skip


def main() -> None:
    results = {}
    options = SessionOptions(mode=ExecutionMode.EXACT, backend="numpy")
    with threadpool_limits(1):
        for name, (op_type, inputs, attributes, opset) in _cases().items():
            model, feeds = one_node_model(op_type, inputs, attributes, opset=opset)
            session = Session.create(model_from_proto(model), options)
            session.run(None, feeds)
            seconds = []
            for _ in range(7):
                start = time.thread_time()
                session.run(None, feeds)
                seconds.append(time.thread_time() - start)
            results[name] = round(statistics.median(seconds) * 1e3, 1)
    print(json.dumps(results, ensure_ascii=False))


if __name__ == "__main__":
    main()
