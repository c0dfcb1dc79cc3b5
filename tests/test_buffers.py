"""Buffers, the pool, the arena, lifetimes and checked mode (seed 002 §6)."""

from __future__ import annotations

import itertools
import sys
import threading

import numpy as np
import pytest

from onemodel.tensors import (
    Arena,
    Buffer,
    BufferOverrunError,
    BufferPool,
    DType,
    Memory,
    StaleTensorError,
    Tensor,
    TensorError,
    TensorShapeError,
    size_class,
)
from onemodel.tensors.buffers import aligned_numpy_bytes

MAX = 2**31 - 1


def address(array) -> int:
    return array.__array_interface__["data"][0]


class CountingPool(BufferPool):
    """A pool that counts its rents (what an arena takes from it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rents = 0

    def rent(self, nbytes, **kwargs):
        self.rents += 1
        return super().rent(nbytes, **kwargs)


def counting_memory():
    calls: list[int] = []

    def allocate(nbytes):
        calls.append(nbytes)
        return aligned_numpy_bytes(nbytes)

    return Memory("counting", np, allocate), calls


# -- alignment -------------------------------------------------------------------------------

SIZES = [0, 1, 3, 63, 64, 65, 100, 255, 256, 257, 1000, 4097, 65536 + 5]


@pytest.mark.parametrize("checked", [False, True])
def test_pooled_buffers_are_aligned(checked):
    pool = BufferPool(checked=checked)
    held = [pool.rent(n) for n in SIZES]
    for buffer, n in zip(held, SIZES, strict=True):
        assert buffer.storage.ctypes.data % 64 == 0
        assert buffer.data.ctypes.data % 64 == 0
        assert buffer.nbytes == n
        assert buffer.data.size == n
    # Reused ones too.
    for buffer in held:
        buffer.release()
    for n in SIZES:
        assert pool.rent(n).storage.ctypes.data % 64 == 0


@pytest.mark.parametrize("checked", [False, True])
def test_unpooled_buffers_are_aligned(checked):
    for n in SIZES[1:]:
        buffer = Buffer.allocate(n, checked=checked)
        assert buffer.storage.ctypes.data % 64 == 0
        assert buffer.data.size == n


def test_zero_byte_unpooled_buffer_is_aligned():
    """§6: every buffer starts on a 64-byte boundary, the empty ones too."""
    for _ in range(8):  # NumPy's allocation offset varies: try several
        assert Buffer.allocate(0, checked=False).storage.ctypes.data % 64 == 0
        assert aligned_numpy_bytes(0).ctypes.data % 64 == 0


def test_aligned_numpy_bytes():
    for n in SIZES[1:]:
        array = aligned_numpy_bytes(n)
        assert array.ctypes.data % 64 == 0
        assert array.size == n
        assert array.dtype == np.uint8


@pytest.mark.parametrize("checked", [False, True])
def test_arena_buffers_are_aligned_and_disjoint(checked):
    arena = Arena(BufferPool(checked=checked), chunk_bytes=4096)
    sizes = [1, 7, 64, 65, 130, 3000, 5000, 2, 0, 999]
    buffers = [arena.allocate(n) for n in sizes]
    for i, buffer in enumerate(buffers):
        assert buffer.storage.ctypes.data % 64 == 0
        assert buffer.nbytes == sizes[i]
        buffer.data[...] = i + 1
    for i, buffer in enumerate(buffers):
        assert (buffer.data == i + 1).all()
    spans = sorted((address(b.data), address(b.data) + b.nbytes) for b in buffers if b.nbytes)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start


def test_tensor_data_is_aligned():
    pool = BufferPool()
    for shape in [(3,), (5, 7), (1, 2, 3)]:
        for dtype in (DType.UINT8, DType.DOUBLE, DType.FLOAT16):
            assert Tensor.empty(shape, dtype, pool=pool).data().ctypes.data % 64 == 0
            assert Tensor.empty(shape, dtype).data().ctypes.data % 64 == 0


# -- size classes ----------------------------------------------------------------------------


def reference_size_class(n: int) -> int:
    """§6 written independently: integer arithmetic, power found by doubling."""
    if n <= 256:
        multiple = n if n % 64 == 0 else n + (64 - n % 64)
        return multiple if multiple > 64 else 64
    b = 1
    while b * 2 <= n - 1:
        b *= 2
    assert b <= n - 1 < 2 * b
    step = b // 4
    quotient, remainder = divmod(n - b, step)
    return b + (quotient + (1 if remainder else 0)) * step


def _boundary_sizes():
    sizes = set(range(5001))
    for k in range(32):
        for delta in (-1, 0, 1):
            n = 2**k + delta
            if 0 <= n <= MAX:
                sizes.add(n)
            for quarter in (1, 2, 3):  # edges of the b·{1.25, 1.5, 1.75} classes
                m = 2**k + quarter * 2**k // 4 + delta
                if 0 <= m <= MAX:
                    sizes.add(m)
    sizes.add(MAX)
    return sorted(sizes)


def test_size_class_bit_for_bit():
    mismatches = [
        (n, size_class(n), reference_size_class(n))
        for n in _boundary_sizes()
        if size_class(n) != reference_size_class(n)
    ]
    assert mismatches == []


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, 64), (1, 64), (64, 64), (65, 128), (192, 192), (193, 256), (256, 256),
        (257, 320), (320, 320), (321, 384), (448, 448), (449, 512), (512, 512), (513, 640),
        (1000, 1024), (1025, 1280), (4097, 5120), (2**30 + 1, 2**30 + 2**28),
        (MAX, 2**31),
    ],
)  # fmt: skip
def test_size_class_examples(n, expected):
    assert size_class(n) == expected


def test_size_class_properties():
    for n in _boundary_sizes():
        cls = size_class(n)
        assert cls >= n
        assert cls % 64 == 0
        if n > 256:
            b = 1 << ((n - 1).bit_length() - 1)
            assert cls in {b + b // 4, b + b // 2, b + 3 * b // 4, 2 * b}


@pytest.mark.parametrize("n", [-1, -64, MAX + 1, 2**32])
def test_size_class_out_of_range(n):
    with pytest.raises(TensorShapeError):
        size_class(n)
    with pytest.raises(TensorShapeError):
        BufferPool().rent(n)
    with pytest.raises(TensorShapeError):
        Buffer.allocate(n)
    with pytest.raises(TensorShapeError):
        Arena().allocate(n)


# -- the pool --------------------------------------------------------------------------------


def test_pool_reuses_per_class():
    memory, calls = counting_memory()
    pool = BufferPool(memory)
    first = pool.rent(100)  # class 128
    assert len(calls) == 1
    first.release()
    assert pool.idle_bytes == 128
    again = pool.rent(120)  # same class
    assert again is first
    assert again.nbytes == 120
    assert len(calls) == 1
    assert pool.idle_bytes == 0
    other = pool.rent(200)  # class 256: not the same block
    assert other is not first
    assert len(calls) == 2


def test_pool_free_lists_are_per_class():
    pool = BufferPool()
    small, large = pool.rent(64), pool.rent(300)
    small.release()
    large.release()
    assert pool.idle_bytes == 64 + 320
    assert pool.rent(1000) is not large  # class 1024
    assert pool.rent(257) is large  # class 320
    assert pool.rent(10) is small
    assert pool.idle_bytes == 0


def test_pool_several_idle_blocks_of_one_class():
    pool = BufferPool()
    held = [pool.rent(500) for _ in range(3)]
    for b in held:
        b.release()
    assert pool.idle_bytes == 3 * 512
    again = [pool.rent(480) for _ in range(3)]
    assert {id(b) for b in again} == {id(b) for b in held}
    assert len({id(b) for b in again}) == 3
    assert pool.rent(500) not in held


def test_idle_cap_drops_blocks():
    memory, calls = counting_memory()
    pool = BufferPool(memory, max_idle_bytes=100)
    b = pool.rent(100)  # class 128 > cap
    b.release()
    assert pool.idle_bytes == 0
    c = pool.rent(100)
    assert c is not b
    assert len(calls) == 2


def test_idle_cap_is_inclusive_and_counts_classes():
    pool = BufferPool(max_idle_bytes=128 + 64)
    a, b, c = pool.rent(100), pool.rent(100), pool.rent(1)
    a.release()
    assert pool.idle_bytes == 128
    b.release()  # 256 > cap: dropped
    assert pool.idle_bytes == 128
    c.release()  # 128 + 64 == cap: kept
    assert pool.idle_bytes == 192
    assert pool.rent(128) is a
    assert pool.rent(64) is c
    assert pool.rent(128) is not b
    assert pool.idle_bytes == 0


def test_trim_drops_idle_blocks():
    pool = BufferPool()
    b = pool.rent(1000)
    b.release()
    pool.trim()
    assert pool.idle_bytes == 0
    assert pool.rent(1000) is not b


def test_zeroing_on_request():
    pool = BufferPool()
    b = pool.rent(200)
    b.data[...] = 7
    b.release()
    again = pool.rent(200, zero=True)
    assert again is b
    assert not again.data.any()
    assert not Buffer.allocate(333, zero=True).data.any()
    assert not Tensor.zeros((5, 7), DType.FLOAT, pool=pool).numpy().any()


def test_pool_is_thread_safe():
    pool = BufferPool()
    holders: dict[int, int] = {}
    seen: dict[int, Buffer] = {}
    guard = threading.Lock()
    errors: list[str] = []
    sizes = [1, 60, 100, 128, 300, 1000]
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def work(tid: int) -> None:
        try:
            cycle(tid)
        except Exception as error:  # a thread's exception would otherwise be lost
            errors.append(repr(error))

    def cycle(tid: int) -> None:
        rng = np.random.default_rng(tid)
        for _ in range(400):
            buffer = pool.rent(int(rng.choice(sizes)))
            with guard:
                if id(buffer) in holders:
                    errors.append(f"buffer held by {holders[id(buffer)]} handed to {tid}")
                holders[id(buffer)] = tid
                seen[id(buffer)] = buffer
            buffer.data[...] = tid
            if not (buffer.data == tid).all():
                errors.append("another holder wrote into a buffer")
            with guard:
                del holders[id(buffer)]
            buffer.release()

    threads = [threading.Thread(target=work, args=(tid,)) for tid in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous)
    assert errors == []
    # Every block ever handed out is idle again, counted exactly once.
    assert pool.idle_bytes == sum(size_class(b.nbytes) for b in seen.values())
    by_class: dict[int, int] = {}
    for b in seen.values():
        by_class[size_class(b.nbytes)] = by_class.get(size_class(b.nbytes), 0) + 1
    again = [pool.rent(cls) for cls, count in by_class.items() for _ in range(count)]
    assert {id(b) for b in again} == set(seen)
    assert pool.idle_bytes == 0


# -- lifetimes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "access",
    [
        lambda t: t.data(),
        lambda t: t.mutable_data(),
        lambda t: t.numpy(),
        lambda t: t.view((2,), (1,)),
        lambda t: t.reshape(6),
        lambda t: t.permute(1, 0),
        lambda t: t.contiguous(),
        lambda t: t.fill(0),
        lambda t: t.set((0, 0), 1),
        lambda t: t.broadcast_to((4, 2, 3)),
    ],
)
@pytest.mark.parametrize("pooled", [False, True])
def test_access_after_dispose_is_stale(access, pooled):
    pool = BufferPool() if pooled else None
    t = Tensor.zeros((2, 3), DType.FLOAT, pool=pool)
    view = t.permute(1, 0)
    t.dispose()
    with pytest.raises(StaleTensorError):
        access(t)
    with pytest.raises(StaleTensorError):
        view.data()
    with pytest.raises(StaleTensorError):
        view.mutable_data()


def test_dispose_through_a_view_frees_base_and_views():
    t = Tensor.zeros((2, 3), DType.FLOAT)
    view = t.reshape(3, 2)
    view.dispose()
    with pytest.raises(StaleTensorError):
        t.data()
    with pytest.raises(StaleTensorError):
        view.data()


def test_generation_increases_on_release():
    pool = BufferPool()
    b = pool.rent(64)
    g = b.generation
    b.release()
    assert b.generation > g
    assert pool.rent(64) is b


def test_stale_after_re_rent():
    pool = BufferPool()
    old = Tensor.zeros((4,), DType.INT32, pool=pool)
    old_view = old.reshape(2, 2)
    old.dispose()
    new = Tensor.empty((4,), DType.INT32, pool=pool)
    assert new.buffer is old.buffer  # the same memory, re-rented
    new.fill(5)
    with pytest.raises(StaleTensorError):
        old.data()
    with pytest.raises(StaleTensorError):
        old_view.numpy()
    with pytest.raises(StaleTensorError):
        old.fill(1)
    np.testing.assert_array_equal(new.numpy(), [5, 5, 5, 5])


@pytest.mark.parametrize("pooled", [False, True])
def test_double_dispose_raises(pooled):
    pool = BufferPool() if pooled else None
    t = Tensor.zeros((3,), DType.UINT8, pool=pool)
    view = t.reshape(1, 3)
    t.dispose()
    with pytest.raises(TensorError):
        t.dispose()
    with pytest.raises(TensorError):
        view.dispose()
    if pooled:
        assert pool.idle_bytes == 64  # released once only


def test_release_twice_raises_on_the_buffer():
    b = Buffer.allocate(10)
    b.release()
    with pytest.raises(TensorError):
        b.release()
    pool = BufferPool()
    p = pool.rent(10)
    p.release()
    with pytest.raises(TensorError):
        p.release()
    assert pool.idle_bytes == 64


def test_stale_old_tensor_cannot_dispose_the_new_owner():
    pool = BufferPool()
    old = Tensor.zeros((4,), DType.FLOAT, pool=pool)
    old.dispose()
    new = Tensor.zeros((4,), DType.FLOAT, pool=pool)
    assert new.buffer is old.buffer
    with pytest.raises(StaleTensorError):
        old.dispose()
    new.fill(2)
    assert (new.numpy() == 2).all()  # still owned by `new`


def test_tensor_over_a_released_buffer_never_reads_re_rented_memory():
    """A tensor made over a buffer after its release must not see its next owner's data."""
    pool = BufferPool()
    buffer = pool.rent(64)
    buffer.release()
    try:
        late = Tensor(buffer, DType.UINT8, (64,))
    except StaleTensorError:
        return  # refusing to build over released memory is fine too
    again = pool.rent(64)
    assert again is buffer
    Tensor(again, DType.UINT8, (64,)).fill(42)
    with pytest.raises(StaleTensorError):
        late.data()


def test_stale_after_arena_reset():
    arena = Arena()
    t = Tensor(arena.allocate(24), DType.FLOAT, (2, 3))
    t.fill(1.0)
    view = t.permute(1, 0)
    arena.reset()
    for access in (t.data, t.mutable_data, t.numpy, view.data, lambda: t.fill(0)):
        with pytest.raises(StaleTensorError):
            access()
    fresh = Tensor(arena.allocate(24), DType.FLOAT, (2, 3))
    assert address(fresh.data()) == address(t.buffer.storage)  # same memory, new owner
    fresh.fill(3.0)
    with pytest.raises(StaleTensorError):
        t.numpy()


def test_arena_buffers_are_not_released_individually():
    arena = Arena()
    t = Tensor(arena.allocate(16), DType.FLOAT, (4,))
    with pytest.raises(TensorError):
        t.dispose()
    t.fill(1.0)  # still usable until reset
    arena.reset()
    with pytest.raises(StaleTensorError):
        t.dispose()


# -- the arena -------------------------------------------------------------------------------


def _run(arena: Arena, sizes):
    return [arena.allocate(n) for n in sizes]


@pytest.mark.parametrize("checked", [False, True])
def test_arena_reuses_chunks_after_reset(checked):
    pool = CountingPool(checked=checked)
    arena = Arena(pool, chunk_bytes=4096)
    sizes = [100, 2000, 1500, 64, 3000, 10000, 5, 0, 4096, 700]
    first = _run(arena, sizes)
    warm_rents = pool.rents
    assert warm_rents >= 2
    first_addresses = [address(b.storage) for b in first]
    for _ in range(3):
        arena.reset()
        again = _run(arena, sizes)
        assert pool.rents == warm_rents
        assert [address(b.storage) for b in again] == first_addresses


def test_arena_allocates_no_memory_on_repeat_run():
    memory, calls = counting_memory()
    arena = Arena(BufferPool(memory), chunk_bytes=1024)
    sizes = [300, 300, 300, 300, 5000, 10]
    _run(arena, sizes)
    count = len(calls)
    arena.reset()
    _run(arena, sizes)
    assert len(calls) == count


def test_arena_default_chunk_is_one_mib():
    pool = CountingPool(checked=False)  # checked mode adds canary bytes to every allocation
    arena = Arena(pool)
    arena.allocate(10)
    chunk_requests = []
    original = BufferPool.rent

    def spy(self, nbytes, **kwargs):
        chunk_requests.append(nbytes)
        return original(self, nbytes, **kwargs)

    pool.rent = spy.__get__(pool)
    for _ in range(1024 * 1024 // 64):
        arena.allocate(64)  # fills the first chunk and asks for a second
    assert chunk_requests == [1024 * 1024]


def test_arena_large_request_gets_its_own_chunk():
    memory, calls = counting_memory()
    arena = Arena(BufferPool(memory), chunk_bytes=1024)
    small = arena.allocate(100)
    big = arena.allocate(50_000)
    assert big.nbytes == 50_000
    assert big.storage.ctypes.data % 64 == 0
    assert max(calls) >= 50_000
    big.data[...] = 9
    small.data[...] = 1
    assert (big.data == 9).all()
    assert (small.data == 1).all()
    arena.reset()
    before = len(calls)
    arena.allocate(100)
    assert arena.allocate(50_000).nbytes == 50_000
    assert len(calls) == before


def test_arena_zeroing():
    arena = Arena()
    b = arena.allocate(200)
    b.data[...] = 5
    arena.reset()
    again = arena.allocate(200, zero=True)
    assert address(again.data) == address(b.data)
    assert not again.data.any()


def test_arena_close_returns_chunks_to_the_pool():
    pool = BufferPool()
    arena = Arena(pool, chunk_bytes=4096)
    arena.allocate(10)
    arena.close()
    assert pool.idle_bytes == size_class(4096)


# -- checked mode ----------------------------------------------------------------------------


def test_checked_pool_poisons_new_memory_and_sets_canary():
    pool = BufferPool(checked=True)
    assert pool.checked
    b = pool.rent(100)
    assert (b.data == 0xFF).all()
    assert (b.storage[100:164] == 0xA5).all()
    assert b.storage.size >= 164


def test_checked_pool_poisons_released_memory():
    pool = BufferPool(checked=True)
    b = pool.rent(100)
    b.data[...] = 3
    storage = b.storage
    b.release()
    assert (storage[:164] == 0xFF).all()
    again = pool.rent(90)
    assert again is b
    assert (again.data == 0xFF).all()
    assert (again.storage[90:154] == 0xA5).all()


def test_checked_unpooled_poison_and_release():
    b = Buffer.allocate(70, checked=True)
    assert (b.data == 0xFF).all()
    assert (b.storage[70:134] == 0xA5).all()
    storage = b.storage
    b.data[...] = 1
    b.release()
    assert (storage[:134] == 0xFF).all()


def test_checked_zero_request_gives_zeros():
    b = BufferPool(checked=True).rent(100, zero=True)
    assert not b.data.any()
    assert (b.storage[100:164] == 0xA5).all()


def test_unchecked_has_no_canary_room_requirement():
    b = Buffer.allocate(100, checked=False)
    b.storage[: b.storage.size] = 0  # writing the whole storage is not an error when unchecked
    b.release()


@pytest.mark.parametrize("position", [0, 1, 32, 63])
def test_canary_violation_raises_at_release(position):
    pool = BufferPool(checked=True)
    b = pool.rent(100)
    b.data[...] = 0  # inside the buffer: fine
    b.storage[100 + position] = 0
    with pytest.raises(BufferOverrunError):
        b.release()


def test_canary_violation_unpooled():
    b = Buffer.allocate(8, checked=True)
    b.storage[8] = 1
    with pytest.raises(BufferOverrunError):
        b.release()


def test_canary_violation_through_a_tensor():
    t = Tensor.zeros((3,), DType.FLOAT, pool=BufferPool(checked=True))
    t.buffer.storage.view(np.uint8)[12:16] = 0  # the element after the last
    with pytest.raises(BufferOverrunError):
        t.dispose()


def test_writes_inside_do_not_trip_the_canary():
    pool = BufferPool(checked=True)
    b = pool.rent(100)
    b.data[...] = 0xA5 ^ 0xFF
    b.release()  # no error
    assert pool.idle_bytes == 128


def test_canary_violation_raises_at_arena_reset():
    arena = Arena(BufferPool(checked=True), chunk_bytes=4096)
    ok = arena.allocate(50)
    bad = arena.allocate(100)
    also_ok = arena.allocate(30)
    ok.data[...] = 1
    also_ok.data[...] = 1
    bad.storage[100] = 0
    with pytest.raises(BufferOverrunError):
        arena.reset()


def test_arena_checked_poison_and_canary():
    arena = Arena(BufferPool(checked=True), chunk_bytes=4096)
    assert arena.checked
    b = arena.allocate(100)
    assert (b.data == 0xFF).all()
    assert (b.storage[100:164] == 0xA5).all()
    b.data[...] = 0
    storage = b.storage
    arena.reset()
    assert (storage[:164] == 0xFF).all()


def test_arena_no_false_canary_alarm():
    arena = Arena(BufferPool(checked=True), chunk_bytes=4096)
    for n in (1, 63, 64, 65, 127, 1000):
        arena.allocate(n).data[...] = 0
    arena.reset()


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_env_var_enables_checked_mode(monkeypatch, value):
    monkeypatch.setenv("ONEMODEL_CHECKED", value)
    pool = BufferPool()
    assert pool.checked
    b = pool.rent(40)
    assert (b.data == 0xFF).all()
    assert (b.storage[40:104] == 0xA5).all()
    u = Buffer.allocate(40)
    assert u.checked
    assert (u.data == 0xFF).all()
    t = Tensor.empty((4,), DType.INT32)
    assert (t.numpy() == -1).all()  # every byte 0xFF
    t.buffer.storage[16] = 0
    with pytest.raises(BufferOverrunError):
        t.dispose()
    assert Arena().checked


@pytest.mark.parametrize("value", [None, "0", ""])
def test_env_var_absent_or_off(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("ONEMODEL_CHECKED", raising=False)
    else:
        monkeypatch.setenv("ONEMODEL_CHECKED", value)
    assert not BufferPool().checked
    assert not Buffer.allocate(8).checked
    b = Buffer.allocate(8)
    b.storage[: b.storage.size] = 0
    b.release()


def test_explicit_argument_overrides_env(monkeypatch):
    monkeypatch.setenv("ONEMODEL_CHECKED", "1")
    assert not BufferPool(checked=False).checked
    assert not Buffer.allocate(8, checked=False).checked
    monkeypatch.delenv("ONEMODEL_CHECKED")
    assert BufferPool(checked=True).checked
