"""ONNX's protobuf messages, without what `import onnx` brings along (issue 16, cold start).

Importing a model needs only the messages generated from onnx/onnx-ml.proto: about 0.05 s
with protobuf. `import onnx` costs about 0.16 s more (its serialization formats, helper,
checker, compose, version converter, importlib.metadata), so this module runs onnx's own
generated module, `onnx/onnx_ml_pb2.py`, from its file under a private name, which does not run
`onnx/__init__.py`. Protobuf registers a proto file once per descriptor pool and makes one
class per message descriptor, so a later `import onnx` adds nothing and gets the very classes
loaded here: an `onnx.ModelProto` a caller builds is a `ModelProto` of this module and the
other way round. Where onnx is already imported, or its generated module is not a plain
file, the ordinary import is used.

Code that needs onnx's Python helpers (shape inference, the checker, `onnx.helper`, saving)
imports onnx itself, where it is used.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

_ONNX_MODULE = "onnx.onnx_ml_pb2"
_PRIVATE_NAME = "onemodel.graph._onnx_ml_pb2"


def _generated_messages() -> ModuleType:
    """onnx's generated module: the one onnx loaded, else the file run without onnx's init."""
    if _ONNX_MODULE in sys.modules:
        return sys.modules[_ONNX_MODULE]
    spec = importlib.util.find_spec("onnx")  # finds the package without running it
    folders = [] if spec is None else list(spec.submodule_search_locations or ())
    sources = [Path(folder) / "onnx_ml_pb2.py" for folder in folders]
    source = next((path for path in sources if path.is_file()), None)
    if source is None:
        return importlib.import_module(_ONNX_MODULE)
    module_spec = importlib.util.spec_from_file_location(_PRIVATE_NAME, source)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from onnx.onnx_ml_pb2 import (
        IR_VERSION,
        AttributeProto,
        FunctionProto,
        GraphProto,
        ModelProto,
        NodeProto,
        SparseTensorProto,
        TensorProto,
        TensorShapeProto,
        TypeProto,
        ValueInfoProto,
    )
else:
    _messages = _generated_messages()
    AttributeProto = _messages.AttributeProto
    FunctionProto = _messages.FunctionProto
    GraphProto = _messages.GraphProto
    ModelProto = _messages.ModelProto
    NodeProto = _messages.NodeProto
    SparseTensorProto = _messages.SparseTensorProto
    TensorProto = _messages.TensorProto
    TensorShapeProto = _messages.TensorShapeProto
    TypeProto = _messages.TypeProto
    ValueInfoProto = _messages.ValueInfoProto
    IR_VERSION = _messages.IR_VERSION  # the newest IR version this onnx defines

__all__ = [
    "IR_VERSION",
    "AttributeProto",
    "FunctionProto",
    "GraphProto",
    "ModelProto",
    "NodeProto",
    "SparseTensorProto",
    "TensorProto",
    "TensorShapeProto",
    "TypeProto",
    "ValueInfoProto",
]


# The newest default-domain opset of the first onnx release with each IR version (onnx's
# release table, onnx.helper.VERSION_TABLE): an onnx whose IR version is N defines at least these.
_OPSET_OF_FIRST_RELEASE_WITH_IR = {10: 21, 11: 23, 12: 24, 13: 25, 14: 28}


def defines_default_opset(version: int) -> bool:
    """Whether the installed onnx defines this opset of the default domain. Its schemas (and so
    the whole onnx package) are asked only above what its IR version already guarantees."""
    known = [opset for ir, opset in _OPSET_OF_FIRST_RELEASE_WITH_IR.items() if ir <= IR_VERSION]
    if 1 <= version <= max(known, default=0):
        return True
    import onnx.defs

    return 1 <= version <= onnx.defs.onnx_opset_version()
