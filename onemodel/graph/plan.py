"""ExecutionPlan: one schedule per list of input types and shapes (seed 000 §3 and §5).

Making a plan visits the nodes in graph order with concrete shapes: each operator states its
outputs; nodes whose inputs are all constants run now and become constants (unless the result
is larger than both 64 KiB and each of its inputs); what depends on values only known while
running is scheduled as dynamic and shaped again in every run. Static intermediates get offsets
in one slab from the memory planner. A plan is immutable and shared by concurrent runs.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onemodel.errors import SessionError
from onemodel.graph.compiled import CompiledGraph, CompiledNode
from onemodel.graph.memory_plan import MemoryPlan, PlannedStep, PlannedValue, plan_memory
from onemodel.graph.operators.base import (
    Constant,
    InferContext,
    NeedsRunTimeValues,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.control_flow import IfOp
from onemodel.graph.values import (
    ABSENT,
    HostValues,
    canonical_nans,
    is_tensor,
    operator_failure,
    run_operator,
    spec_of,
)

FOLD_LIMIT_BYTES = 64 * 1024


class StepKind(enum.IntEnum):
    STATIC = 0  # shapes known: outputs preallocated (slab, or fresh for graph outputs)
    VIEW = 1  # output 0 is input `view_of_input` reshaped; nothing runs
    DYNAMIC = 2  # shaped again in every run from the actual arrays


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    node: CompiledNode
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]  # absent optional outputs get plan-private ids
    specs: tuple[TensorSpec, ...] | None  # static and view steps
    # What profiles and traces call the step: the node's name and op type, prefixed with the
    # If node (and its op type) whose branch the plan put in its place.
    name: str = ""
    label: str = ""


class ExecutionPlan:
    """The schedule, constants and memory layout for one input signature."""

    def __init__(self, graph: CompiledGraph, signature: Sequence[TensorSpec | None]) -> None:
        self.graph = graph
        self.signature = tuple(signature)
        self.ctx = RunContext(graph.kernels, graph.exact)
        self.value_count = len(graph.names)
        self.specs: list[TensorSpec | None] = [None] * self.value_count
        self.constants: list[Any] = [None] * self.value_count
        self._seed(signature)
        self.steps: list[Step] = []
        self._extra_names: list[str] = []  # of plan-private ids
        self._taken: set[str] | None = None  # all names, once a branch is inlined
        self._scope: tuple[str, str] | None = None  # (name, label) of the If being inlined
        for node in graph.nodes:
            self._plan(node)
        self.names = [*graph.names, *self._extra_names]
        self.output_ids = graph.output_ids
        self.memory = self._plan_memory()
        # Graph outputs a static step writes into a new array each run, or that a step whose
        # operator owns its results returns: the caller may keep them without a copy.
        owned = {
            value_id
            for step in self.steps
            if step.kind is StepKind.DYNAMIC and step.node.operator.owns_results
            for value_id in step.outputs
        }
        self.fresh_outputs = (self.per_run | owned) & set(self.output_ids)

    # -- seeding -------------------------------------------------------------------------------

    def _seed(self, signature: Sequence[TensorSpec | None]) -> None:
        graph = self.graph
        for value_id, array in graph.weights.items():
            self.constants[value_id] = array
            self.specs[value_id] = spec_of(array)
        for value_id, spec in zip(graph.input_ids, signature, strict=True):
            if spec is None:
                array = graph.defaults[value_id]
                self.constants[value_id] = array
                self.specs[value_id] = spec_of(array)
            elif isinstance(spec, TensorSpec):
                self.specs[value_id] = spec  # sequences and optionals stay run-time values

    def _private_id(self, spec: TensorSpec | None, name: str | None = None) -> int:
        if name is None:
            name = f"#unused{len(self._extra_names)}"
        elif self._taken is not None:
            unique, count = name, 1
            while unique in self._taken:
                unique, count = f"{name}#{count}", count + 1
            self._taken.add(unique)
            name = unique
        self._extra_names.append(name)
        self.specs.append(spec)
        self.constants.append(None)
        return len(self.specs) - 1

    # -- planning one node ---------------------------------------------------------------------

    def _plan(self, node: CompiledNode) -> None:
        operator, ins = node.operator, node.inputs
        if isinstance(operator, IfOp) and self._inline(node, operator):
            return
        if any(i != ABSENT and self.specs[i] is None for i in ins):
            self._schedule(StepKind.DYNAMIC, node, None)
            return
        all_constant = operator.foldable and all(
            i == ABSENT or self.constants[i] is not None for i in ins
        )
        if operator.outputs_data_dependent:
            if all_constant:
                self._fold(node, self._run_data_dependent(node))
            else:
                self._schedule(StepKind.DYNAMIC, node, None)
            return
        try:
            stated = operator.infer(self._infer_context(node))
        except NeedsRunTimeValues:
            self._schedule(StepKind.DYNAMIC, node, None)
            return
        except SessionError:
            raise
        except Exception as error:  # an operator bug must still name the node
            raise operator_failure(node, "shape inference", error) from error
        stated = stated[: len(node.outputs)]
        if all(isinstance(s, Constant) for s in stated):
            xp = self.graph.kernels.xp
            self._set_constants(node, [xp.asarray(s.value) for s in stated])
            return
        specs = tuple(stated)
        if all_constant:
            results = self._evaluate(node, specs)
            if self._foldable(node, results):
                self._set_constants(node, results)
                return
        kind = StepKind.VIEW if operator.view_of_input is not None else StepKind.STATIC
        self._schedule(kind, node, specs)

    def _inline(self, node: CompiledNode, operator: IfOp) -> bool:
        """Plan the branch of an If whose condition is known now in the If's place: its nodes
        read the If's captured values and write the If's outputs, so nothing is entered at
        run time. False (the If is planned as a node) when the condition is not known, or the
        branch passes an outer value or a constant straight through to an output."""
        condition = ABSENT if not node.inputs else node.inputs[0]
        value = None if condition == ABSENT else self.constants[condition]
        if value is None or value.size != 1:
            return False
        host = np.asarray(self.graph.kernels.memory.to_host(value)).reshape(-1)[0]
        body = (operator.then_branch if host else operator.else_branch).graph
        produced = {v for n in body.nodes for v in n.outputs}
        outputs = body.output_ids
        if (
            len(outputs) != len(node.outputs)
            or ABSENT in node.outputs
            or len(set(outputs)) != len(outputs)
            or not produced.issuperset(outputs)
            or body.defaults
        ):
            return False
        if self._taken is None:
            self._taken = {*self.graph.names, *self._extra_names}
        prefix = node.info.name
        captured = dict(zip(node.info.captured, node.inputs[len(node.info.inputs) :], strict=True))
        ids = {vid: captured[m.name] for m, vid in zip(body.inputs, body.input_ids, strict=True)}
        ids.update(zip(outputs, node.outputs, strict=True))
        for value_id, array in body.weights.items():
            ids[value_id] = self._private_id(spec_of(array), f"{prefix}/{body.names[value_id]}")
            self.constants[ids[value_id]] = array

        def mapped(values: tuple[int, ...]) -> tuple[int, ...]:
            for v in values:
                if v != ABSENT and v not in ids:
                    ids[v] = self._private_id(None, f"{prefix}/{body.names[v]}")
            return tuple(ABSENT if v == ABSENT else ids[v] for v in values)

        outer = self._scope
        self._scope = self._scoped(node.info.name, node.info.op_type)
        try:
            for inner in body.nodes:
                inputs = mapped(inner.inputs)
                self._plan(CompiledNode(inner.operator, inner.info, inputs, mapped(inner.outputs)))
        finally:
            self._scope = outer
        return True

    def _infer_context(self, node: CompiledNode) -> InferContext:
        specs = [None if i == ABSENT else self.specs[i] for i in node.inputs]
        values = [None if i == ABSENT else self.constants[i] for i in node.inputs]
        return InferContext(node.info, specs, HostValues(values, self.graph.kernels.memory.to_host))

    def _evaluate(self, node: CompiledNode, specs: Sequence[TensorSpec]) -> list[Any]:
        """Run a node whose inputs are all constants, now, with the session's kernels."""
        ins = [None if i == ABSENT else self.constants[i] for i in node.inputs]
        operator = node.operator
        if operator.view_of_input is not None:
            return [ins[operator.view_of_input].reshape(specs[0].shape)]
        xp = self.graph.kernels.xp
        outs = [xp.empty(s.shape, dtype=s.numpy_dtype) for s in specs]
        run_operator(node, operator.run, self.ctx, ins, outs)
        if self.graph.exact:
            for out in outs:
                canonical_nans(xp, out)
        return outs

    def _run_data_dependent(self, node: CompiledNode) -> list[Any]:
        ins = [None if i == ABSENT else self.constants[i] for i in node.inputs]
        return run_operator(node, node.operator.run, self.ctx, ins, None)

    def _foldable(self, node: CompiledNode, results: Sequence[Any]) -> bool:
        """Seed 000 §3.2: fold unless larger than both its inputs and 64 KiB."""
        largest_input = max(
            (self.constants[i].nbytes for i in node.inputs if i != ABSENT), default=0
        )  # constants are always tensors
        size = sum(r.nbytes for r in results)
        return size <= FOLD_LIMIT_BYTES or size <= largest_input

    def _fold(self, node: CompiledNode, results: Sequence[Any]) -> None:
        """Data-dependent results become constants, except sequences and optionals, which
        stay run-time values."""
        if all(is_tensor(r) for r in results) and self._foldable(node, results):
            self._set_constants(node, results)
        else:
            self._schedule(StepKind.DYNAMIC, node, None)

    def _set_constants(self, node: CompiledNode, values: Sequence[Any]) -> None:
        for value_id, value in zip(node.outputs, values, strict=False):
            if value_id != ABSENT:
                self.constants[value_id] = value
                self.specs[value_id] = spec_of(value)

    def _schedule(
        self, kind: StepKind, node: CompiledNode, specs: tuple[TensorSpec, ...] | None
    ) -> None:
        outputs = []
        for position, value_id in enumerate(node.outputs):
            spec = None if specs is None else specs[position]
            if value_id == ABSENT:
                value_id = self._private_id(spec)
            else:
                self.specs[value_id] = spec
            outputs.append(value_id)
        name, label = self._scoped(node.info.name, node.info.op_type)
        self.steps.append(Step(kind, node, node.inputs, tuple(outputs), specs, name, label))

    def _scoped(self, name: str, label: str) -> tuple[str, str]:
        """A node's name and op type as profiles show them, under the If inlined around it."""
        if self._scope is None:
            return name, label
        return f"{self._scope[0]}/{name}", f"{self._scope[1]}/{label}"

    # -- memory --------------------------------------------------------------------------------

    def _plan_memory(self) -> MemoryPlan:
        """Slab offsets for static intermediates; graph outputs and string values get new
        arrays in each run."""
        graph_outputs = set(self.output_ids)
        readers: dict[int, list[int]] = {}
        for index, step in enumerate(self.steps):
            for value_id in step.inputs:
                if value_id != ABSENT:
                    readers.setdefault(value_id, []).append(index)
        # A dynamic step of a view operator (Reshape, Unsqueeze ... shaped only in the run)
        # makes its output a view of its input then: the input's block must outlive the
        # view's readers too. Latest steps first, so a view of a view reaches the root.
        for step in reversed(self.steps):
            view_of = step.node.operator.view_of_input
            if step.kind is StepKind.DYNAMIC and view_of is not None:
                source = step.inputs[view_of]
                readers.setdefault(source, []).extend(readers.get(step.outputs[0], ()))
        self.in_slab: set[int] = set()
        self.per_run: set[int] = set()  # static outputs given a new array in every run
        values, steps = [], []
        for index, step in enumerate(self.steps):
            in_place = None
            operator = step.node.operator
            if step.kind is StepKind.STATIC:
                if operator.in_place_input is not None and step.outputs[0] not in graph_outputs:
                    source = step.inputs[operator.in_place_input]
                    in_place = self.names[source] if source in self.in_slab else None
                for value_id, spec in zip(step.outputs, step.specs, strict=True):
                    if value_id in graph_outputs or spec.numpy_dtype.kind == "O":
                        self.per_run.add(value_id)  # strings hold objects, not slab bytes
                        continue
                    self.in_slab.add(value_id)
                    values.append(self._planned(value_id, spec, index, readers))
            elif step.kind is StepKind.VIEW:
                source = step.inputs[operator.view_of_input]
                target = step.outputs[0]
                if source in self.in_slab:
                    self.in_slab.add(target)
                    values.append(
                        self._planned(
                            target,
                            step.specs[0],
                            index,
                            readers,
                            view_of=self.names[source],
                            is_output=target in graph_outputs,
                        )
                    )
            first_output = self.names[step.outputs[0]] if step.outputs else None
            steps.append(PlannedStep(in_place, first_output if in_place else None))
        return plan_memory(values, steps)

    def _planned(
        self,
        value_id: int,
        spec: TensorSpec,
        producer: int,
        readers: dict[int, list[int]],
        *,
        view_of: str | None = None,
        is_output: bool = False,
    ) -> PlannedValue:
        return PlannedValue(
            self.names[value_id], spec.nbytes, spec.dtype, producer,
            tuple(readers.get(value_id, ())), is_output, view_of,
        )  # fmt: skip
