"""The model runner behind `onemodel run` and `onemodel info` (seed 001's rml-graph-run).

`run_model` loads a model, runs it once on given or generated inputs, optionally checks the
outputs against golden values stored with the inputs, benchmarks and profiles, and returns the
one-line JSON report as a dict.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from onemodel.graph.compiled import ValueMeta, unsupported_operators
from onemodel.graph.importer import load_model
from onemodel.graph.passes.base import OptimizationLevel
from onemodel.graph.weights import WeightStorage
from onemodel.session import ExecutionMode, Session, SessionOptions
from onemodel.tensors import numpy_dtype_for_onnx, onnx_name

GOLDEN_PREFIX = "output:"


def generated_inputs(inputs: list[ValueMeta], seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs made from the declared types: symbolic or unknown extents become 1."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for meta in inputs:
        dtype = numpy_dtype_for_onnx(meta.elem_type if meta.elem_type is not None else 1)
        shape = tuple(d if isinstance(d, int) else 1 for d in (meta.dims or ()))
        if dtype == np.bool_:
            feeds[meta.name] = rng.integers(0, 2, shape).astype(bool)
        elif np.issubdtype(dtype, np.integer):
            feeds[meta.name] = rng.integers(0, 8, shape).astype(dtype)
        else:
            feeds[meta.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def read_inputs(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Inputs by name and golden outputs (keys `output:<name>`) from an .npz file."""
    with np.load(path) as data:
        inputs = {k: data[k] for k in data.files if not k.startswith(GOLDEN_PREFIX)}
        golden = {
            k[len(GOLDEN_PREFIX) :]: data[k] for k in data.files if k.startswith(GOLDEN_PREFIX)
        }
    return inputs, golden


def latency_summary(seconds: list[float]) -> dict[str, float]:
    """Mean, min and nearest-rank p10/median/p90 in milliseconds."""
    ordered = sorted(seconds)

    def rank(p: float) -> float:
        index = max(0, min(len(ordered) - 1, int(np.ceil(p * len(ordered))) - 1))
        return ordered[index] * 1e3

    return {
        "mean_ms": round(float(np.mean(ordered)) * 1e3, 4),
        "min_ms": round(ordered[0] * 1e3, 4),
        "p10_ms": round(rank(0.10), 4),
        "median_ms": round(rank(0.50), 4),
        "p90_ms": round(rank(0.90), 4),
    }


def profile_rows(profile: Mapping[str, list[float]], runs: int, nodes: Mapping[str, int]):
    """Time per operator label summed over a run (averaged over runs), slowest first."""
    rows = [
        {"op": label, "ms": round(sum(times) / runs * 1e3, 4), "nodes": nodes.get(label, 0)}
        for label, times in profile.items()
    ]
    return sorted(rows, key=lambda row: row["ms"], reverse=True)


def run_model(
    model_path: str,
    *,
    inputs_path: str | None = None,
    check: bool = False,
    bench: int = 0,
    warmup: int = 3,
    threads: int = 0,
    profile: bool = False,
    mode: str = "fast",
    backend: str | None = None,
    trace: str | None = None,
) -> dict[str, Any]:
    options = SessionOptions(mode=ExecutionMode(mode), intra_op_threads=threads, backend=backend)
    started = time.perf_counter()
    session = Session.load(model_path, options)
    load_ms = (time.perf_counter() - started) * 1e3
    if inputs_path:
        feeds, golden = read_inputs(inputs_path)
    else:
        feeds, golden = generated_inputs(session.inputs), {}
    outputs = session.run(None, feeds)
    report: dict[str, Any] = {
        "model": model_path,
        "backend": session.backend,
        "threads": threads,
        "load_ms": round(load_ms, 3),
    }
    if check:
        report["max_abs_error"] = _max_abs_error(session, outputs, golden)
    if bench > 0:
        for _ in range(warmup):
            session.run(None, feeds)
        times = []
        for _ in range(bench):
            begin = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - begin)
        report["iterations"] = bench
        report.update(latency_summary(times))
    if profile:
        runs = max(bench, 1)
        timings: dict[str, list[float]] = {}
        for _ in range(runs):
            session.run(None, feeds, profile=timings)
        counts = {label: len(times) // runs for label, times in timings.items()}
        report["profile"] = profile_rows(timings, runs, counts)
    if trace:
        report["trace"] = write_trace(session, feeds, trace)
    return report


def trace_events(records: Iterable[tuple], origin: float) -> list[dict[str, Any]]:
    """Chrome trace events ("X", complete) for per-step records (node name, op type, start and
    duration in perf_counter seconds, input shapes), timestamps in µs from `origin`."""
    events = []
    for index, (name, op_type, start, duration, shapes) in enumerate(records):
        events.append(
            {
                "name": name or f"{op_type}_{index}",
                "cat": op_type,
                "ph": "X",
                "ts": round((start - origin) * 1e6, 3),
                "dur": round(duration * 1e6, 3),
                "pid": 0,
                "tid": 0,
                "args": {
                    "op": op_type,
                    "shapes": [None if s is None else [int(d) for d in s] for s in shapes],
                },
            }
        )
    return events


def write_trace(session: Session, feeds: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    """Run once collecting one record per executed step; write Chrome trace-event JSON that
    chrome://tracing and Perfetto open. Returns the file and its event count."""
    records: list[tuple] = []
    origin = time.perf_counter()
    session.run(None, feeds, trace=records)
    events = trace_events(records, origin)
    document = {"traceEvents": events, "displayTimeUnit": "ms"}
    Path(path).write_text(json.dumps(document))
    return {"file": str(path), "events": len(events)}


def _max_abs_error(session: Session, outputs: list, golden: Mapping[str, np.ndarray]) -> float:
    if not golden:
        raise ValueError("--check needs golden outputs (keys 'output:<name>') in the inputs file")
    worst = 0.0
    for meta, value in zip(session.outputs, outputs, strict=True):
        if meta.name in golden:
            got = np.asarray(session.kernels.memory.to_host(value), dtype=np.float64)
            want = np.asarray(golden[meta.name], dtype=np.float64)
            worst = max(worst, float(np.max(np.abs(got - want), initial=0.0)))
    return worst


def model_info(
    model_path: str,
    *,
    weight_storage: str = "original",
    optimization_level: int = 2,
    save_optimized: str | None = None,
) -> dict[str, Any]:
    """Inputs, outputs, opsets and the operators onemodel does not support; for a model it
    supports, also what compilation leaves (passes, nodes, weight bytes and their saving)."""
    model = load_model(model_path)

    def described(info) -> dict[str, Any]:
        kind = info.type.kind
        element = info.type.elem_type
        return {
            "name": info.name,
            "kind": kind,
            "type": None if element is None else onnx_name(element),
            "dims": None if info.type.dims is None else list(info.type.dims),
        }

    report = {
        "model": model_path,
        "producer": model.producer_name,
        "opsets": model.opsets,
        "nodes": len(model.graph.nodes),
        "inputs": [described(i) for i in model.graph.inputs],
        "outputs": [described(o) for o in model.graph.outputs],
        "unsupported": unsupported_operators(model),
    }
    if report["unsupported"]:
        return report
    options = SessionOptions(
        optimization_level=OptimizationLevel(optimization_level),
        weight_storage=WeightStorage(weight_storage),
        optimized_model_path=save_optimized,
    )
    compiled = Session.create(model, options).graph_summary
    if options.weight_storage is not WeightStorage.ORIGINAL:
        plain = dataclasses.replace(options, weight_storage=WeightStorage.ORIGINAL)
        original = Session.create(model, dataclasses.replace(plain, optimized_model_path=None))
        compiled["weight_bytes_original"] = original.graph_summary["weight_bytes"]
        compiled["weight_bytes_saved"] = (
            compiled["weight_bytes_original"] - compiled["weight_bytes"]
        )
    report["compiled"] = compiled
    return report
