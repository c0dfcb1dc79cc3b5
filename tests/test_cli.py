"""The command line: `onemodel demo` runs the example model on the chosen backend."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from onemodel import cli
from onemodel.backends import KernelPaths


@pytest.mark.parametrize("backend", KernelPaths.available())
def test_demo_runs_the_mlp_and_reports_json(capsys, backend):
    assert cli.main(["demo", "--backend", backend, "--batch", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] == backend
    assert report["output_shape"] == [3, 4]
    assert report["max_abs_error_vs_numpy"] < 1e-5
    assert report["run_ms"] > 0


def test_demo_picks_the_best_backend_by_default(capsys):
    assert cli.main(["demo"]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == KernelPaths.best().name


def test_an_unknown_backend_is_a_clear_error_not_a_traceback(capsys):
    assert cli.main(["demo", "--backend", "tpu"]) == 2
    assert "unknown kernel path 'tpu'" in capsys.readouterr().err


MODELS = Path(__file__).parent / "models"


def test_run_checks_benchmarks_and_profiles_a_model(capsys):
    model = str(MODELS / "mlp.onnx")
    inputs = str(MODELS / "mlp.inputs.npz")
    argv = ["run", model, "--inputs", inputs, "--check", "--bench", "5", "--warmup", "1"]
    assert cli.main([*argv, "--profile"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == model and report["backend"] == "numpy"
    assert report["max_abs_error"] < 1e-4
    assert report["iterations"] == 5
    assert report["min_ms"] <= report["p10_ms"] <= report["median_ms"] <= report["p90_ms"]
    profile = report["profile"]
    assert [row["ms"] for row in profile] == sorted((row["ms"] for row in profile), reverse=True)
    # Each of the three Gemms is a step of its own or the head of a fused one (Gemm+Relu).
    gemm_rows = [
        row for row in profile if row["op"] == "Gemm" or row["op"].startswith("fused(Gemm")
    ]
    assert sum(row["nodes"] for row in gemm_rows) == 3


def test_run_without_inputs_makes_them_from_the_declared_types(capsys):
    assert cli.main(["run", str(MODELS / "transformer.onnx")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["load_ms"] > 0 and "max_abs_error" not in report


def test_check_without_golden_outputs_is_a_clear_error(capsys):
    assert cli.main(["run", str(MODELS / "mlp.onnx"), "--check"]) == 2
    assert "golden outputs" in capsys.readouterr().err


def test_info_lists_inputs_outputs_opsets_and_unsupported_operators(capsys, tmp_path):
    assert cli.main(["info", str(MODELS / "cnn.onnx")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"] == [
        {"name": "image", "kind": "tensor", "type": "FLOAT", "dims": ["batch", 3, 32, 32]}
    ]
    assert report["opsets"] == {"": 17} and report["unsupported"] == []
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["x2"])], "g", [x], [
        helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1])])  # fmt: skip
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), path)
    assert cli.main(["info", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["unsupported"] == [
        f"Frobnicate (opset {onnx.defs.onnx_opset_version()})"
    ]


def test_info_reports_passes_and_the_saving_of_reduced_weight_storage(capsys, tmp_path):
    saved = tmp_path / "optimised.onnx"
    argv = ["info", str(MODELS / "cnn.onnx"), "--weight-storage", "binary16"]
    assert cli.main([*argv, "--save-optimized", str(saved)]) == 0
    compiled = json.loads(capsys.readouterr().out)["compiled"]
    assert compiled["passes"] and compiled["nodes"] <= compiled["nodes_before_passes"]
    assert compiled["weight_storage"] == "binary16"
    saving = compiled["weight_bytes_saved"]
    assert saving == compiled["weight_bytes_original"] - compiled["weight_bytes"]
    assert saving > 0.4 * compiled["weight_bytes_original"]
    assert len(onnx.load(str(saved)).graph.node) == compiled["nodes"]
