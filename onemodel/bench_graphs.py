"""Generated benchmark models for runtime overhead (issue 16): built with `onnx.helper`, written
on first use to `benchmarks/generated/` (not committed: the large graphs are tens of MB).

* `vad_stream`: a streaming voice-activity detector in the shape of Silero VAD: per 32 ms chunk
  (512 samples at 16 kHz) an If over the scalar sample-rate input picks a branch of about fifty
  nodes (a MatMul spectrum, a four-layer encoder, an LSTM cell written with Gemm, a decoder)
  that reads and writes the recurrent state. The benchmark feeds the state a run returns into
  the next run, as a streaming caller does.
* `add_chain_100k` / `add_tree_100k`: 100,000 Add nodes in one chain (each reading the
  previous sum and one shared constant) or in a balanced binary tree over one input; they
  measure session creation, which must grow linearly (or n log n) with the node count.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GENERATED = Path(__file__).resolve().parent.parent / "benchmarks" / "generated"
VAD_HIDDEN = 64
VAD_CHUNK = 512
# Where the streaming benchmark feeds a run's output back in as the next run's input.
VAD_CARRY = (("state_out", "state"),)


def _vad_branch(samples: int, tag: str, rng: np.random.Generator):
    """One sample rate's network: `samples` samples of the chunk in, (probability, state) out."""
    hidden, bins = VAD_HIDDEN, samples // 2 + 1
    weights, nodes = [], []

    def weight(name: str, shape: tuple[int, ...], scale: float = 0.1) -> str:
        full = f"{tag}_{name}"
        array = (rng.standard_normal(shape) * scale).astype(np.float32)
        weights.append(numpy_helper.from_array(array, full))
        return full

    def constant(name: str, values: list, dtype=np.int64) -> str:
        full = f"{tag}_{name}"
        weights.append(numpy_helper.from_array(np.array(values, dtype=dtype), full))
        return full

    def node(op: str, inputs: list[str], outputs: int | list[str] = 1, **attributes) -> list[str]:
        index = len(nodes)
        names = outputs if isinstance(outputs, list) else [f"{tag}_{op.lower()}{index}_{k}"
                                                            for k in range(outputs)]  # fmt: skip
        nodes.append(helper.make_node(op, inputs, names, name=f"{tag}_{op}_{index}", **attributes))
        return names

    (x,) = node("Slice", ["input", constant("start", [0]), constant("end", [samples]),
                          constant("axis", [1])])  # fmt: skip
    (spectrum,) = node("MatMul", [x, weight("dft", (samples, 2 * bins), 1 / samples**0.5)])
    real, imag = node("Split", [spectrum, constant("halves", [bins, bins])], 2, axis=1)
    (power,) = node("Add", [node("Mul", [real, real])[0], node("Mul", [imag, imag])[0]])
    (eps,) = node("Constant", [], value=numpy_helper.from_array(np.float32(1e-6), "eps"))
    (features,) = node("Log", [node("Add", [node("Sqrt", [power])[0], eps])[0]])
    (mean,) = node("ReduceMean", [features], axes=[1], keepdims=1)
    (h,) = node("Sub", [features, mean])
    width = bins
    for layer in range(4):
        (h,) = node("MatMul", [h, weight(f"enc{layer}", (width, hidden))])
        (h,) = node("Relu", [node("Add", [h, weight(f"enc{layer}_b", (hidden,))])[0]])
        width = hidden
    (h_prev,) = node("Gather", ["state", constant("zero", 0)], axis=0)
    (c_prev,) = node("Gather", ["state", constant("one", 1)], axis=0)
    (gates_x,) = node("Gemm", [h, weight("wx", (4 * hidden, hidden)), weight("bx", (4 * hidden,))],
                      transB=1)  # fmt: skip
    (gates_h,) = node("Gemm", [h_prev, weight("wh", (4 * hidden, hidden))], transB=1)
    quarters = constant("quarters", [hidden] * 4)
    i, f, g, o = node("Split", [node("Add", [gates_x, gates_h])[0], quarters], 4, axis=1)
    (i,), (f,), (o,) = node("Sigmoid", [i]), node("Sigmoid", [f]), node("Sigmoid", [o])
    (g,) = node("Tanh", [g])
    (c,) = node("Add", [node("Mul", [f, c_prev])[0], node("Mul", [i, g])[0]])
    (h_new,) = node("Mul", [o, node("Tanh", [c])[0]])
    (logit,) = node("MatMul", [node("Relu", [h_new])[0], weight("dec", (hidden, 1))])
    node("Sigmoid", [node("Add", [logit, weight("dec_b", (1,))])[0]], [f"{tag}_prob"])
    axis0 = constant("axis0", [0])
    (h_state,) = node("Unsqueeze", [h_new, axis0])
    (c_state,) = node("Unsqueeze", [c, axis0])
    node("Concat", [h_state, c_state], [f"{tag}_state"], axis=0)
    outputs = [
        helper.make_tensor_value_info(f"{tag}_prob", TensorProto.FLOAT, [1, 1]),
        helper.make_tensor_value_info(f"{tag}_state", TensorProto.FLOAT, [2, 1, hidden]),
    ]
    return helper.make_graph(nodes, f"vad_{tag}", [], outputs, weights)


def vad_stream_model():
    """The streaming detector: If(sr == 16000) over a 16 kHz and an 8 kHz branch."""
    rng = np.random.default_rng(16)
    then_branch, else_branch = _vad_branch(VAD_CHUNK, "k16", rng), _vad_branch(256, "k8", rng)
    nodes = [
        helper.make_node("Equal", ["sr", "rate16k"], ["is16k"], name="is_16k"),
        helper.make_node(
            "If",
            ["is16k"],
            ["prob", "state_out"],
            name="by_rate",
            then_branch=then_branch,
            else_branch=else_branch,
        ),
    ]
    inputs = [
        helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, VAD_CHUNK]),
        helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, VAD_HIDDEN]),
        helper.make_tensor_value_info("sr", TensorProto.INT64, []),
    ]
    outputs = [
        helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1]),
        helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [2, 1, VAD_HIDDEN]),
    ]
    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate16k")
    graph = helper.make_graph(nodes, "vad_stream", inputs, outputs, [rate])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def vad_stream_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(32)
    return {
        "input": (rng.standard_normal((1, VAD_CHUNK)) * 0.1).astype(np.float32),
        "state": np.zeros((2, 1, VAD_HIDDEN), np.float32),
        "sr": np.array(16000, np.int64),
    }


def add_chain_model(nodes: int):
    """`nodes` Adds in a chain, each adding one shared constant to the previous sum."""
    adds = [
        helper.make_node("Add", [f"v{k}", "one"], [f"v{k + 1}"], name=f"add{k}")
        for k in range(nodes)
    ]
    one = numpy_helper.from_array(np.ones((1, 4), np.float32), "one")
    graph = helper.make_graph(
        adds,
        "add_chain",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(f"v{nodes}", TensorProto.FLOAT, [1, 4])],
        [one],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def add_tree_model(nodes: int):
    """`nodes` Adds in a balanced binary tree: level by level, each adds two of the sums
    before it, starting from the input read twice by every first-level node."""
    frontier = ["x"] * (nodes + 1)
    adds, head = [], 0
    while len(frontier) - head > 1:
        left, right = frontier[head], frontier[head + 1]
        head += 2
        name = f"t{len(adds)}"
        adds.append(helper.make_node("Add", [left, right], [name], name=f"add{len(adds)}"))
        frontier.append(name)
    graph = helper.make_graph(
        adds,
        "add_tree",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(frontier[head], TensorProto.FLOAT, [1, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


BUILDERS = {
    "vad_stream": (vad_stream_model, vad_stream_inputs),
    "add_chain_100k": (lambda: add_chain_model(100_000), None),
    "add_tree_100k": (lambda: add_tree_model(100_000), None),
}


def ensure(name: str, folder: Path = GENERATED) -> Path:
    """The generated model's file (and its inputs file, when it has one), built if missing."""
    path = folder / f"{name}.onnx"
    if path.is_file():
        return path
    build, inputs = BUILDERS[name]
    folder.mkdir(parents=True, exist_ok=True)
    if inputs is not None:
        np.savez(folder / f"{name}.inputs.npz", **inputs())
    partial = path.with_suffix(".partial")
    onnx.save(build(), partial)
    partial.replace(path)  # a model file is there complete or not at all
    return path
