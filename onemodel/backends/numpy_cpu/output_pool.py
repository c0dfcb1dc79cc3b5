"""Graph outputs of at least POOLED_BYTES carved from reused host blocks, not fresh pages.

glibc serves a large `np.empty` with fresh mmap'ed memory whenever it is above its dynamic
mmap threshold (always from 32 MiB on, and smaller ones after the heap top is trimmed), and
the kernel writing it then pays a page fault per page: a [2048, 2048] int32->int64 Cast (a
32 MiB output) took 10.6 ms where onnxruntime, whose allocator recycles, took 4.8; from this
pool, 4.4 ms against 4.4 (`onemodel bench ops --cpu-time`, AMD EPYC, one thread). Lending a
block costs a few microseconds more than `np.empty` (an object, `np.asarray` reading its
interface, a lock each way), lost in the noise from a megabyte on, so smaller outputs keep
`np.empty`.

Safety: a block goes back to the pool only when nothing can see it. The returned array is made
by `np.asarray` over a `_Holder`, a plain object exposing the block through
`__array_interface__`, so the array's base is the holder. NumPy collapses a view's base chain
only through arrays, so it stops at that array (whose base is no array): every view keeps the
array, the array keeps the holder, and the holder's `__del__` runs only after the last of them
is gone. (A finalizer on the array itself would not do: a view could outlive it.)

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

POOLED_BYTES = 1024 * 1024  # below, what lending costs is more than it could save
DEFAULT_MAX_IDLE_BYTES = 256 * 1024**2


_Block = tuple[np.ndarray, int, int]  # the bytes, their address (`ctypes.data` costs 4 us), size


class _Holder:
    """Owns one pooled block while an array made over it (or any view of that) lives."""

    __slots__ = ("__array_interface__", "block", "pool")

    def __del__(self) -> None:
        self.pool._give_back(self.block)


class OutputPool:
    """Free host blocks by size class, lent out as arrays that return them when they die."""

    def __init__(self, max_idle_bytes: int = DEFAULT_MAX_IDLE_BYTES) -> None:
        self.max_idle_bytes = max_idle_bytes
        self.idle_bytes = 0
        self._free: dict[int, list[_Block]] = {}
        # Reentrant: a collection inside a locked section may drop a holder on this thread.
        self._lock = threading.RLock()

    def empty(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        """An uninitialised C-contiguous array of `shape` and `dtype` over a pooled block."""
        return self.lender(shape, dtype)()

    def lender(self, shape: tuple, dtype: np.dtype) -> Callable[..., np.ndarray]:
        """A function making `empty(shape, dtype)` arrays (its arguments ignored) with the
        size class and type string looked up once: a plan's output has one shape."""
        capacity = size_class(prod(shape) * dtype.itemsize)
        typestr = dtype.str
        lock = self._lock
        free = self._free

        def lend(*_ignored: Any) -> np.ndarray:
            with lock:
                blocks = free.get(capacity)
                block = blocks.pop() if blocks else None
                if block is not None:
                    self.idle_bytes -= capacity
            if block is None:
                raw = aligned_numpy_bytes(capacity)
                block = (raw, raw.ctypes.data, capacity)
            holder = _Holder()
            holder.pool = self
            holder.block = block
            holder.__array_interface__ = {
                "shape": shape,
                "typestr": typestr,
                "data": (block[1], False),
                "version": 3,
            }
            return np.asarray(holder)

        return lend

    def _give_back(self, block: _Block) -> None:
        capacity = block[2]
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
    return OUTPUTS.lender(shape, dtype) if poolable(shape, dtype) else np.empty


def copy_out(array: np.ndarray) -> np.ndarray:
    """A C-ordered copy the caller may keep, from the pool when it is large."""
    if array.nbytes < POOLED_BYTES or not poolable(array.shape, array.dtype):
        return array.copy()
    out = OUTPUTS.empty(array.shape, array.dtype)
    np.copyto(out, array)
    return out
