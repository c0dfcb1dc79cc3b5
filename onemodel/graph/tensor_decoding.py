"""A TensorProto's values as a NumPy array, read as ONNX stores them (onnx/onnx-ml.proto).

The importer's own decoding, so that loading a model needs no `onnx.numpy_helper` (which
brings the whole onnx package, issue 16). Values come from `raw_data` (little-endian,
sub-byte types packed low bits first) or from the typed field the element type is stored in.
Arrays are in the little-endian dtype `numpy_dtype_for_onnx` names; types NumPy lacks are
ml_dtypes types, so ml_dtypes loads only for a model that has them. Malformed data raises
ValueError or TypeError with what is wrong; the importer reports it as an invalid model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from onemodel.graph.onnx_proto import TensorProto
from onemodel.tensors.dtypes import numpy_dtype_for_onnx

T = TensorProto

# Element types stored several to a byte (raw data, and int32_data one packed byte an entry).
PACKED_BITS = {T.INT4: 4, T.UINT4: 4, T.FLOAT4E2M1: 4, T.INT2: 2, T.UINT2: 2}
# 6-bit floats: packed in raw data; one value per int32_data entry (its low 6 bits).
SIX_BIT = frozenset({T.FLOAT6E2M3, T.FLOAT6E3M2})
# Stored as the low 16 or 8 bits of each int32_data entry.
_INT32_LOW_16 = frozenset({T.FLOAT16, T.BFLOAT16, T.INT16, T.UINT16})
_INT32_LOW_8 = frozenset(
    {T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ, T.FLOAT8E8M0, T.BOOL}
)
# The other types: the typed field and the NumPy type its values are read as.
_TYPED_FIELDS: dict[int, tuple[str, type]] = {
    T.FLOAT: ("float_data", np.float32),
    T.COMPLEX64: ("float_data", np.float32),
    T.INT32: ("int32_data", np.int32),
    T.INT8: ("int32_data", np.int32),
    T.UINT8: ("int32_data", np.int32),
    T.INT64: ("int64_data", np.int64),
    T.UINT32: ("uint64_data", np.uint64),
    T.UINT64: ("uint64_data", np.uint64),
    T.DOUBLE: ("double_data", np.float64),
    T.COMPLEX128: ("double_data", np.float64),
}


def bits_per_element(code: int) -> int:
    """How many bits one element of an ONNX type takes in raw data."""
    if code in PACKED_BITS:
        return PACKED_BITS[code]
    if code in SIX_BIT:
        return 6
    return numpy_dtype_for_onnx(code).itemsize * 8


def tensor_array(tensor: TensorProto, raw_data: bytes | None = None) -> np.ndarray:
    """The tensor's values (`raw_data`, when given, replaces what the tensor holds: bytes read
    from its external file). Raw data is a view of the bytes, not a copy."""
    if tensor.HasField("segment"):
        raise ValueError("tensors split into segments are not supported")
    code = tensor.data_type
    if code == T.UNDEFINED:
        raise TypeError("the tensor's element type is UNDEFINED")
    dtype = numpy_dtype_for_onnx(code)
    dims = tuple(tensor.dims)
    if code == T.STRING:
        return np.array([s.decode("utf-8") for s in tensor.string_data], object).reshape(dims)
    if raw_data is None and tensor.HasField("raw_data"):
        raw_data = tensor.raw_data
    if raw_data is not None:
        if code in PACKED_BITS or code in SIX_BIT:
            packed = np.frombuffer(raw_data, np.uint8)
            return _unpacked(packed, bits_per_element(code), dims).view(dtype)
        return np.frombuffer(raw_data, dtype).reshape(dims)
    if code in _INT32_LOW_16 or code in _INT32_LOW_8 or code in PACKED_BITS or code in SIX_BIT:
        low = np.uint16 if code in _INT32_LOW_16 else np.uint8
        values = np.array(tensor.int32_data, np.int32).view(np.uint32).astype(low)
        if code in PACKED_BITS:
            return _unpacked(values, PACKED_BITS[code], dims).view(dtype)
        if code in SIX_BIT:
            values &= 0x3F
        return values.view(dtype).reshape(dims)
    field, stored = _TYPED_FIELDS[code]
    values = np.array(getattr(tensor, field), stored)
    if code in (T.COMPLEX64, T.COMPLEX128):
        return values.view(dtype).reshape(dims)
    return values.astype(dtype).reshape(dims)


def _unpacked(packed: np.ndarray, bits: int, dims: Sequence[int]) -> np.ndarray:
    """One uint8 per element from a little-endian stream of `bits`-bit values; bytes beyond
    the shape's need are padding, as onnx reads them."""
    count = math.prod(dims)
    needed = (count * bits + 7) // 8
    if packed.size < needed:
        raise ValueError(
            f"packed {bits}-bit data has {packed.size} bytes; shape {list(dims)} needs {needed}"
        )
    group_bytes = 3 if bits == 6 else 1  # the fewest whole bytes holding whole values
    per_group = group_bytes * 8 // bits
    groups = -(-count // per_group)
    data = packed[: groups * group_bytes]
    if data.size < groups * group_bytes:  # the last 6-bit group may be cut short
        data = np.concatenate([data, np.zeros(groups * group_bytes - data.size, np.uint8)])
    words = data.reshape(groups, group_bytes).astype(np.uint32)
    word = words[:, 0]
    for byte in range(1, group_bytes):
        word = word | (words[:, byte] << np.uint32(8 * byte))
    shifts = np.arange(per_group, dtype=np.uint32) * np.uint32(bits)
    values = (word[:, None] >> shifts) & np.uint32((1 << bits) - 1)
    return values.astype(np.uint8).reshape(-1)[:count].reshape(dims)
