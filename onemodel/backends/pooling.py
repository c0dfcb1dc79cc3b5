"""Pooling geometry shared by every backend: window placement, output extents, validation.

Kept free of arrays so a plan can size outputs and reject bad attributes before any memory is
touched, and so every backend places windows identically.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from onemodel.tensors import DType, Tensor, TensorError, TensorShapeError


@dataclass(frozen=True)
class PoolAxis:
    """One spatial axis: window k wide, moved by `stride`, over `size` positions padded by `pad`.

    Window o covers positions o·stride − pad + offset for offset in 0..kernel−1; positions
    outside 0..size−1 are padding and never take part. Because pad < kernel and size ≥ 1, every
    window holds at least one real position, so "the maximum of a window" is always defined.
    """

    name: str
    size: int
    kernel: int
    stride: int
    pad: int

    def __post_init__(self) -> None:
        where = f"pooling along the {self.name}"
        if self.kernel < 1:
            raise TensorShapeError(f"{where}: kernel {self.kernel} must be at least 1")
        if self.stride < 1:
            raise TensorShapeError(f"{where}: stride {self.stride} must be at least 1")
        if not 0 <= self.pad < self.kernel:
            raise TensorShapeError(
                f"{where}: pad {self.pad} must be in 0..kernel−1 = 0..{self.kernel - 1}; a pad "
                "as wide as the kernel would make windows of padding only"
            )
        if self.size < 1:
            raise TensorShapeError(f"{where}: the input {self.name} is {self.size}, not ≥ 1")
        if self.extent < 1:
            raise TensorShapeError(
                f"{where}: a kernel of {self.kernel} does not fit an input of {self.size} padded "
                f"by {self.pad} on both sides"
            )

    @property
    def extent(self) -> int:
        """Number of windows: floor((size + 2·pad − kernel) / stride) + 1."""
        return (self.size + 2 * self.pad - self.kernel) // self.stride + 1

    def position(self, window: int, offset: int) -> int:
        """Input position of element `offset` of window `window` (negative or ≥ size: padding)."""
        return window * self.stride - self.pad + offset

    def first_inside(self, window: int) -> int:
        """Input position of the first real element of a window."""
        return max(self.position(window, 0), 0)

    def windows_inside(self, offset: int) -> range:
        """The windows whose element `offset` is a real input position (a contiguous run)."""
        low = -(-(self.pad - offset) // self.stride)  # ceil: first window reaching position 0
        high = (self.size - 1 + self.pad - offset) // self.stride + 1
        return range(max(low, 0), min(high, self.extent))


@dataclass(frozen=True)
class PoolGeometry:
    """The two spatial axes of a 2-D pooling; offsets run in row-major window order."""

    rows: PoolAxis
    cols: PoolAxis

    @property
    def output_hw(self) -> tuple[int, int]:
        return (self.rows.extent, self.cols.extent)

    def window_offsets(self) -> Iterator[tuple[int, int]]:
        """(ky, kx) in row-major order: the order that decides ties and which NaN is first."""
        for ky in range(self.rows.kernel):
            for kx in range(self.cols.kernel):
                yield ky, kx


def pool_geometry(
    input_hw: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    pad: Sequence[int],
) -> PoolGeometry:
    """Validated geometry of a 2-D pooling over an input of height and width `input_hw`."""
    (height, width) = input_hw
    (kh, kw), (sh, sw), (ph, pw) = (
        _int_pair(label, pair)
        for label, pair in (("kernel", kernel), ("stride", stride), ("pad", pad))
    )
    return PoolGeometry(
        rows=PoolAxis("height", height, kh, sh, ph),
        cols=PoolAxis("width", width, kw, sw, pw),
    )


def _int_pair(label: str, pair: Sequence[int]) -> tuple[int, int]:
    """Two Python ints (NumPy integers from ONNX attributes are accepted, floats are not)."""
    try:
        first, second = (operator.index(value) for value in pair)
    except (TypeError, ValueError):
        raise TensorShapeError(f"pooling {label} must be two integers, not {pair!r}") from None
    return first, second


def check_max_pool2d(
    x: Tensor,
    out: Tensor,
    kernel: Sequence[int],
    stride: Sequence[int],
    pad: Sequence[int],
    indices: Tensor | None,
) -> PoolGeometry:
    """Validate the operands of max_pool2d and return the geometry; touches no data."""
    if x.dtype not in (DType.FLOAT, DType.DOUBLE) or out.dtype is not x.dtype:
        raise TensorError(
            f"max_pool2d supports FLOAT or DOUBLE tensors of one type, not {x.dtype.name} into "
            f"{out.dtype.name}"
        )
    if x.rank != 4:
        raise TensorShapeError(f"max_pool2d needs an (N, C, H, W) input, not shape {x.shape}")
    geometry = pool_geometry(x.shape[2:], kernel, stride, pad)
    expected = (*x.shape[:2], *geometry.output_hw)
    if out.shape != expected:
        raise TensorShapeError(
            f"max_pool2d of {x.shape} with kernel {tuple(kernel)}, stride {tuple(stride)}, pad "
            f"{tuple(pad)} gives shape {expected}, but out has shape {out.shape}"
        )
    if indices is not None:
        if indices.dtype is not DType.INT32:
            raise TensorError(f"max_pool2d indices must be INT32, not {indices.dtype.name}")
        if indices.shape != expected:
            raise TensorShapeError(
                f"max_pool2d indices must have out's shape {expected}, not {indices.shape}"
            )
    return geometry
