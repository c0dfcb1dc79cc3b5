"""Bias fusions of onnxruntime's transformer optimizer that onnxruntime itself only runs on GPUs:
BiasAdd (model_type "unet", on by default there) and GemmFastGelu (`enable_gemm_fast_gelu`).

onnxruntime's CPU provider has no kernel for either, so a model holding them loads nowhere on a
CPU but here; both are defined by the unfused graphs they replace (their tests compare with
onnxruntime running those): BiasAdd = X + bias + skip, GemmFastGelu = FastGelu(X·W + bias).

Exact mode: BiasAdd is (X + bias) + skip in float64 from exactly widened inputs, rounded once;
GemmFastGelu the bits of its unfused sequence (the exact matmul rounded once, then FastGelu's
exact recipe with the bias).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.operators.base import (
    MICROSOFT,
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.binary import check_same_type
from onemodel.graph.operators.contrib import FastGelu
from onemodel.graph.operators.matmul import as_matrices, matmul_shape
from onemodel.graph.operators.unary import FLOATS, widened


class BiasAdd(Operator):
    """X (N, S, C) + bias (C,) + skip (N, S, C), summed widened and rounded once."""

    in_place_input = 0
    supports_exact = True

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS)
        check_same_type(ctx, (0, 1, 2))
        x = ctx.shape(0)
        if len(x) != 3:
            raise self.node.bad_input(f"BiasAdd: X of shape {x} is not (N, S, C)",
                                      self.node.inputs[0])  # fmt: skip
        if ctx.shape(1) != (x[2],):
            raise self.node.bad_input(f"BiasAdd: bias of shape {ctx.shape(1)} is not ({x[2]},)",
                                      self.node.inputs[1])  # fmt: skip
        if ctx.shape(2) != x:
            raise self.node.bad_input(f"BiasAdd: skip of shape {ctx.shape(2)} is not X's {x}",
                                      self.node.inputs[2])  # fmt: skip
        return [ctx.output(ctx.dtype(0), x)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        if ctx.exact:
            xp = ctx.kernels.xp
            x, bias, skip = (widen(xp, value) for value in inputs[:3])
            store(xp, outputs[0], (x + bias) + skip)
            return
        xp = ctx.xp
        x, bias, skip = (widened(xp, value) for value in inputs[:3])
        with np.errstate(all="ignore"):
            xp.copyto(outputs[0], x + bias + skip, casting="unsafe")


class GemmFastGelu(Operator):
    """FastGelu(X · W + bias): MatMul's shapes and kernel, then FastGelu's formula."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.gelu = FastGelu(NodeInfo(node.name, "FastGelu", MICROSOFT, 1, node.inputs[:1],
                                      node.outputs, {}))  # fmt: skip

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS)
        given = [i for i in range(len(ctx)) if ctx.has(i)]
        check_same_type(ctx, tuple(given))
        shape = matmul_shape(self.node, ctx.shape(0), ctx.shape(1))
        if len(ctx) > 2 and ctx.has(2) and (not shape or ctx.shape(2) != (shape[-1],)):
            raise self.node.bad_input(
                f"GemmFastGelu: bias of shape {ctx.shape(2)} is not the product's last axis "
                f"{shape}",
                self.node.inputs[2],
            )
        return [ctx.output(ctx.dtype(0), shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        a, b = as_matrices(inputs[0], inputs[1])
        (out,) = outputs
        batch = out.shape[: max(a.ndim, b.ndim) - 2]
        product = out.reshape(*batch, a.shape[-2], b.shape[-1])
        multiply = ctx.kernels.exact_matmul_arrays if ctx.exact else ctx.kernels.matmul_arrays
        multiply(a, b, product)
        bias = inputs[2] if len(inputs) > 2 else None
        self.gelu.run(ctx, [out, bias], [out])


DEFS = (
    OpDef("BiasAdd", 1, BiasAdd, domain=MICROSOFT),
    OpDef("GemmFastGelu", 1, GemmFastGelu, domain=MICROSOFT),
)
