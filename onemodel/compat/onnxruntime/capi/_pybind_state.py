"""What onnxruntime's native module holds and packages import from it directly: the option
classes and enums, the exception classes, OrtValue and its kin, the native session and its
I/O binding, and the process-wide functions. The classes live in the modules beside this one;
this module gathers them under onnxruntime's names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from onemodel.backends import KernelPaths
from onemodel.compat.onnxruntime.capi.adapters import AdapterFormat, LoraAdapter
from onemodel.compat.onnxruntime.capi.devices import (
    ArenaExtendStrategy,
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDevice,
    OrtDeviceMemoryType,
    OrtDeviceVendorId,
    OrtMemoryInfo,
    OrtMemoryInfoDeviceType,
    OrtMemType,
    kNextPowerOfTwo,
    kSameAsRequested,
)
from onemodel.compat.onnxruntime.capi.exceptions import (
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoaded,
    NoModel,
    NoSuchFile,
    NotImplemented,
    RuntimeException,
    as_onnxruntime_error,
)
from onemodel.compat.onnxruntime.capi.native_session import (
    InferenceSession,
    SessionIOBinding,
)
from onemodel.compat.onnxruntime.capi.options import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    RunOptions,
    SessionOptions,
)
from onemodel.compat.onnxruntime.capi.ort_value import (
    OrtSparseFormat,
    OrtValue,
    OrtValueVector,
    SparseCooView,
    SparseCsrView,
    SparseTensor,
)

# The onnxruntime release whose API this package follows; packages compare against it.
VERSION = "1.32.0"

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"


def get_available_providers() -> list[str]:
    """CUDA first where the CuPy backend can reach a device, as onnxruntime orders them."""
    if "cupy" in KernelPaths.available():
        return [CUDA_PROVIDER, CPU_PROVIDER]
    return [CPU_PROVIDER]


# Every provider onnxruntime knows by name, highest priority first, as its get_all_providers().
ALL_PROVIDERS = (
    "TensorrtExecutionProvider",
    CUDA_PROVIDER,
    "MIGraphXExecutionProvider",
    "OpenVINOExecutionProvider",
    "DnnlExecutionProvider",
    "VitisAIExecutionProvider",
    "QNNExecutionProvider",
    "NnapiExecutionProvider",
    "VSINPUExecutionProvider",
    "JsExecutionProvider",
    "CoreMLExecutionProvider",
    "DmlExecutionProvider",
    "RknpuExecutionProvider",
    "WebNNExecutionProvider",
    "WebGpuExecutionProvider",
    "XnnpackExecutionProvider",
    "CANNExecutionProvider",
    "AzureExecutionProvider",
    CPU_PROVIDER,
)


def get_all_providers() -> list[str]:
    """The providers onnxruntime knows; onemodel runs CUDA and CPU, and skips the others."""
    return list(ALL_PROVIDERS)


def get_device() -> str:
    return "GPU" if "cupy" in KernelPaths.available() else "CPU"


def get_version_string() -> str:
    return VERSION


def get_build_info() -> str:
    return f"ORT Build Info: onemodel's onnxruntime compatibility layer, onnxruntime {VERSION} API"


def get_default_session_options() -> SessionOptions:
    return SessionOptions()


def create_and_register_allocator(memory_info: OrtMemoryInfo, arena_cfg: Any = None) -> None:
    """Accepted and ignored: onemodel plans its memory per session (docs/memory-planning.md)."""


def create_and_register_allocator_v2(
    provider: str, memory_info: OrtMemoryInfo, options: Any, arena_cfg: Any = None
) -> None:
    """Accepted and ignored, as above."""


# severity → the callback receiving onemodel's messages of that severity or above (0 verbose,
# 1 info, 2 warning, 3 error, 4 fatal); None: no callback.
_logger: dict[str, Any] = {"callback": None, "severity": 2}


def set_default_logger_callback(callback: Callable[..., Any] | None, severity: int = 2) -> None:
    """Send onemodel's session messages to `callback(severity, category, logid,
    code_location, message)`; None restores the default (no messages)."""
    if callback is not None and not callable(callback):
        raise RuntimeError("the logger callback must be callable or None")
    if not 0 <= int(severity) <= 4:
        raise RuntimeError(f"severity {severity} is not one of 0 (verbose) .. 4 (fatal)")
    _logger.update(callback=callback, severity=int(severity))


def log(severity: int, logid: str, message: str) -> None:
    """One message to the logger callback where one is set; its exceptions are swallowed, as
    onnxruntime's are."""
    callback = _logger["callback"]
    if callback is None or severity < _logger["severity"]:
        return
    with contextlib.suppress(Exception):  # a logging callback must not break a session
        callback(severity, "onemodel", logid, "onemodel.compat", message)


def set_default_logger_severity(severity: int) -> None:
    """The least severity sent to the logger callback (onemodel has no other log)."""
    _logger["severity"] = int(severity)


def set_default_logger_verbosity(verbosity: int) -> None:
    """Accepted and ignored, as above."""


def disable_telemetry_events() -> None:
    """Accepted and ignored: onemodel sends no telemetry."""


def enable_telemetry_events() -> None:
    """Accepted and ignored: onemodel sends no telemetry."""


__all__ = [
    "ALL_PROVIDERS",
    "CPU_PROVIDER",
    "CUDA_PROVIDER",
    "VERSION",
    "AdapterFormat",
    "ArenaExtendStrategy",
    "EPFail",
    "EngineError",
    "ExecutionMode",
    "ExecutionOrder",
    "Fail",
    "GraphOptimizationLevel",
    "InferenceSession",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "LoraAdapter",
    "ModelLoaded",
    "NoModel",
    "NoSuchFile",
    "NotImplemented",
    "OrtAllocatorType",
    "OrtArenaCfg",
    "OrtDevice",
    "OrtDeviceMemoryType",
    "OrtDeviceVendorId",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType",
    "OrtSparseFormat",
    "OrtValue",
    "OrtValueVector",
    "RunOptions",
    "RuntimeException",
    "SessionIOBinding",
    "SessionOptions",
    "SparseCooView",
    "SparseCsrView",
    "SparseTensor",
    "as_onnxruntime_error",
    "create_and_register_allocator",
    "create_and_register_allocator_v2",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "get_all_providers",
    "get_available_providers",
    "get_build_info",
    "get_default_session_options",
    "get_device",
    "get_version_string",
    "kNextPowerOfTwo",
    "kSameAsRequested",
    "log",
    "set_default_logger_callback",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
]
