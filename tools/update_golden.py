"""Rewrite tests/golden/<model>.exact.npz: the exact-mode outputs of the exported models in
tests/models on their stored inputs (tests/test_exact_golden.py compares every backend with
them bit for bit). Run it only when exact mode's meaning changes on purpose, and say why in the
commit: a golden file that moves is a changed promise.

With --bench-set it writes tests/golden/bench/<model>.exact.json instead, for every model of
the bench set (onemodel/bench_models.py) that is present and that exact mode opens: the onnx
package's light models (inputs made by runner.generated_inputs, seed 0), the exports of
benchmarks/models (tools/export_models.py --bench-set; not committed, too large) and the
committed test models (their stored inputs): the SHA-256 of the model file, of each input
and of each exact output's bytes (tests/test_exact_bench_golden.py)."""

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

import onemodel
from onemodel.bench_models import BenchModel, bench_set
from onemodel.runner import generated_inputs

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "models"
GOLDEN = ROOT / "tests" / "golden"
NAMES = ("mlp", "cnn", "transformer")
BENCH_GOLDEN = GOLDEN / "bench"
EXPORTED_INPUTS = "stored beside the model by tools/export_models.py --bench-set (seed 0)"


def stored_inputs(path: Path) -> dict[str, np.ndarray]:
    """The inputs stored beside a model (`<name>.inputs.npz`), by name."""
    with np.load(path.with_suffix(".inputs.npz")) as stored:
        return {key: stored[key] for key in stored.files if not key.startswith("output:")}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def exact_outputs(
    name: str, backend: str = "numpy-reference", models: Path = MODELS
) -> dict[str, np.ndarray]:
    """The model's exact-mode outputs by output name, on its stored inputs."""
    return run_exact(models / f"{name}.onnx", stored_inputs(models / f"{name}.onnx"), backend)


def run_exact(
    path: Path, inputs: dict[str, np.ndarray], backend: str = "numpy-reference"
) -> dict[str, np.ndarray]:
    options = onemodel.SessionOptions(mode=onemodel.ExecutionMode.EXACT, backend=backend)
    session = onemodel.Session.load(str(path), options)
    names = [value.name for value in session.outputs]
    return dict(zip(names, session.run(None, inputs), strict=True))


def bench_inputs(model: BenchModel) -> tuple[dict[str, np.ndarray], str]:
    """A bench-set model's inputs and where they come from: stored beside it, or (the light
    models, which have none) made from the declared types with seed 0."""
    if model.path.parent == MODELS:
        return stored_inputs(model.path), "stored beside the model in tests/models"
    if model.inputs_path is not None:
        return stored_inputs(model.path), EXPORTED_INPUTS
    session = onemodel.Session.load(str(model.path))
    return generated_inputs(session.inputs, seed=0), "onemodel.runner.generated_inputs, seed 0"


def bench_golden(model: BenchModel) -> dict:
    """The bench-set golden record of one model."""
    inputs, origin = bench_inputs(model)
    outputs = run_exact(model.path, inputs)
    return {
        "model_sha256": sha256(model.path.read_bytes()),
        "inputs": origin,
        "inputs_sha256": {k: sha256(v.tobytes()) for k, v in inputs.items()},
        "outputs_sha256": {k: sha256(v.tobytes()) for k, v in outputs.items()},
        "outputs": {k: f"{v.dtype}{list(v.shape)}" for k, v in outputs.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-set", action="store_true", help="the bench-set SHA-256 files")
    parser.add_argument("names", nargs="*", help="with --bench-set: only these models")
    args = parser.parse_args()
    if args.bench_set:
        BENCH_GOLDEN.mkdir(parents=True, exist_ok=True)
        for model in bench_set():
            if model.generated or (args.names and model.name not in args.names):
                continue
            try:
                record = bench_golden(model)
            except onemodel.SessionError as error:
                print(f"{model.name}: not written ({error})")
                continue
            target = BENCH_GOLDEN / f"{model.name}.exact.json"
            target.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
            print(f"{model.name}: {record['outputs']}", flush=True)
        return
    GOLDEN.mkdir(exist_ok=True)
    for name in NAMES:
        outputs = exact_outputs(name)
        np.savez(GOLDEN / f"{name}.exact.npz", **outputs)
        print(f"{name}: {', '.join(f'{k} {v.dtype}{list(v.shape)}' for k, v in outputs.items())}")


if __name__ == "__main__":
    main()
