"""Signal processing: DFT and STFT, the Hann, Hamming and Blackman windows, and
MelWeightMatrix.

Complex values are pairs on a last axis of extent 2 (a real signal has extent 1 there). The
transforms run in the input's precision (complex64 for float32, float16 and bfloat16 going
through float32; complex128 for double), as the reference implementation does: its expected
values carry float32 rounding, which a double-precision transform would not reproduce near
zero.

Windows and the mel matrix depend only on their (scalar) inputs: they are computed on the host
when those are known and returned as constants, with exact mode's cos, log1p and expm1
(exact_elementary), so that they are the same bits on every machine in both modes.

Exact mode's DFT and STFT are the transform's definition written as one exact matrix product:
the twiddles cos θ and sin θ of θ = 2π·((k·n) mod L)/L by exact_elementary.sincos64, the real
and imaginary parts of the signal side by side against them (exact_products.constant_product:
the exact sum with the float64 twiddles rounded once into float32), the inverse divided once
by L; an inverse onesided transform extends the
half spectrum by Hermitian symmetry and keeps the real part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from onemodel.backends.exact_arrays import log64
from onemodel.backends.exact_elementary import cos64, expm1_64, log1p64, sincos64
from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.operators.axes import INDEX_TYPES, host_scalar
from onemodel.graph.operators.base import (
    Array,
    Constant,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.exact_products import constant_product
from onemodel.graph.operators.unary import FLOATS, NUMERIC, widened
from onemodel.tensors import numpy_dtype_for_onnx


class SpectralOp(Operator):
    """Shared by DFT and STFT: signals as complex arrays, and spectra written as pairs.
    Exact: exact_transform (the module docstring)."""

    supports_exact = True

    @staticmethod
    def signal(xp: Any, x: Array) -> Array:
        """The values of x [..., 1 or 2] as a real or complex array of x's precision."""
        x = widened(xp, x)
        if x.shape[-1] == 1:
            return x[..., 0]
        return xp.ascontiguousarray(x).view(xp.result_type(x.dtype, xp.complex64))[..., 0]

    @staticmethod
    def write_pairs(spectrum: Array, out: Array) -> None:
        out[..., 0] = spectrum.real
        out[..., 1] = spectrum.imag


def exact_transform(
    kernels: Any,
    parts: tuple[Array, Array | None],
    length: int,
    bins: int,
    inverse: bool,
    dtype: Any,
) -> tuple[Array, Array]:
    """Exact mode's DFT of the last axis (zero-padded or cut to `length`) into `bins` bins:
    the real and imaginary float64 parts (imaginary None for a real signal) of a signal of type
    `dtype` side by side times the float64 twiddle matrices by `constant_product` (float32,
    float16, bfloat16: the exact sum rounded once into float32; float64: the ordered float64
    sum), the inverse divided once by `length`."""
    xp = kernels.xp
    cut = [p[..., :length] for p in parts if p is not None]
    if cut[0].shape[-1] < length:
        pad = [(0, 0)] * (cut[0].ndim - 1) + [(0, length - cut[0].shape[-1])]
        cut = [xp.pad(p, pad) for p in cut]
    turns = (np.arange(bins)[:, None] * np.arange(length)[None, :]) % length
    with np.errstate(all="ignore"):  # the unselected branches of the exact sin and cos
        sine, cosine = sincos64(np, (2 * np.pi) * turns / length)
    sine = sine if inverse else -sine  # e^(±iθ) = cos θ ± i sin θ
    if len(cut) == 1:  # a real signal
        real_weights, imag_weights = cosine.T, sine.T
    else:
        real_weights = np.concatenate([cosine.T, -sine.T])
        imag_weights = np.concatenate([sine.T, cosine.T])
    signal = xp.concatenate(cut, axis=-1)
    rows = signal.reshape(-1, signal.shape[-1])
    weights = np.concatenate([real_weights, imag_weights], axis=1)  # both parts in one product
    spectrum = constant_product(kernels, rows, weights, dtype)
    if inverse:
        spectrum = spectrum / length
    spectrum = spectrum.reshape(*signal.shape[:-1], 2 * bins)
    return spectrum[..., :bins], spectrum[..., bins:]


class DFTOp(SpectralOp):
    """The discrete Fourier transform along one signal axis, zero-padded or cut to
    `dft_length`. onesided = 1 gives half a spectrum of a real signal (forward) or a real
    signal from half a spectrum (inverse). The axis is an attribute (default 1) before opset
    20 and an input (default -2) from 20 on."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.inverse = bool(node.attr("inverse", 0))
        self.onesided = bool(node.attr("onesided", 0))
        self.axis_attribute = int(node.attr("axis", 1)) if node.opset < 20 else None

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS, 0)
        self.check_types(ctx, INDEX_TYPES, 1, 2)
        shape = ctx.shape(0)
        axis = self._axis(shape, self._given_axis(ctx))
        length = int(host_scalar(ctx, 1)) if ctx.has(1) else self._default_length(shape, axis)
        if length < 1:
            raise self.node.bad_input(
                f"DFT dft_length must be positive, got {length}", self.node.inputs[1]
            )
        result = list(shape)
        result[axis] = length // 2 + 1 if self.onesided and not self.inverse else length
        result[-1] = 1 if self.onesided and self.inverse else 2
        return [ctx.output(ctx.dtype(0), result)]

    def _given_axis(self, ctx: InferContext) -> int:
        if self.axis_attribute is not None:
            return self.axis_attribute
        return int(host_scalar(ctx, 2)) if ctx.has(2) else -2

    def _axis(self, shape: tuple[int, ...], axis: int) -> int:
        """The signal axis in [0, rank - 2], after checking the last axis holds 1 or 2 parts
        as onesided needs."""
        rank = len(shape)
        wanted = {1, 2} if not self.onesided else {2} if self.inverse else {1}
        if rank < 2 or shape[-1] not in wanted:
            raise self.node.bad_input(
                f"DFT (inverse={int(self.inverse)}, onesided={int(self.onesided)}) needs a "
                f"last axis of extent {' or '.join(map(str, sorted(wanted)))}, got input shape "
                f"{list(shape)}",
                self.node.inputs[0],
            )
        if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
            raise self.node.bad_input(
                f"DFT axis {axis} is outside [{-rank}, -2] and [0, {rank - 2}] for input "
                f"shape {list(shape)}",
                self.node.inputs[0],
            )
        return axis % rank

    def _default_length(self, shape: tuple[int, ...], axis: int) -> int:
        if self.onesided and self.inverse:
            return 2 * (shape[axis] - 1)
        return shape[axis]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp, x, out = ctx.xp, inputs[0], outputs[0]
        if self.axis_attribute is not None:
            given = self.axis_attribute
        elif len(inputs) > 2 and inputs[2] is not None:
            given = int(ctx.kernels.memory.to_host(inputs[2]).reshape(-1)[0])
        else:
            given = -2
        axis = self._axis(x.shape, given)
        if ctx.exact:
            self._run_exact(ctx, inputs, axis, out)
            return
        signal = self.signal(xp, x)
        if self.onesided and self.inverse:
            out[..., 0] = xp.fft.irfft(signal, n=out.shape[axis], axis=axis)
            return
        length = (
            int(ctx.kernels.memory.to_host(inputs[1]).reshape(-1)[0])
            if len(inputs) > 1 and inputs[1] is not None
            else x.shape[axis]
        )
        transform = xp.fft.ifft if self.inverse else xp.fft.fft
        spectrum = transform(signal, n=length, axis=axis)
        if self.onesided:
            spectrum = spectrum[(slice(None),) * axis + (slice(0, out.shape[axis]),)]
        self.write_pairs(spectrum, out)

    def _run_exact(
        self, ctx: RunContext, inputs: Sequence[Array | None], axis: int, out: Array
    ) -> None:
        xp, x = ctx.kernels.xp, inputs[0]
        values = xp.moveaxis(widen(xp, x), axis, -2)  # (..., samples, parts)
        real = values[..., 0]
        imag = values[..., 1] if x.shape[-1] == 2 else None
        result = xp.moveaxis(out, axis, -2)
        if self.onesided and self.inverse:  # Hermitian extension, then the real part
            length = out.shape[axis]
            real, imag = self._hermitian(xp, real, imag, length)
            spectrum, _ = exact_transform(ctx.kernels, (real, imag), length, length, True, x.dtype)
            store(xp, result[..., 0], spectrum)
            return
        length = (
            int(ctx.kernels.memory.to_host(inputs[1]).reshape(-1)[0])
            if len(inputs) > 1 and inputs[1] is not None
            else x.shape[axis]
        )
        parts = exact_transform(
            ctx.kernels, (real, imag), length, out.shape[axis], self.inverse, x.dtype
        )
        for index, part in enumerate(parts):
            store(xp, result[..., index], part)

    @staticmethod
    def _hermitian(xp: Any, real: Array, imag: Array, length: int) -> tuple[Array, Array]:
        """The full spectrum of `length` bins from its first half: X[n − k] = conj(X[k]); bins
        the half does not hold are 0 (numpy.fft.irfft's rule)."""
        half = real.shape[-1]
        k = np.arange(length)
        source = np.where(k <= length // 2, k, length - k)
        present = source < half
        sign = np.where(k <= length // 2, 1.0, -1.0)
        index = xp.asarray(np.minimum(source, half - 1))
        mask = xp.asarray(present.astype(np.float64))
        full_real = xp.take(real, index, axis=-1) * mask
        full_imag = xp.take(imag, index, axis=-1) * xp.asarray(sign * present)
        return full_real, full_imag


class STFTOp(SpectralOp):
    """Short-time Fourier transform of signals [batch, length, 1 or 2]: frames of
    `frame_length` every `frame_step` samples, times the window, transformed: [batch, frames,
    bins, 2]. onesided (default 1) keeps frame_length // 2 + 1 bins and needs a real signal."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.onesided = bool(node.attr("onesided", 1))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, FLOATS, 0, 2)
        self.check_types(ctx, INDEX_TYPES, 1, 3)
        shape = ctx.shape(0)
        if len(shape) != 3 or shape[2] not in (1, 2) or (self.onesided and shape[2] != 1):
            raise self.node.bad_input(
                f"STFT needs a signal [batch, length, 1] (or [.., 2] when onesided = 0), got "
                f"{list(shape)}",
                self.node.inputs[0],
            )
        if ctx.has(2) and ctx.dtype(2) != ctx.dtype(0):
            raise self.node.invalid(
                "STFT needs a window of the signal's element type", self.node.inputs[2]
            )
        step = int(host_scalar(ctx, 1))
        length = self._frame_length(ctx, shape)
        if step < 1 or not 1 <= length <= shape[1]:
            raise self.node.bad_input(
                f"STFT needs frame_step >= 1 and 1 <= frame_length <= {shape[1]}, got "
                f"{step} and {length}",
                self.node.inputs[1],
            )
        frames = (shape[1] - length) // step + 1
        bins = length // 2 + 1 if self.onesided else length
        return [ctx.output(ctx.dtype(0), (shape[0], frames, bins, 2))]

    def _frame_length(self, ctx: InferContext, shape: tuple[int, ...]) -> int:
        window = ctx.shape(2) if ctx.has(2) else None
        if window is not None and len(window) != 1:
            raise self.node.bad_input(
                f"STFT needs a 1-D window, got shape {list(window)}", self.node.inputs[2]
            )
        if ctx.has(3):
            length = int(host_scalar(ctx, 3))
            if window is not None and window[0] != length:
                raise self.node.bad_input(
                    f"STFT window of length {window[0]} does not match frame_length {length}",
                    self.node.inputs[2],
                )
            return length
        return window[0] if window is not None else shape[1]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        xp, out = ctx.xp, outputs[0]
        signal, window = self.signal(xp, inputs[0]), inputs[2] if len(inputs) > 2 else None
        step = int(ctx.kernels.memory.to_host(inputs[1]).reshape(-1)[0])
        frames = out.shape[1]
        if window is not None:
            length = window.shape[0]
        elif len(inputs) > 3 and inputs[3] is not None:
            length = int(ctx.kernels.memory.to_host(inputs[3]).reshape(-1)[0])
        else:
            length = signal.shape[1]
        if ctx.exact:
            self._run_exact(ctx.kernels, inputs[0], window, step, length, out)
            return
        starts = xp.arange(frames)[:, None] * step
        pieces = signal[:, starts + xp.arange(length)[None, :]]
        if window is not None:
            pieces = pieces * widened(xp, window).astype(signal.real.dtype, copy=False)
        spectrum = xp.fft.fft(pieces, axis=-1)
        self.write_pairs(spectrum[..., : out.shape[2]], out)

    @staticmethod
    def _run_exact(
        kernels: Any, x: Array, window: Array | None, step: int, length: int, out: Array
    ) -> None:
        """Frames times the window (one float64 product each, rounded to float32 for the
        narrower types by exact_transform's product), then exact_transform."""
        xp = kernels.xp
        values = widen(xp, x)
        starts = xp.arange(out.shape[1])[:, None] * step
        pieces = values[:, starts + xp.arange(length)[None, :]]  # (batch, frames, length, parts)
        if window is not None:
            pieces = pieces * widen(xp, window)[:, None]
        imag = pieces[..., 1] if x.shape[-1] == 2 else None
        parts = exact_transform(
            kernels, (pieces[..., 0], imag), length, out.shape[2], False, x.dtype
        )
        for index, part in enumerate(parts):
            store(xp, out[..., index], part)


class WindowOp(Operator):
    """A generalized cosine window a0 - a1 cos(2πn/N) + a2 cos(4πn/N), N the size when
    `periodic` and size - 1 otherwise (a window of one sample is [1]), in `output_datatype`.
    Exact: a plan-time constant made with exact mode's cos in both modes."""

    supports_exact = True
    coefficients: ClassVar[tuple[float, float, float]]

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.periodic = bool(node.attr("periodic", 1))
        self.dtype = int(node.attr("output_datatype", 1))
        if self.dtype not in NUMERIC:
            raise node.invalid(f"{node.op_type} output_datatype {self.dtype} is not numeric")

    def infer(self, ctx: InferContext) -> list[Constant]:
        self.check_types(ctx, INDEX_TYPES, 0)
        size = int(host_scalar(ctx, 0))
        if size < 0:
            raise self.node.bad_input(
                f"{self.node.op_type} size must not be negative, got {size}", self.node.inputs[0]
            )
        ctx.output(self.dtype, (size,))
        period = size if self.periodic else size - 1
        phase = 2 * np.pi * np.arange(size, dtype=np.float64) / max(period, 1)
        a0, a1, a2 = self.coefficients
        window = np.ones(size)
        if period:
            with np.errstate(all="ignore"):  # the unselected branches of the exact cos
                window = a0 - a1 * cos64(np, phase) + a2 * cos64(np, 2 * phase)
        return [Constant(window.astype(numpy_dtype_for_onnx(self.dtype)))]


class HannWindowOp(WindowOp):
    coefficients = (0.5, 0.5, 0.0)


class HammingWindowOp(WindowOp):
    coefficients = (25 / 46, 21 / 46, 0.0)


class BlackmanWindowOp(WindowOp):
    coefficients = (0.42, 0.5, 0.08)


class MelWeightMatrixOp(Operator):
    """Triangular filters [dft_length // 2 + 1, num_mel_bins] with peaks of 1, evenly spaced
    on the mel scale mel(f) = 2595 log10(1 + f / 700) between the edge frequencies. The bin
    edges are computed as onnxruntime and the reference do (mel step = range / (bins + 2)).
    Exact: a plan-time constant made with exact mode's log1p and expm1 in both modes."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.dtype = int(node.attr("output_datatype", 1))
        if self.dtype not in NUMERIC:
            raise node.invalid(f"MelWeightMatrix output_datatype {self.dtype} is not numeric")

    def infer(self, ctx: InferContext) -> list[Constant]:
        self.check_types(ctx, INDEX_TYPES, 0, 1, 2)
        self.check_types(ctx, FLOATS, 3, 4)
        bins, length, rate = (int(host_scalar(ctx, i)) for i in range(3))
        low, high = (widened(np, host_scalar(ctx, i)) for i in (3, 4))
        if bins < 1 or length < 1 or rate < 1 or not 0 <= low < high:
            raise self.node.bad_input(
                "MelWeightMatrix needs positive num_mel_bins, dft_length and sample_rate and "
                f"0 <= lower_edge_hertz < upper_edge_hertz, got {bins}, {length}, {rate}, "
                f"{low}, {high}",
                self.node.inputs[0],
            )
        spectrum = length // 2 + 1
        ctx.output(self.dtype, (spectrum, bins))
        edges = self._edges(bins, length, rate, low, high)
        if edges.min() < 0 or edges.max() >= spectrum:
            raise self.node.bad_input(
                f"MelWeightMatrix edges {edges.tolist()} fall outside the {spectrum} bins of a "
                f"DFT of length {length}: upper_edge_hertz must be at most sample_rate / 2",
                self.node.inputs[4],
            )
        matrix = np.zeros((spectrum, bins))
        for i, (left, center, right) in enumerate(zip(edges, edges[1:], edges[2:], strict=False)):
            rising = np.arange(left, center + 1)
            matrix[rising, i] = (rising - left) / (center - left) if center > left else 1.0
            falling = np.arange(center, right)
            matrix[falling, i] = (right - falling) / (right - center)
        return [Constant(matrix.astype(numpy_dtype_for_onnx(self.dtype)))]

    @staticmethod
    def _edges(bins: int, length: int, rate: int, low: Any, high: Any) -> np.ndarray:
        """The DFT bin of every filter edge (bins + 2 of them)."""
        with np.errstate(all="ignore"):  # the unselected branches of the exact functions
            return MelWeightMatrixOp._exact_edges(bins, length, rate, low, high)

    @staticmethod
    def _exact_edges(bins: int, length: int, rate: int, low: Any, high: Any) -> np.ndarray:
        ln10 = float(log64(np, np.float64(10)))
        low_mel = 2595 * float(log1p64(np, np.float64(low / 700))) / ln10
        high_mel = 2595 * float(log1p64(np, np.float64(high / 700))) / ln10
        mels = np.arange(bins + 2) * ((high_mel - low_mel) / (bins + 2)) + low_mel
        hertz = 700 * expm1_64(np, mels / 2595 * ln10)
        return (((length + 1) * hertz) // rate).astype(np.int64)


DEFS: tuple[OpDef, ...] = (
    OpDef("DFT", 17, DFTOp),
    OpDef("STFT", 17, STFTOp),
    OpDef("HannWindow", 17, HannWindowOp),
    OpDef("HammingWindow", 17, HammingWindowOp),
    OpDef("BlackmanWindow", 17, BlackmanWindowOp),
    OpDef("MelWeightMatrix", 17, MelWeightMatrixOp),
)
