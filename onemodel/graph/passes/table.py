"""The ordered table of graph passes (seed 000 §6). To add a pass, write it in its own module
here and put it in PASSES where its input is ready: eliminations and foldings first, so that
the pattern recognisers and the fusion see the simplest graph."""

from __future__ import annotations

from onemodel.graph.passes.base import GraphPass, OptimizationLevel, PassContext
from onemodel.graph.passes.collapse_chains import CollapseTransposeReshape
from onemodel.graph.passes.fold_batch_norm import FoldBatchNormalization
from onemodel.graph.passes.fold_constants import FoldConstants
from onemodel.graph.passes.fold_conv_affine import FoldConvAffine
from onemodel.graph.passes.fold_conv_bias import FoldConvBias
from onemodel.graph.passes.fold_pad_into_conv import FoldPadIntoConv
from onemodel.graph.passes.fuse_elementwise import FuseElementwise
from onemodel.graph.passes.pass_graph import PassGraph
from onemodel.graph.passes.recognise_attention import RecogniseAttention
from onemodel.graph.passes.recognise_gelu import RecogniseGelu
from onemodel.graph.passes.recognise_layer_norm import RecogniseLayerNormalization
from onemodel.graph.passes.recognise_swish import RecogniseSwish
from onemodel.graph.passes.remove_no_ops import RemoveNoOps
from onemodel.graph.passes.transpose_gemm_weight import TransposeGemmWeight

PASSES: tuple[GraphPass, ...] = (
    RemoveNoOps(),
    FoldConstants(),
    CollapseTransposeReshape(),
    FoldBatchNormalization(),
    FoldConvBias(),
    FoldConvAffine(),
    FoldPadIntoConv(),
    TransposeGemmWeight(),
    RecogniseLayerNormalization(),
    RecogniseGelu(),
    RecogniseSwish(),
    RecogniseAttention(),
    FuseElementwise(),
)


def selected(level: OptimizationLevel, exact: bool) -> list[GraphPass]:
    """The passes a session with this level and mode runs, in table order."""
    return [p for p in PASSES if p.min_level <= level and (p.preserves_bits or not exact)]


def run_passes(graph: PassGraph, level: OptimizationLevel, ctx: PassContext) -> list[str]:
    """Run the selected passes; returns their names in the order they ran."""
    ran = []
    for graph_pass in selected(level, ctx.exact):
        if ctx.check is not None:
            ctx.check(None)
        graph_pass.run(graph, ctx)
        graph.settle()
        ran.append(graph_pass.name)
    return ran
