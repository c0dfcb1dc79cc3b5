"""Buffer versions and saved tensors (seed 002 §7)."""

from __future__ import annotations

import numpy as np
import pytest

from onemodel.tensors import (
    Arena,
    Buffer,
    BufferPool,
    DType,
    SavedTensor,
    StaleTensorError,
    Tensor,
    TensorVersionError,
)


def test_version_zero_at_rent():
    pool = BufferPool()
    assert pool.rent(100).version == 0
    assert Buffer.allocate(10).version == 0
    assert Arena().allocate(10).version == 0
    assert Tensor.empty((2, 3), DType.FLOAT).version == 0
    assert Tensor.zeros((2, 3), DType.FLOAT, pool=pool).version == 0


def test_each_write_adds_one():
    t = Tensor.zeros((2, 3), DType.INT32)
    t.mutable_data()
    assert t.version == 1
    t.set((0, 1), 5)
    assert t.version == 2
    t.fill(3)
    assert t.version == 3
    t.copy_from(Tensor.zeros((2, 3), DType.INT32))
    assert t.version == 4
    t.mutable_data()[...] = 1
    assert t.version == 5
    assert t.buffer.version == 5


def test_reads_do_not_change_the_version():
    t = Tensor.zeros((2, 3), DType.FLOAT)
    t.data()
    t.numpy()
    t.permute(1, 0).numpy()
    t.reshape(6)
    t.broadcast_to((4, 2, 3)).data()
    t.contiguous()
    t.save()
    assert t.version == 0


def test_copy_from_bumps_only_the_destination():
    source = Tensor.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))
    before = source.version
    destination = Tensor.zeros((2, 3), DType.FLOAT)
    destination.copy_from(source)
    assert source.version == before
    assert destination.version == 1
    np.testing.assert_array_equal(destination.numpy(), source.numpy())


def test_version_is_shared_by_views():
    t = Tensor.zeros((2, 3), DType.FLOAT)
    views = [t.permute(1, 0), t.reshape(6), t.view((2,), (3,), 1), t.broadcast_to((5, 2, 3))]
    views[0].fill(1.0)
    assert t.version == 1
    assert all(v.version == 1 for v in views)
    views[1].set((4,), 2.0)
    views[2].mutable_data()
    assert t.version == 3
    assert {v.version for v in views} == {3}


def test_other_buffers_keep_their_versions():
    a = Tensor.zeros((3,), DType.FLOAT)
    b = Tensor.zeros((3,), DType.FLOAT)
    a.fill(1.0)
    assert b.version == 0


@pytest.mark.parametrize(
    "write",
    [
        lambda t: t.mutable_data(),
        lambda t: t.set((0, 0), 1.0),
        lambda t: t.fill(2.0),
        lambda t: t.copy_from(Tensor.zeros(t.shape, t.dtype)),
        lambda t: t.permute(1, 0).fill(3.0),
        lambda t: t.reshape(6).set((5,), 4.0),
        lambda t: t.view((1,), (1,), 5).mutable_data(),
        lambda t: t.broadcast_to((2, 2, 3)).mutable_data(),
    ],
)
def test_unpack_after_a_write_through_any_view_raises(write):
    t = Tensor.zeros((2, 3), DType.FLOAT)
    t.fill(1.0)  # the version at save need not be 0
    saved = t.permute(1, 0).save()
    assert isinstance(saved, SavedTensor)
    write(t)
    with pytest.raises(TensorVersionError):
        saved.unpack()


def test_unpack_without_writes_returns_the_tensor():
    t = Tensor.zeros((2, 3), DType.FLOAT)
    t.set((1, 1), 7.0)
    saved = t.save()
    view_saved = t.reshape(3, 2).save()
    t.numpy()
    t.permute(1, 0).data()
    other = Tensor.zeros((2, 3), DType.FLOAT)
    other.fill(1.0)  # writes to another buffer do not count
    assert saved.unpack() is t
    assert view_saved.unpack().shape == (3, 2)
    assert saved.unpack() is t  # unpacking twice is fine
    assert saved.unpack().numpy()[1, 1] == 7.0


def test_saving_after_the_write_is_fine():
    t = Tensor.zeros((4,), DType.INT64)
    old = t.save()
    t.fill(3)
    new = t.save()
    assert new.unpack() is t
    with pytest.raises(TensorVersionError):
        old.unpack()


def test_version_back_to_zero_on_re_rent():
    pool = BufferPool()
    t = Tensor.zeros((4,), DType.FLOAT, pool=pool)
    t.fill(1.0)
    t.fill(2.0)
    assert t.version == 2
    t.dispose()
    again = Tensor.empty((4,), DType.FLOAT, pool=pool)
    assert again.buffer is t.buffer
    assert again.version == 0


def test_version_back_to_zero_after_arena_reset():
    arena = Arena()
    b = arena.allocate(16)
    Tensor(b, DType.FLOAT, (4,)).fill(1.0)
    assert b.version == 1
    arena.reset()
    assert arena.allocate(16).version == 0


def test_unpack_of_a_stale_saved_tensor_raises_stale():
    pool = BufferPool()
    t = Tensor.zeros((4,), DType.FLOAT, pool=pool)
    saved = t.save()
    t.dispose()
    with pytest.raises(StaleTensorError):
        saved.unpack()
    # Re-rented: the version is 0 again, equal to the saved one, but the memory is not ours.
    again = Tensor.zeros((4,), DType.FLOAT, pool=pool)
    assert again.buffer is t.buffer
    assert again.version == saved.version
    with pytest.raises(StaleTensorError):
        saved.unpack()


def test_unpack_after_arena_reset_raises_stale():
    arena = Arena()
    t = Tensor(arena.allocate(16), DType.FLOAT, (4,))
    saved = t.save()
    arena.reset()
    with pytest.raises(StaleTensorError):
        saved.unpack()
