"""An onnxruntime-shaped surface over Session, so code written for onnxruntime moves over by
changing its import: `InferenceSession(path_or_bytes, sess_options, providers)`, `get_inputs`,
`get_outputs`, `get_modelmeta`, `get_providers`, `run(output_names, input_feed)`."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onemodel.backends import KernelPaths
from onemodel.graph.compiled import ValueMeta
from onemodel.session import Session, SessionOptions
from onemodel.tensors import onnx_name

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it: symbolic dims are their names."""

    name: str
    type: str
    shape: list[int | str | None] | None


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    version: int
    custom_metadata_map: dict[str, str] = field(default_factory=dict)
    graph_description: str = ""


def _node_arg(meta: ValueMeta) -> NodeArg:
    element = "undefined" if meta.elem_type is None else onnx_name(meta.elem_type).lower()
    kind = "tensor" if meta.kind == "unknown" else meta.kind
    return NodeArg(meta.name, f"{kind}({element})", None if meta.dims is None else list(meta.dims))


def _backend_for(providers: Sequence[Any] | None) -> tuple[str, list[str]]:
    """Map onnxruntime provider names to a kernel path: CUDA → cupy when it can run here."""
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in providers or [CPU_PROVIDER]]
    if CUDA_PROVIDER in names:
        if "cupy" in KernelPaths.available():
            return "cupy", [CUDA_PROVIDER, CPU_PROVIDER]
        warnings.warn(
            "CUDAExecutionProvider was requested but CuPy cannot reach a CUDA device; running "
            "on the NumPy backend",
            RuntimeWarning,
            stacklevel=3,
        )
    return "numpy", [CPU_PROVIDER]


class InferenceSession:
    """onnxruntime.InferenceSession's common calls, answered by a onemodel Session."""

    def __init__(
        self,
        path_or_bytes: str | bytes | os.PathLike[str],
        sess_options: Any = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[Mapping[str, Any]] | None = None,
        **_: Any,
    ) -> None:
        backend, self._providers = _backend_for(providers)
        options = SessionOptions(backend=backend)
        threads = getattr(sess_options, "intra_op_num_threads", 0)
        options.intra_op_threads = int(threads or 0)
        self._session = Session.load(path_or_bytes, options)
        self._sess_options = sess_options

    def get_inputs(self) -> list[NodeArg]:
        return [_node_arg(meta) for meta in self._session.inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [_node_arg(meta) for meta in self._session.outputs]

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_session_options(self) -> Any:
        return self._sess_options

    def get_modelmeta(self) -> ModelMetadata:
        model = self._session.model_info
        return ModelMetadata(
            producer_name=model.producer_name,
            graph_name=model.graph.name,
            domain=model.domain,
            description=model.doc_string,
            version=model.model_version,
            custom_metadata_map=dict(model.metadata),
        )

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> list[Any]:
        return self._session.run(output_names or None, input_feed)
