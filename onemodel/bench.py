"""`onemodel bench`: onemodel against onnxruntime and onnx's reference evaluator.

For every model and thread count, in one process and one run, each engine gets:

* `create_ms`: median time to create a session from the model file (`create_repeats` times);
* `p10_ms`/`median_ms`/`p90_ms` (and `mean_ms`, `min_ms`): nearest-rank latency of
  `iterations` runs after `warmup` runs, on the same inputs;
* memory: `peak_traced_mb` (onemodel and the reference evaluator only) is tracemalloc's peak
  over one extra run, i.e. the Python and NumPy buffers allocated during a run (NumPy reports
  its data buffers to tracemalloc; the session's own slab, allocated before, is not counted);
  `peak_rss_delta_mb` (every engine) is the process's high-water resident set size during the
  timed runs minus the resident size before them, read from /proc/self/status (VmHWM after
  resetting it through /proc/self/clear_refs); it sees onnxruntime's C++ allocations, which
  tracemalloc cannot, but also counts pages first touched (e.g. the arena), not freed memory.
  Where /proc is not there, it is `ru_maxrss` growth from `resource.getrusage`, which sees only
  growth beyond the process's earlier peak.

The reference evaluator is slow: once its warm-up and runs have used `reference_budget`
seconds for a model, it stops (after at least one timed run) and reports how many ran.

Ratios: `onemodel/onnxruntime` (median over median; above 1, onemodel is slower) and
`reference/onemodel` (above 1, onemodel is faster than the reference evaluator).

Threads: NumPy cannot change its BLAS thread count once loaded, so every thread count runs in
its own worker process (`python -m onemodel.bench --worker ...`) started with
OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS and friends set to it; onnxruntime gets
`SessionOptions.intra_op_num_threads` = the thread count (and one inter-op thread). Thread
count 0 leaves every library at its default.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ENGINES = ("onemodel", "onnxruntime", "reference")
THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
THREADS_NOTE = (
    "each thread count ran in its own worker process started with OPENBLAS_NUM_THREADS, "
    "OMP_NUM_THREADS and MKL_NUM_THREADS set to it (NumPy's BLAS threads cannot change once "
    "NumPy is loaded); onnxruntime got intra_op_num_threads = the thread count"
)
MEMORY_NOTE = (
    "peak_traced_mb: tracemalloc peak over one run (Python and NumPy buffers allocated during "
    "the run); peak_rss_delta_mb: high-water resident set size during the timed runs minus the "
    "resident size before them (/proc/self/status VmHWM after /proc/self/clear_refs); the "
    "warm-up runs are inside that window, so onemodel's figure includes the plan and slab its "
    "first run makes, while onnxruntime allocates most of its memory when the session is "
    "created, outside it"
)
DEFAULT_REFERENCE_BUDGET = 20.0


# -- memory --------------------------------------------------------------------------------------


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class RssPeak:
    """High-water resident set size growth over a block of code, in MB."""

    def __enter__(self) -> RssPeak:
        self.method = "vmhwm"
        try:
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")  # resets VmHWM to the current VmRSS
        except OSError:
            self.method = "ru_maxrss"
        self.before_kb = _status_kb("VmRSS") if self.method == "vmhwm" else None
        if self.before_kb is None:
            self.method = "ru_maxrss"
            self.before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.mb: float | None = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.method == "vmhwm":
            after = _status_kb("VmHWM")
        else:
            after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if after is not None:
            self.mb = round(max(0, after - self.before_kb) / 1024, 3)


def traced_peak_mb(run: Callable[[], object]) -> float:
    """tracemalloc's peak, in MB, over one call of `run` (allocations made during it)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return round(max(0, peak - base) / 2**20, 3)


# -- engines -------------------------------------------------------------------------------------


def _median_ms(seconds: list[float]) -> float:
    return round(statistics.median(seconds) * 1e3, 3)


def _timed_runs(
    run: Callable[[], object], iterations: int, warmup: int, budget: float | None
) -> tuple[list[float], bool]:
    """Per-run seconds; with a budget, stop once warm-up and runs used it (one run at least)."""
    started = time.perf_counter()
    capped = False
    for _ in range(warmup):
        if budget is not None and time.perf_counter() - started > budget:
            capped = True
            break
        run()
    times: list[float] = []
    for _ in range(iterations):
        if times and budget is not None and time.perf_counter() - started > budget:
            capped = True
            break
        begin = time.perf_counter()
        run()
        times.append(time.perf_counter() - begin)
    return times, capped


def _measure(
    create: Callable[[], Any],
    runner: Callable[[Any], Callable[[], object]],
    *,
    iterations: int,
    warmup: int,
    create_repeats: int,
    budget: float | None = None,
    traced: bool = False,
) -> tuple[dict[str, Any], Any]:
    from onemodel.runner import latency_summary

    create_times, session = [], None
    for _ in range(max(1, create_repeats)):
        begin = time.perf_counter()
        session = create()
        create_times.append(time.perf_counter() - begin)
    run = runner(session)
    result: dict[str, Any] = {"create_ms": _median_ms(create_times)}
    with RssPeak() as rss:
        times, capped = _timed_runs(run, iterations, warmup, budget)
    result["iterations"] = len(times)
    if budget is not None:
        result["capped"] = capped
    result.update(latency_summary(times))
    result["peak_rss_delta_mb"] = rss.mb
    result["rss_method"] = rss.method
    if traced:
        result["peak_traced_mb"] = traced_peak_mb(run)
    return result, run


def _carried(carry: Sequence[tuple[str, str]], output_names: Sequence[str]) -> list:
    """(output position, input name) for each state a streaming model feeds back."""
    return [(list(output_names).index(output), name) for output, name in carry]


def _onemodel(model, feeds, threads, iterations, warmup, repeats):
    from onemodel.session import Session, SessionOptions

    options = SessionOptions(intra_op_threads=threads)
    sessions: list[Any] = []

    def create():
        sessions.append(Session.load(str(model.path), options))
        return sessions[-1]

    def runner(session: Any) -> Any:
        state = dict(feeds)  # a streaming model's state goes from each run into the next
        carried = _carried(model.carry, [meta.name for meta in session.outputs])

        def run() -> Any:
            outputs = session.run(None, state)
            session.kernels.synchronize()  # a GPU run is over when its kernels are
            for position, name in carried:
                state[name] = outputs[position]
            return outputs

        return run

    result, _ = _measure(
        create,
        runner,
        iterations=iterations,
        warmup=warmup,
        create_repeats=repeats,
        traced=True,
    )
    result["backend"] = sessions[-1].backend
    memory = sessions[-1].kernels.memory
    return result, [memory.to_host(o) for o in sessions[-1].run(None, feeds)]


def _onnxruntime(model, feeds, threads, iterations, warmup, repeats):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: light models warn about unused initializers
    if threads > 0:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1

    def create():
        return onnxruntime.InferenceSession(
            str(model.path), options, providers=["CPUExecutionProvider"]
        )

    def runner(session: Any) -> Any:
        state = dict(feeds)
        carried = _carried(model.carry, [output.name for output in session.get_outputs()])

        def run() -> Any:
            outputs = session.run(None, state)
            for position, name in carried:
                state[name] = outputs[position]
            return outputs

        return run

    sessions: list[Any] = []
    result, _ = _measure(
        lambda: sessions.append(create()) or sessions[-1],
        runner,
        iterations=iterations,
        warmup=warmup,
        create_repeats=repeats,
    )
    result["version"] = onnxruntime.__version__
    return result, sessions[-1].run(None, feeds)


def _reference(model, feeds, iterations, warmup, repeats, budget):
    from onnx.reference import ReferenceEvaluator

    result, _ = _measure(
        lambda: ReferenceEvaluator(str(model.path)),
        lambda s: lambda: s.run(None, feeds),
        iterations=iterations,
        warmup=warmup,
        create_repeats=repeats,
        budget=budget,
    )
    result["budget_s"] = budget
    return result


def _max_abs_diff(ours: Sequence[Any], theirs: Sequence[Any]) -> float | None:
    import numpy as np

    worst = 0.0
    for a, b in zip(ours, theirs, strict=False):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or not np.issubdtype(a.dtype, np.number):
            continue
        if a.size:
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            worst = max(worst, float(np.nanmax(diff)) if not np.all(np.isnan(diff)) else 0.0)
    return round(worst, 8)


def model_feeds(model) -> tuple[dict[str, Any], str]:
    """Inputs from `<model>.inputs.npz` when present, else generated from the declared types."""
    from onemodel.graph.compiled import ValueMeta
    from onemodel.graph.importer import load_model
    from onemodel.runner import generated_inputs, read_inputs

    if model.inputs_path is not None:
        return read_inputs(model.inputs_path)[0], "file"
    graph = load_model(str(model.path)).graph
    initialized = set(graph.input_defaults)
    metas = [
        ValueMeta(name=i.name, elem_type=i.type.elem_type, dims=i.type.dims)
        for i in graph.inputs
        if i.name not in initialized
    ]
    return generated_inputs(metas), "generated"


def bench_model(
    model,
    *,
    threads: int,
    vs: Sequence[str],
    iterations: int,
    warmup: int,
    create_repeats: int = 3,
    reference_budget: float = DEFAULT_REFERENCE_BUDGET,
) -> dict[str, Any]:
    """One result row: every engine on one model at one thread count, in this process."""
    model.ensure()
    if model.iterations is not None:
        iterations = min(iterations, model.iterations)
    if model.warmup is not None:
        warmup = min(warmup, model.warmup)
    if model.runs is not None:  # a streaming model: this many runs, each fed the last state
        iterations = model.runs
    if model.create_repeats is not None:
        create_repeats = model.create_repeats
    feeds, source = model_feeds(model)
    row: dict[str, Any] = {
        "model": model.name,
        "path": str(model.path),
        "description": model.description,
        "threads": threads,
        "inputs": source,
        "carried": [list(pair) for pair in model.carry],
        "engines": {},
        "ratios": {},
    }
    engines = row["engines"]
    ours = None
    try:
        engines["onemodel"], ours = _onemodel(
            model, feeds, threads, iterations, warmup, create_repeats
        )
    except Exception as error:  # a model onemodel cannot run is a result too
        engines["onemodel"] = {"error": f"{type(error).__name__}: {error}"}
    if "onnxruntime" in vs:
        try:
            import onnxruntime  # noqa: F401
        except ImportError as error:
            engines["onnxruntime"] = {"available": False, "error": f"not importable: {error}"}
        else:
            try:
                engines["onnxruntime"], theirs = _onnxruntime(
                    model, feeds, threads, iterations, warmup, create_repeats
                )
                if ours is not None:
                    row["max_abs_diff_vs_onnxruntime"] = _max_abs_diff(ours, theirs)
            except Exception as error:
                engines["onnxruntime"] = {"error": f"{type(error).__name__}: {error}"}
    if "reference" in vs:
        try:
            engines["reference"] = _reference(model, feeds, iterations, warmup, 1, reference_budget)
        except Exception as error:
            engines["reference"] = {"error": f"{type(error).__name__}: {error}"}
    mine = engines["onemodel"].get("median_ms")
    ort = engines.get("onnxruntime", {}).get("median_ms")
    ref = engines.get("reference", {}).get("median_ms")
    if mine and ort:
        row["ratios"]["onemodel/onnxruntime"] = round(mine / ort, 3)
    if mine and ref:
        row["ratios"]["reference/onemodel"] = round(ref / mine, 3)
    return row


# -- the command ---------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import numpy
    import onnx

    try:
        import onnxruntime

        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "numpy": numpy.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": ort_version,
        "blas": _blas_kernels(),
    }


def _blas_kernels() -> str:
    """NumPy's BLAS and the kernels it runs (OpenBLAS picks them once, from OPENBLAS_CORETYPE
    or its own detection): MatMul, Gemm and im2col Conv figures move with them."""
    from threadpoolctl import threadpool_info

    found = [
        f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} kernels"
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    ]
    chosen = os.environ.get("OPENBLAS_CORETYPE")
    forced = f" (OPENBLAS_CORETYPE={chosen})" if chosen else ""
    return (", ".join(found) or "no BLAS found") + forced


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def run_worker(
    models, *, threads: int, vs, iterations, warmup, reference_budget, progress=None
) -> list[dict[str, Any]]:
    rows = []
    for model in models:
        if progress is not None:
            print(f"bench: {model.name} threads={threads}", file=progress, flush=True)
        rows.append(
            bench_model(
                model,
                threads=threads,
                vs=vs,
                iterations=iterations,
                warmup=warmup,
                reference_budget=reference_budget,
            )
        )
    return rows


def worker_environment(threads: int) -> dict[str, str]:
    """A bench worker's environment: the BLAS thread variables at `threads` (when > 0), and
    the folder of the onemodel running this first on its import path. `python -m` would put
    the current directory first, so a checkout there would be measured instead;
    PYTHONSAFEPATH (Python 3.11+) keeps it out."""
    env = dict(os.environ)
    if threads > 0:
        env.update({name: str(threads) for name in THREAD_VARIABLES})
    home = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (home, env.get("PYTHONPATH")) if p)
    env["PYTHONSAFEPATH"] = "1"
    return env


def _worker_rows(args, specs: list[str], threads: int) -> list[dict[str, Any]]:
    """Run one thread count in a fresh worker process with the BLAS thread variables set."""
    env = worker_environment(threads)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "rows.json"
        command = [sys.executable, "-m", "onemodel.bench", "--worker", str(out), *specs]
        command += ["--threads", str(threads), "--vs", ",".join(args.vs)]
        command += ["--iterations", str(args.iterations), "--warmup", str(args.warmup)]
        command += ["--reference-budget", str(args.reference_budget)]
        done = subprocess.run(command, env=env, check=False)
        if done.returncode != 0 or not out.is_file():
            raise RuntimeError(f"the bench worker for {threads} thread(s) failed")
        return json.loads(out.read_text())


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    from onemodel.bench_models import missing_line, resolve

    models = resolve(args.models)  # raises ValueError early for a bad name
    missing = missing_line() if "all" in args.models else None
    if missing:
        print(missing, file=sys.stderr)
    specs = [str(m.path) if m.name not in _set_names() else m.name for m in models]
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        if args.in_process:
            rows += run_worker(
                models,
                threads=threads,
                vs=args.vs,
                iterations=args.iterations,
                warmup=args.warmup,
                reference_budget=args.reference_budget,
                progress=sys.stderr,
            )
        else:
            rows += _worker_rows(args, specs, threads)
    return {
        "tool": "onemodel bench",
        "command": command_line(args),
        "environment": environment(),
        "settings": {
            "vs": list(args.vs),
            "threads": list(args.threads),
            "iterations": args.iterations,
            "warmup": args.warmup,
            "reference_budget_s": args.reference_budget,
            "subprocess_per_thread_count": not args.in_process,
        },
        "notes": {
            "threads": THREADS_NOTE if not args.in_process else "in-process: threads not set",
            "memory": MEMORY_NOTE,
            "ratios": "onemodel/onnxruntime and reference/onemodel: median over median",
            "missing": missing,
        },
        "results": rows,
    }


def command_line(args: argparse.Namespace) -> str:
    """The `onemodel bench` command that repeats this run."""
    words = ["onemodel", "bench", *args.models, "--vs", ",".join(args.vs)]
    words += ["--threads", ",".join(map(str, args.threads))]
    words += ["--iterations", str(args.iterations), "--warmup", str(args.warmup)]
    words += ["--reference-budget", f"{args.reference_budget:g}"]
    words += ["--in-process"] if args.in_process else []
    return " ".join(words)


def _set_names() -> set[str]:
    from onemodel.bench_models import bench_set

    return {m.name for m in bench_set()}


def _cell(engine: dict[str, Any] | None, key: str = "median_ms") -> str:
    if not engine:
        return "-"
    if "error" in engine:
        return "n/a" if engine.get("available") is False else "error"
    value = engine.get(key)
    return "-" if value is None else _number(value)


def _number(value: float) -> str:
    """Four significant digits, no exponent below a million."""
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


def table_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = [
        "model",
        "thr",
        "create ms",
        "onemodel ms (p10-p90)",
        "ort ms",
        "ref ms (runs)",
        "om/ort",
        "ref/om",
        "om traced MB",
        "om rss MB",
        "ort rss MB",
    ]
    lines = []
    for row in report["results"]:
        mine = row["engines"].get("onemodel", {})
        ort = row["engines"].get("onnxruntime")
        ref = row["engines"].get("reference")
        spread = (
            f"{_number(mine['median_ms'])} ({_number(mine['p10_ms'])}-{_number(mine['p90_ms'])})"
            if "median_ms" in mine
            else _cell(mine)
        )
        reference = _cell(ref)
        if ref and "iterations" in ref:
            reference += f" ({ref['iterations']}{'*' if ref.get('capped') else ''})"
        lines.append(
            [
                row["model"],
                str(row["threads"]),
                _cell(mine, "create_ms"),
                spread,
                _cell(ort),
                reference,
                str(row["ratios"].get("onemodel/onnxruntime", "-")),
                str(row["ratios"].get("reference/onemodel", "-")),
                _cell(mine, "peak_traced_mb"),
                _cell(mine, "peak_rss_delta_mb"),
                _cell(ort, "peak_rss_delta_mb"),
            ]
        )
    return header, lines


def text_table(report: dict[str, Any]) -> str:
    header, lines = table_rows(report)
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]
    out = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True))
        for r in [header, *lines]
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def write_markdown(report: dict[str, Any], path: Path) -> Path | None:
    """The Markdown page; with matplotlib importable, a bar chart of the ratios beside it."""
    header, lines = table_rows(report)
    env, settings = report["environment"], report["settings"]
    chart = _ratio_chart(report, path.with_suffix(".png"))
    text = [
        "# Benchmarks",
        "",
        "Written by `onemodel bench`; medians in milliseconds (nearest rank, p10-p90 in "
        "brackets). `om/ort` is onemodel's median over onnxruntime's (above 1: onemodel is "
        "slower); `ref/om` is the reference evaluator's over onemodel's (above 1: onemodel is "
        "faster). A `*` after the reference run count: its time budget "
        f"({settings['reference_budget_s']:g} s per model) stopped it early.",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
        *("| " + " | ".join(line) + " |" for line in lines),
        "",
    ]
    if chart is not None:
        text += [f"![ratios]({chart.name})", ""]
    text += [
        "## How it was measured",
        "",
        f"- Command: `{report['command']}`.",
        f"- Machine: {env['processor']} ({env['cpu_count']} CPUs), {env['platform']}; "
        f"Python {env['python']}, NumPy {env['numpy']} ({env['blas']}), onnx {env['onnx']}, "
        f"onnxruntime {env['onnxruntime']}.",
        f"- Settings: iterations {settings['iterations']}, warm-up {settings['warmup']} "
        "(some benchmark-set models cap these, see `onemodel/bench_models.py`), session "
        "creation the median of 3 (1 for the reference evaluator).",
        f"- Threads: {report['notes']['threads']}.",
        f"- Memory: {report['notes']['memory']}.",
        "",
    ]
    if report["notes"].get("missing"):
        text[-1:-1] = [f"- Left out: {report['notes']['missing']}."]
    from onemodel.bench_ops import existing_section

    operators = existing_section(path)  # `onemodel bench ops` owns its own section
    path.write_text("\n".join(text) + ("\n" + operators if operators else ""))
    return chart


def _ratio_chart(report: dict[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    labels, ort, ref = [], [], []
    for row in report["results"]:
        labels.append(f"{row['model']} t{row['threads']}")
        ort.append(row["ratios"].get("onemodel/onnxruntime", 0.0))
        ref.append(row["ratios"].get("reference/onemodel", 0.0))
    figure, axis = plt.subplots(figsize=(max(6, len(labels) * 0.6), 4))
    positions = range(len(labels))
    axis.bar([p - 0.2 for p in positions], ort, 0.4, label="onemodel / onnxruntime")
    axis.bar([p + 0.2 for p in positions], ref, 0.4, label="reference / onemodel")
    axis.axhline(1.0, color="gray", linewidth=0.8)
    axis.set_yscale("log")
    axis.set_xticks(list(positions), labels, rotation=45, ha="right")
    axis.set_ylabel("median latency ratio")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    def listed(text: str) -> list[str]:
        return [part for part in text.split(",") if part]

    def engines(text: str) -> list[str]:
        names = listed(text)
        bad = [n for n in names if n not in ENGINES[1:]]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown engine(s) {bad}; known: onnxruntime,reference"
            )
        return names

    parser.add_argument("models", nargs="+", metavar="MODEL", help="path, set name, or 'all'")
    parser.add_argument("--vs", type=engines, default=["onnxruntime"], help="onnxruntime,reference")
    parser.add_argument("--threads", type=lambda t: [int(n) for n in listed(t)], default=[1])
    parser.add_argument("--iterations", type=int, default=20, metavar="N")
    parser.add_argument("--warmup", type=int, default=3, metavar="N")
    parser.add_argument(
        "--reference-budget",
        type=float,
        default=DEFAULT_REFERENCE_BUDGET,
        metavar="S",
        help="seconds per model for the reference evaluator",
    )
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--markdown", metavar="FILE")
    parser.add_argument(
        "--in-process", action="store_true", help="no worker processes (threads not set)"
    )


def main_bench(args: argparse.Namespace) -> dict[str, Any]:
    """The `onemodel bench` command: run, print the table, write the files."""
    report = run_bench(args)
    print(text_table(report))
    print(f"({report['notes']['threads']})")
    if report["notes"]["missing"]:
        print(report["notes"]["missing"])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        write_markdown(report, Path(args.markdown))
    return report


def _worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m onemodel.bench")
    parser.add_argument("--worker", required=True, metavar="OUT.json")
    add_arguments(parser)
    args = parser.parse_args(argv)
    from onemodel.bench_models import resolve

    (threads,) = args.threads
    rows = run_worker(
        resolve(args.models),
        threads=threads,
        vs=args.vs,
        iterations=args.iterations,
        warmup=args.warmup,
        reference_budget=args.reference_budget,
        progress=sys.stderr,
    )
    Path(args.worker).write_text(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
