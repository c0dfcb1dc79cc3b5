"""If, Loop and Scan (seed 000 §8): operators whose attributes hold graphs.

Each body is compiled once, with the node, into a nested executor of the same backend and mode;
the values of enclosing graphs it reads arrive as extra inputs after the node's declared ones.
Their output shapes depend on values (the branch taken, the trip count), so the outputs are
data-dependent: `run` returns new arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

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
    def empty_stack(ctx: RunContext, executor: Any, position: int) -> Array:
        """The stacked scan output of zero iterations: [0, *dims] of the declared type."""
        meta = executor.graph.outputs[position]
        dtype = numpy_dtype_for_onnx(meta.elem_type if meta.elem_type is not None else 1)
        dims = meta.dims or ()
        shape = (0, *dims) if all(isinstance(d, int) for d in dims) else (0,)
        return ctx.xp.empty(shape, dtype=dtype)


class IfOp(ControlFlow):
    """Runs the branch the condition chooses, once."""

    owns_results = True  # what a body's run returns never aliases its slab or inputs

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
    """One branch of an If as one parent run state enters it (see `IfOp.bound_run`)."""

    __slots__ = ("executor", "ids", "outer", "signature", "state")

    def __init__(self, executor: Any, outer: tuple[int, ...], specs: Sequence[Any]) -> None:
        self.executor = executor
        self.outer = outer
        self.ids = executor.graph.input_ids
        signature = tuple(specs[i] for i in outer)
        tensors = all(isinstance(spec, TensorSpec) for spec in signature)
        self.signature = signature if tensors else None
        self.state: Any = None

    def run(self, ctx: RunContext, inputs: Sequence[Array | None]) -> list[Array]:
        state = self.state
        if state is None:  # planned on first entry: a branch never taken costs nothing
            state = self.state = self.executor.plan(self.signature)[1].take()
        values = [inputs[i] for i in self.outer]
        return state.run_nested(zip(self.ids, values, strict=True), ctx)


class LoopOp(ControlFlow):
    """Runs the body while the trip count and the condition allow, carrying N values from one
    iteration to the next and stacking K scan outputs on a new first axis."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.loop_body = self.body("body")
        self.outer = self.outer_positions(self.loop_body)
        self.carried = len(node.inputs) - 2

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> list[Array]:
        xp = ctx.xp
        declared = self.node.inputs
        trips = inputs[0] if declared[0] else None
        condition = inputs[1] if len(declared) > 1 and declared[1] else None
        limit = None if trips is None else int(self.host_scalar(ctx, trips))
        going = True if condition is None else bool(self.host_scalar(ctx, condition))
        carried = [_copy(xp, v) for v in inputs[2 : len(declared)]]
        scans: list[list[Array]] = []
        iteration = 0
        body = self.loop_body
        outer = [inputs[i] for i in self.outer]  # the same in every iteration
        true = xp.asarray(np.True_)  # a started iteration's condition (bodies write no input)
        guarded = ctx.guard is not None
        held = None  # the body's run state, while the carried values keep their shapes
        try:
            while going and (limit is None or iteration < limit):
                if guarded:
                    ctx.check(self.node.name)
                values = [xp.asarray(np.int64(iteration)), true, *carried, *outer]
                if iteration == 0 and (limit is None or limit > 1):  # pays from the second on
                    held = body.hold_carrying(values, self.carried)
                results = body.run_body(values, ctx) if held is None else held.run(values, ctx)
                going = bool(self.host_scalar(ctx, results[0]))
                carried = results[1 : 1 + self.carried]
                scanned = results[1 + self.carried :]
                if guarded:
                    ctx.charge(sum(int(r.nbytes) for r in scanned), self.node.name, "Loop outputs")
                scans.append(scanned)
                iteration += 1
        finally:
            if held is not None:
                held.release()
        scan_count = len(self.loop_body.graph.outputs) - 1 - self.carried
        stacked = [
            xp.stack([outs[k] for outs in scans])
            if scans
            else self.empty_stack(ctx, self.loop_body, 1 + self.carried + k)
            for k in range(scan_count)
        ]
        return [*carried, *stacked]


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
        carried = [_copy(xp, s) for s in states]
        collected: list[list[Array]] = [[] for _ in range(self.outputs_count)]
        for t in range(steps):
            ctx.check(self.node.name)
            slices = [
                xp.take(x, steps - 1 - t if reverse else t, axis=a)
                for x, a, reverse in zip(scanned, axes, self.input_directions, strict=True)
            ]
            values = self.body_values(self.scan_body, (*carried, *slices), inputs, self.outer)
            results = self.scan_body.run_body(values, ctx)
            carried = results[: self.states]
            produced = sum(int(r.nbytes) for r in results[self.states :])
            ctx.charge(produced, self.node.name, "Scan outputs")
            for k in range(self.outputs_count):
                collected[k].append(results[self.states + k])
        stacked = []
        for k, parts in enumerate(collected):
            if not parts:
                stacked.append(self.empty_stack(ctx, self.scan_body, self.states + k))
                continue
            if self.output_directions[k]:
                parts = parts[::-1]
            axis = self.output_axes[k] % (parts[0].ndim + 1)
            stacked.append(xp.stack(parts, axis=axis))
        return [*carried, *stacked]


def _copy(xp: Any, value: Any) -> Any:
    """A carried value the body cannot alias: arrays copied, sequences as new lists."""
    if value is None:
        return None
    if isinstance(value, list):
        return list(value)
    return xp.array(value)


DEFS: tuple[OpDef, ...] = (
    OpDef("If", 1, IfOp),
    OpDef("Loop", 1, LoopOp),
    OpDef("Scan", 8, ScanOp),
)
