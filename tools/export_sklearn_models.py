"""Train small scikit-learn models on synthetic data and export them with skl2onnx, for
tests/test_sklearn_models.py.

Needs scikit-learn and skl2onnx, which are not project dependencies: the test suite only reads
the committed files. Writes tests/models/sklearn/<name>.onnx and <name>.npz (the input `X` and
scikit-learn's own `label`, `probabilities` or `prediction`). Run from the repository root:

    python tools/export_sklearn_models.py
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from skl2onnx import to_onnx
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, Normalizer, OneHotEncoder, StandardScaler
from sklearn.svm import SVC, SVR
from sklearn.tree import DecisionTreeClassifier

OUT = Path(__file__).resolve().parent.parent / "tests" / "models" / "sklearn"
OPSET = {"": 17, "ai.onnx.ml": 3}
SEED = 0
ROWS = 40  # rows of test input stored per model


def classification(classes: int = 3) -> tuple[np.ndarray, np.ndarray]:
    x, y = make_classification(
        n_samples=200, n_features=8, n_informative=5, n_classes=classes, random_state=SEED
    )
    return x.astype(np.float32), y


def regression() -> tuple[np.ndarray, np.ndarray]:
    x, y = make_regression(n_samples=200, n_features=8, noise=0.5, random_state=SEED)
    return x.astype(np.float32), y


def save(name: str, model, x: np.ndarray, zipmap: bool = False, **expected) -> None:
    options = None
    final = model.steps[-1][1] if hasattr(model, "steps") else model
    if hasattr(final, "classes_") and not zipmap:
        options = {id(final): {"zipmap": False}}
    onx = to_onnx(model, x[:1], target_opset=OPSET, options=options)
    (OUT / f"{name}.onnx").write_bytes(onx.SerializeToString())
    np.savez(OUT / f"{name}.npz", X=x, **expected)


def classifier(name: str, model, classes: int = 3, proba: bool = True, zipmap: bool = False):
    x, y = classification(classes)
    model.fit(x, y)
    test = x[:ROWS]
    expected = {"label": model.predict(test)}
    if proba:
        expected["probabilities"] = model.predict_proba(test)
    else:  # skl2onnx's second output is then the decision function
        expected["scores"] = model.decision_function(test)
    save(name, model, test, zipmap=zipmap, **expected)


def regressor(name: str, model) -> None:
    x, y = regression()
    model.fit(x, y)
    test = x[:ROWS]
    save(name, model, test, prediction=model.predict(test))


def transformer(name: str, model, x: np.ndarray) -> None:
    model.fit(x)
    test = x[:ROWS]
    save(name, model, test, prediction=model.transform(test))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    # skl2onnx reads SVC's deprecated probA_ / probB_, which warns on every conversion.
    warnings.filterwarnings("ignore", category=FutureWarning)
    rng = np.random.default_rng(SEED)
    classifier("logistic_regression", LogisticRegression(max_iter=500))
    classifier("logistic_regression_binary", LogisticRegression(max_iter=500), classes=2)
    classifier("logistic_regression_zipmap", LogisticRegression(max_iter=500), zipmap=True)
    classifier("scaler_logistic_pipeline", make_pipeline(StandardScaler(), LogisticRegression()))
    classifier("decision_tree", DecisionTreeClassifier(max_depth=4, random_state=SEED))
    classifier(
        "random_forest",
        RandomForestClassifier(n_estimators=8, max_depth=4, random_state=SEED),
    )
    classifier("svc_linear", SVC(kernel="linear", random_state=SEED), proba=False)
    classifier("svc_rbf", SVC(kernel="rbf", random_state=SEED), proba=False)
    classifier("svc_rbf_binary", SVC(kernel="rbf", random_state=SEED), classes=2, proba=False)
    classifier("kneighbors", KNeighborsClassifier(n_neighbors=5))
    regressor("linear_regression", LinearRegression())
    regressor("ridge", Ridge(alpha=1.0))
    regressor(
        "gradient_boosting",
        GradientBoostingRegressor(n_estimators=10, max_depth=3, random_state=SEED),
    )
    regressor("svr", SVR(kernel="rbf", C=10.0))
    categories = rng.integers(0, 4, size=(100, 3)).astype(np.int64)
    transformer("one_hot_encoder", OneHotEncoder(sparse_output=False), categories)
    x, _ = regression()
    holes = x.copy()
    holes[rng.random(holes.shape) < 0.15] = np.nan
    transformer("simple_imputer", SimpleImputer(strategy="mean"), holes)
    transformer("min_max_scaler", MinMaxScaler(), x)
    transformer("normalizer", Normalizer(norm="l2"), x)
    for path in sorted(OUT.glob("*.onnx")):
        print(f"{path.name}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
