"""The tensor layer over each backend's memory: it must not care whether buffers are NumPy or
CuPy arrays. Here the bodies run on NumPy memory; on a GPU machine they run on CuPy too."""

from __future__ import annotations

import array_api_compat
import ml_dtypes
import numpy as np
import pytest

from onemodel.tensors import (
    Arena,
    Buffer,
    BufferOverrunError,
    BufferPool,
    DType,
    Layout,
    Memory,
    StaleTensorError,
    Tensor,
)
from onemodel.tensors.conversions import (
    cast,
    float16_bits_to_float32,
    float32_to_bfloat16_bits,
    float32_to_float16_bits,
    held_dtype,
)


def address(storage) -> int:
    """The first byte's address of a NumPy or CuPy byte array."""
    return storage.ctypes.data if isinstance(storage, np.ndarray) else storage.data.ptr


def values_of(dtype: DType, shape=(2, 3, 4)) -> np.ndarray:
    rng = np.random.default_rng(int(dtype))
    if dtype is DType.BOOL:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.is_floating:
        return rng.standard_normal(shape).astype(dtype.numpy)
    info = np.iinfo(dtype.numpy)
    return rng.integers(info.min, info.max, shape, dtype=dtype.numpy, endpoint=True)


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.name)
def test_every_type_round_trips_through_the_memory(memory: Memory, dtype: DType):
    values = values_of(dtype)
    tensor = Tensor.from_array(values, memory=memory)
    assert tensor.dtype is dtype
    assert isinstance(tensor.data(), memory.xp.ndarray)
    back = tensor.numpy()
    assert back.dtype == dtype.numpy
    np.testing.assert_array_equal(back.view(np.uint8), values.view(np.uint8))


def test_views_reshape_and_copies_stay_in_the_memory(memory: Memory):
    values = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    tensor = Tensor.from_array(values, memory=memory)
    transposed = tensor.permute(2, 0, 1)
    assert transposed.buffer is tensor.buffer
    np.testing.assert_array_equal(transposed.numpy(), values.transpose(2, 0, 1))
    flat = transposed.reshape(-1)  # not viewable: a contiguous copy in the same memory
    assert flat.buffer is not tensor.buffer and flat.memory is memory
    np.testing.assert_array_equal(flat.numpy(), values.transpose(2, 0, 1).reshape(-1))
    reversed_view = tensor.view((4,), (-1,), offset=3)
    np.testing.assert_array_equal(reversed_view.numpy(), values.reshape(-1)[3::-1])
    broadcast = Tensor.from_array(values[0, 0], memory=memory).broadcast_to((3, 4))
    np.testing.assert_array_equal(broadcast.numpy(), np.broadcast_to(values[0, 0], (3, 4)))


@pytest.mark.parametrize("layout", [Layout.NHWC, Layout.BLOCKED])
def test_layout_conversions_in_the_memory(memory: Memory, layout: Layout):
    values = np.arange(2 * 5 * 3 * 2, dtype=np.float32).reshape(2, 5, 3, 2)
    tensor = Tensor.from_array(values, memory=memory)
    converted = tensor.to_layout(layout, block_size=4 if layout is Layout.BLOCKED else 0)
    assert converted.layout is layout and converted.memory is memory
    np.testing.assert_array_equal(converted.to_layout(Layout.NCHW).numpy(), values)


def test_pool_and_arena_serve_aligned_memory_and_stale_checks(memory: Memory):
    pool = BufferPool(memory)
    buffer = pool.rent(1000)
    assert address(buffer.storage) % 64 == 0
    tensor = Tensor(buffer, DType.FLOAT, (250,))
    tensor.dispose()
    assert pool.rent(1000) is buffer
    with pytest.raises(StaleTensorError):
        tensor.data()
    arena = Arena(pool)
    pieces = [arena.allocate(n) for n in (10, 100, 1000)]
    assert all(address(piece.storage) % 64 == 0 for piece in pieces)
    stale = Tensor(pieces[2], DType.UINT8, (1000,))
    arena.reset()
    with pytest.raises(StaleTensorError):
        stale.data()


def test_checked_mode_finds_a_write_past_the_end(memory: Memory):
    buffer = Buffer.allocate(100, memory, checked=True)
    assert bool((buffer.data == 0xFF).all())
    buffer.storage[100] = 0
    with pytest.raises(BufferOverrunError):
        buffer.release()


def test_conversions_run_on_the_memory_namespace(memory: Memory):
    xp = memory.xp
    rng = np.random.default_rng(7)
    floats = rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    device = xp.asarray(floats)
    assert array_api_compat.array_namespace(device) is array_api_compat.array_namespace(
        xp.asarray(floats[:1])
    )
    np.testing.assert_array_equal(
        memory.to_host(float32_to_float16_bits(device)), float32_to_float16_bits(floats)
    )
    np.testing.assert_array_equal(
        memory.to_host(float32_to_bfloat16_bits(device)), float32_to_bfloat16_bits(floats)
    )
    halves = np.arange(2**16, dtype=np.uint16)
    np.testing.assert_array_equal(
        memory.to_host(float16_bits_to_float32(xp.asarray(halves))).view(np.uint32),
        float16_bits_to_float32(halves).view(np.uint32),
    )


@pytest.mark.parametrize("src", list(DType), ids=lambda d: d.name)
def test_cast_gives_the_same_bits_in_the_memory(memory: Memory, src: DType):
    xp = memory.xp
    values = values_of(src, (257,))
    namespace = array_api_compat.array_namespace(xp.asarray(values[:1].view(np.uint8)))
    device = xp.asarray(values.view(held_dtype(namespace, src)))
    for dst in DType:
        expected = cast(values, src, dst)
        got = memory.to_host(cast(device, src, dst))
        if dst is DType.BFLOAT16:
            got = got.view(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(
            got.view(np.uint8), expected.view(np.uint8), err_msg=f"{src.name} -> {dst.name}"
        )
