"""The onnxruntime-shaped surface: the calls code written for onnxruntime makes, answered the
way onnxruntime answers them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import onemodel
from onemodel.backends import KernelPaths

MODELS = Path(__file__).parent / "models"
ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    model = onnx.load(MODELS / "mlp.onnx")
    model.doc_string = "a small MLP"
    model.model_version = 3
    onnx.helper.set_model_props(model, {"author": "tests", "task": "demo"})
    path = tmp_path_factory.mktemp("m") / "mlp.onnx"
    onnx.save(model, path)
    return str(path)


def test_inputs_outputs_and_metadata_match_onnxruntime(model_path):
    ours = onemodel.InferenceSession(model_path)
    theirs = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    for mine, reference in zip(
        ours.get_inputs() + ours.get_outputs(),
        theirs.get_inputs() + theirs.get_outputs(),
        strict=True,
    ):
        assert (mine.name, mine.type, mine.shape) == (
            reference.name,
            reference.type,
            reference.shape,
        )
    meta, reference = ours.get_modelmeta(), theirs.get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "version"):
        assert getattr(meta, field) == getattr(reference, field), field
    assert meta.custom_metadata_map == reference.custom_metadata_map


def test_run_with_names_and_none_matches_onnxruntime(model_path):
    ours = onemodel.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    name = ours.get_inputs()[0].name
    for output_names in (None, [ours.get_outputs()[0].name]):
        (mine,) = ours.run(output_names, {name: x})
        (reference,) = theirs.run(output_names, {name: x})
        np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-5)
    assert ours.get_providers() == ["CPUExecutionProvider"]


def test_the_cuda_provider_falls_back_to_numpy_with_a_warning_without_a_gpu(model_path):
    if "cupy" in KernelPaths.available():
        pytest.skip("a CUDA device is present")
    with pytest.warns(RuntimeWarning, match="CUDAExecutionProvider"):
        session = onemodel.InferenceSession(
            model_path,
            providers=[("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"],
        )
    assert session.get_providers() == ["CPUExecutionProvider"]
