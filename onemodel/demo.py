"""`onemodel demo`: build the example MLP, run it in a Session, and check it against NumPy."""

from __future__ import annotations

import time

import numpy as np
from onnx import numpy_helper

from onemodel.examples import mlp_model
from onemodel.graph.importer import model_from_proto
from onemodel.session import Session, SessionOptions


def main(backend: str | None = None, batch: int = 8) -> dict:
    proto = mlp_model()
    weights = {init.name: numpy_helper.to_array(init) for init in proto.graph.initializer}
    started = time.perf_counter()
    session = Session.create(model_from_proto(proto), SessionOptions(backend=backend))
    load_ms = (time.perf_counter() - started) * 1e3
    x = np.random.default_rng(1).standard_normal((batch, weights["W1"].shape[0]), np.float32)
    started = time.perf_counter()
    (y,) = session.run(None, {"x": x})
    run_ms = (time.perf_counter() - started) * 1e3
    y = session.kernels.memory.to_host(y)
    expected = np.maximum(x @ weights["W1"] + weights["b1"], 0) @ weights["W2"] + weights["b2"]
    return {
        "model": proto.graph.name,
        "backend": session.backend,
        "input_shape": list(x.shape),
        "output_shape": list(y.shape),
        "max_abs_error_vs_numpy": float(np.abs(y - expected).max()),
        "load_ms": round(load_ms, 3),
        "run_ms": round(run_ms, 3),
    }
