"""Operators that derive arrays from their constant inputs once per plan, not in every run.

A convolution multiplies its weights as a (groups, M/groups, C/groups·ΠK) matrix; reshaping and
copying a constant W into that form in every run would cost as much as some of the work. Such an
operator subclasses `PreparesConstants`: the run loop calls `prepare_for_plan` once per plan with
the inputs known at plan time (None for the others) and their specs, which calls `prepare`
unless the operator settles more per plan, and hands what it returned to `run_prepared` in every
run. Plans are shared by concurrent runs, so a prepared value is never written after `prepare`
returns. `run` (plan-time folding, any other caller) prepares from the inputs at hand.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from onemodel.graph.operators.base import Array, Operator, RunContext, TensorSpec


class PreparesConstants(Operator):
    """An operator with a `prepare` step over its constant inputs."""

    def prepare(self, ctx: RunContext, constants: Sequence[Array | None]) -> Any:
        """What `run_prepared` needs from the inputs in `constants` (None: not a constant);
        None when nothing can be prepared."""
        return None

    def prepare_for_plan(
        self,
        ctx: RunContext,
        constants: Sequence[Array | None],
        specs: Sequence[TensorSpec | None],
    ) -> Any:
        """`prepare` as a plan calls it, also given every input's spec (None: absent), for an
        operator that can settle more once per plan (a fused chain's layout)."""
        return self.prepare(ctx, constants)

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> Any:
        return self.run_prepared(ctx, self.prepare(ctx, inputs), inputs, outputs)

    def run_prepared(
        self, ctx: RunContext, prepared: Any, inputs: Sequence[Array | None], outputs: Any
    ) -> Any:
        """`run`, given what `prepare` returned (None: compute what it would have)."""
        raise NotImplementedError


def prepared_call(operator: PreparesConstants, prepared: Any) -> Callable[..., Any]:
    """`operator.run_prepared` with `prepared` bound, called as `run` is: (ctx, inputs,
    outputs)."""
    return functools.partial(_run_prepared, operator.run_prepared, prepared)


def _run_prepared(run_prepared: Any, prepared: Any, ctx: Any, ins: Any, outs: Any) -> Any:
    return run_prepared(ctx, prepared, ins, outs)
