"""What the tensor layer itself knows of gradients (seed 002 §8): grad mode and leaf nodes.

They live here, not with the eager operations, because `Tensor` needs both: a leaf handle comes
from `Tensor.with_requires_grad()`, and `Tensor.copy_from` refuses to overwrite a tensor that
requires gradients while recording is on. The backward records and the engine are in
`onemodel.eager`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_state = threading.local()


def is_grad_enabled() -> bool:
    """Whether operations on this thread record for a backward pass (on unless scoped off)."""
    return getattr(_state, "enabled", True)


@contextmanager
def no_grad() -> Iterator[None]:
    """Turn recording off on this thread for the block; the previous mode returns after it."""
    previous = is_grad_enabled()
    _state.enabled = False
    try:
        yield
    finally:
        _state.enabled = previous


class GradLeaf:
    """The autograd node of a tensor the user asked gradients for: where `.grad` accumulates."""

    __slots__ = ("grad",)

    def __init__(self) -> None:
        self.grad: Any = None
