"""A stand-in device array library on the CPU: NumPy's arithmetic behind a wall, as CuPy's is.

CI has no GPU, yet the shared kernels and the graph runtime must be written so they run on one.
`DeviceArray` holds its values in a private NumPy array (the "device memory") and behaves as a
CuPy array does where the difference matters, only stricter:

- nothing turns it into a host NumPy array implicitly: `np.asarray(x)`, NumPy functions and
  ufuncs called on it, the buffer protocol, `tolist()` and `float()/int()/bool()` of more than
  one element raise TypeError;
- namespace functions and operators refuse host NumPy arrays as operands (CuPy raises for
  those too), though assignment into a device array and `asarray` upload them;
- element types are CuPy's: no bfloat16, float8, int4 or strings;
- every explicit device-to-host transfer (`asnumpy`, `.get()`, `.item()`, a 0-d array read
  by `float()/int()/bool()` or as an index) is counted in `TRANSFERS`, with where it came from;
- float32 arithmetic flushes subnormals as CuPy's does (it compiles every kernel with
  -ftz=true): a computing function, ufunc, operator or conversion reads float32 subnormal
  operands as zeros of their sign and writes float32 subnormal results so; functions that only
  move or select elements (`_MOVES`) keep the bits, as CuPy's copy kernels do.

`checked_xp` is the namespace (`ctx.xp` of the checked-device backend); it forwards to NumPy's
functions of the same name, so it knows nothing NumPy does not and adds only the checks.
"""

from __future__ import annotations

import operator
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from onemodel.backends.checked_device import cupy_names

# CuPy's element types: NumPy's numeric kinds (ml_dtypes' are kind "V"), no long doubles.
DEVICE_KINDS = "biufc"
_REFUSED_NAMES = frozenset({"float128", "longdouble", "clongdouble", "complex256", "object_"})
# Functions that make a device array from host data, as cupy.asarray does: NumPy input allowed.
_UPLOADS = frozenset({"array", "asarray", "asanyarray", "ascontiguousarray", "copyto"})
# Functions of dtypes and shapes, answered on the host as CuPy answers them there.
_HOST_ANSWERS = frozenset({
    "dtype", "finfo", "iinfo", "result_type", "promote_types", "can_cast", "issubdtype",
    "isdtype", "broadcast_shapes", "ndim", "shape", "size", "isscalar",
})  # fmt: skip
# The ufuncs whose `at` CuPy implements (with its scatter kernels); others raise there.
_SCATTER_UFUNCS = frozenset({"add", "subtract", "maximum", "minimum"})
_SCATTER = ", ".join(sorted(_SCATTER_UFUNCS))
# Functions (and array methods) that only move, select or fill elements: CuPy's kernels for
# them copy bits, so they do not flush. Everything else that computes on float32 does.
_MOVES = frozenset({
    "array_split", "broadcast_arrays", "broadcast_to", "choose", "compress", "concatenate",
    "copy", "diagonal", "empty", "empty_like", "expand_dims", "extract", "fill", "flatten",
    "flip", "full", "full_like", "hstack", "moveaxis", "nonzero", "ones", "ones_like", "pad",
    "put", "put_along_axis", "ravel", "repeat", "reshape", "roll", "rollaxis", "split",
    "squeeze", "stack", "swapaxes", "take", "take_along_axis", "tile", "transpose", "tril",
    "triu", "vstack", "where", "zeros", "zeros_like", "flatnonzero", "argwhere", "atleast_1d",
    "atleast_2d", "atleast_3d", "dstack", "column_stack", "fliplr", "flipud", "rot90", "view",
    "as_strided", "sliding_window_view", "copysign", "signbit", "isnan", "isinf", "isfinite",
    "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift",
})  # fmt: skip
# The smallest normal float32: below it (and above zero) a float32 is subnormal.
_TINY32 = np.float32(2.0**-126)


def check_device_dtype(dtype: Any) -> np.dtype:
    """The dtype, if the device library has it; TypeError (CuPy's answer) if not."""
    dt = np.dtype(dtype)
    if dt.kind not in DEVICE_KINDS or dt.itemsize > (16 if dt.kind == "c" else 8):
        raise TypeError(f"the device library has no dtype {dt} (CuPy has none either)")
    return dt


@dataclass(frozen=True)
class Transfer:
    """One device-to-host copy: how it was asked for, how many bytes, and the caller's line."""

    how: str
    nbytes: int
    origin: str


@dataclass
class Transfers:
    """Device-to-host copies and host-to-device uploads, counted while `recording()`."""

    to_host: list[Transfer] = field(default_factory=list)
    to_device: int = 0
    _depth: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextmanager
    def recording(self) -> Iterator[Transfers]:
        """Start from empty lists and record until the block ends."""
        with self._lock:
            self.to_host.clear()
            self.to_device = 0
            self._depth += 1
        try:
            yield self
        finally:
            with self._lock:
                self._depth -= 1

    def copied_to_host(self, how: str, nbytes: int) -> None:
        if self._depth:
            with self._lock:
                self.to_host.append(Transfer(how, nbytes, _origin()))

    def uploaded(self) -> None:
        if self._depth:
            with self._lock:
                self.to_device += 1


TRANSFERS = Transfers()


def _origin() -> str:
    """The innermost frame outside this module: the code that asked for the transfer."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if frame.filename != __file__:
            return f"{frame.filename}:{frame.lineno} ({frame.name})"
    return "?"


class _Pointer:
    """What `cupy.ndarray.data` gives: `.ptr`, the address of the first element."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class DeviceArray:
    """An array in the stand-in's device memory; see the module docstring for its rules."""

    __slots__ = ("_host",)
    __array_ufunc__ = None  # NumPy ufuncs refuse it; `ndarray + x` defers to x.__radd__
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, host: np.ndarray) -> None:
        check_device_dtype(host.dtype)
        self._host = host

    # -- refusals: the implicit ways into host NumPy -------------------------------------

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            "implicit conversion of a device array to a NumPy array; "
            "copy it with xp.asnumpy (memory.to_host) where host data is truly needed"
        )

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        raise TypeError(
            f"numpy.{func.__name__} called on a device array; operators compute through ctx.xp"
        )

    def tolist(self) -> list:
        raise TypeError("tolist() of a device array; use xp.asnumpy(...) first if truly needed")

    def __float__(self) -> float:
        return float(self._scalar("float()"))

    def __int__(self) -> int:
        return int(self._scalar("int()"))

    def __index__(self) -> int:
        value = self._scalar("an index")
        if self._host.dtype.kind not in "iub":
            raise TypeError(f"a {self._host.dtype} array is not an index")
        return int(value)

    def __bool__(self) -> bool:
        return bool(self._scalar("bool()"))

    def _scalar(self, how: str) -> Any:
        if self._host.ndim != 0:
            raise TypeError(
                f"{how} of a device array of shape {self._host.shape}; only 0-d arrays "
                "convert to Python scalars (each one a device-to-host copy)"
            )
        TRANSFERS.copied_to_host(how, self._host.nbytes)
        return self._host[()]

    # -- explicit transfers -------------------------------------------------------------

    def get(self) -> np.ndarray:
        """A host copy (CuPy's spelling); counted."""
        TRANSFERS.copied_to_host("get()", self._host.nbytes)
        return self._host.copy()

    def item(self, *args: Any) -> Any:
        TRANSFERS.copied_to_host("item()", self._host.itemsize)
        return self._host.item(*args)

    # -- what a CuPy array offers --------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self._host.shape

    @property
    def dtype(self) -> np.dtype:
        return self._host.dtype

    @property
    def ndim(self) -> int:
        return self._host.ndim

    @property
    def size(self) -> int:
        return self._host.size

    @property
    def nbytes(self) -> int:
        return self._host.nbytes

    @property
    def itemsize(self) -> int:
        return self._host.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        return self._host.strides

    @property
    def flags(self) -> Any:
        return self._host.flags

    @property
    def data(self) -> _Pointer:
        return _Pointer(self._host.ctypes.data)

    @property
    def T(self) -> DeviceArray:
        return DeviceArray(self._host.T)

    def view(self, dtype: Any = None) -> DeviceArray:
        if dtype is None:
            return DeviceArray(self._host.view())
        return DeviceArray(self._host.view(check_device_dtype(dtype)))

    def astype(self, dtype: Any, **kwargs: Any) -> DeviceArray:
        target = check_device_dtype(dtype)
        source = self._host if target == self._host.dtype else _flushed(self._host)
        result = source.astype(target, **kwargs)
        if result is self._host:
            return self
        if target != self._host.dtype:
            _flush_in_place(result)
        return DeviceArray(result)

    def __array_namespace__(self, api_version: str | None = None) -> Any:
        return checked_xp

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in {"ctypes", "tobytes", "tofile", "base", "flat"}:
            raise AttributeError(f"device arrays have no {name!r} the host could read")
        if name not in cupy_names.NDARRAY:
            raise AttributeError(f"cupy.ndarray ({cupy_names.CUPY_VERSION}) has no {name!r}")
        attribute = getattr(self._host, name)
        if callable(attribute):
            return _forward(attribute, name, computes=name not in _MOVES)
        return _wrap(attribute, {})

    def __len__(self) -> int:
        return len(self._host)

    def __iter__(self) -> Iterator[DeviceArray]:
        for index in range(len(self._host)):
            yield self[index]

    def __repr__(self) -> str:  # no values: printing them would be a transfer
        return f"DeviceArray(shape={self._host.shape}, dtype={self._host.dtype})"

    __str__ = __repr__

    def __getitem__(self, key: Any) -> DeviceArray:
        return _wrap(self._host[_unwrap(key, "indexing", host_ok=True)], {})

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, np.ndarray):
            TRANSFERS.uploaded()
        value = _unwrap(value, "assignment", True)
        if self._host.dtype == np.float32 and _is_other_float(value):
            value = _flushed(np.asarray(value, dtype=np.float32))  # a converting store
        self._host[_unwrap(key, "indexing", host_ok=True)] = value

    def __copy__(self) -> DeviceArray:
        return DeviceArray(self._host.copy())

    def __deepcopy__(self, memo: Any) -> DeviceArray:
        return DeviceArray(self._host.copy())


# Operators compute, so float32 operands and results flush (see the module docstring).


def _operator(function: Callable[[Any, Any], Any], name: str) -> Callable[..., Any]:
    def method(self: DeviceArray, other: Any) -> Any:
        result = function(_flushed(self._host), _flushed(_unwrap(other, name)))
        return _wrap(_flush_results(result), {})

    method.__name__ = name
    return method


def _reflected(function: Callable[[Any, Any], Any], name: str) -> Callable[..., Any]:
    def method(self: DeviceArray, other: Any) -> Any:
        result = function(_flushed(_unwrap(other, name)), _flushed(self._host))
        return _wrap(_flush_results(result), {})

    method.__name__ = name
    return method


def _in_place(function: Callable[[Any, Any], Any], name: str) -> Callable[..., Any]:
    def method(self: DeviceArray, other: Any) -> DeviceArray:
        operand = _flushed(_unwrap(other, name))
        _flush_in_place(self._host)  # read as zeros; the result overwrites them anyway
        function(self._host, operand)
        _flush_in_place(self._host)
        return self

    method.__name__ = name
    return method


def _unary(function: Callable[[Any], Any], name: str) -> Callable[..., Any]:
    def method(self: DeviceArray) -> Any:
        return _wrap(_flush_results(function(_flushed(self._host))), {})

    method.__name__ = name
    return method


_BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow,
    "matmul": operator.matmul, "and": operator.and_, "or": operator.or_, "xor": operator.xor,
    "lshift": operator.lshift, "rshift": operator.rshift,
}  # fmt: skip
_IN_PLACE = {
    "add": operator.iadd, "sub": operator.isub, "mul": operator.imul,
    "truediv": operator.itruediv, "floordiv": operator.ifloordiv, "mod": operator.imod,
    "pow": operator.ipow, "and": operator.iand, "or": operator.ior, "xor": operator.ixor,
    "lshift": operator.ilshift, "rshift": operator.irshift,
}  # fmt: skip
_COMPARISONS = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge,
}  # fmt: skip
_UNARY = {"neg": operator.neg, "pos": operator.pos, "abs": operator.abs, "invert": operator.inv}

for _name, _function in _BINARY.items():
    setattr(DeviceArray, f"__{_name}__", _operator(_function, f"__{_name}__"))
    setattr(DeviceArray, f"__r{_name}__", _reflected(_function, f"__r{_name}__"))
for _name, _function in _IN_PLACE.items():
    setattr(DeviceArray, f"__i{_name}__", _in_place(_function, f"__i{_name}__"))
for _name, _function in _COMPARISONS.items():
    setattr(DeviceArray, f"__{_name}__", _operator(_function, f"__{_name}__"))
for _name, _function in _UNARY.items():
    setattr(DeviceArray, f"__{_name}__", _unary(_function, f"__{_name}__"))


def _unwrap(value: Any, what: str, host_ok: bool = False) -> Any:
    """Device arrays as their private NumPy arrays, inside lists, tuples and dicts too; host
    NumPy arrays refused unless `host_ok` (an upload)."""
    if isinstance(value, DeviceArray):
        return value._host
    if isinstance(value, np.ndarray):
        if not host_ok:
            raise TypeError(
                f"a host NumPy array {value.dtype}{list(value.shape)} given to {what} on the "
                "device; upload it with xp.asarray first (CuPy refuses it too)"
            )
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(item, what, host_ok) for item in value)
    if isinstance(value, dict):
        return {key: _unwrap(item, what, host_ok) for key, item in value.items()}
    return value


def _wrap(value: Any, given: dict[int, DeviceArray]) -> Any:
    """NumPy results as device arrays (scalars as 0-d arrays, as CuPy's reductions give them);
    a result that is an array passed in (`out=`) comes back as the caller's device array."""
    if isinstance(value, np.ndarray):
        known = given.get(id(value))
        return known if known is not None else DeviceArray(value)
    if isinstance(value, np.generic) and not isinstance(value, (np.str_, np.bytes_, np.void)):
        return DeviceArray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(_wrap(item, given) for item in value)
    if isinstance(value, list):
        return [_wrap(item, given) for item in value]
    return value


def _given(args: Any, kwargs: dict[str, Any]) -> dict[int, DeviceArray]:
    found: dict[int, DeviceArray] = {}
    for value in (*args, *kwargs.values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, DeviceArray):
                found[id(item._host)] = item
    return found


def _check_dtype_argument(kwargs: dict[str, Any]) -> None:
    dtype = kwargs.get("dtype")
    if dtype is not None:
        check_device_dtype(dtype)


def _forward(
    function: Callable[..., Any], name: str, uploads: bool = False, computes: bool = False
) -> Callable[..., Any]:
    """`function` on the private arrays of its device arguments, results wrapped again; a
    function that `computes` reads and writes float32 subnormals as zeros."""

    def call(*args: Any, **kwargs: Any) -> Any:
        _check_dtype_argument(kwargs)
        if uploads and any(isinstance(a, np.ndarray) for a in (*args, *kwargs.values())):
            TRANSFERS.uploaded()
        given = _given(args, kwargs)
        args, kwargs = _unwrap(args, name, uploads), _unwrap(kwargs, name, uploads)
        if computes:  # `out` and ufunc.at's target are written, so they flush in place
            if name.endswith(".at"):
                _flush_in_place(args[0])
                args = (args[0], *_flushed(args[1:]))
            else:
                args = _flushed(args)
            kwargs = {k: v if k == "out" else _flushed(v) for k, v in kwargs.items()}
        elif name == "copyto" and len(args) >= 2:
            args = _converted_copy(*args)
        result = function(*args, **kwargs)
        if computes or _converted(result, (*args, *kwargs.values())):
            _flush_results(result)
        if computes:
            _flush_results(kwargs.get("out"))
            if name.endswith(".at"):
                _flush_in_place(args[0])
        return _wrap(result, given)

    call.__name__ = name
    return call


def _flushed(value: Any) -> Any:
    """`value` with float32 subnormals read as zeros of their sign (a copy only where it has
    some; inside lists, tuples and dicts too)."""
    if isinstance(value, np.ndarray):
        if value.dtype != np.float32:
            return value
        subnormal = _subnormals(value)
        if not subnormal.any():
            return value
        flushed = value.copy()
        flushed[subnormal] = np.copysign(np.float32(0), value[subnormal])
        return flushed
    if isinstance(value, np.float32) and 0 < abs(value) < _TINY32:
        return np.copysign(np.float32(0), value)
    if isinstance(value, (list, tuple)):
        return type(value)(_flushed(item) for item in value)
    if isinstance(value, dict):
        return {key: _flushed(item) for key, item in value.items()}
    return value


def _subnormals(value: np.ndarray) -> np.ndarray:
    return (np.abs(value) < _TINY32) & (value != 0)


def _flush_in_place(value: Any) -> None:
    if isinstance(value, np.ndarray) and value.dtype == np.float32 and value.flags.writeable:
        subnormal = _subnormals(value)
        if subnormal.any():
            value[subnormal] = np.copysign(np.float32(0), value[subnormal])


def _flush_results(result: Any) -> Any:
    """A computed float32 result (or tuple of them) with subnormals written as zeros."""
    for item in result if isinstance(result, (list, tuple)) else (result,):
        _flush_in_place(item)
    return result


def _is_other_float(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return isinstance(value, float)
    return dtype.kind == "f" and dtype != np.float32


def _converted_copy(destination: Any, source: Any, *rest: Any) -> tuple[Any, ...]:
    """copyto's arguments, a float source converted (and flushed) first when the destination
    is float32: the copy then only moves, as CuPy's converting copy kernel would."""
    float32 = isinstance(destination, np.ndarray) and destination.dtype == np.float32
    if float32 and _is_other_float(source):
        source = _flushed(np.asarray(source, dtype=np.float32))
    return (destination, source, *rest)


def _converted(result: Any, operands: tuple[Any, ...]) -> bool:
    """Whether a moving function made float32 out of another float type (a conversion)."""
    if not isinstance(result, np.ndarray) or result.dtype != np.float32:
        return False
    flat = [item for value in operands for item in (value if isinstance(value, list) else [value])]
    return any(_is_other_float(item) for item in flat if isinstance(item, np.ndarray))


class _Namespace:
    """NumPy's functions of the same names, behind the device wall; only the names CuPy has
    (`cupy_names`), so code calling a NumPy function CuPy lacks fails here as on a GPU."""

    def __init__(self, numpy_module: ModuleType, name: str, cupy_name: str = "") -> None:
        self._numpy = numpy_module
        self.__name__ = name
        self._cupy_name = cupy_name  # "" for the top level, else "linalg", "lib.stride_tricks"
        self._cupy_names = cupy_names.SUBMODULES[cupy_name] if cupy_name else cupy_names.NAMESPACE
        self._cache: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<stand-in device namespace {self.__name__}>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _REFUSED_NAMES:
            raise AttributeError(f"{self.__name__} has no {name!r}")
        cached = self._cache.get(name)
        if cached is None:
            cached = self._cache[name] = self._member(name)
        return cached

    def _member(self, name: str) -> Any:
        if name not in self._cupy_names:
            where = f"cupy.{self._cupy_name}" if self._cupy_name else "cupy"
            raise AttributeError(
                f"{self.__name__} has no {name!r}: {where} {cupy_names.CUPY_VERSION} lacks it"
            )
        attribute = getattr(self._numpy, name)
        if isinstance(attribute, ModuleType):
            qualified = f"{self._cupy_name}.{name}" if self._cupy_name else name
            if qualified not in cupy_names.SUBMODULES:
                raise AttributeError(f"{self.__name__} has no submodule {name!r}")
            return _Namespace(attribute, f"{self.__name__}.{name}", qualified)
        if isinstance(attribute, type) or not callable(attribute) or name in _HOST_ANSWERS:
            return attribute  # dtypes, constants, and questions about dtypes and shapes
        if isinstance(attribute, np.ufunc):
            return _DeviceUfunc(attribute)
        computes = name not in _MOVES and name not in _UPLOADS
        return _forward(attribute, name, uploads=name in _UPLOADS, computes=computes)


class _DeviceUfunc:
    """A ufunc whose `at` exists only where CuPy has a scatter kernel for it."""

    def __init__(self, ufunc: np.ufunc) -> None:
        self._ufunc = ufunc
        self.__name__ = ufunc.__name__
        self._computes = ufunc.__name__ not in _MOVES
        self._call = _forward(ufunc, ufunc.__name__, computes=self._computes)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) > self._ufunc.nin:  # outputs given by position: written, not read
            outputs = args[self._ufunc.nin :]
            args, kwargs = args[: self._ufunc.nin], {**kwargs, "out": outputs}
        return self._call(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "at" and self.__name__ not in _SCATTER_UFUNCS:
            raise NotImplementedError(f"{self.__name__}.at: CuPy scatters only with {_SCATTER}")
        attribute = getattr(self._ufunc, name)
        if not callable(attribute):
            return attribute
        return _forward(attribute, f"{self.__name__}.{name}", computes=self._computes)


class CheckedNamespace(_Namespace):
    """The top-level namespace: NumPy's, plus CuPy's `ndarray` and `asnumpy`."""

    ndarray = DeviceArray
    transfers = TRANSFERS

    def __init__(self) -> None:
        super().__init__(np, "checked_xp")

    @staticmethod
    def asnumpy(array: Any) -> np.ndarray:
        """A host copy of a device array (a host array is returned as it is); counted."""
        if isinstance(array, DeviceArray):
            return array.get()
        return np.asarray(array)

    @staticmethod
    def from_dlpack(value: Any) -> DeviceArray:
        """Take another library's array (a host copy is uploaded)."""
        TRANSFERS.uploaded()
        return DeviceArray(np.from_dlpack(value).copy())


checked_xp = CheckedNamespace()
