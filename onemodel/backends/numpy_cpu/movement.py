"""NumPy data movement: permuted copies blocked for the cache, gathers without a buffer.

NumPy copies a transposed array in one pass whose inner loop is contiguous on one side only,
so for a 2-D transpose every element read or written touches a new cache line: 1.0–1.3 ms for
a 256×1024 float32 array (AMD EPYC, 1 thread), 3× onnxruntime. Copying the output's last axis
in blocks of a few input rows instead makes each block's inner loop write one short
contiguous run while reading that many input rows side by side, all of them in cache:
0.25–0.45 ms for the same array. That gain is the cache's: it holds lines whose addresses
are 2 KiB apart in few sets, so a one-pass read down a column of rows of a multiple of 2 KiB
keeps evicting what it just read. Other rows copy as fast or faster in one pass (transposed
into out, ms: rows of 3136 float32 (ConvNeXt's and MobileNet's 56×56 planes), 64 of them 0.11
in one pass against 0.24 blocked; rows of 1000 0.066 against 0.142, of 640 0.27 against 0.44;
rows of 512, 1536 and 3072, 128 of them, 0.16 / 0.43 / 1.39 in one pass against 0.09 / 0.21 /
0.48 blocked).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

_TILE_ELEMENTS = 8192  # one block: input rows × row length, about 32 KiB of float32
_MIN_ROWS = 8  # fewer rows per block measured slower (more blocks, shorter runs)
_SHORT_ROW = 16  # input rows this short (one cache line) copy well in one pass
# Copied in blocks: input rows a multiple of this long, or output rows of a multiple of the
# second (128 rows of 4096 float32 into 4096 of 128: 0.66 ms in one pass, 0.42 blocked).
_ALIASED_ROW_BYTES = 2048
_ALIASED_OUTPUT_ROW_BYTES = 4096


@lru_cache(maxsize=256)
def merged_permutation(
    shape: tuple[int, ...], perm: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The same permuted copy on fewer axes: extent-1 axes dropped and input axes that stay
    neighbours in the output merged. Returns the merged input shape and its permutation
    (remembered: a model transposes a few shapes, every run)."""
    kept = [axis for axis in perm if shape[axis] != 1]
    groups: list[list[int]] = []
    for axis in kept:
        if groups and axis == groups[-1][-1] + 1:
            groups[-1].append(axis)
        else:
            groups.append([axis])
    by_input = sorted(range(len(groups)), key=lambda g: groups[g][0])
    merged = tuple(math.prod(shape[a] for a in groups[g]) for g in by_input)
    position = {g: i for i, g in enumerate(by_input)}
    return merged, tuple(position[g] for g in range(len(groups)))


def transpose_copy(x: np.ndarray, perm: Sequence[int], out: np.ndarray) -> None:
    """out (C-contiguous) = x.transpose(perm), blocked along the output's last axis when that
    axis is not the input's last and the rows alias in the cache (see the module docstring
    and `_ALIASED_ROW_BYTES`)."""
    if perm[-1] == x.ndim - 1 or not x.flags.c_contiguous:  # rows stay rows: one pass
        np.copyto(out, x.transpose(perm))
        return
    shape, order = merged_permutation(x.shape, tuple(perm))
    rank = len(order)
    if rank < 2 or order[-1] == rank - 1:
        np.copyto(out, x.transpose(perm))
        return
    row = shape[-1]
    rows = shape[order[-1]]  # input rows that become the output's last axis
    aliased = (
        row * x.itemsize % _ALIASED_ROW_BYTES == 0
        or rows * x.itemsize % _ALIASED_OUTPUT_ROW_BYTES == 0
    )
    if row <= _SHORT_ROW or rows <= _MIN_ROWS or not aliased:
        np.copyto(out, x.transpose(perm))
        return
    source = x.reshape(shape).transpose(order)
    target = out.reshape(source.shape)
    block = max(_MIN_ROWS, _TILE_ELEMENTS // row)
    for start in range(0, rows, block):
        np.copyto(target[..., start : start + block], source[..., start : start + block])


def take_checked(data: np.ndarray, positions: np.ndarray, axis: int, out: np.ndarray) -> None:
    """np.take of positions already checked to be in range: mode "clip" (a no-op on them),
    since the default mode copies through a buffer when `out` is given (3× slower for
    256 rows of 1024 float32). The array's method: np.take's Python wrapper costs a
    microsecond more, the whole of a small Gather's work."""
    data.take(positions, axis=axis, out=out, mode="clip")
