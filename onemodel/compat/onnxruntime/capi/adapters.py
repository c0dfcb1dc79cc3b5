"""onnxruntime's LoRA adapter classes, present so that code probing for them finds them, and
refusing use: onnxruntime's adapter files are its own flatbuffers format, which onemodel does
not read or write. Merge an adapter into the model's weights to run it on onemodel."""

from __future__ import annotations

from typing import Any, NoReturn

_WHY = (
    "onemodel does not read or write onnxruntime's LoRA adapter files (its own flatbuffers "
    "format); merge the adapter into the model's weights instead"
)


def _refused(*_: Any, **__: Any) -> NoReturn:
    raise NotImplementedError(_WHY)


class LoraAdapter:
    Load = staticmethod(_refused)


class AdapterFormat:
    def __getattr__(self, name: str) -> Any:
        return _refused

    read_adapter = staticmethod(_refused)
