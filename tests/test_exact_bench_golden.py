"""Bench-set golden files: exact outputs of every model of the bench set, by SHA-256.

tests/golden/bench/<model>.exact.json (tools/update_golden.py --bench-set) records, for a model
of the bench set (onemodel/bench_models.py), the SHA-256 of the model file, of its inputs and of
each exact output's bytes. Where the model is present and is the file the record was made
from, its exact outputs must have those bytes on numpy-reference, on numpy with 1 and 2
threads, on a reused plan and from concurrent runs, at optimization levels NONE and ALL, on the
flushing checked-device stand-in and (gpu mark) on CuPy; and they must be within rtol 1e-4 of
onnxruntime's outputs (stored beside the model, or computed here for the light models).

What CI runs: the onnx package's light models (inputs from runner.generated_inputs, seed 0)
and the committed test models are always there. The light models are full-size networks (the
whole parity check of the nine takes minutes), so by default each is compared with its golden
once, on numpy beside onnxruntime; ONEMODEL_EXACT_PARITY_ALL=1 runs the whole check for them
too. The PyTorch exports of benchmarks/models (tools/export_models.py --bench-set: torch, and
too large to commit) are not in CI, so their cases skip there; so do the light models' where
the installed onnx ships other files than the ones recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import onemodel
from onemodel import ExecutionMode, OptimizationLevel, SessionOptions
from onemodel.backends import BackendUnavailableError, KernelPaths
from onemodel.bench_models import BENCH_EXPORTS, bench_set
from onemodel.runner import generated_inputs

ROOT = Path(__file__).resolve().parent.parent
RECORDS = sorted((ROOT / "tests" / "golden" / "bench").glob("*.exact.json"))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _full_check(record_path: Path) -> None:
    """Skips the whole parity check of a light model unless ONEMODEL_EXACT_PARITY_ALL is set."""
    model, stored = _model_path(record_path.name.replace(".exact.json", ""))
    if stored is None and not os.environ.get("ONEMODEL_EXACT_PARITY_ALL"):
        pytest.skip(
            f"{model.name}: a light model, compared with its golden once on numpy "
            "(ONEMODEL_EXACT_PARITY_ALL=1 runs every path)"
        )


def _model_path(name: str) -> tuple[Path, Path | None]:
    """The model file of a record and its stored inputs file (None: inputs are generated).
    A record outside the bench set (the GPU benchmark's bert_base_seq128) is an export."""
    for model in bench_set():
        if model.name == name and not model.generated:
            return model.path, model.inputs_path
    path = BENCH_EXPORTS / f"{name}.onnx"
    return path, path.with_suffix(".inputs.npz")


def _record_and_model(record_path: Path) -> tuple[dict, Path, dict[str, np.ndarray]]:
    """The record, the model and its arrays (inputs, and `output:<name>` onnxruntime outputs
    where stored)."""
    record = json.loads(record_path.read_text())
    model, stored = _model_path(record_path.name.replace(".exact.json", ""))
    if not model.exists():
        pytest.skip(f"{model.name} is not exported (tools/export_models.py --bench-set)")
    if _sha(model.read_bytes()) != record["model_sha256"]:
        pytest.skip(f"{model.name} is not the file the golden record was made from")
    if stored is not None and stored.exists():
        with np.load(stored) as arrays:
            arrays = {key: arrays[key] for key in arrays.files}
    else:
        arrays = generated_inputs(onemodel.Session.load(str(model)).inputs, seed=0)
    inputs = _inputs(arrays)
    assert {k: _sha(v.tobytes()) for k, v in inputs.items()} == record["inputs_sha256"]
    return record, model, arrays


def _session(model: Path, backend: str, **options: object) -> onemodel.Session:
    try:
        KernelPaths.get(backend)
    except BackendUnavailableError as error:
        pytest.skip(str(error))
    options = SessionOptions(
        mode=ExecutionMode.EXACT, backend=backend, outputs_as="numpy", **options
    )
    return onemodel.Session.load(str(model), options)


def _hashes(session: onemodel.Session, inputs: dict[str, np.ndarray]) -> dict[str, str]:
    names = [value.name for value in session.outputs]
    return {n: _sha(v.tobytes()) for n, v in zip(names, session.run(None, inputs), strict=True)}


def _inputs(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in arrays.items() if not k.startswith("output:")}


@pytest.mark.parametrize("record_path", RECORDS, ids=lambda p: p.name.split(".")[0])
def test_numpy_paths_threads_plans_and_concurrent_runs_give_the_golden_bits(
    record_path: Path,
) -> None:
    _full_check(record_path)
    record, model, arrays = _record_and_model(record_path)
    inputs, want = _inputs(arrays), record["outputs_sha256"]
    assert _hashes(_session(model, "numpy-reference"), inputs) == want, "numpy-reference"
    for threads in (1, 2):
        session = _session(model, "numpy", intra_op_threads=threads)
        assert _hashes(session, inputs) == want, f"numpy, {threads} threads"
        assert _hashes(session, inputs) == want, f"numpy, {threads} threads, plan reused"
    with ThreadPoolExecutor(3) as pool:
        runs = list(pool.map(lambda _: _hashes(session, inputs), range(3)))
    assert all(run == want for run in runs), "concurrent runs"
    level = OptimizationLevel.NONE
    assert _hashes(_session(model, "numpy", optimization_level=level), inputs) == want, "NONE"


@pytest.mark.parametrize("backend", ["checked-device", pytest.param("cupy", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("record_path", RECORDS, ids=lambda p: p.name.split(".")[0])
def test_device_backends_give_the_golden_bits(record_path: Path, backend: str) -> None:
    _full_check(record_path)
    record, model, arrays = _record_and_model(record_path)
    assert _hashes(_session(model, backend), _inputs(arrays)) == record["outputs_sha256"]


@pytest.mark.parametrize("record_path", RECORDS, ids=lambda p: p.name.split(".")[0])
def test_exact_outputs_are_golden_and_within_1e4_of_onnxruntime(record_path: Path) -> None:
    record, model, arrays = _record_and_model(record_path)
    session = _session(model, "numpy")
    names = [value.name for value in session.outputs]
    outputs = dict(zip(names, session.run(None, _inputs(arrays)), strict=True))
    assert {n: _sha(v.tobytes()) for n, v in outputs.items()} == record["outputs_sha256"]
    if not any(key.startswith("output:") for key in arrays):  # a light model: none stored
        ort = pytest.importorskip("onnxruntime")
        reference = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        theirs = reference.run(None, _inputs(arrays))
        arrays.update({f"output:{n}": a for n, a in zip(names, theirs, strict=True)})
    for name, got in outputs.items():
        theirs = arrays[f"output:{name}"]
        scale = float(np.max(np.abs(theirs)))  # rtol on the output's scale: no 0/0 elements
        np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-4 * scale, err_msg=name)
