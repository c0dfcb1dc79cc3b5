"""Feeds onnxruntime takes that onemodel's Session refuses: through onemodel.compat they run as
on onnxruntime (docs/moving-from-onnxruntime.md lists them), while the native Session stays
strict and says what to feed. Feeds onnxruntime refuses stay refused."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import onemodel
from onemodel.compat import onnxruntime as shim
from tests.compat_models import identity, module_ids, modules, scalar_scale

both = pytest.mark.parametrize("rt", modules(), ids=module_ids())
SAMPLES = np.array([0.5, -1.0, 2.0], np.float32)


@both
@pytest.mark.parametrize(
    "rate",
    [np.array(16000), np.array([16000]), np.array([[16000]]), [16000]],
    ids=["0-d", "one element", "1x1", "list"],
)
def test_an_input_declared_rank_0_takes_a_one_element_tensor(rt, rate):
    session = rt.InferenceSession(scalar_scale().SerializeToString())
    assert session.get_inputs()[1].shape == []
    (scaled,) = session.run(None, {"X": SAMPLES, "sr": np.asarray(rate, np.int64)})
    np.testing.assert_array_equal(np.ravel(scaled), SAMPLES * 16000)
    assert scaled.shape == np.broadcast_shapes(SAMPLES.shape, np.shape(rate))


@both
def test_an_input_declared_rank_0_takes_any_shape(rt):
    session = rt.InferenceSession(identity([]).SerializeToString())
    for shape in [(2,), (0,), (2, 3)]:
        (same,) = session.run(None, {"X": np.ones(shape, np.float32)})
        assert same.shape == shape


@both
def test_other_ranks_and_types_stay_checked(rt):
    errors = (rt.capi._pybind_state.InvalidArgument,)
    session = rt.InferenceSession(identity([1]).SerializeToString())
    with pytest.raises(errors):
        session.run(None, {"X": np.array(1.0, np.float32)})
    with pytest.raises(errors):
        session.run(None, {"X": np.ones((1, 1), np.float32)})
    with pytest.raises(errors):
        session.run(None, {"X": np.ones(1, np.float64)})


@both
def test_void_elements_fed_to_a_string_input_read_as_text(rt):
    session = rt.InferenceSession(identity([2, 2], TensorProto.STRING).SerializeToString())
    words = np.array([b"must", b"have", b"same", b"size"], dtype=np.void).reshape(2, 2)
    (same,) = session.run(None, {"X": words})
    np.testing.assert_array_equal(same, np.array([["must", "have"], ["same", "size"]], object))


def test_the_native_session_stays_strict_and_says_what_to_feed():
    session = onemodel.Session.load(scalar_scale().SerializeToString())
    with pytest.raises(onemodel.SessionError, match=r"np\.array\(value") as caught:
        session.run(None, {"X": SAMPLES, "sr": np.array([16000])})
    assert caught.value.kind is onemodel.ErrorKind.INVALID_INPUT
    assert caught.value.value == "sr"
    assert "rank 0" in str(caught.value)
    (scaled,) = session.run(None, {"X": SAMPLES, "sr": np.array(16000)})
    np.testing.assert_array_equal(scaled, SAMPLES * 16000)
    assert shim.InferenceSession(scalar_scale().SerializeToString()).session.inputs[1].dims is None


@both
@pytest.mark.parametrize(
    "given",
    [["a", 1], ["a", 2.5], ["a", None], np.array(["a", 1], dtype=object)],
    ids=["int", "float", "None", "object array"],
)
def test_other_elements_fed_to_a_string_input_become_their_str(rt, given):
    session = rt.InferenceSession(identity([2], TensorProto.STRING).SerializeToString())
    (same,) = session.run(None, {"X": given})
    assert same.tolist() == [str(item) for item in given]
