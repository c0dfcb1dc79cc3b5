"""The GPU benchmark of issue 7: ResNet-50 and a BERT-base encoder at batch 1 and 32, onemodel's
CuPy and NumPy backends side by side with PyTorch's eager execution of the same network.

Run it by hand on a machine with a GPU (tools/gpu_check.sh does), never in CI: it needs torch.

    python tools/gpu_bench.py [--out DIR] [--batches 1 32] [--budget 8]

Both models are written out in tools/export_models.py (no torchvision, no downloads), built with
fixed seeds, exported to ONNX (opset 17, dynamic batch) into --out, and then timed:

- torch: eager, `torch.no_grad()`, on --torch-device (cuda by default), TF32 off, so both sides
  compute in float32; the clock stops after `torch.cuda.synchronize()`;
- onemodel: a Session per backend (cupy, numpy), fed device-resident inputs and keeping its
  outputs on the device (`outputs_as="backend"`); the clock stops after `kernels.synchronize()`.

Each measurement is the median of up to --iterations runs after --warmup, or as many as fit in
--budget seconds. Printed: latency (ms) and throughput (items/s) per model, batch and runner,
onemodel's throughput as a fraction of torch's (the target is at least 0.5 at batch 32) and
ResNet-50's batch-1 latency on cupy (the target is under 3 ms); also the largest difference
between onemodel's and torch's outputs. --json writes the same figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import export_models

from onemodel import Session, SessionOptions
from onemodel.backends import BackendUnavailableError, KernelPaths

MODELS = {"resnet50": "resnet50_224", "bert_base": "bert_base_seq128"}


def measure(run: Callable[[], Any], warmup: int, iterations: int, budget: float) -> list[float]:
    """Seconds per run: `warmup` untimed runs, then up to `iterations` timed ones, stopping
    early once `budget` seconds have gone into timing (at least one run is timed)."""
    for _ in range(warmup):
        run()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < iterations and (not times or time.perf_counter() - started < budget):
        begin = time.perf_counter()
        run()
        times.append(time.perf_counter() - begin)
    return times


def batched(inputs: dict[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """The example inputs (batch 1) repeated along axis 0 to `batch` rows."""
    return {name: np.repeat(array, batch, axis=0) for name, array in inputs.items()}


def torch_runner(model: torch.nn.Module, feeds: dict[str, np.ndarray], device: str) -> Any:
    model = model.to(device)
    args = tuple(torch.from_numpy(array).to(device) for array in feeds.values())
    synchronize = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def run() -> Any:
        with torch.no_grad():
            result = model(*args)
        synchronize()
        return result

    return run


def onemodel_runner(session: Session, feeds: dict[str, np.ndarray]) -> Callable[[], Any]:
    xp = session.kernels.xp
    device_feeds = {name: xp.asarray(array) for name, array in feeds.items()}
    session.kernels.synchronize()

    def run() -> Any:
        outputs = session.run(None, device_feeds, outputs_as="backend")
        session.kernels.synchronize()
        return outputs

    return run


def host(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    return value.get()  # a CuPy array


def row(model: str, batch: int, runner: str, times: list[float]) -> dict[str, Any]:
    median = statistics.median(times)
    return {
        "model": model,
        "batch": batch,
        "runner": runner,
        "runs": len(times),
        "latency_ms": median * 1e3,
        "items_per_s": batch / median,
    }


def bench_model(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    model, inputs, output_names, options = export_models.bench_build(MODELS[name])
    path = args.out / f"{MODELS[name]}.onnx"
    export_models.export_onnx(model, inputs, output_names, options, path)
    print(f"{name}: exported {path} ({path.stat().st_size / 2**20:.0f} MiB)", flush=True)
    rows = []
    sessions = {}
    for backend in args.backends:
        try:
            KernelPaths.get(backend)
        except BackendUnavailableError as error:
            print(f"  {backend}: skipped ({error})")
            continue
        sessions[backend] = Session.load(str(path), SessionOptions(backend=backend))
    for batch in args.batches:
        feeds = batched(inputs, batch)
        torch_run = torch_runner(model, feeds, args.torch_device)
        times = measure(torch_run, args.warmup, args.iterations, args.budget)
        rows.append(row(name, batch, f"torch-{args.torch_device}", times))
        reference = host(torch_run())
        for backend, session in sessions.items():
            run = onemodel_runner(session, feeds)
            warmup = args.warmup if backend != "numpy" else min(args.warmup, 1)
            times = measure(run, warmup, args.iterations, args.budget)
            result = row(name, batch, f"onemodel-{backend}", times)
            result["max_abs_diff_vs_torch"] = float(np.max(np.abs(host(run()[0]) - reference)))
            rows.append(result)
        for result in rows[-1 - len(sessions) :]:
            print(
                f"  batch {batch:>3} {result['runner']:<24} {result['latency_ms']:9.2f} ms "
                f"{result['items_per_s']:10.1f} items/s ({result['runs']} runs)",
                flush=True,
            )
    return rows


def summary(rows: list[dict[str, Any]], torch_runner_name: str) -> list[str]:
    """onemodel's throughput as a fraction of torch's, per model, batch and backend."""
    header = f"{'model':<10} batch  {'runner':<24} {'ms/run':>8} {'items/s':>10} {'vs torch':>9}"
    lines = [f"{header}  max|diff|"]
    by_key = {(r["model"], r["batch"], r["runner"]): r for r in rows}
    for r in rows:
        baseline = by_key.get((r["model"], r["batch"], torch_runner_name))
        ratio = r["items_per_s"] / baseline["items_per_s"] if baseline else float("nan")
        diff = r.get("max_abs_diff_vs_torch")
        lines.append(
            f"{r['model']:<10} {r['batch']:>5}  {r['runner']:<24} {r['latency_ms']:8.2f} "
            f"{r['items_per_s']:10.1f} {ratio:9.2f}  {'' if diff is None else f'{diff:.2g}'}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/gpu_bench"))
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--backends", nargs="+", default=["cupy", "numpy"])
    parser.add_argument("--torch-device", default="cuda")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--budget", type=float, default=8.0, help="seconds of timing per figure")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 on both sides
    torch.backends.cudnn.allow_tf32 = False
    warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based")
    print(f"torch {torch.__version__}, torch device {args.torch_device}", flush=True)
    rows = [r for name in args.models for r in bench_model(name, args)]
    print("\n".join(summary(rows, f"torch-{args.torch_device}")))
    for r in rows:
        if (r["model"], r["batch"], r["runner"]) == ("resnet50", 1, "onemodel-cupy"):
            print(f"ResNet-50 batch-1 latency on cupy: {r['latency_ms']:.2f} ms (target < 3 ms)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
