"""The CPU backends: NumPy fast kernels and the reference kernels that define the semantics."""

from onemodel.backends.numpy_cpu.fast import NumpyKernels
from onemodel.backends.numpy_cpu.reference import ReferenceKernels

__all__ = ["NumpyKernels", "ReferenceKernels"]
