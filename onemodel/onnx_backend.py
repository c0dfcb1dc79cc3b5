"""onemodel as an `onnx.backend.base.Backend`, so ONNX's conformance suite can drive it.

`prepare` compiles a ModelProto into a Session on the backend the device names ("CPU": NumPy,
"CUDA": CuPy); `run` feeds the graph's inputs by position, as the suite does.
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx.backend.base import Backend, BackendRep

from onemodel.backends import KernelPaths
from onemodel.graph.importer import model_from_proto
from onemodel.session import Session, SessionOptions

DEVICE_BACKENDS = {"CPU": "numpy", "CUDA": "cupy"}


class OnemodelRep(BackendRep):
    def __init__(self, session: Session) -> None:
        self.session = session
        self.names = [meta.name for meta in session.inputs]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        arrays = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        results = self.session.run(None, dict(zip(self.names, arrays, strict=False)))
        return tuple(self._host(r) for r in results)

    def _host(self, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, list):
            return [self._host(element) for element in value]
        return self.session.kernels.memory.to_host(value)


class OnemodelBackend(Backend):
    # SessionOptions.checked for the sessions it makes (None: the ONEMODEL_CHECKED default).
    checked: bool | None = None

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> OnemodelRep:
        backend = DEVICE_BACKENDS[device.split(":")[0]]
        options = SessionOptions(backend=backend, checked=cls.checked)
        return OnemodelRep(Session.create(model_from_proto(model), options))

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        backend = DEVICE_BACKENDS.get(device.split(":")[0])
        return backend is not None and backend in KernelPaths.available()
