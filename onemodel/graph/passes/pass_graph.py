"""PassGraph: the mutable, shape-free graph that graph passes edit (seed 000 §6).

It holds the resolved nodes of a compiled graph, the constants (weights, as host NumPy arrays)
and the graph's inputs and outputs. Passes edit it only through its methods, which keep the
producer and reader indexes current; removed nodes are dropped and the rest put back in
dependency order once a pass ends (`settle`), so a pass may add a replacement anywhere.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onemodel.errors import ErrorKind, SessionError
from onemodel.graph import ir
from onemodel.graph.operators import optable
from onemodel.graph.operators.base import NodeInfo, Operator
from onemodel.tensors import onnx_code_for_numpy

ABSENT = -1  # the value id of an absent optional input or output

# Operators whose output 0 has the rank of their input 0.
_KEEPS_RANK = frozenset({
    "Identity", "Dropout", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Neg", "Abs", "Sqrt", "Exp",
    "Log", "Erf", "Softmax", "Gelu", "Cast", "Concat", "MaxPool", "AveragePool", "LRN",
    "BatchNormalization", "LayerNormalization", "InstanceNormalization",
})  # fmt: skip

# Operators whose output 0 has the element type of their input 0.
_KEEPS_TYPE = frozenset({
    "Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Relu",
    "LeakyRelu", "Sigmoid", "Tanh", "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Sqrt", "Exp",
    "Log", "Erf", "Softmax", "Gelu", "MatMul", "Gemm", "Conv", "MaxPool", "AveragePool",
    "BatchNormalization", "LayerNormalization", "Concat", "Slice", "Gather", "Expand", "Tile",
})  # fmt: skip


@dataclass(eq=False, slots=True)
class PassNode:
    """One node while passes run: its operator, identity and value ids.

    `order` places it among the others when the graph is put back in dependency order; a
    replacement takes the order of the last node it replaces."""

    operator: Operator
    info: NodeInfo
    inputs: list[int]
    outputs: list[int]
    order: float = 0.0
    removed: bool = field(default=False, repr=False)

    @property
    def op(self) -> str:
        """The operator type with its domain when it is not the default one."""
        domain = ir.canonical_domain(self.info.domain)
        return f"{domain}.{self.info.op_type}" if domain else self.info.op_type


class PassGraph:
    """Nodes in dependency order, value names and ids, constants, graph inputs and outputs."""

    def __init__(
        self,
        names: list[str],
        nodes: Iterable[PassNode],
        constants: dict[int, np.ndarray],
        input_ids: Sequence[int],
        output_ids: Sequence[int],
        elem_types: dict[int, int],
        opsets: dict[str, int],
        ranks: dict[int, int] | None = None,
    ) -> None:
        self.names = names
        self.ranks = ranks or {}
        self.constants = constants
        self.input_ids = tuple(input_ids)
        self.output_ids = tuple(output_ids)
        self.elem_types = elem_types
        self.opsets = opsets
        self._outputs = set(output_ids)
        self._producers: dict[int, PassNode] = {}
        # Readers per value as an insertion-ordered set, so that removing one is O(1) even
        # for a constant that thousands of nodes read.
        self._readers: dict[int, dict[PassNode, None]] = {}
        self._counter = itertools.count()
        self.nodes: list[PassNode] = []
        self.edited = True  # since the last `settle`; a pass that changed nothing costs no settle
        for order, node in enumerate(nodes):
            node.order = float(order)
            self.add(node)

    # -- reading ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[PassNode]:
        """The live nodes in dependency order (nodes a pass removes are skipped)."""
        return (node for node in list(self.nodes) if not node.removed)

    def producer(self, value_id: int) -> PassNode | None:
        return self._producers.get(value_id)

    def readers(self, value_id: int) -> list[PassNode]:
        return list(self._readers.get(value_id, ()))

    def is_output(self, value_id: int) -> bool:
        return value_id in self._outputs

    def only_reader(self, value_id: int) -> PassNode | None:
        """The one node reading a value that is not a graph output, else None: a pass may then
        fold the value away."""
        readers = self._readers.get(value_id, ())
        if len(readers) != 1 or self.is_output(value_id):
            return None
        (reader,) = readers
        return reader if reader.inputs.count(value_id) == 1 else None

    def constant(self, value_id: int) -> np.ndarray | None:
        return None if value_id == ABSENT else self.constants.get(value_id)

    def elem_type(self, value_id: int) -> int | None:
        """The value's ONNX element type where declared, evident (constants, Cast) or carried
        over from input 0 by an operator that keeps it; else None."""
        return self._carried(
            value_id, self.elem_types, _KEEPS_TYPE,
            lambda constant: onnx_code_for_numpy(constant.dtype),
            lambda node: node.info.attributes.get("to") if node.op == "Cast" else None,
        )  # fmt: skip

    def rank(self, value_id: int) -> int | None:
        """The value's rank where declared or evident (constants, a Conv's constant weight),
        or carried over from input 0 by an operator that keeps it; else None."""
        return self._carried(
            value_id, self.ranks, _KEEPS_RANK, lambda constant: constant.ndim, self._conv_rank
        )

    def _carried(
        self,
        value_id: int,
        declared: dict[int, int],
        keeps: frozenset[str],
        of_constant: Callable[[np.ndarray], int | None],
        of_producer: Callable[[PassNode], int | None],
    ) -> int | None:
        """A property of a value, walking back through producers that keep it unchanged."""
        while True:
            constant = self.constant(value_id)
            if constant is not None:
                return of_constant(constant)
            known = declared.get(value_id)
            producer = self.producer(value_id)
            if known is not None or producer is None or not producer.inputs:
                return known
            evident = of_producer(producer)
            if evident is not None:
                return evident
            if producer.op not in keeps or producer.outputs[0] != value_id:
                return None
            value_id = producer.inputs[0]

    def _conv_rank(self, node: PassNode) -> int | None:
        weight = (
            self.constant(node.inputs[1]) if node.op == "Conv" and len(node.inputs) > 1 else None
        )
        return None if weight is None else weight.ndim

    # -- editing ------------------------------------------------------------------------------

    def add_value(self, hint: str) -> int:
        """A new value id, named after `hint` so that messages stay readable."""
        self.names.append(f"{hint}/pass{next(self._counter)}")
        return len(self.names) - 1

    def add_constant(self, hint: str, array: np.ndarray) -> int:
        value_id = self.add_value(hint)
        self.constants[value_id] = array
        return value_id

    def add(self, node: PassNode) -> None:
        self.edited = True
        self.nodes.append(node)
        for value_id in node.outputs:
            if value_id != ABSENT:
                self._producers[value_id] = node
        for value_id in node.inputs:
            if value_id != ABSENT:
                self._readers.setdefault(value_id, {})[node] = None

    def remove(self, node: PassNode) -> None:
        if node.removed:
            return
        self.edited = True
        node.removed = True
        for value_id in node.outputs:
            if self._producers.get(value_id) is node:
                del self._producers[value_id]
        for value_id in node.inputs:
            if value_id != ABSENT:
                self._readers[value_id].pop(node, None)

    def replace(self, old: Sequence[PassNode], new: Sequence[PassNode]) -> None:
        """Put `new` where the last of `old` was, in the given order."""
        last = max(node.order for node in old)
        for node in old:
            self.remove(node)
        for index, node in enumerate(new):
            node.order = last + (index + 1) / (len(new) + 1) * 1e-3
            self.add(node)

    def redirect(self, old_id: int, new_id: int) -> None:
        """Every reader of `old_id` reads `new_id` instead."""
        self.edited = True
        for reader in list(self.readers(old_id)):
            reader.inputs = [new_id if v == old_id else v for v in reader.inputs]
            self._readers.setdefault(new_id, {})[reader] = None
        self._readers.pop(old_id, None)

    def rename_output(self, node: PassNode, old_id: int, new_id: int) -> None:
        """`node` produces `new_id` where it produced `old_id` (which nothing reads any more)."""
        self.edited = True
        node.outputs = [new_id if v == old_id else v for v in node.outputs]
        self._producers.pop(old_id, None)
        self._producers[new_id] = node

    def settle(self) -> None:
        """Drop removed nodes and nodes nothing reads, then restore dependency order."""
        if not self.edited:
            return
        unread = [node for node in self.nodes if not node.removed]
        while unread:  # a removed node's producers may be unread now: a worklist, not sweeps
            node = unread.pop()
            if node.removed or any(self._read(v) for v in node.outputs):
                continue
            self.remove(node)
            unread.extend(p for v in node.inputs if (p := self._producers.get(v)) is not None)
        live = [node for node in self.nodes if not node.removed]
        self.nodes = _in_dependency_order(live, self._producers)
        for order, node in enumerate(self.nodes):
            node.order = float(order)
        self.edited = False

    def _read(self, value_id: int) -> bool:
        if value_id == ABSENT:
            return False
        return self.is_output(value_id) or bool(self._readers.get(value_id))

    def make_node(
        self,
        like: NodeInfo,
        op_type: str,
        inputs: Sequence[int],
        outputs: Sequence[int],
        attributes: dict[str, Any] | None = None,
        *,
        domain: str = "",
        opset: int | None = None,
    ) -> PassNode:
        """A node of a table operator that stands for `like` (same name, so errors still name
        a node of the model). `opset` defaults to the model's opset for the domain."""
        names = [self.names[v] if v != ABSENT else "" for v in inputs]
        out_names = [self.names[v] if v != ABSENT else "" for v in outputs]
        node = ir.Node(
            like.name, op_type, domain, tuple(names), tuple(out_names), dict(attributes or {})
        )
        version = opset if opset is not None else self.opsets.get(ir.canonical_domain(domain))
        definition = None if version is None else optable.resolve(domain, op_type, version)
        if definition is None:
            raise SessionError(
                ErrorKind.INVALID_MODEL,
                f"a graph pass made {op_type} (opset {version}), which has no operator",
                node=like.name,
            )
        info = NodeInfo.of(node, version)
        return PassNode(definition.factory(info), info, list(inputs), list(outputs))


def _in_order(nodes: list[PassNode], producers: dict[int, PassNode]) -> bool:
    """Whether every node's inputs are made by nodes before it (or outside `nodes`)."""
    seen: set[int] = set()
    members = {id(node) for node in nodes}
    for node in nodes:
        for value_id in node.inputs:
            producer = producers.get(value_id)
            inside = producer is not None and producer is not node and id(producer) in members
            if inside and id(producer) not in seen:
                return False
        seen.add(id(node))
    return True


def _in_dependency_order(nodes: list[PassNode], producers: dict[int, PassNode]) -> list[PassNode]:
    """A topological order that keeps the nodes' `order` wherever dependencies allow."""
    by_order = sorted(nodes, key=lambda node: node.order)  # nearly sorted: linear in practice
    if _in_order(by_order, producers):
        return by_order
    waiting = {id(node): 0 for node in nodes}
    dependents: dict[int, list[PassNode]] = {}
    for node in nodes:
        for value_id in set(node.inputs):
            producer = producers.get(value_id)
            if producer is not None and id(producer) in waiting and producer is not node:
                waiting[id(node)] += 1
                dependents.setdefault(id(producer), []).append(node)
    ready = [(node.order, index, node) for index, node in enumerate(nodes) if not waiting[id(node)]]
    heapq.heapify(ready)
    index_of = {id(node): index for index, node in enumerate(nodes)}
    ordered = []
    while ready:
        _, _, node = heapq.heappop(ready)
        ordered.append(node)
        for dependent in dependents.get(id(node), ()):
            waiting[id(dependent)] -= 1
            if not waiting[id(dependent)]:
                heapq.heappush(ready, (dependent.order, index_of[id(dependent)], dependent))
    if len(ordered) != len(nodes):
        raise AssertionError("a graph pass made a cycle")
    return ordered
