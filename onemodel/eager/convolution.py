"""2-D convolution (cross-correlation) as unfold + matmul, and its gradient (seed 002 §8).

The input is unfolded into columns (N, C·kh·kw, OH·OW) and multiplied by the weights seen as
(M, C·kh·kw). The record keeps the columns as an owned slot (0) when the weights need a
gradient and the weights (slot 1) when the input does, with kernel, stride, padding and the
GEMM depth K = C·kh·kw in Ints (our kernels pad K to nothing). In exact mode the matmuls take
the canonical order and the fold adds kernel offsets in row-major order, so it is exact.
"""

from __future__ import annotations

from collections.abc import Sequence

from onemodel.eager import calls
from onemodel.eager.elementwise import add
from onemodel.eager.record import BackwardRecord, OpKind, attach, recording
from onemodel.eager.shaping import reshape
from onemodel.tensors import Tensor, TensorShapeError

Pair = int | Sequence[int]


def conv2d(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Pair = 1, padding: Pair = 0
) -> Tensor:
    """x (N, C, H, W) ⋆ weight (M, C, kh, kw) → (N, M, OH, OW), plus bias (M,) if given."""
    if x.rank != 4 or weight.rank != 4 or x.shape[1] != weight.shape[1]:
        raise TensorShapeError(
            f"conv2d needs x (N, C, H, W) and weight (M, C, kh, kw), not {x.shape} and "
            f"{weight.shape}"
        )
    kernel, step, pad = weight.shape[2:], _pair(stride), _pair(padding)
    batch, channels, height, width = x.shape
    out_hw = [
        (n + 2 * p - k) // s + 1
        for n, k, s, p in zip((height, width), kernel, step, pad, strict=True)
    ]
    if min(out_hw) < 1 or min(step) < 1 or min(pad) < 0:
        raise TensorShapeError(
            f"conv2d: kernel {kernel} with stride {step} and padding {pad} does not fit "
            f"{x.shape[2:]}"
        )
    depth = channels * kernel[0] * kernel[1]
    columns = calls.empty((batch, depth, out_hw[0] * out_hw[1]), x)
    calls.kernels(x).im2col(x, columns, kernel, step, pad)
    filters = _filters(weight).broadcast_to((batch, weight.shape[0], depth))
    result = calls.matmul(filters, columns).reshape(batch, weight.shape[0], *out_hw)
    if recording(x, weight):
        saved = (columns if weight.requires_grad else None, weight if x.requires_grad else None)
        ints = (*kernel, *step, *pad, depth)
        attach(result, OpKind.CONV2D, (x, weight), saved=saved, owned=(0,), ints=ints)
    else:
        columns.dispose()
    if bias is None:
        return result
    return add(result, reshape(bias, (-1, 1, 1)))


def _pair(value: Pair) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)  # type: ignore[return-value]


def _filters(weight: Tensor) -> Tensor:
    """The weights as the (M, C·kh·kw) matrix of the GEMM."""
    return weight.reshape(weight.shape[0], -1)


def _conv2d_backward(record: BackwardRecord, g: Tensor) -> tuple[Tensor | None, ...]:
    """dW = Σ_n G_n·columns_nᵀ; dx = fold(Wᵀ·G_n)."""
    kh, kw, sh, sw, ph, pw, depth = record.ints
    batch, filters = g.shape[:2]
    grads = g.reshape(batch, filters, -1)
    grad_x = grad_weight = None
    if record.needs_grad(1):
        per_image = calls.matmul(grads, record.saved(0).permute(0, 2, 1))
        grad_weight = calls.reduce_sum(per_image, (1, filters, depth))
        grad_weight = grad_weight.reshape(record.input_shape(1))
    if record.needs_grad(0):
        transposed = _filters(record.saved(1)).permute(1, 0).broadcast_to((batch, depth, filters))
        columns = calls.matmul(transposed, grads)
        grad_x = calls.empty(record.input_shape(0), g)
        calls.kernels(g).col2im(columns, grad_x, (kh, kw), (sh, sw), (ph, pw))
    return grad_x, grad_weight


BACKWARD = {OpKind.CONV2D: _conv2d_backward}
