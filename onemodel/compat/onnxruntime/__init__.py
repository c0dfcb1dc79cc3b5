"""`onnxruntime` answered by onemodel: the names packages written for onnxruntime use.

`onemodel.compat.install()` registers this package as `onnxruntime` (and its `capi` modules), so
such packages run on onemodel unchanged. docs/moving-from-onnxruntime.md says what maps to what.
"""

from onemodel.compat.onnxruntime.capi._pybind_state import (
    EPFail,
    ExecutionMode,
    ExecutionOrder,
    Fail,
    GraphOptimizationLevel,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    NoSuchFile,
    RunOptions,
    SessionOptions,
    disable_telemetry_events,
    enable_telemetry_events,
    get_all_providers,
    get_available_providers,
    get_device,
    set_default_logger_severity,
    set_default_logger_verbosity,
)
from onemodel.compat.onnxruntime.inference_session import InferenceSession, ModelMetadata, NodeArg

# The onnxruntime release whose Python API this module follows; packages compare against it.
__version__ = "1.20.0"
version = __version__
package_name = "onemodel"


def get_version_string() -> str:
    return __version__


def get_build_info() -> str:
    return f"onemodel's onnxruntime compatibility layer (onnxruntime {__version__} API)"


__all__ = [
    "EPFail",
    "ExecutionMode",
    "ExecutionOrder",
    "Fail",
    "GraphOptimizationLevel",
    "InferenceSession",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "ModelMetadata",
    "NoSuchFile",
    "NodeArg",
    "RunOptions",
    "SessionOptions",
    "__version__",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "get_all_providers",
    "get_available_providers",
    "get_build_info",
    "get_device",
    "get_version_string",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
]
