"""Broadcasting ufunc calls without NumPy's buffered copies of the broadcast operand.

With an operand broadcast across rows (a bias along the last axis, a per-row or per-channel
factor) and rows shorter than NumPy's ufunc buffer (8192 elements), NumPy's iterator fills
buffers that span several rows and copies the broadcast operand into them: x (256, 1024) plus a
(1024,) bias took 0.51 ms where x + x takes 0.06 (AMD EPYC, 1 thread). A buffer of exactly one
row needs no copy (0.07 ms), so on the host such calls run with the buffer size set to the
output's last extent for the call, rounded down to the multiple of 16 NumPy requires (a buffer
shorter than the row costs nothing: [256, 1000] times a per-row factor takes 0.058 ms with a
992- or 16-element buffer, 0.082 ms with the default). Runs (the trailing axes NumPy's loop merges)
shorter than ROW_BUFFER_FROM keep the default: there one row's buffer costs a loop call per
run, which the copies it saves do not repay. The setting lives in NumPy's per-thread
context and is restored after the call; inside a run it is set directly
(fp_errors.buffered_run_state), not by np.setbufsize, which costs 6 us a call. Other libraries
(CuPy) have no such buffer: the plain call.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onemodel.backends.fp_errors import buffered_run_state

# NumPy's default ufunc buffer, in elements (np.getbufsize() costs 2 us a call).
DEFAULT_BUFFER = 8192
# Below this many output elements the two setting calls (about 2 µs) cost more than they save.
ROW_BUFFER_ABOVE = 1 << 14
# Runs of at least this many elements take one row's buffer: a run is the trailing axes NumPy's
# loop merges, those along which every operand is broadcast or not as along the last (a
# BatchNormalization's (C, 1, 1) factor over (N, C, 64, 64): 4096, 0.10 ms with the row's
# buffer, 0.20 without). Plus a (cols,) vector, then times
# a per-row (rows, 1) factor, ms with one row's buffer against the default (AMD EPYC, 1 thread,
# fastest of 300): (3136, 96) 0.201 / 0.089, 0.212 / 0.105; (1024, 256) 0.095 / 0.068, 0.094 /
# 0.080; (512, 512) 0.075 / 0.070, 0.075 / 0.090; (320, 768) 0.046 / 0.056, 0.045 / 0.074;
# (2048, 1000) 0.47 / 0.76, 0.44 / 0.77. The LayerNormalization of ConvNeXt-T's first stage,
# (3136, 96), took 1.06 ms with row buffers and 0.41 without.
ROW_BUFFER_FROM = 512


def row_buffer(xp: Any, out: Any, *operands: Any) -> int | None:
    """The ufunc buffer size that keeps NumPy from copying a broadcast operand into `out`'s
    rows, or None where the default is as good (not the host, no operand broadcast, a small or
    non-contiguous output, rows at least the default buffer, runs shorter than
    ROW_BUFFER_FROM)."""
    if xp is not np or out.size <= ROW_BUFFER_ABOVE or not out.flags.c_contiguous:
        return None
    if all(np.size(operand) in (1, out.size) for operand in operands):
        return None  # nothing broadcast, or a single value (a stride-0 operand of the loop)
    row = out.shape[-1]
    if not 16 <= row < DEFAULT_BUFFER or _merged_run(out.shape, operands) < ROW_BUFFER_FROM:
        return None
    return row // 16 * 16


def _merged_run(shape: tuple[int, ...], operands: tuple[Any, ...]) -> int:
    """Elements of the trailing axes along which each operand is broadcast exactly as along
    the last one (axes of extent 1 aside): what NumPy's loop runs as one."""
    patterns = [(1,) * (len(shape) - np.ndim(o)) + tuple(np.shape(o)) for o in operands]
    run, last = 1, None
    for axis in reversed(range(len(shape))):
        if shape[axis] == 1:
            continue
        broadcast = tuple(pattern[axis] == 1 for pattern in patterns)
        if last is not None and broadcast != last:
            break
        last = broadcast
        run *= shape[axis]
    return run


def ufunc_into(xp: Any, ufunc: Any, *operands: Any, out: Any, **keywords: Any) -> Any:
    """ufunc(*operands, out=out, **keywords), with one row's ufunc buffer where `row_buffer`
    says the default would copy a broadcast operand."""
    size = row_buffer(xp, out, *operands)
    if size is None:
        return ufunc(*operands, out=out, **keywords)
    state = buffered_run_state(size)
    if state is not None:
        token = state[0].set(state[1])
        try:
            return ufunc(*operands, out=out, **keywords)
        finally:
            state[0].reset(token)
    previous = np.setbufsize(size)
    try:
        return ufunc(*operands, out=out, **keywords)
    finally:
        np.setbufsize(previous)


def held_operand(xp: Any, constant: Any, shape: tuple[int, ...]) -> Any:
    """A constant operand of a small element-wise step made once as a C-contiguous array of
    the output's `shape`, where it would broadcast: NumPy sets up a broadcast loop in every
    call, which costs more than the arithmetic on small arrays (a (64,) bias added to
    (2, 7, 64): 0.95 against 0.35 us with the same values as a (2, 7, 64) array, AMD EPYC).
    The same operations on the same values: the same bits. Single values (which NumPy takes
    as scalars at no such cost), outputs above ROW_BUFFER_ABOVE elements and operands that
    are already full come back as they are."""
    if constant.size <= 1 or constant.shape == shape or math.prod(shape) > ROW_BUFFER_ABOVE:
        return constant
    return xp.ascontiguousarray(xp.broadcast_to(constant, shape))
