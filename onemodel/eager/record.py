"""The backward record of seed 002 §8: what one operation leaves behind for the backward pass.

A result that needs gradients points to its record (`Tensor.autograd`, seen as `grad_fn`). The
record names the operation, holds per input the input's autograd node (None when that input
needs no gradient) with its shape and type, positional saved slots (tensors sharing storage
with what the operation read, each with its buffer version at save time, or empty when the
operation did not need it), and integer and float attribute vectors. Slots the record filled
with tensors it made itself are owned: `release()` frees them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from onemodel.tensors import DType, SavedTensor, Tensor, TensorError
from onemodel.tensors.autograd import is_grad_enabled


class OpKind(enum.Enum):
    """The operations the backward engine knows; each has one backward function."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    NEG = "neg"
    ABS = "abs"
    RELU = "relu"
    SQRT = "sqrt"
    EXP = "exp"
    LOG = "log"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    MATMUL = "matmul"
    SUM = "sum"
    RESHAPE = "reshape"
    PERMUTE = "permute"
    MAX_POOL2D = "max_pool2d"
    RELU_MAX_POOL2D = "relu_max_pool2d"
    LAYER_NORM = "layer_norm"
    GELU = "gelu"
    SOFTMAX = "softmax"
    CONV2D = "conv2d"
    EMBEDDING = "embedding"


@dataclass(frozen=True)
class InputEdge:
    """One input of a recorded operation: its autograd node (None: no gradient), shape, type."""

    node: Any
    shape: tuple[int, ...]
    dtype: DType


class BackwardRecord:
    """Everything the backward function of `op` reads; see the module docstring."""

    __slots__ = ("_owned", "_saved", "floats", "inputs", "ints", "op", "released")

    def __init__(
        self,
        op: OpKind,
        inputs: Sequence[Tensor],
        saved: Sequence[Tensor | None] = (),
        owned: Iterable[int] = (),
        ints: Sequence[int] = (),
        floats: Sequence[float] = (),
    ) -> None:
        self.op = op
        self.inputs = tuple(InputEdge(t.autograd, t.shape, t.dtype) for t in inputs)
        # A new handle per slot: the saved tensor must not carry the result's own record,
        # which would make the record keep itself alive.
        self._saved = [
            None if t is None else SavedTensor(t.view(t.shape, t.strides)) for t in saved
        ]
        self._owned = frozenset(owned)
        self.ints = tuple(int(value) for value in ints)
        self.floats = tuple(float(value) for value in floats)
        self.released = False

    def __repr__(self) -> str:
        return f"BackwardRecord({self.op.name}, {len(self.inputs)} inputs)"

    def needs_grad(self, index: int) -> bool:
        return self.inputs[index].node is not None

    def input_shape(self, index: int) -> tuple[int, ...]:
        return self.inputs[index].shape

    def saved(self, slot: int) -> Tensor:
        """The tensor of a slot; TensorVersionError if it was written since it was saved."""
        if self.released:
            raise TensorError(
                f"the {self.op.name} record was released by an earlier backward pass; pass "
                "retain_graph=True to backward() to run through it again"
            )
        entry = self._saved[slot]
        if entry is None:
            raise TensorError(f"slot {slot} of the {self.op.name} record is empty")
        return entry.unpack()

    def release(self) -> None:
        """Free the owned tensors and forget the saved ones; the record cannot run again."""
        for slot in sorted(self._owned):
            entry = self._saved[slot]
            if entry is not None and entry.tensor.buffer.live:
                entry.tensor.dispose()
        self._saved = [None] * len(self._saved)
        self.released = True


def recording(*inputs: Any) -> bool:
    """Whether an operation on these inputs records: grad mode on and an input needs gradients."""
    return is_grad_enabled() and any(
        isinstance(t, Tensor) and t.autograd is not None for t in inputs
    )


def attach(result: Tensor, op: OpKind, inputs: Sequence[Tensor], **record: Any) -> Tensor:
    """Make `result` point to a new record of `op` (keyword arguments as BackwardRecord's)."""
    result.autograd = BackwardRecord(op, inputs, **record)
    return result
