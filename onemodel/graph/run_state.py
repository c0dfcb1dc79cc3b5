"""RunState: the mutable half of a run (seed 000 §1 and §5): a slab and the arrays over it,
and the scratch of kernels and the values of dynamic steps (RunContext.scratch), reclaimed at
every run start: arrays kept from the previous run in checked-free runs, a poisoned arena in
checked ones.

A plan's run states are pooled (at most 8 idle), so concurrent runs of one plan share weights
and schedule but nothing mutable, and a warm run allocates no new array data besides its
outputs and the values of dynamic steps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from onemodel.backends.fp_errors import in_run, run_scope
from onemodel.backends.numpy_cpu import output_pool
from onemodel.errors import ErrorKind, SessionError
from onemodel.graph.gc_pause import paused_gc
from onemodel.graph.layouts import channels_last_values
from onemodel.graph.operators.base import (
    BoundStep,
    Constant,
    InferContext,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.control_flow import IfOp
from onemodel.graph.operators.prepared import PreparesConstants, prepared_call
from onemodel.graph.plan import ExecutionPlan, StepKind
from onemodel.graph.values import (
    ABSENT,
    HostValues,
    canonical_nans,
    is_tensor,
    operator_failure,
    run_operator,
    spec_of,
)
from onemodel.tensors import HOST, Arena, BufferPool
from onemodel.tensors.buffers import POISON

_NO_TARGETS: Mapping[int, Any] = {}  # never written: a run without the caller's output arrays
BodyRunner = Callable[..., list[Any]]  # (values by position, given arrays by value id)


class Prepared:
    """What a plan's runs share beyond the plan: per step, the operator call with the values
    `PreparesConstants.prepare` derived from the step's constant inputs (packed weights).
    Made once per plan, read-only afterwards."""

    def __init__(self, plan: ExecutionPlan) -> None:
        ctx = RunContext(plan.graph.kernels, plan.graph.exact)
        self.calls: list[Any] = []
        self.values: list[Any] = []  # per step, what `prepare_for_plan` returned, or None
        # The values plain runs hold channels last (graph/layouts.py).
        self.channels_last = channels_last_values(plan)
        for step in plan.steps:
            operator = step.node.operator
            call, prepared = operator.run, None
            if isinstance(operator, PreparesConstants) and step.kind is StepKind.STATIC:
                constants = [None if i == ABSENT else plan.constants[i] for i in step.inputs]
                specs = [None if i == ABSENT else plan.specs[i] for i in step.inputs]
                prepared = operator.prepare_for_plan(ctx, constants, specs)
                if prepared is not None:
                    call = prepared_call(operator, prepared)
            self.calls.append(call)
            self.values.append(prepared)


def bound_call(
    ctx: RunContext,
    plan: ExecutionPlan,
    step: Any,
    prepared: Any,
    channels_last: frozenset[int] = frozenset(),
) -> Any:
    """The step's `Operator.bind` call for a run state of `plan` (fast mode) whose values
    `channels_last` are held so (graph/layouts.py), or None."""
    ids = step.inputs
    constants = tuple(None if i == ABSENT else plan.constants[i] for i in ids)
    specs = tuple(None if i == ABSENT else plan.specs[i] for i in ids)
    bound = BoundStep(
        constants, specs, step.specs, prepared,
        frozenset(k for k, i in enumerate(ids) if i in channels_last),
        frozenset(k for k, i in enumerate(step.outputs) if i in channels_last),
    )  # fmt: skip
    return step.node.operator.bind(ctx, bound)


class _Step:
    """One step of a run with everything that does not change between runs looked up."""

    __slots__ = (
        "call", "fixed_outs", "fresh", "gather", "inputs", "kind", "label", "name", "node",
        "outputs", "owned", "specs", "view_of",
    )  # fmt: skip

    def __init__(
        self,
        step: Any,
        call: Any,
        table: list[Any],
        per_run: set[int],
        plan_specs: list[Any],
        allocator: Any,
    ) -> None:
        self.kind = step.kind
        self.node = step.node
        self.call = call
        self.inputs = step.inputs  # ABSENT (−1) reads the table's last slot, which is None
        self.gather = gatherer(step.inputs, len(table))
        self.outputs = step.outputs
        self.specs = step.specs
        self.view_of = step.node.operator.view_of_input
        self.name = step.name  # what profiles and traces call it
        self.label = step.label
        operator = step.node.operator
        # A dynamic step whose results are new C-contiguous arrays it owns (If: what a body's
        # run returns): a plain run stores them without re-checking them (`_run_plain`).
        self.owned = (
            step.kind is StepKind.DYNAMIC
            and operator.outputs_data_dependent
            and operator.owns_results
        )
        if self.owned and isinstance(operator, IfOp):  # branches entered without a key
            specs = [None if i == ABSENT else plan_specs[i] for i in step.inputs]
            self.call = operator.bound_run(specs) or call
        fixed = step.kind is StepKind.STATIC and not any(v in per_run for v in step.outputs)
        # Static outputs in the slab are the same arrays in every run of this state.
        self.fixed_outs = [table[v] for v in step.outputs] if fixed else None
        # Per output of a static step: (allocate, shape, dtype) of the new array each run
        # makes for a graph output, None for one in the slab.
        self.fresh = None
        if step.kind is StepKind.STATIC and not fixed:
            self.fresh = [
                (allocator(spec.shape, spec.numpy_dtype), spec.shape, spec.numpy_dtype)
                if v in per_run
                else None
                for v, spec in zip(step.outputs, step.specs, strict=True)
            ]


def gatherer(ids: Sequence[int], size: int) -> Any:
    """A C-level call that picks a step's inputs from a value table of `size` slots (ABSENT,
    −1, the last): a tuple of them, or a one-element list (itemgetter of one index would give
    the value itself). A third of the cost of a list comprehension, which in Python 3.11 is
    a call of its own."""
    if len(ids) == 1:
        first = ids[0] % size
        return itemgetter(slice(first, first + 1))
    if not ids:
        return itemgetter(slice(0, 0))
    return itemgetter(*ids)


class RunState:
    """The slab of one plan and the value table that starts every run."""

    def __init__(
        self, plan: ExecutionPlan, *, checked: bool = False, prepared: Prepared | None = None
    ) -> None:
        self.plan = plan
        self.checked = checked
        self.exact = plan.graph.exact
        # Nothing but the calls to do between steps (see `_run_plain`).
        self.plain = not checked and not plan.graph.exact
        memory = plan.graph.kernels.memory
        self.slab = memory.allocate(plan.memory.slab_bytes)
        if checked:
            self.slab[...] = POISON
        prepared = prepared or Prepared(plan)
        channels_last = prepared.channels_last if self.plain else frozenset()
        table: list[Any] = list(plan.constants)
        offsets = plan.memory.offsets
        for value_id in plan.in_slab:
            spec = plan.specs[value_id]
            offset = offsets[plan.names[value_id]]
            table[value_id] = self._view(offset, spec, value_id in channels_last)
        table.append(None)  # the slot ABSENT (−1) reads
        self.base_table = table
        self.output_ids = plan.output_ids
        # Every graph output a new array of this run: results need no copy (see `_result`).
        self.fresh_results = all(v in plan.fresh_outputs for v in plan.output_ids)
        self.scope = run_scope()  # reused: a state runs on one thread at a time
        self._runners: dict[int, BodyRunner] = {}  # `body_runner`
        # Checked runs take scratch from a poisoned arena; others keep it from run to run.
        arena = Arena(BufferPool(memory, checked=True)) if checked else None
        # Large host outputs come from the output pool, except in checked runs (fresh memory).
        pooled = memory is HOST and not checked
        empty = plan.graph.kernels.xp.empty
        allocator = output_pool.output_allocator if pooled else lambda *spec: empty
        self.copy_out = output_pool.copy_out if pooled else _copy
        self.ctx = RunContext(plan.graph.kernels, plan.graph.exact, arena, keeps_scratch=True)
        calls = prepared.calls
        # Views whose source is in the slab are fixed arrays: no work for them in a run.
        self.steps: list[_Step] = []
        self.releases: list[Any] = []
        for index, step in enumerate(plan.steps):
            if step.kind is StepKind.VIEW and step.outputs[0] in plan.in_slab:
                source = table[step.inputs[step.node.operator.view_of_input]]
                table[step.outputs[0]] = source.reshape(step.specs[0].shape)
                continue
            call = calls[index]
            if self.plain and step.kind is StepKind.STATIC:
                bound = bound_call(self.ctx, plan, step, prepared.values[index], channels_last)
                call = bound or call
            self.steps.append(_Step(step, call, table, plan.per_run, plan.specs, allocator))
            self.releases.append(plan.memory.releases[index])

    def _view(self, offset: int, spec: TensorSpec, channels_last: bool = False) -> Any:
        """The value's array over its slab block: an (N, C, H, W) value held channels last
        is the NCHW-shaped view of (N, H, W, C) bytes."""
        values = self.slab[offset : offset + spec.nbytes].view(spec.numpy_dtype)
        if channels_last:
            n, c, h, w = spec.shape
            return values.reshape(n, h, w, c).transpose(0, 3, 1, 2)
        return values.reshape(spec.shape)

    def run(
        self,
        inputs: Mapping[int, Any],
        outputs: Mapping[int, Any] | None = None,
        profile: dict[str, list[float]] | None = None,
        guard: Any = None,
        trace: list[tuple] | None = None,
        scope: tuple[str, str] | None = None,
    ) -> list[Any]:
        """Run the plan; `outputs` may give arrays to write graph outputs into (by value id);
        `guard` (a RunGuard) is checked before every step; `trace` gets one record per executed
        step: (node name, op type, perf_counter start, seconds, input shapes or None).
        `scope` (a body's node name and profile label) prefixes a body's rows."""
        if in_run():  # a body inside its node's run: NumPy's error state is set already
            return self._run(inputs.items(), outputs, profile, guard, trace, scope)
        with self.scope:
            return self._run(inputs.items(), outputs, profile, guard, trace, scope)

    def run_nested(self, inputs: Iterable[tuple[int, Any]], parent: RunContext) -> list[Any]:
        """Run a body from inside its node's run (`parent`, the node's context): NumPy's error
        state is set already; the node's guard applies, and a profiled or traced run adds the
        body's rows under the node's name and label."""
        observer = parent.observer
        if observer is None:
            guard = parent.guard
            if guard is None and self.plain and self.fresh_results:  # the common entry
                ctx = self.ctx
                ctx.guard = ctx.observer = None
                ctx.begin_run()
                table = self.base_table.copy()
                for value_id, array in inputs:
                    table[value_id] = array
                self._run_plain(table, _NO_TARGETS)
                return [table[value_id] for value_id in self.output_ids]
            return self._run(inputs, None, None, guard, None, None)
        profile, trace, name, label = observer
        return self._run(inputs, None, profile, parent.guard, trace, (name, label))

    def body_runner(self, read_only: int = 0) -> BodyRunner:
        """Plain runs of a body with its inputs by position, for a caller that holds this
        state (a Loop's or Scan's iterations, an If branch's entries) and calls them where
        nothing guards or observes its node: all a run decides per call is decided here,
        once per state. The outputs this plan does not make new in every run (views of the
        slab, of an input or of a weight) are copied, as `_result` does, so that none is
        overwritten by the next run or aliases an input (a Loop's counter is one array
        rewritten per iteration); except the first `read_only`, which the caller only reads,
        before its next call (a Loop's condition). `given` (by value id) are arrays for the
        static steps that write outputs in `plan.per_run` to write into instead of new ones
        (a Scan's places in its stacked outputs)."""
        runner = self._runners.get(read_only)
        if runner is None:
            runner = self._runners[read_only] = self._body_runner(read_only)
        return runner

    def _body_runner(self, read_only: int) -> BodyRunner:
        assert self.plain, "a checked or exact run needs `run_nested`"
        ctx = self.ctx
        base, run_plain, result = self.base_table, self._run_plain, self._result
        ids, output_ids = tuple(self.plan.graph.input_ids), tuple(self.output_ids)
        copied = tuple(
            (k, value_id)
            for k, value_id in enumerate(output_ids)
            if k >= read_only and value_id not in self.plan.fresh_outputs
        )

        def run(values: Sequence[Any], given: Mapping[int, Any] = _NO_TARGETS) -> list[Any]:
            ctx.guard = ctx.observer = None  # for the bodies of its steps: none observed
            ctx.begin_run()
            table = base.copy()
            for value_id, value in zip(ids, values, strict=True):
                table[value_id] = value
            run_plain(table, given)
            results = [table[value_id] for value_id in output_ids]
            for k, value_id in copied:
                results[k] = result(results[k], value_id, _NO_TARGETS)
            return results

        return run

    def _run(
        self,
        inputs: Iterable[tuple[int, Any]],
        outputs: Mapping[int, Any] | None,
        profile: dict[str, list[float]] | None,
        guard: Any,
        trace: list[tuple] | None,
        scope: tuple[str, str] | None,
    ) -> list[Any]:
        plan = self.plan
        ctx = self.ctx
        ctx.guard = guard
        ctx.observer = None
        ctx.begin_run()
        table = self.base_table.copy()
        for value_id, array in inputs:
            table[value_id] = array
        given = outputs or _NO_TARGETS
        if guard is None and profile is None and trace is None and self.plain:
            self._run_plain(table, given)
        else:
            self._run_observed(table, given, profile, guard, trace, scope)
        if self.fresh_results and not given:
            return [table[value_id] for value_id in plan.output_ids]
        return [self._result(table[value_id], value_id, given) for value_id in plan.output_ids]

    def _run_plain(self, table: list[Any], given: Mapping[int, Any]) -> None:
        """The steady-state loop: no guard, profile, trace, checked poisoning or exact NaNs,
        so a static step is its call on the table's inputs and its fixed outputs."""
        ctx = self.ctx
        step = None
        try:
            for step in self.steps:
                outs = step.fixed_outs
                if outs is not None:
                    step.call(ctx, step.gather(table), outs)
                elif step.fresh is not None:  # a static step writing a graph output
                    ins = step.gather(table)
                    step.call(ctx, ins, self._fresh_outputs(step, table, given))
                elif step.owned:
                    results = step.call(ctx, step.gather(table), None)
                    for value_id, result in zip(step.outputs, results, strict=False):
                        table[value_id] = result
                else:
                    self._step(step, [table[i] for i in step.inputs], table, given)
        except SessionError:
            raise
        except Exception as error:
            raise operator_failure(step.node, "run", error) from error

    def _run_observed(
        self,
        table: list[Any],
        given: Mapping[int, Any],
        profile: dict[str, list[float]] | None,
        guard: Any,
        trace: list[tuple] | None,
        scope: tuple[str, str] | None,
    ) -> None:
        """Every step with the guard checked before it, timed when asked, and in checked mode
        the blocks that die after it poisoned."""
        ctx = self.ctx
        timed = profile is not None or trace is not None
        started = 0.0
        for index, step in enumerate(self.steps):
            if guard is not None:
                guard.check(step.node.info.name)
            if timed:
                name, label = step.name, step.label
                if scope is not None:
                    name, label = f"{scope[0]}/{name}", f"{scope[1]}/{label}"
                ctx.observer = (profile, trace, name, label)  # for the bodies a step runs
                started = time.perf_counter()
            ins = [table[i] for i in step.inputs]
            try:
                self._step(step, ins, table, given)
            except SessionError:
                raise
            except Exception as error:
                raise operator_failure(step.node, "run", error) from error
            if timed:
                self._record(name, label, step, ins, started, profile, trace)
            if self.checked:
                for offset, size in self.releases[index]:
                    self.slab[offset : offset + size] = POISON

    def _step(
        self, step: _Step, ins: list[Any], table: list[Any], given: Mapping[int, Any]
    ) -> None:
        kind = step.kind
        if kind is StepKind.STATIC:
            outs = step.fixed_outs
            if outs is None:
                outs = self._fresh_outputs(step, table, given)
            step.call(self.ctx, ins, outs)
            if self.exact:
                xp = self.plan.graph.kernels.xp
                for out in outs:
                    canonical_nans(xp, out)
        elif kind is StepKind.VIEW:
            table[step.outputs[0]] = ins[step.view_of].reshape(step.specs[0].shape)
        else:
            self._run_dynamic(step, ins, table)

    def _fresh_outputs(self, step: _Step, table: list[Any], given: Mapping[int, Any]) -> list:
        """A static step's outputs when some are graph outputs: the caller's array or a new one
        for those, the slab for the rest."""
        outs = []
        for value_id, fresh in zip(step.outputs, step.fresh, strict=True):
            if fresh is None:
                out = table[value_id]
            else:
                out = given.get(value_id)
                if out is None:
                    out = fresh[0](fresh[1], fresh[2])
                table[value_id] = out
            outs.append(out)
        return outs

    @staticmethod
    def _record(
        name: str,
        label: str,
        step: _Step,
        ins: Sequence[Any],
        started: float,
        profile: dict[str, list[float]] | None,
        trace: list[tuple] | None,
    ) -> None:
        elapsed = time.perf_counter() - started
        if profile is not None:
            profile.setdefault(label, []).append(elapsed)
        if trace is not None:
            shapes = [getattr(value, "shape", None) for value in ins]
            trace.append((name, step.node.info.op_type, started, elapsed, shapes))

    def _run_dynamic(self, step: Any, ins: Sequence[Any], table: list[Any]) -> None:
        """Shape a step again from the actual arrays, then run it on fresh arrays."""
        plan = self.plan
        node = step.node
        operator = node.operator
        xp = plan.graph.kernels.xp
        if operator.outputs_data_dependent:
            results = run_operator(node, operator.run, self.ctx, ins, None)
            if self.ctx.guard is not None:  # sizing the results costs; only a limit needs it
                self.ctx.charge(_size(results), node.info.name)
        else:
            if operator.view_of_input is not None and not is_tensor(ins[operator.view_of_input]):
                table[step.outputs[0]] = ins[operator.view_of_input]  # Identity of a sequence
                return
            specs = [spec_of(x) if is_tensor(x) else None for x in ins]
            context = InferContext(
                node.info, specs, HostValues(ins, plan.graph.kernels.memory.to_host)
            )
            try:
                stated = operator.infer(context)[: len(step.outputs)]
            except SessionError:
                raise
            except Exception as error:
                raise operator_failure(node, "shape inference", error) from error
            if all(isinstance(s, Constant) for s in stated):
                results = [xp.asarray(s.value) for s in stated]
            elif operator.view_of_input is not None:
                results = [ins[operator.view_of_input].reshape(stated[0].shape)]
            else:
                self.ctx.charge(sum(s.nbytes for s in stated), node.info.name)
                results = [
                    xp.empty(s.shape, s.numpy_dtype)
                    if s.numpy_dtype.kind == "O"
                    else self.ctx.scratch(s.shape, s.numpy_dtype)
                    for s in stated
                ]
                run_operator(node, operator.run, self.ctx, list(ins), results)
        for value_id, result in zip(step.outputs, results, strict=False):
            if is_tensor(result) and not result.flags.c_contiguous:
                result = xp.array(result, order="C")
            # A view's values are its source's, which a view step never rewrites (the source
            # may be the caller's input array).
            if plan.graph.exact and is_tensor(result) and operator.view_of_input is None:
                canonical_nans(xp, result)
            table[value_id] = result

    def _result(self, array: Any, value_id: int, given: Mapping[int, Any]) -> Any:
        """A graph output the caller may keep: never a view of the slab, a weight or an input."""
        target = given.get(value_id)
        if target is not None:
            if target is not array:
                if target.shape != array.shape or target.dtype != array.dtype:
                    raise SessionError(
                        ErrorKind.INVALID_INPUT,
                        f"the output buffer is {target.dtype}{list(target.shape)}, the output "
                        f"is {array.dtype}{list(array.shape)}",
                        value=self.plan.names[value_id],
                    )
                target[...] = array
            return target
        if value_id in self.plan.fresh_outputs or array is None:
            return array
        if isinstance(array, list):
            return [element.copy() for element in array]
        return self.copy_out(array)


def _copy(array: Any) -> Any:
    return array.copy()


class StatePool:
    """Idle run states of one plan, at most `max_idle` kept (seed 000 §4)."""

    def __init__(self, plan: ExecutionPlan, *, checked: bool, max_idle: int = 8) -> None:
        self.plan = plan
        self.checked = checked
        self.max_idle = max_idle
        self._idle: list[RunState] = []
        self._lock = threading.Lock()
        self._prepared: Prepared | None = None

    def take(self) -> RunState:
        try:
            return self._idle.pop()  # atomic: list.pop and append need no lock of ours
        except IndexError:
            pass
        with paused_gc():  # a state per step of the plan: see gc_pause.py
            with self._lock:
                if self._prepared is None:
                    self._prepared = Prepared(self.plan)
            return RunState(self.plan, checked=self.checked, prepared=self._prepared)

    def give(self, state: RunState) -> None:
        if len(self._idle) < self.max_idle:  # racing gives may keep one or two more: harmless
            self._idle.append(state)


def _size(values: Any) -> int:
    """Bytes held by arrays and lists of them (sequences); None (an empty optional) and host
    objects such as ZipMap's dicts count as nothing."""
    if isinstance(values, list):
        return sum(_size(v) for v in values)
    return int(getattr(values, "nbytes", 0))
