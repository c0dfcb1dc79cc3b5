"""Rewrite tests/golden/<model>.exact.npz: the exact-mode outputs of the exported models in
tests/models on their stored inputs (tests/test_exact_golden.py compares every backend with
them bit for bit). Run it only when exact mode's meaning changes on purpose, and say why in the
commit: a golden file that moves is a changed promise."""

from pathlib import Path

import numpy as np

import onemodel

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "models"
GOLDEN = ROOT / "tests" / "golden"
NAMES = ("mlp", "cnn", "transformer")


def exact_outputs(name: str, backend: str = "numpy-reference") -> dict[str, np.ndarray]:
    """The model's exact-mode outputs by output name, on its stored inputs."""
    with np.load(MODELS / f"{name}.inputs.npz") as stored:
        inputs = {key: stored[key] for key in stored.files if not key.startswith("output:")}
    options = onemodel.SessionOptions(mode=onemodel.ExecutionMode.EXACT, backend=backend)
    session = onemodel.Session.load(str(MODELS / f"{name}.onnx"), options)
    names = [value.name for value in session.outputs]
    return dict(zip(names, session.run(None, inputs), strict=True))


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for name in NAMES:
        outputs = exact_outputs(name)
        np.savez(GOLDEN / f"{name}.exact.npz", **outputs)
        print(f"{name}: {', '.join(f'{k} {v.dtype}{list(v.shape)}' for k, v in outputs.items())}")


if __name__ == "__main__":
    main()
