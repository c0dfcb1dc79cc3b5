"""GraphExecutor: a compiled graph with its plan cache and run-state pools.

A Session is one of these plus input validation; the body of an If, Loop or Scan is another,
nested one, compiled once with its node and run once per branch or iteration.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from onemodel.graph import ir
from onemodel.graph.compiled import CompiledGraph
from onemodel.graph.gc_pause import paused_gc
from onemodel.graph.operators.base import TensorSpec
from onemodel.graph.plan import ExecutionPlan, StepKind
from onemodel.graph.run_state import StatePool
from onemodel.graph.values import signature_of


class GraphExecutor:
    """Plans by input signature (the oldest dropped beyond `max_cached_plans`) and runs."""

    def __init__(
        self,
        graph: CompiledGraph,
        *,
        max_cached_plans: int = 16,
        checked: bool = False,
        threads: int | None = None,
    ):
        """`threads`: the intra-op thread count every run gives the backend first (0: all
        cores); None for a body, which runs inside its node's run and keeps its count."""
        if max_cached_plans < 1:
            raise ValueError("max_cached_plans must be at least 1")
        self.graph = graph
        self.threads = threads
        self.max_cached_plans = max_cached_plans
        self.checked = checked
        self._plans: OrderedDict[tuple, tuple[ExecutionPlan, StatePool]] = OrderedDict()
        # The same entries by a key that is cheaper to make than a signature (see `entry`); a
        # caller may read it directly (one dict look-up per run), and must go through `entry`
        # on a miss.
        self.by_key: dict[tuple, tuple[ExecutionPlan, StatePool]] = {}
        # A body's inputs: its declared ones, then the outer values it reads (`compile_body`).
        self.declared_inputs = len(graph.input_ids)
        self._lock = threading.Lock()
        self._body_ids = graph.input_ids
        self._use_threads = graph.kernels.use_threads
        self._input_ids = {
            meta.name: vid for meta, vid in zip(graph.inputs, graph.input_ids, strict=True)
        }

    def plan(self, signature: tuple[TensorSpec | None, ...]) -> tuple[ExecutionPlan, StatePool]:
        """The plan for these input specs (None: the input's default), made on first use."""
        entry = self._plans.get(signature)
        if entry is not None:
            return entry
        with self._lock:
            entry = self._plans.get(signature)
            if entry is None:
                with paused_gc():
                    plan = ExecutionPlan(self.graph, signature)
                entry = (plan, StatePool(plan, checked=self.checked))
                self._plans[signature] = entry
                while len(self._plans) > self.max_cached_plans:
                    self._plans.popitem(last=False)  # runs holding it keep it alive
                    self.by_key.clear()
        return entry

    def entry(self, key: tuple, signature: Any) -> tuple[ExecutionPlan, StatePool]:
        """The plan for a cheap key that fixes the signature (the caller's (dtype, shape)
        tuples); `signature()` makes the signature on a miss."""
        entry = self.by_key.get(key)
        if entry is None:
            entry = self.by_key[key] = self.plan(signature())
        return entry

    def plan_count(self) -> int:
        return len(self._plans)

    def plans(self) -> list[ExecutionPlan]:
        return [plan for plan, _ in self._plans.values()]

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()
            self.by_key.clear()

    def run(
        self,
        signature: tuple[TensorSpec | None, ...],
        arrays: Mapping[int, Any],
        targets: Mapping[int, Any] | None = None,
        profile: dict[str, list[float]] | None = None,
        guard: Any = None,
        trace: list[tuple] | None = None,
    ) -> list[Any]:
        """Run with arrays by input value id; they must match `signature`."""
        return self.run_entry(self.plan(signature), arrays, targets, profile, guard, trace)

    def run_entry(
        self,
        entry: tuple[ExecutionPlan, StatePool],
        arrays: Mapping[int, Any],
        targets: Mapping[int, Any] | None = None,
        profile: dict[str, list[float]] | None = None,
        guard: Any = None,
        trace: list[tuple] | None = None,
    ) -> list[Any]:
        """Run a plan of this executor (from `plan` or `entry`) in a pooled run state."""
        pool = entry[1]
        if self.threads is not None:
            self._use_threads(self.threads)
        state = pool.take()
        try:
            return state.run(arrays, targets, profile, guard, trace)
        finally:
            pool.give(state)

    def body_entry(self, values: Sequence[Any]) -> tuple[ExecutionPlan, StatePool]:
        """The plan entry for a body's inputs by position."""
        try:  # tensors: their dtypes and shapes fix the signature
            entry = self.by_key.get(tuple([(value.dtype, value.shape) for value in values]))
        except AttributeError:  # None (an absent optional) or a list (a sequence)
            return self.plan(tuple([signature_of(value) for value in values]))
        if entry is None:
            key = tuple([(value.dtype, value.shape) for value in values])
            entry = self.entry(key, lambda: tuple([signature_of(value) for value in values]))
        return entry

    def hold_carrying(
        self,
        values: Sequence[Any],
        carried: Sequence[tuple[int, int]],
        ctx: Any,
        read_only: int = 0,
    ) -> HeldBody | None:
        """A body's run state held for all the iterations of one Loop or Scan run (`ctx`, its
        node's context), when the plan for `values` gives back each carried value (`carried`:
        (input position, output position) pairs) with its type and shape: every later
        iteration then runs that plan with no key and no pool. None otherwise. `read_only`:
        as in `RunState.body_runner`."""
        entry = self.body_entry(values)
        plan = entry[0]
        for given, produced in carried:  # the plan's signature holds the inputs' specs
            if not hasattr(values[given], "shape"):
                return None
            if plan.specs[plan.output_ids[produced]] != plan.signature[given]:
                return None
        return HeldBody(self._body_ids, entry[1], ctx, read_only)

    def run_body(self, values: Sequence[Any], ctx: Any) -> list[Any]:
        """Run a body with its inputs by position, from inside its node's run (`ctx`): the
        node's guard, and its profile and trace rows under the node's name."""
        pool = self.body_entry(values)[1]
        state = pool.take()
        try:
            return state.run_nested(zip(self._body_ids, values, strict=True), ctx)
        finally:
            pool.give(state)

    def run_named(self, feeds: Mapping[str, Any], guard: Any = None) -> list[Any]:
        """Run a body: inputs by name, typed by the arrays themselves (bodies may be untyped)."""
        arrays = {self._input_ids[name]: array for name, array in feeds.items()}
        signature = tuple(
            signature_of(arrays[vid]) if vid in arrays else None for vid in self.graph.input_ids
        )
        return self.run(signature, arrays, guard=guard)

    def body_inputs(self, captured_names: Sequence[str], first: int) -> tuple[int, ...]:
        """Where this body's outer values are among its node's inputs (after the node's
        `first` declared ones), in the body's input order."""
        names = self.input_names[self.declared_inputs :]
        return tuple(first + captured_names.index(name) for name in names)

    @property
    def input_names(self) -> Sequence[str]:
        return [meta.name for meta in self.graph.inputs]


class HeldBody:
    """One run state of a body plan, taken for the iterations of one Loop or Scan run
    (`hold_carrying`): `run(values)` runs it with the body's inputs by position, through the
    state's bound plain runs (`bound`; they also take `given` arrays) where nothing guards,
    profiles or traces the node's run."""

    __slots__ = ("bound", "pool", "run", "state")

    def __init__(self, ids: Sequence[int], pool: StatePool, ctx: Any, read_only: int) -> None:
        self.pool = pool
        state = self.state = pool.take()
        self.bound = ctx.guard is None and ctx.observer is None and state.plain
        if self.bound:
            self.run = state.body_runner(read_only)
        else:
            self.run = lambda values: state.run_nested(zip(ids, values, strict=True), ctx)

    def passes_through(self, output: int, given: int) -> bool:
        """Whether the held plan's output `output` is its input `given` (by position), itself
        or through view steps (Identity, Reshape ...): a Loop's condition passed through is
        true in every iteration."""
        plan = self.state.plan
        views = {step.outputs[0]: step for step in plan.steps if step.kind is StepKind.VIEW}
        value_id = plan.output_ids[output]
        while value_id in views:
            step = views[value_id]
            value_id = step.inputs[step.node.operator.view_of_input]
        return value_id == plan.graph.input_ids[given]

    def release(self) -> None:
        self.pool.give(self.state)


def compile_body(parent: CompiledGraph, body: ir.Graph) -> GraphExecutor:
    """A subgraph as a nested executor of the same backend, mode and optimisation level (seed
    000 §8; a body's passes fuse and fold as the graph's do): the outer values it reads become
    extra inputs after its declared ones."""
    captured = tuple(ir.ValueInfo(name) for name in body.outer_names)
    graph = dataclasses.replace(body, inputs=(*body.inputs, *captured))
    model = ir.Model(graph=graph, opsets=parent.opsets)
    nested = CompiledGraph(
        model,
        parent.kernels,
        exact=parent.exact,
        checked=parent.checked,
        level=parent.level,
        bodies=compile_body,
    )
    executor = GraphExecutor(nested, checked=parent.checked)
    executor.declared_inputs = len(body.inputs)
    return executor
