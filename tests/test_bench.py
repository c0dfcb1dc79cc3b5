"""`onemodel bench` and `onemodel run --trace`."""

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
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
    assert len(models) == 15 and {"mlp", "cnn", "transformer", "vgg19"} <= set(names)
    assert {"vad_stream", "add_chain_100k", "add_tree_100k"} <= set(names)
    assert all(m.path.is_file() or m.generated for m in models)
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


def test_a_streaming_model_carries_its_state_from_run_to_run(tmp_path):
    (model,) = resolve(["vad_stream"])
    model = dataclasses.replace(model, path=tmp_path / "vad_stream.onnx", runs=30)
    row = bench.bench_model(model, threads=1, vs=["onnxruntime"], iterations=5, warmup=1)
    assert (tmp_path / "vad_stream.onnx").is_file() and row["inputs"] == "file"
    assert row["carried"] == [["state_out", "state"]]
    assert row["engines"]["onemodel"]["iterations"] == 30
    assert row["engines"]["onnxruntime"]["iterations"] == 30
    assert row["max_abs_diff_vs_onnxruntime"] < 1e-5  # both compared on the first chunk


def test_the_carried_state_changes_the_next_result(tmp_path):
    from onemodel.bench_graphs import ensure

    path = ensure("vad_stream", tmp_path)
    feeds, _ = runner.read_inputs(path.with_name("vad_stream.inputs.npz"))
    session = Session.load(path)
    first, state = session.run(None, feeds)
    second, _ = session.run(None, {**feeds, "state": state})
    assert state.shape == (2, 1, 64) and np.abs(state).max() > 0
    assert not np.array_equal(first, second)


def test_bench_ops_runs_cases_and_writes_its_own_section(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    out, page = tmp_path / "ops.json", tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nThe model table.\n")
    argv = ["bench", "ops", "--filter", "^(Relu|Cast bool->float32)$", "--sizes", "small"]
    argv += ["--budget", "0", "--in-process", "--json", str(out), "--markdown", str(page)]
    for _ in range(2):  # the second run replaces the section, it does not add one
        assert cli.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["tool"] == "onemodel bench ops" and "environment" in report
    assert [(r["case"], r["size"]) for r in report["results"]] == [
        ("Relu", "small"),
        ("Cast bool->float32", "small"),
    ]
    for row in report["results"]:
        assert row["onemodel"]["iterations"] == row["onnxruntime"]["iterations"] >= 3
        assert row["ratio"] > 0 and row["max_abs_diff"] == 0
    assert report["summary"]["small"]["cases"] == 2
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nThe model table.")
    assert text.count("## Operators (`onemodel bench ops`)") == 1
    assert "| Relu | small | 4x256 |" in text and "bench ops --sizes small" in text
    assert "Cast bool->float32" in capsys.readouterr().out


def test_bench_ops_cpu_time_times_runs_by_the_threads_cpu_time(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    from onemodel import bench_ops

    calls = []

    def thread_time() -> float:
        calls.append(None)
        return 0.001 * len(calls)  # every run "takes" 1 ms

    monkeypatch.setattr(bench_ops.time, "thread_time", thread_time)
    out = tmp_path / "ops.json"
    argv = ["bench", "ops", "--filter", "^Relu$", "--sizes", "small", "--budget", "0"]
    assert cli.main([*argv, "--in-process", "--cpu-time", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    (row,) = report["results"]
    assert calls and row["onemodel"]["median_ms"] == row["onnxruntime"]["median_ms"] == 1.0
    assert "--cpu-time" in report["command"] and "CPU time" in report["notes"]["timing"]


def test_bench_all_keeps_the_operator_section(tmp_path):
    from onemodel import bench_ops

    page = tmp_path / "bench.md"
    page.write_text(bench_ops.SECTION_START + "\nops table\n" + bench_ops.SECTION_END + "\n")
    _bench(tmp_path, "--in-process", "--vs", "onnxruntime")
    text = page.read_text()
    assert text.startswith("# Benchmarks") and "| mlp | 1 |" in text
    assert text.endswith(bench_ops.SECTION_START + "\nops table\n" + bench_ops.SECTION_END + "\n")


def test_bench_ops_cases_cover_sizes_casts_and_layers():
    from onemodel import bench_ops

    cases = bench_ops.all_cases()
    for size, elements in (("small", 1024), ("medium", 256 * 1024), ("large", 4 * 2**20)):
        sized = [c for c in cases if c.size == size and c.name in ("Relu", "MaxPool 3x3/2")]
        assert [int(np.prod(c.inputs[0].shape)) for c in sized] == [elements, elements]
    casts = {c.name for c in cases if c.op == "Cast" and c.size == "medium"}
    assert len(casts) == 30
    layers = [c.name for c in cases if c.size == "layer"]
    for kind in ("Conv dw", "Conv grouped", "Conv dilated", "ConvTranspose", "Gemm", "LSTM"):
        assert any(name.startswith(kind) for name in layers), kind
    assert any("b8" in name for name in layers) and any("bidirectional" in name for name in layers)


def test_bench_ops_contrib_cases_import_their_domain():
    import onnx

    from onemodel import bench_ops

    (case,) = bench_ops.selected(("small",), "^SkipLayerNormalization$")
    model = onnx.load_from_string(bench_ops.case_model(case))
    assert {(o.domain, o.version) for o in model.opset_import} == {
        ("", bench_ops.OPSET),
        ("com.microsoft", 1),
    }
    assert model.graph.node[0].domain == "com.microsoft"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH is Python 3.11's")
def test_the_ops_worker_measures_this_onemodel_not_a_checkout_in_the_current_directory(tmp_path):
    """`python -m` puts the current directory first on the worker's import path: a folder
    named onemodel there (another checkout) used to be what the worker timed."""
    work, runner_folder = tmp_path / "work", tmp_path / "runner"
    (work / "onemodel").mkdir(parents=True)
    (work / "onemodel" / "__init__.py").write_text("raise ImportError('the cwd checkout')\n")
    runner_folder.mkdir()
    script = runner_folder / "run.py"  # a script: its folder, not the cwd, leads sys.path
    script.write_text("from onemodel.cli import main\nmain()\n")
    done = subprocess.run(
        [sys.executable, str(script), "bench", "ops", "--filter", "^Abs$", "--sizes", "small",
         "--budget", "0.01", "--max-iterations", "3"],
        cwd=work, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Abs" in done.stdout
