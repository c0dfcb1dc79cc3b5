"""onemodel.compat's IOBinding: inputs and outputs bound before a run, in both of onnxruntime's
calling conventions, on the shim and on the real onnxruntime (where installed); and on the
checked-device stand-in (docs/gpu.md), where bound device tensors never reach the host."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onemodel
from onemodel.backends.checked_device.library import TRANSFERS
from onemodel.compat import onnxruntime as shim
from tests.compat_models import WEIGHT, identity, module_ids, modules, scale

both = pytest.mark.parametrize("rt", modules(), ids=module_ids())
X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
CPU = ["CPUExecutionProvider"]


def _session(rt, model=None):
    return rt.InferenceSession((model or scale()).SerializeToString(), providers=CPU)


@both
def test_cpu_input_and_an_output_the_session_allocates(rt):
    session = _session(rt)
    binding = session.io_binding()
    binding.bind_cpu_input("X", X)
    binding.bind_output("Y")
    session.run_with_iobinding(binding)
    binding.synchronize_outputs()
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], X * WEIGHT)
    outputs = binding.get_outputs()
    assert outputs[0].device_name() == "cpu"
    np.testing.assert_array_equal(outputs[0].numpy(), X * WEIGHT)


@both
def test_caller_memory_read_and_written_in_place(rt):
    session = _session(rt)
    binding = session.io_binding()
    given = rt.OrtValue.ortvalue_from_numpy(X.copy())  # shares the copy's memory
    binding.bind_input("X", "cpu", 0, np.float32, [3, 2], given.data_ptr())
    target = rt.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32)
    binding.bind_output("Y", "cpu", 0, np.float32, [3, 2], target.data_ptr())
    binding.synchronize_inputs()
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(target.numpy(), X * WEIGHT)
    given.update_inplace(X * 2)  # the bound memory is read again by the next run
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(target.numpy(), X * 2 * WEIGHT)


@both
def test_ortvalues_bound_both_ways(rt):
    session = _session(rt)
    binding = session.io_binding()
    binding.bind_ortvalue_input("X", rt.OrtValue.ortvalue_from_numpy(X))
    out = rt.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32)
    binding.bind_ortvalue_output("Y", out)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(out.numpy(), X * WEIGHT)
    binding.clear_binding_inputs()
    binding.bind_ortvalue_input("X", rt.OrtValue.ortvalue_from_numpy(X + 1))
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(out.numpy(), (X + 1) * WEIGHT)


@both
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint64, np.int8, np.float16, np.bool_])
def test_native_binding_with_an_ortdevice(rt, dtype):
    """`SessionIOBinding(session._sess)` with an OrtDevice, as onnxruntime's own tests bind."""
    x = np.arange(8).reshape(-1, 2).astype(dtype)
    code = helper.np_dtype_to_tensor_dtype(x.dtype)
    session = _session(rt, identity([None, 2], code))
    native = rt.capi._pybind_state
    device = native.OrtDevice(native.OrtDevice.cpu(), native.OrtDevice.default_memory(), 0)
    binding = native.SessionIOBinding(session._sess)
    value = native.OrtValue.ortvalue_from_numpy(x, device)
    binding.bind_ortvalue_input("X", value)
    binding.bind_output("Y", device)
    session._sess.run_with_iobinding(binding, None)
    assert isinstance(binding.get_outputs(), native.OrtValueVector)
    np.testing.assert_array_equal(binding.get_outputs()[0].numpy(), x)
    again = native.SessionIOBinding(session._sess)
    again.bind_input("X", device, dtype, x.shape, value.data_ptr())
    again.bind_output("Y", device)
    session._sess.run_with_iobinding(again, None)
    np.testing.assert_array_equal(again.get_outputs()[0].numpy(), x)


@both
def test_element_types_numpy_lacks_by_their_onnx_codes(rt):
    bits = np.array([0x3F80, 0x4000, 0xC040], np.uint16)  # bfloat16 1, 2, -3
    session = _session(rt, identity([None], TensorProto.BFLOAT16))
    out = np.zeros_like(bits)
    binding = session.io_binding()
    binding.bind_input("X", "cpu", 0, TensorProto.BFLOAT16, [3], bits.ctypes.data)
    binding.bind_output("Y", "cpu", 0, TensorProto.BFLOAT16, [3], out.ctypes.data)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(out, bits)


def test_device_tensors_bound_on_the_device_never_reach_the_host():
    session = shim.InferenceSession(
        scale().SerializeToString(), onemodel.SessionOptions(backend="checked-device")
    )
    xp = session.session.kernels.xp
    binding = session.io_binding()
    binding.bind_ortvalue_input("X", shim.OrtValue(xp.asarray(X)))
    binding.bind_output("Y", "cuda")
    preallocated = shim.OrtValue(xp.empty((3, 2), np.float32))
    with TRANSFERS.recording() as transfers:
        session.run_with_iobinding(binding)
        session.run_with_iobinding(binding)
        produced = binding.get_outputs()[0]
        binding.bind_ortvalue_output("Y", preallocated)
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
    assert transfers.to_host == []
    assert produced.device_name() == preallocated.device_name() == "cuda"
    assert binding.get_outputs()[0] is preallocated
    np.testing.assert_array_equal(preallocated.numpy(), X * WEIGHT)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], X * WEIGHT)


def test_a_host_output_binding_on_the_device_backend_copies_once():
    session = shim.InferenceSession(
        scale().SerializeToString(), onemodel.SessionOptions(backend="checked-device")
    )
    binding = session.io_binding()
    binding.bind_cpu_input("X", X)
    binding.bind_output("Y", "cpu")
    with TRANSFERS.recording() as transfers:
        session.run_with_iobinding(binding)
    assert len(transfers.to_host) == 1
    assert binding.get_outputs()[0].device_name() == "cpu"
