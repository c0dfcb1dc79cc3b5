"""CompiledGraph: operators resolved, weights copied out, dead nodes dropped (seed 000 §1–2).

Everything here is independent of input shapes, so it is done once per session. Values are
numbered so that plans and runs index lists instead of hashing names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onemodel.errors import ErrorKind, SessionError
from onemodel.graph import ir, onnx_arity
from onemodel.graph.common_subexpressions import without_common_subexpressions
from onemodel.graph.gradient import expand_gradients, has_gradients
from onemodel.graph.operators import optable
from onemodel.graph.operators.base import INTERNAL_DOMAIN, NodeInfo, OpDef, Operator
from onemodel.graph.operators.widen import WidenOp
from onemodel.graph.passes.base import OptimizationLevel, PassContext
from onemodel.graph.passes.pass_graph import PassGraph, PassNode
from onemodel.graph.values import ABSENT
from onemodel.graph.weights import WIDEN_FROM, WeightStorage, reduced
from onemodel.tensors import TensorShapeError
from onemodel.tensors.shapes import check_shape

# Compiles a node's subgraph with its parent graph into something that runs it (the executor
# layer above passes it in, so that this module need not import it).
BodyCompiler = Callable[["CompiledGraph", ir.Graph], Any]
_LAST_ONNX_TYPE = 28  # FLOAT6E3M2, the highest TensorProto.DataType onnx 1.23 defines


@dataclass(frozen=True, slots=True)
class ValueMeta:
    """A graph input or output as callers see it: name, declared type and dims, kind."""

    name: str
    elem_type: int | None  # of the tensors inside, for sequences and optionals
    dims: tuple[ir.Dim, ...] | None
    kind: str = "tensor"  # tensor, sequence, optional or unknown
    contents: str | None = None  # what an optional holds: tensor or sequence


@dataclass(frozen=True, slots=True)
class CompiledNode:
    operator: Operator
    info: NodeInfo
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


class CompiledGraph:
    """The shape-independent form of a model that plans are made from."""

    def __init__(
        self,
        model: ir.Model,
        kernels: Any,
        *,
        exact: bool = False,
        checked: bool = False,
        guard: Any = None,
        level: OptimizationLevel = OptimizationLevel.NONE,
        weight_storage: WeightStorage = WeightStorage.ORIGINAL,
        bodies: BodyCompiler | None = None,
    ) -> None:
        """`bodies` compiles the subgraphs of If, Loop and Scan nodes (without it, a model
        with such nodes is refused by the operator)."""
        if has_gradients(model.graph):
            model = expand_gradients(model)
        graph = model.graph
        self.kernels = kernels
        self.exact = exact
        self.checked = checked
        self.opsets = model.opsets
        self._guard = guard  # checked between operators while compiling (cancellation)
        self.bodies = bodies
        self.level = level  # bodies (If, Loop, Scan) are optimised as their graph is
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        nodes = graph.nodes
        if level > OptimizationLevel.NONE:
            nodes = without_common_subexpressions(nodes, graph, _purity(model))
        live_nodes = _live_nodes(graph, nodes)
        self.nodes = self._resolve(model, live_nodes)
        self._check_exact()
        defaults = set(graph.input_defaults)
        self.inputs = [_meta(info) for info in graph.inputs]
        self.input_ids = [self.value_id(info.name) for info in graph.inputs]
        self.outputs = [_meta(info) for info in graph.outputs]
        for meta in (*self.inputs, *self.outputs):
            if meta.elem_type is not None and not 0 <= meta.elem_type <= _LAST_ONNX_TYPE:
                raise SessionError(
                    ErrorKind.INVALID_MODEL,
                    f"declares element type {meta.elem_type}, which ONNX does not define",
                    value=meta.name,
                )
            if meta.dims is not None and all(isinstance(d, int) for d in meta.dims):
                try:
                    check_shape(meta.dims)
                except TensorShapeError as error:
                    raise SessionError(
                        ErrorKind.INVALID_MODEL, f"declares {error}", value=meta.name
                    ) from None
        self.output_ids = [self.value_id(info.name) for info in graph.outputs]
        constants, default_arrays = {}, {}
        for name, array in graph.initializers.items():
            value_id = self._ids.get(name)
            if value_id is not None:
                (default_arrays if name in defaults else constants)[value_id] = array
        self.passes_ran: list[str] = []
        self.nodes_before_passes = len(self.nodes)
        if level > OptimizationLevel.NONE:
            constants = self._run_passes(graph, constants, level)
        if weight_storage is not WeightStorage.ORIGINAL:
            constants = self._store_reduced(constants, weight_storage)
        used = {i for node in self.nodes for i in node.inputs} | set(self.output_ids)
        self.weights: dict[int, Any] = {}
        self.defaults: dict[int, Any] = {}
        for source, target in ((constants, self.weights), (default_arrays, self.defaults)):
            for value_id, array in source.items():
                if value_id in used:  # a weight no live node reads is not kept
                    target[value_id] = _weight(kernels.xp, array)

    def value_id(self, name: str) -> int:
        if not name:
            return ABSENT
        value_id = self._ids.get(name)
        if value_id is None:
            value_id = self._ids[name] = len(self.names)
            self.names.append(name)
        return value_id

    def _resolve(self, model: ir.Model, nodes: Sequence[ir.Node]) -> list[CompiledNode]:
        """Find every node's operator; all unsupported ones are reported together."""
        compiled, missing = [], []
        for node, opset, definition in _definitions(model, nodes):
            if self._guard is not None:
                self._guard.check(node.name)
            if definition is None:
                label = _label(node, opset)
                if label not in missing:
                    missing.append(label)
                continue
            _check_arity(node, opset)
            captured = tuple(
                dict.fromkeys(name for body in node.subgraphs() for name in body.outer_names)
            )
            has_bodies = self.bodies is not None and next(node.subgraphs(), None) is not None
            info = NodeInfo.of(node, opset, captured, self._compile_body if has_bodies else None)
            compiled.append(
                CompiledNode(
                    _construct(definition, info),
                    info,
                    tuple(self.value_id(name) for name in (*node.inputs, *captured)),
                    tuple(self.value_id(name) for name in node.outputs),
                )
            )
        if missing:
            raise SessionError(
                ErrorKind.UNSUPPORTED_OPERATOR,
                "the model uses operators onemodel does not implement: " + ", ".join(missing),
                operators=missing,
            )
        return compiled

    def _run_passes(
        self, graph: ir.Graph, constants: dict[int, Any], level: OptimizationLevel
    ) -> dict[int, Any]:
        """Edit the resolved nodes with the graph passes; returns the constants afterwards
        (folding adds some, fusion and elimination leave others unread)."""
        from onemodel.graph.passes.table import run_passes  # folding builds on the planner

        elem_types, ranks = {}, {}
        for info in (*graph.inputs, *graph.outputs, *graph.value_infos.values()):
            value_id = self._ids.get(info.name)
            if value_id is None or info.type.kind != "tensor":
                continue
            if info.type.elem_type:
                elem_types[value_id] = info.type.elem_type
            if info.type.dims is not None:
                ranks[value_id] = len(info.type.dims)
        pass_graph = PassGraph(
            self.names,
            (PassNode(n.operator, n.info, list(n.inputs), list(n.outputs)) for n in self.nodes),
            dict(constants),
            self.input_ids,
            self.output_ids,
            elem_types,
            dict(self.opsets),
            ranks,
        )
        check = None if self._guard is None else self._guard.check
        self.passes_ran = run_passes(
            pass_graph, level, PassContext(self.kernels, self.exact, check)
        )
        self.nodes = [
            CompiledNode(n.operator, n.info, tuple(n.inputs), tuple(n.outputs))
            for n in pass_graph.nodes
        ]
        return pass_graph.constants

    def _store_reduced(self, constants: dict[int, Any], storage: WeightStorage) -> dict[int, Any]:
        """Keep large float32 weights as 16-bit bits, each widened by a Widen step placed
        right before its first reader (docs/graph-passes.md, "Weight storage")."""
        first_reader: dict[int, int] = {}
        for index, node in enumerate(self.nodes):
            for value_id in node.inputs:
                first_reader.setdefault(value_id, index)
        widen_before: dict[int, list[CompiledNode]] = {}
        constants = dict(constants)
        for value_id, array in list(constants.items()):
            bits = reduced(np.asarray(array), storage)
            if bits is None or value_id not in first_reader or value_id in self.output_ids:
                continue
            name = self.names[value_id]
            bits_id = self.value_id(f"{name}/{storage.value}")
            del constants[value_id]
            constants[bits_id] = bits
            attributes = {"from": WIDEN_FROM[storage]}
            node = ir.Node(f"widen {name}", "Widen", INTERNAL_DOMAIN, (self.names[bits_id],),
                           (name,), attributes)  # fmt: skip
            info = NodeInfo.of(node, 1)
            widen = CompiledNode(WidenOp(info), info, (bits_id,), (value_id,))
            widen_before.setdefault(first_reader[value_id], []).append(widen)
        nodes = []
        for index, node in enumerate(self.nodes):
            nodes.extend(widen_before.get(index, ()))
            nodes.append(node)
        self.nodes = nodes
        return constants

    @property
    def weight_bytes(self) -> int:
        """Bytes the session's weights occupy (after passes and weight storage)."""
        return sum(int(array.nbytes) for array in self.weights.values())

    def _compile_body(self, body: ir.Graph) -> Any:
        assert self.bodies is not None  # only handed to nodes when there is a compiler
        return self.bodies(self, body)

    def _check_exact(self) -> None:
        if not self.exact:
            return
        lacking = sorted({n.info.op_type for n in self.nodes if not n.operator.supports_exact})
        if lacking:
            raise SessionError(
                ErrorKind.EXACT_MODE_UNAVAILABLE,
                "exact mode has no bit-exact kernel for: " + ", ".join(lacking),
                operators=lacking,
            )


def _weight(xp: Any, array: Any) -> Any:
    """A weight on the backend, read-only. The importer's arrays are read-only already and
    own their data, so NumPy shares them with the IR (sessions of one model share weights,
    and the IR can still be dropped); values the passes made become read-only too, so that a
    kernel writing into a weight fails instead of changing later runs."""
    device = xp.asarray(array)
    if isinstance(device, np.ndarray) and device.flags.writeable:
        device.flags.writeable = False
    return device


def _construct(definition: OpDef, info: NodeInfo) -> Operator:
    """The operator of a node; attributes it cannot read (a list where a number belongs, ...)
    make the model invalid, naming the node, whatever the operator's own checks missed."""
    try:
        return definition.factory(info)
    except SessionError:
        raise
    except Exception as error:
        raise SessionError(
            ErrorKind.INVALID_MODEL,
            f"{info.op_type} has attributes it cannot use: {type(error).__name__}: {error}",
            node=info.name,
        ) from error


def _meta(info: ir.ValueInfo) -> ValueMeta:
    """Sequences and optionals are described by the tensor type inside them."""
    value_type = info.type
    contents = None
    if value_type.kind == "optional" and value_type.element is not None:
        contents = value_type.element.kind
    inner = value_type
    while inner.kind in ("sequence", "optional") and inner.element is not None:
        inner = inner.element
    return ValueMeta(info.name, inner.elem_type, inner.dims, value_type.kind, contents)


def _purity(model: ir.Model) -> Callable[[ir.Node], bool]:
    """Whether a node's results are a function of its inputs and attributes alone: its
    operator class is foldable and not data-dependent (unknown operators are not)."""

    known: dict[tuple[str, str], bool] = {}

    def pure(node: ir.Node) -> bool:
        key = (node.domain, node.op_type)
        answer = known.get(key)
        if answer is None:
            opset = model.opset_for(node.domain)
            found = None if opset is None else optable.resolve(node.domain, node.op_type, opset)
            factory = None if found is None else found.factory
            answer = known[key] = (
                isinstance(factory, type)
                and factory.foldable
                and not factory.outputs_data_dependent
            )
        return answer

    return pure


def _live_nodes(graph: ir.Graph, nodes: Sequence[ir.Node]) -> list[ir.Node]:
    """The `nodes` of `graph` with a path to a graph output, in order (seed 000 §3, step 3)."""
    needed = {info.name for info in graph.outputs}
    live = []
    for node in reversed(nodes):
        if any(name in needed for name in node.outputs if name):
            live.append(node)
            needed.update(name for name in node.inputs if name)
            needed.update(
                graph_input for sub in node.subgraphs() for graph_input in sub.outer_names
            )
    live.reverse()
    return live


def _definitions(
    model: ir.Model, nodes: Sequence[ir.Node]
) -> Iterator[tuple[ir.Node, int, OpDef | None]]:
    """Each node with the opset of its domain and its table entry (None when unsupported)."""
    for node in nodes:
        opset = model.opset_for(node.domain)
        if opset is None:
            raise SessionError(
                ErrorKind.INVALID_MODEL,
                f"{node.op_type} uses the domain '{node.domain}', which the model does not import",
                node=node.name,
            )
        yield node, opset, optable.resolve(node.domain, node.op_type, opset)


def _check_arity(node: ir.Node, opset: int) -> None:
    """More inputs or outputs than ONNX's schema allows make the model invalid now, rather
    than leave a value no kernel writes. Operators onnx has no schema for are not checked."""
    limits = _arity_limits(node.op_type, opset, node.domain)
    if limits is None:
        return
    for kind, count, most in (
        ("inputs", len(node.inputs), limits[0]),
        ("outputs", len(node.outputs), limits[1]),
    ):
        if count > most:
            raise SessionError(
                ErrorKind.INVALID_MODEL,
                f"{node.op_type} (opset {opset}) has {count} {kind}; ONNX defines at most {most}",
                node=node.name,
            )


@functools.cache
def _arity_limits(op_type: str, opset: int, domain: str) -> tuple[int, int] | None:
    """ONNX's most inputs and outputs for an operator, looked up once per type and opset (a
    large graph repeats a few types many times)."""
    return onnx_arity.arity_limits(domain, op_type, opset)


def _label(node: ir.Node, opset: int) -> str:
    return f"{node.domain + '.' if node.domain else ''}{node.op_type} (opset {opset})"


def unsupported_operators(model: ir.Model) -> list[str]:
    """`Type (opset N)` for every operator of the model's main graph that has no definition."""
    labels = [_label(n, o) for n, o, d in _definitions(model, model.graph.nodes) if d is None]
    return list(dict.fromkeys(labels))
