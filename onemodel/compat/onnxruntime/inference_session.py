"""onnxruntime's InferenceSession answered by a onemodel Session: inputs and outputs described
the way onnxruntime describes them, its options translated, its exception classes raised.

The model is parsed here once, adjusted as the session options ask (free dimensions fixed,
initializers replaced) and as onnxruntime reads it (below), and handed to the importer; the
descriptions come from the model's own declarations and metadata. The runs themselves are the
native session's (`_sess`, capi/native_session.py).

Where onnxruntime takes feeds the Session refuses, this module makes the Session take them:
an input declared rank 0 takes a tensor of any shape (onnxruntime does not check the shape of
inputs declared as scalars), so its declared shape is dropped before import.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onemodel.compat.onnxruntime import providers as provider_table
from onemodel.compat.onnxruntime.capi import native_session
from onemodel.compat.onnxruntime.capi._pybind_state import (
    Fail,
    GraphOptimizationLevel,
    InvalidProtobuf,
    NoSuchFile,
    OrtValue,
    RunOptions,
    SessionIOBinding,
    SessionOptions,
    as_onnxruntime_error,
    log,
)
from onemodel.compat.onnxruntime.capi.profiling import Profiler
from onemodel.errors import ErrorKind, SessionError
from onemodel.graph import onnx_proto
from onemodel.graph.importer import model_from_proto
from onemodel.session import OptimizationLevel, Session
from onemodel.session import SessionOptions as OnemodelOptions

# onnxruntime reports a model without a model_version as the largest int64.
UNKNOWN_MODEL_VERSION = 2**63 - 1

_DEFAULT_LEVEL = GraphOptimizationLevel.ORT_ENABLE_ALL
# EXTENDED, LAYOUT and ALL all become onemodel's ALL.
_LEVELS = {
    GraphOptimizationLevel.ORT_DISABLE_ALL: OptimizationLevel.NONE,
    GraphOptimizationLevel.ORT_ENABLE_BASIC: OptimizationLevel.BASIC,
}
_EXTERNAL_FILE = "session.optimized_model_external_initializers_file_name"
_EXTERNAL_MIN_BYTES = "session.optimized_model_external_initializers_min_size_in_bytes"
_RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"


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


@dataclass(frozen=True)
class OrtEpAssignedNode:
    domain: str
    op_type: str
    name: str


@dataclass(frozen=True)
class OrtEpAssignedSubgraph:
    """Nodes one provider runs: onemodel runs every node on the session's one backend."""

    ep_name: str
    nodes: tuple[OrtEpAssignedNode, ...]

    def get_nodes(self) -> list[OrtEpAssignedNode]:
        return list(self.nodes)


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
        # onnxruntime's own attributes, which packages read (optimum: `_model_path`).
        self._model_path = (
            None
            if isinstance(path_or_bytes, (bytes, bytearray, memoryview))
            else (os.fspath(path_or_bytes))
        )
        self._model_bytes = None if self._model_path is not None else bytes(path_or_bytes)
        self._sess: native_session.InferenceSession | None = None
        proto, base_dir = _parse(path_or_bytes)
        self._sess_options = _options_from_model(proto, sess_options)
        _apply_options(proto, self._sess_options)
        self._load(proto, base_dir, providers, provider_options)
        graph = proto.graph
        constants = {tensor.name for tensor in graph.initializer}
        self._inputs = [_node_arg(v) for v in graph.input if v.name not in constants]
        # Before IR version 4 initializers listed as inputs are constants, not overridable.
        overridable = constants if proto.ir_version >= 4 else set()
        self._initializers = [_node_arg(v) for v in graph.input if v.name in overridable]
        self._outputs = [_node_arg(v) for v in graph.output]
        self._meta = _metadata(proto)
        self._nodes = [OrtEpAssignedNode(n.domain, n.op_type, n.name) for n in graph.node]

    def _load(
        self,
        proto: onnx_proto.ModelProto,
        base_dir: Path | None,
        providers: Sequence[Any] | None,
        provider_options: Sequence[Mapping[str, Any]] | None,
    ) -> None:
        chosen = provider_table.choose(providers, provider_options)
        options = _onemodel_options(self._sess_options, chosen.backend, providers is not None)
        profiling = bool(getattr(self._sess_options, "enable_profiling", False))
        profiler = None
        if profiling:
            prefix = getattr(self._sess_options, "profile_file_prefix", "onnxruntime_profile_")
            profiler = Profiler(prefix, chosen.names[0])
        started = time.perf_counter()
        try:
            model = model_from_proto(_lenient(proto), base_dir=base_dir)
            session = Session.create(model, options)
        except SessionError as error:
            raise as_onnxruntime_error(error) from error
        if profiler is not None:
            profiler.loaded(started, time.perf_counter() - started)
        if options.optimized_model_path and isinstance(self._sess_options, SessionOptions):
            _externalise(options.optimized_model_path, self._sess_options)
        log(1, getattr(self._sess_options, "logid", ""), f"session on {session.backend}")
        self._sess = native_session.InferenceSession(session, chosen.names, profiler)
        self._providers = chosen

    @property
    def session(self) -> Session:
        """The onemodel Session underneath, for onemodel's own calls (run_into, profiles)."""
        return self._native().session

    def _native(self) -> native_session.InferenceSession:
        if self._sess is None:
            raise RuntimeError("the session was not rebuilt after set_providers failed")
        return self._sess

    # -- descriptions --------------------------------------------------------------------------

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

    def get_input_memory_infos(self) -> list[Any]:
        return self._native().input_meminfos()

    def get_output_memory_infos(self) -> list[Any]:
        return self._native().output_meminfos()

    def get_input_epdevices(self) -> list[None]:
        """One entry per input; None: onemodel has no plug-in execution-provider devices."""
        return [None for _ in self._inputs]

    def get_provider_graph_assignment_info(self) -> list[OrtEpAssignedSubgraph]:
        """Each node in its own subgraph on the session's provider, as onnxruntime's CPU
        provider reports them; needs the config entry onnxruntime asks for."""
        options = self._sess_options
        entry = (
            options.config_entry(_RECORD_ASSIGNMENT) if isinstance(options, SessionOptions) else ""
        )
        if entry != "1":
            raise Fail(
                ErrorKind.INVALID_INPUT,
                f"Session configuration entry '{_RECORD_ASSIGNMENT}' must be set to \"1\" to "
                "retrieve EP graph assignment information.",
            )
        provider = self._providers.names[0]
        return [OrtEpAssignedSubgraph(provider, (node,)) for node in self._nodes]

    def get_session_options(self) -> Any:
        return self._sess_options

    def set_providers(
        self,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Rebuild the session on the backend the providers map to."""
        self._sess = None
        proto, base_dir = _parse(self._source)
        _apply_options(proto, self._sess_options)
        self._load(proto, base_dir, providers, provider_options)

    def disable_fallback(self) -> None:
        """Accepted and ignored: onemodel does not retry a failed run on another backend."""

    def enable_fallback(self) -> None:
        """Accepted and ignored, as above."""

    def get_tuning_results(self) -> list[dict]:
        """None: onemodel has no tunable kernels."""
        return []

    def set_tuning_results(self, results: Sequence[dict], error_on_invalid: bool = False) -> None:
        """Accepted and ignored, as above."""

    # -- profiling -------------------------------------------------------------------------

    def end_profiling(self) -> str:
        """Write onnxruntime's JSON profile of the runs so far; "" when profiling is off."""
        return self._native().end_profiling()

    def get_profiling_start_time_ns(self) -> int:
        return self._native().get_profiling_start_time_ns()

    # -- running -------------------------------------------------------------------------------

    def _check_feeds(self, names: Sequence[str]) -> None:
        """onnxruntime's own check before a run, with its ValueError and text."""
        given = list(names)
        missing = [arg.name for arg in self._inputs if arg.name not in given]
        if missing:
            raise ValueError(f"Required inputs ({missing}) are missing from input feed ({given}).")

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """The outputs named (all for None or an empty list), in that order, as NumPy."""
        self._check_feeds(list(input_feed))
        return self._native().run(output_names, input_feed, run_options)

    def run_with_ort_values(
        self,
        output_names: Sequence[str] | None,
        input_dict_ort_values: Mapping[str, OrtValue],
        run_options: RunOptions | None = None,
    ) -> list[OrtValue]:
        """OrtValue outputs left where the session computed them."""
        self._check_feeds(list(input_dict_ort_values))
        return self._native().run_with_ort_values(input_dict_ort_values, output_names, run_options)

    def run_with_ortvaluevector(self, run_options: Any, feed_names: Sequence[str], feeds: Any,
                                fetch_names: Sequence[str], fetches: Any,
                                fetch_devices: Any = ()) -> None:  # fmt: skip
        self._native().run_with_ortvaluevector(
            run_options, feed_names, feeds, fetch_names, fetches, fetch_devices
        )

    def run_async(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        callback: Callable[[list, Any, str], None],
        user_data: Any = None,
        run_options: RunOptions | None = None,
    ) -> None:
        """Run on another thread and call `callback(outputs, user_data, error text)`."""
        self._check_feeds(list(input_feed))
        self._native().run_async(output_names, input_feed, callback, user_data, run_options)

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: SessionIOBinding, run_options: Any = None) -> None:
        self._native().run_with_iobinding(iobinding._iobinding, run_options)


class IOBinding(SessionIOBinding):
    """`session.io_binding()`: inputs and outputs bound before `run_with_iobinding`."""


def _parse(source: Any) -> tuple[onnx_proto.ModelProto, Path | None]:
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
        proto = onnx_proto.ModelProto.FromString(data)
    except Exception as error:  # protobuf's errors differ between its implementations
        raise InvalidProtobuf(
            ErrorKind.INVALID_MODEL, f"the model is not a valid ONNX protobuf ({error})"
        ) from error
    if not data or not proto.HasField("graph"):
        raise InvalidProtobuf(ErrorKind.INVALID_MODEL, "the model has no graph")
    return proto, folder


def _options_from_model(proto: onnx_proto.ModelProto, given: Any) -> Any:
    """The options the session uses: the caller's, else fresh ones; with
    ORT_LOAD_CONFIG_FROM_MODEL=1 the model's "ort_config" metadata sets theirs first."""
    options = SessionOptions() if given is None else given
    if os.environ.get("ORT_LOAD_CONFIG_FROM_MODEL") != "1" or not isinstance(
        options, SessionOptions
    ):
        return options
    for entry in proto.metadata_props:
        if entry.key == "ort_config":
            config = json.loads(entry.value).get("session_options", {})
            for name, value in config.items():
                current = getattr(options, name, None)
                if current is None or name.startswith("_"):
                    raise Fail(ErrorKind.INVALID_MODEL, f"ort_config: unknown option {name}")
                setattr(options, name, type(current)(value))
    return options


def _apply_options(proto: onnx_proto.ModelProto, options: Any) -> None:
    """Free-dimension overrides and added initializers, written into the model."""
    if not isinstance(options, SessionOptions):
        return
    by_name, by_denotation = options.free_dimensions_by_name, options.free_dimensions_by_denotation
    for value in proto.graph.input:
        if not value.type.HasField("tensor_type"):
            continue
        for dim in value.type.tensor_type.shape.dim:
            fixed = by_denotation.get(dim.denotation) if dim.denotation else None
            if dim.HasField("dim_param") and dim.dim_param in by_name:
                fixed = by_name[dim.dim_param]
            if fixed is not None and not dim.HasField("dim_value"):
                dim.dim_value = fixed
    for tensor in proto.graph.initializer:
        if tensor.name in options.initializers:
            from onnx import numpy_helper  # onnx's encoding: only for add_initializer

            tensor.CopyFrom(numpy_helper.from_array(options.initializers[tensor.name], tensor.name))
        elif tensor.data_location == onnx_proto.TensorProto.EXTERNAL:
            _fill_from_memory(tensor, options.external_files)


def _fill_from_memory(tensor: onnx_proto.TensorProto, files: Mapping[str, bytes]) -> None:
    info = {entry.key: entry.value for entry in tensor.external_data}
    data = files.get(info.get("location", ""))
    if data is None:
        return
    offset = int(info.get("offset", 0))
    length = int(info["length"]) if "length" in info else len(data) - offset
    tensor.raw_data = data[offset : offset + length]
    tensor.data_location = onnx_proto.TensorProto.DEFAULT
    del tensor.external_data[:]


def _lenient(proto: onnx_proto.ModelProto) -> onnx_proto.ModelProto:
    """The model as onnxruntime checks feeds against it: inputs declared rank 0 take any shape,
    so their declared shape is dropped (in place: the proto is this module's own parse, and
    get_inputs() shows such inputs as [] either way)."""
    for value in proto.graph.input:
        tensor = value.type.tensor_type if value.type.HasField("tensor_type") else None
        if tensor is not None and tensor.HasField("shape") and not tensor.shape.dim:
            tensor.ClearField("shape")
    return proto


def _externalise(path: str, options: SessionOptions) -> None:
    """Move the optimised model's initializers into the external file its config names."""
    location = options.config_entry(_EXTERNAL_FILE)
    if not location:
        return
    import onnx  # its external-data writer: only for this onnxruntime option

    model = onnx.load(path)
    data = Path(path).parent / location
    data.unlink(missing_ok=True)
    onnx.save_model(
        model,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=location,
        size_threshold=int(options.config_entry(_EXTERNAL_MIN_BYTES, "1024")),
    )
    if not data.exists():  # nothing reached the threshold: onnxruntime still writes the file
        data.write_bytes(b"")


def _onemodel_options(sess_options: Any, backend: str, explicit: bool) -> OnemodelOptions:
    if isinstance(sess_options, OnemodelOptions):
        return dataclasses.replace(sess_options, backend=backend) if explicit else sess_options
    # onnxruntime's CPU provider computes float16 between operators in float32; on CUDA it
    # has float16 kernels and rounds as ONNX types the values.
    intermediates = "float32" if backend == "numpy" else "float16"
    options = OnemodelOptions(backend=backend, float16_intermediates=intermediates)
    if sess_options is not None:
        options.intra_op_threads = int(getattr(sess_options, "intra_op_num_threads", 0) or 0)
        level = getattr(sess_options, "graph_optimization_level", _DEFAULT_LEVEL)
        options.optimization_level = _LEVELS.get(int(level), OptimizationLevel.ALL)
        options.optimized_model_path = getattr(sess_options, "optimized_model_filepath", "") or None
    return options


def _node_arg(value: onnx_proto.ValueInfoProto) -> NodeArg:
    shape: list[int | str | None] = []
    if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
        shape = [_dim(dim) for dim in value.type.tensor_type.shape.dim]
    return NodeArg(value.name, type_string(value.type), shape)


def _dim(dim: onnx_proto.TensorShapeProto.Dimension) -> int | str | None:
    if dim.HasField("dim_value"):
        return dim.dim_value
    return dim.dim_param if dim.HasField("dim_param") else None


def type_string(proto: onnx_proto.TypeProto) -> str:
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
    return onnx_proto.TensorProto.DataType.Name(code).lower()


def _metadata(proto: onnx_proto.ModelProto) -> ModelMetadata:
    return ModelMetadata(
        producer_name=proto.producer_name,
        graph_name=proto.graph.name,
        domain=proto.domain,
        description=proto.doc_string,
        graph_description=proto.graph.doc_string,
        version=proto.model_version if proto.HasField("model_version") else UNKNOWN_MODEL_VERSION,
        custom_metadata_map={entry.key: entry.value for entry in proto.metadata_props},
    )
