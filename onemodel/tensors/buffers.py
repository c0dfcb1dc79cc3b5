"""Buffers, the buffer pool and the arena (seed 002 §6), over any backend's memory.

A `Buffer` is a block of bytes that starts on a 64-byte boundary. Its storage is a 1-D uint8
array of the backend's array library (NumPy on the CPU, CuPy on the GPU); nothing here looks
inside it except through that library's own operations, so the layer does not care which.

Lifetimes are checked with generations: a tensor remembers the generation of its buffer when it
is made, and the buffer's generation moves on whenever the memory is returned to the pool or its
arena is reset. A tensor whose remembered generation differs can never read re-rented memory.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from onemodel.tensors.dtypes import DType
from onemodel.tensors.errors import BufferOverrunError, StaleTensorError, TensorShapeError
from onemodel.tensors.shapes import MAX_BYTES

ALIGNMENT = 64
CANARY_BYTES = 64
CANARY = 0xA5
POISON = 0xFF
DEFAULT_MAX_IDLE_BYTES = 2 * 1024**3
DEFAULT_CHUNK_BYTES = 1024**2
CHECKED_ENV = "ONEMODEL_CHECKED"


def checked_by_default() -> bool:
    """Checked mode is on when the ONEMODEL_CHECKED environment variable is set to 1/true/yes."""
    return os.environ.get(CHECKED_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def aligned_numpy_bytes(nbytes: int) -> np.ndarray:
    """A uint8 NumPy array of `nbytes` whose first byte sits on a 64-byte boundary."""
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    # NumPy points an empty slice at its base array, so an empty block is cut from a byte.
    return raw[start : start + max(nbytes, 1)][:nbytes]


class Memory:
    """Where buffers live: one backend's array namespace, aligned byte allocator and host copy.

    `to_host` turns an array of this memory into a NumPy array; `array_dtype` says which dtype
    the backend's arrays use for an element type (CuPy, lacking bfloat16, keeps its bits as
    uint16).
    """

    def __init__(
        self,
        name: str,
        xp: Any,
        allocate: Callable[[int], Any],
        to_host: Callable[[Any], np.ndarray] = np.array,
        array_dtype: Callable[[DType], Any] = DType.numpy.fget,  # type: ignore[attr-defined]
    ) -> None:
        self.name = name
        self.xp = xp
        self.allocate = allocate
        self.to_host = to_host
        self.array_dtype = array_dtype

    def __repr__(self) -> str:
        return f"Memory({self.name!r})"


HOST = Memory("numpy", np, aligned_numpy_bytes)


def size_class(nbytes: int) -> int:
    """The pool size class serving a request of `nbytes` (seed 002 §6, bit for bit).

    Up to 256 bytes: multiples of 64 (at least 64). Above: b·{1.25, 1.5, 1.75, 2} where b is
    the largest power of two below n, so a class never wastes a quarter of its size.
    """
    if nbytes < 0 or nbytes > MAX_BYTES:
        raise TensorShapeError(f"buffer of {nbytes} bytes is outside 0..{MAX_BYTES}")
    if nbytes <= 256:
        return max(64, -(-nbytes // 64) * 64)
    base = 1 << ((nbytes - 1).bit_length() - 1)
    step = base // 4
    return base + -(-(nbytes - base) // step) * step


class Buffer:
    """A 64-byte-aligned block with a length, a generation and a version counter.

    `storage` is the whole block (capacity plus canary room in checked mode); `nbytes` is what
    the current owner asked for. The version counts writes through the mutating accessors of
    tensors (seed 002 §7) and is shared by every view of the buffer.
    """

    __slots__ = (
        "_generation", "_live", "_owner", "checked", "memory", "nbytes", "storage", "version",
    )  # fmt: skip

    def __init__(self, memory: Memory, storage: Any, nbytes: int, owner: Any, checked: bool):
        self.memory = memory
        self.storage = storage
        self.nbytes = nbytes
        self.checked = checked
        self.version = 0
        self._generation = 0
        self._owner = owner
        self._live = True

    @classmethod
    def allocate(
        cls, nbytes: int, memory: Memory = HOST, *, zero: bool = False, checked: bool | None = None
    ) -> Buffer:
        """An unpooled buffer; releasing it only drops the memory."""
        if nbytes < 0 or nbytes > MAX_BYTES:
            raise TensorShapeError(f"buffer of {nbytes} bytes is outside 0..{MAX_BYTES}")
        checked = checked_by_default() if checked is None else checked
        room = nbytes + (CANARY_BYTES if checked else 0)
        buffer = cls(memory, memory.allocate(room), nbytes, None, checked)
        buffer._prepare(zero)
        return buffer

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def live(self) -> bool:
        """False from release (or arena reset) until the block is rented again."""
        return self._live

    @property
    def data(self) -> Any:
        """The `nbytes` bytes of the buffer as a uint8 array of its backend."""
        return self.storage[: self.nbytes]

    def check_generation(self, generation: int) -> None:
        if generation != self._generation:
            raise StaleTensorError(
                f"buffer of {self.nbytes} bytes was released or reset (generation "
                f"{self._generation}, tensor made in generation {generation})"
            )

    def release(self, generation: int | None = None) -> None:
        """Return the memory to its owner; releasing twice raises StaleTensorError."""
        if generation is not None:
            self.check_generation(generation)
        if not self._live:
            raise StaleTensorError(f"buffer of {self.nbytes} bytes was already released")
        if isinstance(self._owner, Arena):
            raise StaleTensorError("arena memory is reclaimed by Arena.reset(), not released")
        self.retire()
        if isinstance(self._owner, BufferPool):
            self._owner._give_back(self)
        else:
            self.storage = self.storage[:0]

    def retire(self) -> None:
        """Verify the canary, poison the memory and move to a new generation."""
        if self.checked:
            canary = self.storage[self.nbytes : self.nbytes + CANARY_BYTES]
            if not bool((canary == CANARY).all()):
                raise BufferOverrunError(
                    f"the {CANARY_BYTES} canary bytes after a buffer of {self.nbytes} bytes were "
                    "overwritten: a kernel wrote past its end"
                )
            self.storage[: self.nbytes + CANARY_BYTES] = POISON
        self._generation += 1
        self._live = False

    def _prepare(self, zero: bool) -> None:
        """Start a (re)rented buffer: version 0, poison or zeros, canary after the length."""
        self.version = 0
        self._live = True
        if zero:
            self.storage[: self.nbytes] = 0
        elif self.checked:
            self.storage[: self.nbytes] = POISON
        if self.checked:
            self.storage[self.nbytes : self.nbytes + CANARY_BYTES] = CANARY


class BufferPool:
    """Buffers by size class with per-class free lists; thread-safe, timing-independent.

    Idle memory is capped: a released block that would take the idle total above
    `max_idle_bytes` is dropped instead of kept.
    """

    def __init__(
        self,
        memory: Memory = HOST,
        *,
        max_idle_bytes: int = DEFAULT_MAX_IDLE_BYTES,
        checked: bool | None = None,
    ) -> None:
        self.memory = memory
        self.max_idle_bytes = max_idle_bytes
        self.checked = checked_by_default() if checked is None else checked
        self.idle_bytes = 0
        self._free: dict[int, list[Buffer]] = {}
        self._lock = threading.Lock()

    def rent(self, nbytes: int, *, zero: bool = False) -> Buffer:
        """A buffer of at least `nbytes`; contents are unspecified unless `zero`."""
        capacity = size_class(nbytes)
        with self._lock:
            free = self._free.get(capacity)
            buffer = free.pop() if free else None
            if buffer is not None:
                self.idle_bytes -= capacity
        if buffer is None:
            room = capacity + (CANARY_BYTES if self.checked else 0)
            buffer = Buffer(self.memory, self.memory.allocate(room), nbytes, self, self.checked)
        buffer.nbytes = nbytes
        buffer._prepare(zero)
        return buffer

    def _give_back(self, buffer: Buffer) -> None:
        capacity = size_class(buffer.nbytes)
        with self._lock:
            if self.idle_bytes + capacity <= self.max_idle_bytes:
                self._free.setdefault(capacity, []).append(buffer)
                self.idle_bytes += capacity
                return
        buffer._owner = None
        buffer.storage = buffer.storage[:0]

    def trim(self) -> None:
        """Drop every idle block."""
        with self._lock:
            self._free.clear()
            self.idle_bytes = 0


class Arena:
    """Bump allocation for the state of one run; `reset()` reclaims everything at once.

    Chunks come from a pool (1 MiB by default, or the request if larger) and are kept across
    resets, so a run that repeats the previous run's allocation sequence allocates no memory.
    Not thread-safe: one arena per concurrent run.
    """

    def __init__(self, pool: BufferPool | None = None, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.pool = pool if pool is not None else BufferPool()
        self.chunk_bytes = chunk_bytes
        self._chunks: list[Buffer] = []
        self._chunk_index = 0
        self._used = 0
        self._issued: list[Buffer] = []

    @property
    def checked(self) -> bool:
        return self.pool.checked

    def allocate(self, nbytes: int, *, zero: bool = False) -> Buffer:
        if nbytes < 0 or nbytes > MAX_BYTES:
            raise TensorShapeError(f"buffer of {nbytes} bytes is outside 0..{MAX_BYTES}")
        room = nbytes + (CANARY_BYTES if self.checked else 0)
        room = -(-room // ALIGNMENT) * ALIGNMENT
        while self._chunk_index < len(self._chunks):
            chunk = self._chunks[self._chunk_index]
            if self._used + room <= chunk.nbytes:
                break
            self._chunk_index += 1
            self._used = 0
        else:
            chunk = self.pool.rent(max(self.chunk_bytes, room))
            self._chunks.append(chunk)
            self._used = 0
        storage = chunk.storage[self._used : self._used + room]
        self._used += room
        buffer = Buffer(self.pool.memory, storage, nbytes, self, self.checked)
        buffer._prepare(zero)
        self._issued.append(buffer)
        return buffer

    def reset(self) -> None:
        """Make every buffer allocated since the last reset stale and reuse the chunks."""
        issued, self._issued = self._issued, []
        errors = []
        for buffer in issued:
            try:
                buffer.retire()
            except BufferOverrunError as error:
                errors.append(error)
        self._chunk_index = 0
        self._used = 0
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Reset and return every chunk to the pool."""
        self.reset()
        for chunk in self._chunks:
            chunk.release()
        self._chunks.clear()
