"""The fast kernels, written once against an array namespace so NumPy and CuPy share them.

Everything goes through the namespace `xp` of a `Memory` (numpy or cupy) and only uses calls
both libraries spell the same way, so the CuPy backend is this class over CuPy memory rather
than a second implementation that could drift from the first.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onemodel.backends.array_types import NARROW_FLOATS, Scratch, skewed, stacked_rows
from onemodel.backends.convolution import ConvolutionKernels
from onemodel.backends.flat_phases import flat_phases
from onemodel.backends.fp_errors import quiet
from onemodel.backends.ieee_float32 import IeeeFloat32
from onemodel.backends.lazy_module import LazyModule
from onemodel.backends.pixel_doubling import double_last_axes
from onemodel.backends.pooling import PoolGeometry, check_max_pool2d
from onemodel.backends.protocol import BinaryOp, UnaryOp
from onemodel.tensors import DType, Memory, Tensor, TensorError, TensorShapeError

# Exact mode's kernels, loaded by their first use (a fast session never loads them).
exact_arrays: Any = LazyModule("onemodel.backends.exact_arrays")
exact_elementary: Any = LazyModule("onemodel.backends.exact_elementary")
exact_gemm: Any = LazyModule("onemodel.backends.exact_gemm")


class ArrayKernels(ConvolutionKernels):
    """The `Kernels` of an array library: whole-array calls, no Python loop over elements.

    Tensor entry points take FLOAT (and DOUBLE, for the eager layer's float64 gradient checks)
    with one type for all operands. Operands are validated (backend, type, shape) before any
    data is read, so a refused call leaves `out` and its version untouched.

    `flushes_subnormals` says whether the library's kernels treat subnormal inputs and results
    as zero (comparisons included); NumPy keeps IEEE subnormals. `exact_xp` is the namespace
    exact mode computes with: `xp` itself, or on a flushing library one whose float32
    arithmetic goes through float64 (onemodel/backends/ieee_float32.py).
    """

    supports_exact = False
    flushes_subnormals = False
    # Whether `array.take(indices, axis=axis, out=out)` wraps negative indices and refuses any
    # out of range with IndexError before writing out (NumPy's mode "raise").
    take_checks_bounds = False

    def __init__(self, memory: Memory, name: str | None = None) -> None:
        self.memory = memory
        self.name = memory.name if name is None else name
        xp = memory.xp
        self.exact_xp = IeeeFloat32(xp) if self.flushes_subnormals else xp
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

    def use_threads(self, count: int) -> None:
        """Let the library's own thread pools use `count` threads (0: all cores) from now on;
        a run of a session calls it first. Nothing to set for a library without such pools."""

    # -- host exchange -----------------------------------------------------------------------

    def to_host(self, tensor: Tensor) -> np.ndarray:
        self._check_memory("to_host", tensor=tensor)
        return tensor.numpy()

    def from_host(self, array: Any) -> Tensor:
        return Tensor.from_array(array, memory=self.memory)

    def synchronize(self) -> None:
        """NumPy computes before returning: nothing to wait for."""

    def elementwise_tail(self, chain: Any, dtype: Any, exact: bool) -> None:
        """No generated kernels here: a fused chain runs member by member."""
        return None

    def compiled_activation(self, kernel: Any, x: Any, out: Any, parameters: tuple) -> bool:
        """No compiled activations here: the shared kernels of backends/activations.py run."""
        return False

    def compiled_cast(self, x: Any, out: Any) -> bool:
        """No compiled casts here: backends/casts.py's `fast_cast` runs."""
        return False

    def compiled_softmax(self, x: Any, out: Any, log: bool) -> bool:
        """No compiled softmax here: the operator's array forms run."""
        return False

    compiles_recurrent_loops = False

    def compiled_lstm_steps(
        self, projected: Any, rt: Any, states: Any, c: Any, backward: bool
    ) -> bool:
        """No compiled recurrence here: backends/recurrent.py's step loops run."""
        return False

    def compiled_gru_steps(
        self, projected: Any, rzr: Any, rn: Any, bias_n: Any, states: Any, backward: bool,
        before_reset: bool,
    ) -> bool:  # fmt: skip
        """No compiled recurrence here: backends/recurrent.py's step loops run."""
        return False

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
        self._check_floating("matmul", a=a, b=b, out=out)
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

    # -- array-level entry points of the graph operators -------------------------------------
    # Operators call these with backend arrays whose shapes and types their `infer` already
    # checked, so they validate nothing. float16 and bfloat16 operands are computed in float32
    # and rounded once into `out`: NumPy has no fast (or, for bfloat16, any BLAS) path for them.

    def matmul_arrays(self, a: Any, b: Any, out: Any) -> None:
        """out[..., m, n] = Σ_k a[..., m, k] · b[..., k, n], batch dims broadcast as NumPy does."""
        xp = self.xp
        dtype = out.dtype
        if a.dtype == dtype == b.dtype and dtype.itemsize >= 4 and out.flags.c_contiguous:
            # The common case first, without a set of the three types (a few µs a call on
            # the small products of streaming models).
            if a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous:
                a, out = stacked_rows(a, out)
            with quiet():
                xp.matmul(a, b, out=out)
            return
        with quiet():
            if any(dtype in NARROW_FLOATS for dtype in (a.dtype, b.dtype, out.dtype)):
                out[...] = xp.matmul(a.astype(xp.float32), b.astype(xp.float32))
            elif out.flags.c_contiguous and a.dtype == b.dtype == out.dtype:
                xp.matmul(a, b, out=out)
            else:
                out[...] = xp.matmul(a, b)

    def weight_product(self, dtype: Any, rank: int) -> Callable[..., Any] | None:
        """A call (a, b, out=out) that gives `matmul_arrays`' bits faster for a and out of rank
        `rank` (C-contiguous) and a 2-D weight b (C- or F-contiguous, not a's memory), all of
        type `dtype`; None where the library has none (`matmul_arrays` then)."""
        return None

    def exact_matmul_arrays(self, a: Any, b: Any, out: Any) -> None:
        """matmul_arrays as exact mode defines it: each element the exact Σ_k a·b rounded once
        into out's type (exact_gemm.matmul; float64 operands: the ordered float64 sum). `a` and
        `b` may be `exact_matmul_operand`s prepared once."""
        exact_gemm.matmul(self.xp, a, b, out)

    def exact_matmul_operand(self, x: Any, axis: int) -> Any:
        """x as an operand of exact_matmul_arrays whose K axis is `axis` (−1 left, −2 right),
        prepared once (a plan's constant weight)."""
        return exact_gemm.prepare(self.xp, x, axis)

    def transpose_arrays(self, x: Any, perm: Sequence[int], out: Any) -> None:
        """out = x.transpose(perm): a copy, the same bits on every backend."""
        self.xp.copyto(out, x.transpose(tuple(perm)))

    def take_arrays(self, data: Any, positions: Any, axis: int, out: Any) -> None:
        """out = data taken at `positions` along `axis`; the caller has checked every position
        to be in 0..extent−1."""
        self.xp.take(data, positions, axis=axis, out=out)

    def double_last_axes_arrays(self, x: Any, out: Any, scratch: Scratch) -> bool:
        """out = x with each element of its last two axes repeated twice along both, bits
        unchanged (nearest ×2 upsampling, backends/pixel_doubling.py); False, having written
        nothing, where the element type or layout does not allow it."""
        return double_last_axes(self.xp, x, out)

    def held_pool(
        self,
        x_shape: Sequence[int],
        dtype: Any,
        out_spatial: Sequence[int],
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        divisor: Any | None = None,
    ) -> Callable[[Any, Any], None] | None:
        """A call (x, out) for a fast 1-D or 2-D pooling of one x shape, with its work arrays made
        here, for a backend that has one: max pooling, or with `divisor` (the window counts)
        the row-major window sums divided by it; None: the shared kernels."""
        return None

    def max_pool_arrays(
        self,
        x: Any,
        out: Any,
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        indices: Any | None = None,
        scratch: Scratch | None = None,
    ) -> None:
        """Max of each window of x (N, C, *S) into out (N, C, *O), N-D, with the rules of
        `max_pool2d`: padding never takes part (every window must hold a real position), the
        first of equal values wins in row-major window order, and the first NaN wins.

        Window o holds positions o·stride − pad + k·dilation (`pads` are the leading pads).
        `indices` (int64), when given, receive the row-major position of each winner in its
        (n, c) plane: every window starts at the lowest value reported at its first real
        position, then one whole-array compare per offset. Without indices, one spatial axis
        at a time, last first (`_pool_separably`).
        """
        xp = self.xp
        axes = window_axes(x.shape[2:], out.shape[2:], kernel, strides, pads, dilations)
        floating = out.dtype.kind not in "iub"
        lowest = -xp.inf if floating else np.iinfo(out.dtype).min
        if indices is None:
            # maximum keeps its first operand's NaN, so the first NaN still wins; only which
            # zero a tie of −0 and +0 reports may differ from the strict rule.
            self._pool_separably(x, out, axes, xp.maximum, lowest, scratch)
            return
        out[...] = lowest
        indices[...] = _plane_positions(xp, axes, [axis.first_real() for axis in axes])
        for source, target, positions in _tap_boxes(xp, axes):
            values, best = x[source], out[target]
            take = values > best
            if floating:
                take |= xp.isnan(values) & ~xp.isnan(best)
            xp.copyto(best, values, where=take)
            found = _plane_positions(xp, axes, positions)
            xp.copyto(indices[target], found, where=take)

    def sum_pool_arrays(
        self,
        x: Any,
        out: Any,
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        scratch: Scratch | None = None,
        row_major: bool = False,
        divisor: Any | None = None,
    ) -> None:
        """Sum of the real positions of each window of x (N, C, *S) into out (N, C, *O),
        divided by `divisor` (an array broadcasting to out) when given.

        Window placement as in `max_pool_arrays`; padding adds nothing. Average pooling
        passes its counts as `divisor` (the 2-D row-major path divides as it drops its
        slack: one pass fewer); Lp pooling takes roots afterwards. One spatial axis at a time
        (`_pool_separably`), the first spatial axis first, or with `row_major` one pass per
        kernel offset in row-major order: the two float summation orders of onnxruntime's
        CPU AveragePool (its pooling library before opset 19, a row-major loop from 19).
        """
        xp = self.xp
        axes = window_axes(x.shape[2:], out.shape[2:], kernel, strides, pads, dilations)
        narrow = out.dtype in NARROW_FLOATS
        total = xp.empty(out.shape, dtype=xp.float32) if narrow else out
        with quiet():
            if row_major and len(axes) == 2:
                # −0 is the sum's neutral element (0 is not: −0 + 0 = +0)
                self._pool_flat(x, total, axes, xp.add, -0.0, scratch, divisor)
                divisor = None
            elif row_major:
                self._pool_taps(x, total, axes, xp.add, 0)
            else:
                self._pool_separably(x, total, axes, xp.add, 0, scratch, last_first=False)
            if divisor is not None:
                xp.divide(total, divisor, out=total)
        if narrow:
            out[...] = total

    def _pool_flat(
        self,
        x: Any,
        out: Any,
        axes: Sequence[WindowAxis],
        combine: Any,
        fill: Any,
        scratch: Scratch | None,
        divisor: Any | None = None,
    ) -> None:
        """A 2-D window reduction over taps in row-major order, each tap one contiguous run of
        x's padded phases (`flat_phases`: padding is `fill`, which must leave a value as it
        is); one long loop per tap instead of one short strided loop per output row. The
        first two taps go straight into the total; the copy that drops the slack divides by
        `divisor` when given."""
        xp = self.xp
        allocate = skewed(scratch or (lambda shape, dtype: xp.empty(shape, dtype=dtype)))
        phases = flat_phases(
            x,
            out.shape[2:],
            [axis.kernel for axis in axes],
            [axis.stride for axis in axes],
            [axis.pad for axis in axes],
            [axis.dilation for axis in axes],
            fill,
            allocate,
        )
        taps = phases.taps()
        total = allocate(phases.run_shape, out.dtype)
        first = next(taps)
        second = next(taps, None) if first.dtype == total.dtype else None  # no narrow sums
        if second is None:
            total[...] = first
        else:
            combine(first, second, out=total)
        for run in taps:
            combine(total, run, out=total)
        if divisor is None:
            phases.crop(total, out)
        else:
            xp.divide(phases.kept(total), divisor, out=out)

    def _pool_separably(
        self,
        x: Any,
        out: Any,
        axes: Sequence[WindowAxis],
        combine: Any,
        identity: Any,
        scratch: Scratch | None,
        last_first: bool = True,
    ) -> None:
        """A window reduction that is one along each axis in turn (max, sum): a k×k window
        costs 2k whole-array passes instead of k². Max goes last axis first so that the first
        NaN in row-major window order still wins; sums choose their order (`last_first`).
        Intermediates go to `scratch` when given."""
        xp = self.xp
        allocate = skewed(scratch or (lambda shape, dtype: xp.empty(shape, dtype=dtype)))
        pooled = [i for i, axis in enumerate(axes) if not _identity_axis(axis)]
        order = pooled[::-1] if last_first else pooled
        current = x
        for i in order:
            shape = (*current.shape[: 2 + i], axes[i].extent, *current.shape[3 + i :])
            target = out if i == order[-1] else allocate(shape, out.dtype)
            if _phases_fit(current, target, axes[i]):
                _pool_axis_phased(current, target, i, axes[i], combine, allocate)
            else:
                one = [_pass_through(n) for n in current.shape[2:]]
                one[i] = axes[i]
                self._pool_taps(current, target, one, combine, identity)
            current = target
        if current is x:
            out[...] = x

    @staticmethod
    def _pool_taps(
        x: Any, out: Any, axes: Sequence[WindowAxis], combine: Any, identity: Any
    ) -> None:
        """out = combine over taps of x's windows; the first tap is copied when it covers every
        window (one pass fewer than filling with the identity first)."""
        first = True
        for _, source, target in _window_taps(axes):
            if first and target[1:] == tuple(slice(0, n) for n in out.shape[2:]):
                out[...] = x[source]
            else:
                if first:
                    out[...] = identity
                combine(out[target], x[source], out=out[target])
            first = False

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

    def _check_floating(self, what: str, **tensors: Tensor) -> None:
        """FLOAT, or DOUBLE (which the eager layer's float64 gradient checks compute in), but
        one type for every operand."""
        self._check_memory(what, **tensors)
        first = next(iter(tensors.values())).dtype
        for role, tensor in tensors.items():
            if tensor.dtype not in (DType.FLOAT, DType.DOUBLE) or tensor.dtype is not first:
                raise TensorError(
                    f"{what} supports FLOAT or DOUBLE tensors of one type; {role} is "
                    f"{tensor.dtype.name} among {first.name} operands"
                )

    def _check_elementwise(self, what: str, out: Tensor, **inputs: Tensor) -> None:
        self._check_floating(what, **inputs, out=out)
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

    # -- exact mode: the kernels of exact_arrays, the same code on every backend --------------

    def exact_conv_arrays(
        self,
        x: Any,
        w: Any,
        out: Any,
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        group: int,
        weights: Any | None = None,
    ) -> None:
        exact_arrays.conv_arrays(self.xp, x, w, out, strides, pads, dilations, group, weights)

    def exact_conv_weights(self, w: Any, group: int) -> Any:
        """W prepared once as exact_conv_arrays multiplies it (`weights`)."""
        return exact_arrays.conv_weights(self.xp, w, group)

    def exact_max_pool_arrays(
        self,
        x: Any,
        out: Any,
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        indices: Any | None = None,
    ) -> None:
        exact_arrays.max_pool_arrays(self.xp, x, out, kernel, strides, pads, dilations, indices)

    def exact_average_pool_arrays(
        self,
        x: Any,
        out: Any,
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        divisor: Any,
    ) -> None:
        exact_arrays.average_pool_arrays(self.xp, x, out, kernel, strides, pads, dilations, divisor)

    def exact_sum_arrays(self, x: Any, axes: Sequence[int], out: Any) -> None:
        exact_arrays.sum_arrays(self.xp, x, axes, out)

    def exact_mean_arrays(self, x: Any, axes: Sequence[int], out: Any) -> None:
        exact_arrays.mean_arrays(self.xp, x, axes, out)

    def exact_max_arrays(self, x: Any, axes: Sequence[int], out: Any) -> None:
        exact_arrays.extremum_arrays(self.xp, x, axes, out, largest=True)

    def exact_min_arrays(self, x: Any, axes: Sequence[int], out: Any) -> None:
        exact_arrays.extremum_arrays(self.xp, x, axes, out, largest=False)

    def exact_exp_arrays(self, x: Any, out: Any) -> None:
        exact_arrays.exp_arrays(self.xp, x, out)

    def exact_log_arrays(self, x: Any, out: Any) -> None:
        exact_arrays.log_arrays(self.xp, x, out)

    def exact_erf_arrays(self, x: Any, out: Any) -> None:
        exact_arrays.erf_arrays(self.xp, x, out)

    def exact_map_arrays(
        self, function: Callable[..., Any], inputs: Sequence[Any], out: Any
    ) -> None:
        exact_elementary.map_arrays(self.xp, function, inputs, out)

    def exact_softmax_arrays(self, x: Any, axis: int, out: Any) -> None:
        exact_arrays.softmax_arrays(self.xp, x, axis, out)

    def exact_log_softmax_arrays(self, x: Any, axis: int, out: Any) -> None:
        exact_arrays.log_softmax_arrays(self.xp, x, axis, out)

    def exact_layer_norm_arrays(
        self,
        x: Any,
        scale: Any,
        bias: Any | None,
        axis: int,
        epsilon: float,
        out: Any,
        mean: Any | None = None,
        inv_std: Any | None = None,
    ) -> None:
        exact_arrays.layer_norm_arrays(self.xp, x, scale, bias, axis, epsilon, out, mean, inv_std)

    # -- entry points of the eager layer -----------------------------------------------------
    # Everything here is correctly rounded single operations, selections and data movement in
    # a fixed order, except reduce_sum (any order) and reduce_max (which ±0 a tie reports).

    def reduce_sum(self, x: Tensor, out: Tensor) -> None:
        axes = self._check_reduction("reduce_sum", x, out)
        result = out.mutable_data()
        result[...] = self.xp.sum(x.data(), axis=axes, keepdims=True, dtype=self.xp.float64)

    def exact_reduce_sum(self, x: Tensor, out: Tensor) -> None:
        """exact_sum_arrays (exact mode's ordered float64 sum) on validated tensors."""
        axes = self._check_reduction("exact_reduce_sum", x, out)
        self.exact_sum_arrays(x.data(), axes, out.mutable_data())

    def reduce_max(self, x: Tensor, out: Tensor) -> None:
        axes = self._check_reduction("reduce_max", x, out)
        if any(x.shape[axis] == 0 for axis in axes):
            raise TensorShapeError(f"reduce_max of {x.shape} to {out.shape} takes an empty max")
        out.mutable_data()[...] = self.xp.max(x.data(), axis=axes, keepdims=True)

    def select_greater(
        self, a: Tensor, b: Tensor, if_greater: Tensor, otherwise: Tensor, out: Tensor
    ) -> None:
        what = "select_greater"
        self._check_elementwise(what, out, a=a, b=b, if_greater=if_greater, otherwise=otherwise)
        with np.errstate(invalid="ignore"):
            chosen = self.xp.where(a.data() > b.data(), if_greater.data(), otherwise.data())
        out.mutable_data()[...] = chosen

    def max_pool2d_backward(
        self,
        grad_out: Tensor,
        indices: Tensor,
        grad_in: Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        pad: tuple[int, int],
    ) -> None:
        """Per kernel offset, one masked strided add: within an offset the windows read
        distinct positions, so the only order that matters is that of the offsets."""
        xp = self.xp
        self._check_memory("max_pool2d_backward", grad_out=grad_out, grad_in=grad_in)
        self._check_memory("max_pool2d_backward", indices=indices)
        check_max_pool2d(grad_in, grad_out, kernel, stride, pad, indices)
        self._check_output("max_pool2d_backward", grad_in)
        axes = window_axes(grad_in.shape[2:], grad_out.shape[2:], kernel, stride, pad, (1, 1))
        grads, winners = grad_out.data(), indices.data()
        result = grad_in.mutable_data()
        result[...] = 0
        zero = result.dtype.type(0)
        for source, target, positions in _tap_boxes(xp, axes):
            won = winners[target] == _plane_positions(xp, axes, positions)
            result[source] += xp.where(won, grads[target], zero)

    def relu_max_pool2d(
        self,
        x: Tensor,
        out: Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        pad: tuple[int, int],
        indices: Tensor | None = None,
    ) -> None:
        """relu(max) = max(relu): pool, then zero the windows whose winner is not positive."""
        self.max_pool2d(x, out, kernel, stride, pad, indices)
        pooled = out.mutable_data()
        not_positive = pooled <= 0
        pooled[...] = self.xp.where(not_positive, pooled.dtype.type(0), pooled)
        if indices is not None:
            self.xp.copyto(indices.mutable_data(), -1, where=not_positive)

    def im2col(
        self,
        x: Tensor,
        columns: Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        pad: tuple[int, int],
    ) -> None:
        axes = self._check_columns("im2col", x, columns, kernel, stride, pad)
        batch, channels = x.shape[:2]
        windows = self.xp.zeros((batch, channels, *kernel, *columns_hw(axes)), dtype=x.data().dtype)
        values = x.data()
        for taps, source, target in _window_taps(axes):
            windows[(slice(None), slice(None), *taps)][target] = values[source]
        columns.mutable_data()[...] = windows.reshape(columns.shape)

    def col2im(
        self,
        columns: Tensor,
        out: Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        pad: tuple[int, int],
    ) -> None:
        axes = self._check_columns("col2im", out, columns, kernel, stride, pad)
        batch, channels = out.shape[:2]
        windows = columns.data().reshape(batch, channels, *kernel, *columns_hw(axes))
        result = out.mutable_data()
        result[...] = 0
        for taps, source, target in _window_taps(axes):
            result[source] += windows[(slice(None), slice(None), *taps)][target]

    def embedding(self, table: Tensor, ids: Tensor, out: Tensor) -> None:
        self._check_embedding("embedding", table, ids, out)
        out.mutable_data()[...] = self.xp.take(table.data(), ids.data(), axis=0)

    def embedding_backward(
        self, ids: Tensor, grad_out: Tensor, grad_table: Tensor, skip_id: int
    ) -> None:
        """One unbuffered scatter-add in row-major order of the ids (`add.at` repeats adds to
        a row in that order)."""
        self._check_embedding("embedding_backward", grad_table, ids, grad_out)
        self._check_output("embedding_backward", grad_table)
        wanted = ids.data() != skip_id
        result = grad_table.mutable_data()
        result[...] = 0
        self.xp.add.at(result, ids.data()[wanted], grad_out.data()[wanted])

    def _check_reduction(self, what: str, x: Tensor, out: Tensor) -> tuple[int, ...]:
        """The reduced axes: out keeps x's rank, with extent 1 where x is reduced."""
        self._check_floating(what, x=x, out=out)
        if out.rank != x.rank or any(
            o not in (1, n) for o, n in zip(out.shape, x.shape, strict=True)
        ):
            raise TensorShapeError(
                f"{what} of {x.shape} into {out.shape}: out must have x's rank, each extent "
                "x's or 1"
            )
        self._check_output(what, out)
        return tuple(a for a in range(x.rank) if out.shape[a] == 1 and x.shape[a] != 1)

    def _check_columns(
        self,
        what: str,
        image: Tensor,
        columns: Tensor,
        kernel: Sequence[int],
        stride: Sequence[int],
        pad: Sequence[int],
    ) -> list[WindowAxis]:
        """The two window axes of an unfold of `image` (N, C, H, W) into `columns`."""
        self._check_floating(what, image=image, columns=columns)
        if image.rank != 4:
            raise TensorShapeError(f"{what} needs an (N, C, H, W) image, not shape {image.shape}")
        if any(k < 1 for k in kernel) or any(s < 1 for s in stride) or any(p < 0 for p in pad):
            raise TensorShapeError(
                f"{what}: kernel {tuple(kernel)} and stride {tuple(stride)} must be ≥ 1, pad "
                f"{tuple(pad)} ≥ 0"
            )
        extents = [(n + 2 * p - k) // s + 1 for n, k, s, p in zip(
            image.shape[2:], kernel, stride, pad, strict=True)]  # fmt: skip
        if min(extents) < 1:
            raise TensorShapeError(
                f"{what}: a kernel {tuple(kernel)} does not fit {image.shape[2:]} padded by "
                f"{tuple(pad)}"
            )
        batch, channels = image.shape[:2]
        expected = (batch, channels * kernel[0] * kernel[1], extents[0] * extents[1])
        if columns.shape != expected:
            raise TensorShapeError(
                f"{what}: the columns of {image.shape} with kernel {tuple(kernel)} have shape "
                f"{expected}, not {columns.shape}"
            )
        self._check_output(what, image if what == "col2im" else columns)
        return window_axes(image.shape[2:], extents, kernel, stride, pad, (1, 1))

    def _check_embedding(self, what: str, table: Tensor, ids: Tensor, rows: Tensor) -> None:
        """A (V, D) table, INT32/INT64 ids in 0..V−1, rows of shape (*ids.shape, D)."""
        self._check_floating(what, table=table, rows=rows)
        self._check_memory(what, ids=ids)
        if ids.dtype not in (DType.INT32, DType.INT64):
            raise TensorError(f"{what} ids must be INT32 or INT64, not {ids.dtype.name}")
        if table.rank != 2 or rows.shape != (*ids.shape, table.shape[1]):
            raise TensorShapeError(
                f"{what} needs a (V, D) table and rows of shape (*ids.shape, D): table "
                f"{table.shape}, ids {ids.shape}, rows {rows.shape}"
            )
        values = ids.data()
        if values.size and (int(values.min()) < 0 or int(values.max()) >= table.shape[0]):
            raise TensorError(
                f"{what}: ids run from {int(values.min())} to {int(values.max())}, outside the "
                f"table's 0..{table.shape[0] - 1}"
            )


@dataclass(frozen=True)
class WindowAxis:
    """One spatial axis of a pooling: `extent` windows over `size` positions.

    Window o holds positions o·stride − pad + k·dilation for taps k = 0..kernel−1; positions
    outside 0..size−1 are padding.
    """

    size: int
    extent: int
    kernel: int
    stride: int
    pad: int
    dilation: int

    def windows_reading(self, tap: int) -> range:
        """The windows whose tap `tap` is a real position: a contiguous run."""
        shift = tap * self.dilation - self.pad
        low = -(shift // self.stride)  # ceil(−shift / stride)
        high = (self.size - 1 - shift) // self.stride + 1
        return range(max(low, 0), min(high, self.extent))

    def positions(self, windows: range, tap: int) -> slice:
        """The input positions tap `tap` of `windows` reads: one strided slice."""
        start = windows.start * self.stride - self.pad + tap * self.dilation
        return slice(start, start + (len(windows) - 1) * self.stride + 1, self.stride)

    def first_real(self) -> np.ndarray:
        """Per window, its first real position (host array); −1 for a window of padding only."""
        first = np.full(self.extent, -1, dtype=np.int64)
        for tap in reversed(range(self.kernel)):
            run = self.windows_reading(tap)
            first[run.start : run.stop] = (
                np.arange(run.start, run.stop) * self.stride - self.pad + tap * self.dilation
            )
        return first

    def windows_without_real(self) -> int:
        """How many windows hold padding only."""
        return int(np.count_nonzero(self.first_real() < 0))


def window_axes(
    spatial: Sequence[int],
    out_spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
) -> list[WindowAxis]:
    """The WindowAxis of each spatial axis (`pads` are the leading pads)."""
    return [
        WindowAxis(int(n), int(o), int(k), int(s), int(p), int(d))
        for n, o, k, s, p, d in zip(
            spatial, out_spatial, kernel, strides, pads, dilations, strict=True
        )
    ]


def _phases_fit(x: Any, out: Any, axis: WindowAxis) -> bool:
    """Whether `_pool_axis_phased` can pool an axis of x into out: undilated, the extent a
    multiple of the stride with one window per phase position, both arrays contiguous."""
    return (
        axis.dilation == 1
        and axis.size % axis.stride == 0
        and axis.extent == axis.size // axis.stride
        and x.flags.c_contiguous
        and out.flags.c_contiguous
    )


def _pool_axis_phased(
    x: Any, out: Any, i: int, axis: WindowAxis, combine: Any, allocate: Scratch
) -> None:
    """Pool spatial axis i of x (stride s) into out, taps in order, as flat contiguous runs.

    A tap read as a strided slice runs one short NumPy loop per output row (rows of 32–64
    values: np.maximum took 0.26 ms for 131k outputs of 64×64×64 float32 along the last axis,
    0.07 ms along rows, AMD EPYC, where one flat loop takes 0.013–0.025). Instead x is split
    once into its s phases along the axis (copies; none for stride 1, and along the last axis
    a flat strided copy, since rows hold whole multiples of s), and tap t of window j reads
    phase (t − pad) mod s at j + ⌊(t − pad)/s⌋: for every window at once one flat run of the
    phase at a shift. Where that index leaves the axis the run reads a neighbouring row's
    values, so the few border windows are redone from x, tap by tap."""
    xp_index = (slice(None),) * (2 + i)
    stride, per_row = axis.stride, axis.size // axis.stride
    inner = math.prod(x.shape[3 + i :])
    shifts = [divmod(tap - axis.pad, stride) for tap in range(axis.kernel)]
    phases = {}
    for residue in sorted({r for _, r in shifts}):
        if stride == 1:
            phases[residue] = x.reshape(-1)
            continue
        phase = allocate(out.shape, x.dtype)
        phase[...] = x[(*xp_index, slice(residue, None, stride))]
        phases[residue] = phase.reshape(-1)
    total = out.reshape(-1)
    first = (0, 0, total)
    for tap, (shift, residue) in enumerate(shifts):
        offset = shift * inner
        lo, hi = max(0, -offset), total.size - max(0, offset)
        run = phases[residue][lo + offset : hi + offset]
        if tap == 0:
            first = (lo, hi, run)
            if axis.kernel == 1 or run.dtype != total.dtype:
                total[lo:hi] = run
        elif tap == 1 and run.dtype == total.dtype:
            # The first two taps straight into total where both read (elsewhere only border
            # windows, redone below): one pass fewer than copying the first tap. (Not from a
            # narrower type: that sum would round in it.)
            lo0, hi0, run0 = first
            start, stop = max(lo, lo0), min(hi, hi0)
            a, b = run0[start - lo0 : stop - lo0], run[start - lo : stop - lo]
            combine(a, b, out=total[start:stop])
        else:
            combine(total[lo:hi], run, out=total[lo:hi])
    low = max(-shift for shift, _ in shifts)
    high = min(per_row - shift for shift, _ in shifts)
    for window in [*range(min(low, axis.extent)), *range(max(high, low), axis.extent)]:
        target = out[(*xp_index, window)]
        first = True
        for tap in range(axis.kernel):
            position = window * stride - axis.pad + tap
            if 0 <= position < axis.size:
                values = x[(*xp_index, position)]
                if first:
                    target[...] = values
                    first = False
                else:
                    combine(target, values, out=target)


def _pass_through(size: int) -> WindowAxis:
    """An axis that a separable pooling pass leaves as it is."""
    return WindowAxis(size, size, 1, 1, 0, 1)


def _identity_axis(axis: WindowAxis) -> bool:
    return axis.kernel == 1 and axis.stride == 1 and axis.pad == 0 and axis.extent == axis.size


def _tap_boxes(
    xp: Any, axes: Sequence[WindowAxis]
) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...], list[Any]]]:
    """Per kernel offset (row-major) that some window reads from the input: the input slices
    it reads, the box of the output those windows form, and the positions read per axis."""
    for _, source, target in _window_taps(axes):
        positions = [xp.arange(s.start, s.stop, s.step) for s in source[1:]]
        yield source, target, positions


def _window_taps(
    axes: Sequence[WindowAxis],
) -> Iterator[tuple[tuple[int, ...], tuple[Any, ...], tuple[Any, ...]]]:
    """Per kernel offset (row-major) that some window reads from the input: the offset, the
    input slices it reads and the box of the output those windows form."""
    for taps in itertools.product(*(range(axis.kernel) for axis in axes)):
        runs = [axis.windows_reading(tap) for axis, tap in zip(axes, taps, strict=True)]
        if all(runs):
            slices = map(WindowAxis.positions, axes, runs, taps)
            yield taps, (..., *slices), (..., *(slice(run.start, run.stop) for run in runs))


def columns_hw(axes: Sequence[WindowAxis]) -> tuple[int, ...]:
    """The output extents of an unfold along its window axes."""
    return tuple(axis.extent for axis in axes)


def _plane_positions(xp: Any, axes: Sequence[WindowAxis], per_axis: Sequence[Any]) -> Any:
    """Row-major positions in an input plane from per-axis positions, broadcast to a box."""
    position = xp.zeros((), dtype=xp.int64)
    rank = len(axes)
    for i, (axis, values) in enumerate(zip(axes, per_axis, strict=True)):
        values = xp.asarray(values, dtype=xp.int64).reshape((-1,) + (1,) * (rank - 1 - i))
        position = position * axis.size + values
    return position
