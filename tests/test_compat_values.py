"""onemodel.compat's OrtValue, OrtValueVector, SparseTensor, OrtDevice, OrtMemoryInfo and
OrtArenaCfg: each call made on the shim and on the real onnxruntime (where installed) must give
the same answers."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import onemodel
from onemodel.compat import onnxruntime as shim
from tests.compat_models import WEIGHT, module_ids, modules, scale

X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)


@pytest.mark.parametrize("rt", modules(), ids=module_ids())
def test_ortvalue_from_numpy_shares_the_array_and_describes_it(rt):
    value = rt.OrtValue.ortvalue_from_numpy(X)
    assert value.device_name() == "cpu"
    assert value.shape() == [3, 2]
    assert value.data_type() == "tensor(float)"
    assert value.element_type() == TensorProto.FLOAT
    assert value.is_tensor() and value.has_value() and not value.is_sparse_tensor()
    assert value.tensor_size_in_bytes() == 24
    assert value.data_ptr() == X.ctypes.data
    np.testing.assert_array_equal(value.numpy(), X)
    array = np.asarray(value)
    assert array.ctypes.data == value.data_ptr()
    assert np.asarray(value, dtype=np.float64).dtype == np.float64
    halves = rt.OrtValue.ortvalue_from_numpy(np.zeros((2, 3), np.float16))
    assert (halves.data_type(), halves.element_type()) == ("tensor(float16)", 10)


@pytest.mark.parametrize("rt", modules(), ids=module_ids())
def test_ortvalue_with_an_onnx_type_and_from_shape_and_type(rt):
    bits = np.array([0x3F80, 0x4000], np.uint16)  # bfloat16 1.0 and 2.0
    value = rt.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    assert value.element_type() == TensorProto.BFLOAT16
    assert value.shape() == [2]
    empty = rt.OrtValue.ortvalue_from_shape_and_type([4, 5], np.int64)
    assert (empty.shape(), empty.data_type()) == ([4, 5], "tensor(int64)")
    by_code = rt.OrtValue.ortvalue_from_shape_and_type([2], TensorProto.DOUBLE)
    assert by_code.data_type() == "tensor(double)"
    empty.update_inplace(np.arange(20).reshape(4, 5))
    np.testing.assert_array_equal(empty.numpy(), np.arange(20).reshape(4, 5))


@pytest.mark.parametrize("rt", modules(), ids=module_ids())
def test_dlpack_both_ways_without_copies(rt):
    source = rt.OrtValue.ortvalue_from_numpy(X)
    assert source.__dlpack_device__() == (1, 0)
    through_capsule = rt.OrtValue.from_dlpack(source.__dlpack__())
    np.testing.assert_array_equal(through_capsule.numpy(), X)
    shared = rt.OrtValue.from_dlpack(source)
    assert shared.data_ptr() == source.data_ptr()
    from_numpy = rt.OrtValue.from_dlpack(X)
    assert from_numpy.shape() == [3, 2]
    assert np.from_dlpack(source).ctypes.data == source.data_ptr()
    assert rt.OrtValue.from_dlpack(np.array([True, False])).numpy().dtype == np.bool_
    assert rt.OrtValue.from_dlpack(np.array([1, 255], np.uint8)).numpy().dtype == np.uint8
    empty = rt.OrtValue.from_dlpack(np.zeros((1, 8, 0, 128), np.float32))
    assert empty.shape() == [1, 8, 0, 128]


@pytest.mark.parametrize("rt", modules(), ids=module_ids())
def test_ortvalues_run_and_come_back_as_a_vector(rt):
    session = rt.InferenceSession(scale().SerializeToString(), providers=["CPUExecutionProvider"])
    value = rt.OrtValue.ortvalue_from_numpy(X)
    np.testing.assert_array_equal(session.run(["Y"], {"X": value})[0], X * WEIGHT)
    outputs = session.run_with_ort_values(["Y"], {"X": value})
    np.testing.assert_array_equal(outputs[0].numpy(), X * WEIGHT)
    native = rt.capi._pybind_state
    vector = session._sess.run_with_ort_values({"X": value._get_c_value()}, ["Y"], rt.RunOptions())
    assert isinstance(vector, native.OrtValueVector)
    assert len(vector) == 1 and vector[0].shape() == [3, 2]
    np.testing.assert_array_equal(value.numpy(), X)  # still valid after the runs


@pytest.mark.parametrize("rt", modules(), ids=module_ids())
def test_sparse_tensors_in_coo_and_csr_form(rt):
    cpu = rt.OrtDevice.make("cpu", 0)
    values = np.array([1.0, 2.0, 3.0], np.float32)
    indices = np.array([3, 5, 15], np.int64)
    coo = rt.SparseTensor.sparse_coo_from_numpy([9, 9], values, indices, cpu)
    assert coo.format() == rt.OrtSparseFormat.ORT_SPARSE_COO
    assert (coo.dense_shape(), coo.data_type(), coo.device_name()) == (
        [9, 9],
        "sparse_tensor(float)",
        "cpu",
    )
    assert not coo.values().flags.writeable
    np.testing.assert_array_equal(coo.as_coo_view().indices(), indices)
    wrapped = rt.OrtValue.ort_value_from_sparse_tensor(coo)
    np.testing.assert_array_equal(wrapped.as_sparse_tensor().values(), values)
    strings = rt.SparseTensor.sparse_coo_from_numpy([9, 9], np.array(["a", "b", "c"]), indices, cpu)
    assert strings.data_type() == "sparse_tensor(string)"
    assert list(strings.values()) == ["a", "b", "c"]
    outer = np.array([0, 1, 2, 3, 3, 3, 3, 3, 3, 3], np.int64)
    csr = rt.SparseTensor.sparse_csr_from_numpy([9, 9], values, np.ones(3, np.int64), outer, cpu)
    assert csr.format() == rt.OrtSparseFormat.ORT_SPARSE_CSRC
    np.testing.assert_array_equal(csr.as_csrc_view().outer(), outer)
    assert not csr.as_csrc_view().inner().flags.writeable
    if "CUDAExecutionProvider" not in rt.get_available_providers():
        with pytest.raises(RuntimeError):
            coo.to_cuda(rt.OrtDevice.make("cuda", 0))


@pytest.mark.parametrize("rt", modules(), ids=module_ids())
def test_devices_memory_infos_and_arena_settings(rt):
    cpu = rt.OrtDevice.make("cpu", 0)
    assert (cpu.device_id(), cpu.device_type(), cpu.device_mem_type()) == (0, 0, 0)
    assert cpu.device_vendor_id() == rt.OrtDeviceVendorId.NONE
    cuda = rt.OrtDevice.make("cuda", 0)
    assert cuda.device_vendor_id() == rt.OrtDeviceVendorId.NVIDIA == 0x10DE
    native = rt.capi._pybind_state.OrtDevice
    assert (native.cpu(), native.cuda(), native.default_memory()) == (0, 1, 0)
    info = rt.OrtMemoryInfo(
        "Cpu", rt.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, rt.OrtMemType.DEFAULT
    )
    assert (info.name, info.device_id, info.mem_type, info.allocator_type) == (
        "Cpu",
        0,
        rt.OrtMemType.DEFAULT,
        rt.OrtAllocatorType.ORT_ARENA_ALLOCATOR,
    )
    assert info.device_mem_type == rt.OrtDeviceMemoryType.DEFAULT
    second = rt.OrtMemoryInfo.create_v2(
        "Test",
        rt.OrtMemoryInfoDeviceType.CPU,
        0,
        0,
        rt.OrtDeviceMemoryType.DEFAULT,
        128,
        rt.OrtAllocatorType.ORT_ARENA_ALLOCATOR,
    )
    assert (second.name, second.device_vendor_id) == ("Test", 0)
    arena = rt.OrtArenaCfg(8, 0, 4, 2)
    assert (arena.max_mem, arena.initial_chunk_size_bytes, arena.max_dead_bytes_per_chunk) == (
        8,
        4,
        2,
    )
    keyed = rt.OrtArenaCfg({"max_mem": 16, "initial_growth_chunk_size_bytes": 2})
    assert (keyed.max_mem, keyed.initial_growth_chunk_size_bytes) == (16, 2)
    rt.create_and_register_allocator(info, None)


@pytest.mark.parametrize("rt", modules(), ids=module_ids())
def test_provider_arguments_are_normalised_as_onnxruntime_does(rt):
    module = rt.capi.onnxruntime_inference_collection
    normalise = module.check_and_normalize_provider_args
    valid = ["a", "b", "c"]
    assert normalise(None, None, valid) == ([], [])
    assert normalise(["a", "b"], None, valid) == (["a", "b"], [{}, {}])
    assert normalise([("a", {1: 2}), "b"], None, valid) == (["a", "b"], [{"1": "2"}, {}])
    assert normalise(["a", "b"], [{1: 2}, {}], valid) == (["a", "b"], [{"1": "2"}, {}])
    with pytest.warns(UserWarning):
        assert normalise(["a", "b", "a"], [{"x": 1}, {}, {"y": 2}], valid) == (
            ["a", "b"],
            [{"x": "1"}, {}],
        )
    for providers, options in [(3, None), ([3], None), (["a"], 3), (["a"], ["no"]),
                               (["a", "b"], [{1: 2}]), ([("a", {1: 2})], [{3: 4}])]:  # fmt: skip
        with pytest.raises(ValueError):
            normalise(providers, options, valid)


def test_a_device_ortvalue_stays_on_the_device():
    """The checked-device stand-in answers for CuPy (docs/gpu.md): the value is its array."""
    session = shim.InferenceSession(
        scale().SerializeToString(), onemodel.SessionOptions(backend="checked-device")
    )
    from onemodel.backends.checked_device.library import TRANSFERS

    xp = session.session.kernels.xp
    value = shim.OrtValue(xp.asarray(X))
    assert value.device_name() == "cuda"
    with TRANSFERS.recording() as transfers:
        outputs = session.run_with_ort_values(["Y"], {"X": value})
    assert transfers.to_host == []
    assert outputs[0].device_name() == "cuda"
    np.testing.assert_array_equal(outputs[0].numpy(), X * WEIGHT)  # the one copy, asked for
