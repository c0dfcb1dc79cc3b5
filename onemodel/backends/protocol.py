"""The kernel seam: what a backend is, and the entry points operators and eager code call.

Everything above this seam (tensors' users, the graph runtime, sessions) is backend-agnostic; a
backend (NumPy on the CPU, CuPy on the GPU) implements `Kernels` and is chosen once per session
through `KernelPaths`. The first entry points are those of seed 002 §9; the graph runtime adds
more as operators need them.

Conventions shared by every entry point: inputs are tensors of the backend's memory with
arbitrary strides; the caller allocates the output (and expands broadcasts to stride 0 first, so
the operands of `binary` all have the output's shape); kernels write only through
`out.mutable_data()`, which advances the output buffer's version.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol, runtime_checkable

from onemodel.tensors import Memory, Tensor


class BinaryOp(enum.Enum):
    """Element-wise operations of two operands, each one correctly rounded operation."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MAX = "max"
    MIN = "min"


class UnaryOp(enum.Enum):
    """Element-wise operations of one operand."""

    NEG = "neg"
    ABS = "abs"
    RELU = "relu"
    SQRT = "sqrt"
    EXP = "exp"
    LOG = "log"
    TANH = "tanh"
    SIGMOID = "sigmoid"


@runtime_checkable
class Kernels(Protocol):
    """A backend: its memory and array namespace, and the kernel entry points."""

    name: str
    memory: Memory
    supports_exact: bool
    flushes_subnormals: bool  # CuPy's kernels read and write subnormals as zeros

    @property
    def xp(self) -> Any:
        """The array namespace (numpy or cupy) of this backend's memory."""

    def to_host(self, tensor: Tensor) -> Any:
        """A row-major NumPy copy of a tensor of this backend."""

    def from_host(self, array: Any) -> Tensor:
        """A contiguous tensor of this backend holding a copy of a host array."""

    def binary(self, op: BinaryOp, a: Tensor, b: Tensor, out: Tensor) -> None:
        """out = a op b, element by element; all three have one shape."""

    def unary(self, op: UnaryOp, x: Tensor, out: Tensor) -> None:
        """out = op(x), element by element; both have one shape."""

    def matmul(self, a: Tensor, b: Tensor, out: Tensor) -> None:
        """out[..., m, n] = Σ_k a[..., m, k] · b[..., k, n]; batch dims already broadcast."""

    def max_pool2d(
        self,
        x: Tensor,
        out: Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        pad: tuple[int, int],
        indices: Tensor | None = None,
    ) -> None:
        """Max pooling of an (N, C, H, W) tensor with seed 002 §9's semantics.

        Each window starts at y = oy·stride − pad and holds only in-bounds positions (padding
        never wins); 0 ≤ pad < kernel, so every window holds at least one, and a window whose
        values are all −inf gives −inf at its first in-bounds position. In row-major window
        order the first element wins ties; a NaN wins and the first NaN is reported.
        `indices`, when given (INT32, same shape as `out`), receive y·W + x of each winner in
        its input plane.
        """

    # Array-level entry points of the graph operators: backend arrays already checked by the
    # operator's infer; `pads` are the leading pads, the output's shape fixes the rest.

    def matmul_arrays(self, a: Any, b: Any, out: Any) -> None:
        """out = a @ b with NumPy's batch broadcasting (float16/bfloat16 via float32)."""

    def exact_matmul_arrays(self, a: Any, b: Any, out: Any) -> None:
        """out = a @ b summed in float64 in the order k = 0..K−1, rounded once (exact mode)."""

    def conv_arrays(
        self,
        x: Any,
        w: Any,
        out: Any,
        strides: Any,
        pads: Any,
        dilations: Any,
        group: int,
        scratch: Any = None,
    ) -> None:
        """N-D grouped cross-correlation of x (N, C, *S) with w (M, C/group, *K), no bias;
        temporaries from `scratch(shape, dtype)` when given."""

    def conv_transpose_arrays(
        self, x: Any, w: Any, out: Any, strides: Any, pads: Any, dilations: Any, group: int
    ) -> None:
        """N-D grouped transposed convolution of x (N, C, *S) with w (C, M/group, *K), no bias."""

    def max_pool_arrays(
        self,
        x: Any,
        out: Any,
        kernel: Any,
        strides: Any,
        pads: Any,
        dilations: Any,
        indices: Any | None = None,
    ) -> None:
        """N-D max pooling with max_pool2d's rules; int64 `indices` are positions in the plane."""

    def sum_pool_arrays(
        self, x: Any, out: Any, kernel: Any, strides: Any, pads: Any, dilations: Any
    ) -> None:
        """N-D sum of each window's real positions (padding adds nothing)."""
