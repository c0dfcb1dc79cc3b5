"""onnxruntime execution providers → onemodel backends.

CUDAExecutionProvider runs on the CuPy backend where it can reach a device; every other provider
runs on NumPy. Providers onemodel has no counterpart for are skipped with a warning, as
onnxruntime skips providers its build lacks; CPUExecutionProvider is always the last one. A
name onnxruntime does not know is refused with its RuntimeError.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from onemodel.backends import KernelPaths
from onemodel.compat.onnxruntime.capi._pybind_state import (
    CPU_PROVIDER,
    CUDA_PROVIDER,
    get_all_providers,
)


@dataclass(frozen=True)
class Providers:
    backend: str
    names: list[str]
    options: dict[str, dict[str, str]]


def choose(
    providers: Sequence[Any] | None,
    provider_options: Sequence[Mapping[str, Any]] | None = None,
) -> Providers:
    """The backend and the providers registered for `providers` (names or (name, options))."""
    requested = _normalised(providers or [CPU_PROVIDER], provider_options)
    known = set(get_all_providers())
    for name in requested:
        if name not in known:
            raise RuntimeError(f"Unknown Provider Type: {name}")
        if name not in (CPU_PROVIDER, CUDA_PROVIDER):
            warnings.warn(
                f"{name} has no onemodel backend; it is skipped (onemodel offers "
                f"{CUDA_PROVIDER} and {CPU_PROVIDER})",
                RuntimeWarning,
                stacklevel=4,
            )
    backend, names = "numpy", [CPU_PROVIDER]
    if CUDA_PROVIDER in requested:
        if "cupy" in KernelPaths.available():
            backend, names = "cupy", [CUDA_PROVIDER, CPU_PROVIDER]
        else:
            warnings.warn(
                "CUDAExecutionProvider was requested but CuPy cannot reach a CUDA device; "
                "running on the NumPy backend",
                RuntimeWarning,
                stacklevel=4,
            )
    return Providers(backend, names, {name: requested.get(name, {}) for name in names})


def _normalised(
    providers: Sequence[Any], provider_options: Sequence[Mapping[str, Any]] | None
) -> dict[str, dict[str, str]]:
    if provider_options is not None and len(provider_options) != len(providers):
        raise ValueError("'providers' and 'provider_options' should be the same length")
    requested: dict[str, dict[str, str]] = {}
    for position, entry in enumerate(providers):
        if isinstance(entry, str):
            name, options = entry, {}
        elif (
            isinstance(entry, (tuple, list))
            and len(entry) == 2
            and isinstance(entry[0], str)
            and isinstance(entry[1], Mapping)
        ):
            name, options = entry
        else:
            raise ValueError(f"a provider is a name or a (name, options dict) pair, not {entry!r}")
        if provider_options is not None:
            options = {**options, **provider_options[position]}
        requested[name] = {str(key): str(value) for key, value in options.items()}
    return requested
