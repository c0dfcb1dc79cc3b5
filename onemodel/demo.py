"""`onemodel demo`: build the example MLP and run it through the kernel seam.

Until the graph runtime exists this wires the MLP's five nodes to kernels by hand; it shows
that a fresh install has a working backend and checks the result against plain NumPy.
"""

from __future__ import annotations

import json
import time

import numpy as np
from onnx import numpy_helper

from onemodel.backends import BinaryOp, KernelPaths, Kernels, UnaryOp
from onemodel.examples import mlp_model
from onemodel.tensors import Tensor


def run_mlp(kernels: Kernels, weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    def dense(inputs: Tensor, weight: str, bias: str) -> Tensor:
        w = kernels.from_host(weights[weight])
        product = Tensor.empty((inputs.shape[0], w.shape[1]), inputs.dtype, memory=w.memory)
        kernels.matmul(inputs, w, product)
        b = kernels.from_host(weights[bias]).broadcast_to(product.shape)
        kernels.binary(BinaryOp.ADD, product, b, product)
        return product

    hidden = dense(kernels.from_host(x), "W1", "b1")
    kernels.unary(UnaryOp.RELU, hidden, hidden)
    return kernels.to_host(dense(hidden, "W2", "b2"))


def main(backend: str | None = None, batch: int = 8) -> dict:
    model = mlp_model()
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    kernels = KernelPaths.get(backend) if backend else KernelPaths.best()
    x = np.random.default_rng(1).standard_normal((batch, weights["W1"].shape[0]), np.float32)
    start = time.perf_counter()
    y = run_mlp(kernels, weights, x)
    elapsed_ms = (time.perf_counter() - start) * 1e3
    expected = np.maximum(x @ weights["W1"] + weights["b1"], 0) @ weights["W2"] + weights["b2"]
    report = {
        "model": model.graph.name,
        "backend": kernels.name,
        "input_shape": list(x.shape),
        "output_shape": list(y.shape),
        "max_abs_error_vs_numpy": float(np.abs(y - expected).max()),
        "ms": round(elapsed_ms, 3),
    }
    print(json.dumps(report))
    return report
