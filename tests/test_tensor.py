"""The Tensor: construction, NumPy exchange, views, reshape, layouts (seed 002 §3–5)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onemodel.tensors import (
    Buffer,
    BufferPool,
    DType,
    Layout,
    Memory,
    Tensor,
    TensorError,
    TensorShapeError,
    UnsupportedDTypeError,
)
from onemodel.tensors.buffers import aligned_numpy_bytes

PROPERTY = settings(max_examples=300, deadline=None)
RNG = np.random.default_rng(2002)

NUMPY_OF = {
    DType.FLOAT: np.float32,
    DType.UINT8: np.uint8,
    DType.INT8: np.int8,
    DType.UINT16: np.uint16,
    DType.INT16: np.int16,
    DType.INT32: np.int32,
    DType.INT64: np.int64,
    DType.BOOL: np.bool_,
    DType.FLOAT16: np.float16,
    DType.DOUBLE: np.float64,
    DType.UINT32: np.uint32,
    DType.UINT64: np.uint64,
    DType.BFLOAT16: ml_dtypes.bfloat16,
}


def random_array(shape, np_dtype):
    """Random values covering the whole bit range of the type (NaNs included for floats)."""
    dt = np.dtype(np_dtype)
    if dt == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(np.bool_)
    raw = RNG.integers(0, 256, size=(*shape, dt.itemsize), dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def bits(array):
    """The bytes of a row-major copy, for bit-exact comparison (NaN-safe)."""
    return np.ascontiguousarray(array).view(np.uint8).tobytes()


def arange_tensor(shape, dtype=DType.INT32):
    values = np.arange(math.prod(shape)).astype(NUMPY_OF[dtype]).reshape(shape)
    return Tensor.from_array(values), values


# -- construction ----------------------------------------------------------------------------


def test_construct_over_a_buffer():
    buffer = Buffer.allocate(24 * 4)
    t = Tensor(buffer, DType.FLOAT, (2, 3, 4))
    assert t.shape == (2, 3, 4)
    assert t.strides == (12, 4, 1)
    assert t.offset == 0
    assert t.rank == 3
    assert t.size == 24
    assert t.nbytes == 96
    assert t.dtype is DType.FLOAT
    assert t.buffer is buffer
    assert t.is_contiguous
    assert t.generation == buffer.generation


def test_construct_accepts_onnx_code_as_dtype():
    t = Tensor(Buffer.allocate(8), 11, (1,))
    assert t.dtype is DType.DOUBLE


def test_construct_rejects_buffer_too_small():
    with pytest.raises(TensorShapeError):
        Tensor(Buffer.allocate(95), DType.FLOAT, (2, 3, 4))


@pytest.mark.parametrize(
    ("shape", "strides", "offset", "ok"),
    [
        ((4,), (-1,), 3, True),
        ((4,), (-1,), 2, False),
        ((2, 5), (5, 1), 0, True),
        ((2, 5), (5, 1), 1, False),
        ((2, 5), (-5, -1), 9, True),
        ((5,), (2,), 1, True),  # reaches element 9 = last
        ((5,), (2,), 2, False),
        ((3, 3), (0, 0), 9, True),
        ((0, 7), (7, 1), 50, True),  # empty view reaches nothing
        ((), (), 9, True),
        ((), (), 10, False),
    ],
)
def test_view_validity_checked_on_creation(shape, strides, offset, ok):
    base = Tensor.zeros((10,), DType.INT16)
    if ok:
        v = base.view(shape, strides, offset)
        assert v.shape == shape
        assert v.buffer is base.buffer
        v.numpy()  # readable
    else:
        with pytest.raises(TensorShapeError):
            base.view(shape, strides, offset)
        with pytest.raises(TensorShapeError):
            Tensor(base.buffer, DType.INT16, shape, strides, offset)


def test_view_capacity_counts_elements_not_bytes():
    base = Tensor.zeros((4,), DType.INT64)  # 32 bytes = 4 elements
    with pytest.raises(TensorShapeError):
        base.view((5,), (1,), 0)
    base.view((4,), (1,), 0)


def test_view_reads_the_right_elements():
    t, _ = arange_tensor((12,))
    v = t.view((3, 2), (-4, 2), 9)
    expected = np.array([[9, 11], [5, 7], [1, 3]])
    np.testing.assert_array_equal(v.numpy(), expected)


def test_empty_shape_checked_before_allocation():
    calls = []

    def allocate(nbytes):
        calls.append(nbytes)
        return aligned_numpy_bytes(nbytes)

    memory = Memory("counting", np, allocate)
    with pytest.raises(TensorShapeError):
        Tensor.empty((100000, 100000, 0), DType.FLOAT, memory=memory)
    with pytest.raises(TensorShapeError):
        Tensor.empty((2**28,), DType.DOUBLE, memory=memory)
    with pytest.raises(TensorShapeError):
        Tensor.empty((1,) * 9, DType.UINT8, memory=memory)
    assert calls == []
    Tensor.empty((2, 2), DType.FLOAT, memory=memory)
    assert calls and calls[0] >= 16


def test_pooled_shape_checked_before_renting():
    class CountingPool(BufferPool):
        rents = 0

        def rent(self, nbytes, **kwargs):
            CountingPool.rents += 1
            return super().rent(nbytes, **kwargs)

    pool = CountingPool()
    with pytest.raises(TensorShapeError):
        Tensor.empty((2**29,), DType.FLOAT, pool=pool)
    assert CountingPool.rents == 0


def test_zeros():
    t = Tensor.zeros((3, 5), DType.DOUBLE)
    assert t.numpy().dtype == np.float64
    assert not t.numpy().any()


# -- NumPy exchange ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(2, 3), (7,), (0, 4), (1, 1, 5)])
def test_numpy_round_trip_all_dtypes(dtype, shape):
    values = random_array(shape, NUMPY_OF[dtype])
    t = Tensor.from_array(values)
    assert t.dtype is dtype
    assert t.shape == shape
    out = t.numpy()
    assert out.dtype == np.dtype(NUMPY_OF[dtype])
    assert out.shape == shape
    assert out.flags.c_contiguous
    assert bits(out) == bits(values)
    # A copy: changing it does not change the tensor.
    if out.size:
        out.reshape(-1).view(np.uint8)[0] ^= 1
        assert bits(t.numpy()) == bits(values)


@pytest.mark.parametrize("dtype", [DType.FLOAT, DType.INT64, DType.BOOL, DType.BFLOAT16])
def test_numpy_round_trip_of_a_scalar(dtype):
    """Rank 0 is a scalar with one element; numpy() must keep it rank 0."""
    values = random_array((), NUMPY_OF[dtype])
    t = Tensor.from_array(values)
    assert t.shape == ()
    assert t.size == 1
    out = t.numpy()
    assert out.shape == ()
    assert bits(out) == bits(values)


def test_from_array_big_endian():
    values = np.arange(-6, 6, dtype=">i4").reshape(3, 4) * 1000003
    t = Tensor.from_array(values)
    assert t.dtype is DType.INT32
    out = t.numpy()
    assert out.dtype == np.dtype("<i4")
    np.testing.assert_array_equal(out, values)
    # The stored bytes are little-endian.
    assert t.data().tobytes() == values.astype("<i4").tobytes()


@pytest.mark.parametrize("np_dtype", [">f8", ">f2", ">u2", ">i8"])
def test_from_array_big_endian_floats_and_ints(np_dtype):
    values = (np.arange(10) * 3 - (0 if np_dtype[1] == "u" else 7)).astype(np_dtype)
    out = Tensor.from_array(values).numpy()
    np.testing.assert_array_equal(out, values)
    assert out.dtype == np.dtype(np_dtype).newbyteorder("<")


def test_from_array_fortran_order():
    values = np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    assert not values.flags.c_contiguous
    t = Tensor.from_array(values)
    assert t.strides == (12, 4, 1)
    assert t.is_contiguous
    np.testing.assert_array_equal(t.numpy(), values)
    np.testing.assert_array_equal(t.data().reshape(-1), np.arange(24))


def test_from_array_non_contiguous():
    base = np.arange(60, dtype=np.int16).reshape(5, 12)
    values = base[::-2, 1::3]
    t = Tensor.from_array(values)
    assert t.is_contiguous
    np.testing.assert_array_equal(t.numpy(), values)
    values_t = base.T[::3]
    np.testing.assert_array_equal(Tensor.from_array(values_t).numpy(), values_t)


def test_from_array_copies():
    values = np.arange(6, dtype=np.int64)
    t = Tensor.from_array(values)
    values[0] = 99
    assert t.numpy()[0] == 0


def test_from_array_with_dtype_converts():
    t = Tensor.from_array(np.array([1.7, -2.2, 3.0]), DType.INT32)
    assert t.dtype is DType.INT32
    np.testing.assert_array_equal(t.numpy(), [1, -2, 3])
    b = Tensor.from_array([0.0, 1.5, 3.0], DType.BFLOAT16)
    assert b.numpy().dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(b.numpy().astype(np.float32), [0.0, 1.5, 3.0])


def test_from_array_refuses_unsupported_types():
    with pytest.raises(UnsupportedDTypeError):
        Tensor.from_array(np.zeros(3, dtype=np.complex64))
    with pytest.raises(UnsupportedDTypeError):
        Tensor.from_array(np.zeros(3, dtype=ml_dtypes.float8_e4m3fn))


def test_data_shares_memory_and_mutable_data_writes():
    t = Tensor.zeros((2, 3), DType.FLOAT)
    t.mutable_data()[1, 2] = 5.0
    assert t.numpy()[1, 2] == 5.0
    assert np.shares_memory(t.data(), t.buffer.storage)


# -- contiguous, reshape, broadcast, permute ---------------------------------------------------


def test_contiguous_returns_itself_when_contiguous():
    t, _ = arange_tensor((2, 3, 4))
    assert t.contiguous() is t
    odd = t.view((2, 1, 12), (12, 12345, 1))  # extent-1 stride ignored
    assert odd.contiguous() is odd
    offset = t.view((3, 4), (4, 1), 12)  # contiguous with an offset
    assert offset.contiguous() is offset
    empty = t.view((0, 3), (1, 7))
    assert empty.contiguous() is empty


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.permute(2, 0, 1),
        lambda t: t.view((2, 3, 2), (12, 4, 2)),
        lambda t: t.view((2, 3, 4), (-12, 4, 1), 12),
        lambda t: t.view((3, 4), (0, 1)),
    ],
)
def test_contiguous_copies_otherwise(make):
    t, _ = arange_tensor((2, 3, 4))
    v = make(t)
    expected = v.numpy()
    c = v.contiguous()
    assert c is not v
    assert c.buffer is not t.buffer
    assert c.is_contiguous
    assert c.strides == tuple(
        math.prod(c.shape[i + 1 :]) for i in range(c.rank)
    )  # row-major, non-empty
    np.testing.assert_array_equal(c.numpy(), expected)
    np.testing.assert_array_equal(c.data(), expected)


def test_reshape_contiguous_is_a_view():
    t, values = arange_tensor((2, 3, 4))
    r = t.reshape(6, 4)
    assert r.buffer is t.buffer
    assert r.shape == (6, 4)
    np.testing.assert_array_equal(r.numpy(), values.reshape(6, 4))
    r2 = t.reshape((4, 3, 2))
    assert r2.buffer is t.buffer
    np.testing.assert_array_equal(r2.numpy(), values.reshape(4, 3, 2))


def test_reshape_of_transpose_copies():
    t, values = arange_tensor((3, 4))
    tt = t.permute(1, 0)
    assert tt.try_reshape(12) is None
    r = tt.reshape(12)
    assert r.buffer is not t.buffer
    np.testing.assert_array_equal(r.numpy(), values.T.reshape(12))


def test_reshape_of_strided_but_viewable_is_a_view():
    t, values = arange_tensor((2, 3, 4))
    p = t.permute(1, 0, 2)  # (3, 2, 4)
    r = p.reshape(3, 2, 2, 2)
    assert r.buffer is t.buffer
    np.testing.assert_array_equal(r.numpy(), values.transpose(1, 0, 2).reshape(3, 2, 2, 2))


def test_reshape_minus_one():
    t, values = arange_tensor((2, 3, 4))
    assert t.reshape(-1).shape == (24,)
    assert t.reshape(-1, 6).shape == (4, 6)
    assert t.reshape(2, -1, 3).shape == (2, 4, 3)
    assert t.reshape((-1, 1)).shape == (24, 1)
    np.testing.assert_array_equal(t.reshape(4, -1).numpy(), values.reshape(4, -1))
    with pytest.raises(TensorShapeError):
        t.reshape(-1, -1)
    with pytest.raises(TensorShapeError):
        t.reshape(5, -1)
    with pytest.raises(TensorShapeError):
        t.reshape(5, 5)


def test_reshape_scalar_and_empty():
    s = Tensor.from_array(np.array([7], dtype=np.int32)).reshape(())
    assert s.shape == ()
    assert s.data()[()] == 7
    e = Tensor.empty((0, 3), DType.FLOAT)
    assert e.reshape(3, 0, 5).shape == (3, 0, 5)
    assert e.reshape(3, 0, 5).buffer is e.buffer


@st.composite
def _tensor_views(draw):
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    t, values = arange_tensor(shape)
    order = draw(st.permutations(range(len(shape))))
    t, values = t.permute(order), values.transpose(order)
    steps = [draw(st.sampled_from([1, 2, -1, -2])) for _ in shape]
    strides = tuple(s * k for s, k in zip(t.strides, steps, strict=True))
    new_shape = tuple(-(-e // abs(k)) for e, k in zip(t.shape, steps, strict=True))
    offset = sum(
        (e - 1) * s for e, s, k in zip(t.shape, t.strides, steps, strict=True) if k < 0 and e
    )
    view = t.view(new_shape, strides, offset)
    return view, values[tuple(slice(None, None, k) for k in steps)]


@given(pair=_tensor_views(), data=st.data())
@PROPERTY
def test_reshape_property_against_numpy(pair, data):
    view, expected = pair
    np.testing.assert_array_equal(view.numpy(), expected)
    count = view.size
    if count:
        candidates = [d for d in range(1, count + 1) if count % d == 0]
        first = data.draw(st.sampled_from(candidates))
        new_shape = (first, -1) if data.draw(st.booleans()) else (count // first, first)
    else:
        new_shape = (0, data.draw(st.integers(1, 3)))
    r = view.reshape(new_shape)
    np.testing.assert_array_equal(r.numpy(), expected.reshape(new_shape))
    tried = view.try_reshape(new_shape)
    assert (r.buffer is view.buffer) == (tried is not None)


def test_broadcast_to_uses_stride_zero():
    t, values = arange_tensor((3, 1))
    b = t.broadcast_to((2, 3, 4))
    assert b.shape == (2, 3, 4)
    assert b.strides[0] == 0
    assert b.strides[2] == 0
    assert b.strides[1] == t.strides[0]
    assert b.buffer is t.buffer
    np.testing.assert_array_equal(b.numpy(), np.broadcast_to(values, (2, 3, 4)))
    assert not b.is_contiguous


def test_broadcast_to_refusals():
    t, _ = arange_tensor((3, 2))
    with pytest.raises(TensorShapeError):
        t.broadcast_to((3, 3))
    with pytest.raises(TensorShapeError):
        t.broadcast_to((2,))
    with pytest.raises(TensorShapeError):
        t.broadcast_to((3, 1))
    with pytest.raises(TensorShapeError):
        t.broadcast_to((2**30, 3, 2))  # above the element limit


def test_broadcast_of_a_view_then_reshape():
    t, values = arange_tensor((4,))
    b = t.broadcast_to((3, 4))
    np.testing.assert_array_equal(b.reshape(12).numpy(), np.tile(values, 3))


def test_permute():
    t, values = arange_tensor((2, 3, 4))
    p = t.permute(2, 0, 1)
    assert p.shape == (4, 2, 3)
    assert p.strides == (1, 12, 4)
    assert p.buffer is t.buffer
    np.testing.assert_array_equal(p.numpy(), values.transpose(2, 0, 1))
    np.testing.assert_array_equal(t.permute((1, 2, 0)).numpy(), values.transpose(1, 2, 0))
    for bad in [(0, 1), (0, 1, 1), (0, 1, 3), (0, 1, 2, 3)]:
        with pytest.raises(TensorShapeError):
            t.permute(*bad)


def test_writes_through_a_view_reach_the_base():
    t = Tensor.zeros((3, 4), DType.INT32)
    t.permute(1, 0).set((2, 1), 7)
    assert t.numpy()[1, 2] == 7
    t.view((2,), (5,), 1).fill(3)
    assert t.numpy()[0, 1] == 3
    assert t.numpy()[1, 2] == 3


# -- layouts -------------------------------------------------------------------------------------


def test_layout_of_contiguous_rank4_is_nchw():
    t = Tensor.empty((2, 3, 4, 5), DType.FLOAT)
    assert t.layout is Layout.NCHW


def test_layout_nhwc_from_strides():
    physical = Tensor.empty((2, 4, 5, 3), DType.FLOAT)  # N, H, W, C
    t = physical.permute(0, 3, 1, 2)
    assert t.shape == (2, 3, 4, 5)
    assert t.layout is Layout.NHWC


@pytest.mark.parametrize(
    "shape", [(1, 1, 1, 1), (2, 1, 3, 4), (1, 1, 3, 4), (5, 1, 1, 1), (1, 3, 1, 1)]
)
def test_layout_tie_goes_to_nchw(shape):
    t = Tensor.empty(shape, DType.FLOAT)
    assert t.layout is Layout.NCHW
    # The NHWC arrangement of the same shape also matches and must report NCHW too.
    n, c, h, w = shape
    nhwc = Tensor.empty((n, h, w, c), DType.FLOAT).permute(0, 3, 1, 2)
    assert nhwc.layout is Layout.NCHW


def test_layout_extent_one_strides_ignored():
    t = Tensor.empty((2, 3, 4, 5), DType.FLOAT)
    v = t.view((2, 3, 1, 5), (15, 5, 999, 1))
    assert v.layout is Layout.NCHW
    nhwc = Tensor.empty((2, 4, 1, 3), DType.FLOAT)
    w = nhwc.view((2, 3, 4, 1), (12, 1, 3, -77))
    assert w.layout is Layout.NHWC


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.view((2, 3, 2, 5), (60, 20, 10, 1)),  # step-2 rows
        lambda t: t.permute(1, 0, 2, 3),
        lambda t: t.permute(0, 1, 3, 2),
        lambda t: t.view((2, 3, 4, 5), (60, 20, 5, -1), 4),
        lambda t: t.view((2, 3, 4, 5), (0, 20, 5, 1)),  # broadcast batch
        lambda t: t.view((2, 3, 4, 5), (60, 1, 12, 3)),  # NHWC-ish, H stride wrong
    ],
)
def test_layout_strided(make):
    t = Tensor.empty((2, 3, 4, 5), DType.FLOAT)
    assert make(t).layout is Layout.STRIDED


def test_layout_of_a_reshaped_copy_is_nchw():
    t = Tensor.empty((2, 3, 4, 5), DType.FLOAT)
    assert t.permute(0, 2, 3, 1).reshape(2, 3, 4, 5).layout is Layout.NCHW


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 3, 4), (1, 2, 3, 4, 5)])
def test_layout_other_ranks_strided(shape):
    assert Tensor.empty(shape, DType.FLOAT).layout is Layout.STRIDED


def _reference_blocked(values, block):
    n, c, h, w = values.shape
    blocks = -(-c // block)
    padded = np.zeros((n, blocks * block, h, w), dtype=values.dtype)
    padded[:, :c] = values
    return padded.reshape(n, blocks, block, h, w).transpose(0, 1, 3, 4, 2).reshape(-1)


@pytest.mark.parametrize(
    ("shape", "block"), [((2, 5, 3, 4), 4), ((1, 3, 2, 2), 8), ((2, 8, 1, 3), 4), ((3, 1, 2, 2), 2)]
)
@pytest.mark.parametrize("dtype", [DType.FLOAT, DType.INT8, DType.BFLOAT16])
def test_to_layout_round_trips(shape, block, dtype):
    values = (np.arange(math.prod(shape)) + 1).astype(NUMPY_OF[dtype]).reshape(shape)
    nchw = Tensor.from_array(values)
    assert nchw.layout is Layout.NCHW

    nhwc = nchw.to_layout(Layout.NHWC)
    assert nhwc.layout is Layout.NHWC or shape[1] == 1
    assert nhwc.shape == shape
    np.testing.assert_array_equal(nhwc.numpy(), values)
    # The memory itself holds the elements in (N, H, W, C) order.
    memory = nhwc.buffer.data[: nhwc.nbytes].view(nhwc.dtype.numpy)
    np.testing.assert_array_equal(memory, values.transpose(0, 2, 3, 1).reshape(-1))

    blocked = nhwc.to_layout(Layout.BLOCKED, block)
    assert blocked.layout is Layout.BLOCKED
    assert blocked.shape == shape
    assert blocked.block_size == block
    n, c, h, w = shape
    span = blocked.data()
    assert span.size == -(-c // block) * n * h * w * block
    np.testing.assert_array_equal(span, _reference_blocked(values, block))

    blocked2 = nchw.to_layout(Layout.BLOCKED, block)
    np.testing.assert_array_equal(blocked2.data(), span)

    back = blocked.to_layout(Layout.NCHW)
    assert back.layout is Layout.NCHW
    assert back.is_contiguous
    np.testing.assert_array_equal(back.numpy(), values)
    back_nhwc = blocked.to_layout(Layout.NHWC)
    np.testing.assert_array_equal(back_nhwc.numpy(), values)

    other = blocked.to_layout(Layout.BLOCKED, block + 1)
    assert other.block_size == block + 1
    np.testing.assert_array_equal(other.data(), _reference_blocked(values, block + 1))
    np.testing.assert_array_equal(other.to_layout(Layout.NCHW).numpy(), values)


def test_to_layout_padding_is_zero_even_in_checked_mode(monkeypatch):
    monkeypatch.setenv("ONEMODEL_CHECKED", "1")
    values = np.ones((1, 3, 2, 2), dtype=np.float32)
    blocked = Tensor.from_array(values).to_layout(Layout.BLOCKED, 4)
    physical = blocked.data().reshape(1, 1, 2, 2, 4)
    assert (physical[..., :3] == 1).all()
    assert (physical[..., 3] == 0).all()
    assert (physical[..., 3].view(np.uint32) == 0).all()  # +0.0, not poison


def test_to_layout_from_strided_source():
    t, values = arange_tensor((2, 3, 4, 5))
    v = t.view((2, 3, 4, 5), (60, 20, 5, -1), 4)
    expected = values[..., ::-1]
    assert v.layout is Layout.STRIDED
    for layout in (Layout.NCHW, Layout.NHWC):
        out = v.to_layout(layout)
        assert out.layout is layout
        np.testing.assert_array_equal(out.numpy(), expected)
    blocked = v.to_layout(Layout.BLOCKED, 2)
    np.testing.assert_array_equal(blocked.to_layout(Layout.NCHW).numpy(), expected)


def test_to_layout_same_layout_returns_itself():
    t = Tensor.zeros((1, 2, 3, 4), DType.FLOAT)
    assert t.to_layout(Layout.NCHW) is t
    b = t.to_layout(Layout.BLOCKED, 2)
    assert b.to_layout(Layout.BLOCKED, 2) is b


def test_to_layout_refusals():
    with pytest.raises(TensorError):
        Tensor.zeros((2, 3), DType.FLOAT).to_layout(Layout.NHWC)
    t = Tensor.zeros((1, 2, 3, 4), DType.FLOAT)
    with pytest.raises(TensorError):
        t.to_layout(Layout.STRIDED)
    with pytest.raises(TensorError):
        t.to_layout(Layout.BLOCKED)
    with pytest.raises(TensorError):
        t.to_layout(Layout.BLOCKED, 0)


@pytest.mark.parametrize(
    "operation",
    [
        lambda b: b.reshape(-1),
        lambda b: b.try_reshape(-1),
        lambda b: b.view((2,), (1,)),
        lambda b: b.numpy(),
        lambda b: b.contiguous(),
        lambda b: b.permute(0, 1, 2, 3),
        lambda b: b.broadcast_to((2, 1, 3, 2, 2)),
        lambda b: b.fill(0),
        lambda b: b.set((0, 0, 0, 0), 1),
        lambda b: b.copy_from(b),
    ],
)
def test_blocked_tensors_refuse_element_operations(operation):
    b = Tensor.from_array(np.ones((1, 3, 2, 2), dtype=np.float32)).to_layout(Layout.BLOCKED, 2)
    version = b.version
    with pytest.raises(TensorError):
        operation(b)
    assert b.version == version


def test_blocked_metadata_works():
    b = Tensor.zeros((2, 3, 4, 5), DType.FLOAT).to_layout(Layout.BLOCKED, 2)
    assert b.shape == (2, 3, 4, 5)
    assert b.rank == 4
    assert b.size == 120
    assert b.dtype is DType.FLOAT
    assert b.layout is Layout.BLOCKED
    assert not b.is_contiguous
    assert b.physical_shape == (2, 2, 4, 5, 2)
    assert "blocked" in repr(b)
