"""A stand-in device backend on the CPU: CuPy's rules (no implicit host copies, CuPy's dtypes,
counted transfers) without a GPU, so tests catch host-only code in shared kernels and operators."""

from onemodel.backends.checked_device.backend import NAME, CheckedDeviceKernels
from onemodel.backends.checked_device.library import (
    TRANSFERS,
    DeviceArray,
    Transfer,
    check_device_dtype,
    checked_xp,
)

__all__ = [
    "NAME",
    "TRANSFERS",
    "CheckedDeviceKernels",
    "DeviceArray",
    "Transfer",
    "check_device_dtype",
    "checked_xp",
]
