"""Graph outputs of at least POOLED_BYTES carved from reused host blocks, not fresh pages.

A new NumPy array of a megabyte or more is fresh mmap'ed memory, and the kernel writing it
pays a page fault per 4 KiB: LayerNormalization of 256k floats took 656 us into a new array
and 500 us into a reused one, a 4M-element int32->int64 Cast 9.6 ms and 4.3 ms (AMD EPYC, one
thread). onnxruntime's allocator hands such outputs recycled memory; this pool does the same
for the arrays a Session returns.

Safety: a block goes back to the pool only when nothing can see it. The returned array is made
by `np.asarray` over a `_Holder`, a plain object exposing the block through
`__array_interface__`, so the array's base is the holder. NumPy collapses a view's base chain
only through arrays, so it stops at that array (whose base is no array): every view keeps the
array, the array keeps the holder, and the holder's `__del__` runs only after the last of them
is gone. (A finalizer on the array itself would not do: a view could
outlive it.)

Bounded: at most `max_idle_bytes` of free blocks are kept (per size class lists, the classes of
`tensors.buffers.size_class`); a block given back beyond that is simply freed. Thread-safe:
sessions run concurrently, and a holder may die on any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

from onemodel.tensors.buffers import aligned_numpy_bytes, size_class

POOLED_BYTES = 256 * 1024  # below this a new array is as cheap as a reused one
DEFAULT_MAX_IDLE_BYTES = 256 * 1024**2


class _Holder:
    """Owns one pooled block while an array made over it (or any view of that) lives."""

    __slots__ = ("__array_interface__", "block", "pool")

    def __init__(self, pool: OutputPool, block: np.ndarray, shape: tuple, dtype: np.dtype):
        self.pool = pool
        self.block = block
        self.__array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "data": (block.ctypes.data, False),
            "version": 3,
        }

    def __del__(self) -> None:
        self.pool._give_back(self.block)


class OutputPool:
    """Free host blocks by size class, lent out as arrays that return them when they die."""

    def __init__(self, max_idle_bytes: int = DEFAULT_MAX_IDLE_BYTES) -> None:
        self.max_idle_bytes = max_idle_bytes
        self.idle_bytes = 0
        self._free: dict[int, list[np.ndarray]] = {}
        # Reentrant: a collection inside a locked section may drop a holder on this thread.
        self._lock = threading.RLock()

    def empty(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        """An uninitialised C-contiguous array of `shape` and `dtype` over a pooled block."""
        capacity = size_class(prod(shape) * dtype.itemsize)
        with self._lock:
            blocks = self._free.get(capacity)
            block = blocks.pop() if blocks else None
            if block is not None:
                self.idle_bytes -= capacity
        if block is None:
            block = aligned_numpy_bytes(capacity)
        return np.asarray(_Holder(self, block, shape, dtype))

    def _give_back(self, block: np.ndarray) -> None:
        capacity = block.nbytes
        with self._lock:
            if self.idle_bytes + capacity <= self.max_idle_bytes:
                self._free.setdefault(capacity, []).append(block)
                self.idle_bytes += capacity

    def trim(self) -> None:
        """Free every idle block."""
        with self._lock:
            self._free.clear()
            self.idle_bytes = 0


OUTPUTS = OutputPool()


def poolable(shape: tuple, dtype: np.dtype) -> bool:
    """Whether an output of `shape` and `dtype` comes from the pool: large enough to win, and a
    dtype that `__array_interface__`'s type string carries exactly (not objects, nor
    ml_dtypes' types, which it would call void)."""
    return (
        prod(shape) * dtype.itemsize >= POOLED_BYTES
        and dtype.kind != "O"
        and np.dtype(dtype.str) == dtype
    )


def output_allocator(shape: tuple, dtype: np.dtype) -> Callable[[tuple, np.dtype], Any]:
    """The function that makes a graph output of this static shape: decided once per plan, so
    small outputs keep plain `np.empty` with no cost added."""
    return OUTPUTS.empty if poolable(shape, dtype) else np.empty


def copy_out(array: np.ndarray) -> np.ndarray:
    """A C-ordered copy the caller may keep, from the pool when it is large."""
    if array.nbytes < POOLED_BYTES or not poolable(array.shape, array.dtype):
        return array.copy()
    out = OUTPUTS.empty(array.shape, array.dtype)
    np.copyto(out, array)
    return out
