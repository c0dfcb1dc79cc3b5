"""Broadcasting ufunc calls without NumPy's buffered copies of the broadcast operand.

With an operand broadcast across rows (a bias along the last axis, a per-row or per-channel
factor) and rows shorter than NumPy's ufunc buffer (8192 elements), NumPy's iterator fills
buffers that span several rows and copies the broadcast operand into them: x (256, 1024) plus a
(1024,) bias took 0.51 ms where x + x takes 0.06 (AMD EPYC, 1 thread). A buffer of exactly one
row needs no copy (0.07 ms), so on the host such calls run with the buffer size set to the
output's last extent for the call (NumPy requires a multiple of 16; other extents keep the
default). The setting lives in NumPy's per-thread context and is restored after the call.
Other libraries (CuPy) have no such buffer: the plain call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Below this many output elements the two setting calls (about 2 µs) cost more than they save.
ROW_BUFFER_ABOVE = 1 << 14


def row_buffer(xp: Any, out: Any, *operands: Any) -> int | None:
    """The ufunc buffer size that keeps NumPy from copying a broadcast operand into `out`'s
    rows, or None where the default is as good (not the host, no operand broadcast, a small or
    non-contiguous output, rows at least the default buffer or not a multiple of 16 long)."""
    if xp is not np or out.size <= ROW_BUFFER_ABOVE or not out.flags.c_contiguous:
        return None
    if all(np.size(operand) in (1, out.size) for operand in operands):
        return None  # nothing broadcast, or a single value (a stride-0 operand of the loop)
    row = out.shape[-1]
    return row if 16 <= row < np.getbufsize() and row % 16 == 0 else None


def ufunc_into(xp: Any, ufunc: Any, *operands: Any, out: Any, **keywords: Any) -> Any:
    """ufunc(*operands, out=out, **keywords), with one row's ufunc buffer where `row_buffer`
    says the default would copy a broadcast operand."""
    size = row_buffer(xp, out, *operands)
    if size is None:
        return ufunc(*operands, out=out, **keywords)
    previous = np.setbufsize(size)
    try:
        return ufunc(*operands, out=out, **keywords)
    finally:
        np.setbufsize(previous)
