"""onnxruntime's InferenceSession answered by a onemodel Session: inputs and outputs described
the way onnxruntime describes them, its options translated, its exception classes raised.

The model is parsed here once and handed to the importer, so that the descriptions come from the
model's own type declarations (maps and sequences included) and its metadata fields.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from onemodel.compat.onnxruntime import providers as provider_table
from onemodel.compat.onnxruntime.capi._pybind_state import (
    GraphOptimizationLevel,
    InvalidProtobuf,
    NoSuchFile,
    RunOptions,
    as_onnxruntime_error,
)
from onemodel.errors import ErrorKind, SessionError
from onemodel.graph.importer import model_from_proto
from onemodel.session import OptimizationLevel, Session, SessionOptions

# onnxruntime reports a model without a model_version as the largest int64.
UNKNOWN_MODEL_VERSION = 2**63 - 1

_DEFAULT_LEVEL = GraphOptimizationLevel.ORT_ENABLE_ALL
# EXTENDED, LAYOUT and ALL all become onemodel's ALL.
_LEVELS = {
    GraphOptimizationLevel.ORT_DISABLE_ALL: OptimizationLevel.NONE,
    GraphOptimizationLevel.ORT_ENABLE_BASIC: OptimizationLevel.BASIC,
}


@dataclass(frozen=True)
class NodeArg:
    """An input or output: `shape` holds ints, symbolic names as str, None for unknown dims, and
    is empty for a tensor without a declared shape or for a non-tensor."""

    name: str
    type: str
    shape: list[int | str | None]


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


class InferenceSession:
    """`InferenceSession(path | PathLike | bytes, sess_options, providers, provider_options)`.

    `sess_options` may be an onnxruntime-style SessionOptions from this package or onemodel's
    own SessionOptions (which then keeps its backend unless `providers` names one).
    """

    def __init__(
        self,
        path_or_bytes: str | bytes | os.PathLike[str],
        sess_options: Any = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
        **_: Any,
    ) -> None:
        self._source = path_or_bytes
        self._sess_options = sess_options
        proto, base_dir = _parse(path_or_bytes)
        self._load(proto, base_dir, providers, provider_options)
        graph = proto.graph
        constants = {tensor.name for tensor in graph.initializer}
        self._inputs = [_node_arg(v) for v in graph.input if v.name not in constants]
        # Before IR version 4 initializers listed as inputs are constants, not overridable.
        overridable = constants if proto.ir_version >= 4 else set()
        self._initializers = [_node_arg(v) for v in graph.input if v.name in overridable]
        self._outputs = [_node_arg(v) for v in graph.output]
        self._meta = _metadata(proto)

    def _load(
        self,
        proto: onnx.ModelProto,
        base_dir: Path | None,
        providers: Sequence[Any] | None,
        provider_options: Sequence[Mapping[str, Any]] | None,
    ) -> None:
        chosen = provider_table.choose(providers, provider_options)
        options = _onemodel_options(self._sess_options, chosen.backend, providers is not None)
        try:
            self._session = Session.create(model_from_proto(proto, base_dir=base_dir), options)
        except SessionError as error:
            raise as_onnxruntime_error(error) from error
        self._providers = chosen

    @property
    def session(self) -> Session:
        """The onemodel Session underneath, for onemodel's own calls (run_into, profiles)."""
        return self._session

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Graph inputs that have an initializer: callers may feed them, or leave the default."""
        return list(self._initializers)

    def get_modelmeta(self) -> ModelMetadata:
        return self._meta

    def get_providers(self) -> list[str]:
        return list(self._providers.names)

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {name: dict(options) for name, options in self._providers.options.items()}

    def set_providers(
        self,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Rebuild the session on the backend the providers map to."""
        self._load(*_parse(self._source), providers, provider_options)

    def get_session_options(self) -> Any:
        return self._sess_options

    def disable_fallback(self) -> None:
        """Accepted and ignored: onemodel does not retry a failed run on another backend."""

    def enable_fallback(self) -> None:
        """Accepted and ignored, as above."""

    def end_profiling(self) -> str:
        """No profile file is written (see Session.run's `profile`); the name is empty."""
        return ""

    def get_profiling_start_time_ns(self) -> int:
        return 0

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """The outputs named (all for None or an empty list), in that order."""
        cancel = None if run_options is None else run_options.token
        try:
            return self._session.run(output_names or None, input_feed, cancel=cancel)
        except SessionError as error:
            raise as_onnxruntime_error(error) from error


def _parse(source: Any) -> tuple[onnx.ModelProto, Path | None]:
    """The model and the folder its external data is read from (none for bytes)."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise NoSuchFile(ErrorKind.INVALID_MODEL, f"model file '{path}' does not exist")
        data, folder = path.read_bytes(), path.parent
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data, folder = bytes(source), None
    else:
        raise TypeError(
            f"InferenceSession takes a model path or bytes, not {type(source).__name__}"
        )
    try:
        proto = onnx.ModelProto.FromString(data)
    except Exception as error:  # protobuf's errors differ between its implementations
        raise InvalidProtobuf(
            ErrorKind.INVALID_MODEL, f"the model is not a valid ONNX protobuf ({error})"
        ) from error
    if not data or not proto.HasField("graph"):
        raise InvalidProtobuf(ErrorKind.INVALID_MODEL, "the model has no graph")
    return proto, folder


def _onemodel_options(sess_options: Any, backend: str, explicit: bool) -> SessionOptions:
    if isinstance(sess_options, SessionOptions):
        return dataclasses.replace(sess_options, backend=backend) if explicit else sess_options
    options = SessionOptions(backend=backend)
    if sess_options is not None:
        options.intra_op_threads = int(getattr(sess_options, "intra_op_num_threads", 0) or 0)
        level = getattr(sess_options, "graph_optimization_level", _DEFAULT_LEVEL)
        options.optimization_level = _LEVELS.get(int(level), OptimizationLevel.ALL)
    return options


def _node_arg(value: onnx.ValueInfoProto) -> NodeArg:
    shape: list[int | str | None] = []
    if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
        shape = [_dim(dim) for dim in value.type.tensor_type.shape.dim]
    return NodeArg(value.name, type_string(value.type), shape)


def _dim(dim: onnx.TensorShapeProto.Dimension) -> int | str | None:
    if dim.HasField("dim_value"):
        return dim.dim_value
    return dim.dim_param if dim.HasField("dim_param") else None


def type_string(proto: onnx.TypeProto) -> str:
    """onnxruntime's spelling of a type: tensor(float), seq(tensor(int64)), map(string,...)."""
    kind = proto.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({_element(proto.tensor_type.elem_type)})"
    if kind == "sparse_tensor_type":
        return f"sparse_tensor({_element(proto.sparse_tensor_type.elem_type)})"
    if kind == "sequence_type":
        return f"seq({type_string(proto.sequence_type.elem_type)})"
    if kind == "map_type":
        key = _element(proto.map_type.key_type)
        return f"map({key},{type_string(proto.map_type.value_type)})"
    if kind == "optional_type":
        return f"optional({type_string(proto.optional_type.elem_type)})"
    return "undefined"


def _element(code: int) -> str:
    return onnx.TensorProto.DataType.Name(code).lower()


def _metadata(proto: onnx.ModelProto) -> ModelMetadata:
    return ModelMetadata(
        producer_name=proto.producer_name,
        graph_name=proto.graph.name,
        domain=proto.domain,
        description=proto.doc_string,
        graph_description=proto.graph.doc_string,
        version=proto.model_version if proto.HasField("model_version") else UNKNOWN_MODEL_VERSION,
        custom_metadata_map={entry.key: entry.value for entry in proto.metadata_props},
    )
