"""Nodes whose inputs are all constants are computed once, at session creation.

Plans fold such nodes too, but per input signature; doing it once here also shrinks what every
plan visits. Values are computed with the session's own kernels and mode, so they have the
bits a run would give (seed 000 §7). Seed 000 §3's size rule applies: a result larger than
both 64 KiB and its largest input (Expand, ConstantOfShape, Tile) stays a node, so weights do
not grow. A node that fails here is left for the run, which reports it with the run's inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.graph.operators.base import Constant, InferContext, RunContext, TensorSpec
from onemodel.graph.passes.base import GraphPass, OptimizationLevel, PassContext
from onemodel.graph.passes.pass_graph import ABSENT, PassGraph, PassNode
from onemodel.graph.plan import FOLD_LIMIT_BYTES, canonical_nans, is_tensor
from onemodel.tensors import onnx_code_for_numpy


class FoldConstants(GraphPass):
    name = "fold-constants"
    min_level = OptimizationLevel.BASIC
    preserves_bits = True

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for node in graph:
            if _foldable(graph, node):
                results = _evaluate(node, [graph.constant(v) for v in node.inputs], ctx)
                if results is not None and _small_enough(graph, node, results):
                    for value_id, result in zip(node.outputs, results, strict=False):
                        if value_id != ABSENT:
                            graph.constants[value_id] = result
                    graph.remove(node)


def _foldable(graph: PassGraph, node: PassNode) -> bool:
    operator = node.operator
    return (
        operator.deterministic
        and node.info.compile_body is None
        and all(v == ABSENT or graph.constant(v) is not None for v in node.inputs)
    )


def _evaluate(node: PassNode, inputs: list[Any], ctx: PassContext) -> list[np.ndarray] | None:
    """The node's outputs as host arrays, or None when it cannot be computed now."""
    kernels = ctx.kernels
    xp = kernels.xp
    operator = node.operator
    try:
        arrays = [None if v is None else xp.asarray(v) for v in inputs]
        run_ctx = RunContext(kernels, ctx.exact)
        if operator.outputs_data_dependent:
            results = operator.run(run_ctx, arrays, None)
        else:
            specs = [
                None if v is None else TensorSpec(onnx_code_for_numpy(v.dtype), v.shape)
                for v in inputs
            ]
            stated = operator.infer(InferContext(node.info, specs, inputs))[: len(node.outputs)]
            if all(isinstance(s, Constant) for s in stated):
                return [np.asarray(s.value) for s in stated]
            if operator.view_of_input is not None:
                source = inputs[operator.view_of_input]
                return [np.asarray(source).reshape(stated[0].shape)]
            results = [xp.empty(s.shape, dtype=s.numpy_dtype) for s in stated]
            operator.run(run_ctx, arrays, results)
    except Exception:  # SessionError or a kernel error: the run reports it
        return None
    if not all(is_tensor(r) for r in results):
        return None  # sequences and optionals stay run-time values
    if ctx.exact:
        for result in results:
            canonical_nans(xp, result)
    return [np.asarray(kernels.memory.to_host(r), order="C") for r in results]


def _small_enough(graph: PassGraph, node: PassNode, results: list[np.ndarray]) -> bool:
    largest_input = max((graph.constant(v).nbytes for v in node.inputs if v != ABSENT), default=0)
    size = sum(r.nbytes for r in results)
    return size <= FOLD_LIMIT_BYTES or size <= largest_input
