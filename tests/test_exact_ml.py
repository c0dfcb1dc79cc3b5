"""Exact mode of the ai.onnx.ml tree ensembles, support vector machines and linear models with
PROBIT (docs/exact-mode.md's ai.onnx.ml rows).

One-node models of every node mode (missing-value tracking and NaN features included),
aggregate, kernel and post transform run close to onnxruntime (PROBIT: within the error of
onnxruntime's float32 approximation of erfinv) and give the same bits on numpy-reference,
numpy, the flushing checked-device stand-in (CuPy under the gpu mark) and on a second run.
The forests' sums are held to an exact oracle (Fraction sums, the trees walked in plain Python)
whatever the order of the trees; the SVMs' linear kernel to tests/exact_oracle.py's integer
dot products; PROBIT to a bisection of math.erf/erfc; scikit-learn's exported models to
scikit-learn's own predictions.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import onnx
import pytest
from exact_oracle import oracle
from onnx import TensorProto, helper, numpy_helper
from operator_harness import run_node
from test_ops_strings_ml import (
    CASES as ML_CONFORMANCE_CASES,
)
from test_ops_strings_ml import (
    _attribute,
    as_tree_ensemble,
    features_with_nan,
    onnxruntime_outputs,
    random_forest,
    with_votes,
)

from onemodel import ExecutionMode, Session, SessionError, SessionOptions
from onemodel.backends import BackendUnavailableError, KernelPaths
from onemodel.backends.exact_ml import probit64
from onemodel.errors import ErrorKind
from onemodel.graph.importer import model_from_proto
from onemodel.graph.operators import optable

ML = "ai.onnx.ml"
FLOAT, INT64, STRING = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING
SKLEARN = Path(__file__).parent / "models" / "sklearn"
# onnxruntime's PROBIT is Winitzki's approximation of erfinv in float32 (about 2e-3 relative,
# worse where its float32 steps cancel near 0.5); exact mode's is the quantile itself.
PROBIT_RTOL, PROBIT_ATOL = 3e-3, 1e-3


@pytest.fixture(params=["numpy", "checked-device", pytest.param("cupy", marks=pytest.mark.gpu)])
def backend(request: pytest.FixtureRequest) -> str:
    try:
        KernelPaths.get(request.param)
    except BackendUnavailableError as error:
        pytest.skip(str(error))
    return request.param


def _bits(x: np.ndarray) -> bytes:
    x = np.asarray(x)
    return x.tobytes() if x.dtype != object else repr(x.tolist()).encode()


# -- one-node models -------------------------------------------------------------------------


def _tree_cases() -> dict[str, tuple]:
    """name → (op_type, opset, attributes as onnx takes them, inputs, output types, whether
    onnxruntime's reading is the definition), over aggregates, targets and transforms."""
    rng = np.random.default_rng(18)
    cases: dict[str, tuple] = {}
    x = features_with_nan(20, 4)
    for aggregate in ("SUM", "AVERAGE", "MIN", "MAX"):
        for targets, transforms in (
            (1, ("NONE", "PROBIT")),
            (3, ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO")),
        ):
            for transform in transforms:
                nodes, votes = random_forest(rng, 5, 4, targets, votes_per_leaf=targets)
                if transform == "PROBIT":
                    votes = [(t, n, c, w * 0.05 + 0.1) for t, n, c, w in votes]
                attributes = with_votes(nodes, votes, "target")
                attributes.update(
                    n_targets=targets,
                    aggregate_function=aggregate,
                    post_transform=transform,
                    base_values=[0.25] * targets,
                )
                name = f"regressor-{aggregate}-{targets}-{transform}"
                cases[name] = ("TreeEnsembleRegressor", 3, attributes, [x], [FLOAT], True)
        for dtype in (np.float32, np.float64, np.float16):
            for transform in (0, 3, 4, 1, 2):
                nodes, votes = random_forest(rng, 6, 4, 3 if transform != 4 else 1)
                if transform == 4:
                    votes = [(t, n, c, w * 0.05 + 0.5 / 6) for t, n, c, w in votes]
                attributes = as_tree_ensemble(nodes, votes, 3 if transform != 4 else 1, dtype)
                attributes.update(
                    aggregate_function=("AVERAGE", "SUM", "MIN", "MAX").index(aggregate),
                    post_transform=transform,
                )
                code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
                name = f"ensemble-{aggregate}-{np.dtype(dtype).name}-{transform}"
                # onnxruntime swaps SOFTMAX (1) and LOGISTIC (2)
                cases[name] = (
                    "TreeEnsemble",
                    5,
                    attributes,
                    [x.astype(dtype)],
                    [code],
                    transform not in (1, 2) and dtype != np.float16,
                )
    for classes, transform in [(3, t) for t in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO")]:
        nodes, votes = random_forest(rng, 6, 4, classes, votes_per_leaf=3)
        attributes = with_votes(nodes, votes, "class")
        attributes.update(
            post_transform=transform,
            classlabels_int64s=[10, 11, 12],
            base_values=[float(np.float32(b)) for b in rng.normal(size=classes)],
        )
        cases[f"classifier-{transform}"] = (
            "TreeEnsembleClassifier",
            3,
            attributes,
            [features_with_nan(30, 4)],
            [INT64, FLOAT],
            True,
        )
    for voted in (0, 1):
        for transform in ("NONE", "LOGISTIC", "SOFTMAX", "PROBIT"):
            attributes = dict(
                nodes_treeids=[0, 0, 0],
                nodes_nodeids=[0, 1, 2],
                nodes_featureids=[0, 0, 0],
                nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
                nodes_values=[0.5, 0, 0],
                nodes_truenodeids=[1, 0, 0],
                nodes_falsenodeids=[2, 0, 0],
                class_treeids=[0, 0],
                class_nodeids=[1, 2],
                class_ids=[voted, voted],
                class_weights=[0.3, 0.8],
                post_transform=transform,
                classlabels_int64s=[4, 7],
                base_values=[0.125],
            )
            x = np.array([[0.0], [1.0], [2.0]], np.float32)
            cases[f"binary-classifier-{voted}-{transform}"] = (
                "TreeEnsembleClassifier",
                3,
                attributes,
                [x],
                [INT64, FLOAT],
                transform != "PROBIT",  # onnxruntime leaves a PROBIT column unwritten
            )
    members = dict(
        n_targets=2,
        tree_roots=[0, 1],
        aggregate_function=1,
        nodes_modes=np.array([6, 4], np.uint8),
        nodes_featureids=[0, 1],
        nodes_splits=np.array([0, 2], np.float32),
        nodes_truenodeids=[0, 2],
        nodes_trueleafs=[1, 1],
        nodes_falsenodeids=[1, 3],
        nodes_falseleafs=[1, 1],
        membership_values=np.array([1, 3, np.nan], np.float32),
        nodes_missing_value_tracks_true=[1, 0],
        leaf_targetids=[0, 1, 1, 0],
        leaf_weights=np.array([10, 20, 5, 0.5], np.float32),
    )
    x = np.array([[1, 2], [2, 0], [3, 2], [np.nan, np.nan]], np.float32)
    members = {
        k: numpy_helper.from_array(v, k) if isinstance(v, np.ndarray) else v
        for k, v in members.items()
    }
    cases["ensemble-member-eq"] = ("TreeEnsemble", 5, members, [x], [FLOAT], True)
    return cases


def _svm_cases() -> dict[str, tuple]:
    rng = np.random.default_rng(1818)
    x = rng.normal(size=(12, 4)).astype(np.float32)
    vectors = rng.normal(size=(7, 4)).astype(np.float32).astype(np.float64).reshape(-1).tolist()
    kernels = {
        "LINEAR": [0.0, 0.0, 0.0],
        "POLY": [0.3, 1.0, 3.0],
        "RBF": [0.4, 0.0, 0.0],
        "SIGMOID": [0.2, 0.5, 0.0],
    }
    cases: dict[str, tuple] = {}
    for kernel, params in kernels.items():
        for classes in (2, 3):
            for transform in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"):
                attributes = {
                    "classlabels_ints": list(range(10, 10 + classes)),
                    "coefficients": rng.normal(size=(classes - 1) * 7).round(3).tolist(),
                    "kernel_params": params,
                    "kernel_type": kernel,
                    "post_transform": transform,
                    "rho": rng.normal(size=classes * (classes - 1) // 2).round(3).tolist(),
                    "support_vectors": vectors,
                    "vectors_per_class": [3, 4] if classes == 2 else [2, 3, 2],
                }
                cases[f"svc-{kernel}-{classes}-{transform}"] = (
                    "SVMClassifier",
                    1,
                    attributes,
                    [x],
                    [INT64, FLOAT],
                    # onnxruntime's two-class PROBIT scores are [NaN, s]
                    transform in ("NONE", "LOGISTIC") or classes > 2,
                )
        for classes, transform in ((2, "NONE"), (3, "SOFTMAX_ZERO"), (4, "LOGISTIC")):
            pairs = classes * (classes - 1) // 2
            attributes = {
                "classlabels_ints": list(range(classes)),
                "coefficients": rng.normal(size=(classes - 1) * 7).round(3).tolist(),
                "kernel_params": params, "kernel_type": kernel, "post_transform": transform,
                "prob_a": (-rng.uniform(0.5, 3, pairs)).tolist(),
                "prob_b": rng.normal(size=pairs).round(2).tolist(),
                "rho": rng.normal(size=pairs).round(3).tolist(), "support_vectors": vectors,
                "vectors_per_class": {2: [3, 4], 3: [2, 3, 2], 4: [2, 2, 2, 1]}[classes],
            }  # fmt: skip
            name = f"svc-platt-{kernel}-{classes}-{transform}"
            cases[name] = ("SVMClassifier", 1, attributes, [x], [INT64, FLOAT], True)
        for one_class in (0, 1):
            attributes = {
                "coefficients": rng.normal(size=7).round(3).tolist(),
                "kernel_params": params,
                "kernel_type": kernel,
                "n_supports": 7,
                "one_class": one_class,
                "rho": [0.3],
                "support_vectors": vectors,
            }
            cases[f"svr-{kernel}-{one_class}"] = ("SVMRegressor", 1, attributes, [x], [FLOAT], True)
    for classes in (2, 3):
        attributes = {
            "classlabels_ints": [3, 5, 8][:classes],
            "kernel_type": "RBF",
            "coefficients": rng.normal(size=classes * 4).round(3).tolist(),
            "rho": [0.1],
            "kernel_params": kernels["RBF"],
        }
        cases[f"svc-linear-{classes}"] = ("SVMClassifier", 1, attributes, [x], [INT64, FLOAT], True)
    attributes = {
        "coefficients": [0.5, -1.0, 2.0, 0.25],
        "rho": [0.05],
        "post_transform": "PROBIT",
        "kernel_params": kernels["POLY"],
    }
    # onnxruntime does not apply SVMRegressor's post_transform (fast mode applies PROBIT)
    cases["svr-linear-probit"] = ("SVMRegressor", 1, attributes, [x * 0.1], [FLOAT], False)
    return cases


def _linear_cases() -> dict[str, tuple]:
    rng = np.random.default_rng(181818)
    x = (rng.normal(size=(16, 3)) * 0.3).astype(np.float32)
    coefficients = rng.normal(size=3).round(3).tolist()
    return {
        "linear-regressor-probit": (
            "LinearRegressor",
            1,
            {"coefficients": coefficients, "intercepts": [0.5], "post_transform": "PROBIT"},
            [x * 0.2],
            [FLOAT],
            True,
        ),
        "linear-classifier-probit": (
            "LinearClassifier",
            1,
            {
                "coefficients": coefficients,
                "intercepts": [0.1],
                "classlabels_ints": [0, 1],
                "post_transform": "PROBIT",
            },
            [x],
            [INT64, FLOAT],
            False,
        ),  # its PROBIT is scrambled
    }


CASES = {**_tree_cases(), **_svm_cases(), **_linear_cases()}


def _exact(name: str, backend: str) -> list[np.ndarray]:
    op_type, opset, attributes, inputs, types, _ = CASES[name]
    mine = {k: _attribute(v) for k, v in attributes.items()}
    return run_node(
        op_type,
        inputs,
        mine,
        opset=opset,
        outputs=len(types),
        domain=ML,
        backend=backend,
        exact=True,
    )


@pytest.mark.parametrize("name", [n for n, case in CASES.items() if case[-1]])
def test_exact_ml_models_are_close_to_onnxruntime(name: str) -> None:
    op_type, opset, attributes, inputs, types, _ = CASES[name]
    expected = onnxruntime_outputs(op_type, inputs, attributes, types, opset=opset, domain=ML)
    probit = attributes.get("post_transform") in ("PROBIT", 4)
    rtol, atol = (PROBIT_RTOL, PROBIT_ATOL) if probit else (1e-5, 1e-6)
    for got, want in zip(_exact(name, "numpy-reference"), expected, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        if want.dtype.kind in "OiU":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_ml_models_give_the_same_bits_everywhere(name: str, backend: str) -> None:
    reference = _exact(name, "numpy-reference")
    for _ in range(2):
        got = _exact(name, backend)
        assert [_bits(a) for a in got] == [_bits(b) for b in reference]


def test_every_ml_operator_has_an_exact_kernel() -> None:
    lacking = [
        d.op_type
        for d in optable.definitions()
        if d.domain == ML and not getattr(d.factory, "supports_exact", False)
    ]
    assert lacking == []


@pytest.mark.parametrize(
    "name",
    sorted(
        n for n, c in ML_CONFORMANCE_CASES.items() if c[0].graph.node[0].op_type == "TreeEnsemble"
    ),
)
def test_tree_ensemble_conformance_cases_in_exact_mode(name: str, backend: str) -> None:
    model, inputs, outputs = ML_CONFORMANCE_CASES[name]
    (node,) = model.graph.node
    attributes = {a.name: _attribute(helper.get_attribute_value(a)) for a in node.attribute}
    results = [
        run_node(
            "TreeEnsemble",
            [np.asarray(x) for x in inputs],
            attributes,
            opset=5,
            domain=ML,
            backend=b,
            exact=True,
        )[0]
        for b in ("numpy-reference", backend)
    ]
    assert _bits(results[0]) == _bits(results[1])
    np.testing.assert_allclose(results[0], np.asarray(outputs[0]), rtol=1e-6, atol=1e-6)


# -- the forests' sums: exact, whatever the order of the trees -------------------------------


def _rounded_to_odd(exact: Fraction) -> float:
    """exact rounded to odd at float64's 53 bits: itself if a float64, else the neighbour
    whose last significand bit is 1 (float(Fraction) rounds to nearest)."""
    nearest = float(exact)
    if Fraction(nearest) == exact or int(math.frexp(nearest)[0] * 2**53) % 2:
        return nearest + 0.0
    return math.nextafter(nearest, math.inf if exact > nearest else -math.inf)


def _stumps(weights: np.ndarray, features: np.ndarray, splits: np.ndarray, dtype: type) -> dict:
    """A TreeEnsemble of one-node trees: tree t sends x[features[t]] <= splits[t] to leaf 2t,
    else to leaf 2t + 1, whose weights are weights[t] (one target)."""
    count = len(splits)
    return dict(
        n_targets=1,
        tree_roots=list(range(count)),
        aggregate_function=1,
        nodes_modes=np.zeros(count, np.uint8),
        nodes_featureids=features.tolist(),
        nodes_splits=splits.astype(dtype),
        nodes_truenodeids=[2 * t for t in range(count)],
        nodes_trueleafs=[1] * count,
        nodes_falsenodeids=[2 * t + 1 for t in range(count)],
        nodes_falseleafs=[1] * count,
        leaf_targetids=[0] * (2 * count),
        leaf_weights=weights.reshape(-1).astype(dtype),
    )


def test_forest_sums_are_the_exact_sum_whatever_the_order_of_the_trees(backend: str) -> None:
    rng = np.random.default_rng(99)
    trees = 48
    magnitude = np.ldexp(1.0, rng.integers(-40, 40, size=(trees, 2)))
    weights = rng.choice([-1.0, 1.0], (trees, 2)) * magnitude * rng.uniform(1, 2, (trees, 2))
    weights[1::2] = -weights[::2]  # pairs that cancel exactly, leaving the small ones
    weights[1::4, 0] *= 1.5
    weights = weights.astype(np.float32).astype(np.float64)
    splits, features = np.round(rng.normal(size=trees), 1), rng.integers(3, size=trees)
    x = np.round(rng.normal(size=(40, 3)), 1)
    reached = np.where(x[:, features] <= splits, 0, 1)  # [rows, trees], float32 alike
    chosen = weights[np.arange(trees), reached]
    exact = [sum(map(Fraction, row.tolist()), Fraction(0)) for row in chosen]
    odd = np.array([_rounded_to_odd(e) for e in exact])
    in_order = np.array([sum(row.tolist(), 0.0) for row in chosen])
    assert (in_order != odd).any(), "the weights should defeat an ordered float64 sum"
    order = rng.permutation(trees)
    for dtype, want in ((np.float64, odd), (np.float32, odd.astype(np.float32))):
        for permutation in (np.arange(trees), order):
            attributes = _stumps(
                weights[permutation], features[permutation], splits[permutation], dtype
            )
            (got,) = run_node(
                "TreeEnsemble",
                [x.astype(dtype)],
                attributes,
                opset=5,
                domain=ML,
                backend=backend,
                exact=True,
            )
            assert _bits(got[:, 0]) == _bits(want.astype(dtype))
    attributes = {**_stumps(weights, features, splits, np.float64), "aggregate_function": 0}
    (got,) = run_node(
        "TreeEnsemble", [x], attributes, opset=5, domain=ML, backend=backend, exact=True
    )
    assert _bits(got[:, 0]) == _bits(odd / trees)  # AVERAGE: the sum divided once


def test_tree_tests_and_sums_keep_subnormals_on_a_flushing_backend(backend: str) -> None:
    """x ≤ 2^-149 separates 0, 2^-149 and 2^-148 only if the features keep their subnormal
    values (CuPy, and the stand-in, flush float32 subnormals in float32 arithmetic)."""
    tiny = float(np.float32(2.0**-149))
    weights = np.array([[tiny * 3, 1.0], [tiny, tiny * 5]])
    features, splits = np.array([0, 0]), np.array([tiny, 0.0])
    attributes = _stumps(weights, features, splits, np.float32)
    x = np.array([[0.0], [tiny], [2 * tiny], [-tiny]], np.float32)
    (got,) = run_node(
        "TreeEnsemble", [x], attributes, opset=5, domain=ML, backend=backend, exact=True
    )
    want = np.array([4 * tiny, 8 * tiny, 1.0, 4 * tiny], np.float32)[:, None]  # 1 + 5·2^-149 → 1
    assert _bits(got) == _bits(want)


@pytest.mark.parametrize("weight", [2.0**-1000, 2.0**990, np.inf, 2.0**-900])
def test_exact_sessions_refuse_forests_whose_weights_the_exact_sum_cannot_take(
    weight: float,
) -> None:
    attributes = dict(
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.5, 0, 0],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], target_treeids=[0, 0],
        target_nodeids=[1, 2], target_ids=[0, 0], n_targets=1,
        target_weights_as_tensor=numpy_helper.from_array(np.array([1.0, weight]), "weights"),
    )  # fmt: skip
    model = model_from_proto(_one_node_model("TreeEnsembleRegressor", attributes, 1, [FLOAT]))
    options = SessionOptions(mode=ExecutionMode.EXACT, backend="numpy", outputs_as="numpy")
    x = np.array([[0.0], [1.0]], np.float32)
    if weight == 2.0**-900:  # small, but a multiple of 2^-1000: summed exactly
        (got,) = Session.create(model, options).run(None, {"x": x})
        assert got[:, 0].tolist() == [1.0, np.float32(weight)]
        return
    with pytest.raises(SessionError) as caught:
        Session.create(model, options)
    assert caught.value.kind is ErrorKind.EXACT_MODE_UNAVAILABLE


# -- SVM kernels -----------------------------------------------------------------------------


def test_linear_svm_scores_are_exact_dot_products_rounded_as_stated(backend: str) -> None:
    """Each kernel the exact x·v rounded once into float32; the score the exact Σ c·kernel
    rounded once into float32, + rho in float64, rounded once into the output."""
    rng = np.random.default_rng(5)
    scale = np.ldexp(1.0, rng.integers(-20, 20, size=(1, 6)))
    x = (rng.normal(size=(9, 6)) * scale).astype(np.float32)
    vectors = (rng.normal(size=(5, 6)) / scale).astype(np.float32).astype(np.float64)
    vectors[1] = -vectors[0] * 2.0**-30 + vectors[2]  # near cancellation in the kernels
    coefficients = rng.normal(size=5).astype(np.float32).astype(np.float64)
    attributes = {
        "coefficients": coefficients.tolist(),
        "kernel_type": "LINEAR",
        "n_supports": 5,
        "rho": [0.375],
        "support_vectors": vectors.ravel().tolist(),
    }
    (got,) = run_node(
        "SVMRegressor", [x], attributes, opset=1, domain=ML, backend=backend, exact=True
    )
    kernels = oracle(x.astype(np.float64), vectors.T, np.float32).astype(np.float64)
    scores = oracle(kernels, coefficients[:, None], np.float32).astype(np.float64)
    assert _bits(got) == _bits((scores + 0.375).astype(np.float32))


# -- PROBIT ----------------------------------------------------------------------------------


def _normal_quantile(p: float) -> float:
    """Φ⁻¹(p) by bisection of math.erf (central) or math.erfc (tails), which keep their
    relative accuracy there: to float64 resolution."""
    y, root2 = 2 * p - 1, math.sqrt(2)  # 2p − 1 and 2(1 − p) are exact for float32 p
    if abs(y) < 0.5:
        below = lambda t: math.erf(t / root2) < y  # noqa: E731
    elif p < 0.5:
        below = lambda t: math.erfc(-t / root2) < 2 * p  # noqa: E731
    else:
        below = lambda t: math.erfc(t / root2) > 2 * (1 - p)  # noqa: E731
    low, high = -40.0, 40.0
    while True:
        middle = (low + high) / 2
        if middle in (low, high):
            return middle
        low, high = (middle, high) if below(middle) else (low, middle)


def _float32_samples(rng: np.random.Generator) -> np.ndarray:
    near_zero = np.float32(10.0) ** rng.uniform(-45, 0, 600).astype(np.float32)
    near_one = 1 - np.float32(2.0) ** -rng.uniform(1, 24, 600).astype(np.float32)
    uniform = rng.uniform(0, 1, 600).astype(np.float32)
    samples = np.concatenate([near_zero, near_one, uniform]).astype(np.float32)
    return samples[(samples > 0) & (samples < 1)]


def test_probit_is_the_normal_quantile_rounded_once() -> None:
    v = _float32_samples(np.random.default_rng(3)).astype(np.float64)
    got = probit64(np, v)
    want = np.array([_normal_quantile(p) for p in v.tolist()])
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    # float32: the correctly rounded quantile, but where the oracle itself may not decide
    slack = np.abs(want) * 1e-13
    low, high = (want - slack).astype(np.float32), (want + slack).astype(np.float32)
    rounded = got.astype(np.float32)
    assert bool(((rounded == low) | (rounded == high)).all())
    special = np.array([0.0, -0.0, 1.0, 0.5, np.nan, -0.25, 1.5, np.inf])
    expected = [-np.inf, -np.inf, np.inf, 0.0, np.nan, np.nan, np.nan, np.nan]
    np.testing.assert_array_equal(probit64(np, special), expected)


def _one_node_model(op_type: str, attributes: dict, inputs: int, types: list) -> onnx.ModelProto:
    outputs = [f"y{i}" for i in range(len(types))]
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x"], outputs, domain=ML, **attributes)],
        "probit",
        [helper.make_tensor_value_info("x", FLOAT, [None, inputs])],
        [helper.make_tensor_value_info(o, t, None) for o, t in zip(outputs, types, strict=True)],
    )
    imports = [helper.make_opsetid("", 19), helper.make_opsetid(ML, 3)]
    return helper.make_model(graph, opset_imports=imports, ir_version=10)


def test_probit_models_open_in_exact_sessions_and_give_the_rounded_quantile() -> None:
    rng = np.random.default_rng(8)
    x = rng.uniform(-1, 1, size=(64, 3)).astype(np.float32)
    coefficients = np.array([0.25, -0.125, 0.3125])
    model = _one_node_model(
        "LinearRegressor",
        {"coefficients": coefficients.tolist(), "intercepts": [0.5], "post_transform": "PROBIT"},
        3,
        [FLOAT],
    )
    options = SessionOptions(mode=ExecutionMode.EXACT, backend="numpy", outputs_as="numpy")
    (got,) = Session.create(model_from_proto(model), options).run(None, {"x": x})
    scores = oracle(x.astype(np.float64), coefficients[:, None], np.float32).astype(np.float64)
    want = np.array([_normal_quantile(p) for p in (scores[:, 0] + 0.5).tolist()])
    slack = np.abs(want) * 1e-13
    low, high = (want - slack).astype(np.float32), (want + slack).astype(np.float32)
    assert bool(((got[:, 0] == low) | (got[:, 0] == high)).all())


# -- scikit-learn's models -------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.stem for p in SKLEARN.glob("*.onnx")))
def test_scikit_learn_models_in_exact_mode(name: str, backend: str) -> None:
    """The same bits as numpy-reference on a first and a second run, and close to fast mode
    (which tests/test_sklearn_models.py holds to scikit-learn's own predictions)."""
    path = str(SKLEARN / f"{name}.onnx")
    x = np.load(SKLEARN / f"{name}.npz")["X"]
    feeds = {onnx.load(path).graph.input[0].name: x}

    def outputs(mode: ExecutionMode, on: str) -> list:
        options = SessionOptions(mode=mode, backend=on, outputs_as="numpy")
        session = Session.load(path, options)
        return [session.run(None, feeds) for _ in range(2)]

    (reference, _) = outputs(ExecutionMode.EXACT, "numpy-reference")
    (fast, _) = outputs(ExecutionMode.FAST, "numpy")
    for run in outputs(ExecutionMode.EXACT, backend):
        assert [_bits(a) for a in run] == [_bits(b) for b in reference]
    for got, want in zip(reference, fast, strict=True):
        if isinstance(want, list):  # ZipMap's list of dicts
            assert [sorted(r) for r in got] == [sorted(r) for r in want]
        elif want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(got, want)
