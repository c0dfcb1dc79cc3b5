"""A Gemm with transB = 1 and a constant B read by it alone takes Bᵀ, laid out contiguously, with
transB = 0: the weight of PyTorch's Linear layers as the TorchScript exporter writes them.

OpenBLAS multiplies a few rows by a transposed view of a weight at half the speed of the
same product with the weight laid out [K, N] (Intel Xeon, 1 thread, [8, 2048]·[2048, 1000]:
1.18 against 0.65 ms with the SkylakeX kernels, 0.86 against 0.64 with Haswell's; equal for
one row, and 3% apart at 128), so the transpose is paid once, here, as onnxruntime prepacks
its weights. A B that another node reads too is left alone (a second copy of a shared weight
costs its size), and so is a float16 one (its product runs widened to float32 between casts, bit
for bit onnxruntime's in tests/test_float16_vs_onnxruntime.py). The product's summation order
may change, so fast mode only.
"""

from __future__ import annotations

import numpy as np

from onemodel.graph.passes.base import (
    GraphPass,
    OptimizationLevel,
    PassContext,
    attribute,
    is_onnx,
)
from onemodel.graph.passes.pass_graph import PassGraph

_BLAS_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


class TransposeGemmWeight(GraphPass):
    name = "transpose-gemm-weight"
    min_level = OptimizationLevel.BASIC
    preserves_bits = False

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for gemm in graph:
            if not is_onnx(gemm, "Gemm") or not attribute(gemm, "transB", 0):
                continue
            weight = graph.constant(gemm.inputs[1])
            if weight is None or weight.ndim != 2 or weight.dtype not in _BLAS_TYPES:
                continue
            if graph.only_reader(gemm.inputs[1]) is None:
                continue
            inputs = list(gemm.inputs)
            inputs[1] = graph.add_constant("gemm_weight_t", np.ascontiguousarray(weight.T))
            attributes = {**gemm.info.attributes, "transB": 0}
            rewritten = graph.make_node(
                gemm.info, "Gemm", inputs, gemm.outputs, attributes, opset=gemm.info.opset
            )
            graph.replace([gemm], [rewritten])
