"""Run scratch (RunContext.scratch): a run state's context hands a warm run the arrays it made
for the same requests in the run before, and never the same memory twice in one run."""

from __future__ import annotations

import numpy as np

from onemodel.backends.paths import KernelPaths
from onemodel.graph.operators.base import RunContext
from onemodel.tensors import Arena, BufferPool
from onemodel.tensors.buffers import POISON


def _context(**options) -> RunContext:
    return RunContext(KernelPaths.get("numpy"), False, **options)


def test_a_warm_run_gets_the_arrays_of_the_run_before():
    ctx = _context(keeps_scratch=True)
    ctx.begin_run()
    first = [ctx.scratch((4, 3), np.float32), ctx.scratch((2,), np.int64)]
    ctx.begin_run()
    again = [ctx.scratch((4, 3), np.float32), ctx.scratch((2,), np.int64)]
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert again[0].flags.c_contiguous and again[0].shape == (4, 3)


def test_a_shape_given_as_a_list_is_the_same_request():
    """Resize asks with list shapes: a miss would also drop every later step's arrays, and a
    run would allocate (and page in) all of them afresh."""
    ctx = _context(keeps_scratch=True)
    ctx.begin_run()
    first = [ctx.scratch([1, 4, 3], np.float32), ctx.scratch((6,), np.float32)]
    ctx.begin_run()
    again = [ctx.scratch([1, 4, 3], np.float32), ctx.scratch((6,), np.float32)]
    assert all(a is b for a, b in zip(first, again, strict=True))


def test_a_request_that_differs_gets_new_memory_and_drops_the_rest():
    ctx = _context(keeps_scratch=True)
    ctx.begin_run()
    a, _b, c = (ctx.scratch((8,), np.float32) for _ in range(3))
    ctx.begin_run()
    same = ctx.scratch((8,), np.float32)
    other = ctx.scratch((8,), np.float64)  # differs from b: b and c are dropped
    third = ctx.scratch((8,), np.float32)
    assert same is a and other.dtype == np.float64
    assert third is not c and not np.shares_memory(third, same)
    arrays = [same, other, third]
    assert not any(np.shares_memory(x, y) for i, x in enumerate(arrays) for y in arrays[i + 1 :])


def test_one_run_never_gets_one_array_twice():
    ctx = _context(keeps_scratch=True)
    for _ in range(3):
        ctx.begin_run()
        arrays = [ctx.scratch((5,), np.float32) for _ in range(4)]
        assert len({id(x) for x in arrays}) == 4


def test_without_a_run_state_scratch_is_new_and_checked_runs_use_the_arena():
    plain = _context()
    assert plain.scratch((3,), np.float32) is not plain.scratch((3,), np.float32)
    checked = _context(arena=Arena(BufferPool(checked=True)), keeps_scratch=True)
    checked.begin_run()
    array = checked.scratch((3,), np.float32)
    assert (array.view(np.uint8) == POISON).all()  # arena memory, poisoned
    assert not checked.keeps_scratch
