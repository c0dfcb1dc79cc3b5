"""Gradient tracking of seed 002 §8: leaves, grad mode, what a record holds, what recording
costs (nothing when off), releases, version checks and accumulation."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import onemodel.eager as E
from onemodel.backends import KernelPaths
from onemodel.eager.record import BackwardRecord
from onemodel.tensors import (
    Buffer,
    DType,
    Tensor,
    TensorError,
    TensorShapeError,
    TensorVersionError,
)
from onemodel.tensors.autograd import GradLeaf


def _tensor(values, grad: bool = False) -> Tensor:
    tensor = Tensor.from_array(np.asarray(values, dtype=np.float32))
    return tensor.with_requires_grad() if grad else tensor


def _rng_tensor(*shape: int, grad: bool = False, seed: int = 0) -> Tensor:
    return _tensor(np.random.default_rng(seed).standard_normal(shape), grad)


# -- leaves and grad mode --------------------------------------------------------------------


def test_with_requires_grad_returns_a_leaf_handle_over_the_same_elements() -> None:
    plain = _tensor([1.0, 2.0])
    leaf = plain.with_requires_grad()
    assert leaf is not plain and leaf.buffer is plain.buffer
    assert leaf.requires_grad and not plain.requires_grad
    assert isinstance(leaf.autograd, GradLeaf) and leaf.grad_fn is None and leaf.grad is None


def test_only_floating_tensors_require_gradients() -> None:
    with pytest.raises(TensorError, match=r"only floating tensors .* INT64"):
        Tensor.from_array(np.arange(3)).with_requires_grad()
    assert Tensor.from_array(np.ones(2, np.float16)).with_requires_grad().requires_grad


def test_no_grad_scopes_recording_off_and_restores_it() -> None:
    assert E.is_grad_enabled()
    with E.no_grad():
        assert not E.is_grad_enabled()
        with E.no_grad():
            assert not E.is_grad_enabled()
        assert not E.is_grad_enabled()
    assert E.is_grad_enabled()


def test_grad_mode_is_per_thread() -> None:
    seen = []
    with E.no_grad():
        worker = threading.Thread(target=lambda: seen.append(E.is_grad_enabled()))
        worker.start()
        worker.join()
    assert seen == [True]


# -- when an operation records ---------------------------------------------------------------


def test_an_operation_records_only_with_grad_mode_on_and_an_input_requiring_grad() -> None:
    leaf, plain = _tensor([1.0, 2.0], grad=True), _tensor([3.0, 4.0])
    assert E.mul(leaf, plain).grad_fn is not None
    assert E.mul(plain, plain).grad_fn is None
    assert not E.mul(plain, plain).requires_grad
    with E.no_grad():
        assert E.mul(leaf, plain).grad_fn is None


def _count_allocations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every buffer allocation from now on appends its size; any new record fails the test."""
    sizes: list[int] = []
    original = Buffer.allocate.__func__

    def counting(cls, nbytes, *args, **kwargs):
        sizes.append(nbytes)
        return original(cls, nbytes, *args, **kwargs)

    def no_record(*args, **kwargs):
        raise AssertionError("an operation recorded under no_grad()")

    monkeypatch.setattr(Buffer, "allocate", classmethod(counting))
    monkeypatch.setattr(BackwardRecord, "__init__", no_record)
    return sizes


@pytest.mark.parametrize(
    ("name", "operation", "result_bytes"),
    [
        ("mul", lambda x, w: E.mul(x, w), 4 * 2 * 3 * 4 * 4),
        ("relu", lambda x, w: E.relu(w), 4 * 2 * 3 * 4 * 4),
        ("max_pool2d", lambda x, w: E.max_pool2d(w, 2), 4 * 2 * 3 * 2 * 2),
        ("relu_max_pool2d", lambda x, w: E.relu_max_pool2d(w, 2), 4 * 2 * 3 * 2 * 2),
    ],
)
def test_no_grad_allocates_only_the_result(
    monkeypatch: pytest.MonkeyPatch, name: str, operation, result_bytes: int
) -> None:
    x, w = _rng_tensor(2, 3, 4, 4), _rng_tensor(2, 3, 4, 4, grad=True, seed=1)
    with E.no_grad():
        sizes = _count_allocations(monkeypatch)
        result = operation(x, w)
    assert sizes == [result_bytes]
    assert result.autograd is None


def test_max_pool_computes_argmax_only_when_recording(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = KernelPaths.get("numpy")
    calls = []
    original = type(kernels).max_pool2d

    def spy(self, x, out, kernel, stride, pad, indices=None):
        calls.append(indices)
        original(self, x, out, kernel, stride, pad, indices)

    monkeypatch.setattr(type(kernels), "max_pool2d", spy)
    x = _rng_tensor(1, 1, 4, 4, grad=True)
    with E.no_grad():
        E.max_pool2d(x, 2)
    E.max_pool2d(x, 2)
    assert calls[0] is None
    assert calls[1] is not None and calls[1].dtype is DType.INT32


# -- what a record holds ---------------------------------------------------------------------


def test_a_record_holds_op_inputs_saved_slots_and_attributes() -> None:
    x, weight = _rng_tensor(2, 4, grad=True), _rng_tensor(4)
    bias = _rng_tensor(4, grad=True, seed=2)
    result = E.layer_norm(x, weight, bias, eps=1e-3)
    record = result.grad_fn
    assert record.op is E.OpKind.LAYER_NORM
    assert [edge.node for edge in record.inputs] == [x.autograd, None, bias.autograd]
    assert [(edge.shape, edge.dtype) for edge in record.inputs] == [
        ((2, 4), DType.FLOAT),
        ((4,), DType.FLOAT),
        ((4,), DType.FLOAT),
    ]
    assert record.floats == (np.float64(1e-3),) and record.ints == ()
    normalized, inv_std, scale = (record.saved(slot) for slot in range(3))
    assert normalized.shape == (2, 4) and inv_std.shape == (2, 1)
    assert scale.buffer is weight.buffer


def test_a_result_feeds_the_next_record_as_its_node() -> None:
    x = _rng_tensor(2, 3, grad=True)
    hidden = E.relu(x)
    out = E.sum(hidden, 1)
    assert out.grad_fn.inputs[0].node is hidden.grad_fn
    assert out.grad_fn.ints == (1,)


def test_empty_slots_where_the_operation_does_not_need_them() -> None:
    a, b = _rng_tensor(2, 3, grad=True), _rng_tensor(3, 2)
    record = E.matmul(a, b).grad_fn
    assert record.saved(1).buffer is b.buffer  # a's gradient reads b
    with pytest.raises(TensorError, match=r"slot 0 .* is empty"):
        record.saved(0)  # b needs no gradient, so a is not kept


def test_conv_and_pool_records_follow_the_seed_conventions() -> None:
    x, w = _rng_tensor(1, 2, 5, 5, grad=True), _rng_tensor(3, 2, 3, 3, grad=True, seed=1)
    conv = E.conv2d(x, w, stride=2, padding=1).grad_fn
    assert conv.op is E.OpKind.CONV2D and conv.ints == (3, 3, 2, 2, 1, 1, 18)
    assert conv.saved(0).shape == (1, 18, 9) and conv.saved(1).buffer is w.buffer
    pooled = E.relu_max_pool2d(E.sub(x, 10.0), 2).grad_fn
    indices = pooled.saved(0)
    assert indices.dtype is DType.INT32 and (indices.numpy() == -1).all()
    table = _rng_tensor(3, 4, grad=True)
    ids = Tensor.from_array(np.array([0, 2], np.int32))
    record = E.embedding(table, ids, skip_id=1).grad_fn
    assert record.ints == (1,) and record.saved(0).buffer is ids.buffer


def test_release_frees_the_owned_tensors_only() -> None:
    x = _rng_tensor(1, 1, 4, 4, grad=True)
    result = E.max_pool2d(x, 2)
    record = result.grad_fn
    indices = record.saved(0)
    E.backward(E.sum(result))
    assert record.released and not indices.buffer.live
    assert x.buffer.live and result.buffer.live
    with pytest.raises(TensorError, match="retain_graph"):
        E.backward(E.sum(result))


# -- in-place writes and versions ------------------------------------------------------------


def test_copy_from_into_a_grad_tensor_while_recording_raises() -> None:
    leaf, source = _tensor([1.0, 2.0], grad=True), _tensor([5.0, 6.0])
    with pytest.raises(TensorError, match="no_grad"):
        leaf.copy_from(source)
    assert leaf.numpy().tolist() == [1.0, 2.0]
    with E.no_grad():
        leaf.copy_from(source)
    assert leaf.numpy().tolist() == [5.0, 6.0]


def test_backward_raises_when_a_saved_input_was_modified() -> None:
    x, w = _rng_tensor(3, grad=True), _rng_tensor(3, grad=True, seed=1)
    loss = E.sum(E.mul(x, w))
    with E.no_grad():
        w.copy_from(_tensor([1.0, 1.0, 1.0]))
    with pytest.raises(TensorVersionError, match="modified in place"):
        E.backward(loss)


def test_backward_raises_when_a_saved_output_was_modified() -> None:
    x = _rng_tensor(3, grad=True)
    y = E.exp(x)
    loss = E.sum(y)
    y.fill(0.0)
    with pytest.raises(TensorVersionError):
        E.backward(loss)


# -- backward --------------------------------------------------------------------------------


def test_gradients_accumulate_across_backward_passes() -> None:
    x = _tensor([1.0, -2.0, 3.0], grad=True)
    E.backward(E.sum(E.mul(x, x)))
    first = x.grad
    E.backward(E.sum(E.mul(x, 3.0)))
    assert x.grad is first
    np.testing.assert_array_equal(first.numpy(), 2 * x.numpy() + 3)


def test_retain_graph_allows_a_second_pass() -> None:
    x = _tensor([1.0, 2.0], grad=True)
    loss = E.sum(E.exp(x))
    E.backward(loss, retain_graph=True)
    E.backward(loss)
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(x.numpy()), rtol=1e-6)


def test_backward_of_a_non_scalar_needs_a_gradient() -> None:
    x = _tensor([1.0, 2.0], grad=True)
    y = E.mul(x, x)
    with pytest.raises(TensorShapeError, match="single-element"):
        E.backward(y)
    with pytest.raises(TensorShapeError, match="does not match"):
        E.backward(y, _tensor([1.0]))
    E.backward(y, _tensor([1.0, 10.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 40.0])


def test_backward_of_a_leaf_or_a_plain_tensor() -> None:
    leaf = _tensor([3.0], grad=True)
    E.backward(leaf)
    assert leaf.grad.numpy().tolist() == [1.0]
    with pytest.raises(TensorError, match="does not require"):
        E.backward(_tensor([3.0]))


def test_backward_records_nothing() -> None:
    x = _tensor([1.0, 2.0], grad=True)
    E.backward(E.sum(E.mul(x, x)))
    assert x.grad.autograd is None


def test_exact_mode_refuses_operations_without_an_exact_definition() -> None:
    x = _tensor([1.0, 2.0])
    with E.use_kernels("numpy", exact=True):
        with pytest.raises(TensorError, match="exp has no exact-mode definition"):
            E.exp(x)
        with pytest.raises(TensorError, match="softmax"):
            E.softmax(x)
        assert E.relu(x).numpy().tolist() == [1.0, 2.0]


def test_kernels_in_scope_must_reach_the_tensors_memory() -> None:
    from onemodel.tensors import Memory
    from onemodel.tensors.buffers import aligned_numpy_bytes

    elsewhere = Memory("elsewhere", object(), aligned_numpy_bytes)
    foreign = Tensor.empty((2,), DType.FLOAT, memory=elsewhere)
    with pytest.raises(TensorError, match="no eager kernels"):
        E.relu(foreign)
    with E.use_kernels("numpy"), pytest.raises(TensorError, match="cannot compute"):
        E.relu(foreign)


def test_operands_must_share_type() -> None:
    with pytest.raises(TensorError, match="share type"):
        E.add(_tensor([1.0]), Tensor.from_array(np.ones(1)))
