"""The memory planner (seed 000 §5): hand-computed plans, a property test and the limits.

Sizes below are in units U = 64 bytes, the alignment, so a value of one unit takes one block.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onemodel.errors import ErrorKind, SessionError
from onemodel.graph.memory_plan import MemoryPlan, PlannedStep, PlannedValue, plan_memory

U = 64
FLOAT = 1
INT64 = 7


def value(
    name: str, units: int, producer: int, readers: Sequence[int] = (), **kwargs
) -> PlannedValue:
    """A float value of `units` blocks (keyword `nbytes` overrides the size)."""
    nbytes = kwargs.pop("nbytes", units * U)
    kwargs.setdefault("dtype_code", FLOAT)
    return PlannedValue(name, nbytes, producer=producer, readers=tuple(readers), **kwargs)


def plain(n: int) -> list[PlannedStep]:
    return [PlannedStep() for _ in range(n)]


def chain(n_steps: int, *, in_place: bool) -> tuple[list[PlannedValue], list[PlannedStep]]:
    """x (staged) -> v0 -> v1 -> ... -> v{n-1} (the output), one unit each."""
    values = [value("x", 1, -1, [0])]
    values += [value(f"v{k}", 1, k, [k + 1]) for k in range(n_steps - 1)]
    values.append(value(f"v{n_steps - 1}", 1, n_steps - 1, is_output=True))
    inputs = ["x"] + [f"v{k}" for k in range(n_steps - 1)]
    steps = [PlannedStep(in_place_input=name if in_place else None) for name in inputs]
    return values, steps


# --- Plans computed by hand -----------------------------------------------------------------


def test_a_chain_ping_pongs_between_two_blocks_without_in_place():
    # x@0 is staged. Step 0 places b while x is still read: b@64, then x's block is freed.
    # Step 1: c takes the free block 0, b is freed. Step 2: d takes 64. Two blocks in all.
    values, steps = chain(3, in_place=False)
    plan = plan_memory(values, steps)
    assert plan.offsets == {"x": 0, "v0": U, "v1": 0, "v2": U}
    assert plan.slab_bytes == 2 * U
    assert plan.releases == (((0, U),), ((U, U),), ((0, U),))
    assert plan.aliases == {}


def test_a_chain_in_place_needs_one_block():
    # Every step's input dies there and is alone in its block: each output takes it over.
    values, steps = chain(3, in_place=True)
    plan = plan_memory(values, steps)
    assert plan.offsets == {"x": 0, "v0": 0, "v1": 0, "v2": 0}
    assert plan.slab_bytes == U
    assert plan.releases == ((), (), ())  # the one block passes to the output, live to the end
    assert plan.aliases == {"v0": "x", "v1": "v0", "v2": "v1"}


def test_a_diamond_needs_three_blocks():
    # a -> b (step 0), a -> c (step 1), b + c -> d (step 2). At step 1, a (read), b (read at 2)
    # and c (being written) are all live: three blocks is optimal. a@0, b@64, c@128; a dies
    # after step 1, so d takes block 0.
    values = [
        value("a", 1, -1, [0, 1]),
        value("b", 1, 0, [2]),
        value("c", 1, 1, [2]),
        value("d", 1, 2, is_output=True),
    ]
    plan = plan_memory(values, plain(3))
    assert plan.offsets == {"a": 0, "b": U, "c": 2 * U, "d": 0}
    assert plan.slab_bytes == 3 * U
    assert plan.releases == ((), ((0, U),), ((U, U), (2 * U, U)))


def test_a_value_read_by_a_late_step_keeps_its_block():
    # x (step 0) is read at steps 1 and 3, so it holds block 0 throughout. y@64 (step 1);
    # z (step 2) is placed before y dies: z@128; y's block is then free and w (step 3) takes it.
    values = [
        value("x", 1, 0, [1, 3]),
        value("y", 1, 1, [2]),
        value("z", 1, 2, [3]),
        value("w", 1, 3, is_output=True),
    ]
    plan = plan_memory(values, plain(4))
    assert plan.offsets == {"x": 0, "y": U, "z": 2 * U, "w": U}
    assert plan.slab_bytes == 3 * U
    assert plan.releases == ((), (), ((U, U),), ((0, U), (2 * U, U)))


@pytest.mark.parametrize(("is_output", "slab_units"), [(True, 3), (False, 2)])
def test_outputs_live_to_the_end(is_output, slab_units):
    # o (step 0) has no readers. As an output it keeps block 0 to the end, so p@64 and q@128;
    # otherwise it dies at step 0, p reuses block 0 and q (placed before p dies) takes 64.
    values = [
        value("o", 1, 0, is_output=is_output),
        value("p", 1, 1, [2]),
        value("q", 1, 2, is_output=True),
    ]
    plan = plan_memory(values, plain(3))
    assert plan.slab_bytes == slab_units * U
    if is_output:
        assert plan.offsets == {"o": 0, "p": U, "q": 2 * U}
        assert plan.releases == ((), (), ((U, U),))
    else:
        assert plan.offsets == {"o": 0, "p": 0, "q": U}
        assert plan.releases == (((0, U),), (), ((0, U),))


def test_a_view_shares_its_source_block_and_keeps_it_alive():
    # s (step 0) is read only by the step that makes its view v (step 1); v is read at step 3,
    # so s's block stays taken until then: t (step 2) cannot reuse it and goes to 64; u (step 3)
    # is placed while s and t are still held: 128. Both blocks fall free after step 3.
    values = [
        value("s", 1, 0, [1]),
        value("v", 1, 1, [3], view_of="s"),
        value("t", 1, 2, [3]),
        value("u", 1, 3, is_output=True),
    ]
    plan = plan_memory(values, plain(4))
    assert plan.offsets == {"s": 0, "v": 0, "t": U, "u": 2 * U}
    assert plan.slab_bytes == 3 * U
    assert plan.releases == ((), (), (), ((0, U), (U, U)))


def test_best_fit_takes_the_smallest_block_that_fits():
    # Step 0 makes a (3 units)@0, b (1)@192, c (2)@256 and d (1)@384; b and d live to the end
    # and keep the free blocks apart. After step 1, a and c are free: blocks of 3 units at 0 and
    # 2 units at 256. r (2 units, step 2) fits both and goes to the smaller one.
    values = [
        value("a", 3, 0, [1]),
        value("b", 1, 0, is_output=True),
        value("c", 2, 0, [1]),
        value("d", 1, 0, is_output=True),
        value("r", 2, 2, is_output=True),
    ]
    plan = plan_memory(values, plain(3))
    assert plan.offsets["r"] == 256
    assert plan.slab_bytes == 7 * U  # 3 + 1 + 2 + 1 units from step 0; r grows nothing


def test_best_fit_ties_go_to_the_lowest_offset_and_leftovers_stay_free():
    # a (2 units)@0, b (1)@128, c (2)@192, d (1)@320 as above; a and c die at step 1, leaving
    # two free blocks of 2 units. r (1 unit) takes the one at 0; s (1 unit, same step) takes
    # what is left of it, 64, the smallest free block now.
    values = [
        value("a", 2, 0, [1]),
        value("b", 1, 0, is_output=True),
        value("c", 2, 0, [1]),
        value("d", 1, 0, is_output=True),
        value("r", 1, 2, is_output=True),
        value("s", 1, 2, is_output=True),
    ]
    plan = plan_memory(values, plain(3))
    assert (plan.offsets["r"], plan.offsets["s"]) == (0, U)
    assert plan.slab_bytes == 6 * U  # 2 + 1 + 2 + 1 units from step 0


@pytest.mark.parametrize(("a_dies", "b_dies"), [(1, 2), (2, 1), (1, 1)])
def test_adjacent_free_blocks_coalesce(a_dies, b_dies):
    # a@0 and b@64 (1 unit each), s@128 lives to the end. Whichever order a and b are freed in,
    # the two blocks merge into one of 2 units at 0, which r (2 units, step 3) takes: the slab
    # stays at 3 units instead of growing to 5.
    values = [
        value("a", 1, 0, [a_dies]),
        value("b", 1, 0, [b_dies]),
        value("s", 1, 0, is_output=True),
        value("r", 2, 3, is_output=True),
    ]
    plan = plan_memory(values, plain(4))
    assert plan.offsets["r"] == 0
    assert plan.slab_bytes == 3 * U


def test_growth_extends_a_free_block_at_the_end_of_the_slab():
    # s@0 lives to the end, a@64 dies at step 1, leaving a free unit at the end of the slab.
    # r (2 units) fits nowhere; it starts at 64 and the slab grows to 3 units, not 4.
    values = [
        value("s", 1, 0, is_output=True),
        value("a", 1, 0, [1]),
        value("r", 2, 2, is_output=True),
    ]
    plan = plan_memory(values, plain(3))
    assert plan.offsets["r"] == U
    assert plan.slab_bytes == 3 * U


def test_outputs_are_placed_before_dying_inputs_are_freed():
    # y is the same size as x, which dies at step 0, but without an in-place alias y must not
    # get x's block: the kernel would overwrite x while still reading it.
    values = [value("x", 1, -1, [0]), value("y", 1, 0, is_output=True)]
    plan = plan_memory(values, plain(1))
    assert plan.offsets == {"x": 0, "y": U}
    assert plan.releases == (((0, U),),)


def test_in_place_takes_a_larger_block_and_frees_it_whole():
    # x (2 units) dies at step 0 and y (40 bytes, 1 unit once aligned) takes over all of x's
    # block; z (step 1, no in-place) is placed while y still holds it, at 128. The block is
    # freed after step 1 as the 2 units x had, not the 1 unit y needed.
    values = [
        value("x", 2, -1, [0]),
        value("y", 0, 0, [1], nbytes=40),
        value("z", 1, 1, is_output=True),
    ]
    steps = [PlannedStep(in_place_input="x"), PlannedStep()]
    plan = plan_memory(values, steps)
    assert plan.aliases == {"y": "x"}
    assert plan.offsets == {"x": 0, "y": 0, "z": 2 * U}
    assert plan.releases == ((), ((0, 2 * U),))


IN_PLACE_REFUSALS = {
    # x is read again at step 1, so it does not die at step 0.
    "another reader later": [
        value("x", 1, -1, [0, 1]),
        value("y", 1, 0, [1]),
        value("z", 1, 1, is_output=True),
    ],
    # v, a view of x made at step 0, is read by step 1 too: overwriting x would overwrite
    # what v shows while the kernel reads it.
    "a live view shares the block": [
        value("x", 1, -1, [0, 1]),
        value("v", 1, 0, [1], view_of="x"),
        value("y", 1, 1, is_output=True),
    ],
    # x's own last use is step 1, but its view v is read at step 2: the block is still needed.
    "a view outlives the input": [
        value("x", 1, -1, [0, 1]),
        value("v", 1, 0, [2], view_of="x"),
        value("y", 1, 1, [2]),
        value("z", 1, 2, is_output=True),
    ],
    # x is int64, y float: a kernel cannot reuse the elements in place.
    "different element types": [
        value("x", 1, -1, [0], dtype_code=INT64),
        value("y", 1, 0, is_output=True),
    ],
    # y needs 2 units, x's block has 1.
    "block too small": [value("x", 1, -1, [0]), value("y", 2, 0, is_output=True)],
}


@pytest.mark.parametrize("case", IN_PLACE_REFUSALS, ids=list(IN_PLACE_REFUSALS))
def test_in_place_is_refused(case):
    # The step that writes y asks to overwrite x; every other step is plain.
    values = IN_PLACE_REFUSALS[case]
    by_name = {v.name: v for v in values}
    n_steps = 1 + max(max(v.readers, default=v.producer) for v in values)
    steps = plain(n_steps)
    steps[by_name["y"].producer] = PlannedStep(in_place_input="x", in_place_output="y")
    plan = plan_memory(values, steps)
    assert plan.aliases == {}
    assert plan.offsets["y"] != plan.offsets["x"]


def test_in_place_of_a_value_outside_the_slab_is_declined():
    # "w" is a dynamic value, not passed in: y gets a block of its own.
    values = [value("y", 1, 0, is_output=True)]
    plan = plan_memory(values, [PlannedStep(in_place_input="w")])
    assert plan.aliases == {}
    assert plan.slab_bytes == U


def test_in_place_names_the_output_that_takes_over():
    # Step 0 writes a and b; the kernel may overwrite x with b, the second output.
    values = [
        value("x", 1, -1, [0]),
        value("a", 1, 0, is_output=True),
        value("b", 1, 0, is_output=True),
    ]
    steps = [PlannedStep(in_place_input="x", in_place_output="b")]
    plan = plan_memory(values, steps)
    assert plan.aliases == {"b": "x"}
    assert plan.offsets == {"x": 0, "a": U, "b": 0}


def test_zero_byte_values_take_no_space_and_sizes_round_up():
    # e is empty: offset 0, no block. x (1 byte) and y (65 bytes) take 1 and 2 aligned units.
    values = [
        value("e", 0, -1, [0]),
        value("x", 0, -1, [0], nbytes=1),
        value("y", 0, 0, is_output=True, nbytes=65),
    ]
    plan = plan_memory(values, plain(1))
    assert plan.offsets == {"e": 0, "x": 0, "y": U}
    assert plan.slab_bytes == 3 * U
    assert plan.releases == (((0, U),),)


def test_an_unread_staged_input_is_freed_after_step_0():
    values = [value("x", 1, -1), value("y", 1, 0, is_output=True)]
    plan = plan_memory(values, plain(1))
    assert plan.offsets == {"x": 0, "y": U}
    assert plan.releases == (((0, U),),)


@pytest.mark.parametrize(
    ("values", "steps", "message"),
    [
        ([value("a", 1, 0), value("a", 1, 0)], plain(1), "twice"),
        ([value("a", 1, 0, [0])], plain(1), "not after its producer"),
        ([value("a", 1, 2)], plain(1), "not in the plan"),
        ([value("v", 1, 0, view_of="s"), value("s", 1, 0)], plain(1), "not an earlier value"),
        ([value("s", 1, 0), value("v", 2, 0, view_of="s")], plain(1), "larger than its source"),
        (
            [value("a", 1, 0)],
            [PlannedStep(in_place_input="w", in_place_output="b")],
            "not a value it writes",
        ),
        ([value("x", 1, -1), value("y", 1, 0)], [PlannedStep("x")], "not read by it"),
    ],
)
def test_inconsistent_descriptions_are_refused(values, steps, message):
    with pytest.raises(ValueError, match=message):
        plan_memory(values, steps)


# --- Limits ---------------------------------------------------------------------------------


def test_a_slab_of_exactly_2_gib_is_accepted():
    values = [value("a", 0, 0, [1], nbytes=2**30), value("b", 0, 0, [1], nbytes=2**30)]
    assert plan_memory(values, plain(2)).slab_bytes == 2**31


def test_a_slab_over_2_gib_is_refused_naming_the_value():
    values = [value("a", 0, 0, [1], nbytes=2**30), value("big", 0, 0, [1], nbytes=2**30 + 1)]
    with pytest.raises(SessionError) as raised:
        plan_memory(values, plain(2))
    assert raised.value.kind is ErrorKind.UNSUPPORTED
    assert raised.value.value == "big"
    assert "'big'" in str(raised.value)


@pytest.mark.parametrize(("in_place", "slab_units"), [(False, 2), (True, 1)])
def test_a_100000_step_chain_plans_quickly(in_place, slab_units):
    values, steps = chain(100_000, in_place=in_place)
    started = time.process_time()  # CPU time: other processes' load on a shared machine aside
    plan = plan_memory(values, steps)
    assert time.process_time() - started < 3.0
    assert plan.slab_bytes == slab_units * U


# --- Property test --------------------------------------------------------------------------

SIZES = (0, 1, 63, 64, 65, 128, 200, 256)


@st.composite
def schedules(draw) -> tuple[list[PlannedValue], list[PlannedStep]]:
    """A random schedule: staged inputs, 0-2 values per step, random readers and outputs; some
    values are views (read by the step that makes them, no larger than their source) or ask to
    take over an input in place (often a fitting one that dies there); other steps make random
    in-place requests, naming any input or one outside the slab."""
    n_steps = draw(st.integers(1, 8))
    specs: list[dict] = []
    requests: dict[int, tuple[str, str]] = {}
    for producer in range(-1, n_steps):
        for _ in range(draw(st.integers(0, 3 if producer < 0 else 2))):
            spec = _draw_value_spec(draw, f"v{len(specs)}", producer, n_steps)
            earlier = [other for other in specs if other["producer"] < producer]
            if producer >= 0 and earlier:
                _draw_sharing(draw, spec, earlier, requests)
            specs.append(spec)
    values = [PlannedValue(**{**spec, "readers": tuple(sorted(spec["readers"]))}) for spec in specs]
    steps = [_draw_step(draw, k, values, requests.get(k)) for k in range(n_steps)]
    return values, steps


def _draw_value_spec(draw, name: str, producer: int, n_steps: int) -> dict:
    later_steps = st.integers(producer + 1, n_steps - 1)
    return {
        "name": name,
        "nbytes": draw(st.sampled_from(SIZES)),
        "dtype_code": draw(st.sampled_from((FLOAT, INT64))),
        "producer": producer,
        "readers": draw(st.sets(later_steps, max_size=3)) if producer + 1 < n_steps else set(),
        "is_output": draw(st.sampled_from((False, False, False, True))),
        "view_of": None,
    }


def _draw_sharing(draw, spec: dict, earlier: list[dict], requests: dict) -> None:
    """Maybe make `spec` a view of an earlier value, or the in-place output of its step."""
    how = draw(st.sampled_from(("own", "view", "in place", "in place")))
    if how == "own" or (how == "in place" and spec["producer"] in requests):
        return
    source = draw(st.sampled_from(earlier))
    if how == "in place" and draw(st.sampled_from((True, True, False))):
        # No reader after this step (any reader added so far is a view's, made by now).
        source["readers"] = {r for r in source["readers"] if r <= spec["producer"]}
    source["readers"].add(spec["producer"])
    if how == "view":
        spec["view_of"] = source["name"]
        spec["nbytes"] = draw(st.integers(0, source["nbytes"]))
        spec["dtype_code"] = source["dtype_code"]
        return
    requests[spec["producer"]] = (source["name"], spec["name"])
    spec["nbytes"] = draw(st.sampled_from((source["nbytes"], source["nbytes"], spec["nbytes"])))
    spec["dtype_code"] = draw(st.sampled_from((source["dtype_code"],) * 3 + (spec["dtype_code"],)))


def _draw_step(
    draw, index: int, values: list[PlannedValue], request: tuple[str, str] | None
) -> PlannedStep:
    if request is not None:
        source, target = request
        return PlannedStep(source, draw(st.sampled_from((None, target))))
    if not draw(st.booleans()):
        return PlannedStep()
    inputs = [v.name for v in values if index in v.readers]
    outputs = [v.name for v in values if v.producer == index and v.view_of is None]
    return PlannedStep(
        in_place_input=draw(st.sampled_from([*inputs, "dynamic"])),
        in_place_output=draw(st.sampled_from([None, *outputs])),
    )


def last_use(v: PlannedValue, n_steps: int) -> int:
    """The seed's lastUse: the last reader, else the producer; outputs live to the end."""
    return n_steps if v.is_output else max(v.readers, default=v.producer)


def root_of(name: str, by_name: dict[str, PlannedValue]) -> str:
    """The value whose block `name` lives in: itself, or the source at the end of its views."""
    while by_name[name].view_of is not None:
        name = by_name[name].view_of
    return name


def aligned(nbytes: int) -> int:
    return -(-nbytes // U) * U


def check_alignment_and_bounds(values, plan: MemoryPlan) -> None:
    assert set(plan.offsets) == {v.name for v in values}
    for v in values:
        assert plan.offsets[v.name] % U == 0
        assert plan.offsets[v.name] + v.nbytes <= plan.slab_bytes
    assert plan.slab_bytes % U == 0


def check_aliases(values, steps, plan: MemoryPlan) -> None:
    """Each alias is one the step asked for, between a dying input and an output that fits."""
    by_name = {v.name: v for v in values}
    n_steps = len(steps)
    for target, source in plan.aliases.items():
        out, inp = by_name[target], by_name[source]
        step = steps[out.producer]
        assert step.in_place_input == source
        assert step.in_place_output in (None, target)
        assert inp.dtype_code == out.dtype_code
        assert out.producer in inp.readers
        assert last_use(inp, n_steps) == out.producer
        family = root_of(source, by_name)
        assert all(
            last_use(other, n_steps) < out.producer
            for other in values
            if other.name != source and root_of(other.name, by_name) == family
        )


def check_no_overlap(values, steps, plan: MemoryPlan) -> None:
    """Values live at the same step hold disjoint bytes, except views and in-place aliases."""
    by_name = {v.name: v for v in values}
    n_steps = len(steps)
    for i, u in enumerate(values):
        for w in values[i + 1 :]:
            if u.nbytes == 0 or w.nbytes == 0:
                continue
            if root_of(u.name, by_name) == root_of(w.name, by_name):
                continue
            if plan.aliases.get(w.name) == u.name or plan.aliases.get(u.name) == w.name:
                continue
            at_once = u.producer <= last_use(w, n_steps) and w.producer <= last_use(u, n_steps)
            u_start, w_start = plan.offsets[u.name], plan.offsets[w.name]
            apart = u_start + u.nbytes <= w_start or w_start + w.nbytes <= u_start
            assert not at_once or apart, (u, w, plan)


class BlockReplay:
    """The slab's blocks replayed from a plan: offset -> (size, step that allocated it)."""

    def __init__(self, values: list[PlannedValue], n_steps: int, plan: MemoryPlan) -> None:
        self.values = values
        self.n_steps = n_steps
        self.plan = plan
        self.by_name = {v.name: v for v in values}
        self.held: dict[int, tuple[int, int]] = {}

    def place(self, step: int) -> None:
        """Blocks of the roots made at `step` go into free bytes; in-place outputs fit theirs."""
        for v in self.values:
            if v.producer != step or v.view_of is not None or v.nbytes == 0:
                continue
            start, size = self.plan.offsets[v.name], aligned(v.nbytes)
            if v.name in self.plan.aliases:
                assert self.held[start][0] >= size
                continue
            assert all(start + size <= o or o + s <= start for o, (s, _) in self.held.items())
            self.held[start] = (size, step)

    def release(self, step: int) -> None:
        """Each released block is held, and its last user was this very step."""
        for offset, size in self.plan.releases[step]:
            held_size, since = self.held.pop(offset)
            assert held_size == size
            users = self.users(offset, size, since, step)
            assert max(max(last_use(v, self.n_steps), 0) for v in users) == step

    def users(self, offset: int, size: int, since: int, until: int) -> list[PlannedValue]:
        """The values made from step `since` to `until` that live in the block at `offset`."""
        return [
            v
            for v in self.values
            if self.by_name[root_of(v.name, self.by_name)].nbytes > 0
            and offset <= self.plan.offsets[v.name] < offset + size
            and since <= v.producer <= until
        ]


def check_releases(values, steps, plan: MemoryPlan) -> None:
    """Replay the blocks: each is allocated into free bytes, released exactly once at the step
    of its last user, and only blocks holding a value that lives to the end are never released.
    """
    assert len(plan.releases) == len(steps)
    replay = BlockReplay(values, len(steps), plan)
    replay.place(-1)
    for step in range(len(steps)):
        replay.place(step)
        replay.release(step)
    for offset, (size, since) in replay.held.items():
        assert any(v.is_output for v in replay.users(offset, size, since, len(steps)))


@settings(max_examples=300, deadline=None)
@given(schedules())
def test_random_schedules_keep_live_values_apart(schedule):
    values, steps = schedule
    plan = plan_memory(values, steps)
    check_alignment_and_bounds(values, plan)
    check_aliases(values, steps, plan)
    check_no_overlap(values, steps, plan)
    check_releases(values, steps, plan)
