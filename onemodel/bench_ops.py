"""`onemodel bench ops`: every fast-path operator as a one-node model, onemodel against
onnxruntime in one run.

Each case is one node built with `onnx.helper` (weights as initializers, data as inputs) at a
size: `small` (~1k elements), `medium` (~256k), `large` (~4M), or `layer` (Conv, ConvTranspose,
MatMul, Gemm, LSTM and GRU at the shapes of common vision, speech and NLP layers). Both engines
run the same inputs, one run of each in turn (so noise hits both alike) until `--budget` seconds
of onemodel time or `--max-iterations` runs, after two warm-up runs; the row is each engine's
median and the ratio onemodel/onnxruntime (above 1: onemodel is slower), with the largest
output difference. onnxruntime gets one intra-op thread and onemodel `intra_op_threads=1`; the
run happens in a worker process with the BLAS thread variables set to 1, as `onemodel bench`
does (see onemodel/bench.py).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SIZES = ("small", "medium", "large", "layer")
OPSET = 20
SECTION_START = "<!-- onemodel bench ops: start -->"
SECTION_END = "<!-- onemodel bench ops: end -->"
FLAT = {"small": (4, 256), "medium": (256, 1024), "large": (2048, 2048)}
IMAGE = {"small": (1, 4, 16, 16), "medium": (1, 64, 64, 64), "large": (1, 64, 256, 256)}


@dataclass(frozen=True)
class Input:
    """One graph input: shape, element type (numpy name) and the values it is filled with."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    values: str = "normal"  # normal | positive | unit | bool | cast (0..200)


@dataclass
class OpCase:
    name: str
    size: str
    op: str
    inputs: list[Input]
    attrs: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # initializers after inputs
    out_types: tuple[str, ...] = ()  # default: the first input's type
    domain: str = ""

    @property
    def label(self) -> str:
        return f"{self.name} [{self.size}]"


# -- the cases -----------------------------------------------------------------------------------

UNARY: dict[str, tuple[dict[str, Any], str]] = {
    "Abs": ({}, "normal"),
    "Neg": ({}, "normal"),
    "Exp": ({}, "normal"),
    "Log": ({}, "positive"),
    "Sqrt": ({}, "positive"),
    "Reciprocal": ({}, "positive"),
    "Floor": ({}, "normal"),
    "Ceil": ({}, "normal"),
    "Round": ({}, "normal"),
    "Sign": ({}, "normal"),
    "Sin": ({}, "normal"),
    "Cos": ({}, "normal"),
    "Tanh": ({}, "normal"),
    "Erf": ({}, "normal"),
    "Sigmoid": ({}, "normal"),
    "Relu": ({}, "normal"),
    "LeakyRelu": ({"alpha": 0.1}, "normal"),
    "Elu": ({"alpha": 1.0}, "normal"),
    "Selu": ({}, "normal"),
    "Celu": ({"alpha": 1.0}, "normal"),
    "HardSigmoid": ({"alpha": 0.2, "beta": 0.5}, "normal"),
    "HardSwish": ({}, "normal"),
    "Softplus": ({}, "normal"),
    "Softsign": ({}, "normal"),
    "Mish": ({}, "normal"),
    "Gelu": ({}, "normal"),
    "Gelu tanh": ({"approximate": "tanh"}, "normal"),
    "ThresholdedRelu": ({"alpha": 0.5}, "normal"),
    "Shrink": ({"lambd": 0.5, "bias": 0.1}, "normal"),
    "Identity": ({}, "normal"),
}
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow")
COMPARE = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")
REDUCE = (
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSumExp",
)
CAST_TYPES = ("float32", "float16", "int32", "int64", "bool", "uint8")
ONNX_TYPE = {
    "float32": 1,
    "uint8": 2,
    "int8": 3,
    "int32": 6,
    "int64": 7,
    "bool": 9,
    "float16": 10,
    "float64": 11,
}


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _weight(*shape: int, scale: float = 0.1) -> np.ndarray:
    return (_rng().standard_normal(shape) * scale).astype(np.float32)


def _sized_cases(size: str) -> Iterator[OpCase]:
    flat, image = FLAT[size], IMAGE[size]
    rows, cols = flat
    for name, (attrs, values) in UNARY.items():
        op = name.split()[0]
        yield OpCase(name, size, op, [Input(flat, values=values)], attrs)
    yield OpCase("Clip", size, "Clip", [Input(flat)], weights={"lo": _f(-1), "hi": _f(1)})
    yield OpCase("PRelu", size, "PRelu", [Input(image)], weights={"slope": _weight(image[1], 1, 1)})
    for op in BINARY:
        values = "positive" if op == "Pow" else "normal"
        yield OpCase(op, size, op, [Input(flat, values=values), Input(flat, values="unit")])
    yield OpCase("Add bias", size, "Add", [Input(flat)], weights={"b": _weight(cols)})
    yield OpCase("Mul scalar", size, "Mul", [Input(flat)], weights={"s": _f(0.5)})
    yield OpCase("Sum 3", size, "Sum", [Input(flat), Input(flat), Input(flat)])
    for op in COMPARE:
        yield OpCase(op, size, op, [Input(flat), Input(flat)], out_types=("bool",))
    yield OpCase(
        "Where",
        size,
        "Where",
        [Input(flat, "bool", "bool"), Input(flat), Input(flat)],
        out_types=("float32",),
    )
    for op in REDUCE:
        yield OpCase(f"{op} last", size, op, [Input(flat)], weights={"axes": _i64([-1])})
    yield OpCase(
        "ReduceMean HW", size, "ReduceMean", [Input(image)], weights={"axes": _i64([2, 3])}
    )
    for op in ("ArgMax", "ArgMin"):
        yield OpCase(op, size, op, [Input(flat)], {"axis": -1}, out_types=("int64",))
    yield OpCase("Softmax", size, "Softmax", [Input(flat)], {"axis": -1})
    yield OpCase("LogSoftmax", size, "LogSoftmax", [Input(flat)], {"axis": -1})
    yield OpCase(
        "LayerNormalization",
        size,
        "LayerNormalization",
        [Input(flat)],
        {"axis": -1},
        weights={"scale": _weight(cols, scale=1.0), "bias": _weight(cols)},
    )
    channels = image[1]
    yield OpCase(
        "BatchNormalization",
        size,
        "BatchNormalization",
        [Input(image)],
        weights={
            "scale": _weight(channels, scale=1.0),
            "bias": _weight(channels),
            "mean": _weight(channels),
            "var": np.abs(_weight(channels, scale=1.0)) + 0.5,
        },
    )
    yield OpCase(
        "InstanceNormalization",
        size,
        "InstanceNormalization",
        [Input(image)],
        weights={"scale": _weight(channels, scale=1.0), "bias": _weight(channels)},
    )
    groups = 4
    yield OpCase(
        "GroupNormalization 4",
        size,
        "GroupNormalization",
        [Input(image)],
        {"num_groups": groups},
        weights={"scale": _weight(groups, scale=1.0), "bias": _weight(groups)},
    )
    yield OpCase(
        "SimplifiedLayerNormalization",
        size,
        "SimplifiedLayerNormalization",
        [Input(flat)],
        {"axis": -1},
        weights={"scale": _weight(cols, scale=1.0)},
    )
    yield OpCase(
        "SkipLayerNormalization",
        size,
        "SkipLayerNormalization",
        [Input(flat), Input(flat)],
        weights={"gamma": _weight(cols, scale=1.0), "beta": _weight(cols)},
        domain="com.microsoft",
    )
    yield OpCase("Transpose 2-D", size, "Transpose", [Input(flat)], {"perm": [1, 0]})
    yield OpCase("Transpose NCHW>NHWC", size, "Transpose", [Input(image)], {"perm": [0, 2, 3, 1]})
    pool = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    yield OpCase("MaxPool 3x3/2", size, "MaxPool", [Input(image)], pool)
    yield OpCase("AveragePool 3x3/2", size, "AveragePool", [Input(image)], pool)
    yield OpCase("GlobalAveragePool", size, "GlobalAveragePool", [Input(image)])
    yield OpCase(
        "Resize nearest x2",
        size,
        "Resize",
        [Input(image)],
        {"mode": "nearest"},
        weights={"roi": _f32([]), "scales": _f32([1, 1, 2, 2])},
    )
    yield OpCase("Concat 2", size, "Concat", [Input(flat), Input(flat)], {"axis": -1})
    yield OpCase("Slice half", size, "Slice", [Input(flat)], weights=_slice_weights(cols))
    yield OpCase(
        "Pad 1", size, "Pad", [Input(image)], weights={"pads": _i64([0, 0, 1, 1, 0, 0, 1, 1])}
    )
    yield OpCase(
        "Gather rows",
        size,
        "Gather",
        [Input(flat)],
        {"axis": 0},
        weights={"idx": _i64(list(range(rows - 1, -1, -1)))},
    )
    yield from _movement_cases(size)
    for source in CAST_TYPES:
        for target in CAST_TYPES:
            if source != target:
                yield OpCase(
                    f"Cast {source}->{target}",
                    size,
                    "Cast",
                    [Input(flat, source, "bool" if source == "bool" else "cast")],
                    {"to": ONNX_TYPE[target]},
                    out_types=(target,),
                )


def _movement_cases(size: str) -> Iterator[OpCase]:
    """Pooling, resizing and data movement beyond the first table's rows; the view operators
    (Reshape, Flatten, Squeeze) are a copy here only because a graph output must not share
    the caller's input."""
    flat, image = FLAT[size], IMAGE[size]
    rows, cols = flat
    yield OpCase("GlobalMaxPool", size, "GlobalMaxPool", [Input(image)])
    for mode in ("linear", "cubic"):
        yield OpCase(
            f"Resize {mode} x2",
            size,
            "Resize",
            [Input(image)],
            {"mode": mode},
            weights={"roi": _f32([]), "scales": _f32([1, 1, 2, 2])},
        )
    yield OpCase("DepthToSpace 2", size, "DepthToSpace", [Input(image)], {"blocksize": 2})
    yield OpCase("SpaceToDepth 2", size, "SpaceToDepth", [Input(image)], {"blocksize": 2})
    yield OpCase("Expand rows", size, "Expand", [Input((1, cols))], weights={"s": _i64(flat)})
    yield OpCase("Tile 2x1", size, "Tile", [Input((rows // 2, cols))], weights={"r": _i64([2, 1])})
    yield OpCase(
        "Split 2",
        size,
        "Split",
        [Input(flat)],
        {"axis": -1, "num_outputs": 2},
        out_types=("float32", "float32"),
    )
    yield OpCase("Reshape", size, "Reshape", [Input(flat)], weights={"s": _i64([-1, 64])})
    yield OpCase("Flatten", size, "Flatten", [Input(image)], {"axis": 1})
    yield OpCase("Squeeze", size, "Squeeze", [Input(image)], weights={"axes": _i64([0])})


def _f(value: float) -> np.ndarray:
    return np.array(value, np.float32)


def _f32(values: list[float]) -> np.ndarray:
    return np.array(values, np.float32)


def _i64(values: list[int]) -> np.ndarray:
    return np.array(values, np.int64)


def _slice_weights(cols: int) -> dict[str, np.ndarray]:
    return {"starts": _i64([0]), "ends": _i64([cols // 2]), "axes": _i64([1])}


def _conv(name: str, batch: int, cin: int, cout: int, hw: int | tuple, k: int, **attrs) -> OpCase:
    spatial = (hw, hw) if isinstance(hw, int) else hw
    group = attrs.get("group", 1)
    kernel = (k,) * len(spatial)
    pad = attrs.pop("pad", (k // 2) * attrs.get("dilations", [1])[0])
    attrs.setdefault("pads", [pad] * (2 * len(spatial)))
    weights = {"W": _weight(cout, cin // group, *kernel), "B": _weight(cout)}
    return OpCase(
        f"{name} b{batch}",
        "layer",
        "Conv",
        [Input((batch, cin, *spatial))],
        {"kernel_shape": list(kernel), **attrs},
        weights,
    )


def _layer_cases() -> Iterator[OpCase]:
    for batch in (1, 8):
        yield _conv("Conv 3x3 64>64 56x56", batch, 64, 64, 56, 3)
        yield _conv("Conv 1x1 256>64 56x56", batch, 256, 64, 56, 1)
        yield _conv("Conv dw 3x3 96 56x56", batch, 96, 96, 56, 3, group=96)
        yield _conv("Conv dw 3x3/2 96 56x56", batch, 96, 96, 56, 3, group=96, strides=[2, 2])
    yield _conv("Conv 7x7/2 3>64 224x224 (stem)", 1, 3, 64, 224, 7, strides=[2, 2])
    yield _conv("Conv 3x3/2 128>128 28x28", 1, 128, 128, 28, 3, strides=[2, 2])
    yield _conv("Conv 3x3 256>256 14x14", 1, 256, 256, 14, 3)
    yield _conv("Conv grouped 3x3 g32 128>128 28x28", 1, 128, 128, 28, 3, group=32)
    yield _conv("Conv dilated 3x3 d2 128>128 32x32", 1, 128, 128, 32, 3, dilations=[2, 2])
    yield _conv("Conv dw 5x5 240 14x14", 1, 240, 240, 14, 5, group=240)
    yield _conv("Conv 1x1 16>96 112x112", 1, 16, 96, 112, 1)
    yield _conv("Conv1d k3 64>64 L256", 1, 64, 64, (256,), 3)
    yield _conv("Conv1d k3 80>256 L1000 (speech)", 1, 80, 256, (1000,), 3)
    for name, cin, cout, hw, k in (
        ("2x2/2 64>64 80x80", 64, 64, 80, 2),
        ("4x4/2 64>32 40x40", 64, 32, 40, 4),
    ):
        yield OpCase(
            f"ConvTranspose {name} b1",
            "layer",
            "ConvTranspose",
            [Input((1, cin, hw, hw))],
            {"kernel_shape": [k, k], "strides": [2, 2], "pads": [(k - 2) // 2] * 4},
            {"W": _weight(cin, cout, k, k), "B": _weight(cout)},
        )
    for batch in (1, 8):
        yield OpCase(
            f"MatMul 128x768 @ 768x768 b{batch}",
            "layer",
            "MatMul",
            [Input((batch, 128, 768))],
            weights={"W": _weight(768, 768)},
        )
        yield OpCase(
            f"MatMul 128x768 @ 768x3072 b{batch}",
            "layer",
            "MatMul",
            [Input((batch, 128, 768))],
            weights={"W": _weight(768, 3072)},
        )
    yield OpCase(
        "MatMul attention 12x128x64 @ 12x64x128",
        "layer",
        "MatMul",
        [Input((1, 12, 128, 64)), Input((1, 12, 64, 128))],
    )
    for batch in (1, 8):
        yield OpCase(
            f"Gemm {batch}x2048 @ 1000x2048^T +b",
            "layer",
            "Gemm",
            [Input((batch, 2048))],
            {"transB": 1},
            {"W": _weight(1000, 2048), "C": _weight(1000)},
        )
    for op, gates in (("LSTM", 4), ("GRU", 3)):
        for batch, hidden, direction in (
            (1, 128, "forward"),
            (8, 128, "forward"),
            (1, 256, "bidirectional"),
        ):
            dirs = 2 if direction == "bidirectional" else 1
            inputs = 64
            attrs = {"hidden_size": hidden, "direction": direction}
            if op == "GRU":
                attrs["linear_before_reset"] = 1
            yield OpCase(
                f"{op} T100 I{inputs} H{hidden} {direction} b{batch}",
                "layer",
                op,
                [Input((100, batch, inputs))],
                attrs,
                {
                    "W": _weight(dirs, gates * hidden, inputs),
                    "R": _weight(dirs, gates * hidden, hidden),
                    "B": _weight(dirs, 2 * gates * hidden),
                },
            )


def all_cases(sizes: tuple[str, ...] = SIZES) -> list[OpCase]:
    """Every case at the sizes asked for, in table order."""
    cases: list[OpCase] = []
    for size in sizes:
        cases += _layer_cases() if size == "layer" else _sized_cases(size)
    return cases


def selected(sizes: tuple[str, ...], pattern: str | None) -> list[OpCase]:
    """The cases at `sizes` whose name matches `pattern` (a regular expression, any case)."""
    wanted = re.compile(pattern, re.IGNORECASE) if pattern else None
    return [c for c in all_cases(sizes) if wanted is None or wanted.search(c.name)]


# -- one case ------------------------------------------------------------------------------------


def case_model(case: OpCase) -> bytes:
    """The one-node ONNX model of a case, serialized."""
    from onnx import helper, numpy_helper

    names = [f"x{i}" for i in range(len(case.inputs))] + list(case.weights)
    graph_inputs = [
        helper.make_tensor_value_info(f"x{i}", ONNX_TYPE[spec.dtype], list(spec.shape))
        for i, spec in enumerate(case.inputs)
    ]
    out_types = case.out_types or (case.inputs[0].dtype,)
    outputs = [f"y{i}" for i in range(len(out_types))]
    node = helper.make_node(case.op, names, outputs, domain=case.domain, **case.attrs)
    graph = helper.make_graph(
        [node],
        "bench_op",
        graph_inputs,
        [
            helper.make_tensor_value_info(o, ONNX_TYPE[t], None)
            for o, t in zip(outputs, out_types, strict=True)
        ],
        [numpy_helper.from_array(value, name) for name, value in case.weights.items()],
    )
    opsets = [helper.make_opsetid("", OPSET)]
    if case.domain:
        opsets.append(helper.make_opsetid(case.domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    return model.SerializeToString()


def case_feeds(case: OpCase) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    feeds = {}
    for i, spec in enumerate(case.inputs):
        if spec.values == "bool":
            value = rng.random(spec.shape) < 0.5
        elif spec.values == "cast":
            value = rng.uniform(0, 200, spec.shape)
        elif spec.values == "positive":
            value = rng.uniform(0.1, 4.0, spec.shape)
        elif spec.values == "unit":
            value = rng.uniform(0.5, 1.5, spec.shape)
        else:
            value = rng.standard_normal(spec.shape)
        feeds[f"x{i}"] = value.astype(spec.dtype)
    return feeds


def _sessions(case: OpCase) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import onnxruntime

    from onemodel.session import Session, SessionOptions

    model, feeds = case_model(case), case_feeds(case)
    ours = Session.load(model, SessionOptions(intra_op_threads=1))
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    theirs = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    to_host = ours.kernels.memory.to_host

    def run_ours() -> Any:
        # NumPy results are host arrays already (as onnxruntime's are): no copy is timed.
        return [o if isinstance(o, np.ndarray) else to_host(o) for o in ours.run(None, feeds)]

    return run_ours, lambda: theirs.run(None, feeds)


def _max_diff(ours: list[Any], theirs: list[Any]) -> float:
    worst = 0.0
    for a, b in zip(ours, theirs, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return float("inf")
        if a.size:
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            both_nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
            diff[both_nan] = 0.0
            worst = max(worst, float(np.max(diff)))
    return worst


def measure_case(
    case: OpCase, budget: float, max_iterations: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, Any]:
    """One row: both engines' medians (runs taken in turn), the ratio and the output gap.
    `clock` is wall time, or time.thread_time (`--cpu-time`): both engines run on the
    calling thread at one intra-op thread, so their CPU time is the work without the waits
    of a machine shared with other processes."""
    row: dict[str, Any] = {
        "case": case.name,
        "size": case.size,
        "op": case.op,
        "shapes": [list(spec.shape) for spec in case.inputs],
        "elements": int(np.prod(case.inputs[0].shape)),
    }
    try:
        run_ours, run_theirs = _sessions(case)
        ours, theirs = run_ours(), run_theirs()
        run_ours(), run_theirs()  # second warm-up run each
    except Exception as error:  # a case an engine cannot run is a result too
        row["error"] = f"{type(error).__name__}: {error}"
        return row
    row["max_abs_diff"] = _max_diff(ours, theirs)
    times: dict[str, list[float]] = {"onemodel": [], "onnxruntime": []}
    spent = 0.0
    while len(times["onemodel"]) < max_iterations and (
        spent < budget or len(times["onemodel"]) < 3
    ):
        for name, run in (("onemodel", run_ours), ("onnxruntime", run_theirs)):
            begin = clock()
            run()
            times[name].append(clock() - begin)
        spent += times["onemodel"][-1]
    for name, seconds in times.items():
        ordered = sorted(seconds)
        row[name] = {
            "median_ms": round(statistics.median(ordered) * 1e3, 4),
            "p10_ms": round(ordered[len(ordered) // 10] * 1e3, 4),
            "p90_ms": round(ordered[(9 * len(ordered)) // 10 - (len(ordered) % 10 == 0)] * 1e3, 4),
            "iterations": len(ordered),
        }
    row["ratio"] = round(row["onemodel"]["median_ms"] / row["onnxruntime"]["median_ms"], 3)
    return row


# -- the command ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    def sizes(text: str) -> list[str]:
        names = [part for part in text.split(",") if part]
        bad = [n for n in names if n not in SIZES]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown size(s) {bad}; known: {','.join(SIZES)}")
        return names

    parser.add_argument("--filter", metavar="REGEX", help="only cases whose name matches")
    parser.add_argument("--sizes", type=sizes, default=list(SIZES), help=",".join(SIZES))
    parser.add_argument("--budget", type=float, default=0.25, metavar="S", help="seconds per case")
    parser.add_argument("--max-iterations", type=int, default=200, metavar="N")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--markdown", metavar="FILE", help="write the table as a section of FILE")
    parser.add_argument("--in-process", action="store_true", help="no worker process")
    parser.add_argument("--list", action="store_true", help="print the case names and stop")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time each run by the thread's CPU time, not wall time (a shared machine)",
    )


def command_line(args: argparse.Namespace) -> str:
    words = ["onemodel", "bench", "ops", "--sizes", ",".join(args.sizes)]
    words += ["--filter", f"'{args.filter}'"] if args.filter else []
    words += ["--budget", f"{args.budget:g}", "--max-iterations", str(args.max_iterations)]
    words += ["--in-process"] if args.in_process else []
    words += ["--cpu-time"] if args.cpu_time else []
    return " ".join(words)


def run_cases(args: argparse.Namespace, progress: Any = None) -> list[dict[str, Any]]:
    rows = []
    for case in selected(tuple(args.sizes), args.filter):
        if progress is not None:
            print(f"bench ops: {case.label}", file=progress, flush=True)
        clock = time.thread_time if args.cpu_time else time.perf_counter
        rows.append(measure_case(case, args.budget, args.max_iterations, clock))
    return rows


def _worker_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from onemodel.bench import worker_environment

    env = worker_environment(1)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "rows.json"
        command = [sys.executable, "-m", "onemodel.bench_ops", "--worker", str(out)]
        command += ["--sizes", ",".join(args.sizes), "--budget", str(args.budget)]
        command += ["--max-iterations", str(args.max_iterations)]
        command += ["--filter", args.filter] if args.filter else []
        command += ["--cpu-time"] if args.cpu_time else []
        done = subprocess.run(command, env=env, check=False)
        if done.returncode != 0 or not out.is_file():
            raise RuntimeError("the bench ops worker failed")
        return json.loads(out.read_text())


def run_bench_ops(args: argparse.Namespace) -> dict[str, Any]:
    from onemodel.bench import environment

    try:
        import onnxruntime  # noqa: F401
    except ImportError as error:
        raise RuntimeError(f"onemodel bench ops needs onnxruntime: {error}") from error
    rows = run_cases(args, sys.stderr) if args.in_process else _worker_rows(args)
    return {
        "tool": "onemodel bench ops",
        "command": command_line(args),
        "environment": environment(),
        "settings": {
            "sizes": list(args.sizes),
            "filter": args.filter,
            "budget_s": args.budget,
            "max_iterations": args.max_iterations,
            "opset": OPSET,
            "subprocess": not args.in_process,
        },
        "notes": {
            "threads": "onnxruntime intra_op_num_threads=1; onemodel intra_op_threads=1"
            + ("" if args.in_process else " in a worker with the BLAS thread variables at 1"),
            "timing": "two warm-up runs each, then one run of each engine in turn; medians"
            + (" of the thread's CPU time" if args.cpu_time else " of wall time"),
            "ratio": "onemodel median / onnxruntime median (above 1: onemodel is slower)",
        },
        "summary": summary(rows),
        "results": rows,
    }


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Cases above 1.5x and 2x per size, the worst rows, and the median ratio."""
    out: dict[str, Any] = {}
    for size in SIZES:
        ratios = [r["ratio"] for r in rows if r["size"] == size and "ratio" in r]
        if ratios:
            out[size] = {
                "cases": len(ratios),
                "median_ratio": round(statistics.median(ratios), 3),
                "above_1.5": sum(r > 1.5 for r in ratios),
                "above_2": sum(r > 2 for r in ratios),
            }
    ranked = sorted((r for r in rows if "ratio" in r), key=lambda r: r["ratio"], reverse=True)
    out["worst"] = [f"{r['case']} [{r['size']}] {r['ratio']}x" for r in ranked[:10]]
    out["errors"] = [f"{r['case']} [{r['size']}]: {r['error']}" for r in rows if "error" in r]
    return out


def _cells(row: dict[str, Any]) -> list[str]:
    shapes = " ".join("x".join(map(str, s)) for s in row["shapes"])
    if "error" in row:
        return [row["case"], row["size"], shapes, "error", "-", "-", "-"]
    return [
        row["case"],
        row["size"],
        shapes,
        f"{row['onemodel']['median_ms']:.4g}",
        f"{row['onnxruntime']['median_ms']:.4g}",
        f"{row['ratio']:.2f}",
        f"{row['max_abs_diff']:.2g}",
    ]


HEADER = ["case", "size", "input shapes", "onemodel ms", "ort ms", "om/ort", "max diff"]


def text_table(report: dict[str, Any]) -> str:
    lines = [HEADER, *(_cells(r) for r in report["results"])]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    out = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def _summary_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for size in SIZES:
        part = report["summary"].get(size)
        if part:
            lines.append(
                f"- {size}: {part['cases']} cases, median ratio {part['median_ratio']}, "
                f"{part['above_1.5']} above 1.5x, {part['above_2']} above 2x."
            )
    if report["summary"]["worst"]:
        lines.append("- Worst: " + "; ".join(report["summary"]["worst"]) + ".")
    for error in report["summary"]["errors"]:
        lines.append(f"- Error: {error}.")
    return lines


def markdown_section(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        SECTION_START,
        "## Operators (`onemodel bench ops`)",
        "",
        "One node per case, float32 unless named, onemodel against onnxruntime in one run (runs "
        "taken in turn, medians in milliseconds); `om/ort` above 1: onemodel is slower. Sizes: "
        "small ~1k elements, medium ~256k, large ~4M; `layer`: layer shapes of common models.",
        "",
        f"- Command: `{report['command']}`.",
        f"- Machine: {env['processor']} ({env['cpu_count']} CPUs), {env['platform']}; "
        f"Python {env['python']}, NumPy {env['numpy']} ({env['blas']}), "
        f"onnxruntime {env['onnxruntime']}.",
        f"- Threads: {report['notes']['threads']}.",
        *_summary_lines(report),
        "",
        "| " + " | ".join(HEADER) + " |",
        "| " + " | ".join("---" for _ in HEADER) + " |",
        *("| " + " | ".join(_cells(r)) + " |" for r in report["results"]),
        SECTION_END,
    ]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Put the section into `path`, replacing an earlier one, keeping everything else."""
    text = path.read_text() if path.is_file() else "# Benchmarks\n"
    start, end = text.find(SECTION_START), text.find(SECTION_END)
    if start >= 0 and end > start:
        text = text[:start] + section + text[end + len(SECTION_END) :].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def existing_section(path: Path) -> str | None:
    """The bench ops section of `path`, if it has one (so `onemodel bench` can keep it)."""
    if not path.is_file():
        return None
    text = path.read_text()
    start, end = text.find(SECTION_START), text.find(SECTION_END)
    return text[start : end + len(SECTION_END)] + "\n" if start >= 0 and end > start else None


def main_bench_ops(args: argparse.Namespace) -> dict[str, Any]:
    if args.list:
        for case in selected(tuple(args.sizes), args.filter):
            print(case.label)
        return {}
    report = run_bench_ops(args)
    print(text_table(report))
    print("\n".join(_summary_lines(report)))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        write_section(Path(args.markdown), markdown_section(report))
    return report


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="onemodel bench ops", description=__doc__.split("\n\n")[0]
    )
    add_arguments(result)
    return result


def _worker_main(argv: list[str]) -> int:
    worker = parser()
    worker.add_argument("--worker", required=True, metavar="OUT.json")
    args = worker.parse_args(argv)
    Path(args.worker).write_text(json.dumps(run_cases(args, sys.stderr)))
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
