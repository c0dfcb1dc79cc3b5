"""`onnxruntime.capi`: where code written for onnxruntime reaches for its native module, by
either of its two names."""

from onemodel.compat.onnxruntime.capi import _pybind_state

onnxruntime_pybind11_state = _pybind_state
