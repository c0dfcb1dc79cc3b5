"""Sessions (seed 000 §4): options, metadata, input validation, the plan cache and runs.

A session compiles its model once, picks its backend once, and makes an ExecutionPlan the
first time it sees a list of input types and shapes. `run` may be called from many threads:
plans are shared, each run takes a RunState from its plan's pool.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from onemodel.arrays import OutputsAs, from_other_library, output_converter
from onemodel.backends import BackendUnavailableError, KernelPaths
from onemodel.backends.paths import lacking_types
from onemodel.cancellation import CancellationToken, RunGuard
from onemodel.errors import ErrorKind, SessionError
from onemodel.graph import ir
from onemodel.graph.compiled import CompiledGraph, ValueMeta
from onemodel.graph.element_types import element_types
from onemodel.graph.executor import GraphExecutor, compile_body
from onemodel.graph.float16_widening import widen_float16
from onemodel.graph.gc_pause import paused_gc
from onemodel.graph.importer import ModelSource, load_model
from onemodel.graph.onnx_proto import IR_VERSION, defines_default_opset
from onemodel.graph.operators.base import TensorSpec
from onemodel.graph.passes.base import OptimizationLevel
from onemodel.graph.plan import ExecutionPlan
from onemodel.graph.values import signature_of
from onemodel.graph.weights import WeightStorage
from onemodel.tensors import TensorShapeError, numpy_dtype_for_onnx, onnx_code_for_numpy, onnx_name
from onemodel.tensors.buffers import checked_by_default
from onemodel.tensors.shapes import MAX_BYTES, MAX_RANK, check_shape


def _option(kind: type[enum.Enum], name: str, given: Any) -> Any:
    """The member of `kind` that `given` names: a member, its value, or its name in any case;
    anything else is a SessionError(UNSUPPORTED) that lists the choices."""
    if isinstance(given, kind):
        return given
    for member in kind:
        if given == member.value or (
            isinstance(given, str) and given.lower() in (member.name.lower(), str(member.value))
        ):
            return member
    choices = ", ".join(repr(m.name.lower()) for m in kind)
    raise SessionError(ErrorKind.UNSUPPORTED, f"{name} is one of {choices}, not {given!r}")


def _onnx_version() -> str:
    """The installed onnx's version, for errors (importing onnx: only when one is raised)."""
    import onnx

    return onnx.__version__


class ExecutionMode(enum.Enum):
    FAST = "fast"
    EXACT = "exact"


@dataclass
class SessionOptions:
    """How a session runs. `intra_op_threads` (0: all cores) bounds the backend's threads in
    each run (NumPy: BLAS threads through threadpoolctl) and changes speed only, never bits;
    `optimization_level` selects the
    graph passes (docs/graph-passes.md) and `optimized_model_path` saves the graph they leave
    as an ONNX file; `weight_storage` keeps large float32 weights as float16 or bfloat16 bits,
    widened where they are read; `backend` names a kernel path
    (`KernelPaths.names()`), None picking the best available; `checked` poisons dead slab
    blocks with 0xFF (default: the ONEMODEL_CHECKED environment variable); `run_timeout`
    (seconds) stops any run that takes longer with SessionError(CANCELLED); `memory_limit`
    (bytes) bounds a run's slab, scratch, dynamic values and Loop/Scan accumulations, each
    checked before it is allocated (SessionError(UNSUPPORTED) beyond it); `outputs_as` is how
    `run` returns outputs: "backend" (its NumPy or CuPy arrays), "numpy", or "input" (the
    library of the arrays fed in, onemodel/arrays.py); `float16_intermediates="float32"` holds
    float16 values in float32 between operators, as onnxruntime's CPU provider computes them
    (onemodel/graph/float16_widening.py), where the default rounds each to float16 as ONNX
    types them."""

    mode: ExecutionMode | str = ExecutionMode.FAST
    intra_op_threads: int = 0
    optimization_level: OptimizationLevel | str | int = OptimizationLevel.ALL
    optimized_model_path: str | None = None
    weight_storage: WeightStorage | str = WeightStorage.ORIGINAL
    max_cached_plans: int = 16
    backend: str | None = None
    checked: bool | None = None
    run_timeout: float | None = None
    memory_limit: int | None = None
    outputs_as: OutputsAs = "backend"
    float16_intermediates: Literal["float16", "float32"] = "float16"

    def __post_init__(self) -> None:
        # Spelled as strings ("exact", "ALL", "binary16") too: a mode compared by identity
        # would otherwise take a string for fast mode without a word.
        self.mode = _option(ExecutionMode, "mode", self.mode)
        self.optimization_level = _option(
            OptimizationLevel, "optimization_level", self.optimization_level
        )
        self.weight_storage = _option(WeightStorage, "weight_storage", self.weight_storage)


class Session:
    """A compiled model that runs on one backend; thread-safe."""

    def __init__(
        self,
        model: ir.Model,
        options: SessionOptions | None = None,
        cancel: CancellationToken | None = None,
    ) -> None:
        self.options = options = options or SessionOptions()
        if not 1 <= model.ir_version <= IR_VERSION:
            raise SessionError(
                ErrorKind.INVALID_MODEL,
                f"IR version {model.ir_version} is not one this onnx ({_onnx_version()}) "
                f"defines (1..{IR_VERSION})",
            )
        default_opset = model.opsets.get("")
        if default_opset is not None and not defines_default_opset(default_opset):
            import onnx.defs

            raise SessionError(
                ErrorKind.INVALID_MODEL,
                f"the model imports opset {default_opset} of the default domain; this onnx "
                f"({_onnx_version()}) defines 1..{onnx.defs.onnx_opset_version()}",
            )
        self.kernels = _kernels(options.backend, model)
        self.model_info = model
        if options.float16_intermediates not in ("float16", "float32"):
            raise SessionError(
                ErrorKind.UNSUPPORTED,
                f"float16_intermediates is 'float16' or 'float32', not "
                f"{options.float16_intermediates!r}",
            )
        if options.float16_intermediates == "float32":
            model = widen_float16(model)
        checked = checked_by_default() if options.checked is None else options.checked
        with paused_gc():
            self._graph = CompiledGraph(
                model,
                self.kernels,
                exact=_option(ExecutionMode, "mode", options.mode) is ExecutionMode.EXACT,
                checked=checked,
                guard=None if cancel is None else RunGuard(cancel, None),
                level=_option(OptimizationLevel, "optimization_level", options.optimization_level),
                weight_storage=_option(WeightStorage, "weight_storage", options.weight_storage),
                bodies=compile_body,
            )
        if options.optimized_model_path:
            import onnx

            from onemodel.graph.passes.export import optimized_model  # ~10 ms: only when asked

            onnx.save(optimized_model(self._graph, model), options.optimized_model_path)
        self._executor = GraphExecutor(
            self._graph,
            max_cached_plans=options.max_cached_plans,
            checked=checked,
            threads=options.intra_op_threads,
        )
        self._closed = False
        self._required = {
            meta.name for meta, value_id in zip(self.inputs, self._graph.input_ids, strict=True)
            if value_id not in self._graph.defaults
        }  # fmt: skip
        self._plain = _plain_inputs(self.inputs, self._graph.input_ids)
        self._all_outputs = list(range(len(self.outputs)))
        # Whether every run needs a RunGuard even when the call gives no token or timeout.
        self._always_guarded = options.run_timeout is not None or options.memory_limit is not None
        self._runs_plainly = options.outputs_as == "backend" and not self._always_guarded

    @classmethod
    def load(
        cls,
        source: ModelSource,
        options: SessionOptions | None = None,
        cancel: CancellationToken | None = None,
    ) -> Session:
        """A session for a model at a path, in bytes, or in a binary stream; `cancel` is
        checked between nodes while importing and between operators while compiling."""
        check = None if cancel is None else RunGuard(cancel, None).check
        return cls(load_model(source, check=check), options, cancel)

    @classmethod
    def create(
        cls,
        model: ir.Model,
        options: SessionOptions | None = None,
        cancel: CancellationToken | None = None,
    ) -> Session:
        """A session for an already imported model (the model may be dropped afterwards)."""
        return cls(model, options, cancel)

    # -- metadata ------------------------------------------------------------------------------

    @property
    def inputs(self) -> list[ValueMeta]:
        return self._graph.inputs

    @property
    def outputs(self) -> list[ValueMeta]:
        return self._graph.outputs

    @property
    def backend(self) -> str:
        return self.kernels.name

    @property
    def graph_summary(self) -> dict[str, Any]:
        """What compilation left: the passes that ran, the node count before and after them,
        and the bytes the weights occupy (after weight storage)."""
        return {
            "passes": list(self._graph.passes_ran),
            "nodes_before_passes": self._graph.nodes_before_passes,
            "nodes": len(self._graph.nodes),
            "weight_storage": WeightStorage(self.options.weight_storage).value,
            "weight_bytes": self._graph.weight_bytes,
        }

    def plan_count(self) -> int:
        return self._executor.plan_count()

    def plans(self) -> list[ExecutionPlan]:
        """The cached plans, oldest first (for tests and tools)."""
        return self._executor.plans()

    # -- running -------------------------------------------------------------------------------

    def run(
        self,
        output_names: Sequence[str] | None,
        feeds: Mapping[str, Any],
        *,
        profile: dict[str, list[float]] | None = None,
        cancel: CancellationToken | None = None,
        timeout: float | None = None,
        trace: list[tuple] | None = None,
        outputs_as: OutputsAs | None = None,
    ) -> list[Any]:
        """The outputs named (all when None), in that order, for the given inputs (any array
        with DLPack; `outputs_as` overrides the session's option for this call).

        `cancel` (a token another thread may cancel) and `timeout` (seconds; default the
        session's `run_timeout`) are checked between operators and in every Loop and Scan
        iteration; either stops the run with SessionError(CANCELLED) and leaves the session
        usable. `trace` (a list) gets one record per executed step: (node name, op type,
        perf_counter start, seconds, input shapes)."""
        if (
            self._runs_plainly
            and output_names is None
            and cancel is None
            and timeout is None
            and outputs_as is None
        ):  # every output, as the backend's arrays, no guard: nothing to decide per call
            return self._run(feeds, None, profile, None, trace)
        wanted = self._all_outputs if output_names is None else self._wanted(output_names)
        outputs_as = outputs_as or self.options.outputs_as
        handed_back = (
            None
            if outputs_as == "backend"
            else output_converter(outputs_as, feeds, self.kernels.xp)
        )
        guard = None if cancel is None and timeout is None else self._guard(cancel, timeout)
        if guard is None and self._always_guarded:
            guard = self._guard(None, None)
        results = self._run(feeds, None, profile, guard, trace)
        if wanted is not self._all_outputs:
            results = [results[position] for position in wanted]
        return results if handed_back is None else handed_back(results)

    def run_into(
        self,
        feeds: Mapping[str, Any],
        outputs: Mapping[str, Any],
        *,
        cancel: CancellationToken | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        """Like `run`, writing the named outputs into the caller's arrays (checked first)."""
        return self._run(feeds, outputs, None, self._guard(cancel, timeout))

    def _guard(self, cancel: CancellationToken | None, timeout: float | None) -> RunGuard | None:
        timeout = self.options.run_timeout if timeout is None else timeout
        limit = self.options.memory_limit
        if cancel is None and timeout is None and limit is None:
            return None
        return RunGuard(cancel, timeout, limit)

    def run_single(self, array: Any) -> Any:
        """A single-input model's first output for one array."""
        if len(self.inputs) != 1:
            raise SessionError(
                ErrorKind.INVALID_INPUT,
                f"run_single needs a model with one input; this one has {len(self.inputs)}",
            )
        return self._run({self.inputs[0].name: array}, None, None, self._guard(None, None))[0]

    def close(self) -> None:
        """Refuse new runs; runs in progress finish with the memory they hold."""
        self._closed = True
        self._executor.clear()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(
        self,
        feeds: Mapping[str, Any],
        outputs: Mapping[str, Any] | None,
        profile: dict[str, list[float]] | None,
        guard: RunGuard | None,
        trace: list[tuple] | None = None,
    ) -> list[Any]:
        if self._closed:
            raise SessionError(ErrorKind.DISPOSED, "the session is closed")
        taken = self._plain_feeds(feeds) if self._plain is not None else None
        if taken is None:
            signature, arrays = self._inputs(feeds)
            entry = self._executor.plan(signature)
        else:
            entry, arrays = taken
        targets = self._targets(entry[0], outputs) if outputs else None
        if guard is not None:
            guard.charge(entry[0].memory.slab_bytes, what="the plan's slab")
        return self._executor.run_entry(entry, arrays, targets, profile, guard, trace)

    def _wanted(self, output_names: Sequence[str] | None) -> list[int]:
        names = [meta.name for meta in self.outputs]
        if output_names is None:
            return list(range(len(names)))
        positions = []
        for name in output_names:
            if name not in names:
                raise SessionError(
                    ErrorKind.INVALID_INPUT,
                    f"the model has no output '{name}'; its outputs are {', '.join(names)}",
                    value=name,
                )
            positions.append(names.index(name))
        return positions

    def _inputs(self, feeds: Mapping[str, Any]) -> tuple[tuple, dict[int, Any]]:
        """Validate and convert the caller's inputs before anything runs."""
        known = {meta.name: meta for meta in self.inputs}
        for name in feeds:
            if name not in known:
                raise SessionError(
                    ErrorKind.INVALID_INPUT,
                    f"the model has no input '{name}'; its inputs are {', '.join(known)}",
                    value=name,
                )
        missing = sorted(self._required - set(feeds))
        if missing:
            raise SessionError(
                ErrorKind.INVALID_INPUT,
                "missing required input(s): " + ", ".join(missing),
                value=missing[0],
            )
        signature, arrays = [], {}
        for meta, value_id in zip(self.inputs, self._graph.input_ids, strict=True):
            if meta.name not in feeds:
                signature.append(None)
                continue
            value = self._value(meta, feeds[meta.name])
            signature.append(signature_of(value))
            arrays[value_id] = value
        return tuple(signature), arrays

    def _plain_feeds(self, feeds: Mapping[str, Any]) -> tuple[tuple, dict[int, Any]] | None:
        """The common case without conversions: every input given as a C-contiguous backend
        array of its declared type, fixed extents as declared, not empty (an empty array may
        hide a shape whose prefix products overflow). Returns the plan entry (keyed by the
        shapes alone: the types are the declared ones) and the arrays by value id. None:
        anything else, for `_inputs`'s full checks and their messages."""
        plain = self._plain
        if len(feeds) != len(plain):
            return None
        ndarray = self.kernels.xp.ndarray
        arrays, shapes = {}, []
        for name, value_id, _, dtype, dims, fixed in plain:
            value = feeds.get(name)
            if type(value) is not ndarray or value.dtype != dtype or not value.flags.c_contiguous:
                return None
            shape = value.shape
            if shape != fixed:  # a fully fixed shape was checked against the limits already
                if not 0 < value.nbytes <= MAX_BYTES or len(shape) > MAX_RANK:
                    return None
                if dims is not None and (
                    len(shape) != len(dims)
                    or any(d is not None and d != n for d, n in zip(dims, shape, strict=True))
                ):
                    return None
            shapes.append(shape)
            arrays[value_id] = value
        key = tuple(shapes)
        entry = self._executor.by_key.get(key)
        if entry is None:
            entry = self._executor.entry(key, lambda: self._plain_signature(key))
        return entry, arrays

    def _plain_signature(self, shapes: tuple[tuple[int, ...], ...]) -> tuple:
        return tuple(
            TensorSpec(entry[2], shape) for entry, shape in zip(self._plain, shapes, strict=True)
        )

    def _value(self, meta: ValueMeta, value: Any) -> Any:
        """A caller's value by its declared kind: sequences are lists, an empty optional None."""
        kind = meta.contents if meta.kind == "optional" else meta.kind
        if meta.kind == "optional" and value is None:
            return None
        if kind == "sequence":
            if not isinstance(value, (list, tuple)):
                raise SessionError(
                    ErrorKind.INVALID_INPUT,
                    f"expects a sequence (a list of arrays), got {type(value).__name__}",
                    value=meta.name,
                )
            element = dataclasses.replace(meta, kind="tensor", dims=None)
            return [self._converted(element, item) for item in value]
        if value is None:
            raise SessionError(
                ErrorKind.INVALID_INPUT,
                "None is only accepted for optional inputs",
                value=meta.name,
            )
        return self._converted(meta, value)

    def _converted(self, meta: ValueMeta, value: Any) -> Any:
        xp = self.kernels.xp
        declared = meta.elem_type
        if isinstance(value, (xp.ndarray, np.ndarray)):
            array = value
        elif (taken := from_other_library(value, xp, meta.name)) is not None:
            array = taken
        elif declared is not None:
            try:
                array = np.asarray(value, dtype=numpy_dtype_for_onnx(declared))
            except (TypeError, ValueError, OverflowError) as error:
                raise SessionError(
                    ErrorKind.INVALID_INPUT,
                    f"cannot convert the given {type(value).__name__} to "
                    f"tensor({onnx_name(declared).lower()}): {error}",
                    value=meta.name,
                ) from None
        else:
            array = np.asarray(value)
        if array.dtype.kind in "US" and declared == 8:  # STRING: NumPy keeps str objects
            array = array.astype(object)
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        try:
            code = onnx_code_for_numpy(array.dtype)
        except Exception:
            raise SessionError(
                ErrorKind.INVALID_INPUT,
                f"arrays of dtype {array.dtype} are not ONNX tensors",
                value=meta.name,
            ) from None
        if declared is not None and code != declared:
            raise SessionError(
                ErrorKind.INVALID_INPUT,
                f"expects element type {onnx_name(declared)}, got {onnx_name(code)} "
                f"({array.dtype})",
                value=meta.name,
            )
        _check_dims(meta, array.shape)
        try:
            check_shape(array.shape, array.dtype.itemsize)
        except TensorShapeError as error:
            raise SessionError(ErrorKind.INVALID_INPUT, str(error), value=meta.name) from None
        array = xp.asarray(array)
        # np.ascontiguousarray would turn a 0-d input into 1-d
        return array if array.flags.c_contiguous else xp.array(array, order="C")

    def _targets(self, plan: ExecutionPlan, outputs: Mapping[str, Any]) -> dict[int, Any]:
        """Caller output arrays by value id, checked against static output specs."""
        by_name = {meta.name: vid for meta, vid in zip(self.outputs, plan.output_ids, strict=True)}
        targets = {}
        for name, array in outputs.items():
            value_id = by_name.get(name)
            if value_id is None:
                raise SessionError(
                    ErrorKind.INVALID_INPUT, f"the model has no output '{name}'", value=name
                )
            if not array.flags.c_contiguous:
                raise SessionError(
                    ErrorKind.INVALID_INPUT, "output buffers must be C-contiguous", value=name
                )
            spec = plan.specs[value_id]
            if spec is not None and (
                tuple(array.shape) != spec.shape or array.dtype != spec.numpy_dtype
            ):
                raise SessionError(
                    ErrorKind.INVALID_INPUT,
                    f"the output buffer is {array.dtype}{list(array.shape)}; the output is "
                    f"{spec.numpy_dtype}{list(spec.shape)}",
                    value=name,
                )
            targets[value_id] = array
        return targets


def _check_dims(meta: ValueMeta, shape: tuple[int, ...]) -> None:
    """Rank and fixed extents must match the declaration; symbolic dims take any extent."""
    if meta.dims is None:
        return
    if len(shape) != len(meta.dims) and not meta.dims:
        raise SessionError(
            ErrorKind.INVALID_INPUT,
            f"is declared a scalar (rank 0), got shape {list(shape)}: feed a 0-d array, "
            "np.array(value, dtype=...) rather than np.array([value]) "
            "(onemodel.compat takes any shape here, as onnxruntime does)",
            value=meta.name,
        )
    if len(shape) != len(meta.dims):
        raise SessionError(
            ErrorKind.INVALID_INPUT,
            f"expects rank {len(meta.dims)} {_dims_text(meta.dims)}, got shape {list(shape)}",
            value=meta.name,
        )
    for axis, (declared, actual) in enumerate(zip(meta.dims, shape, strict=True)):
        if isinstance(declared, int) and declared != actual:
            raise SessionError(
                ErrorKind.INVALID_INPUT,
                f"expects extent {declared} on axis {axis} {_dims_text(meta.dims)}, got shape "
                f"{list(shape)}",
                value=meta.name,
            )


def _plain_inputs(metas: Sequence[ValueMeta], value_ids: Sequence[int]) -> tuple | None:
    """Per input (name, value id, ONNX type, NumPy dtype, fixed extents or None for symbolic
    ones, the whole shape when every extent is fixed and its array not empty) when every input
    is a tensor of a numeric type, for `Session._plain_feeds`."""
    plain = []
    for meta, value_id in zip(metas, value_ids, strict=True):
        code = meta.elem_type
        if meta.kind != "tensor" or code is None:
            return None
        dtype = np.dtype(numpy_dtype_for_onnx(code))
        if dtype.kind == "O" or onnx_code_for_numpy(dtype) != code:
            return None
        dims = (
            None
            if meta.dims is None
            else tuple(d if isinstance(d, int) else None for d in meta.dims)
        )
        fixed = None
        if dims is not None and None not in dims:
            nbytes = math.prod(dims) * dtype.itemsize
            fixed = dims if 0 < nbytes <= MAX_BYTES and len(dims) <= MAX_RANK else None
        plain.append((meta.name, value_id, code, dtype, dims, fixed))
    return tuple(plain)


def _dims_text(dims: Sequence[ir.Dim]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _kernels(name: str | None, model: ir.Model) -> Any:
    """The named backend, or the best one that holds every element type the model uses: a
    GPU backend lacking one (CuPy has no bfloat16, float8, 4-bit or string arrays) gives way to
    NumPy with a warning, or is refused when it was asked for by name."""
    try:
        kernels = KernelPaths.best() if name is None else KernelPaths.get(name)
    except (BackendUnavailableError, ValueError) as error:
        raise SessionError(ErrorKind.UNSUPPORTED, str(error)) from None
    if kernels.xp is np:
        return kernels  # NumPy arrays hold every element type; no need to scan the model
    lacking = lacking_types(kernels, element_types(model))
    if not lacking:
        return kernels
    described = ", ".join(
        f"{onnx_name(code)} (used by '{where}')" for code, where in lacking.items()
    )
    message = f"the {kernels.name} backend has no arrays of {described}"
    if name is not None:
        raise SessionError(ErrorKind.UNSUPPORTED, f"{message}; the numpy backend runs this model")
    warnings.warn(f"{message}; running on numpy instead", RuntimeWarning, stacklevel=4)
    return KernelPaths.get("numpy")
