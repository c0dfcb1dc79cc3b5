"""`onnxruntime.capi.onnxruntime_inference_collection`: the Python classes of onnxruntime's
API, where packages import them from directly, and its provider-argument normaliser."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from onemodel.compat.onnxruntime.capi._pybind_state import (
    OrtDevice,
    OrtValue,
    SparseTensor,
)
from onemodel.compat.onnxruntime.inference_session import (
    InferenceSession,
    IOBinding,
    ModelMetadata,
    NodeArg,
)


def check_and_normalize_provider_args(
    providers: Sequence[Any] | None,
    provider_options: Sequence[Mapping[Any, Any]] | None,
    available_provider_names: Sequence[str],
) -> tuple[list[str], list[dict[str, str]]]:
    """Providers as names and their options as string dicts, one per provider, as onnxruntime
    normalises them: duplicates dropped with a warning, unavailable names warned about, and
    ValueError for anything not of the forms it takes."""
    if providers is None:
        return [], []
    if isinstance(providers, (str, bytes)) or not isinstance(providers, Sequence):
        raise ValueError("'providers' should be a sequence")
    if provider_options is not None:
        if isinstance(provider_options, (str, bytes)) or not isinstance(provider_options, Sequence):
            raise ValueError("'provider_options' should be a sequence")
        if len(providers) != len(provider_options):
            raise ValueError(
                "'providers' and 'provider_options' should be the same length if both are given"
            )
    names: list[str] = []
    options: list[dict[str, str]] = []
    for position, entry in enumerate(providers):
        if isinstance(entry, str):
            name, given = entry, (provider_options[position] if provider_options else {})
        elif (
            isinstance(entry, tuple)
            and len(entry) == 2
            and isinstance(entry[0], str)
            and isinstance(entry[1], Mapping)
        ):
            if provider_options is not None:
                raise ValueError("'providers' has options and 'provider_options' is given too")
            name, given = entry
        else:
            raise ValueError("a provider is a name or a (name, options dict) tuple")
        if not isinstance(given, Mapping):
            raise ValueError("provider options should be a dict")
        if name not in available_provider_names:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names. "
                f"Available providers: '{', '.join(available_provider_names)}'",
                stacklevel=2,
            )
        if name in names:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", stacklevel=2)
            continue
        names.append(name)
        options.append({str(key): str(value) for key, value in given.items()})
    return names, options


__all__ = [
    "IOBinding",
    "InferenceSession",
    "ModelMetadata",
    "NodeArg",
    "OrtDevice",
    "OrtValue",
    "SparseTensor",
    "check_and_normalize_provider_args",
]
