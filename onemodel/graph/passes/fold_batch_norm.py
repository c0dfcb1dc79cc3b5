"""Inference BatchNormalization after a Conv, ConvTranspose or Gemm with constant weights is
folded into those weights: y = (conv(x, W) + B − mean)·s + beta with s = scale/√(var + ε)
equals conv(x, W·s) + ((B − mean)·s + beta) (a ConvTranspose's output channel m is W[:, m
mod M/group] of its group's inputs). The new weights are computed in float64 and rounded
once, so results change in the last bits: not bit-preserving, skipped in exact mode."""

from __future__ import annotations

import numpy as np

from onemodel.graph.passes.base import (
    GraphPass,
    OptimizationLevel,
    PassContext,
    attribute,
    is_onnx,
)
from onemodel.graph.passes.pass_graph import ABSENT, PassGraph, PassNode


class FoldBatchNormalization(GraphPass):
    name = "fold-batch-normalization"
    min_level = OptimizationLevel.BASIC
    preserves_bits = False

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for norm in graph:
            if not is_onnx(norm, "BatchNormalization"):
                continue
            statistics = _statistics(graph, norm)
            producer = graph.producer(norm.inputs[0])
            if statistics is None or graph.only_reader(norm.inputs[0]) is None:
                continue
            if is_onnx(producer, "Conv"):
                fold_into_conv(graph, producer, norm, statistics)
            elif is_onnx(producer, "ConvTranspose"):
                _fold_into_conv_transpose(graph, producer, norm, statistics)
            elif is_onnx(producer, "Gemm"):
                _fold_into_gemm(graph, producer, norm, statistics)


def _statistics(graph: PassGraph, norm: PassNode) -> tuple[np.ndarray, np.ndarray] | None:
    """(s, shift) with y = x·s + shift per channel, when the node is a plain inference
    normalisation over constant statistics."""
    values = inference_parameters(graph, norm)
    if values is None:
        return None
    scale, beta, mean, var = (v.astype(np.float64).reshape(-1) for v in values)
    epsilon = float(attribute(norm, "epsilon", 1e-5))
    s = scale / np.sqrt(var + epsilon)
    return s, beta - mean * s


def inference_parameters(graph: PassGraph, norm: PassNode) -> list[np.ndarray] | None:
    """scale, beta, mean and var of a BatchNormalization that only normalises (inference
    mode, per channel, its statistics outputs unread) with constant float parameters."""
    if attribute(norm, "training_mode", 0) or attribute(norm, "spatial", 1) != 1:
        return None
    if any(v != ABSENT and (graph.readers(v) or graph.is_output(v)) for v in norm.outputs[1:]):
        return None
    values = [graph.constant(v) for v in norm.inputs[1:5]]
    if len(values) != 4 or any(v is None or v.dtype.kind != "f" for v in values):
        return None
    return values


def _constants(graph: PassGraph, node: PassNode, indices: range) -> list[np.ndarray | None]:
    return [graph.constant(node.inputs[i]) if i < len(node.inputs) else None for i in indices]


def fold_into_conv(
    graph: PassGraph, conv: PassNode, consumer: PassNode, statistics: tuple[np.ndarray, np.ndarray]
) -> PassNode | None:
    """Replace conv and its one reader `consumer`, which computes y·s + shift per output
    channel, by one Conv with scaled weights and bias; returns it (None when not possible)."""
    weight, bias = _constants(graph, conv, range(1, 3))
    s, shift = statistics
    if weight is None or weight.dtype.kind != "f" or weight.shape[0] != s.size:
        return None
    if len(conv.inputs) > 2 and conv.inputs[2] != ABSENT and bias is None:
        return None  # a bias computed at run time
    old_bias = np.zeros(s.size) if bias is None else bias.astype(np.float64)
    new_weight = weight.astype(np.float64) * s.reshape(-1, *(1,) * (weight.ndim - 1))
    new_bias = old_bias * s + shift
    inputs = [
        conv.inputs[0],
        graph.add_constant("folded_weight", new_weight.astype(weight.dtype)),
        graph.add_constant("folded_bias", new_bias.astype(weight.dtype)),
    ]
    folded = graph.make_node(
        conv.info, "Conv", inputs, consumer.outputs[:1], dict(conv.info.attributes),
        opset=conv.info.opset,
    )  # fmt: skip
    graph.replace([conv, consumer], [folded])
    return folded


def _fold_into_conv_transpose(
    graph: PassGraph, conv: PassNode, norm: PassNode, statistics: tuple[np.ndarray, np.ndarray]
) -> None:
    """W (C, M/group, *K): group g's inputs C/group·g… make outputs M/group·g…, so output
    channel g·M/group + j scales W[inputs of g, j]."""
    weight, bias = _constants(graph, conv, range(1, 3))
    s, shift = statistics
    group = int(attribute(conv, "group", 1))
    if weight is None or weight.dtype.kind != "f" or weight.ndim < 3:
        return
    if weight.shape[0] % group or weight.shape[1] * group != s.size:
        return
    if len(conv.inputs) > 2 and conv.inputs[2] != ABSENT and bias is None:
        return
    kernel = weight.shape[2:]
    per_group = weight.astype(np.float64).reshape(group, -1, weight.shape[1], *kernel)
    scaled = per_group * s.reshape(group, 1, -1, *(1,) * len(kernel))
    old_bias = np.zeros(s.size) if bias is None else bias.astype(np.float64)
    inputs = [
        conv.inputs[0],
        graph.add_constant("folded_weight", scaled.reshape(weight.shape).astype(weight.dtype)),
        graph.add_constant("folded_bias", (old_bias * s + shift).astype(weight.dtype)),
    ]
    folded = graph.make_node(
        conv.info, "ConvTranspose", inputs, norm.outputs[:1], dict(conv.info.attributes),
        opset=conv.info.opset,
    )  # fmt: skip
    graph.replace([conv, norm], [folded])


def _fold_into_gemm(
    graph: PassGraph, gemm: PassNode, norm: PassNode, statistics: tuple[np.ndarray, np.ndarray]
) -> None:
    """Y = α·A·B + β·C normalised over its columns: B's columns scale by s, and the new C
    is (β·C − mean)·s + beta (β becomes 1)."""
    b, c = _constants(graph, gemm, range(1, 3))
    s, shift = statistics
    trans_b = bool(attribute(gemm, "transB", 0))
    if b is None or b.dtype.kind != "f" or b.ndim != 2 or b.shape[0 if trans_b else 1] != s.size:
        return
    if len(gemm.inputs) > 2 and gemm.inputs[2] != ABSENT and c is None:
        return
    beta = float(attribute(gemm, "beta", 1.0))
    old_c = np.zeros(s.size) if c is None else beta * c.astype(np.float64)
    new_b = b.astype(np.float64) * (s.reshape(-1, 1) if trans_b else s.reshape(1, -1))
    new_c = old_c * s + shift
    attributes = {**gemm.info.attributes, "beta": 1.0}
    inputs = [
        gemm.inputs[0],
        graph.add_constant("folded_weight", new_b.astype(b.dtype)),
        graph.add_constant("folded_bias", new_c.astype(b.dtype)),
    ]
    folded = graph.make_node(
        gemm.info, "Gemm", inputs, norm.outputs[:1], attributes, opset=gemm.info.opset
    )
    graph.replace([gemm, norm], [folded])
