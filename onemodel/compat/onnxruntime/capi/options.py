"""onnxruntime's option classes and their enums: SessionOptions, RunOptions.

The fields that have a onemodel counterpart reach it (inference_session.py translates them);
the others are kept as plain attributes, so that code that sets and reads them works, and are
otherwise ignored; docs/moving-from-onnxruntime.md lists which is which.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from onemodel.cancellation import CancellationToken


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
    """onnxruntime's session options. These take effect: `intra_op_num_threads`,
    `graph_optimization_level`, `optimized_model_filepath` (with the external-initializer config
    entries), `enable_profiling` / `profile_file_prefix`, the free-dimension overrides and the
    added initializers; every other field is stored and ignored."""

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
        self.free_dimensions_by_name: dict[str, int] = {}
        self.free_dimensions_by_denotation: dict[str, int] = {}
        # name → array replacing the model's initializer; file name → bytes of external data.
        self.initializers: dict[str, Any] = {}
        self.external_files: dict[str, bytes] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise RuntimeError(f"SessionOptions does not have configuration with key: {key}")
        return self._config[key]

    def config_entry(self, key: str, default: str = "") -> str:
        """The entry, or `default` where none was added (for onemodel's own reading)."""
        return self._config.get(key, default)

    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        """Fix every dimension named `name` in the model's inputs to `value`."""
        self.free_dimensions_by_name[name] = int(value)

    def add_free_dimension_override_by_denotation(self, denotation: str, value: int) -> None:
        """Fix every input dimension with this denotation (DATA_BATCH...) to `value`."""
        self.free_dimensions_by_denotation[denotation] = int(value)

    def add_initializer(self, name: str, ort_value: Any) -> None:
        """Use this OrtValue's tensor instead of the model's initializer `name`."""
        self.initializers[name] = ort_value.numpy()

    def add_external_initializers(self, names: Sequence[str], ort_values: Sequence[Any]) -> None:
        """Initializers whose data the model keeps outside it, given by the caller."""
        if len(names) != len(ort_values):
            raise RuntimeError("names and ort_values must be of the same length")
        for name, value in zip(names, ort_values, strict=True):
            self.add_initializer(name, value)

    def add_external_initializers_from_files_in_memory(
        self, file_names: Sequence[str], buffers: Sequence[Any], lengths: Sequence[int]
    ) -> None:
        """The contents of external-data files, by the file name the model refers to."""
        if not len(file_names) == len(buffers) == len(lengths):
            raise RuntimeError("file_names, buffers and lengths must be of the same length")
        for name, buffer, length in zip(file_names, buffers, lengths, strict=True):
            self.external_files[str(name)] = bytes(memoryview(buffer).cast("B")[: int(length)])

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
        self.adapters: list[Any] = []

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
        if key not in self._config:
            raise RuntimeError(f"RunOptions does not have configuration with key: {key}")
        return self._config[key]

    def add_active_adapter(self, adapter: Any) -> None:
        """Feed this LoraAdapter's parameters to the runs using these options (as the model
        inputs of their names, unless the run's feed gives them)."""
        self.adapters.append(adapter)
