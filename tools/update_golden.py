"""Rewrite tests/golden/<model>.exact.npz: the exact-mode outputs of the exported models in
tests/models on their stored inputs (tests/test_exact_golden.py compares every backend with
them bit for bit). Run it only when exact mode's meaning changes on purpose, and say why in the
commit: a golden file that moves is a changed promise.

With --bench-set it writes tests/golden/bench/<model>.exact.json instead, for every model of
benchmarks/models (tools/export_models.py --bench-set; not committed, too large) that exact
mode opens: the SHA-256 of the model file, of each input and of each exact output's bytes
(tests/test_exact_bench_golden.py)."""

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

import onemodel

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "models"
GOLDEN = ROOT / "tests" / "golden"
NAMES = ("mlp", "cnn", "transformer")


BENCH_MODELS = ROOT / "benchmarks" / "models"
BENCH_GOLDEN = GOLDEN / "bench"


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
    inputs = stored_inputs(models / f"{name}.onnx")
    options = onemodel.SessionOptions(mode=onemodel.ExecutionMode.EXACT, backend=backend)
    session = onemodel.Session.load(str(models / f"{name}.onnx"), options)
    names = [value.name for value in session.outputs]
    return dict(zip(names, session.run(None, inputs), strict=True))


def bench_golden(path: Path) -> dict:
    """The bench-set golden record of one exported model."""
    outputs = exact_outputs(path.stem, models=path.parent)
    return {
        "model_sha256": sha256(path.read_bytes()),
        "inputs": "stored beside the model by tools/export_models.py --bench-set (seed 0)",
        "inputs_sha256": {k: sha256(v.tobytes()) for k, v in stored_inputs(path).items()},
        "outputs_sha256": {k: sha256(v.tobytes()) for k, v in outputs.items()},
        "outputs": {k: f"{v.dtype}{list(v.shape)}" for k, v in outputs.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-set", action="store_true", help="the bench-set SHA-256 files")
    if parser.parse_args().bench_set:
        BENCH_GOLDEN.mkdir(parents=True, exist_ok=True)
        for path in sorted(BENCH_MODELS.glob("*.onnx")):
            try:
                record = bench_golden(path)
            except onemodel.SessionError as error:
                print(f"{path.stem}: not written ({error})")
                continue
            target = BENCH_GOLDEN / f"{path.stem}.exact.json"
            target.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
            print(f"{path.stem}: {record['outputs']}")
        return
    GOLDEN.mkdir(exist_ok=True)
    for name in NAMES:
        outputs = exact_outputs(name)
        np.savez(GOLDEN / f"{name}.exact.npz", **outputs)
        print(f"{name}: {', '.join(f'{k} {v.dtype}{list(v.shape)}' for k, v in outputs.items())}")


if __name__ == "__main__":
    main()
