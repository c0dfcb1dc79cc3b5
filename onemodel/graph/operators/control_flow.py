"""If, Loop and Scan (seed 000 §8): operators whose attributes hold graphs.

Each body is compiled once, with the node, into a nested executor of the same backend and mode;
the values of enclosing graphs it reads arrive as extra inputs after the node's declared ones.
Their output shapes depend on values (the branch taken, the trip count), so the outputs are
data-dependent: `run` returns new arrays.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from onemodel.errors import SessionError
from onemodel.graph.operators.base import (
    Array,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.tensors import numpy_dtype_for_onnx


class ControlFlow(Operator):
    """Exact: bodies compile in the session's mode, so a body without exact kernels fails the
    model at creation; the operators themselves only move and slice tensors."""

    outputs_data_dependent = True
    supports_exact = True
    # What a body's run returns is new or copied (`RunState._result`, `body_runner`), and the
    # rest of what these return is made here (stacked, or `_copy`'d), so a graph output one
    # writes goes to the caller without another copy.
    owns_results = True

    def body(self, attribute: str) -> Any:
        graph = self.node.attr(attribute)
        if self.node.compile_body is None:
            raise self.node.invalid(f"{self.node.op_type} has no compiled body")
        return self.node.compile_body(graph)

    def outer_positions(self, executor: Any) -> tuple[int, ...]:
        """Where the outer values a body reads are among the node's run inputs (they follow
        the node's declared inputs), found once so that entering the body looks up nothing."""
        return executor.body_inputs(self.node.captured, len(self.node.inputs))

    @staticmethod
    def body_values(
        executor: Any,
        positional: Sequence[Array | None],
        inputs: Sequence[Array | None],
        outer: tuple[int, ...],
    ) -> list[Array | None]:
        """A body's inputs: its declared ones by position, then the outer values it reads."""
        values = list(positional[: executor.declared_inputs])
        values.extend([inputs[i] for i in outer])
        return values

    @staticmethod
    def host_scalar(ctx: RunContext, value: Array) -> Any:
        """The first element of a condition or count, on the host (`item` where it is the
        only one: half the cost of reshaping; a NumPy scalar array needs no transfer)."""
        if type(value) is np.ndarray and value.size == 1:
            return value.item()
        host = ctx.kernels.memory.to_host(value)
        return host.item() if host.size == 1 else np.asarray(host).reshape(-1)[0]

    @staticmethod
    def stacking_places(
        xp: Any,
        plan: Any,
        first: int,
        axes: Sequence[int],
        backwards: Sequence[int],
        steps: int,
    ) -> list[tuple[int, int, Array, int, int]]:
        """The scan outputs (the body's outputs from `first` on, stacked along `axes`,
        `backwards` or not) that the held body `plan`'s steps can write straight into their
        places in the stacked results (no array per iteration, no stacking copy): those
        stacked along axis 0 (each place C-contiguous) that a static step writes into what
        it is given (`plan.per_run`) and the body returns once (not also as a carried value),
        at most 2 GiB in all. Per output: (k, value id, the stacked array of `steps`, the
        first iteration's place, the step to the next)."""
        output_ids = plan.output_ids
        places = []
        for k, (axis, reverse) in enumerate(zip(axes, backwards, strict=True)):
            value_id = output_ids[first + k]
            spec = plan.specs[value_id]
            if (
                value_id not in plan.per_run
                or output_ids.count(value_id) > 1
                or not isinstance(spec, TensorSpec)
                or spec.numpy_dtype.kind == "O"
                or axis % (len(spec.shape) + 1)
                or steps * spec.nbytes > 1 << 31
            ):
                continue
            stacked = xp.empty((steps, *spec.shape), dtype=spec.numpy_dtype)
            places.append((k, value_id, stacked, steps - 1 if reverse else 0, -1 if reverse else 1))
        return places

    @staticmethod
    def empty_stack(
        ctx: RunContext, executor: Any, position: int, first: Sequence[Any] | None = None
    ) -> Array:
        """The stacked scan output of zero iterations: [0, *dims] of the declared type. Where
        the body declares no fixed shape for it, the one its plan for the first iteration's
        inputs (`first`) gives, as onnxruntime's shape inference does ([0, 4] rather than [0]
        for a row of 4 that a tf2onnx while loop's body writes untyped); [0] if that plan
        cannot be made."""
        meta = executor.graph.outputs[position]
        dtype = numpy_dtype_for_onnx(meta.elem_type if meta.elem_type is not None else 1)
        dims = meta.dims
        if dims is not None and all(isinstance(d, int) for d in dims):
            return ctx.xp.empty((0, *dims), dtype=dtype)
        if first is not None:
            try:
                plan = executor.body_entry(first)[0]
            except SessionError:
                plan = None
            spec = None if plan is None else plan.specs[plan.output_ids[position]]
            if isinstance(spec, TensorSpec):
                return ctx.xp.empty((0, *spec.shape), dtype=spec.numpy_dtype)
        return ctx.xp.empty((0,), dtype=dtype)


class IfOp(ControlFlow):
    """Runs the branch the condition chooses, once."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.then_branch = self.body("then_branch")
        self.else_branch = self.body("else_branch")
        self.then_outer = self.outer_positions(self.then_branch)
        self.else_outer = self.outer_positions(self.else_branch)

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> list[Array]:
        if self.host_scalar(ctx, inputs[0]):
            return self.then_branch.run_body([inputs[i] for i in self.then_outer], ctx)
        return self.else_branch.run_body([inputs[i] for i in self.else_outer], ctx)

    def bound_run(self, specs: Sequence[Any]) -> Any:
        """`run` for one parent run state whose plan fixed the type and shape of every value
        the branches read (`specs`, by node input): each branch's plan and a run state of it
        are found on its first entry and kept, so that entering a branch makes no key and
        takes nothing from a pool. None where some value is planned at run time."""
        then_entry = _BranchEntry(self.then_branch, self.then_outer, specs)
        else_entry = _BranchEntry(self.else_branch, self.else_outer, specs)
        if then_entry.signature is None or else_entry.signature is None:
            return None
        host_scalar = self.host_scalar

        def run(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> list[Array]:
            condition = inputs[0]
            if type(condition) is np.ndarray and condition.size == 1:
                taken = condition.item()
            else:
                taken = host_scalar(ctx, condition)
            return (then_entry if taken else else_entry).run(ctx, inputs)

        return run


class _BranchEntry:
    """One branch of an If as one parent run state enters it (see `IfOp.bound_run`): its run
    state, and the state's bound plain runs for the entries that nothing guards or observes."""

    __slots__ = ("executor", "ids", "outer", "runner", "signature", "state")

    def __init__(self, executor: Any, outer: tuple[int, ...], specs: Sequence[Any]) -> None:
        self.executor = executor
        self.outer = outer
        self.ids = executor.graph.input_ids
        signature = tuple(specs[i] for i in outer)
        tensors = all(isinstance(spec, TensorSpec) for spec in signature)
        self.signature = signature if tensors else None
        self.state: Any = None
        self.runner: Any = None

    def run(self, ctx: RunContext, inputs: Sequence[Array | None]) -> list[Array]:
        state = self.state
        if state is None:  # planned on first entry: a branch never taken costs nothing
            state = self.state = self.executor.plan(self.signature)[1].take()
            self.runner = state.body_runner() if state.plain else None
        values = [inputs[i] for i in self.outer]
        if ctx.guard is None and ctx.observer is None and self.runner is not None:
            return self.runner(values)
        return state.run_nested(zip(self.ids, values, strict=True), ctx)


class LoopOp(ControlFlow):
    """Runs the body while the trip count and the condition allow, carrying N values from one
    iteration to the next and stacking K scan outputs on a new first axis."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.loop_body = self.body("body")
        self.outer = self.outer_positions(self.loop_body)
        self.carried = len(node.inputs) - 2
        # Carried value k: the body's input 2 + k, its output 1 + k.
        self.carried_pairs = tuple((2 + k, 1 + k) for k in range(self.carried))
        self.scan_count = len(self.loop_body.graph.outputs) - 1 - self.carried
        self.true: Array | None = None  # made on the first run, on its backend

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> list[Array]:
        xp = ctx.xp
        declared = self.node.inputs
        trips = inputs[0] if declared[0] else None
        condition = inputs[1] if len(declared) > 1 and declared[1] else None
        limit = sys.maxsize if trips is None else int(self.host_scalar(ctx, trips))
        going = True if condition is None else bool(self.host_scalar(ctx, condition))
        carried = list(inputs[2 : len(declared)])
        scans: list[list[Array]] = []
        placed: dict[int, Array] = {}  # stacked outputs the body wrote in place
        outer = [inputs[i] for i in self.outer]
        if going and limit > 0:  # what a body's run returns is its own: no copy needed
            carried = self._iterate(ctx, limit, carried, outer, scans, placed)
        else:
            carried = [_copy(xp, v) for v in carried]
        first = None
        if not scans and len(placed) < self.scan_count:  # the first iteration's inputs
            counter, going_in = xp.zeros((), np.int64), xp.ones((), np.bool_)
            first = [counter, going_in, *carried, *outer]
        stacked = [
            placed[k]
            if k in placed
            else xp.stack([outs[k] for outs in scans])
            if scans
            else self.empty_stack(ctx, self.loop_body, 1 + self.carried + k, first)
            for k in range(self.scan_count)
        ]
        return [*carried, *stacked]

    def _iterate(
        self,
        ctx: RunContext,
        limit: int,
        carried: list[Array],
        outer: list[Array | None],
        scans: list[list[Array]],
        placed: dict[int, Array],
    ) -> list[Array]:
        """Run the body at least once and while it says so, up to `limit` times; the last
        carried values are returned, each iteration's scan outputs appended to `scans`, and
        where the body passes its condition through (so that `limit` iterations run), the
        scan outputs its steps wrote in place (`stacking_places`) put in `placed`."""
        xp, body, name, first_scan = ctx.xp, self.loop_body, self.node.name, 1 + self.carried
        # The iteration number: one array rewritten per iteration, which no body output can
        # alias (every output a body run does not make new is copied: `body_runner`).
        counter = xp.zeros((), dtype=xp.int64)
        true = self.true
        if true is None:  # a started iteration's condition: one array, as bodies write no input
            true = self.true = xp.asarray(np.True_)
        values = [counter, true, *carried, *outer]
        # Held from the first iteration: where the carried values keep their shapes, every
        # iteration runs one plan.
        held = body.hold_carrying(values, self.carried_pairs, ctx, 1)
        run = held.run if held is not None else lambda values: body.run_body(values, ctx)
        guarded = ctx.guard is not None
        scanning = self.scan_count > 0
        places = []
        every_trip = held is not None and held.bound and limit < sys.maxsize
        if scanning and every_trip and held.passes_through(0, 1):  # `limit` iterations
            forward = (0,) * self.scan_count
            plan = held.state.plan
            places = self.stacking_places(xp, plan, first_scan, forward, forward, limit)
            placed.update((k, stacked) for k, _, stacked, _, _ in places)
        iteration = 0
        try:
            while True:
                if guarded:
                    ctx.check(name)
                if places:
                    given = {value_id: stacked[iteration]
                             for _, value_id, stacked, _, _ in places}  # fmt: skip
                    results = run(values, given)
                else:
                    results = run(values)
                if scanning:
                    scanned = results[first_scan:]
                    if guarded:
                        produced = sum(int(r.nbytes) for r in scanned)
                        ctx.charge(produced, name, "Loop outputs")
                    scans.append(scanned)
                iteration += 1
                go = results[0]
                if type(go) is np.ndarray and go.size == 1:
                    go = go.item()
                else:
                    go = self.host_scalar(ctx, go)
                if not go or iteration >= limit:
                    return results[1:first_scan]
                counter[()] = iteration
                values = [counter, true, *results[1:first_scan], *outer]
        finally:
            if held is not None:
                held.release()


class ScanOp(ControlFlow):
    """Slices the scan inputs along their axes (reversed when asked), runs the body per slice
    with N carried states, and places the scan outputs the same way. Opset 8 has a batch axis
    first and optional per-batch sequence lengths; later opsets have neither."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.scan_body = self.body("body")
        self.outer = self.outer_positions(self.scan_body)
        self.scan_inputs = int(node.attr("num_scan_inputs"))
        self.batched = node.opset < 9
        declared = len(node.inputs) - (1 if self.batched else 0)
        self.states = declared - self.scan_inputs
        if self.states < 0:
            raise node.invalid("Scan has fewer inputs than num_scan_inputs")
        self.outputs_count = len(self.scan_body.graph.outputs) - self.states
        self.carried_pairs = tuple((k, k) for k in range(self.states))  # inputs = outputs
        direction_attribute = "directions" if self.batched else "scan_input_directions"
        self.input_directions = list(node.attr(direction_attribute, [0] * self.scan_inputs))
        self.input_axes = list(node.attr("scan_input_axes", [0] * self.scan_inputs))
        self.output_directions = list(node.attr("scan_output_directions", [0] * self.outputs_count))
        self.output_axes = list(node.attr("scan_output_axes", [0] * self.outputs_count))

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> list[Array]:
        declared = list(inputs[: len(self.node.inputs)])
        if not self.batched:
            return self._scan(ctx, declared[: self.states], declared[self.states :], inputs)
        xp = ctx.xp
        lengths, data = declared[0], declared[1:]
        states, scanned = data[: self.states], data[self.states :]
        batch = (states or scanned)[0].shape[0]
        per_batch = []
        for b in range(batch):
            steps = (
                scanned[0].shape[1]
                if lengths is None
                else int(ctx.kernels.memory.to_host(lengths)[b])
            )
            sliced = [x[b, :steps] for x in scanned]
            per_batch.append(self._scan(ctx, [s[b] for s in states], sliced, inputs))
        longest = max((r[self.states].shape[0] for r in per_batch if self.outputs_count), default=0)
        results = [xp.stack([r[i] for r in per_batch]) for i in range(self.states)]
        for k in range(self.outputs_count):
            parts = []
            for r in per_batch:
                part = r[self.states + k]
                pad = [(0, longest - part.shape[0])] + [(0, 0)] * (part.ndim - 1)
                parts.append(xp.pad(part, pad))
            results.append(xp.stack(parts))
        return results

    def _scan(
        self,
        ctx: RunContext,
        states: list[Array],
        scanned: list[Array],
        inputs: Sequence[Array | None],
    ) -> list[Array]:
        """One sequence; `inputs` are the node's, for the outer values the body reads."""
        xp = ctx.xp
        axes = [a % x.ndim for a, x in zip(self.input_axes, scanned, strict=True)]
        lengths = {x.shape[a] for x, a in zip(scanned, axes, strict=True)}
        if len(lengths) > 1:
            raise self.node.bad_input(f"Scan inputs disagree on the sequence length: {lengths}")
        steps = lengths.pop() if lengths else 0
        carried = list(states)
        scans: list[list[Array]] = []
        placed: dict[int, Array] = {}  # stacked outputs the body wrote in place
        if steps:  # what a body's run returns is its own: no copy needed
            outer = [inputs[i] for i in self.outer]
            carried = self._iterate(ctx, steps, carried, scanned, axes, outer, scans, placed)
        else:
            carried = [_copy(xp, s) for s in carried]
        stacked = []
        for k in range(self.outputs_count):
            if k in placed:
                stacked.append(placed[k])
                continue
            if not scans:
                stacked.append(self.empty_stack(ctx, self.scan_body, self.states + k))
                continue
            parts = [outs[k] for outs in scans]
            if self.output_directions[k]:
                parts = parts[::-1]
            axis = self.output_axes[k] % (parts[0].ndim + 1)
            stacked.append(xp.stack(parts, axis=axis))
        return [*carried, *stacked]

    def _iterate(
        self,
        ctx: RunContext,
        steps: int,
        carried: list[Array],
        scanned: list[Array],
        axes: list[int],
        outer: list[Array | None],
        scans: list[list[Array]],
        placed: dict[int, Array],
    ) -> list[Array]:
        """Run the body once per slice (`steps` of them); the last carried values are
        returned, each iteration's scan outputs appended to `scans`, and the stacked scan
        outputs the body's steps wrote in place (see `_places`) put in `placed`."""
        xp, body, name, states = ctx.xp, self.scan_body, self.node.name, self.states
        # Per scan input, how to take slice t: a view along a C-contiguous array's first axis
        # (itself C-contiguous), a copy along any other; and whether it runs backwards.
        takers = [
            (x.__getitem__ if a == 0 and x.flags.c_contiguous else partial(xp.take, x, axis=a),
             steps - 1 if reverse else 0, -1 if reverse else 1)
            for x, a, reverse in zip(scanned, axes, self.input_directions, strict=True)
        ]  # fmt: skip
        values = [*carried, *[take(first) for take, first, _ in takers], *outer]
        # Held from the first iteration: where the carried values keep their shapes, every
        # iteration runs one plan.
        held = body.hold_carrying(values, self.carried_pairs, ctx)
        run = held.run if held is not None else lambda values: body.run_body(values, ctx)
        places = []
        if held is not None and held.bound:
            directions, axes = self.output_directions, self.output_axes
            places = self.stacking_places(xp, held.state.plan, states, axes, directions, steps)
        placed.update((k, stacked) for k, _, stacked, _, _ in places)
        guarded = ctx.guard is not None
        try:
            t = 0
            while True:
                if guarded:
                    ctx.check(name)
                if places:
                    given = {value_id: stacked[first + t * sign]
                             for _, value_id, stacked, first, sign in places}  # fmt: skip
                    results = run(values, given)
                else:
                    results = run(values)
                scanned_out = results[states:]
                if guarded:
                    ctx.charge(sum(int(r.nbytes) for r in scanned_out), name, "Scan outputs")
                scans.append(scanned_out)
                t += 1
                if t == steps:
                    return results[:states]
                slices = [take(first + t * sign) for take, first, sign in takers]
                values = [*results[:states], *slices, *outer]
        finally:
            if held is not None:
                held.release()


def _copy(xp: Any, value: Any) -> Any:
    """A carried value returned after no iteration, as one nothing else holds: a C-ordered
    copy of an array, a new list of copies of a sequence's."""
    if value is None:
        return None
    if isinstance(value, list):
        return [xp.array(element, order="C") for element in value]
    return xp.array(value, order="C")


DEFS: tuple[OpDef, ...] = (
    OpDef("If", 1, IfOp),
    OpDef("Loop", 1, LoopOp),
    OpDef("Scan", 8, ScanOp),
)
