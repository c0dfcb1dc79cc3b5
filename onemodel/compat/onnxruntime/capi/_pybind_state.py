"""What onnxruntime's native module holds and packages import from it directly: the option
classes and enums, the exception classes, and the process-wide functions.

Options that have no meaning for onemodel are kept as plain attributes (so code that sets and
reads them works) and otherwise ignored; docs/moving-from-onnxruntime.md lists them.
"""

from __future__ import annotations

import enum

from onemodel.backends import KernelPaths
from onemodel.cancellation import CancellationToken
from onemodel.errors import ErrorKind, SessionError

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"


class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """Sequential or parallel node execution; onemodel always runs nodes in order."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class SessionOptions:
    """onnxruntime's session options. `intra_op_num_threads` and `graph_optimization_level`
    reach onemodel's SessionOptions; every other field is stored and ignored."""

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.optimized_model_filepath = ""
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self._config: dict[str, str] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[key] = value

    def get_session_config_entry(self, key: str) -> str:
        return self._config[key]

    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        """Accepted and ignored: onemodel plans for whatever shapes arrive."""

    def add_free_dimension_override_by_denotation(self, denotation: str, value: int) -> None:
        """Accepted and ignored, as above."""

    def register_custom_ops_library(self, path: str) -> None:
        raise NotImplementedError(
            "onemodel cannot load onnxruntime custom-operator libraries (compiled against "
            "onnxruntime's C API); its operators are Python classes in onemodel/graph/operators"
        )


class RunOptions:
    """Per-run options. Setting `terminate` to True stops the runs using these options (as a
    onemodel CancellationToken does); setting it back to False lets new runs start."""

    def __init__(self) -> None:
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.only_execute_path_to_fetches = False
        self._config: dict[str, str] = {}
        self.token = CancellationToken()

    @property
    def terminate(self) -> bool:
        return self.token.cancelled

    @terminate.setter
    def terminate(self, value: bool) -> None:
        if value:
            self.token.cancel()
        elif self.token.cancelled:
            self.token = CancellationToken()

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[key] = value

    def get_run_config_entry(self, key: str) -> str:
        return self._config[key]


# onnxruntime's exception classes, as SessionErrors so that either kind of `except` catches them.


class Fail(SessionError):
    pass


class InvalidArgument(SessionError):
    pass


class NoSuchFile(SessionError):
    pass


class NoModel(SessionError):
    pass


class EngineError(SessionError):
    pass


class RuntimeException(SessionError):
    pass


class InvalidProtobuf(SessionError):
    pass


class ModelLoaded(SessionError):
    pass


class NotImplemented(SessionError):  # onnxruntime's name; this module never needs the builtin
    pass


class InvalidGraph(SessionError):
    pass


class EPFail(SessionError):
    pass


_CLASS_BY_KIND: dict[ErrorKind, type[SessionError]] = {
    ErrorKind.INVALID_INPUT: InvalidArgument,
    ErrorKind.INVALID_MODEL: InvalidGraph,
    ErrorKind.UNSUPPORTED_OPERATOR: NotImplemented,
}


def as_onnxruntime_error(error: SessionError) -> SessionError:
    """The same error as the onnxruntime exception class code written for it catches."""
    cls = _CLASS_BY_KIND.get(error.kind, Fail)
    translated = cls.__new__(cls)
    Exception.__init__(translated, *error.args)
    translated.__dict__.update(error.__dict__)
    return translated


def get_available_providers() -> list[str]:
    """CUDA first where the CuPy backend can reach a device, as onnxruntime orders them."""
    if "cupy" in KernelPaths.available():
        return [CUDA_PROVIDER, CPU_PROVIDER]
    return [CPU_PROVIDER]


def get_all_providers() -> list[str]:
    return [CUDA_PROVIDER, CPU_PROVIDER]


def get_device() -> str:
    return "GPU" if "cupy" in KernelPaths.available() else "CPU"


def set_default_logger_severity(severity: int) -> None:
    """Accepted and ignored: onemodel does not log; it raises or warns."""


def set_default_logger_verbosity(verbosity: int) -> None:
    """Accepted and ignored, as above."""


def disable_telemetry_events() -> None:
    """Accepted and ignored: onemodel sends no telemetry."""


def enable_telemetry_events() -> None:
    """Accepted and ignored: onemodel sends no telemetry."""
