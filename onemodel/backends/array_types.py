"""Names the array kernels' modules share: where temporaries come from, and the narrow floats
that compute in float32."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# Where a kernel may take temporary arrays from: (shape, dtype) -> a C-contiguous array.
Scratch = Callable[[Sequence[int], Any], Any]


class _NarrowFloats:
    """`dtype in NARROW_FLOATS`: float16 or bfloat16, the floats kernels compute in float32.
    bfloat16 is known by its name, so that ml_dtypes loads only where a model has it."""

    _FLOAT16 = np.dtype(np.float16)

    def __contains__(self, dtype: object) -> bool:
        return dtype == self._FLOAT16 or getattr(dtype, "name", None) == "bfloat16"


NARROW_FLOATS = _NarrowFloats()


_SKEW_BYTES = 1088  # 17 cache lines: successive temporaries land at different offsets in a page


def own_memory(shape: Sequence[int], dtype: Any) -> Any:
    """A `Scratch` of host arrays of their own (a held kernel made outside any run)."""
    return np.empty(tuple(shape), dtype)


def skewed(allocate: Scratch) -> Scratch:
    """`allocate` whose successive temporaries start at different offsets within a 4 KiB page.

    A run's arena hands out large temporaries back to back, so two of 512 KiB start at the
    same page offset, and a loop reading one while writing the other keeps evicting its own
    cache lines (4 KiB aliasing): a 3×3/2 max pooling of 64×64×64 float32 over arena
    temporaries took 0.59 ms, over the same temporaries 1,536 bytes apart 0.41 (AMD EPYC)."""
    count = 0

    def allocate_skewed(shape: Sequence[int], dtype: Any) -> Any:
        nonlocal count
        dtype = np.dtype(dtype)
        elements = math.prod(int(n) for n in shape)
        skip = (count * _SKEW_BYTES) % 4096 // dtype.itemsize
        count += 1
        flat = allocate((elements + skip,), dtype).reshape(-1)
        return flat[skip:].reshape(tuple(shape))

    return allocate_skewed


def stacked_rows(a: Any, out: Any) -> tuple[Any, Any]:
    """A C-contiguous stack a (..., M, K) times one matrix as a single (rows, K) matrix, and
    out (..., M, N) as (rows, N): NumPy's matmul runs one GEMM per matrix of a stack, each
    packing the weight again (ConvNeXt's [1, 7, 7, 768] by [768, 3072]: 11.5 ms as seven
    GEMMs of 7 rows, 3.8 ms as one of 49, AMD EPYC, one thread)."""
    return a.reshape(-1, a.shape[-1]), out.reshape(-1, out.shape[-1])
