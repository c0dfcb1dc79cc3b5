"""The importer's own TensorProto decoding (onemodel/graph/tensor_decoding.py) against onnx's
numpy_helper, which it replaced on the load path: every element type, raw data and the typed
fields, odd counts of the packed types, and the malformed tensors it must refuse."""

import math

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onemodel.graph.tensor_decoding import tensor_array

CODES = [code for code in TensorProto.DataType.values() if code != TensorProto.UNDEFINED]
SHAPES = [(0,), (1,), (3,), (5,), (7,), (3, 4), (2, 3, 5)]


def sample(code: int, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values of every kind the type holds: negatives, zeros, NaN for the floats."""
    dtype = helper.tensor_dtype_to_np_dtype(code)
    count = math.prod(shape)
    if code == TensorProto.STRING:
        return np.array([f"s{k}é" for k in range(count)], dtype=object).reshape(shape)
    if code == TensorProto.BOOL:
        return rng.integers(0, 2, shape).astype(bool)
    if code in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if np.dtype(dtype).kind in "iu" or "int" in np.dtype(dtype).name:
        info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else ml_dtypes.iinfo(dtype)
        return rng.integers(max(int(info.min), -1000), min(int(info.max), 1000) + 1, shape).astype(
            dtype
        )
    values = (rng.standard_normal(shape) * 3).astype(np.float32)
    if count > 2:
        values.reshape(-1)[:2] = [np.nan, 0.0]
    return values.astype(dtype)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    if want.dtype == object:
        assert got.dtype == object and got.tolist() == want.tolist()
        return
    assert got.dtype == (want.dtype.newbyteorder("<") if want.dtype.itemsize > 1 else want.dtype)
    assert got.tobytes() == want.astype(got.dtype).tobytes()  # bit for bit, NaNs included


@pytest.mark.parametrize("code", CODES, ids=TensorProto.DataType.Name)
@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed_field"])
def test_decoding_matches_onnx_for_every_type(code, raw):
    if raw and code == TensorProto.STRING:
        pytest.skip("STRING tensors have no raw form")
    rng = np.random.default_rng(code)
    for shape in SHAPES:
        values = sample(code, shape, rng)
        if raw:
            tensor = numpy_helper.from_array(values, "t")
        else:
            tensor = helper.make_tensor("t", code, shape, values.reshape(-1).tolist())
        assert tensor.HasField("raw_data") == raw
        assert_same(tensor_array(tensor), numpy_helper.to_array(tensor))


@pytest.mark.parametrize(
    "code", [TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN,
             TensorProto.FLOAT6E2M3, TensorProto.INT4, TensorProto.UINT2, TensorProto.INT8],
    ids=TensorProto.DataType.Name,
)  # fmt: skip
def test_int32_data_bits_above_the_type_are_dropped_as_onnx_drops_them(code):
    tensor = TensorProto(data_type=code, dims=[2], int32_data=[0x1C5A7, -1])
    assert_same(tensor_array(tensor), numpy_helper.to_array(tensor))


def test_raw_data_given_apart_replaces_the_tensors_own():
    """External data: the importer reads the bytes and hands them over with the entry."""
    tensor = helper.make_tensor("t", TensorProto.FLOAT, [2], [0.0, 0.0])
    data = np.array([1.5, -2.0], "<f4").tobytes()
    np.testing.assert_array_equal(tensor_array(tensor, data), [1.5, -2.0])


def test_raw_data_is_read_little_endian():
    tensor = helper.make_tensor("t", TensorProto.INT32, [1], b"\x01\x02\x00\x00", raw=True)
    array = tensor_array(tensor)
    assert array.dtype == np.dtype("<i4") and array.tolist() == [0x201]


@pytest.mark.parametrize(
    ("code", "dims", "raw", "message"),
    [
        (TensorProto.FLOAT, [3], b"\x00" * 8, "reshape|size"),
        (TensorProto.FLOAT, [2], b"\x00" * 7, "multiple of element size"),
        (TensorProto.INT4, [5], b"\x00\x00", "packed 4-bit data has 2 bytes"),
        (TensorProto.UINT2, [9], b"\x00\x00", "packed 2-bit data has 2 bytes"),
        (TensorProto.FLOAT6E2M3, [5], b"\x00\x00\x00", "packed 6-bit data has 3 bytes"),
        (TensorProto.UNDEFINED, [1], b"\x00", "UNDEFINED"),
        (99, [1], b"\x00", "99"),
    ],
)
def test_malformed_tensors_are_refused(code, dims, raw, message):
    tensor = TensorProto(data_type=code, dims=dims, raw_data=raw)
    with pytest.raises((ValueError, TypeError), match=message):
        tensor_array(tensor)


def test_segments_are_refused():
    tensor = helper.make_tensor("t", TensorProto.FLOAT, [1], [1.0])
    tensor.segment.begin = 0
    with pytest.raises(ValueError, match="segments"):
        tensor_array(tensor)
