"""Matrix products: MatMul (NumPy's matmul, batch broadcasting included) and Gemm (a 2-D product
with an alpha/beta epilogue).

Both run on the backend's `matmul_arrays`; in exact mode floating products use
`exact_matmul_arrays` instead, each element the exact dot product rounded once (the same bits on
every machine; constant operands are prepared for it once per plan). Gemm's epilogue is
separate roundings (alpha·AB, beta·C, then their sum), never a fused multiply-add, so exact mode
can define it. In fast mode a float16 or bfloat16 Gemm forms that epilogue in float32 and rounds
once, as onnxruntime's CPU kernel does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onemodel.backends.broadcasting import held_operand
from onemodel.backends.fp_errors import quiet
from onemodel.graph.operators.base import (
    Array,
    BoundCall,
    BoundStep,
    InferContext,
    NodeInfo,
    OpDef,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.prepared import PreparesConstants
from onemodel.graph.operators.unary import IEEE_FLOATS, WIDE_INTEGERS
from onemodel.tensors import DType


def _product_types(opset: int) -> frozenset[int]:
    """Integers join at opset 9, bfloat16 at 13 (the same steps for MatMul and Gemm)."""
    allowed = set(IEEE_FLOATS)
    if opset >= 9:
        allowed |= WIDE_INTEGERS
    if opset >= 13:
        allowed.add(DType.BFLOAT16)
    return frozenset(allowed)


def matmul_shape(
    node: NodeInfo, a: tuple[int, ...], b: tuple[int, ...], b_input: int = 1
) -> tuple[int, ...]:
    """numpy.matmul's result shape for operands of shapes `a` and `b` (b is input `b_input` of
    the node): a 1-D a is a row and a 1-D b a column, whose axes the result then drops; the
    batch dims broadcast. Shapes that do not multiply are bad input."""
    if not a or not b:
        raise node.bad_input(
            f"{node.op_type} needs operands of rank ≥ 1, not shapes {a} and {b}", node.inputs[0]
        )
    a_matrix = (1, *a) if len(a) == 1 else a
    b_matrix = (*b, 1) if len(b) == 1 else b
    if a_matrix[-1] != b_matrix[-2]:
        raise node.bad_input(
            f"{node.op_type} of shapes {a} and {b}: the inner dimensions {a_matrix[-1]} and "
            f"{b_matrix[-2]} differ",
            node.inputs[b_input],
        )
    try:
        batch = np.broadcast_shapes(a_matrix[:-2], b_matrix[:-2])
    except ValueError:
        raise node.bad_input(
            f"{node.op_type} of shapes {a} and {b}: the batch dimensions do not broadcast",
            node.inputs[b_input],
        ) from None
    rows = (a_matrix[-2],) if len(a) > 1 else ()
    cols = (b_matrix[-1],) if len(b) > 1 else ()
    return (*batch, *rows, *cols)


def gemm_shape(
    node: NodeInfo,
    a: tuple[int, ...],
    b: tuple[int, ...],
    trans_a: bool,
    trans_b: bool,
    b_input: int = 1,
) -> tuple[int, int]:
    """(rows, cols) of op(A)·op(B) for Gemm-style 2-D operands (B is input `b_input`); other
    ranks and unequal inner dimensions are bad input."""
    if len(a) != 2 or len(b) != 2:
        raise node.bad_input(
            f"{node.op_type} needs 2-D A and B, not shapes {a} and {b}", node.inputs[0]
        )
    rows, inner = a[::-1] if trans_a else a
    inner_b, cols = b[::-1] if trans_b else b
    if inner != inner_b:
        raise node.bad_input(
            f"{node.op_type} of A {a} (transA={int(trans_a)}) and B {b} "
            f"(transB={int(trans_b)}): the inner dimensions {inner} and {inner_b} differ",
            node.inputs[b_input],
        )
    return rows, cols


def as_matrices(a: Array, b: Array) -> tuple[Array, Array]:
    """The operands of numpy.matmul as stacks of matrices: a 1-D a as one row, a 1-D b as one
    column."""
    return (a.reshape(1, -1) if a.ndim == 1 else a), (b.reshape(-1, 1) if b.ndim == 1 else b)


@dataclass(frozen=True)
class UniformColumns:
    """A constant right operand whose columns are all equal, as `column` (K, 1): fast mode
    computes one output column and copies it, so the outputs are equal as the arithmetic
    says. A GEMM does not promise that: OpenBLAS rounds the columns of its edge blocks in
    another order, and the ONNX suite's light Inception-v1 (every classifier weight 0.02)
    turned logits of 8.3e20 one ulp apart in 8 of 1000 columns into a softmax of 0.125
    where onnxruntime gives 0.001 everywhere."""

    column: Array


def uniform_columns(xp: Any, b: Array | None) -> UniformColumns | None:
    """`UniformColumns` of a 2-D float b of several columns that are all equal, else None
    (a real weight fails the first comparison, of its first two columns)."""
    if b is None or b.ndim != 2 or b.shape[1] < 2 or b.dtype.kind != "f":
        return None
    first = b[:, :1]
    if not bool((b[:, 1:2] == first).all()) or not bool((b == first).all()):
        return None
    return UniformColumns(xp.ascontiguousarray(first))


class MatrixProduct(PreparesConstants):
    """What MatMul and Gemm share: their types, the choice of the exact or fast kernel, and in
    exact mode the constant operands prepared once per plan (`exact_matmul_operand`)."""

    supports_exact = True

    def _check_operands(self, ctx: InferContext, *indices: int) -> int:
        """The one element type of the operands at `indices`."""
        self.check_types(ctx, _product_types(self.node.opset), *indices)
        dtypes = {ctx.dtype(i) for i in indices if ctx.has(i)}
        if len(dtypes) > 1:
            raise self.node.invalid(
                f"{self.node.op_type} needs operands of one element type, not "
                f"{sorted(DType(d).name for d in dtypes)}"
            )
        return ctx.dtype(indices[0])

    def _operands(self, a: Array | None, b: Array | None) -> tuple[Array | None, Array | None]:
        """The matrices multiplied for inputs a and b (either may be None)."""
        raise NotImplementedError

    def prepare_for_plan(
        self,
        ctx: RunContext,
        constants: Sequence[Array | None],
        specs: Sequence[TensorSpec | None],
    ) -> Any:
        """In fast mode, a constant weight of equal columns (`UniformColumns`): compared once
        per plan, never in a run (on a device, the comparison is a copy to the host)."""
        if ctx.exact:
            return self.prepare(ctx, constants)
        return uniform_columns(ctx.xp, self._operands(None, constants[1])[1])

    def prepare(self, ctx: RunContext, constants: Sequence[Array | None]) -> Any:
        given = [c for c in constants[:2] if c is not None]
        if not ctx.exact or not given or given[0].dtype.kind != "f":
            return None
        a, b = self._operands(constants[0], constants[1])
        kernels = ctx.kernels
        return (
            None if a is None else kernels.exact_matmul_operand(a, -1),
            None if b is None else kernels.exact_matmul_operand(b, -2),
        )

    @staticmethod
    def _multiply(ctx: RunContext, prepared: Any, a: Array, b: Array, out: Array) -> None:
        if ctx.exact and out.dtype.kind not in "iu":
            if prepared is not None:
                a = a if prepared[0] is None else prepared[0]
                b = b if prepared[1] is None else prepared[1]
            ctx.kernels.exact_matmul_arrays(a, b, out)
        elif isinstance(prepared, UniformColumns):
            one = ctx.xp.empty((*out.shape[:-1], 1), dtype=out.dtype)
            ctx.kernels.matmul_arrays(a, prepared.column, one)
            out[...] = one
        else:
            ctx.kernels.matmul_arrays(a, b, out)


class MatMulOp(MatrixProduct):
    """numpy.matmul: a 1-D operand is a row (left) or column (right) vector whose axis is then
    dropped from the result; the batch dims of both operands broadcast."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        dtype = self._check_operands(ctx, 0, 1)
        return [ctx.output(dtype, matmul_shape(self.node, ctx.shape(0), ctx.shape(1)))]

    def _operands(self, a: Array | None, b: Array | None) -> tuple[Array | None, Array | None]:
        return (
            None if a is None else (a.reshape(1, -1) if a.ndim == 1 else a),
            None if b is None else (b.reshape(-1, 1) if b.ndim == 1 else b),
        )

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """A matrix or a batch of them times a weight matrix: the backend's `weight_product`
        (for a batch, `run_prepared` reshapes nothing: out has the product's shape)."""
        if len(step.specs[0].shape) < 2:
            return None
        return weight_call(ctx, step, step.constants[1])

    def run_prepared(
        self, ctx: RunContext, prepared: Any, inputs: Sequence[Array | None], outputs: Any
    ) -> None:
        (out,) = outputs
        if inputs[0].ndim == inputs[1].ndim == 2 and not ctx.exact and prepared is None:
            ctx.kernels.matmul_arrays(inputs[0], inputs[1], out)  # two matrices: no reshapes
            return
        a_matrix, b_matrix = as_matrices(inputs[0], inputs[1])
        batch = out.shape[: max(a_matrix.ndim, b_matrix.ndim) - 2]
        product = out.reshape(*batch, a_matrix.shape[-2], b_matrix.shape[-1])
        self._multiply(ctx, prepared, a_matrix, b_matrix, product)


class GemmOp(MatrixProduct):
    """Y = alpha·op(A)·op(B) + beta·C with op a transpose when transA/transB say so.

    C broadcasts one way to (M, N); before opset 7 only when the `broadcast` attribute says so,
    and before opset 11 it is required. beta = 0 ignores C (so its NaNs and infinities too), as
    onnxruntime and the ONNX reference do. Integer types scale in float64 and truncate.
    """

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.trans_a = bool(node.attr("transA", 0))
        self.trans_b = bool(node.attr("transB", 0))
        self.alpha = float(node.attr("alpha", 1.0))
        self.beta = float(node.attr("beta", 1.0))
        self.c_broadcasts = node.opset >= 7 or bool(node.attr("broadcast", 0))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        dtype = self._check_operands(ctx, 0, 1, 2)
        rows, cols = gemm_shape(self.node, ctx.shape(0), ctx.shape(1), self.trans_a, self.trans_b)
        if ctx.has(2):
            self._check_c(ctx.shape(2), (rows, cols))
        elif self.node.opset < 11:
            raise self.node.invalid(f"Gemm before opset 11 needs the input C ({self.node.label})")
        return [ctx.output(dtype, (rows, cols))]

    def _check_c(self, c: tuple[int, ...], target: tuple[int, int]) -> None:
        fits = c == target or (
            self.c_broadcasts
            and len(c) <= 2
            and all(d in (1, t) for d, t in zip(c[::-1], target[::-1], strict=False))
        )
        if not fits:
            how = "broadcast one way" if self.c_broadcasts else "be equal (broadcast=0)"
            raise self.node.bad_input(
                f"Gemm's C of shape {c} must {how} to the product's shape {target}",
                self.node.inputs[2],
            )

    def _operands(self, a: Array | None, b: Array | None) -> tuple[Array | None, Array | None]:
        return (
            a.T if a is not None and self.trans_a else a,
            b.T if b is not None and self.trans_b else b,
        )

    def run_prepared(
        self, ctx: RunContext, prepared: Any, inputs: Sequence[Array | None], outputs: Any
    ) -> None:
        a, b, c = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
        (out,) = outputs
        xp = ctx.xp
        if not ctx.exact and out.dtype.itemsize == 2 and out.dtype.kind in "fV":
            # onnxruntime forms a float16 Gemm's whole epilogue in float32 and rounds once
            # (its CPU kernel runs the float32 Gemm between casts): so does fast mode.
            wide = xp.empty(out.shape, dtype=xp.float32)
            self._epilogue(ctx, prepared, a, b, None if c is None else c.astype(xp.float32), wide)
            out[...] = wide
            return
        self._epilogue(ctx, prepared, a, b, c, out)

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """A weight B (A not transposed), alpha 1 and beta 1 or 0: the backend's
        `weight_product` on op(B) and C added, as `_epilogue` computes them."""
        weight = step.constants[1]
        if self.trans_a or self.alpha != 1.0 or self.beta not in (0.0, 1.0) or weight is None:
            return None
        product = weight_call(ctx, step, weight.T if self.trans_b else weight)
        if product is None:
            return None
        if len(step.specs) < 3 or step.specs[2] is None or self.beta == 0.0:
            return product
        add, c = ctx.xp.add, step.constants[2]
        if c is not None:
            c = held_operand(ctx.xp, c, tuple(step.outputs[0].shape))

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            product(ctx, inputs, outputs)
            out = outputs[0]
            add(out, inputs[2] if c is None else c, out=out)

        return call

    def _epilogue(
        self, ctx: RunContext, prepared: Any, a: Array, b: Array, c: Array | None, out: Array
    ) -> None:
        """out = alpha·op(a)·op(b) + beta·c in out's type, each step rounded to it."""
        self._multiply(ctx, prepared, *self._operands(a, b), out)
        xp = ctx.xp
        # Each scale is one float64 product rounded to the output type: exact for float32 and
        # double operands, and no pre-rounding of alpha for float16 (truncation for integers).
        with quiet():
            if self.alpha != 1.0:
                xp.multiply(out, np.float64(self.alpha), out=out, casting="unsafe")
            if c is not None and self.beta != 0.0:
                if self.beta != 1.0:
                    scaled = xp.empty(c.shape, dtype=out.dtype)
                    xp.multiply(c, np.float64(self.beta), out=scaled, casting="unsafe")
                    c = scaled
                xp.add(out, c, out=out)


def weight_call(ctx: RunContext, step: BoundStep, weight: Array | None) -> BoundCall | None:
    """out = a @ weight by the backend's `weight_product`, for an a of rank 2 or more known
    only in the run and a 2-D constant weight of out's type; None where that does not apply."""
    if weight is None or step.constants[0] is not None or weight.ndim != 2:
        return None
    dtype = step.outputs[0].numpy_dtype
    if step.specs[0].numpy_dtype != dtype or weight.dtype != dtype:
        return None
    if not (weight.flags.c_contiguous or weight.flags.f_contiguous):
        return None
    product = ctx.kernels.weight_product(dtype, len(step.specs[0].shape))
    if product is None:
        return None
    if isinstance(step.prepared, UniformColumns):  # one column computed, then copied
        shape = tuple(step.outputs[0].shape)
        one = ctx.xp.empty((*shape[:-1], 1), dtype=dtype)
        column = step.prepared.column

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            product(inputs[0], column, out=one)
            outputs[0][...] = one

        return call

    def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        product(inputs[0], weight, out=outputs[0])

    return call


DEFS: tuple[OpDef, ...] = (
    OpDef("MatMul", 1, MatMulOp),
    OpDef("Gemm", 1, GemmOp),
)
