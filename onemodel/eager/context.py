"""Which kernels eager operations call, chosen per thread (seed 002 §9: selected once, not per op).

Without a choice in scope, a tensor's operations run on the backend named like its memory
(`numpy` for host memory, `cupy` for device memory). `use_kernels` scopes another backend, for
instance the reference kernels, and exact mode, in which every operation either follows the
rules of docs/exact-mode.md or refuses to run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from onemodel.backends import KernelPaths, Kernels
from onemodel.tensors import Memory, TensorError

_state = threading.local()


@dataclass(frozen=True)
class KernelChoice:
    """The backend an operation calls, and whether it must give exact mode's bits."""

    kernels: Kernels
    exact: bool


@contextmanager
def use_kernels(kernels: Kernels | str, *, exact: bool = False) -> Iterator[Kernels]:
    """Run this thread's eager operations (and backward passes) on `kernels` inside the block.

    With `exact`, matmuls and sums take the canonical order of exact mode, and operations that
    have no exact definition (exp, log, tanh, sigmoid, GELU, softmax) raise TensorError.
    """
    chosen = KernelPaths.get(kernels) if isinstance(kernels, str) else kernels
    previous = getattr(_state, "choice", None)
    _state.choice = KernelChoice(chosen, exact)
    try:
        yield chosen
    finally:
        _state.choice = previous


def kernel_choice(memory: Memory) -> KernelChoice:
    """The choice in scope for tensors of `memory`, or that memory's own backend."""
    choice = getattr(_state, "choice", None)
    if choice is None:
        if memory.name not in KernelPaths.names():
            raise TensorError(f"no eager kernels for tensors in {memory.name} memory")
        return KernelChoice(KernelPaths.get(memory.name), exact=False)
    if choice.kernels.memory.xp is not memory.xp:
        raise TensorError(
            f"the {choice.kernels.name} kernels in scope cannot compute on tensors in "
            f"{memory.name} memory"
        )
    return choice
