"""Which intermediate values a fast host run holds channels last: the values on either side
of a depthwise convolution (MobileNet's and EfficientNet's blocks).

A depthwise convolution's fastest NumPy form sums its taps channels last, in one einsum over
runs of out_w·C values (numpy_cpu/channels_last_taps.py); planar values cost it two
transposing copies, more than the einsum itself (144 channels at 56×56, AMD EPYC, one
thread: 0.30 ms to copy x in against 0.56 for the taps). The 1×1 convolutions around it read
and write either layout at one GEMM's cost (numpy_cpu/pointwise_conv.py), and element-wise
members of their fused steps do not care. So such a value is held in the slab as its NHWC
bytes, seen as an NCHW-shaped view with NHWC strides (run_state.py): every operator computes
on it as on any strided array, and the bound calls of the steps around it are told
(`BoundStep.channels_last_inputs` and `…_outputs`) so that they take the forms that gain.

A value is held channels last when every step that writes or reads it is one whose form
takes it: a Conv (1×1 at unit strides without pads, or depthwise) or a fused step starting
with one, its element-wise members, a global average or mean; and it is the input or output
of a depthwise convolution or reached from one through such steps. So a MobileNet block's
values are channels last from its expansion to its projection and the residual sums between
blocks, and every 1×1 convolution among them reads and writes channels last, its fastest
form (numpy_cpu/pointwise_conv.py: the transposed product into a planar out is 1.6× slower).
Graph inputs and outputs, views, dynamic steps and other operators keep NCHW, so what
a caller sees never changes. Only plain runs use it (not exact or checked ones): those keep
the planar layout their bits are defined on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.graph.operators.base import CHAIN, ELEMENTWISE, HELD_CONV, REDUCES_PLANES
from onemodel.graph.operators.fused import Member
from onemodel.graph.plan import ExecutionPlan, Step, StepKind
from onemodel.graph.values import ABSENT


def channels_last_values(plan: ExecutionPlan) -> frozenset[int]:
    """The value ids of `plan` held channels last; empty where its backend has no
    channels-last forms or the plan is exact."""
    if plan.graph.exact or not plan.graph.kernels.holds_channels_last:
        return frozenset()
    layouts = _Layouts(plan)
    pending = []
    for step in plan.steps:
        conv = layouts.first_conv(step)
        if conv is not None and layouts.depthwise(step, conv):
            pending += [step.inputs[conv.sources[0]], step.outputs[0]]
    while pending:  # the values a chosen one reaches through the steps that take them
        value_id = pending.pop()
        if not layouts.consider(value_id):
            continue
        touching = [layouts.producers[value_id]] + [s for s, _ in layouts.readers.get(value_id, ())]
        for step in touching:
            if layouts.first_conv(step) is not None:
                pending += [v for v in (*step.inputs, *step.outputs) if v != ABSENT]
    return frozenset(layouts.chosen)


class _Layouts:
    """The plan's steps looked up by value, and the values chosen so far."""

    def __init__(self, plan: ExecutionPlan) -> None:
        self.plan = plan
        self.producers: dict[int, Step] = {}
        self.readers: dict[int, list[tuple[Step, int]]] = {}  # (step, input position)
        for step in plan.steps:
            for value_id in step.outputs:
                self.producers[value_id] = step
            for position, value_id in enumerate(step.inputs):
                if value_id != ABSENT:
                    self.readers.setdefault(value_id, []).append((step, position))
        self.chosen: set[int] = set()
        self.refused: set[int] = set()

    def consider(self, value_id: int) -> bool:
        """Choose the value if it is new and holdable; whether it was."""
        if value_id in self.chosen or value_id in self.refused:
            return False
        if not self._holdable(value_id):
            self.refused.add(value_id)
            return False
        self.chosen.add(value_id)
        return True

    def _holdable(self, value_id: int) -> bool:
        plan = self.plan
        spec = plan.specs[value_id]
        if value_id not in plan.in_slab or spec is None or len(spec.shape) != 4:
            return False
        if spec.numpy_dtype != np.float32 or spec.shape[2] * spec.shape[3] <= 1:
            return False
        producer = self.producers.get(value_id)
        if producer is None or not self._writes(producer):
            return False
        return all(self._reads(step, position) for step, position in self.readers.get(value_id, ()))

    # -- what a step is ----------------------------------------------------------------------

    @staticmethod
    def first_conv(step: Step) -> Member | None:
        """The Conv that starts a static step (as a fused member, or the step itself), or
        None."""
        operator = step.node.operator
        if step.kind is not StepKind.STATIC or operator.in_place_input is not None:
            return None
        if operator.layout_role == HELD_CONV:
            return Member(operator, tuple(range(len(step.inputs))))
        if operator.layout_role == CHAIN and operator.members[0].operator.layout_role == HELD_CONV:
            return operator.members[0]
        return None

    def _conv_shapes(self, step: Step, conv: Member) -> tuple | None:
        """(x shape, W) of a Conv member whose W is a float32 constant and x float32 4-D."""
        sources = conv.sources
        if len(sources) < 2 or sources[0] is None or sources[1] is None:
            return None
        x_id, w_id = step.inputs[sources[0]], step.inputs[sources[1]]
        x, w = self.plan.specs[x_id], self.plan.constants[w_id]
        if x is None or len(x.shape) != 4 or x.numpy_dtype != np.float32:
            return None
        if w is None or getattr(w, "dtype", None) != np.float32 or w.ndim != 4:
            return None
        return x.shape, w

    def depthwise(self, step: Step, conv: Member) -> bool:
        shapes = self._conv_shapes(step, conv)
        if shapes is None:
            return False
        x_shape, w = shapes
        group = conv.operator.group
        return group == x_shape[1] == w.shape[0] and w.shape[1] == 1 and w.shape[2:] != (1, 1)

    def _pointwise(self, step: Step, conv: Member) -> bool:
        shapes = self._conv_shapes(step, conv)
        if shapes is None or conv.operator.group != 1 or shapes[1].shape[2:] != (1, 1):
            return False
        placement = conv.operator.windows.place(shapes[0][2:], (1, 1))
        return (
            all(s == 1 for s in placement.strides)
            and not any(placement.pads_begin)
            and not any(placement.pads_end)
        )

    def _held_conv(self, step: Step, conv: Member) -> bool:
        return self.depthwise(step, conv) or self._pointwise(step, conv)

    def _conv_writes_out(self, step: Step) -> bool:
        """Whether a step's first Conv writes its result into the step's output (a fused
        member whose result has another shape writes into scratch)."""
        operator = step.node.operator
        if operator.layout_role != CHAIN:
            return True
        specs = [None if i == ABSENT else self.plan.specs[i] for i in step.inputs]
        return operator.member_specs(specs)[0].shape == step.specs[0].shape

    def _writes(self, step: Step) -> bool:
        """Whether every write of the step into its output takes a channels-last out."""
        conv = self.first_conv(step)
        if conv is None or len(step.outputs) != 1:
            return False
        if self._conv_writes_out(step) and not self._held_conv(step, conv):
            return False
        return _members_elementwise(step.node.operator)

    def _reads(self, step: Step, position: int) -> bool:
        """Whether the step takes a channels-last value as its input `position`."""
        operator = step.node.operator
        if operator.layout_role == REDUCES_PLANES:
            return step.kind is StepKind.STATIC and position == 0
        conv = self.first_conv(step)
        if conv is None or not _members_elementwise(operator):
            return False
        # Element-wise members read it as any operand; the Conv only as x, in a held form.
        slots = [slot for slot, source in enumerate(conv.sources) if source == position]
        return not slots or (slots == [0] and self._held_conv(step, conv))


def _members_elementwise(operator: Any) -> bool:
    if operator.layout_role != CHAIN:
        return True
    return all(m.operator.layout_role == ELEMENTWISE for m in operator.members[1:])
