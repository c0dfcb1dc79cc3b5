"""Element types (seed 002 §2): ONNX codes, refused types, NumPy and ml_dtypes mappings."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onemodel.tensors import (
    DType,
    UnsupportedDTypeError,
    numpy_dtype_for_onnx,
    onnx_code_for_numpy,
    onnx_name,
)

# The supported types of §2, by ONNX name.
SUPPORTED = (
    "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "BOOL", "FLOAT16", "DOUBLE",
    "UINT32", "UINT64", "BFLOAT16",
)  # fmt: skip
# Every other ONNX code that DType must refuse, by name.
REJECTED = (
    "STRING", "COMPLEX64", "COMPLEX128", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
    "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1", "FLOAT8E8M0", "UINT2", "INT2",
    "FLOAT6E2M3", "FLOAT6E3M2",
)  # fmt: skip
# The ONNX codes whose element type ml_dtypes (not NumPy) holds.
ML_DTYPES = {
    "BFLOAT16": ml_dtypes.bfloat16,
    "FLOAT8E4M3FN": ml_dtypes.float8_e4m3fn,
    "FLOAT8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
    "FLOAT8E5M2": ml_dtypes.float8_e5m2,
    "FLOAT8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
    "UINT4": ml_dtypes.uint4,
    "INT4": ml_dtypes.int4,
    "FLOAT4E2M1": ml_dtypes.float4_e2m1fn,
    "FLOAT8E8M0": ml_dtypes.float8_e8m0fnu,
    "UINT2": ml_dtypes.uint2,
    "INT2": ml_dtypes.int2,
    "FLOAT6E2M3": ml_dtypes.float6_e2m3fn,
    "FLOAT6E3M2": ml_dtypes.float6_e3m2fn,
}
PLAIN_NUMPY = {
    "FLOAT": np.float32,
    "UINT8": np.uint8,
    "INT8": np.int8,
    "UINT16": np.uint16,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "BOOL": np.bool_,
    "FLOAT16": np.float16,
    "DOUBLE": np.float64,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "COMPLEX64": np.complex64,
    "COMPLEX128": np.complex128,
}
FLOATING = {"FLOAT", "FLOAT16", "DOUBLE", "BFLOAT16"}
SIGNED_INTEGERS = {"INT8", "INT16", "INT32", "INT64"}
UNSIGNED_INTEGERS = {"UINT8", "UINT16", "UINT32", "UINT64"}

ALL_ONNX_CODES = sorted(code for name, code in TensorProto.DataType.items() if name != "UNDEFINED")


def code_of(name: str) -> int:
    return getattr(TensorProto, name)


def test_supported_and_rejected_cover_every_onnx_code():
    names = {name for name, _ in TensorProto.DataType.items()} - {"UNDEFINED"}
    assert set(SUPPORTED) | set(REJECTED) == names
    assert not set(SUPPORTED) & set(REJECTED)


def test_members_are_exactly_the_supported_types():
    assert {member.name for member in DType} == set(SUPPORTED)
    assert len(DType) == 13


@pytest.mark.parametrize("name", SUPPORTED)
def test_member_value_is_the_onnx_code(name):
    member = DType[name]
    assert int(member) == code_of(name)
    assert member == getattr(onnx.TensorProto, name)
    assert member.onnx_name == name
    assert DType.from_onnx(code_of(name)) is member


@pytest.mark.parametrize("name", REJECTED)
def test_from_onnx_rejects_with_the_type_name(name):
    with pytest.raises(UnsupportedDTypeError, match=rf"\b{name}\b"):
        DType.from_onnx(code_of(name))


@pytest.mark.parametrize("code", [0, 29, 100, -1])
def test_from_onnx_rejects_undefined_and_unknown_codes(code):
    with pytest.raises(UnsupportedDTypeError, match=str(code)):
        DType.from_onnx(code)


@pytest.mark.parametrize("code", [0, *ALL_ONNX_CODES])
def test_onnx_name_matches_tensorproto(code):
    assert onnx_name(code) == TensorProto.DataType.Name(code)


def test_onnx_name_of_unknown_code_mentions_the_code():
    assert "4711" in onnx_name(4711)


@pytest.mark.parametrize("code", ALL_ONNX_CODES)
def test_numpy_dtype_for_every_onnx_code_matches_onnx(code):
    """ONNX's own helper is the oracle for how each code is held in NumPy/ml_dtypes."""
    expected = np.dtype(helper.tensor_dtype_to_np_dtype(code))
    got = numpy_dtype_for_onnx(code)
    assert got == expected
    assert onnx_code_for_numpy(got) == code
    assert onnx_code_for_numpy(expected) == code


@pytest.mark.parametrize("name", sorted(ML_DTYPES))
def test_ml_dtypes_codes(name):
    code = code_of(name)
    dt = numpy_dtype_for_onnx(code)
    assert dt == np.dtype(ML_DTYPES[name])
    assert dt.type is ML_DTYPES[name]
    assert onnx_code_for_numpy(ML_DTYPES[name]) == code
    assert onnx_code_for_numpy(np.dtype(ML_DTYPES[name])) == code


@pytest.mark.parametrize("name", sorted(PLAIN_NUMPY))
def test_plain_numpy_codes(name):
    code = code_of(name)
    assert numpy_dtype_for_onnx(code) == np.dtype(PLAIN_NUMPY[name])
    assert onnx_code_for_numpy(PLAIN_NUMPY[name]) == code


def test_string_is_held_as_object():
    assert numpy_dtype_for_onnx(TensorProto.STRING) == np.dtype(object)
    assert onnx_code_for_numpy(np.dtype(object)) == TensorProto.STRING


@pytest.mark.parametrize("code", [0, 29, -3])
def test_numpy_dtype_for_undefined_or_unknown_code_raises(code):
    with pytest.raises(UnsupportedDTypeError):
        numpy_dtype_for_onnx(code)


@pytest.mark.parametrize("dtype", [np.dtype("datetime64[s]"), np.dtype("U3"), np.float128])
def test_onnx_code_for_foreign_numpy_dtype_raises(dtype):
    if np.dtype(dtype) == np.dtype(np.float64):  # platforms where longdouble is double
        pytest.skip("longdouble is float64 here")
    with pytest.raises(UnsupportedDTypeError):
        onnx_code_for_numpy(dtype)


@pytest.mark.parametrize("name", SUPPORTED)
def test_numpy_round_trip_of_members(name):
    member = DType[name]
    dt = member.numpy
    assert dt == np.dtype(helper.tensor_dtype_to_np_dtype(code_of(name)))
    # Held little-endian (or byte order irrelevant).
    assert dt.byteorder in "<|" or (dt.byteorder == "=" and np.little_endian)
    assert DType.from_numpy(dt) is member
    assert DType.from_numpy(dt.type) is member
    assert DType.from_numpy(dt.newbyteorder(">")) is member
    assert DType.from_numpy(dt.newbyteorder("<")) is member
    assert onnx_code_for_numpy(dt.newbyteorder(">")) == code_of(name)


@pytest.mark.parametrize(
    ("alias", "name"),
    [(np.longlong, "INT64"), (np.ulonglong, "UINT64"), (np.intc, "INT32"), (np.half, "FLOAT16"),
     (np.single, "FLOAT"), (np.double, "DOUBLE"), (bool, "BOOL"), (float, "DOUBLE")],
)  # fmt: skip
def test_from_numpy_accepts_aliases(alias, name):
    assert DType.from_numpy(alias) is DType[name]


@pytest.mark.parametrize("name", REJECTED)
def test_from_numpy_rejects_types_outside_dtype(name):
    dt = np.dtype(helper.tensor_dtype_to_np_dtype(code_of(name)))
    with pytest.raises(UnsupportedDTypeError):
        DType.from_numpy(dt)


BITS = {
    "FLOAT": 32, "UINT8": 8, "INT8": 8, "UINT16": 16, "INT16": 16, "INT32": 32, "INT64": 64,
    "BOOL": 8, "FLOAT16": 16, "DOUBLE": 64, "UINT32": 32, "UINT64": 64, "BFLOAT16": 16,
}  # fmt: skip


@pytest.mark.parametrize("name", SUPPORTED)
def test_itemsize(name):
    assert DType[name].itemsize * 8 == BITS[name]
    assert DType[name].itemsize == np.dtype(helper.tensor_dtype_to_np_dtype(code_of(name))).itemsize


@pytest.mark.parametrize("name", SUPPORTED)
def test_kind_predicates(name):
    member = DType[name]
    assert member.is_floating == (name in FLOATING)
    assert member.is_integer == (name in SIGNED_INTEGERS | UNSIGNED_INTEGERS)
    assert member.is_signed == (name in FLOATING | SIGNED_INTEGERS)
    # Cross-check against what NumPy / ml_dtypes say about the held dtype.
    dt = member.numpy
    if member.is_integer:
        assert (np.iinfo(dt).min < 0) == member.is_signed
    if member.is_floating:
        assert ml_dtypes.finfo(dt).bits == dt.itemsize * 8
    if name == "BOOL":
        assert not (member.is_floating or member.is_integer or member.is_signed)
