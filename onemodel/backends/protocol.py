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
    exact_xp: Any  # the namespace of exact mode: xp, or one that keeps subnormals on a flusher
    holds_channels_last: bool  # whether `held_conv` takes values held so (graph/layouts.py)

    @property
    def xp(self) -> Any:
        """The array namespace (numpy or cupy) of this backend's memory."""

    def to_host(self, tensor: Tensor) -> Any:
        """A row-major NumPy copy of a tensor of this backend."""

    def from_host(self, array: Any) -> Tensor:
        """A contiguous tensor of this backend holding a copy of a host array."""

    def synchronize(self) -> None:
        """Wait until work queued on the device has finished (a no-op on the CPU), so that a
        clock read afterwards measures it: CuPy launches kernels asynchronously."""

    def elementwise_tail(self, chain: Any, dtype: Any, exact: bool) -> Any | None:
        """The element-wise tail of a fused chain ((op type, sources) per member) as one
        generated kernel for `run_elementwise_chain`, or None: members then run one by one.
        Only backends that generate kernels (CuPy) return one."""

    def compiled_activation(self, kernel: Any, x: Any, out: Any, parameters: tuple) -> bool:
        """out = the fast-mode activation `kernel` (of backends/activations.py, with its
        `parameters`) of x by a compiled one-pass form, True; or False, having written
        nothing, where the backend has none for it or for these arrays (the NumPy backend
        compiles some with numba: numpy_cpu/compiled_activations.py)."""

    def compiled_cast(self, x: Any, out: Any) -> bool:
        """out = x converted by a compiled form giving `backends.casts.fast_cast`'s answer,
        True; or False, having written nothing, where the backend has none for these arrays
        (the NumPy backend's float32 ↔ float16: numpy_cpu/compiled_casts.py)."""

    def compiled_softmax(self, x: Any, out: Any, log: bool) -> bool:
        """out = Softmax (LogSoftmax where `log`) of float32 x along its last axis by a
        compiled form, True; or False, having written nothing, where the backend has none for
        these arrays (the NumPy backend's: numpy_cpu/compiled_exponentials.py)."""

    compiles_recurrent_loops: bool
    """Whether `compiled_lstm_steps` and `compiled_gru_steps` may take float32 layers
    (backends/recurrent.py then runs a bidirectional layer a direction at a time)."""

    def compiled_lstm_steps(
        self, projected: Any, rt: Any, states: Any, c: Any, backward: bool
    ) -> bool:
        """Every step of an LSTM direction by a compiled loop (backends/recurrent.py's
        `LSTMCells.compiled_loop` says what the arrays hold), True; or False, having written
        nothing, where the backend has none for these arrays (the NumPy backend's:
        numpy_cpu/compiled_recurrent.py)."""

    def compiled_gru_steps(
        self, projected: Any, rzr: Any, rn: Any, bias_n: Any, states: Any, backward: bool,
        before_reset: bool,
    ) -> bool:  # fmt: skip
        """Every step of a GRU direction by a compiled loop (`GRUCells.compiled_loop` says
        what the arrays hold), True; or False, having written nothing, where the backend has
        none for these arrays."""

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
        """out = a @ b, each element the exact dot product rounded once (exact mode; float64:
        the float64 sum in the order k = 0..K−1); a, b arrays or exact_matmul_operands."""

    def exact_matmul_operand(self, x: Any, axis: int) -> Any:
        """x prepared once as an exact_matmul_arrays operand whose K axis is `axis`."""

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
        weights: Any = None,
        bias: Any = None,
    ) -> None:
        """N-D grouped cross-correlation of x (N, C, *S) with w (M, C/group, *K), plus `bias`
        (M,) when given; temporaries from `scratch(shape, dtype)` when given; `weights` is
        `conv_weights(w, group)` prepared once."""

    def conv_transpose_arrays(
        self,
        x: Any,
        w: Any,
        out: Any,
        strides: Any,
        pads: Any,
        dilations: Any,
        group: int,
        scratch: Any = None,
        exact: bool = False,
    ) -> None:
        """N-D grouped transposed convolution of x (N, C, *S) with w (C, M/group, *K), no bias;
        temporaries from `scratch` when given (`exact`: exact_matmul_arrays columns, ordered
        float64 col2im, one rounding)."""

    def transpose_arrays(self, x: Any, perm: Any, out: Any) -> None:
        """out = x.transpose(perm) (Transpose, DepthToSpace, SpaceToDepth)."""

    def take_arrays(self, data: Any, positions: Any, axis: int, out: Any) -> None:
        """out = data at `positions` along `axis`, positions already checked in range."""

    def double_last_axes_arrays(self, x: Any, out: Any, scratch: Any) -> bool:
        """out = x repeated twice along each of its last two axes, bits unchanged; False where
        the type or layout does not allow it (Resize then gathers)."""

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
        self,
        x: Any,
        out: Any,
        kernel: Any,
        strides: Any,
        pads: Any,
        dilations: Any,
        scratch: Any = None,
        row_major: bool = False,
        divisor: Any = None,
    ) -> None:
        """N-D sum of each window's real positions (padding adds nothing): one spatial axis
        at a time, first axis first, or with `row_major` in the window's row-major order;
        divided by `divisor` (broadcasting to out) when given."""

    # Exact mode's array entry points (onemodel/backends/exact_arrays.py, docs/exact-mode.md):
    # float64 work in one written-out order, rounded once into `out`; the same bits everywhere.

    def exact_conv_arrays(
        self,
        x: Any,
        w: Any,
        out: Any,
        strides: Any,
        pads: Any,
        dilations: Any,
        group: int,
        weights: Any = None,
    ) -> None:
        """conv_arrays as the exact matmul of W with im2col's columns (`weights`: W from
        exact_conv_weights)."""

    def exact_conv_weights(self, w: Any, group: int) -> Any:
        """W prepared once for exact_conv_arrays."""

    def exact_max_pool_arrays(
        self,
        x: Any,
        out: Any,
        kernel: Any,
        strides: Any,
        pads: Any,
        dilations: Any,
        indices: Any | None = None,
    ) -> None:
        """max_pool_arrays by strict compare and select, offsets in row-major order."""

    def exact_average_pool_arrays(
        self, x: Any, out: Any, kernel: Any, strides: Any, pads: Any, dilations: Any, divisor: Any
    ) -> None:
        """Each window's ordered float64 sum, divided once by `divisor`."""

    def exact_sum_arrays(self, x: Any, axes: Any, out: Any) -> None:
        """Σ over `axes` in float64, reduced positions in row-major order."""

    def exact_mean_arrays(self, x: Any, axes: Any, out: Any) -> None:
        """exact_sum_arrays divided once by the count."""

    def exact_max_arrays(self, x: Any, axes: Any, out: Any) -> None:
        """Max over `axes` by strict compare and select in row-major order; first NaN wins."""

    def exact_min_arrays(self, x: Any, axes: Any, out: Any) -> None:
        """Min over `axes` by strict compare and select in row-major order; first NaN wins."""

    def exact_exp_arrays(self, x: Any, out: Any) -> None:
        """exp by a fixed range reduction and polynomial in float64."""

    def exact_log_arrays(self, x: Any, out: Any) -> None:
        """log by a fixed range reduction and series in float64."""

    def exact_erf_arrays(self, x: Any, out: Any) -> None:
        """erf by a fixed positive series times the exact exp, in float64."""

    def exact_map_arrays(self, function: Any, inputs: Any, out: Any) -> None:
        """out = function(xp, *float64 copies of inputs) rounded once: the frame of the
        element-wise exact formulas (exact_elementary.py, exact_activations.py)."""

    def exact_softmax_arrays(self, x: Any, axis: int, out: Any) -> None:
        """Softmax along `axis` from the exact max, exp and ordered sum."""

    def exact_log_softmax_arrays(self, x: Any, axis: int, out: Any) -> None:
        """LogSoftmax along `axis` from the exact max, exp, ordered sum and log."""

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
        """LayerNormalization over the axes from `axis` on, statistics by ordered sums."""

    # Tensor entry points of the eager operations and their gradients (onemodel/eager/): FLOAT
    # or DOUBLE operands of one type, validated before anything is written, like those above.

    def reduce_sum(self, x: Tensor, out: Tensor) -> None:
        """out = Σ of x over the axes where out (of x's rank) has extent 1 and x does not.

        The meaning is exact_reduce_sum's; a fast backend may sum in another order.
        """

    def exact_reduce_sum(self, x: Tensor, out: Tensor) -> None:
        """reduce_sum in float64, reduced elements in row-major order, rounded once (exact mode)."""

    def reduce_max(self, x: Tensor, out: Tensor) -> None:
        """out = max of x over reduce_sum's axes (none of them empty); a NaN wins."""

    def select_greater(
        self, a: Tensor, b: Tensor, if_greater: Tensor, otherwise: Tensor, out: Tensor
    ) -> None:
        """out = if_greater where a > b, else otherwise (a NaN compares false); one shape."""

    def max_pool2d_backward(
        self,
        grad_out: Tensor,
        indices: Tensor,
        grad_in: Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        pad: tuple[int, int],
    ) -> None:
        """grad_in = at each input position, Σ of grad_out over the windows whose winner
        (`indices` as max_pool2d reports them; −1: none) it is, kernel offsets in row-major
        order."""

    def relu_max_pool2d(
        self,
        x: Tensor,
        out: Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        pad: tuple[int, int],
        indices: Tensor | None = None,
    ) -> None:
        """max_pool2d of relu(x); a window without a positive element gives +0 and index −1
        ("no gradient"), seed 002 §8."""

    def im2col(
        self,
        x: Tensor,
        columns: Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        pad: tuple[int, int],
    ) -> None:
        """columns (N, C·kh·kw, OH·OW) of x (N, C, H, W): rows ordered (c, ky, kx), column
        oy·OW + ox holds the window at (oy·stride − pad, ox·stride − pad); padding reads 0."""

    def col2im(
        self,
        columns: Tensor,
        out: Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        pad: tuple[int, int],
    ) -> None:
        """The adjoint of im2col: out (N, C, H, W) = Σ of the column entries that read each
        position, kernel offsets in row-major order."""

    def embedding(self, table: Tensor, ids: Tensor, out: Tensor) -> None:
        """out[i…, :] = table[ids[i…], :] for INT32/INT64 ids in 0..V−1."""

    def embedding_backward(
        self, ids: Tensor, grad_out: Tensor, grad_table: Tensor, skip_id: int
    ) -> None:
        """grad_table[v] = Σ of grad_out[i…] over the ids equal to v, in row-major order of
        the ids; ids equal to `skip_id` contribute nothing."""
