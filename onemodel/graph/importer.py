"""ONNX model → IR (`onemodel.graph.ir`): parsing, external data, inlining and validation.

Protobuf stops here. Everything a later layer needs is converted once, and every way a model
can be broken (a truncated file, external data that points outside the model's folder, a node
reading a value nobody makes, a cycle) is reported as one `SessionError(INVALID_MODEL)` that
names the node and the value, before any operator is looked up.

Local functions are inlined at import, so the runtime only ever sees operators. Nodes are put
in dependency order with an iterative, stable topological sort: models with 100,000 nodes must
import in seconds and must not hit Python's recursion limit.
"""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from pathlib import Path, PureWindowsPath
from typing import Protocol, TypeAlias

import numpy as np

from onemodel.errors import ErrorKind, SessionError
from onemodel.graph import onnx_proto
from onemodel.graph.gc_pause import paused_gc
from onemodel.graph.ir import (
    UNKNOWN_TYPE,
    AttributeRef,
    AttributeValue,
    Graph,
    Model,
    Node,
    ValueInfo,
    ValueType,
    canonical_domain,
)
from onemodel.graph.onnx_proto import AttributeProto, TensorProto
from onemodel.graph.tensor_decoding import bits_per_element, tensor_array
from onemodel.progress import bar
from onemodel.tensors.dtypes import onnx_name
from onemodel.tensors.errors import UnsupportedDTypeError


class BinaryStream(Protocol):
    """What a stream source needs: read() giving the whole model (open binary files, BytesIO)."""

    def read(self) -> bytes: ...


ModelSource: TypeAlias = str | os.PathLike[str] | bytes | bytearray | memoryview | BinaryStream

# Makes the error for one tensor from a message; external data checks take one.
_Complaint: TypeAlias = Callable[[str], SessionError]

# External weights from this size on show a progress bar while they load (on a terminal, and
# where tqdm is installed).
PROGRESS_MIN_BYTES = 64 * 1024 * 1024

# Separates a calling node's name from a function body's names when a call is inlined.
_INLINE_SEPARATOR = "/"


def load_model(
    source: ModelSource,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    check: Callable[[str | None], None] | None = None,
) -> Model:
    """Import an ONNX model from a path, bytes or a binary stream.

    External data is read relative to `base_dir`, which defaults to the folder of a path
    source; bytes and streams have no folder, so their external data needs `base_dir`.
    A missing or unreadable model file raises the usual OSError; a broken model raises
    SessionError(INVALID_MODEL). `check(node_name)`, when given, is called before each node is
    imported, so a cancellation can stop a long import.
    """
    data, where, folder = _read_source(source)
    base = Path(base_dir) if base_dir is not None else folder
    return _import_model(_parse(data, where), base, where, check)


def model_from_proto(
    proto: onnx_proto.ModelProto, *, base_dir: str | os.PathLike[str] | None = None
) -> Model:
    """Import an already parsed ModelProto (left unchanged); external data as in `load_model`."""
    return _import_model(proto, Path(base_dir) if base_dir is not None else None, "the model")


def _invalid(message: str, *, node: str | None = None, value: str | None = None) -> SessionError:
    return SessionError(ErrorKind.INVALID_MODEL, message, node=node, value=value)


# --- Reading and parsing -----------------------------------------------------------------------


def _read_source(source: ModelSource) -> tuple[bytes, str, Path | None]:
    """The serialized model, how to name it in errors, and the folder of a path source."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        return path.read_bytes(), f"model file '{path}'", path.parent
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "the model data", None
    if hasattr(source, "read"):
        data = source.read()
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError("a model stream must be opened in binary mode (its read() gave text)")
        return bytes(data), "the model stream", None
    raise TypeError(
        f"a model source is a path, bytes or a binary stream, not {type(source).__name__}"
    )


def _parse(data: bytes, where: str) -> onnx_proto.ModelProto:
    if not data:
        raise _invalid(f"{where} is empty")
    try:
        return onnx_proto.ModelProto.FromString(data)
    except Exception as error:  # protobuf's errors differ between its implementations
        raise _invalid(f"{where} is not a valid ONNX model ({error})") from error


def _import_model(
    proto: onnx_proto.ModelProto,
    base_dir: Path | None,
    where: str,
    check: Callable[[str | None], None] | None = None,
) -> Model:
    if not proto.HasField("graph"):
        raise _invalid(f"{where} has no graph")
    opsets = _model_opsets(proto)
    external = _external_bytes(proto.graph)
    progress = bar(
        total=external, description="loading weights", unit="B", unit_scale=True,
        show=None if external >= PROGRESS_MIN_BYTES else False,
    )  # fmt: skip
    with progress, paused_gc():  # many long-lived objects: see gc_pause.py
        return _import_graph(proto, opsets, base_dir, check, progress.update)


def _import_graph(
    proto: onnx_proto.ModelProto,
    opsets: dict[str, int],
    base_dir: Path | None,
    check: Callable[[str | None], None] | None,
    loaded: Callable[[int], object],
) -> Model:
    importer = _Importer(
        tensors=_TensorReader(base_dir, loaded),
        functions={_function_key(function): function for function in proto.functions},
        # Before IR version 4 every initializer had to be listed as an input, and such
        # listings are constants (as in onnxruntime), not inputs a caller may override.
        initializers_can_be_inputs=proto.ir_version >= 4,
        check=check,
    )
    return Model(
        graph=importer.graph(proto.graph, _NO_OUTER_SCOPE),
        opsets=opsets,
        ir_version=proto.ir_version,
        producer_name=proto.producer_name,
        producer_version=proto.producer_version,
        domain=proto.domain,
        model_version=proto.model_version,
        doc_string=proto.doc_string,
        graph_name=proto.graph.name,
        metadata={entry.key: entry.value for entry in proto.metadata_props},
    )


def _external_bytes(graph: onnx_proto.GraphProto) -> int:
    """The bytes the main graph's initializers keep in external files, as their entries state
    them (a bad entry counts as nothing here; reading it reports it)."""
    total = 0
    for tensor in graph.initializer:
        if tensor.data_location == TensorProto.EXTERNAL:
            length = next((e.value for e in tensor.external_data if e.key == "length"), "0")
            total += int(length) if length.isdigit() else 0
    return total


def _model_opsets(proto: onnx_proto.ModelProto) -> dict[str, int]:
    """The model's operator sets plus those its functions import (their bodies are inlined)."""
    opsets = {canonical_domain(entry.domain): entry.version for entry in proto.opset_import}
    for function in proto.functions:
        for entry in function.opset_import:
            domain = canonical_domain(entry.domain)
            version = opsets.setdefault(domain, entry.version)
            if version != entry.version:
                raise _invalid(
                    f"function '{_function_label(_function_key(function))}' imports operator "
                    f"set '{domain or 'ai.onnx'}' version {entry.version}, but the model uses "
                    f"version {version}; inlining it would mix two versions of one domain"
                )
    return opsets


# --- Tensors -----------------------------------------------------------------------------------


class _TensorReader:
    """Turns tensor protos into read-only NumPy arrays, reading external data itself.

    onnx's own external data loader follows any path a model names; this one only reads regular
    files inside the model's folder, and checks offsets and lengths before reading anything.
    """

    def __init__(self, base_dir: Path | None, loaded: Callable[[int], object]) -> None:
        self._base_dir = base_dir
        self._resolved_base = base_dir.resolve() if base_dir is not None else None
        self._loaded = loaded  # told how many external bytes each read brought in

    def array(self, tensor: TensorProto, *, node: str | None = None) -> np.ndarray:
        external = None
        if tensor.data_location == TensorProto.EXTERNAL:
            external = self._external_data(tensor, node)
        try:
            array = tensor_array(tensor, external)
        except Exception as error:  # ValueError, TypeError, UnsupportedDTypeError... for bad data
            raise _invalid(
                f"tensor of type {onnx_name(tensor.data_type)} with shape {list(tensor.dims)} "
                f"cannot be decoded ({error})",
                node=node,
                value=tensor.name or None,
            ) from error
        return _read_only(array)

    def dense(self, sparse: onnx_proto.SparseTensorProto, *, node: str | None = None) -> np.ndarray:
        """A sparse tensor as the dense array it stands for (zeros, or "" for strings)."""
        values = self.array(sparse.values, node=node)
        indices = self.array(sparse.indices, node=node)
        shape = tuple(sparse.dims)
        try:
            flat = np.full(math.prod(shape), "" if values.dtype == object else 0, values.dtype)
            positions = indices if indices.ndim == 1 else np.ravel_multi_index(indices.T, shape)
            flat[np.asarray(positions, dtype=np.int64)] = values.reshape(-1)
        except (ValueError, IndexError, TypeError) as error:
            raise _invalid(
                f"sparse tensor with shape {list(shape)} has indices that do not fit it ({error})",
                node=node,
                value=sparse.values.name or None,
            ) from error
        return _read_only(flat.reshape(shape))

    def _external_data(self, tensor: TensorProto, node: str | None) -> bytes:
        """The tensor's bytes from its external file, checked against its entries first."""
        entries = {entry.key: entry.value for entry in tensor.external_data}
        location = entries.get("location", "")

        def invalid(message: str) -> SessionError:
            return _invalid(message, node=node, value=tensor.name or None)

        if self._base_dir is None:
            raise invalid(
                f"tensor data is stored in the external file '{location}', but the model was "
                "not loaded from a file; pass base_dir to say which folder holds it"
            )
        path = self._external_path(location, invalid)
        offset = _external_int(entries, "offset", 0, invalid)
        length = _external_int(entries, "length", None, invalid)
        needed = _raw_byte_size(tensor, invalid)
        span = needed if length is None else length
        file_size = path.stat().st_size
        if offset + span > file_size:
            raise invalid(
                f"external data at offset {offset} with length {span} runs past the end of "
                f"'{location}' ({file_size} bytes)"
            )
        if length is not None and length != needed:
            raise invalid(
                f"external data length {length} in '{location}' does not match the {needed} "
                f"bytes a {onnx_name(tensor.data_type)} tensor of shape {list(tensor.dims)} needs"
            )
        with path.open("rb") as file:
            file.seek(offset)
            data = file.read(needed)
        if len(data) != needed:
            raise invalid(f"external data file '{location}' changed while it was being read")
        self._loaded(needed)
        return data

    def _external_path(self, location: str, invalid: _Complaint) -> Path:
        """The regular file `location` names inside the model folder, or an error saying why not."""
        assert self._base_dir is not None and self._resolved_base is not None
        if not location:
            raise invalid("tensor data is external but names no location")
        # The Windows reading catches POSIX "/x" as well as "C:\x", drive-relative "C:x" and
        # UNC "\\host\share", all of which would ignore the model folder.
        if PureWindowsPath(location).anchor:
            raise invalid(
                f"external data location '{location}' is an absolute path; only files inside "
                "the model's folder may be read"
            )
        try:
            path = (self._base_dir / location).resolve()
        except (OSError, ValueError) as error:
            raise invalid(
                f"external data location '{location}' is not a usable path ({error})"
            ) from error
        if not path.is_relative_to(self._resolved_base):
            raise invalid(
                f"external data location '{location}' resolves to '{path}', outside the model's "
                f"folder '{self._resolved_base}'"
            )
        if not path.is_file():
            raise invalid(f"external data file '{location}' does not exist (looked for '{path}')")
        return path


def _external_int(
    entries: Mapping[str, str], key: str, default: int | None, invalid: _Complaint
) -> int | None:
    if key not in entries:
        return default
    text = entries[key]
    if not (text.isascii() and text.isdigit()):
        raise invalid(f"external data {key} '{text}' is not a non-negative integer")
    return int(text)


def _raw_byte_size(tensor: TensorProto, invalid: _Complaint) -> int:
    """How many bytes of raw data a tensor's shape and element type take (packed types packed)."""
    if any(extent < 0 for extent in tensor.dims):
        raise invalid(f"tensor shape {list(tensor.dims)} has a negative extent")
    if tensor.data_type == TensorProto.STRING:
        raise invalid("a STRING tensor cannot be stored as external data")
    try:
        bits = bits_per_element(tensor.data_type)
    except UnsupportedDTypeError as error:
        raise invalid(f"external tensor has an unusable element type ({error})") from error
    return (math.prod(tensor.dims) * bits + 7) // 8


def _read_only(array: np.ndarray) -> np.ndarray:
    """Imported arrays are shared by every session made from the model; nobody may write them."""
    array.flags.writeable = False
    return array


# --- Types -------------------------------------------------------------------------------------


def _value_info(proto: onnx_proto.ValueInfoProto) -> ValueInfo:
    value_type = _value_type(proto.type) if proto.HasField("type") else UNKNOWN_TYPE
    return ValueInfo(proto.name, value_type, proto.doc_string)


def _value_type(proto: onnx_proto.TypeProto) -> ValueType:
    """Tensor, sequence and optional types; maps, sparse tensors and opaque types are unknown."""
    kind = proto.WhichOneof("value")
    if kind == "tensor_type":
        tensor = proto.tensor_type
        dims = tuple(_dim(dim) for dim in tensor.shape.dim) if tensor.HasField("shape") else None
        return ValueType("tensor", tensor.elem_type or None, dims)
    if kind == "sequence_type":
        return ValueType("sequence", element=_value_type(proto.sequence_type.elem_type))
    if kind == "optional_type":
        return ValueType("optional", element=_value_type(proto.optional_type.elem_type))
    return UNKNOWN_TYPE


def _dim(proto: onnx_proto.TensorShapeProto.Dimension) -> int | str | None:
    """A declared extent; a negative dim_value (PaddlePaddle writes -1) is unknown, as
    onnxruntime reads it."""
    kind = proto.WhichOneof("value")
    if kind == "dim_value":
        return proto.dim_value if proto.dim_value >= 0 else None
    if kind == "dim_param":
        return proto.dim_param
    return None


def _text(data: bytes) -> str | bytes:
    """STRING attributes are UTF-8 text by convention; other bytes are kept as they are."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


# --- Names and scopes --------------------------------------------------------------------------


class _Names:
    """A set of taken names that hands out fresh ones: `base`, else `base_1`, `base_2`, ..."""

    def __init__(self, taken: Iterable[str]) -> None:
        self._taken = set(taken)

    def claim(self, base: str) -> str:
        name, suffix = base, 0
        while name in self._taken:
            suffix += 1
            name = f"{base}_{suffix}"
        self._taken.add(name)
        return name


def _unique_node_names(protos: Sequence[onnx_proto.NodeProto]) -> list[str]:
    """The nodes' names, with unnamed nodes called `{op_type}_{index}` and repeats suffixed.

    The first node with a given name keeps it; generated names avoid every name the graph
    gives explicitly, so they do not depend on where the named nodes are.
    """
    explicit = {proto.name for proto in protos if proto.name}
    fresh = _Names(explicit)
    kept: set[str] = set()
    names = []
    for index, proto in enumerate(protos):
        if proto.name and proto.name not in kept:
            kept.add(proto.name)
            names.append(proto.name)
        else:
            names.append(fresh.claim(proto.name or f"{proto.op_type}_{index}"))
    return names


@dataclass(frozen=True)
class _Scope:
    """The value names visible in a graph: its own, then those of each enclosing graph."""

    names: Set[str]
    parent: _Scope | None = None

    def __contains__(self, name: object) -> bool:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names:
                return True
            scope = scope.parent
        return False

    def inner(self, names: Set[str]) -> _Scope:
        return _Scope(names, self)


_NO_OUTER_SCOPE = _Scope(frozenset())


# --- Graphs, nodes and attributes --------------------------------------------------------------

_FunctionKey: TypeAlias = tuple[str, str, str]


def _function_key(proto: onnx_proto.FunctionProto) -> _FunctionKey:
    return canonical_domain(proto.domain), proto.name, proto.overload


def _function_label(key: _FunctionKey) -> str:
    domain, name, overload = key
    return f"{domain or 'ai.onnx'}:{name}" + (f" (overload '{overload}')" if overload else "")


@dataclass(frozen=True)
class _Function:
    """A local function ready to inline: its body in order, with nested calls already inlined.

    Body attributes may still be AttributeRefs; each call binds them to its own attributes.
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attribute_defaults: dict[str, AttributeValue]
    body: tuple[Node, ...]


class _Importer:
    """Converts the graphs of one model, inlining its local functions (each converted once)."""

    def __init__(
        self,
        *,
        tensors: _TensorReader,
        functions: dict[_FunctionKey, onnx_proto.FunctionProto],
        initializers_can_be_inputs: bool,
        check: Callable[[str | None], None] | None = None,
    ) -> None:
        self._check = check
        self._tensors = tensors
        self._function_protos = functions
        self._functions: dict[_FunctionKey, _Function] = {}
        self._functions_in_progress: set[_FunctionKey] = set()
        self._initializers_can_be_inputs = initializers_can_be_inputs

    def graph(self, proto: onnx_proto.GraphProto, outer: _Scope) -> Graph:
        """A graph (the main one or a subgraph seeing `outer`), validated and in order."""
        initializers = self._initializers(proto)
        inputs = tuple(_value_info(value) for value in proto.input)
        if not self._initializers_can_be_inputs:
            inputs = tuple(value for value in inputs if value.name not in initializers)
        own = frozenset(value.name for value in inputs) | initializers.keys()
        nodes = self._nodes(proto.node, outer, own)
        return _assembled_graph(
            Graph(
                name=proto.name,
                nodes=tuple(nodes),
                inputs=inputs,
                outputs=tuple(_value_info(value) for value in proto.output),
                initializers=initializers,
                value_infos={value.name: _value_info(value) for value in proto.value_info},
                input_defaults=tuple(v.name for v in inputs if v.name in initializers),
            ),
            outer,
            label=f"graph '{proto.name}'",
        )

    def _initializers(self, proto: onnx_proto.GraphProto) -> dict[str, np.ndarray]:
        named = [(tensor.name, self._tensors.array(tensor)) for tensor in proto.initializer]
        named += [
            (sparse.values.name, self._tensors.dense(sparse)) for sparse in proto.sparse_initializer
        ]
        arrays: dict[str, np.ndarray] = {}
        for name, array in named:
            if name in arrays:
                raise _invalid(f"graph '{proto.name}' has two initializers named so", value=name)
            arrays[name] = array
        return arrays

    def _nodes(
        self, protos: Sequence[onnx_proto.NodeProto], outer: _Scope, own: Set[str]
    ) -> list[Node]:
        """The nodes of one graph with every call of a local function replaced by its body."""
        produced = {output for proto in protos for output in proto.output if output}
        scope = outer.inner(own | produced)
        names = _unique_node_names(protos)
        node_names = _Names(names)
        value_names = _Names(own | produced | {name for proto in protos for name in proto.input})
        nodes: list[Node] = []
        for proto, name in zip(protos, names, strict=True):
            if self._check is not None:
                self._check(name)
            node = self._node(proto, name, scope)
            function = self._callee(proto)
            if function is None:
                nodes.append(node)
            else:
                nodes.extend(_inlined_call(node, function, node_names, value_names))
        return nodes

    def _node(self, proto: onnx_proto.NodeProto, name: str, scope: _Scope) -> Node:
        return Node(
            name=name,
            op_type=proto.op_type,
            domain=canonical_domain(proto.domain),
            inputs=tuple(proto.input),
            outputs=tuple(proto.output),
            attributes={
                attribute.name: self._attribute(attribute, name, scope)
                for attribute in proto.attribute
            },
        )

    def _attribute(self, proto: AttributeProto, node: str | None, scope: _Scope) -> AttributeValue:
        if proto.ref_attr_name:
            if not self._functions_in_progress:
                raise _invalid(
                    f"attribute '{proto.name}' refers to attribute '{proto.ref_attr_name}' of a "
                    "calling node, but it is not inside a function body",
                    node=node,
                )
            return AttributeRef(proto.ref_attr_name, proto.type)
        match proto.type:
            case AttributeProto.FLOAT:
                return proto.f
            case AttributeProto.INT:
                return proto.i
            case AttributeProto.STRING:
                return _text(proto.s)
            case AttributeProto.TENSOR:
                return self._tensors.array(proto.t, node=node)
            case AttributeProto.GRAPH:
                return self.graph(proto.g, scope)
            case AttributeProto.SPARSE_TENSOR:
                return self._tensors.dense(proto.sparse_tensor, node=node)
            case AttributeProto.TYPE_PROTO:
                return _value_type(proto.tp)
            case AttributeProto.FLOATS:
                return list(proto.floats)
            case AttributeProto.INTS:
                return list(proto.ints)
            case AttributeProto.STRINGS:
                return [_text(data) for data in proto.strings]
            case AttributeProto.TENSORS:
                return [self._tensors.array(tensor, node=node) for tensor in proto.tensors]
            case AttributeProto.GRAPHS:
                return [self.graph(graph, scope) for graph in proto.graphs]
            case AttributeProto.SPARSE_TENSORS:
                return [self._tensors.dense(sparse, node=node) for sparse in proto.sparse_tensors]
            case AttributeProto.TYPE_PROTOS:
                return [_value_type(value_type) for value_type in proto.type_protos]
        raise _invalid(
            f"attribute '{proto.name}' has no usable type (AttributeProto type {proto.type})",
            node=node,
        )

    def _callee(self, proto: onnx_proto.NodeProto) -> _Function | None:
        """The local function a node calls, if it calls one.

        A function in the default domain named like a standard operator does not replace it.
        """
        key = (canonical_domain(proto.domain), proto.op_type, proto.overload)
        if key not in self._function_protos:
            return None
        if key[0] == "" and _is_standard_operator(proto.op_type):
            return None
        return self._function(key)

    def _function(self, key: _FunctionKey) -> _Function:
        if key in self._functions:
            return self._functions[key]
        label = f"function '{_function_label(key)}'"
        if key in self._functions_in_progress:
            raise _invalid(
                f"{label} calls itself, directly or through other functions; a recursive "
                "function cannot be inlined"
            )
        self._functions_in_progress.add(key)
        function = self._converted_function(self._function_protos[key], label)
        self._functions_in_progress.discard(key)
        self._functions[key] = function
        return function

    def _converted_function(self, proto: onnx_proto.FunctionProto, label: str) -> _Function:
        inputs = frozenset(proto.input)
        body = _assembled_graph(
            Graph(
                name=proto.name,
                nodes=tuple(self._nodes(proto.node, _NO_OUTER_SCOPE, inputs)),
                inputs=tuple(ValueInfo(name) for name in proto.input),
                outputs=tuple(ValueInfo(name) for name in proto.output),
            ),
            _NO_OUTER_SCOPE,
            label=label,
        )
        defaults_scope = _NO_OUTER_SCOPE.inner(inputs)
        return _Function(
            inputs=tuple(proto.input),
            outputs=tuple(proto.output),
            attribute_defaults={
                default.name: self._attribute(default, None, defaults_scope)
                for default in proto.attribute_proto
            },
            body=body.nodes,
        )


def _is_standard_operator(op_type: str) -> bool:
    import onnx.defs  # its schemas: only for a model whose functions take an operator's name

    return onnx.defs.has(op_type)


# --- Inlining ----------------------------------------------------------------------------------


def _inlined_call(
    call: Node, function: _Function, node_names: _Names, value_names: _Names
) -> list[Node]:
    """The function body as nodes of the caller's graph, named after the calling node."""
    if len(call.inputs) > len(function.inputs) or len(call.outputs) > len(function.outputs):
        raise _invalid(
            f"passes {len(call.inputs)} inputs and {len(call.outputs)} outputs to a function "
            f"with {len(function.inputs)} inputs and {len(function.outputs)} outputs",
            node=call.name,
        )
    binding = _Binding(
        renaming=_call_renaming(call, function, value_names),
        attributes=call.attributes,
        defaults=function.attribute_defaults,
    )
    prefix = call.name + _INLINE_SEPARATOR
    return [
        binding.node(body_node, name=node_names.claim(prefix + body_node.name))
        for body_node in function.body
    ]


def _call_renaming(call: Node, function: _Function, value_names: _Names) -> dict[str, str]:
    """Body value name → caller value name: formals to actuals, the rest made unique.

    A formal input the call leaves out becomes "" (absent); a formal output the call does not
    take still gets a name, since other body nodes may read it.
    """
    prefix = call.name + _INLINE_SEPARATOR
    renaming = {"": ""}
    for position, formal in enumerate(function.inputs):
        renaming[formal] = call.inputs[position] if position < len(call.inputs) else ""
    for position, formal in enumerate(function.outputs):
        actual = call.outputs[position] if position < len(call.outputs) else ""
        renaming[formal] = actual or value_names.claim(prefix + formal)
    for body_node in function.body:
        for output in body_node.outputs:
            if output not in renaming:
                renaming[output] = value_names.claim(prefix + output)
    return renaming


@dataclass(frozen=True)
class _Binding:
    """What one call substitutes in a function body: value names, and attribute references."""

    renaming: Mapping[str, str]
    attributes: Mapping[str, AttributeValue]  # the calling node's
    defaults: Mapping[str, AttributeValue]  # the function's

    def node(self, node: Node, *, name: str) -> Node:
        return replace(
            node,
            name=name,
            inputs=tuple(map(self._renamed, node.inputs)),
            outputs=tuple(map(self._renamed, node.outputs)),
            attributes=self._attributes(node.attributes),
        )

    def _renamed(self, name: str) -> str:
        return self.renaming.get(name, name)

    def _attributes(self, attributes: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
        """References bound (an attribute nothing binds is left out, as ONNX says) and graph
        attributes moved into the caller."""
        bound: dict[str, AttributeValue] = {}
        for name, value in attributes.items():
            if isinstance(value, AttributeRef):
                value = self._reference(value)
            elif isinstance(value, Graph):
                value = self._graph(value)
            elif isinstance(value, list) and any(isinstance(item, Graph) for item in value):
                value = [self._graph(item) for item in value]
            if value is not None:
                bound[name] = value
        return bound

    def _reference(self, reference: AttributeRef) -> AttributeValue | None:
        """The value a reference takes: the caller's attribute, else the function's default.

        A caller that is itself a function body may pass its own attribute on; the result is
        then a reference to that, which keeps this function's default as its fallback.
        """
        fallback = self.defaults.get(reference.name, reference.default)
        if reference.name not in self.attributes:
            return fallback
        value = self.attributes[reference.name]
        if isinstance(value, AttributeRef):
            return replace(value, default=fallback)
        return value

    def _graph(self, graph: Graph) -> Graph:
        """A subgraph of the body moved into the caller: every renamed name follows."""
        renamed = self._renamed
        return replace(
            graph,
            nodes=tuple(self.node(node, name=node.name) for node in graph.nodes),
            inputs=tuple(replace(value, name=renamed(value.name)) for value in graph.inputs),
            outputs=tuple(replace(value, name=renamed(value.name)) for value in graph.outputs),
            initializers={renamed(name): array for name, array in graph.initializers.items()},
            value_infos={
                renamed(name): replace(value, name=renamed(name))
                for name, value in graph.value_infos.items()
            },
            input_defaults=tuple(map(renamed, graph.input_defaults)),
            outer_names=tuple(name for name in map(renamed, graph.outer_names) if name),
        )


# --- Validation and order ----------------------------------------------------------------------


def _assembled_graph(graph: Graph, outer: _Scope, *, label: str) -> Graph:
    """The graph checked (every value defined once, every read defined, outputs produced), its
    nodes in dependency order, and the names it reads from enclosing graphs recorded."""
    own = frozenset(value.name for value in graph.inputs) | graph.initializers.keys()
    producers = _producers(graph.nodes, own, label)
    visible = outer.inner(own)
    nodes = _dependency_order(graph.nodes, producers, visible, label)
    for output in graph.outputs:
        if output.name not in producers and output.name not in visible:
            raise _invalid(
                f"the value is an output of {label}, but no node produces it and it is not an "
                "input, initializer or outer-scope value",
                value=output.name,
            )
    return replace(
        graph, nodes=nodes, outer_names=_outer_names(graph, nodes, own | producers.keys())
    )


def _producers(nodes: Sequence[Node], own: Set[str], label: str) -> dict[str, int]:
    """Value name → index of the node producing it; each value may be defined only once."""
    producers: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for value in node.outputs:
            if not value:
                continue
            if value in own:
                raise _invalid(
                    f"the node's output has the name of an input or initializer of {label}",
                    node=node.name,
                    value=value,
                )
            if value in producers:
                raise _invalid(
                    f"the value is also produced by node '{nodes[producers[value]].name}' in "
                    f"{label}; every value must have exactly one producer",
                    node=node.name,
                    value=value,
                )
            producers[value] = index
    return producers


def _reads(node: Node) -> Iterator[str]:
    """Every value a node needs before it runs: its inputs and what its subgraphs capture."""
    yield from (value for value in node.inputs if value)
    for subgraph in node.subgraphs():
        yield from subgraph.outer_names


def _dependency_order(
    nodes: Sequence[Node], producers: Mapping[str, int], visible: _Scope, label: str
) -> tuple[Node, ...]:
    """The nodes in dependency order: as given if they already are, else stably sorted."""
    edges: list[list[tuple[int, str]]] = []
    already_ordered = True
    for index, node in enumerate(nodes):
        node_edges = []
        for value in _reads(node):
            producer = producers.get(value)
            if producer is not None:
                node_edges.append((producer, value))
                already_ordered = already_ordered and producer < index
            elif value not in visible:
                raise _invalid(
                    f"the node reads a value that is not an input, initializer, node output or "
                    f"outer-scope value of {label}",
                    node=node.name,
                    value=value,
                )
        edges.append(node_edges)
    if already_ordered:
        return tuple(nodes)
    return tuple(nodes[index] for index in _topological_order(nodes, edges, label))


def _topological_order(
    nodes: Sequence[Node], edges: Sequence[Sequence[tuple[int, str]]], label: str
) -> list[int]:
    """Kahn's algorithm taking the earliest ready node first, so that the given order is kept
    wherever the dependencies allow it."""
    consumers: list[list[int]] = [[] for _ in nodes]
    waiting = [len(node_edges) for node_edges in edges]
    for index, node_edges in enumerate(edges):
        for producer, _ in node_edges:
            consumers[producer].append(index)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for consumer in consumers[index]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                heapq.heappush(ready, consumer)
    if len(order) < len(nodes):
        raise _cycle_error(nodes, edges, waiting, label)
    return order


def _cycle_error(
    nodes: Sequence[Node],
    edges: Sequence[Sequence[tuple[int, str]]],
    waiting: Sequence[int],
    label: str,
) -> SessionError:
    """An error naming a node on a cycle, found by walking back through unsorted producers.

    A node left unsorted still waits for an unsorted producer, so the walk never stops before
    it comes back to a node it passed: that node lies on a cycle.
    """
    step: dict[int, tuple[int, str]] = {}
    current = next(index for index, count in enumerate(waiting) if count > 0)
    while current not in step:
        step[current] = next((p, v) for p, v in edges[current] if waiting[p] > 0)
        current = step[current][0]
    cycle = [current]
    while step[cycle[-1]][0] != current:
        cycle.append(step[cycle[-1]][0])
    shown = " <- ".join(nodes[index].name for index in cycle[:6])
    return _invalid(
        f"the node depends on its own output through a cycle in {label} "
        f"({shown}{' <- ...' if len(cycle) > 6 else ''})",
        node=nodes[current].name,
        value=step[current][1],
    )


def _outer_names(graph: Graph, nodes: Sequence[Node], local: Set[str]) -> tuple[str, ...]:
    """The names a graph reads from enclosing graphs, in first-use order."""
    names: dict[str, None] = {}
    for node in nodes:
        names.update((value, None) for value in _reads(node) if value not in local)
    names.update((value.name, None) for value in graph.outputs if value.name not in local)
    return tuple(names)
