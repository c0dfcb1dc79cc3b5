"""The model IR the graph runtime works on: plain Python values and NumPy arrays only.

The importer (`onemodel.graph.importer`) builds it once from an ONNX protobuf; everything after
import (operator lookup, graph passes, plans) reads this IR. Keeping protobuf out of it means the
runtime never depends on onnx's message classes and never keeps the serialized model alive.

The classes are frozen dataclasses: an imported model is not edited in place (passes build their
own mutable graph). Their dicts and lists are not copied defensively, and the arrays the importer
stores are marked read-only, so that one imported model can be shared by several sessions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

import numpy as np

ValueKind: TypeAlias = Literal["tensor", "sequence", "optional", "unknown"]

# One dimension of a declared shape: a fixed extent, a symbolic name, or nothing known.
Dim: TypeAlias = int | str | None

# What a node attribute holds once imported (lists are FLOATS, INTS, STRINGS, TENSORS, GRAPHS...).
AttributeValue: TypeAlias = (
    "float | int | str | bytes | np.ndarray | Graph | ValueType | AttributeRef | list"
)

DEFAULT_DOMAIN = ""


def canonical_domain(domain: str) -> str:
    """The operator-set domain with ONNX's two spellings of the default domain made one ("")."""
    return DEFAULT_DOMAIN if domain == "ai.onnx" else domain


@dataclass(frozen=True, slots=True)
class ValueType:
    """The declared type of a value: a tensor, a sequence or optional of an inner type, or unknown.

    `elem_type` is the ONNX element type code (None where the model does not say); `dims` is
    None when the rank is unknown. Only the runtime decides which element types it supports.
    """

    kind: ValueKind
    elem_type: int | None = None
    dims: tuple[Dim, ...] | None = None
    element: ValueType | None = None


UNKNOWN_TYPE = ValueType("unknown")


@dataclass(frozen=True, slots=True)
class ValueInfo:
    """A named value a graph declares (an input, an output or a value_info entry)."""

    name: str
    type: ValueType = UNKNOWN_TYPE
    doc: str = ""


@dataclass(frozen=True, slots=True)
class AttributeRef:
    """An attribute of a function-body node that takes the calling node's attribute `name`.

    It only exists while a local function is being inlined; the importer replaces every one.
    `type` is the ONNX AttributeProto type code the reference declares. `default` is the value
    to use when the caller does not give `name` (None: the attribute is then left out); it is
    set when a function passes its own attribute on to a nested function that has a default.
    """

    name: str
    type: int
    default: AttributeValue | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    """One operator application. An input or output named "" is an absent optional one."""

    name: str
    op_type: str
    domain: str = DEFAULT_DOMAIN
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    attributes: dict[str, AttributeValue] = field(default_factory=dict)

    def subgraphs(self) -> Iterator[Graph]:
        """The graphs among the attributes (If branches, Loop and Scan bodies), in order."""
        for value in self.attributes.values():
            if isinstance(value, Graph):
                yield value
            elif isinstance(value, list):
                yield from (item for item in value if isinstance(item, Graph))


@dataclass(frozen=True, slots=True, eq=False)
class Graph:
    """A graph whose nodes are in dependency order.

    `inputs` are what a caller feeds; those named in `input_defaults` also have an initializer,
    which is their value when the caller gives none. `outer_names` are the values the graph
    (or a graph nested in it) reads from enclosing graphs, in first-use order: the extra
    inputs a subgraph needs from the node that holds it. It is empty for a model's main graph.
    """

    name: str
    nodes: tuple[Node, ...]
    inputs: tuple[ValueInfo, ...]
    outputs: tuple[ValueInfo, ...]
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    value_infos: dict[str, ValueInfo] = field(default_factory=dict)
    input_defaults: tuple[str, ...] = ()
    outer_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class Model:
    """An imported model: its main graph, the operator sets it uses, and its descriptive fields.

    `opsets` maps each domain ("" for the default ai.onnx domain) to its version; it includes
    the operator sets the model's local functions import, since their bodies are inlined.
    """

    graph: Graph
    opsets: dict[str, int]
    ir_version: int = 0
    producer_name: str = ""
    producer_version: str = ""
    domain: str = ""
    model_version: int = 0
    doc_string: str = ""
    graph_name: str = ""
    metadata: dict[str, str] = field(default_factory=dict)

    def opset_for(self, domain: str) -> int | None:
        """The version of `domain` the model imports ("" or "ai.onnx": the default), or None."""
        return self.opsets.get(canonical_domain(domain))
