"""scikit-learn models as skl2onnx exports them, run by onemodel and compared with
scikit-learn's own predictions (stored beside each model by tools/export_sklearn_models.py, so
that neither scikit-learn nor skl2onnx is needed here), plus the SVM operators on the kernels
and modes the exported models do not reach, against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import onemodel
from tests.operator_harness import one_node_model, onnxruntime_run, run_node

MODELS = Path(__file__).parent / "models" / "sklearn"
NAMES = sorted(path.stem for path in MODELS.glob("*.onnx"))
ML = "ai.onnx.ml"
RTOL, ATOL = 1e-4, 1e-5


def outputs_of(name: str) -> tuple[dict[str, np.ndarray], list]:
    """The stored arrays and onemodel's outputs (label first, then scores) on the stored X."""
    model = onnx.load(MODELS / f"{name}.onnx")
    stored = dict(np.load(MODELS / f"{name}.npz"))
    session = onemodel.Session.load(str(MODELS / f"{name}.onnx"))
    return stored, session.run(None, {model.graph.input[0].name: stored["X"]})


def test_the_models_are_there() -> None:
    assert len(NAMES) >= 18
    sizes = [(MODELS / f"{name}.onnx").stat().st_size for name in NAMES]
    assert max(sizes) < 300_000 and sum(sizes) < 2_000_000


@pytest.mark.parametrize("name", NAMES)
def test_model_agrees_with_scikit_learn(name: str) -> None:
    stored, results = outputs_of(name)
    if "prediction" in stored:  # regressors and transformers: one output
        expected = stored["prediction"]
        np.testing.assert_allclose(results[0].reshape(expected.shape), expected, RTOL, ATOL)
        return
    label, scores = results
    np.testing.assert_array_equal(label, stored["label"])
    if isinstance(scores, list):  # ZipMap: a list of {class: probability} per row
        assert all(isinstance(row, dict) for row in scores)
        scores = np.array([[row[c] for c in sorted(row)] for row in scores])
    if "probabilities" in stored:
        np.testing.assert_allclose(scores, stored["probabilities"], RTOL, ATOL)
    else:  # SVC without probabilities: the decision function
        expected = stored["scores"]
        if expected.ndim == 1:  # binary: skl2onnx's first column is sklearn's decision value
            scores = scores[:, 0]
        np.testing.assert_allclose(scores, expected, RTOL, ATOL)


def test_zipmap_output_is_a_list_of_dicts() -> None:
    stored, (_, maps) = outputs_of("logistic_regression_zipmap")
    assert isinstance(maps, list) and len(maps) == len(stored["X"])
    assert sorted(maps[0]) == [0, 1, 2]
    assert all(isinstance(p, float) for p in maps[0].values())
    strings = run_node(
        "ZipMap",
        [np.array([[0.25, 0.75]], np.float32)],
        {"classlabels_strings": ["no", "yes"]},
        opset=1,
        domain=ML,
    )
    assert strings == [[{"no": 0.25, "yes": 0.75}]]


# -- SVM operators against onnxruntime -------------------------------------------------------

RNG = np.random.default_rng(7)
X = RNG.normal(size=(12, 4)).astype(np.float32)
VECTORS = RNG.normal(size=(7, 4)).round(3)
KERNELS = {
    "LINEAR": [0.0, 0.0, 0.0],
    "POLY": [0.3, 1.0, 3.0],
    "RBF": [0.4, 0.0, 0.0],
    "SIGMOID": [0.2, 0.5, 0.0],
}


def compare(op_type: str, attributes: dict, output_types: list[int]) -> None:
    ours = run_node(op_type, [X], attributes, opset=1, outputs=len(output_types), domain=ML)
    model, feeds = one_node_model(
        op_type, [X], attributes, opset=1, domain=ML, outputs=len(output_types),
        output_types=output_types,
    )  # fmt: skip
    theirs = onnxruntime_run(model, feeds)
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype == object:  # string labels
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC"])
def test_svm_classifier_one_vs_one(kernel: str, classes: int, transform: str) -> None:
    per_class = [3, 4] if classes == 2 else [2, 3, 2]
    attributes = {
        "classlabels_ints": list(range(10, 10 + classes)),
        "coefficients": RNG.normal(size=(classes - 1) * 7).round(3).tolist(),
        "kernel_params": KERNELS[kernel],
        "kernel_type": kernel,
        "post_transform": transform,
        "rho": RNG.normal(size=classes * (classes - 1) // 2).round(3).tolist(),
        "support_vectors": VECTORS.reshape(-1).tolist(),
        "vectors_per_class": per_class,
    }
    compare("SVMClassifier", attributes, [TensorProto.INT64, TensorProto.FLOAT])


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("classes", [2, 3, 4])
@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX"])
def test_svm_classifier_platt_probabilities(kernel: str, classes: int, transform: str) -> None:
    """prob_a and prob_b: libsvm's pairwise coupling of the pair scores' Platt sigmoids."""
    pairs = classes * (classes - 1) // 2
    attributes = {
        "classlabels_ints": list(range(classes)),
        "coefficients": RNG.normal(size=(classes - 1) * 7).round(3).tolist(),
        "kernel_params": KERNELS[kernel],
        "kernel_type": kernel,
        "post_transform": transform,
        "prob_a": (-RNG.uniform(0.5, 3, pairs)).tolist(),
        "prob_b": RNG.normal(size=pairs).round(2).tolist(),
        "rho": RNG.normal(size=pairs).round(3).tolist(),
        "support_vectors": VECTORS.reshape(-1).tolist(),
        "vectors_per_class": {2: [3, 4], 3: [2, 3, 2], 4: [2, 2, 2, 1]}[classes],
    }
    compare("SVMClassifier", attributes, [TensorProto.INT64, TensorProto.FLOAT])


@pytest.mark.parametrize("classes", [2, 3])
def test_svm_classifier_linear(classes: int) -> None:
    attributes = {
        "classlabels_strings": ["a", "b", "c"][:classes],
        "coefficients": RNG.normal(size=classes * 4).round(3).tolist(),
        "kernel_params": KERNELS["RBF"],  # ignored: no support vectors means a linear model
        "kernel_type": "RBF",
        "rho": [0.1],
    }
    compare("SVMClassifier", attributes, [TensorProto.STRING, TensorProto.FLOAT])


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel: str, one_class: int) -> None:
    attributes = {
        "coefficients": RNG.normal(size=7).round(3).tolist(),
        "kernel_params": KERNELS[kernel],
        "kernel_type": kernel,
        "n_supports": 7,
        "one_class": one_class,
        "rho": [0.3],
        "support_vectors": VECTORS.reshape(-1).tolist(),
    }
    compare("SVMRegressor", attributes, [TensorProto.FLOAT])


def test_svm_regressor_linear() -> None:
    attributes = {
        "coefficients": [0.5, -1.0, 2.0, 0.25],
        "kernel_params": KERNELS["POLY"],  # ignored: no support vectors means a linear model
        "kernel_type": "POLY",
        "rho": [1.5],
    }
    compare("SVMRegressor", attributes, [TensorProto.FLOAT])
