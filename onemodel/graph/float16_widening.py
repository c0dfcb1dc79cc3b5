"""float16 held in float32 between operators, as onnxruntime's CPU provider computes it.

ONNX types a float16 value as float16: every operator's result is rounded to it. onnxruntime's
CPU provider has float16 kernels for a few operators only (CPU_FLOAT16_KERNELS), so it casts
the float16 inputs of every other operator to float32 and its results back, then drops every
float32→float16→float32 Cast pair (its RemoveDuplicateCastTransformer counts no float-to-float
Cast as a loss of precision), the model's own Casts to float16 included. What runs is the
float32 network on the float16 weights' values, rounded to float16 only where a float16 kernel
reads a value and where a graph output is float16. It also moves an isolated float16-kernel
node (every float16 input made, and every float16 output read, by float32 nodes) to float32.
`widen_float16` rewrites an imported model into that: the opt-in
`SessionOptions.float16_intermediates="float32"` (docs/moving-from-onnxruntime.md measures it).

The graph keeps its float16 inputs and outputs: a float16 input is widened by a Cast where it
enters, a float16 output rounded by one where it leaves. Inside, float16 initializers, constants
and declared types become float32 (the widening is exact), Cast and the operators with a dtype
attribute make float32 where they made float16, and the bodies of float32 nodes are widened
whole. A node onnxruntime runs with a float16 kernel keeps its types and reads its float16
inputs through a rounding Cast (a body of such a node keeps its float16 types, where
onnxruntime would rewrite the nodes inside too). Values without a declared type are float16
by their operator's type rule (`_made_half`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from onemodel.graph import ir
from onemodel.graph.operators.base import MICROSOFT
from onemodel.tensors import DType

HALF, SINGLE = int(DType.FLOAT16), int(DType.FLOAT)

# Operators whose attribute of this name is the element type they produce.
_TYPE_ATTRIBUTES = {
    "Cast": "to",
    "EyeLike": "dtype",
    "RandomNormal": "dtype",
    "RandomNormalLike": "dtype",
    "RandomUniform": "dtype",
    "RandomUniformLike": "dtype",
    "Bernoulli": "dtype",
}

# The operators onnxruntime 1.32's CPU provider has a float16 kernel for (from its kernel
# registry, onnxruntime.capi._pybind_state.get_all_opkernel_def()), Cast aside: a float32 value
# read as float16 by one of them is rounded, as the Cast onnxruntime puts before it rounds it.
CPU_FLOAT16_KERNELS = frozenset(
    [("", name) for name in (
        "Attention", "BitCast", "Celu", "Clip", "Compress", "Concat", "ConstantOfShape",
        "DequantizeLinear", "Dropout", "Expand", "Flatten", "Gather", "GatherElements",
        "GatherND", "Identity", "If", "IsInf", "IsNaN", "LayerNormalization", "Loop", "Max",
        "Min", "Mod", "Optional", "OptionalGetElement", "OptionalHasElement", "QuantizeLinear",
        "RMSNormalization", "RandomNormalLike", "RandomUniformLike", "Reshape",
        "ReverseSequence", "RotaryEmbedding", "Round", "Scan", "Scatter", "ScatterElements",
        "ScatterND", "SequenceAt", "SequenceConstruct", "Shape", "Shrink", "Sign",
        "SimplifiedLayerNormalization", "Slice", "Split", "SplitToSequence", "Squeeze",
        "TensorScatter", "Transpose", "Unsqueeze",
    )]
    + [(MICROSOFT, name) for name in (
        "ExpandDims", "GatherBlockQuantized", "GatherND", "GroupQueryAttention", "Inverse",
        "MRotaryEmbedding", "MatMulNBits", "QMoE", "RotaryEmbedding", "SkipLayerNormalization",
        "SkipSimplifiedLayerNormalization", "SparseAttention",
    )]
)  # fmt: skip

# Operators whose outputs are never float (shapes, indices, booleans, quantized integers).
_NOT_FLOAT = frozenset({
    "Shape", "Size", "NonZero", "ArgMax", "ArgMin", "IsNaN", "IsInf", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "QuantizeLinear",
    "DynamicQuantizeLinear", "OptionalHasElement",
})  # fmt: skip

# Operators whose outputs after the first are indices.
_INDEX_OUTPUTS = frozenset({"TopK", "MaxPool", "Unique"})


def widen_float16(model: ir.Model) -> ir.Model:
    """The model with its float16 values held in float32 between operators (see the module)."""
    graph = model.graph
    half = _half_values(graph)
    if not half:
        return model
    declared = {value.name for value in (*graph.inputs, *graph.outputs)}
    inputs = {v.name for v in graph.inputs if _is_half(v.type)}
    outputs = {v.name for v in graph.outputs if _is_half(v.type)} - {v.name for v in graph.inputs}
    inner = {name: _inner_name(name, "float32", declared) for name in inputs | outputs}
    nodes: list[ir.Node] = [
        ir.Node(f"{name}/widen", "Cast", inputs=(name,), outputs=(inner[name],),
                attributes={"to": SINGLE})
        for name in sorted(inputs)
    ]  # fmt: skip
    in_float16 = _float16_nodes(graph, half)
    narrow: dict[str, str] = {}
    for position, node in enumerate(_renamed(graph, inner).nodes):
        node = dataclasses.replace(
            node, outputs=tuple(inner[name] if name in outputs else name for name in node.outputs)
        )
        if position in in_float16:
            nodes.extend(_narrowed(node, half, inner, narrow))
        else:
            nodes.append(_widened_node(node))
    nodes.extend(
        ir.Node(f"{name}/round", "Cast", inputs=(inner[name],), outputs=(name,),
                attributes={"to": HALF})
        for name in sorted(outputs)
    )  # fmt: skip
    defaults = set(graph.input_defaults)
    initializers = {
        name if name in defaults else inner.get(name, name): (
            value if name in defaults else _widened_array(value)
        )
        for name, value in graph.initializers.items()
    }
    value_infos = {k: _widened_info(v) for k, v in graph.value_infos.items() if k not in declared}
    rewritten = dataclasses.replace(
        graph, nodes=tuple(nodes), initializers=initializers, value_infos=value_infos
    )
    return dataclasses.replace(model, graph=rewritten)


def _float16_nodes(graph: ir.Graph, half: set[str]) -> set[int]:
    """The positions of the nodes onnxruntime's CPU provider runs with a float16 kernel: those
    with one and a float16 input (a body's outer reads included), less the ones it moves to
    float32 as isolated (every float16 input made, and every float16 output read, by nodes
    that run in float32; not for a node reading a graph input or initializer in float16, one
    with a body, or one that makes a graph output)."""
    nodes = graph.nodes
    kernel = [
        (ir.canonical_domain(n.domain), n.op_type) in CPU_FLOAT16_KERNELS or n.op_type == "Cast"
        for n in nodes
    ]
    reads_half = [any(name in half for name in _reads(n)) for n in nodes]
    producer = {name: i for i, n in enumerate(nodes) for name in n.outputs if name}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for name in _reads(n):
            readers.setdefault(name, []).append(i)
    outputs = {value.name for value in graph.outputs}

    def in_float32(i: int) -> bool:
        return reads_half[i] and not kernel[i]

    for i, n in enumerate(nodes):
        if not kernel[i] or len(nodes) <= 1 or any(True for _ in n.subgraphs()):
            continue
        sources = [name for name in n.inputs if name in half]
        made = [name for name in n.outputs if name in half and readers.get(name)]
        if (
            sources
            and made
            and not outputs & set(n.outputs)
            and all(name in producer and in_float32(producer[name]) for name in sources)
            and all(in_float32(j) for name in made for j in readers[name])
        ):
            kernel[i] = False
    return {i for i, n in enumerate(nodes) if kernel[i] and reads_half[i] and n.op_type != "Cast"}


def _narrowed(
    node: ir.Node, half: set[str], inner: dict[str, str], narrow: dict[str, str]
) -> list[ir.Node]:
    """The node as onnxruntime runs it in float16: its float16 inputs rounded (from the
    float32 values around it, once per value: `narrow` remembers the rounded names), its
    float16 outputs widened again; its bodies as they are."""
    original = {value: key for key, value in inner.items()}
    before = []
    reads = _reads(node)
    for name in reads:
        if original.get(name, name) in half and name not in narrow:
            narrow[name] = f"{name}:float16"
            before.append(
                ir.Node(f"{name}/round", "Cast", inputs=(name,), outputs=(narrow[name],),
                        attributes={"to": HALF})
            )  # fmt: skip
    produced = {
        name: f"{name}:float16"
        for name in node.outputs
        if name and original.get(name, name) in half
    }
    narrow.update(produced)  # a float16 kernel's result is read as it is by the next one
    after = [
        ir.Node(f"{name}/widen", "Cast", inputs=(rounded,), outputs=(name,),
                attributes={"to": SINGLE})
        for name, rounded in produced.items()
    ]  # fmt: skip
    rounded_reads = {name: narrow[name] for name in reads if name in narrow}
    body = _renamed(ir.Graph("", (node,), (), ()), rounded_reads).nodes[0]
    body = dataclasses.replace(
        body, outputs=tuple(produced.get(name, name) for name in node.outputs)
    )
    return [*before, body, *after]


def _reads(node: ir.Node) -> list[str]:
    """The values a node reads: its inputs, then its bodies' outer reads, each once."""
    names = [name for name in node.inputs if name]
    for body in node.subgraphs():
        names.extend(body.outer_names)
    return list(dict.fromkeys(names))


def _half_values(graph: ir.Graph) -> set[str]:
    """The names of the graph's float16 values: as declared (inputs, outputs, value_info,
    initializers), else as their node makes them (a Cast's or a dtype attribute's type, no
    float for shapes, indices and comparisons, otherwise its inputs' float16)."""
    declared = {value.name: value.type for value in graph.value_infos.values()}
    declared.update({value.name: value.type for value in (*graph.inputs, *graph.outputs)})
    half = {name for name, kind in declared.items() if _is_half(kind)}
    half |= {name for name, array in graph.initializers.items() if array.dtype == np.float16}
    for node in graph.nodes:
        made = _made_half(node, half)
        for position, name in enumerate(node.outputs):
            if name and name not in declared and made(position):
                half.add(name)
    return half


def _made_half(node: ir.Node, half: set[str]) -> Any:
    """position → whether the node's output there is float16, by the operator's type rule."""
    typed = _TYPE_ATTRIBUTES.get(node.op_type) if node.domain == ir.DEFAULT_DOMAIN else None
    if typed is not None:
        code = node.attributes.get(typed)
        return lambda position: code == HALF
    if node.op_type in ("Constant", "ConstantOfShape"):
        values = [v for v in node.attributes.values() if isinstance(v, np.ndarray)]
        return lambda position: bool(values) and values[0].dtype == np.float16
    if node.op_type == "CastLike":
        return lambda position: node.inputs[1] in half
    if node.op_type in _NOT_FLOAT:
        return lambda position: False
    reads = any(name in half for name in _reads(node))
    return lambda position: reads and (position == 0 or node.op_type not in _INDEX_OUTPUTS)


def _inner_name(name: str, kind: str, taken: set[str]) -> str:
    """The name a float16 graph input or output has inside, in float32."""
    inner = f"{name}:{kind}"
    while inner in taken:
        inner += "_"
    return inner


def _renamed(graph: ir.Graph, names: dict[str, str]) -> ir.Graph:
    """The graph reading `names[name]` wherever it read `name`, in nested bodies too (ONNX
    forbids a body to shadow an outer name, so every such reference is to the outer value)."""
    nodes = tuple(
        dataclasses.replace(
            node,
            inputs=tuple(names.get(name, name) for name in node.inputs),
            attributes={
                key: _renamed(value, names) if isinstance(value, ir.Graph) else
                [_renamed(v, names) if isinstance(v, ir.Graph) else v for v in value]
                if isinstance(value, list) else value
                for key, value in node.attributes.items()
            },
        )
        for node in graph.nodes
    )  # fmt: skip
    outer = tuple(names.get(name, name) for name in graph.outer_names)
    return dataclasses.replace(graph, nodes=nodes, outer_names=outer)


def _widened_graph(graph: ir.Graph) -> ir.Graph:
    """Every float16 type, initializer, constant and produced dtype of the graph made float32."""
    return dataclasses.replace(
        graph,
        nodes=tuple(_widened_node(node) for node in graph.nodes),
        inputs=tuple(_widened_info(value) for value in graph.inputs),
        outputs=tuple(_widened_info(value) for value in graph.outputs),
        initializers={k: _widened_array(v) for k, v in graph.initializers.items()},
        value_infos={k: _widened_info(v) for k, v in graph.value_infos.items()},
    )


def _widened_node(node: ir.Node) -> ir.Node:
    typed = _TYPE_ATTRIBUTES.get(node.op_type) if node.domain == ir.DEFAULT_DOMAIN else None
    attributes = {
        name: SINGLE if name == typed and value == HALF else _widened_attribute(value)
        for name, value in node.attributes.items()
    }
    return dataclasses.replace(node, attributes=attributes)


def _widened_attribute(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return _widened_array(value)
    if isinstance(value, ir.Graph):
        return _widened_graph(value)
    if isinstance(value, ir.ValueType):
        return _widened_type(value)
    if isinstance(value, list):
        return [_widened_attribute(item) for item in value]
    return value


def _widened_array(array: np.ndarray) -> np.ndarray:
    if array.dtype != np.float16:
        return array
    wide = array.astype(np.float32)
    wide.flags.writeable = False
    return wide


def _widened_info(value: ir.ValueInfo) -> ir.ValueInfo:
    return dataclasses.replace(value, type=_widened_type(value.type))


def _widened_type(value: ir.ValueType) -> ir.ValueType:
    element = None if value.element is None else _widened_type(value.element)
    code = SINGLE if value.elem_type == HALF else value.elem_type
    return dataclasses.replace(value, elem_type=code, element=element)


def _is_half(value: ir.ValueType) -> bool:
    return value.kind == "tensor" and value.elem_type == HALF
