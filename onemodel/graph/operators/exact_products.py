"""Exact mode's matrix product as a function: for the operators whose exact recipes contain
matrix products (recurrent layers, attention, Einsum), so that every one goes through the
backend's exact_matmul_arrays (docs/exact-mode.md: MatMul's definition) into float64."""

from __future__ import annotations

from typing import Any

Array = Any


def exact_product(kernels: Any, a: Array, b: Array) -> Array:
    """a @ b (batch axes broadcast) by kernels.exact_matmul_arrays, as a new float64 array."""
    xp = kernels.xp
    batch = xp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = xp.empty((*batch, a.shape[-2], b.shape[-1]), dtype=xp.float64)
    kernels.exact_matmul_arrays(a, b, out)
    return out
