"""Exact mode's cost against fast mode (and onnxruntime), side by side in one process.

    OPENBLAS_NUM_THREADS=1 python tools/exact_cost.py benchmarks/models/resnet50_224.onnx ...

For each model: the inputs beside it (`<name>.inputs.npz`), one NumPy-backend session per mode
with one intra-op thread, onnxruntime with one thread; the modes run alternately, `--runs`
times after a warm-up, and the medians and exact/fast ratio are printed as one JSON line per
model. A model exact mode cannot open is reported with the operators it lacks.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import onemodel
from onemodel.errors import SessionError


def _inputs(model: Path) -> dict[str, np.ndarray]:
    with np.load(model.with_suffix(".inputs.npz")) as stored:
        return {k: stored[k] for k in stored.files if not k.startswith("output:")}


def measure(model: Path, runs: int) -> dict:
    import onnxruntime as ort

    feeds = _inputs(model)
    sessions, row = {}, {"model": model.stem, "processor": platform.processor() or "cpu"}
    for mode in ("fast", "exact"):
        options = onemodel.SessionOptions(
            mode=onemodel.ExecutionMode[mode.upper()], intra_op_threads=1, backend="numpy"
        )
        try:
            session = onemodel.Session.load(str(model), options)
            sessions[mode] = lambda feeds, session=session: session.run(None, feeds)
        except SessionError as error:
            row[f"{mode}_error"] = str(error)
    ort_options = ort.SessionOptions()
    ort_options.intra_op_num_threads = ort_options.inter_op_num_threads = 1
    ort_session = ort.InferenceSession(str(model), ort_options, providers=["CPUExecutionProvider"])
    sessions["onnxruntime"] = lambda feeds: ort_session.run(None, feeds)
    times: dict[str, list[float]] = {name: [] for name in sessions}
    cpu: dict[str, list[float]] = {name: [] for name in sessions}
    for run in sessions.values():
        run(feeds)  # warm-up: plans, pools
    for _ in range(runs):
        for name, run in sessions.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            run(feeds)
            times[name].append((time.perf_counter() - start) * 1e3)
            cpu[name].append((time.process_time() - start_cpu) * 1e3)
    for name in sessions:
        row[f"{name}_ms"] = round(statistics.median(times[name]), 2)
        row[f"{name}_cpu_ms"] = round(statistics.median(cpu[name]), 2)
    if "exact" in sessions and "fast" in sessions:
        row["exact/fast"] = round(row["exact_ms"] / row["fast_ms"], 2)
        row["exact/fast_cpu"] = round(row["exact_cpu_ms"] / row["fast_cpu_ms"], 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    for model in args.models:
        print(json.dumps(measure(model, args.runs)), flush=True)


if __name__ == "__main__":
    main()
