"""The static operator table: every operator the runtime runs, with its opset range.

Each family module lists its definitions in a `DEFS` tuple; this table is their concatenation,
in one place, with nothing found by reflection. A node resolves to the definition whose range
holds the opset its model imports for the node's domain; a node no range covers is reported
(with every other such node) when the session is created.
"""

from __future__ import annotations

from onemodel.graph.operators import (
    activations,
    attention,
    bias_fusions,
    binary,
    cast,
    concat_split,
    constants,
    contrib,
    control_flow,
    conv,
    dropout,
    embedding,
    expand_tile,
    gather,
    group_query_attention,
    imaging,
    losses,
    matmul,
    ml,
    normalization,
    pad,
    pooling,
    qlinear,
    quantize,
    recurrent,
    reductions,
    relative_position_bias,
    resize,
    selection,
    sequences,
    shape_info,
    signal,
    slice,
    softmax,
    spatial,
    strings,
    training,
    transpose,
    unary,
    views,
    where,
    widen,
)
from onemodel.graph.operators.base import OpDef

TABLE: tuple[OpDef, ...] = (
    *activations.DEFS,
    *attention.DEFS,
    *bias_fusions.DEFS,
    *binary.DEFS,
    *cast.DEFS,
    *concat_split.DEFS,
    *constants.DEFS,
    *contrib.DEFS,
    *control_flow.DEFS,
    *conv.DEFS,
    *dropout.DEFS,
    *embedding.DEFS,
    *expand_tile.DEFS,
    *gather.DEFS,
    *group_query_attention.DEFS,
    *imaging.DEFS,
    *losses.DEFS,
    *matmul.DEFS,
    *ml.DEFS,
    *normalization.DEFS,
    *pad.DEFS,
    *pooling.DEFS,
    *qlinear.DEFS,
    *quantize.DEFS,
    *recurrent.DEFS,
    *reductions.DEFS,
    *relative_position_bias.DEFS,
    *resize.DEFS,
    *selection.DEFS,
    *sequences.DEFS,
    *shape_info.DEFS,
    *signal.DEFS,
    *slice.DEFS,
    *softmax.DEFS,
    *spatial.DEFS,
    *strings.DEFS,
    *training.DEFS,
    *transpose.DEFS,
    *unary.DEFS,
    *views.DEFS,
    *where.DEFS,
    *widen.DEFS,
)

_BY_NAME: dict[tuple[str, str], tuple[OpDef, ...]] = {}
for _definition in TABLE:
    _key = (_definition.domain, _definition.op_type)
    _BY_NAME[_key] = (*_BY_NAME.get(_key, ()), _definition)


def resolve(domain: str, op_type: str, opset: int) -> OpDef | None:
    """The definition of `op_type` in `domain` at `opset`, or None when none covers it."""
    for definition in _BY_NAME.get((domain, op_type), ()):
        if definition.covers(opset):
            return definition
    return None


def markdown_table() -> str:
    """The supported operators as the Markdown table docs/operators.md carries (one row per
    definition: domain, operator, opset range, exact-mode support)."""
    rows = ["| domain | operator | opsets | exact |", "| --- | --- | --- | --- |"]
    for definition in sorted(TABLE, key=lambda d: (d.domain, d.op_type, d.since)):
        until = "" if definition.until is None else str(definition.until)
        exact = getattr(definition.factory, "supports_exact", False)
        rows.append(
            f"| {definition.domain or 'ai.onnx'} | {definition.op_type} | "
            f"{definition.since}–{until} | {'yes' if exact else ''} |"
        )
    return "\n".join(rows)
