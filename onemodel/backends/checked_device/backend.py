"""The checked-device backend: the shared array kernels over the stand-in device library.

What the CuPy backend is, minus the GPU: `ArrayKernels` (the code CuPy runs) over memory whose
arrays refuse implicit host conversion, hold CuPy's element types only (BFLOAT16 as its uint16
bits) and count every device-to-host copy. Sessions, operator tests and the conformance suite
run on it on the CPU (`SessionOptions(backend="checked-device")`), so code that would only work
with host arrays fails here rather than on the first GPU machine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.backends.array_kernels import ArrayKernels
from onemodel.backends.checked_device.library import DeviceArray, checked_xp
from onemodel.tensors import DType, Memory
from onemodel.tensors.buffers import aligned_numpy_bytes

NAME = "checked-device"


def _allocate(nbytes: int) -> DeviceArray:
    return DeviceArray(aligned_numpy_bytes(nbytes))


def _array_dtype(dtype: DType) -> np.dtype:
    """As CuPy's memory does: no bfloat16 on the device, so BFLOAT16 is held as uint16 bits."""
    return np.dtype(np.uint16) if dtype is DType.BFLOAT16 else dtype.numpy


def checked_device_memory() -> Memory:
    """Device memory of the stand-in library; `to_host` is a counted copy."""
    return Memory(NAME, checked_xp, _allocate, to_host=checked_xp.asnumpy, array_dtype=_array_dtype)


class CheckedDeviceKernels(ArrayKernels):
    """The CuPy backend's kernels on the CPU stand-in; `transfers` counts host copies. Its
    float32 arithmetic flushes subnormals, as CuPy's does."""

    flushes_subnormals = True

    def __init__(self) -> None:
        super().__init__(checked_device_memory(), name=NAME)

    @property
    def transfers(self) -> Any:
        return checked_xp.transfers
