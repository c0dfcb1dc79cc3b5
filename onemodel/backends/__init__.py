"""Backends: the `Kernels` seam, the kernel paths that choose a backend, and their errors."""

from onemodel.backends.errors import BackendUnavailableError
from onemodel.backends.paths import KernelPaths
from onemodel.backends.protocol import BinaryOp, Kernels, UnaryOp

__all__ = ["BackendUnavailableError", "BinaryOp", "KernelPaths", "Kernels", "UnaryOp"]
