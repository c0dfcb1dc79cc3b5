"""Run-time values and the helpers every graph layer shares (seed 000 §1: below them all).

Compiling, planning, running and constant folding all need to tell tensors from sequences and
optionals, key plans by input signature, canonicalise exact mode's NaNs and name the node when
an operator fails. They live here so that those layers import downward only: values <-
compiled <- plan <- run_state <- executor, and the passes (below compiled) use this module too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onemodel.errors import ErrorKind, SessionError
from onemodel.graph.operators.base import RunContext, TensorSpec
from onemodel.tensors import onnx_code_for_numpy

ABSENT = -1  # the value id of an absent optional input

# Exact mode's NaN (python-port.md): the positive quiet NaN with no payload, per width.
_CANONICAL_NAN_BITS = {2: 0x7E00, 4: 0x7FC00000, 8: 0x7FF8000000000000}
_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def canonical_nans(xp: Any, array: Any) -> None:
    """Rewrite every NaN of a float array (16/32/64-bit, bfloat16) to the canonical bits, in
    place: exact mode promises the same bits everywhere, and NaN payloads and signs differ
    between machines."""
    if array.dtype.name == "bfloat16":
        canonical = 0x7FC0
    elif array.dtype.kind == "f" and array.dtype.itemsize in _BITS:
        canonical = _CANONICAL_NAN_BITS[array.dtype.itemsize]
    else:
        return
    bits = array.view(_BITS[array.dtype.itemsize])
    xp.copyto(bits, bits.dtype.type(canonical), where=array != array)


def spec_of(array: Any) -> TensorSpec:
    return TensorSpec(onnx_code_for_numpy(array.dtype), tuple(array.shape))


def is_tensor(value: Any) -> bool:
    """Tensors are arrays; sequences are lists and an empty optional is None."""
    return value is not None and not isinstance(value, list)


@dataclass(frozen=True, slots=True)
class SequenceSpec:
    """A sequence value in an input signature: the specs of its elements."""

    elements: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class EmptyOptional:
    """An empty optional in an input signature (None there means: use the default)."""


EMPTY_OPTIONAL = EmptyOptional()


def signature_of(value: Any) -> TensorSpec | SequenceSpec | EmptyOptional:
    """The cache key of a value: tensors by type and shape, sequences by their elements.

    Sequences and optionals are planned as run-time values (dynamic), since their contents are
    values, not shapes."""
    if value is None:
        return EMPTY_OPTIONAL
    if isinstance(value, list):
        return SequenceSpec(tuple(signature_of(element) for element in value))
    return spec_of(value)


class HostValues(Sequence):
    """Input values as `infer` reads them: host NumPy, converted only when asked for."""

    __slots__ = ("_cache", "_to_host", "_values")

    def __init__(self, values: Sequence[Any], to_host: Any) -> None:
        self._values = values
        self._to_host = to_host
        self._cache: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index):  # type: ignore[override]
        value = self._values[index]
        if value is None:
            return None
        host = self._cache.get(index)
        if host is None:
            host = self._cache[index] = np.asarray(self._to_host(value))
        return host


def operator_failure(node: Any, stage: str, error: Exception) -> SessionError:
    """The SessionError for an operator's own failure, naming the node (a CompiledNode)."""
    return SessionError(
        ErrorKind.INVALID_INPUT,
        f"{node.info.op_type} failed during {stage}: {type(error).__name__}: {error}",
        node=node.info.name,
    )


def run_operator(node: Any, run: Any, ctx: RunContext, ins: list, outs: Any) -> Any:
    """Call an operator's run; anything but a SessionError becomes one naming the node."""
    try:
        return run(ctx, ins, outs)
    except SessionError:
        raise
    except Exception as error:
        raise operator_failure(node, "run", error) from error
