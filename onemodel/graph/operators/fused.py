"""Fused: a chain of operators run as one step, made by the fusion pass (seed 001's fused steps).

The first member (a Conv, Gemm, MatMul or element-wise operator) reads the fused node's
inputs; every later member is element-wise and reads the previous member's result, its other
inputs being inputs of the fused node. Intermediate results go straight into the step's output
array when they have its shape and type, else into run scratch: a chain of N operators then
needs one slab buffer instead of N and one step of the run loop. Each member computes exactly
as it would alone, so fusing preserves bits. A first member that prepares its constant inputs
(a Conv's or MatMul's weight) is prepared once per plan through the fused step.

The operator is built by the pass from already-constructed members, never from an ONNX node,
so it has no entry in the operator table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from onemodel.graph.operators.base import (
    CHAIN,
    Array,
    BoundCall,
    BoundStep,
    Constant,
    InferContext,
    NodeInfo,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.prepared import PreparesConstants, prepared_call
from onemodel.tensors import onnx_code_for_numpy

PREVIOUS = -1  # a member input that is the previous member's result
_MAX_REMEMBERED = 64  # input signatures whose member specs are kept


@dataclass(frozen=True, slots=True)
class Member:
    """One operator of the chain and where each of its inputs comes from: an index into the
    fused node's inputs, PREVIOUS, or None for an absent optional input."""

    operator: Operator
    sources: tuple[int | None, ...]

    def inputs(self, fused_inputs: Sequence[Any], previous: Any) -> list[Any]:
        return [
            previous if s == PREVIOUS else None if s is None else fused_inputs[s]
            for s in self.sources
        ]


class Fused(PreparesConstants):
    """Members run one after another inside one step; see the module docstring."""

    layout_role = CHAIN

    def __init__(self, node: NodeInfo, members: Sequence[Member]) -> None:
        super().__init__(node)
        self.members = tuple(members)
        self.supports_exact = all(m.operator.supports_exact for m in self.members)  # type: ignore[misc]
        # Specs of the intermediate results by input signature, filled by `infer` (plan time)
        # so that `run` decides where each result goes without shape arithmetic.
        self._specs: dict[tuple, tuple[TensorSpec, ...]] = {}
        self._tails: dict[tuple, Any] = {}  # (exact, dtype) -> generated tail or None

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        previous: TensorSpec | None = None
        previous_value = None
        specs = []
        for member in self.members:
            member_specs = member.inputs(ctx.specs, previous)
            values = member.inputs([ctx.constant(i) for i in range(len(ctx))], previous_value)
            stated = member.operator.infer(
                InferContext(member.operator.node, member_specs, values)
            )[0]
            if isinstance(stated, Constant):
                previous_value = stated.value
                stated = TensorSpec(onnx_code_for_numpy(stated.value.dtype), stated.value.shape)
            else:
                previous_value = None
            previous = stated
            specs.append(stated)
        if len(self._specs) >= _MAX_REMEMBERED:
            self._specs.clear()
        self._specs[_signature(ctx.specs)] = tuple(specs)
        return [specs[-1]]

    def prepare(self, ctx: RunContext, constants: Sequence[Array | None]) -> Any:
        """The first member's prepared constants, if it prepares any."""
        first = self.members[0]
        if not isinstance(first.operator, PreparesConstants):
            return None
        return first.operator.prepare(ctx, first.inputs(constants, None))

    def prepare_for_plan(
        self,
        ctx: RunContext,
        constants: Sequence[Array | None],
        specs: Sequence[TensorSpec | None],
    ) -> Chain:
        """The chain for one plan: where each member writes and what it calls, decided once
        instead of in every run (a run then does no look-ups or shape compares)."""
        member_specs = self.member_specs(specs)
        first = self.members[0]
        prepared = None
        if isinstance(first.operator, PreparesConstants):  # what the first settles per plan
            prepared = first.operator.prepare_for_plan(
                ctx, first.inputs(constants, None), first.inputs(specs, None)
            )
        return self._chain(ctx, prepared, member_specs)

    def run_prepared(
        self, ctx: RunContext, prepared: Any, inputs: Sequence[Array | None], outputs: Any
    ) -> None:
        if isinstance(prepared, Chain):
            prepared.run(ctx, inputs, outputs[0])
            return
        specs = [None if a is None else TensorSpec(onnx_code_for_numpy(a.dtype), a.shape)
                 for a in inputs]  # fmt: skip
        self._chain(ctx, prepared, self.member_specs(specs)).run(ctx, inputs, outputs[0])

    def member_specs(self, specs: Sequence[TensorSpec | None]) -> tuple[TensorSpec, ...]:
        """Each member's result spec for these input specs (from `infer`, made at plan time
        or now for a run whose plan was made by another signature's infer)."""
        member_specs = self._specs.get(_signature(specs))
        if member_specs is None:
            self.infer(InferContext(self.node, list(specs), [None] * len(specs)))
            member_specs = self._specs[_signature(specs)]
        return member_specs

    def _chain(self, ctx: RunContext, prepared: Any, specs: Sequence[TensorSpec]) -> Chain:
        """Results go into the step's output when they have its shape and type, else into
        run scratch; the element-wise tail is one generated kernel where the backend has one."""
        out = specs[-1]
        tail = self._generated_tail(ctx, out.numpy_dtype)
        stop = len(self.members) - (0 if tail is None else len(tail.members))
        last = len(self.members) - 1
        links = []
        for index, (member, spec) in enumerate(zip(self.members[:stop], specs, strict=False)):
            into_out = index == last or (spec.shape == out.shape and spec.dtype == out.dtype)
            scratch = None if into_out else (spec.shape, spec.numpy_dtype)
            call = member.operator.run
            if index == 0 and prepared is not None:
                call = prepared_call(member.operator, prepared)  # type: ignore[arg-type]
            links.append((call, member.sources, scratch))
        operands = () if tail is None else tuple(tail.source.operands)
        return Chain(tuple(links), tail, operands, prepared)

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """The plan's chain with each member's own bound call (`Operator.bind`) and scratch
        made once (this run state's), run without the chain's per-run look-ups."""
        chain = step.prepared
        if not isinstance(chain, Chain) or chain.tail is not None:
            return None
        member_specs = self.member_specs(step.specs)
        links, previous, bound_any = [], None, False
        out_channels_last = 0 in step.channels_last_outputs
        previous_channels_last = False
        for index, (link, member) in enumerate(zip(chain.links, self.members, strict=False)):
            call, sources, scratch = link
            # A member's operands are held as the step's (its result, when written into out).
            result_channels_last = scratch is None and out_channels_last
            member_step = BoundStep(
                tuple(member.inputs(step.constants, None)),
                tuple(member.inputs(step.specs, previous)),
                (member_specs[index],),
                chain.prepared if index == 0 else None,
                frozenset(
                    position
                    for position, source in enumerate(member.sources)
                    if (source == PREVIOUS and previous_channels_last)
                    or (source is not None and source in step.channels_last_inputs)
                ),
                frozenset({0}) if result_channels_last else frozenset(),
            )
            previous_channels_last = result_channels_last
            bound = member.operator.bind(ctx, member_step)
            bound_any = bound_any or bound is not None
            target = None if scratch is None else ctx.xp.empty(*scratch)
            held = getattr(bound, "held_operand", None)
            if held is not None and sources[1 - held.position] == PREVIOUS:
                form = _HELD_SECOND if held.position else _HELD_FIRST
                links.append((held.ufunc, form, held.value, sources, target))
            else:
                links.append((bound or call, *_arguments(sources, len(step.specs)), target))
            previous = member_specs[index]
        if not bound_any:
            return None
        links_run = tuple(links)

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            out = outputs[0]
            previous = None
            for member_call, form, k, sources, target in links_run:
                if target is None:
                    target = out
                if form is _HELD_SECOND:  # ufunc(previous, held): k is the held operand
                    member_call(previous, k, target)
                    previous = target
                    continue
                if form is _HELD_FIRST:
                    member_call(k, previous, target)
                    previous = target
                    continue
                if form is _PREVIOUS_AND_INPUT:
                    arguments = (previous, inputs[k])
                elif form is _INPUT_AND_PREVIOUS:
                    arguments = (inputs[k], previous)
                elif form is _PREVIOUS:
                    arguments = (previous,)
                elif form is _INPUTS:
                    arguments = inputs
                elif form is _PICKED:
                    arguments = k(inputs)
                else:
                    arguments = [previous if s == PREVIOUS else None if s is None else inputs[s]
                                 for s in sources]  # fmt: skip
                member_call(ctx, arguments, (target,))
                previous = target

        return call

    def _generated_tail(self, ctx: RunContext, dtype: Any) -> Any:
        """The element-wise tail as one generated kernel, on a backend that generates them
        (CuPy: onemodel/backends/cupy_gpu/elementwise.py); None elsewhere. Asked once per
        mode and dtype."""
        key = (ctx.exact, dtype)
        if key not in self._tails:
            chain = [(m.operator.node.op_type, m.sources) for m in self.members]
            self._tails[key] = ctx.kernels.elementwise_tail(chain, dtype, ctx.exact)
        return self._tails[key]


@dataclass(frozen=True, slots=True)
class Chain:
    """A fused step as one plan runs it: per member (call, input sources, scratch (shape,
    dtype) or None for the step's output), and the generated tail with its operands."""

    links: tuple[tuple[Any, tuple[int | None, ...], Any], ...]
    tail: Any
    tail_operands: tuple[int, ...]
    prepared: Any = None  # what the first member prepared (the first link's call holds it)

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], out: Array) -> None:
        previous = None
        for call, sources, scratch in self.links:
            target = out if scratch is None else ctx.scratch(*scratch)
            call(
                ctx,
                [previous if s == PREVIOUS else None if s is None else inputs[s] for s in sources],
                [target],
            )
            previous = target
        if self.tail is not None:
            operands = [inputs[i] for i in self.tail_operands]
            ctx.kernels.run_elementwise_chain(self.tail.source, previous, operands, out)


# How a bound chain forms a member's inputs (`_arguments`), or calls a member's ufunc itself
# on the previous result and the operand its bound call holds (`HeldOperand`).
_INPUTS, _PICKED, _PREVIOUS = "inputs", "picked", "previous"
_PREVIOUS_AND_INPUT, _INPUT_AND_PREVIOUS, _GENERAL = "previous+input", "input+previous", "any"
_HELD_SECOND, _HELD_FIRST = "ufunc(previous, held)", "ufunc(held, previous)"


def _arguments(sources: tuple[int | None, ...], count: int) -> tuple[str, Any, tuple]:
    """(form, what it needs, sources): the fused step's `count` inputs as they are, two or
    more of them (picked by an itemgetter), the previous result alone, the previous result
    and input k or input k and the previous result, or any other mix (built from `sources`)."""
    if sources == tuple(range(count)):
        return _INPUTS, None, sources
    if len(sources) >= 2 and all(s is not None and s >= 0 for s in sources):
        return _PICKED, itemgetter(*sources), sources
    if sources == (PREVIOUS,):
        return _PREVIOUS, None, sources
    if len(sources) == 2 and PREVIOUS in sources and None not in sources:
        first = sources[0] == PREVIOUS
        return (_PREVIOUS_AND_INPUT if first else _INPUT_AND_PREVIOUS), sources[first], sources
    return _GENERAL, None, sources


def _signature(specs: Sequence[TensorSpec | None]) -> tuple:
    return tuple(None if s is None else (s.numpy_dtype, s.shape) for s in specs)
