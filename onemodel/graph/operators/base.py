"""The operator contract (seed 000 §2): what every operator class provides to the runtime.

An operator instance is made once per node when a model is compiled. It holds what its
attributes fixed and nothing else, and is shared by every plan and every concurrent run.

- `infer` states the outputs for one set of input types and shapes: a `TensorSpec` per output,
  or a `Constant` per output when the outputs are known without running (Shape, Size,
  Constant). It raises `NeedsRunTimeValues` when it needs an input value that is not known at
  plan time (Reshape with a computed shape); the node is then shaped again in every run.
  `infer` returns one entry per node output, absent optional outputs ("") included.
- `run` computes. For a node with static outputs the runtime passes preallocated, C-contiguous
  output arrays (`outputs`), which `run` must fill (write with `out=` or `[...] =`); `run`
  returns nothing.
  An operator with `outputs_data_dependent` gets `outputs=None` and returns new arrays.
- `bind` (optional) settles once per run state what `run` decides in every run, for a static
  step of a fast-mode plan whose input and output specs it is given (`BoundStep`): it returns
  a call taking `run`'s arguments, or None for `run` itself. The call runs only inside a run
  (NumPy's errors ignored already) and must give `run`'s bits.
- Flags: `supports_exact`, `in_place_input` (output 0 may take that input's memory: `run`
  must then be correct when they are the same array), `view_of_input` (output 0 is that input
  reshaped as `infer` said; `run` is never called), `outputs_data_dependent`, and
  `foldable` (False: never computed ahead into a constant, by a plan or by the constant-folding
  pass, even when every input is constant: random generators, Widen).

Arrays are those of the session's backend (`ctx.xp`: numpy or cupy); operators never import
either for computing. Shapes and small constant inputs (`InferContext.constant`) are host NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from onemodel.errors import ErrorKind, SessionError
from onemodel.graph.ir import Node
from onemodel.tensors import Arena, numpy_dtype_for_onnx, onnx_name
from onemodel.tensors.errors import TensorError
from onemodel.tensors.shapes import check_shape

Array = Any  # an array of the session's backend (numpy.ndarray or cupy.ndarray)
MICROSOFT = "com.microsoft"  # onnxruntime's contrib-operator domain
INTERNAL_DOMAIN = "onemodel.internal"  # operators only graph rewrites emit
_MISSING = object()


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """An output's element type (ONNX code) and concrete shape for one plan."""

    dtype: int
    shape: tuple[int, ...]

    @property
    def numpy_dtype(self) -> np.dtype:
        return numpy_dtype_for_onnx(self.dtype)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.numpy_dtype.itemsize  # math.prod: ~10x np.prod


@dataclass(frozen=True, slots=True)
class Constant:
    """An output known at plan time (a host NumPy array); the node is then not scheduled."""

    value: np.ndarray


class NeedsRunTimeValues(Exception):
    """Raised by `infer` when an input value it needs is only known while running."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What an operator may know about its node: identity, opset and attributes."""

    name: str
    op_type: str
    domain: str
    opset: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: Mapping[str, Any] = field(default_factory=dict)
    ir: Node | None = None
    # Values of enclosing graphs the node's subgraphs read; they follow `inputs` in `run`.
    captured: tuple[str, ...] = ()
    # Compiles one of the node's subgraphs into a runnable body (If, Loop, Scan).
    compile_body: Callable[[Any], Any] | None = None

    @classmethod
    def of(
        cls,
        node: Node,
        opset: int,
        captured: tuple[str, ...] = (),
        compile_body: Callable[[Any], Any] | None = None,
    ) -> NodeInfo:
        return cls(
            node.name, node.op_type, node.domain, opset, node.inputs, node.outputs,
            node.attributes, node, captured, compile_body,
        )  # fmt: skip

    @property
    def label(self) -> str:
        return f"{self.op_type} (opset {self.opset})"

    def attr(self, name: str, default: Any = _MISSING) -> Any:
        """An attribute's value; a required one that is missing makes the model invalid."""
        value = self.attributes.get(name, _MISSING)
        if value is not _MISSING:
            if not _same_kind(value, default):
                raise self.invalid(
                    f"{self.op_type} attribute '{name}' holds {type(value).__name__} "
                    f"{value!r:.60}, not the {type(default).__name__} it takes"
                )
            return value
        if default is _MISSING:
            raise self.invalid(f"{self.op_type} needs the attribute '{name}'")
        return default

    def invalid(self, message: str, value: str | None = None) -> SessionError:
        return SessionError(ErrorKind.INVALID_MODEL, message, node=self.name, value=value)

    def bad_input(self, message: str, value: str | None = None) -> SessionError:
        return SessionError(ErrorKind.INVALID_INPUT, message, node=self.name, value=value)

    def unsupported(self, message: str, value: str | None = None) -> SessionError:
        """A valid use of the operator that onemodel does not run (training modes, ...)."""
        return SessionError(ErrorKind.UNSUPPORTED, message, node=self.name, value=value)


def _same_kind(value: Any, default: Any) -> bool:
    """Whether an attribute value has the kind its default shows (numbers, text, lists);
    required attributes and None defaults say nothing, so anything passes."""
    if default is _MISSING or default is None:
        return True
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
            value, bool
        )
    if isinstance(default, (str, bytes)):
        return isinstance(value, (str, bytes))
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple, np.ndarray))
    return True


class InferContext:
    """The inputs of a node as `infer` sees them: specs, and values where known."""

    __slots__ = ("_constants", "node", "specs")

    def __init__(
        self,
        node: NodeInfo,
        specs: Sequence[TensorSpec | None],
        constants: Sequence[np.ndarray | None],
    ) -> None:
        self.node = node
        self.specs = specs
        self._constants = constants

    def __len__(self) -> int:
        return len(self.specs)

    def has(self, index: int) -> bool:
        """Whether optional input `index` was given."""
        return index < len(self.specs) and self.specs[index] is not None

    def spec(self, index: int) -> TensorSpec:
        spec = self.specs[index] if index < len(self.specs) else None
        if spec is None:
            raise self.node.invalid(f"{self.node.op_type} needs input {index}")
        return spec

    def shape(self, index: int) -> tuple[int, ...]:
        return self.spec(index).shape

    def dtype(self, index: int) -> int:
        return self.spec(index).dtype

    def constant(self, index: int) -> np.ndarray | None:
        """The input's value on the host when known now, else None."""
        if index >= len(self._constants):
            return None
        return self._constants[index]

    def value(self, index: int) -> np.ndarray:
        """The input's value on the host; raises NeedsRunTimeValues when not known now."""
        value = self.constant(index)
        if value is None:
            raise NeedsRunTimeValues
        return value

    def output(self, dtype: int, shape: Sequence[int]) -> TensorSpec:
        """A checked output spec: shapes beyond the tensor limits are refused before allocating."""
        try:
            dims = check_shape(tuple(int(d) for d in shape), numpy_dtype_for_onnx(dtype).itemsize)
        except TensorError as error:
            raise self.node.bad_input(str(error), self.node.outputs[0]) from None
        return TensorSpec(dtype, dims)


class RunContext:
    """What `run` may use: the backend's namespace and kernels, whether the run is exact, and
    scratch memory that lasts until the run ends."""

    __slots__ = ("_kept", "_next", "arena", "exact", "guard", "keeps_scratch", "kernels",
                 "observer", "xp")  # fmt: skip

    def __init__(
        self, kernels: Any, exact: bool, arena: Arena | None = None, *, keeps_scratch: bool = False
    ) -> None:
        """Scratch comes from `arena` when one is given (checked runs: poisoned, with canaries),
        from arrays kept from run to run with `keeps_scratch` (a run state's context), and
        otherwise is a plain new array (plan-time evaluation, direct calls)."""
        self.kernels = kernels
        self.xp = kernels.exact_xp if exact else kernels.xp
        self.exact = exact
        self.arena = arena
        self.keeps_scratch = keeps_scratch and arena is None
        self._kept: list[Array] = []  # the scratch arrays of the last run, in request order
        self._next = 0
        self.guard: Any = None  # the current run's RunGuard (cancellation, timeout), if any
        # While a profiled or traced run runs a step: (profile, trace, step name, step label),
        # so that the bodies the step enters (If, Loop, Scan) add their rows under it.
        self.observer: Any = None

    def begin_run(self) -> None:
        """Reclaim the previous run's scratch for this one."""
        self._next = 0
        if self.arena is not None:
            self.arena.reset()

    def check(self, node: str | None = None) -> None:
        """Raise SessionError(CANCELLED) if the run was cancelled or ran out of time; long
        operators (Loop and Scan iterations) call it as they go."""
        if self.guard is not None:
            self.guard.check(node)

    def empty(self, shape: Sequence[int], dtype: int) -> Array:
        """A new array for a data-dependent output."""
        return self.xp.empty(tuple(shape), dtype=numpy_dtype_for_onnx(dtype))

    def scratch(self, shape: Sequence[int], dtype: Any) -> Array:
        """A C-contiguous array valid until the run ends (contents unspecified).

        A warm run asks for the same scratch in the same order as the run before it, so a run
        state's context hands back the array it made for the same request last time (a shape
        and dtype compare, where an arena allocation costs several microseconds) and makes a
        new one only where the sequence differs, dropping the rest. Each array is handed out
        once per run, so two requests never share memory."""
        if self.keeps_scratch:
            index = self._next
            kept = self._kept
            if index < len(kept):
                array = kept[index]
                # A list never equals a shape tuple; a miss here drops every later array too.
                if array.shape == tuple(shape) and array.dtype == dtype:
                    self._next = index + 1
                    if self.guard is not None:
                        self.guard.charge(array.nbytes, None, "scratch")
                    return array
                del kept[index:]
        dims = tuple(int(d) for d in shape)
        dtype = np.dtype(dtype)
        nbytes = math.prod(dims) * dtype.itemsize  # math.prod: a fraction of np.prod's cost
        self.charge(nbytes, what="scratch")
        if self.arena is not None:
            return self.arena.allocate(nbytes).data.view(dtype).reshape(dims)
        array = self.xp.empty(dims, dtype=dtype)
        if self.keeps_scratch:
            self._kept.append(array)
            self._next += 1
        return array

    def charge(self, nbytes: int, node: str | None = None, what: str = "values") -> None:
        """Count an allocation against the session's memory limit, before making it."""
        if self.guard is not None:
            self.guard.charge(nbytes, node, what)


# `Operator.layout_role`s.
ELEMENTWISE, REDUCES_PLANES, HELD_CONV, CHAIN = "elementwise", "reduces planes", "conv", "chain"

# A bound call (`Operator.bind`): `run`'s arguments, (ctx, inputs, outputs).
BoundCall = Callable[["RunContext", Sequence[Array | None], Any], Any]


@dataclass(frozen=True, slots=True)
class BoundStep:
    """What `Operator.bind` is told of one static step of a fast-mode plan: per input its
    plan-time constant (None: known only in the run) and spec (None: absent), the output specs,
    and what `PreparesConstants.prepare_for_plan` returned for it (None otherwise). The
    positions of the inputs and outputs the run state holds channels last (graph/layouts.py:
    NCHW-shaped views with NHWC strides) are named too: a bound call may rely on them."""

    constants: tuple[Array | None, ...]
    specs: tuple[TensorSpec | None, ...]
    outputs: tuple[TensorSpec, ...]
    prepared: Any = None
    channels_last_inputs: frozenset[int] = frozenset()
    channels_last_outputs: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class HeldOperand:
    """What a bound call `ufunc(a, b, out)` with one operand held by the call is (its
    `held_operand` attribute), so that a fused chain calls the ufunc itself: 0.3 µs less a
    member on small arrays. `position` is the held operand's (0 or 1); the other is the
    step's input."""

    ufunc: Any
    position: int
    value: Array


class Operator:
    """Base of every operator class; subclasses set the flags and implement infer/run."""

    supports_exact: ClassVar[bool] = False
    in_place_input: ClassVar[int | None] = None
    # What the channels-last hand-off (graph/layouts.py) may give the operator: ELEMENTWISE
    # (ufuncs alone, right and as fast on any one layout; as a fused step's member),
    # REDUCES_PLANES (reads any strides into an (N, C, 1, …) result), HELD_CONV (a Conv whose
    # held forms take channels last), CHAIN (a fused step: as its members say); None: C order.
    layout_role: ClassVar[str | None] = None
    view_of_input: ClassVar[int | None] = None
    outputs_data_dependent: ClassVar[bool] = False
    # A data-dependent operator whose returned arrays are new and referenced nowhere else (If:
    # its branch's run hands back fresh or copied arrays), so a graph output may be given to
    # the caller without another copy.
    owns_results: ClassVar[bool] = False
    # False: never folded into a constant, even when all inputs are constants. Random
    # generators must draw anew in each run; Widen exists to keep a weight narrow until use.
    foldable: ClassVar[bool] = True

    def __init__(self, node: NodeInfo) -> None:
        self.node = node

    def infer(self, ctx: InferContext) -> list[TensorSpec | Constant]:
        raise NotImplementedError

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> Any:
        raise NotImplementedError

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """A call for `step` that skips the decisions `run` makes in every run (see the module
        docstring); `ctx` is the run state's, in fast mode. Work arrays it makes here (xp.empty)
        belong to that run state alone. None: `run` is called."""
        return None

    def check_types(self, ctx: InferContext, allowed: frozenset[int], *indices: int) -> None:
        """Refuse input element types the operator does not define, naming the value.

        Caller inputs are checked against the model's declared types before planning, so a type
        no kernel defines means the model itself is inconsistent: INVALID_MODEL."""
        for index in indices or range(len(ctx.specs)):
            if ctx.has(index) and ctx.dtype(index) not in allowed:
                raise self.node.invalid(
                    f"{self.node.op_type} does not accept element type "
                    f"{onnx_name(ctx.dtype(index))} for input {index}",
                    self.node.inputs[index],
                )


@dataclass(frozen=True, slots=True)
class OpDef:
    """One operator (or family member) over the opset versions `since`..`until` (inclusive)."""

    op_type: str
    since: int
    factory: Callable[[NodeInfo], Operator]
    until: int | None = None
    domain: str = ""

    def covers(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset <= self.until)
