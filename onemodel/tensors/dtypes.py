"""Element types: the enum values are the ONNX TensorProto codes themselves.

Only the types the tensor layer stores are members of `DType`; every other ONNX code has a
name (so errors can say which type was refused) and, where NumPy or ml_dtypes can hold it, a
NumPy dtype for exchanging values with callers (float8, int4, float4 tensors of the graph layer).
"""

from __future__ import annotations

import sys
from enum import IntEnum

import numpy as np

from onemodel.tensors.errors import UnsupportedDTypeError

# Every ONNX TensorProto.DataType code by name, including those DType refuses.
_ONNX_NAMES = (
    "UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING",
    "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
    "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4",
    "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2", "FLOAT6E2M3", "FLOAT6E3M2",
)  # fmt: skip


def onnx_name(code: int) -> str:
    """The ONNX name of an element type code, or a description of an unknown code."""
    if 0 <= code < len(_ONNX_NAMES):
        return _ONNX_NAMES[code]
    return f"unknown ONNX element type {code}"


class DType(IntEnum):
    """An element type the tensor layer stores; its value is the ONNX code."""

    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    BFLOAT16 = 16

    @classmethod
    def from_onnx(cls, code: int) -> DType:
        """The DType of an ONNX code; other codes raise an error that names the type."""
        try:
            return cls(code)
        except ValueError:
            raise UnsupportedDTypeError(
                f"element type {onnx_name(code)} (ONNX code {code}) is not supported by the "
                "tensor layer"
            ) from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type) -> DType:
        """The DType of a NumPy or ml_dtypes dtype (byte order is the data's concern)."""
        dt = np.dtype(dtype)
        code = _code_of(dt.newbyteorder("=") if dt.byteorder == ">" else dt)
        if code is None or code not in cls._value2member_map_:
            raise UnsupportedDTypeError(f"NumPy dtype {dt} has no tensor-layer element type")
        return cls(code)

    @property
    def onnx_name(self) -> str:
        return _ONNX_NAMES[self.value]

    @property
    def numpy(self) -> np.dtype:
        """The little-endian NumPy dtype holding this type (ml_dtypes.bfloat16 for BFLOAT16)."""
        return numpy_dtype_for_onnx(self.value)

    @property
    def itemsize(self) -> int:
        return numpy_dtype_for_onnx(self.value).itemsize

    @property
    def is_floating(self) -> bool:
        return self in _FLOATING

    @property
    def is_integer(self) -> bool:
        return not self.is_floating and self is not DType.BOOL

    @property
    def is_signed(self) -> bool:
        return self.is_floating or self in _SIGNED_INTEGERS


_FLOATING = frozenset({DType.FLOAT, DType.FLOAT16, DType.DOUBLE, DType.BFLOAT16})
_SIGNED_INTEGERS = frozenset({DType.INT8, DType.INT16, DType.INT32, DType.INT64})

# How each ONNX code is held in a NumPy array, where NumPy or ml_dtypes can hold it at all:
# NumPy's own types here, ml_dtypes' added on the first look-up that needs one, so that
# ml_dtypes loads only for a model or caller that uses a type NumPy lacks (issue 16).
_NUMPY_TYPES = (
    (1, np.float32), (2, np.uint8), (3, np.int8), (4, np.uint16), (5, np.int16), (6, np.int32),
    (7, np.int64), (8, np.object_), (9, np.bool_), (10, np.float16), (11, np.float64),
    (12, np.uint32), (13, np.uint64), (14, np.complex64), (15, np.complex128),
)  # fmt: skip
_ML_DTYPES_TYPES = (
    (16, "bfloat16"), (17, "float8_e4m3fn"), (18, "float8_e4m3fnuz"), (19, "float8_e5m2"),
    (20, "float8_e5m2fnuz"), (21, "uint4"), (22, "int4"), (23, "float4_e2m1fn"),
    (24, "float8_e8m0fnu"), (25, "uint2"), (26, "int2"), (27, "float6_e2m3fn"),
    (28, "float6_e3m2fn"),
)  # fmt: skip
_ML_DTYPES_CODES = frozenset(code for code, _ in _ML_DTYPES_TYPES)


def _little_endian(t: type | np.dtype) -> np.dtype:
    dt = np.dtype(t)
    return dt.newbyteorder("<") if dt.itemsize > 1 else dt


_NUMPY_BY_CODE: dict[int, np.dtype] = {code: _little_endian(t) for code, t in _NUMPY_TYPES}
_CODE_BY_NUMPY: dict[np.dtype, int] = {dt: code for code, dt in _NUMPY_BY_CODE.items()}


def _add_ml_dtypes() -> None:
    """Adds ml_dtypes' types to both tables (once)."""
    if 16 in _NUMPY_BY_CODE:
        return
    import ml_dtypes

    added = {code: _little_endian(getattr(ml_dtypes, name)) for code, name in _ML_DTYPES_TYPES}
    _CODE_BY_NUMPY.update({dt: code for code, dt in added.items()})
    _NUMPY_BY_CODE.update(added)  # last: another thread sees all of them or none


def _code_of(dt: np.dtype) -> int | None:
    """The code of a little-endian dtype; an ml_dtypes dtype means ml_dtypes is loaded."""
    code = _CODE_BY_NUMPY.get(dt)
    if code is None and "ml_dtypes" in sys.modules:
        _add_ml_dtypes()
        code = _CODE_BY_NUMPY.get(dt)
    return code


def numpy_dtype_for_onnx(code: int) -> np.dtype:
    """The NumPy dtype that exchanges values of any ONNX type, DType members or not."""
    dt = _NUMPY_BY_CODE.get(code)
    if dt is None and code in _ML_DTYPES_CODES:
        _add_ml_dtypes()
        dt = _NUMPY_BY_CODE[code]
    if dt is None:
        raise UnsupportedDTypeError(f"element type {onnx_name(code)} has no NumPy dtype")
    return dt


def onnx_code_for_numpy(dtype: np.dtype | type) -> int:
    """The ONNX code of a NumPy or ml_dtypes dtype, DType members or not."""
    dt = np.dtype(dtype)
    code = _code_of(dt.newbyteorder("<") if dt.itemsize > 1 else dt)
    if code is None:
        raise UnsupportedDTypeError(f"NumPy dtype {dt} has no ONNX element type")
    return code
