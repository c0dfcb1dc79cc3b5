"""Arrays from any library in, outputs in the caller's library out.

A session's backend computes on NumPy or CuPy arrays. Anything else that speaks DLPack (PyTorch,
JAX, CuPy arrays handed to a NumPy session...) is taken through `from_dlpack`, which shares the
producer's memory when it already lives where the backend computes; data on the other side of
the host/device line is copied once. Outputs come back as the backend's arrays unless the
session or the call asks for NumPy, or for the library of the arrays fed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

import numpy as np

from onemodel.errors import ErrorKind, SessionError

OutputsAs: TypeAlias = Literal["backend", "numpy", "input"]
OUTPUTS_AS: tuple[str, ...] = ("backend", "numpy", "input")

# DLPack device types whose memory the host can read directly: CPU, CUDA pinned host memory.
_HOST_DEVICES = (1, 3)


def from_other_library(value: Any, xp: Any, name: str) -> Any | None:
    """`value` as a NumPy or backend array when it comes from another library through DLPack;
    None when it is no such array (the caller converts it as a plain Python value)."""
    if isinstance(value, (np.ndarray, np.generic)) or not hasattr(value, "__dlpack__"):
        return None
    try:
        device_type = int(value.__dlpack_device__()[0])
        if device_type in _HOST_DEVICES:
            return np.from_dlpack(value)
        if xp is not np:
            return xp.from_dlpack(value)
        return np.from_dlpack(value, device="cpu", copy=True)
    except (BufferError, RuntimeError, TypeError, ValueError) as error:
        raise SessionError(
            ErrorKind.INVALID_INPUT,
            f"cannot take the {type(value).__name__} through DLPack ({error})",
            value=name,
        ) from None


def output_converter(outputs_as: str, feeds: Mapping[str, Any], xp: Any) -> Callable[[list], list]:
    """How to hand a run's outputs back (`xp`: the backend's array module); decided, or
    refused, before the run starts."""
    if outputs_as == "backend":
        return _unchanged
    to_numpy = getattr(xp, "asnumpy", np.asarray)  # CuPy copies to the host; NumPy is a no-op
    if outputs_as == "numpy":
        return lambda outputs: [_each(output, to_numpy) for output in outputs]
    if outputs_as == "input":
        namespace = _feeds_namespace(feeds)
        if namespace is None:
            return lambda outputs: [_each(output, to_numpy) for output in outputs]
        return lambda outputs: [
            _each(output, lambda array: _to_namespace(array, namespace)) for output in outputs
        ]
    raise SessionError(
        ErrorKind.INVALID_INPUT,
        f"outputs_as is one of {', '.join(OUTPUTS_AS)}, not {outputs_as!r}",
    )


def _unchanged(outputs: list) -> list:
    return outputs


def _feeds_namespace(feeds: Mapping[str, Any]) -> Any | None:
    """The array API namespace of the first array fed from a library other than NumPy."""
    import array_api_compat  # ~5 ms to import: only for outputs_as="input"

    for name, value in feeds.items():
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, (np.ndarray, np.generic)) or not hasattr(item, "__dlpack__"):
                continue
            try:
                return array_api_compat.array_namespace(item)
            except TypeError:
                raise SessionError(
                    ErrorKind.INVALID_INPUT,
                    f"outputs_as='input' needs the array API namespace of the "
                    f"{type(item).__name__} fed here, and it has none",
                    value=name,
                ) from None
    return None


def _each(output: Any, convert: Callable[[Any], Any]) -> Any:
    """Converts the tensors of an output: a tensor, or a sequence of them; maps stay as given."""
    if isinstance(output, list):
        return [_each(item, convert) for item in output]
    if output is None or isinstance(output, dict):
        return output
    return convert(output)


def _to_namespace(array: Any, namespace: Any) -> Any:
    """Strings and NumPy-only element types (bfloat16, float8...) have no DLPack form and stay
    NumPy arrays."""
    if isinstance(array, np.ndarray) and (array.dtype.kind not in "biufc"):
        return array
    return namespace.from_dlpack(array)
