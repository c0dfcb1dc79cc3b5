"""Embedding lookup and its gradient (seed 002 §8's convention).

The record keeps the index tensor in slot 0 and the skip id in Ints (−1: none); the table's
shape is its InputShape(0). Rows looked up by the skip id get no gradient. The gradient adds
rows in row-major order of the ids, so it is exact on the CPU backends.
"""

from __future__ import annotations

from onemodel.eager import calls
from onemodel.eager.record import BackwardRecord, OpKind, attach, recording
from onemodel.tensors import Tensor


def embedding(table: Tensor, ids: Tensor, skip_id: int | None = None) -> Tensor:
    """table (V, D) rows at INT32/INT64 `ids` → (*ids.shape, D)."""
    result = calls.empty((*ids.shape, table.shape[-1]), table)
    calls.kernels(table).embedding(table, ids, result)
    if recording(table):
        skip = -1 if skip_id is None else skip_id
        attach(result, OpKind.EMBEDDING, (table, ids), saved=(ids,), ints=(skip,))
    return result


def _embedding_backward(record: BackwardRecord, g: Tensor) -> tuple[Tensor | None, ...]:
    grad_table = calls.empty(record.input_shape(0), g)
    calls.kernels(g).embedding_backward(record.saved(0), g, grad_table, record.ints[0])
    return grad_table, None


BACKWARD = {OpKind.EMBEDDING: _embedding_backward}
