"""The fast kernels, written once against an array namespace so NumPy and CuPy share them.

Everything goes through the namespace `xp` of a `Memory` (numpy or cupy) and only uses calls
both libraries spell the same way, so the CuPy backend is this class over CuPy memory rather
than a second implementation that could drift from the first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onemodel.backends.pooling import PoolGeometry, check_max_pool2d
from onemodel.backends.protocol import BinaryOp, UnaryOp
from onemodel.tensors import DType, Memory, Tensor, TensorError, TensorShapeError


class ArrayKernels:
    """The `Kernels` of an array library: whole-array calls, no Python loop over elements.

    Float32 only for now. Operands are validated (backend, type, shape) before any data is
    read, so a refused call leaves `out` and its version untouched.

    `flushes_subnormals` says whether the library's kernels treat subnormal inputs and results
    as zero (comparisons included); NumPy keeps IEEE subnormals.
    """

    supports_exact = False
    flushes_subnormals = False

    def __init__(self, memory: Memory, name: str | None = None) -> None:
        self.memory = memory
        self.name = memory.name if name is None else name
        xp = memory.xp
        self._binary: dict[BinaryOp, Callable[..., Any]] = {
            BinaryOp.ADD: xp.add,
            BinaryOp.SUB: xp.subtract,
            BinaryOp.MUL: xp.multiply,
            BinaryOp.DIV: xp.divide,
            BinaryOp.MAX: xp.maximum,  # maximum/minimum, not fmax/fmin: NaN propagates
            BinaryOp.MIN: xp.minimum,
        }
        self._unary: dict[UnaryOp, Callable[..., Any]] = {
            UnaryOp.NEG: xp.negative,
            UnaryOp.ABS: xp.absolute,
            UnaryOp.RELU: self._relu,
            UnaryOp.SQRT: xp.sqrt,
            UnaryOp.EXP: xp.exp,
            UnaryOp.LOG: xp.log,
            UnaryOp.TANH: xp.tanh,
            UnaryOp.SIGMOID: self._sigmoid,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def xp(self) -> Any:
        return self.memory.xp

    # -- host exchange -----------------------------------------------------------------------

    def to_host(self, tensor: Tensor) -> np.ndarray:
        self._check_memory("to_host", tensor=tensor)
        return tensor.numpy()

    def from_host(self, array: Any) -> Tensor:
        return Tensor.from_array(array, memory=self.memory)

    # -- element-wise ------------------------------------------------------------------------

    def binary(self, op: BinaryOp, a: Tensor, b: Tensor, out: Tensor) -> None:
        self._check_elementwise(f"binary {op.name}", out, a=a, b=b)
        function = self._binary[op]
        # Overflow, 0/0 and friends give IEEE results that ONNX defines; warnings (which CuPy
        # never gives) would only make the backends behave differently.
        with np.errstate(all="ignore"):
            function(a.data(), b.data(), out=out.mutable_data())

    def unary(self, op: UnaryOp, x: Tensor, out: Tensor) -> None:
        self._check_elementwise(f"unary {op.name}", out, x=x)
        function = self._unary[op]
        with np.errstate(all="ignore"):
            function(x.data(), out=out.mutable_data())

    def _relu(self, x: Any, out: Any) -> None:
        """A compare-and-select, not max(x, 0): −0 becomes +0 and NaN passes through."""
        out[...] = self.xp.where(x <= 0, x.dtype.type(0), x)

    def _sigmoid(self, x: Any, out: Any) -> None:
        """1 / (1 + exp(−x)) in place in `out`; exp overflowing to inf correctly gives 0."""
        xp = self.xp
        one = x.dtype.type(1)
        xp.negative(x, out=out)
        xp.exp(out, out=out)
        xp.add(out, one, out=out)
        xp.divide(one, out, out=out)

    # -- matmul ------------------------------------------------------------------------------

    def matmul(self, a: Tensor, b: Tensor, out: Tensor) -> None:
        self._check_float32("matmul", a=a, b=b, out=out)
        if not a.rank == b.rank == out.rank >= 2:
            raise TensorShapeError(
                f"matmul needs operands of one rank ≥ 2 (batch dims already broadcast), not "
                f"{a.shape} @ {b.shape} -> {out.shape}"
            )
        *batch, m, k = a.shape
        expected = (*batch, m, b.shape[-1])
        if tuple(batch) != b.shape[:-2] or b.shape[-2] != k or out.shape != expected:
            raise TensorShapeError(
                f"matmul shapes do not agree: {a.shape} @ {b.shape} -> {out.shape}; it needs "
                "a (..., M, K), b (..., K, N) and out (..., M, N) with one batch shape"
            )
        self._check_output("matmul", out)
        with np.errstate(all="ignore"):  # inf · 0 and overflow are results, as in `binary`
            self._matmul(a.data(), b.data(), out.mutable_data())

    def _matmul(self, a: Any, b: Any, out: Any) -> None:
        """BLAS writes a contiguous destination; a temporary for any other `out` keeps the bits
        independent of out's layout, whatever the library would do with a strided `out`."""
        xp = self.xp
        if out.flags.c_contiguous:
            xp.matmul(a, b, out=out)
        else:
            out[...] = xp.matmul(a, b)

    # -- pooling -----------------------------------------------------------------------------

    def max_pool2d(
        self,
        x: Tensor,
        out: Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        pad: tuple[int, int],
        indices: Tensor | None = None,
    ) -> None:
        self._check_memory("max_pool2d", x=x, out=out)
        geometry = check_max_pool2d(x, out, kernel, stride, pad, indices)
        self._check_output("max_pool2d", out)
        if indices is not None:
            self._check_memory("max_pool2d", indices=indices)
            self._check_output("max_pool2d indices", indices)
        self._max_pool2d(
            x.data(),
            out.mutable_data(),
            geometry,
            None if indices is None else indices.mutable_data(),
        )

    def _max_pool2d(self, x: Any, out: Any, geometry: PoolGeometry, indices: Any | None) -> None:
        """Start every window at −inf reported at its first real element, then sweep the offsets.

        That start is the answer for a window whose real values are all −inf and is replaced by
        the first real element otherwise. Per offset, the windows for which that element is
        real form one rectangle of the output and one strided slice of the input, so each offset
        is a few whole-array operations. Strict `>` keeps the first of equal values; a NaN
        replaces a non-NaN only, so the first NaN stays. Padding is never compared.
        """
        xp = self.xp
        rows, cols = geometry.rows, geometry.cols
        width = cols.size
        out[...] = -xp.inf
        if indices is not None:
            first_y = [rows.first_inside(o) for o in range(rows.extent)]
            first_x = [cols.first_inside(o) for o in range(cols.extent)]
            indices[...] = (
                xp.asarray(first_y, dtype=xp.int32)[:, None] * width
                + xp.asarray(first_x, dtype=xp.int32)[None, :]
            )
        for ky, kx in geometry.window_offsets():
            oy, ox = rows.windows_inside(ky), cols.windows_inside(kx)
            if not oy or not ox:
                continue
            y0, x0 = rows.position(oy.start, ky), cols.position(ox.start, kx)
            y_stop = y0 + (len(oy) - 1) * rows.stride + 1
            x_stop = x0 + (len(ox) - 1) * cols.stride + 1
            values = x[:, :, y0 : y_stop : rows.stride, x0 : x_stop : cols.stride]
            best = out[:, :, oy.start : oy.stop, ox.start : ox.stop]
            take = (values > best) | (xp.isnan(values) & ~xp.isnan(best))
            xp.copyto(best, values, where=take)
            if indices is not None:
                ys = xp.arange(y0, y_stop, rows.stride, dtype=xp.int32)
                xs = xp.arange(x0, x_stop, cols.stride, dtype=xp.int32)
                where = indices[:, :, oy.start : oy.stop, ox.start : ox.stop]
                xp.copyto(where, ys[:, None] * width + xs[None, :], where=take)

    # -- validation --------------------------------------------------------------------------

    def _check_memory(self, what: str, **tensors: Tensor) -> None:
        for role, tensor in tensors.items():
            if tensor.block_size:
                raise TensorError(f"{what}: {role} is blocked; convert it with to_layout first")
            if tensor.memory.xp is not self.xp:
                raise TensorError(
                    f"{what}: {role} lives in {tensor.memory.name} memory, but the {self.name} "
                    f"backend works on {self.memory.name} memory"
                )

    def _check_float32(self, what: str, **tensors: Tensor) -> None:
        self._check_memory(what, **tensors)
        for role, tensor in tensors.items():
            if tensor.dtype is not DType.FLOAT:
                raise TensorError(
                    f"{what} supports FLOAT (float32) tensors only; {role} is {tensor.dtype.name}"
                )

    def _check_elementwise(self, what: str, out: Tensor, **inputs: Tensor) -> None:
        self._check_float32(what, **inputs, out=out)
        if any(tensor.shape != out.shape for tensor in inputs.values()):
            described = ", ".join(f"{role} {t.shape}" for role, t in inputs.items())
            raise TensorShapeError(
                f"{what} needs operands of out's shape {out.shape} (broadcast them first): "
                f"{described}"
            )
        self._check_output(what, out)

    @staticmethod
    def _check_output(what: str, out: Tensor) -> None:
        """A broadcast (stride-0) output would have several results race for one element."""
        if any(
            stride == 0 and extent > 1
            for extent, stride in zip(out.shape, out.strides, strict=True)
        ):
            raise TensorShapeError(
                f"{what}: the output is a broadcast view (strides {out.strides} for shape "
                f"{out.shape}); it must have one element per result"
            )
