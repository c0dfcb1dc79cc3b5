"""`onemodel bench` and `onemodel run --trace`."""

import ast
import json
import sys
from pathlib import Path

import pytest

from onemodel import bench, cli, runner
from onemodel.bench_models import bench_set, missing_exports, missing_line, resolve
from onemodel.session import Session

MODELS = Path(__file__).resolve().parent / "models"
MLP = str(MODELS / "mlp.onnx")
ENGINE_KEYS = {"create_ms", "iterations", "p10_ms", "median_ms", "p90_ms", "peak_rss_delta_mb"}


def _bench(tmp_path, *extra):
    out, page = tmp_path / "bench.json", tmp_path / "bench.md"
    argv = ["bench", MLP, "--iterations", "3", "--warmup", "1"]
    argv += ["--json", str(out), "--markdown", str(page), *extra]
    assert cli.main(argv) == 0
    return json.loads(out.read_text()), page


def test_bench_writes_json_with_the_documented_keys_and_sane_numbers(tmp_path, capsys):
    report, page = _bench(tmp_path, "--vs", "onnxruntime,reference")
    assert {"environment", "settings", "notes", "results"} <= set(report)
    assert report["settings"]["subprocess_per_thread_count"] is True
    (row,) = report["results"]
    assert row["model"] == "mlp" and row["threads"] == 1 and row["inputs"] == "file"
    for name in ("onemodel", "onnxruntime", "reference"):
        engine = row["engines"][name]
        assert set(engine) >= ENGINE_KEYS, name
        assert engine["iterations"] == 3
        assert 0 < engine["p10_ms"] <= engine["median_ms"] <= engine["p90_ms"]
        assert engine["create_ms"] > 0
    assert row["engines"]["onemodel"]["peak_traced_mb"] >= 0
    assert row["engines"]["reference"]["capped"] is False
    assert row["ratios"]["onemodel/onnxruntime"] > 0
    assert row["ratios"]["reference/onemodel"] > 0
    assert row["max_abs_diff_vs_onnxruntime"] < 1e-4
    text = page.read_text()
    assert text.startswith("# Benchmarks") and "| mlp | 1 |" in text
    printed = capsys.readouterr().out
    assert "om/ort" in printed and "worker process" in printed


def test_bench_in_process_and_no_chart_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    report, page = _bench(tmp_path, "--in-process", "--vs", "onnxruntime")
    assert report["settings"]["subprocess_per_thread_count"] is False
    assert "reference" not in report["results"][0]["engines"]
    assert "![ratios]" not in page.read_text()
    assert not page.with_suffix(".png").exists()


def _mlp_model():
    (model,) = resolve([MLP])
    return model


def test_a_missing_onnxruntime_is_reported_not_fatal(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import now raises ImportError
    row = bench.bench_model(_mlp_model(), threads=1, vs=["onnxruntime"], iterations=2, warmup=0)
    assert row["engines"]["onnxruntime"]["available"] is False
    assert row["engines"]["onemodel"]["median_ms"] > 0
    assert "onemodel/onnxruntime" not in row["ratios"]
    assert bench.environment()["onnxruntime"] is None
    header, lines = bench.table_rows({"results": [row]})
    assert lines[0][header.index("ort ms")] == "n/a"


def test_the_reference_time_cap_stops_after_one_run():
    row = bench.bench_model(
        _mlp_model(),
        threads=1,
        vs=["reference"],
        iterations=50,
        warmup=2,
        reference_budget=1e-9,
    )
    reference = row["engines"]["reference"]
    assert reference["capped"] is True
    assert reference["iterations"] == 1
    assert row["engines"]["onemodel"]["iterations"] == 50
    assert row["ratios"]["reference/onemodel"] > 0


def test_the_benchmark_set_lists_light_and_test_models(tmp_path):
    models = bench_set(exports=tmp_path)
    names = [m.name for m in models]
    assert len(models) == 12 and {"mlp", "cnn", "transformer", "vgg19"} <= set(names)
    assert all(m.path.is_file() for m in models)
    light = [m for m in models if m.path.name.startswith("light_")]
    assert len(light) == 9 and all(m.inputs_path is None for m in light)
    assert resolve(["mlp"])[0].inputs_path is not None
    with pytest.raises(ValueError, match="no model file"):
        resolve(["no-such-model"])


def test_the_benchmark_set_takes_the_exports_found_and_names_the_missing(tmp_path):
    assert set(missing_exports(tmp_path)) == {
        "resnet18_224",
        "bert_seq128",
        "gpt2_block",
        "lstm",
        "gru",
        "resnet50_224",
        "mobilenet_v2",
        "mobilenet_v3",
        "efficientnet_b0",
        "yolo_silu",
        "crnn_ocr",
        "keras_cnn1d",
        "db_detector",
    }
    assert "export_models.py --bench-set" in missing_line(tmp_path)
    light = bench_set(exports=tmp_path)[0].path
    (tmp_path / "lstm.onnx").write_bytes(light.read_bytes())
    names = [m.name for m in bench_set(exports=tmp_path)]
    assert "lstm" in names and "gru" not in names
    assert "lstm" not in missing_exports(tmp_path) and "gru" in missing_line(tmp_path)


def test_the_benchmark_set_lists_what_the_export_tool_exports():
    """bench_models names the models `tools/export_models.py --bench-set` writes (read from
    its source: the tool needs torch)."""
    source = (Path(__file__).resolve().parent.parent / "tools" / "export_models.py").read_text()
    tree = ast.parse(source)
    exported = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "BENCH_SET"
    )
    assert set(missing_exports(Path("/nonexistent"))) == set(exported)


def test_trace_events_have_the_chrome_format():
    records = [("", "MatMul", 10.0, 0.002, [(2, 3), None]), ("relu", "Relu", 10.5, 1e-6, [(2,)])]
    first, second = runner.trace_events(records, origin=10.0)
    assert first == {
        "name": "MatMul_0",
        "cat": "MatMul",
        "ph": "X",
        "ts": 0.0,
        "dur": 2000.0,
        "pid": 0,
        "tid": 0,
        "args": {"op": "MatMul", "shapes": [[2, 3], None]},
    }
    assert second["name"] == "relu" and second["ts"] == 500000.0


def test_run_trace_writes_one_event_per_step(tmp_path):
    path = tmp_path / "trace.json"
    argv = ["run", MLP, "--inputs", str(MODELS / "mlp.inputs.npz"), "--trace", str(path)]
    assert cli.main(argv) == 0
    events = json.loads(path.read_text())["traceEvents"]
    session = Session.load(MLP)
    session.run(None, runner.read_inputs(MODELS / "mlp.inputs.npz")[0])
    assert 0 < len(events) <= len(session.plans()[0].steps)
    assert {e["ph"] for e in events} == {"X"} and {e["pid"] for e in events} == {0}
    assert "MatMul" in {e["cat"] for e in events} or "Gemm" in {e["cat"] for e in events}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    assert all(isinstance(e["args"]["shapes"], list) for e in events)
