"""The Tensor: an element type, a shape, strides and an offset over a Buffer (seed 002 §1–7).

Every view operation makes a new Tensor over the same buffer; nothing is copied unless asked
(`contiguous()`, `reshape` when the strides do not allow a view, `to_layout`). Each access to
the data compares the generation the tensor was made in with the buffer's, so a tensor can never
read memory that was released, re-rented or reset since.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.tensors import shapes
from onemodel.tensors.autograd import GradLeaf, is_grad_enabled
from onemodel.tensors.buffers import HOST, Buffer, BufferPool, Memory
from onemodel.tensors.dtypes import DType
from onemodel.tensors.errors import (
    StaleTensorError,
    TensorError,
    TensorShapeError,
    TensorVersionError,
)


class Layout(enum.Enum):
    """Where the elements of a logical (N, C, H, W) tensor live."""

    NCHW = "nchw"
    NHWC = "nhwc"
    BLOCKED = "blocked"
    STRIDED = "strided"


class Tensor:
    """A view of typed elements in a buffer; strides count elements (0 broadcasts, <0 reverses).

    A blocked tensor (`layout` BLOCKED) keeps its logical (N, C, H, W) shape while its memory
    is (N, ceil(C/B), H, W, B) with zero-padded channels; `strides` then describe that physical
    array. Only `to_layout`, `data()` (the physical span) and metadata work on blocked tensors.
    """

    __slots__ = (
        "autograd", "block_size", "buffer", "dtype", "generation", "offset", "shape", "strides",
    )  # fmt: skip

    def __init__(
        self,
        buffer: Buffer,
        dtype: DType,
        shape: Sequence[int],
        strides: Sequence[int] | None = None,
        offset: int = 0,
        *,
        block_size: int = 0,
    ) -> None:
        if not buffer.live:
            raise StaleTensorError(f"buffer of {buffer.nbytes} bytes was released or reset")
        self.buffer = buffer
        self.generation = buffer.generation
        self.dtype = DType(dtype)
        self.shape = shapes.check_shape(shape, self.dtype.itemsize)
        self.block_size = block_size
        physical = self.physical_shape
        self.strides = (
            shapes.contiguous_strides(physical)
            if strides is None
            else shapes.check_strides(strides, len(physical))
        )
        self.offset = offset
        shapes.check_view(physical, self.strides, offset, buffer.nbytes // self.dtype.itemsize)
        # None, a GradLeaf, or the backward record of the operation that made it (seed 002 §8).
        self.autograd: Any = None

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def empty(
        cls,
        shape: Sequence[int],
        dtype: DType,
        *,
        pool: BufferPool | None = None,
        memory: Memory = HOST,
        zero: bool = False,
    ) -> Tensor:
        """A new contiguous tensor; the shape is checked before any memory is taken."""
        dtype = DType(dtype)
        dims = shapes.check_shape(shape, dtype.itemsize)
        nbytes = shapes.element_count(dims) * dtype.itemsize
        if pool is not None:
            buffer = pool.rent(nbytes, zero=zero)
        else:
            buffer = Buffer.allocate(nbytes, memory, zero=zero)
        return cls(buffer, dtype, dims)

    @classmethod
    def zeros(cls, shape: Sequence[int], dtype: DType, **kwargs: Any) -> Tensor:
        return cls.empty(shape, dtype, zero=True, **kwargs)

    @classmethod
    def from_array(
        cls, array: Any, dtype: DType | None = None, *, memory: Memory = HOST, **kwargs: Any
    ) -> Tensor:
        """A contiguous copy of an array (any byte order and strides) in the given memory."""
        xp = memory.xp
        source = array if isinstance(array, xp.ndarray) else np.asarray(array)
        if source.dtype.byteorder == ">":
            source = source.astype(source.dtype.newbyteorder("<"))
        dtype = DType.from_numpy(source.dtype) if dtype is None else DType(dtype)
        held = memory.array_dtype(dtype)
        if source.dtype == dtype.numpy != held:  # bits kept in another dtype: bfloat16 on CuPy
            source = source.view(held)
        tensor = cls.empty(source.shape, dtype, memory=memory, **kwargs)
        tensor._array()[...] = xp.asarray(source).astype(held, copy=False)
        return tensor

    # -- metadata ----------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return shapes.element_count(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def memory(self) -> Memory:
        return self.buffer.memory

    @property
    def version(self) -> int:
        return self.buffer.version

    @property
    def physical_shape(self) -> shapes.Shape:
        if not self.block_size:
            return self.shape
        n, c, h, w = self.shape
        return (n, -(-c // self.block_size), h, w, self.block_size)

    @property
    def is_contiguous(self) -> bool:
        return not self.block_size and shapes.is_contiguous(self.shape, self.strides)

    @property
    def layout(self) -> Layout:
        """Derived from the strides for plain rank-4 tensors; NCHW wins when both match."""
        if self.block_size:
            return Layout.BLOCKED
        if self.rank != 4:
            return Layout.STRIDED
        if shapes.is_contiguous(self.shape, self.strides):
            return Layout.NCHW
        if shapes.is_contiguous(_to_nhwc(self.shape), _to_nhwc(self.strides)):
            return Layout.NHWC
        return Layout.STRIDED

    # -- gradients (seed 002 §8; recording and backward are in onemodel.eager) ----------------

    def with_requires_grad(self) -> Tensor:
        """A handle to the same elements that is a gradient leaf: `.grad` accumulates on it.

        The flag is on the returned handle, not on this one nor on the buffer.
        """
        if not self.dtype.is_floating:
            raise TensorError(f"only floating tensors can require gradients, not {self.dtype.name}")
        leaf = self.view(self.shape, self.strides)
        leaf.autograd = GradLeaf()
        return leaf

    @property
    def requires_grad(self) -> bool:
        return self.autograd is not None

    @property
    def grad_fn(self) -> Any:
        """The backward record of the operation that made this tensor, or None."""
        return None if isinstance(self.autograd, GradLeaf | None) else self.autograd

    @property
    def grad(self) -> Tensor | None:
        """The gradient accumulated on a leaf by backward passes (None before the first)."""
        return self.autograd.grad if isinstance(self.autograd, GradLeaf) else None

    def __repr__(self) -> str:
        return (
            f"Tensor({self.dtype.name}, shape={self.shape}, strides={self.strides}, "
            f"offset={self.offset}, layout={self.layout.value}, memory={self.memory.name})"
        )

    # -- data access -------------------------------------------------------------------------

    def data(self) -> Any:
        """The elements as an array of the buffer's backend, sharing memory (read access).

        For a blocked tensor this is the flat physical span.
        """
        self.buffer.check_generation(self.generation)
        return self._array()

    def mutable_data(self) -> Any:
        """Like `data()`, for writing: the buffer's version moves on (seed 002 §7)."""
        self.buffer.check_generation(self.generation)
        self.buffer.version += 1
        return self._array()

    def numpy(self) -> np.ndarray:
        """A row-major NumPy copy of the logical elements, on the host."""
        self._require_plain("numpy()")
        host = self.memory.to_host(self.data())  # a copy, in the source's element order
        if host.dtype != self.dtype.numpy:  # bits kept in another dtype: bfloat16 on CuPy
            host = host.view(self.dtype.numpy)
        return host if host.flags.c_contiguous else np.ascontiguousarray(host)

    def _array(self) -> Any:
        xp = self.memory.xp
        itemsize = self.dtype.itemsize
        array_dtype = self.memory.array_dtype(self.dtype)
        usable = self.buffer.nbytes - self.buffer.nbytes % itemsize
        flat = self.buffer.data[:usable].view(array_dtype)
        if self.block_size:
            count = shapes.element_count(self.physical_shape)
            return flat[self.offset : self.offset + count]
        if self.size == 0:
            return flat[:0].reshape(self.shape)
        return xp.lib.stride_tricks.as_strided(
            flat[self.offset :],
            shape=self.shape,
            strides=tuple(s * itemsize for s in self.strides),
        )

    def set(self, index: Sequence[int], value: Any) -> None:
        self._require_plain("set()")
        self._write(tuple(index), value)

    def fill(self, value: Any) -> None:
        self._require_plain("fill()")
        self._write(..., value)

    def copy_from(self, source: Tensor) -> None:
        """Overwrite the elements with those of a tensor of the same type and shape."""
        self._require_plain("copy_from()")
        if self.requires_grad and is_grad_enabled():
            raise TensorError(
                "copy_from into a tensor that requires gradients while recording is on would "
                "hide the write from the backward pass; do it under no_grad()"
            )
        if source.dtype != self.dtype or source.shape != self.shape:
            raise TensorShapeError(
                f"copy_from needs the same type and shape: {source.dtype.name}{source.shape} "
                f"into {self.dtype.name}{self.shape}"
            )
        self._write(..., source.data())

    def _write(self, index: Any, values: Any) -> None:
        """A write that counts as one only if it happened (a bad index leaves the version)."""
        self.buffer.check_generation(self.generation)
        self._array()[index] = values
        self.buffer.version += 1

    def dispose(self) -> None:
        """Return the buffer (for this tensor and every view of it); a second call raises."""
        self.buffer.release(self.generation)

    def save(self) -> SavedTensor:
        return SavedTensor(self)

    # -- views -------------------------------------------------------------------------------

    def view(self, shape: Sequence[int], strides: Sequence[int], offset: int | None = None):
        """A new tensor over the same buffer; checked so it reaches only the buffer's elements."""
        self._require_plain("view()")
        self.buffer.check_generation(self.generation)
        tensor = Tensor(
            self.buffer, self.dtype, shape, strides, self.offset if offset is None else offset
        )
        tensor.generation = self.generation
        return tensor

    def contiguous(self) -> Tensor:
        """Itself when already contiguous, else a row-major copy."""
        self._require_plain("contiguous()")
        values = self.data()
        if self.is_contiguous:
            return self
        copy = Tensor.empty(self.shape, self.dtype, memory=self.memory)
        copy._array()[...] = values
        return copy

    def try_reshape(self, *shape: int | Sequence[int]) -> Tensor | None:
        """A view with the new shape when the strides allow one (seed 002 §4), else None."""
        self._require_plain("reshape()")
        dims = shapes.resolve_reshape(_dims(shape), self.size)
        strides = shapes.try_reshape(self.shape, self.strides, dims)
        return None if strides is None else self.view(dims, strides)

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """A view when possible, else a view of a contiguous copy; row-major order either way."""
        viewed = self.try_reshape(*shape)
        if viewed is not None:
            return viewed
        return self.contiguous().reshape(*shape)

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        """A stride-0 view presenting this tensor with a broadcast shape."""
        self._require_plain("broadcast_to()")
        target = shapes.check_shape(shape, self.dtype.itemsize)
        shapes.broadcast_shapes(self.shape, target)
        return self.view(target, shapes.broadcast_strides(self.shape, self.strides, target))

    def permute(self, *axes: int | Sequence[int]) -> Tensor:
        """A view with the dimensions reordered."""
        self._require_plain("permute()")
        order = _dims(axes)
        if sorted(order) != list(range(self.rank)):
            raise TensorShapeError(f"{tuple(order)} is not a permutation of {self.rank} axes")
        return self.view([self.shape[a] for a in order], [self.strides[a] for a in order])

    # -- layouts -----------------------------------------------------------------------------

    def to_layout(self, layout: Layout, block_size: int = 0) -> Tensor:
        """The same logical tensor with its elements stored in another layout (a copy).

        Returns itself when it is already in that layout (and block size).
        """
        if self.rank != 4:
            raise TensorShapeError(f"layouts apply to rank-4 tensors, not shape {self.shape}")
        if layout is Layout.STRIDED:
            raise TensorError("STRIDED is not a layout to convert to")
        if layout is Layout.BLOCKED and block_size <= 0:
            raise TensorError("a blocked layout needs a positive block size")
        current = self.layout
        if current is layout and (layout is not Layout.BLOCKED or block_size == self.block_size):
            self.buffer.check_generation(self.generation)
            return self
        logical = self._logical_nchw()
        n, c, h, w = self.shape
        if layout is Layout.BLOCKED:
            blocks = -(-c // block_size)
            nbytes = n * blocks * h * w * block_size * self.dtype.itemsize
            buffer = Buffer.allocate(nbytes, self.memory, zero=True)
            result = Tensor(buffer, self.dtype, self.shape, block_size=block_size)
            physical = result._array().reshape(result.physical_shape)
            for block in range(blocks):
                channels = logical[:, block * block_size : (block + 1) * block_size]
                physical[:, block, :, :, : channels.shape[1]] = channels.transpose(0, 2, 3, 1)
            return result
        if layout is Layout.NCHW:
            result = Tensor.empty(self.shape, self.dtype, memory=self.memory)
        else:
            nhwc = Tensor.empty((n, h, w, c), self.dtype, memory=self.memory)
            result = nhwc.view(self.shape, [nhwc.strides[i] for i in (0, 3, 1, 2)])
        result._array()[...] = logical
        return result

    def _logical_nchw(self) -> Any:
        """The logical (N, C, H, W) elements as an array view (gathered from blocks if needed)."""
        if not self.block_size:
            return self.data()
        n, c, h, w = self.shape
        physical = self.data().reshape(self.physical_shape)
        padded = physical.shape[1] * self.block_size
        return physical.transpose(0, 1, 4, 2, 3).reshape(n, padded, h, w)[:, :c]

    def _require_plain(self, what: str) -> None:
        if self.block_size:
            raise TensorError(f"{what} does not work on a blocked tensor; use to_layout first")


class SavedTensor:
    """A tensor kept for later with the buffer version it had (seed 002 §7)."""

    __slots__ = ("tensor", "version")

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor
        self.version = tensor.version

    def unpack(self) -> Tensor:
        """The saved tensor; raises TensorVersionError if its memory was written since."""
        self.tensor.buffer.check_generation(self.tensor.generation)
        if self.tensor.version != self.version:
            raise TensorVersionError(
                f"a saved {self.tensor.dtype.name}{self.tensor.shape} tensor was modified in "
                f"place (version {self.version} at save, {self.tensor.version} now)"
            )
        return self.tensor


def _dims(args: tuple) -> list[int]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return list(args[0])
    return list(args)


def _to_nhwc(values: Sequence[int]) -> tuple[int, ...]:
    return (values[0], values[2], values[3], values[1])
