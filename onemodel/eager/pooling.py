"""Max pooling and fused ReLU + max pooling (seed 002 §8, §9), and their gradient.

Both keep the winner of each window as an INT32 index y·W + x in its input plane, an owned
slot of the record, computed only when recording; the fused form reports −1 for a window
without a positive element, which then passes no gradient. The gradient of an input position
is the sum over the windows it won, kernel offsets in row-major order (exact in any mode).
"""

from __future__ import annotations

from collections.abc import Sequence

from onemodel.backends.pooling import pool_geometry
from onemodel.eager import calls
from onemodel.eager.record import BackwardRecord, OpKind, attach, recording
from onemodel.tensors import DType, Tensor, TensorShapeError

Pair = int | Sequence[int]


def max_pool2d(x: Tensor, kernel: Pair, stride: Pair | None = None, padding: Pair = 0) -> Tensor:
    """Max over windows of an (N, C, H, W) tensor; `stride` defaults to the kernel."""
    return _pool(OpKind.MAX_POOL2D, x, kernel, stride, padding)


def relu_max_pool2d(
    x: Tensor, kernel: Pair, stride: Pair | None = None, padding: Pair = 0
) -> Tensor:
    """max_pool2d(relu(x)) in one pass, with −1 indices where nothing positive won."""
    return _pool(OpKind.RELU_MAX_POOL2D, x, kernel, stride, padding)


def _pair(value: Pair) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)  # type: ignore[return-value]


def _pool(kind: OpKind, x: Tensor, kernel: Pair, stride: Pair | None, padding: Pair) -> Tensor:
    if x.rank != 4:
        raise TensorShapeError(f"{kind.value} needs an (N, C, H, W) input, not shape {x.shape}")
    window = _pair(kernel)
    step = window if stride is None else _pair(stride)
    pad = _pair(padding)
    geometry = pool_geometry(x.shape[2:], window, step, pad)
    result = calls.empty((*x.shape[:2], *geometry.output_hw), x)
    record = recording(x)
    indices = calls.empty(result.shape, x, DType.INT32) if record else None
    pool = calls.kernels(x).max_pool2d
    if kind is OpKind.RELU_MAX_POOL2D:
        pool = calls.kernels(x).relu_max_pool2d
    pool(x, result, window, step, pad, indices)
    if record:
        attach(result, kind, (x,), saved=(indices,), owned=(0,), ints=(*window, *step, *pad))
    return result


def _pool_backward(record: BackwardRecord, g: Tensor) -> tuple[Tensor]:
    kh, kw, sh, sw, ph, pw = record.ints
    grad_in = calls.empty(record.input_shape(0), g)
    calls.kernels(g).max_pool2d_backward(g, record.saved(0), grad_in, (kh, kw), (sh, sw), (ph, pw))
    return (grad_in,)


BACKWARD = {OpKind.MAX_POOL2D: _pool_backward, OpKind.RELU_MAX_POOL2D: _pool_backward}
