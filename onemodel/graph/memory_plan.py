"""The memory planner of execution plans (seed 000 §5): byte offsets in one slab per run state.

Every static-shaped value of a plan, and the staging area of every input, lives in one slab at an
offset chosen here, once per plan, so that a run writes kernels' results with `out=` into memory
it already has instead of allocating. Offsets come from liveness: steps are walked in schedule
order, a value takes the smallest free block that fits (best fit, ties to the lowest offset) or
grows the slab, and its block is returned to the free list after the last step that uses it.

The planner sees only names, sizes, element-type codes and step indices; it knows nothing of
arrays, ONNX or backends, so it can be tested exhaustively on its own.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from onemodel.errors import ErrorKind, SessionError

ALIGNMENT = 64
"""Offsets and sizes in the slab are multiples of this, like every tensor buffer's start."""

SLAB_LIMIT = 2**31
"""A plan whose slab would need more bytes than this (2 GiB) is refused."""

Release = tuple[int, int]
"""A block of the slab as (offset, size in bytes)."""


@dataclass(frozen=True, slots=True)
class PlannedValue:
    """A value the slab must hold, as the planner sees it.

    `producer` is the step that writes the value, or -1 for a plan input staged in the slab
    before step 0. `readers` are the steps that read it, all after `producer`. A graph output
    (`is_output`) lives to the end of the run. A view (`view_of`, naming a value earlier in the
    list) has no bytes of its own: it shares its source's block and keeps it alive as long as
    itself.
    """

    name: str
    nbytes: int
    dtype_code: int
    producer: int
    readers: tuple[int, ...] = ()
    is_output: bool = False
    view_of: str | None = None


@dataclass(frozen=True, slots=True)
class PlannedStep:
    """One step of the schedule, as far as memory goes: whether its kernel may work in place.

    `in_place_input` names the input the kernel may overwrite (normally its first), and
    `in_place_output` the output that would take over that input's block; None means the step's
    first output in the order of the planner's `values`. Whether the alias is actually made is
    the planner's decision (see `plan_memory`); the kernel must work either way.
    """

    in_place_input: str | None = None
    in_place_output: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Where every value lives in the slab, how big the slab is, and when blocks fall free.

    `releases[k]` lists the blocks, as (offset, size) in offset order, that become free after
    step k, so that a checked run state can poison them at once. Blocks of values that live to
    the end are never released. `aliases` maps each output that took over an input's block in
    place to that input.
    """

    offsets: dict[str, int]
    slab_bytes: int
    releases: tuple[tuple[Release, ...], ...]
    aliases: dict[str, str]


def plan_memory(
    values: Sequence[PlannedValue],
    steps: Sequence[PlannedStep],
    *,
    alignment: int = ALIGNMENT,
    limit: int = SLAB_LIMIT,
) -> MemoryPlan:
    """Give every value an `alignment`-aligned offset in one slab of at most `limit` bytes.

    `steps[k]` describes step k of the schedule. Values outside the slab (dynamic values,
    constants) are not passed in; a step's in-place request naming one of them is declined.
    Zero-byte values get offset 0 and take no space. An output takes over its step's in-place
    input only when that input dies at the step, no other value sharing its block (a view, or
    the source it is a view of) is still live there, the block is large enough and the element
    types match; otherwise outputs get fresh blocks while the step's dying inputs still hold
    theirs, so a kernel never writes over what it reads.

    Raises ValueError for an inconsistent description and `SessionError` (UNSUPPORTED), naming
    the value that pushed it over, when the slab would exceed `limit`.
    """
    _check(values, steps)
    return _Planner(values, len(steps), alignment, limit).run(steps)


def _check(values: Sequence[PlannedValue], steps: Sequence[PlannedStep]) -> None:
    """Refuse descriptions the planner would silently turn into overlapping memory."""
    seen: dict[str, PlannedValue] = {}
    for value in values:
        if value.name in seen:
            raise ValueError(f"value '{value.name}' is described twice")
        _check_value(value, seen, len(steps))
        seen[value.name] = value
    for index, step in enumerate(steps):
        _check_step(index, step, seen)


def _check_value(value: PlannedValue, earlier: dict[str, PlannedValue], n_steps: int) -> None:
    """One value: a real size, steps inside the schedule, and a view no larger than its source."""
    if value.nbytes < 0:
        raise ValueError(f"value '{value.name}' has a negative size")
    if not -1 <= value.producer < n_steps:
        raise ValueError(f"value '{value.name}' is made by step {value.producer}, not in the plan")
    if any(not value.producer < reader < n_steps for reader in value.readers):
        raise ValueError(f"value '{value.name}' is read by a step not after its producer")
    if value.view_of is None:
        return
    source = earlier.get(value.view_of)
    if source is None:
        raise ValueError(f"view '{value.name}' of '{value.view_of}', not an earlier value")
    if value.nbytes > source.nbytes:
        raise ValueError(f"view '{value.name}' is larger than its source '{source.name}'")


def _check_step(index: int, step: PlannedStep, values: dict[str, PlannedValue]) -> None:
    """An in-place request names a slab value the step reads (or one outside the slab) and a
    value, not a view, that it writes."""
    source = values.get(step.in_place_input) if step.in_place_input is not None else None
    if source is not None and index not in source.readers:
        raise ValueError(f"step {index}: in-place input '{source.name}' is not read by it")
    if step.in_place_output is None:
        return
    output = values.get(step.in_place_output)
    if output is None or output.producer != index or output.view_of is not None:
        raise ValueError(
            f"step {index}: in-place output '{step.in_place_output}' is not a value it writes"
        )


class _FreeBlocks:
    """The free blocks of the slab: sorted by (size, offset) for best fit, keyed by both ends
    for coalescing.

    A sorted list costs O(free blocks) per change, which keeps the planner O(n · free blocks);
    the free list of a real plan stays short, so this beats a balanced tree written in Python.
    """

    def __init__(self) -> None:
        self._by_size: list[tuple[int, int]] = []
        self._size_at: dict[int, int] = {}
        self._start_ending_at: dict[int, int] = {}

    def take(self, size: int) -> int | None:
        """The offset of `size` bytes cut from the smallest fitting block, lowest offset first."""
        index = bisect.bisect_left(self._by_size, (size, -1))
        if index == len(self._by_size):
            return None
        block_size, offset = self._by_size[index]
        self._remove(offset, block_size)
        if block_size > size:
            self._insert(offset + size, block_size - size)
        return offset

    def take_ending_at(self, end: int) -> int | None:
        """Remove the free block that ends at `end` and return its start, if there is one."""
        start = self._start_ending_at.get(end)
        if start is not None:
            self._remove(start, end - start)
        return start

    def give(self, offset: int, size: int) -> None:
        """Return a block, merged with free neighbours so later large requests can use it."""
        left = self._start_ending_at.get(offset)
        if left is not None:
            self._remove(left, offset - left)
            offset, size = left, size + offset - left
        right_size = self._size_at.get(offset + size)
        if right_size is not None:
            self._remove(offset + size, right_size)
            size += right_size
        self._insert(offset, size)

    def _insert(self, offset: int, size: int) -> None:
        bisect.insort(self._by_size, (size, offset))
        self._size_at[offset] = size
        self._start_ending_at[offset + size] = offset

    def _remove(self, offset: int, size: int) -> None:
        del self._by_size[bisect.bisect_left(self._by_size, (size, offset))]
        del self._size_at[offset]
        del self._start_ending_at[offset + size]


class _Planner:
    """One walk over the schedule; blocks belong to a root value (one that is not a view).

    A root's block lives until the group's death: the last use of the root and of every view of
    it. An in-place alias hands the block from the dying root to the output's root.
    """

    def __init__(
        self, values: Sequence[PlannedValue], n_steps: int, alignment: int, limit: int
    ) -> None:
        self._values = {value.name: value for value in values}
        self._n_steps = n_steps
        self._alignment = alignment
        self._limit = limit
        self._root: dict[str, str] = {}
        self._last_use: dict[str, int] = {}
        self._death: dict[str, int] = {}
        self._live_at_death: dict[str, int] = {}
        self._produced: list[list[str]] = [[] for _ in range(n_steps + 1)]
        self._dying: list[list[str]] = [[] for _ in range(n_steps)]
        self._index_liveness(values)
        self._free = _FreeBlocks()
        self._slab_end = 0
        self._blocks: dict[str, Release] = {}
        self._offsets: dict[str, int] = {}
        self._aliases: dict[str, str] = {}

    def _index_liveness(self, values: Sequence[PlannedValue]) -> None:
        """Last uses, group deaths, and which roots each step makes and lets die."""
        for value in values:
            root = self._root[value.view_of] if value.view_of is not None else value.name
            self._root[value.name] = root
            last = self._n_steps if value.is_output else max(value.readers, default=value.producer)
            # A staged input nobody reads is still written before step 0: free it after step 0.
            self._last_use[value.name] = max(last, 0)
            self._death[root] = max(self._death.get(root, 0), self._last_use[value.name])
            if value.view_of is None:
                self._produced[value.producer + 1].append(value.name)
        for name, root in self._root.items():
            if self._last_use[name] == self._death[root]:
                self._live_at_death[root] = self._live_at_death.get(root, 0) + 1
        for root, death in self._death.items():
            if death < self._n_steps:
                self._dying[death].append(root)

    def run(self, steps: Sequence[PlannedStep]) -> MemoryPlan:
        for name in self._produced[0]:
            self._allocate(name)
        releases = []
        for index, step in enumerate(steps):
            aliased = self._take_over_in_place(index, step)
            for name in self._produced[index + 1]:
                if name != aliased:
                    self._allocate(name)
            releases.append(self._release(index))
        offsets = {name: self._offsets[root] for name, root in self._root.items()}
        return MemoryPlan(offsets, self._slab_end, tuple(releases), self._aliases)

    def _size(self, name: str) -> int:
        return -(-self._values[name].nbytes // self._alignment) * self._alignment

    def _allocate(self, name: str) -> None:
        """Best fit, else grow the slab, reusing a free block at its end rather than skipping it."""
        size = self._size(name)
        if size == 0:
            self._offsets[name] = 0
            return
        offset = self._free.take(size)
        if offset is None:
            offset = self._free.take_ending_at(self._slab_end)
            offset = self._slab_end if offset is None else offset
            self._grow_to(offset + size, name)
        self._blocks[name] = (offset, size)
        self._offsets[name] = offset

    def _grow_to(self, end: int, name: str) -> None:
        if end > self._limit:
            raise SessionError(
                ErrorKind.UNSUPPORTED,
                f"the plan's slab would need {end} bytes, more than the limit of "
                f"{self._limit} bytes",
                value=name,
            )
        self._slab_end = end

    def _take_over_in_place(self, index: int, step: PlannedStep) -> str | None:
        """Hand the in-place input's block to the output when the rules allow; say to whom."""
        name = step.in_place_input
        source = self._values.get(name) if name is not None else None
        target = step.in_place_output
        if target is None and self._produced[index + 1]:
            target = self._produced[index + 1][0]
        if source is None or target is None or not self._may_overwrite(index, source, target):
            return None
        block = self._blocks.pop(self._root[source.name])
        self._blocks[target] = block
        self._offsets[target] = block[0]
        self._aliases[target] = source.name
        return target

    def _may_overwrite(self, index: int, source: PlannedValue, target: str) -> bool:
        """The input dies here, nothing else still uses its block, and the output fits in it."""
        root = self._root[source.name]
        block = self._blocks.get(root)
        return (
            block is not None
            and self._death[root] == index
            and self._last_use[source.name] == index
            and self._live_at_death[root] == 1
            and 0 < self._size(target) <= block[1]
            and source.dtype_code == self._values[target].dtype_code
        )

    def _release(self, index: int) -> tuple[Release, ...]:
        """Free the blocks whose last user was step `index` (after its outputs were placed)."""
        freed = []
        for root in self._dying[index]:
            block = self._blocks.pop(root, None)
            if block is not None:
                self._free.give(*block)
                freed.append(block)
        return tuple(sorted(freed))
