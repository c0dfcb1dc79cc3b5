"""The runtime-overhead figures of issue 16, onemodel and onnxruntime side by side (1 thread).

    python tools/overhead_bench.py cold        # process start to first MLP result, fresh processes
    python tools/overhead_bench.py run         # Session.run's fixed cost and the cost per step
    python tools/overhead_bench.py body        # entering an If body, a Loop and a Scan iteration
    python tools/overhead_bench.py vad         # the streaming bench model, 1,000 carried runs
    python tools/overhead_bench.py models      # the small test models mlp, cnn, transformer
    python tools/overhead_bench.py big NAME    # add_chain_100k / add_tree_100k: create + first run

Times are per-thread CPU time (`time.thread_time`) except `cold` and `big` (wall clock, and
`cold` also the processes' CPU time); each figure is a median (`cold`, `vad`, `models`, `big`)
or the least of many batches (`run`, `body`: the least disturbed by other load), runs taken in
turn.
`cold` runs its processes without PYTHONDONTWRITEBYTECODE, which would make every start
compile every module again.
"""

from __future__ import annotations

import functools
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from onnx import TensorProto, helper

import onemodel
from onemodel.backends.fp_errors import run_scope
from onemodel.graph.run_state import RunState

MLP = "tests/models/mlp.onnx"
F = TensorProto.FLOAT
ONE_THREAD = onemodel.SessionOptions(intra_op_threads=1)


def _onnxruntime(model: bytes | str) -> object:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _least_us(calls: dict[str, Callable[[], object]], batch: int, batches: int) -> dict[str, float]:
    """Per call, the least thread CPU time of `batches` batches, the calls taken in turn."""
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(batches):
        for name, call in calls.items():
            started = time.thread_time()
            for _ in range(batch):
                call()
            best[name] = min(best[name], (time.thread_time() - started) / batch * 1e6)
    return best


def cold(repeats: int | str = 9) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    feeds = "{'input': np.zeros((8, 32), np.float32)}"
    commands = {
        "onemodel": "import onemodel, numpy as np; "
        f"onemodel.Session.load('{MLP}').run(None, {feeds})",
        "onnxruntime": "import onnxruntime as o, numpy as np; "
        f"o.InferenceSession('{MLP}').run(None, {feeds})",
        "python": "pass",
        "import numpy": "import numpy",
        "import onnx": "import onnx",
    }
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(int(repeats)):
        for name, code in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], env=env, check=True)
            wall[name].append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    for name in commands:
        print(
            f"{name:12s} wall {statistics.median(wall[name]):.3f} s (least {min(wall[name]):.3f})"
            f"  CPU {statistics.median(cpu[name]):.3f} s"
        )


def _chain(op: str, count: int) -> bytes:
    """`count` chained `op`s on a [1, 4] input, each reading a constant (never fused at level 0)."""
    nodes = [helper.make_node(op, [f"v{k}", "w"], [f"v{k + 1}"]) for k in range(count)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("v0", F, [1, 4])],
        [helper.make_tensor_value_info(f"v{count}", F, [1, 4])],
        [helper.make_tensor("w", F, [1], [0.5])],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def run_costs() -> None:
    """Fixed cost: a one-Add model's run less the Add's own call; per step: what each of 20
    more Adds adds, less the Add's call (level 0, so that the chain is not fused). The Add's
    call is the one a run state makes: its bound call (Operator.bind) where it has one."""
    unfused = onemodel.SessionOptions(intra_op_threads=1, optimization_level=0)
    one = onemodel.Session.load(_chain("Add", 1), unfused)
    many = onemodel.Session.load(_chain("Add", 21), unfused)
    feeds = {"v0": np.ones((1, 4), np.float32)}
    one.run(None, feeds)
    (plan,) = one.plans()
    state = RunState(plan)
    call, w = state.steps[0].call, plan.constants[plan.steps[0].inputs[1]]
    out = np.empty((1, 4), np.float32)
    context = state.ctx
    x = feeds["v0"]
    ort_one, ort_many = _onnxruntime(_chain("Add", 1)), _onnxruntime(_chain("Add", 21))
    least = _least_us(
        {
            "run 1": lambda: one.run(None, feeds),
            "run 21": lambda: many.run(None, feeds),
            "ort 1": lambda: ort_one.run(None, feeds),
            "ort 21": lambda: ort_many.run(None, feeds),
        },
        batch=500,
        batches=31,
    )
    with run_scope():  # as in a run: NumPy's error state set once
        least |= _least_us({"Add call": functools.partial(call, context, (x, w), [out])}, 500, 31)
    per_step = (least["run 21"] - least["run 1"]) / 20
    print({name: round(value, 2) for name, value in least.items()})
    print(
        f"fixed cost per run {least['run 1'] - least['Add call']:.2f} us; per step beyond its "
        f"kernel {per_step - least['Add call']:.2f} us (onnxruntime per step "
        f"{(least['ort 21'] - least['ort 1']) / 20:.2f} us)"
    )


def _if_model(with_if: bool) -> bytes:
    def branch(name: str, op: str) -> object:
        node = helper.make_node(op, ["x", "w"], [f"{name}_y"])
        out = helper.make_tensor_value_info(f"{name}_y", F, None)
        return helper.make_graph([node], name, [], [out], [helper.make_tensor("w", F, [1], [0.5])])

    inputs = [
        helper.make_tensor_value_info("x", F, [1, 4]),
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
    ]
    if with_if:
        nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch("t", "Add"),
                                  else_branch=branch("e", "Sub"))]  # fmt: skip
        weights = []
    else:
        nodes, weights = (
            [helper.make_node("Add", ["x", "w"], ["y"])],
            [helper.make_tensor("w", F, [1], [0.5])],
        )
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", F, [1, 4])], weights
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _loop_model() -> bytes:
    body = helper.make_graph(
        [helper.make_node("Identity", ["ci"], ["co"]),
         helper.make_node("Add", ["si", "w"], ["so"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("ci", TensorProto.BOOL, []),
         helper.make_tensor_value_info("si", F, None)],
        [helper.make_tensor_value_info("co", TensorProto.BOOL, []),
         helper.make_tensor_value_info("so", F, None)],
        [helper.make_tensor("w", F, [1], [0.5])],
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)], "g",
        [helper.make_tensor_value_info("n", TensorProto.INT64, []),
         helper.make_tensor_value_info("x", F, [1, 4])],
        [helper.make_tensor_value_info("y", F, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _scan_model() -> bytes:
    """Scan carrying s = s + x_t over the rows of x, with the scan output y_t = s * x_t."""
    body = helper.make_graph(
        [helper.make_node("Add", ["si", "xi"], ["so"]),
         helper.make_node("Mul", ["si", "xi"], ["yo"])],
        "body",
        [helper.make_tensor_value_info("si", F, [1, 4]),
         helper.make_tensor_value_info("xi", F, [1, 4])],
        [helper.make_tensor_value_info("so", F, [1, 4]),
         helper.make_tensor_value_info("yo", F, [1, 4])],
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Scan", ["s", "x"], ["s_last", "y"], body=body, num_scan_inputs=1)],
        "g",
        [helper.make_tensor_value_info("s", F, [1, 4]),
         helper.make_tensor_value_info("x", F, ["t", 1, 4])],
        [helper.make_tensor_value_info("s_last", F, [1, 4]),
         helper.make_tensor_value_info("y", F, ["t", 1, 4])],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _body_steps(session: onemodel.Session, values: list[np.ndarray]) -> Callable[[], None]:
    """100 runs of the steps of the body of the session's Loop or Scan: its plan's steps on
    a table already holding `values` (its inputs by position), as a run does them."""
    operator = session.plans()[0].steps[0].node.operator
    executor = getattr(operator, "loop_body", None) or operator.scan_body
    state = executor.body_entry(values)[1].take()
    table = state.base_table.copy()
    for value_id, value in zip(executor.graph.input_ids, values, strict=True):
        table[value_id] = value
    steps, no_targets = state._run_plain, {}

    def hundred() -> None:
        with run_scope():  # as in a run: NumPy's error state set once
            for _ in range(100):
                steps(table, no_targets)

    return hundred


def body() -> None:
    """If: the run of an If over a one-Add branch less the run of the Add alone. Loop, Scan:
    what each of 100 more iterations costs, and that less what the body's steps cost (taken
    in turn with the runs, as they are subtracted)."""
    x = np.ones((1, 4), np.float32)
    models = {"if": _if_model(True), "add": _if_model(False), "loop": _loop_model(),
              "scan": _scan_model()}  # fmt: skip
    ours = {name: onemodel.Session.load(model, ONE_THREAD) for name, model in models.items()}
    theirs = {name: _onnxruntime(model) for name, model in models.items()}
    groups = {  # each group's calls taken in turn, as their differences are
        "if": {"If": ("if", {"x": x, "c": np.array(True)}),
               "Add": ("add", {"x": x, "c": np.array(True)})},
        "loop": {"Loop 1": ("loop", {"n": np.array(1, np.int64), "x": x}),
                 "Loop 101": ("loop", {"n": np.array(101, np.int64), "x": x})},
        "scan": {"Scan 1": ("scan", {"s": x, "x": np.ones((1, 1, 4), np.float32)}),
                 "Scan 101": ("scan", {"s": x, "x": np.ones((101, 1, 4), np.float32)})},
    }  # fmt: skip
    body_inputs = {"loop": [np.array(0, np.int64), np.array(True), x], "scan": [x, x]}
    least: dict[str, float] = {}
    for model, group in groups.items():
        calls: dict[str, Callable[[], object]] = {}
        for name, (session, feed) in group.items():
            calls[name] = partial(ours[session].run, None, feed)
            calls[f"ort {name}"] = partial(theirs[session].run, None, feed)
            calls[name]()
        if model in body_inputs:
            calls[f"{model} steps x100"] = _body_steps(ours[model], body_inputs[model])
        least |= _least_us(calls, batch=50, batches=41)
    print({name: round(value, 2) for name, value in least.items()})
    print(
        f"If entry beyond its branch's step {least['If'] - least['Add']:.2f} us "
        f"(onnxruntime {least['ort If'] - least['ort Add']:.2f} us)"
    )
    for op, body_ops in (("Loop", "Identity + Add"), ("Scan", "Add + Mul")):
        mine = (least[f"{op} 101"] - least[f"{op} 1"]) / 100
        ort = (least[f"ort {op} 101"] - least[f"ort {op} 1"]) / 100
        steps = least[f"{op.lower()} steps x100"] / 100
        print(
            f"{op} iteration ({body_ops}) {mine:.2f} us, its steps {steps:.2f} us, "
            f"beyond them {mine - steps:.2f} us (onnxruntime iteration {ort:.2f} us)"
        )


def vad(rounds: int | str = 7, runs: int = 1000) -> None:
    from onemodel.bench_graphs import GENERATED, ensure, vad_stream_inputs

    path = str(ensure("vad_stream", GENERATED))
    sessions = {
        "onemodel": onemodel.Session.load(path, ONE_THREAD),
        "onnxruntime": _onnxruntime(path),
    }
    per_run: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(int(rounds)):
        for name, session in sessions.items():
            feeds = vad_stream_inputs()
            started = time.thread_time()
            for _ in range(runs):
                _, feeds["state"] = session.run(None, feeds)
            per_run[name].append((time.thread_time() - started) / runs * 1e3)
    mine, theirs = (statistics.median(per_run[n]) for n in ("onemodel", "onnxruntime"))
    print(f"vad_stream per run: onemodel {mine:.4f} ms, onnxruntime {theirs:.4f} ms, "
          f"ratio {mine / theirs:.2f}")  # fmt: skip


def models(*names: str, rounds: int = 9, runs: int = 200) -> None:
    """Per run of each bench-set test model (tests/models, its inputs file), taken in turn."""
    for name in names or ("mlp", "cnn", "transformer"):
        path = f"tests/models/{name}.onnx"
        stored = np.load(f"tests/models/{name}.inputs.npz")
        feeds = {k: v for k, v in stored.items() if not k.startswith("output:")}
        sessions = {
            "onemodel": onemodel.Session.load(path, ONE_THREAD),
            "onnxruntime": _onnxruntime(path),
        }
        per_run: dict[str, list[float]] = {engine: [] for engine in sessions}
        for _ in range(rounds):
            for engine, session in sessions.items():
                session.run(None, feeds)
                started = time.thread_time()
                for _ in range(runs):
                    session.run(None, feeds)
                per_run[engine].append((time.thread_time() - started) / runs * 1e3)
        mine, theirs = (statistics.median(per_run[n]) for n in sessions)
        print(f"{name} per run: onemodel {mine:.4f} ms, onnxruntime {theirs:.4f} ms, "
              f"ratio {mine / theirs:.2f}")  # fmt: skip


def big(name: str, repeats: int | str = 2) -> None:
    from onemodel.bench_graphs import GENERATED, ensure

    path = str(ensure(name, GENERATED))
    feeds = {("x" if "tree" in name else "v0"): np.ones((1, 4), np.float32)}
    makers = {
        "onemodel": lambda: onemodel.Session.load(path, ONE_THREAD),
        "onnxruntime": lambda: _onnxruntime(path),
    }
    totals: dict[str, list[float]] = {n: [] for n in makers}
    for _ in range(int(repeats)):
        for engine, make in makers.items():
            started = time.perf_counter()
            make().run(None, feeds)
            totals[engine].append(time.perf_counter() - started)
    mine, theirs = (statistics.median(totals[n]) for n in makers)
    print(f"{name}: create + first run onemodel {mine:.2f} s, onnxruntime {theirs:.2f} s, "
          f"ratio {mine / theirs:.2f}")  # fmt: skip


if __name__ == "__main__":
    command, *arguments = sys.argv[1:] or ["run"]
    commands = {"cold": cold, "run": run_costs, "body": body, "vad": vad, "models": models}
    (commands | {"big": big})[command](*arguments)
