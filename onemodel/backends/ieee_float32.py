"""IEEE float32 results, subnormals included, on an array library whose kernels flush them.

CuPy compiles every kernel with -ftz=true (appended after any options given), so there a
float32 add, compare or conversion reads and writes subnormals as zeros. -ftz touches single
precision only: integer operations and float64 arithmetic keep IEEE behaviour. Exact mode
promises NumPy's bits everywhere, so it moves float32 values through their bits:

- `widen` and `narrow` convert between float32 and float64 exactly and with one correct
  rounding, subnormals included (the bit formulas are in onemodel/tensors/conversions.py);
- `IeeeFloat32` is a namespace over such a library whose arithmetic, comparison and rounding
  functions take float32 operands through float64: for + − × ÷ √ the float64 result rounded
  once is the correctly rounded float32 result (53 ≥ 2·24 + 2), and comparisons, max/min,
  floor/ceil/rint/trunc and sign are exact in float64, so the bits are NumPy's float32 bits.

On NumPy (which keeps subnormals) the same functions give the same bits, only slower.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onemodel.tensors.conversions import float32_to_float64 as _widen
from onemodel.tensors.conversions import float64_to_float32 as _narrow

Array = Any


def widen(xp: Any, x: Array) -> Array:
    """x as float64, exactly; float32 subnormals keep their values (a copy)."""
    if xp is np or x.dtype != np.float32:  # NumPy's conversion keeps subnormals
        with np.errstate(invalid="ignore"):  # signalling NaNs become quiet, as intended
            return x.astype(np.float64)
    return _widen(x)


def narrow(xp: Any, value: Array) -> Array:
    """float64 values rounded to nearest float32 (ties to even), subnormal results included."""
    if xp is np:  # NumPy's conversion is IEEE's, subnormals included
        with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is intended
            return np.asarray(value, dtype=np.float64).astype(np.float32)
    return _narrow(xp.asarray(value, dtype=xp.float64))


def store(xp: Any, out: Array, value: Array) -> None:
    """out[...] = value, a float32 `out` rounded by `narrow` (other types convert as usual)."""
    if out.dtype == np.float32 and getattr(value, "dtype", None) != np.float32:
        value = narrow(xp, value)
    out[...] = value


# Functions of float32 operands computed in float64 and rounded back (or boolean results).
_ARITHMETIC = frozenset({
    "add", "subtract", "multiply", "divide", "true_divide", "sqrt", "maximum", "minimum",
    "fmax", "fmin", "absolute", "abs", "negative", "positive", "floor", "ceil", "rint", "trunc",
    "sign", "square", "reciprocal", "fmod", "clip",
})  # fmt: skip
_COMPARISONS = frozenset({
    "greater", "greater_equal", "less", "less_equal", "equal", "not_equal",
})  # fmt: skip


class IeeeFloat32:
    """An array namespace over `xp` whose float32 arithmetic keeps subnormals (see the module
    docstring); every other name is `xp`'s own."""

    def __init__(self, xp: Any) -> None:
        self._xp = xp
        self.__name__ = f"ieee_float32({getattr(xp, '__name__', xp)})"
        self._functions: dict[str, Callable[..., Any]] = {}

    def __repr__(self) -> str:
        return f"<{self.__name__}>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _ARITHMETIC or name in _COMPARISONS:
            function = self._functions.get(name)
            if function is None:
                function = self._functions[name] = _ThroughFloat64(self._xp, name)
            return function
        return getattr(self._xp, name)

    def copyto(self, dst: Array, src: Any, **kwargs: Any) -> None:
        """A converting copy into float32 rounds by `narrow`; from float32, by `widen`."""
        xp = self._xp
        source_dtype = getattr(src, "dtype", None)
        if dst.dtype == np.float32 and source_dtype is not None and source_dtype.kind == "f":
            if source_dtype != np.float32:
                src = narrow(xp, src)
        elif source_dtype == np.float32 and dst.dtype.kind == "f":
            src = widen(xp, src)
        xp.copyto(dst, src, **kwargs)


class _ThroughFloat64:
    """One of `xp`'s functions with float32 operands widened, and a float result narrowed
    unless another float type takes part. Its other attributes (a ufunc's `at`, `reduce`) are
    the library's own: accumulations keep their float32 order rather than change meaning."""

    def __init__(self, xp: Any, name: str) -> None:
        self._xp, self._function, self.__name__ = xp, getattr(xp, name), name
        self._boolean = name in _COMPARISONS

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._function, name)

    def __call__(self, *args: Any, out: Array | None = None, **kwargs: Any) -> Any:
        xp, function = self._xp, self._function
        if not any(_is_float32(a) for a in (*args, out)):
            return function(*args, **kwargs) if out is None else function(*args, out=out, **kwargs)
        result = function(*(_widened(xp, a) for a in args), **kwargs)
        if self._boolean:
            if out is None:
                return result
            out[...] = result
            return out
        if out is not None:
            store(xp, out, result)
            return out
        return result if any(_is_other_float(a) for a in args) else narrow(xp, result)


def _is_float32(value: Any) -> bool:
    return getattr(value, "dtype", None) == np.float32


def _widened(xp: Any, value: Any) -> Any:
    """float32 arrays by `widen`, float32 scalars as the Python float of the same value."""
    if isinstance(value, np.generic):
        return float(value) if value.dtype == np.float32 else value
    return widen(xp, value) if _is_float32(value) else value


def _is_other_float(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and dtype.kind == "f" and dtype != np.float32
