"""Cache blocking for whole-array kernels made of several NumPy passes.

A kernel of k passes over a 4M-element float32 tensor streams 16 MB through memory k times;
done `BLOCK` elements (256 KB) at a time, the block's work arrays stay in the processor's cache
between passes (measured 2x faster for Erf and LayerNormalization at 4M elements). Below
`BLOCKED_ABOVE` elements the extra ufunc calls cost more than they save.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

BLOCK = 1 << 16
BLOCKED_ABOVE = 1 << 20


def row_blocks(rows: int, row_size: int, blocks: int = 1) -> Iterator[slice]:
    """Slices of whole rows, about `blocks` times BLOCK elements each, covering `rows` rows of
    `row_size`; one slice of everything when the array is small."""
    if rows * row_size <= BLOCKED_ABOVE:
        yield slice(0, rows)
        return
    step = max(1, blocks * BLOCK // max(row_size, 1))
    for start in range(0, rows, step):
        yield slice(start, min(start + step, rows))


def memory_order(array: Any) -> list[int] | None:
    """The permutation of `array`'s axes that makes it C-contiguous (an NCHW-shaped view of
    values held channels last, graph/layouts.py: 0, 2, 3, 1), or None if none does."""
    order = sorted(range(array.ndim), key=lambda axis: -array.strides[axis])
    return order if array.transpose(order).flags.c_contiguous else None


def in_memory_order(x: Any, out: Any) -> tuple[Any, Any] | None:
    """x and out with their axes permuted into memory order, where they have one shape and
    the same strides that `memory_order` makes C-contiguous; None otherwise. An element-wise
    kernel then runs on them as on C-contiguous arrays: its work arrays in the same layout,
    its blocks flat runs."""
    if x.shape != out.shape or x.strides != out.strides:
        return None
    order = memory_order(x)
    return None if order is None else (x.transpose(order), out.transpose(order))
