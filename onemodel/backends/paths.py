"""The table of kernel paths: every backend by name, how to build it, whether it can run here.

A static table rather than plugin discovery: the set of backends is part of the product, and a
session must be able to list and explain them without importing anything optional.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from onemodel.backends.cupy_gpu.availability import unavailable_reason as cupy_unavailable
from onemodel.backends.errors import BackendUnavailableError
from onemodel.backends.numpy_cpu import NumpyKernels, ReferenceKernels
from onemodel.backends.protocol import Kernels
from onemodel.tensors import numpy_dtype_for_onnx


def _always_available() -> str | None:
    return None


def _cupy() -> Kernels:
    """The CuPy backend, its kernel modules imported when it is built (not at import)."""
    from onemodel.backends.cupy_gpu.backend import CupyKernels

    return CupyKernels()


def _checked_device() -> Kernels:
    """The stand-in device, imported when asked for: only tests use it."""
    from onemodel.backends.checked_device import CheckedDeviceKernels

    return CheckedDeviceKernels()


CHECKED_DEVICE = "checked-device"  # checked_device.NAME, without importing it


@dataclass(frozen=True)
class _KernelPath:
    build: Callable[[], Kernels]
    unavailable_reason: Callable[[], str | None]


class KernelPaths:
    """Backends by name. Instances are shared per name: kernels hold no per-run state."""

    _TABLE: ClassVar[dict[str, _KernelPath]] = {
        "numpy-reference": _KernelPath(ReferenceKernels, _always_available),
        "numpy": _KernelPath(NumpyKernels, _always_available),
        "cupy": _KernelPath(_cupy, cupy_unavailable),
        # Not a product backend: CuPy's rules on the CPU, for tests (never chosen by best()).
        CHECKED_DEVICE: _KernelPath(_checked_device, _always_available),
    }
    _built: ClassVar[dict[str, Kernels]] = {}

    @classmethod
    def names(cls) -> list[str]:
        """Every backend name, available here or not."""
        return list(cls._TABLE)

    @classmethod
    def available(cls) -> list[str]:
        """The names of the backends that can run on this machine."""
        return [name for name, path in cls._TABLE.items() if path.unavailable_reason() is None]

    @classmethod
    def get(cls, name: str) -> Kernels:
        """The backend called `name`.

        Availability is checked on every call, even for a backend already built, so a device
        that has gone away is reported rather than handed out.
        """
        path = cls._TABLE.get(name)
        if path is None:
            known = ", ".join(repr(known) for known in cls._TABLE)
            raise ValueError(f"unknown kernel path {name!r}; the known paths are {known}")
        reason = path.unavailable_reason()
        if reason is not None:
            raise BackendUnavailableError(f"the {name} backend is unavailable: {reason}")
        kernels = cls._built.get(name)
        if kernels is None:
            # Two threads may both build; either instance is fine since neither holds state.
            kernels = cls._built.setdefault(name, path.build())
        return kernels

    @classmethod
    def best(cls) -> Kernels:
        """The fastest backend that runs here: cupy with a CUDA device, else numpy."""
        try:
            return cls.get("cupy")
        except BackendUnavailableError:
            return cls.get("numpy")


def lacking_types(kernels: Kernels, uses: dict[int, str]) -> dict[int, str]:
    """The element types among `uses` (code -> where used) that `kernels` cannot hold as arrays
    of their own (CuPy: bfloat16, float8, 4-bit and string types), so operators could not
    compute on them there. Codes with no NumPy dtype at all are left to the model's checks."""
    lacking = {}
    for code, where in uses.items():
        try:
            dtype = numpy_dtype_for_onnx(code)
        except Exception:  # not a type any backend holds: the importer or planner reports it
            continue
        try:
            held = kernels.xp.empty(0, dtype=dtype).dtype == dtype
        except Exception:  # the backend's library refuses the dtype
            held = False
        if not held:
            lacking[code] = where
    return lacking
