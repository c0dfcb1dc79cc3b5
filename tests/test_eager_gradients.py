"""Every backward formula of onemodel.eager against central finite differences in float64, and
against PyTorch's autograd where torch is installed, on every backend.

Each case is a function of a few float64 inputs; the checked quantity is the gradient of
Σ out·R for a fixed random R, i.e. backward() seeded with R. Inputs keep away from the kinks
(relu and abs at 0, ties of maximum and pooling windows) where the derivative is undefined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import onemodel.eager as E
from onemodel.backends import Kernels
from onemodel.tensors import Tensor

STEP = 1e-6


@dataclass(frozen=True)
class Case:
    name: str
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    ours: Callable[..., Tensor]
    theirs: Callable[..., object]  # the same function on torch tensors (torch passed first)
    skipped_rows: tuple[int, ...] = ()  # rows of input 0 that get no gradient by convention


def _normal(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.standard_normal(shape)


def _away_from_zero(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    """Values of magnitude 0.5 to 2 with random signs."""
    return lambda rng: rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def _positive(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.uniform(0.5, 2.0, shape)


def _distinct(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    """A random permutation of well-separated values (no ties within a pooling window)."""
    count = int(np.prod(shape))
    return lambda rng: (rng.permutation(count).reshape(shape) - count / 3) / 4.0


def _inputs(*makers: Callable[[np.random.Generator], np.ndarray]):
    return lambda rng: [make(rng) for make in makers]


IDS = np.array([[0, 2, 5, 2], [3, 3, 1, 2]], dtype=np.int64)


def _ids(torch):
    return torch.tensor(IDS)


CASES = [
    Case("add", _inputs(_normal(2, 3, 4), _normal(3, 1)), E.add, lambda t, a, b: a + b),
    Case("sub", _inputs(_normal(3, 1), _normal(2, 3, 4)), E.sub, lambda t, a, b: a - b),
    Case("mul", _inputs(_normal(2, 3, 4), _normal(4)), E.mul, lambda t, a, b: a * b),
    Case("div", _inputs(_normal(2, 3), _away_from_zero(3)), E.div, lambda t, a, b: a / b),
    Case(
        "maximum",
        _inputs(_distinct(2, 3), _distinct(3)),
        E.maximum,
        lambda t, a, b: t.maximum(a, b),
    ),
    Case(
        "minimum",
        _inputs(_distinct(2, 3), _distinct(2, 1)),
        E.minimum,
        lambda t, a, b: t.minimum(a, b),
    ),
    Case(
        "scalar operand",
        _inputs(_normal(3, 2)),
        lambda a: E.div(E.sub(2.0, a), 4.0),
        lambda t, a: (2.0 - a) / 4.0,
    ),
    Case("neg", _inputs(_normal(3, 4)), E.neg, lambda t, x: -x),
    Case("abs", _inputs(_away_from_zero(3, 4)), E.abs, lambda t, x: t.abs(x)),
    Case("relu", _inputs(_away_from_zero(3, 4)), E.relu, lambda t, x: t.relu(x)),
    Case("sqrt", _inputs(_positive(3, 4)), E.sqrt, lambda t, x: t.sqrt(x)),
    Case("exp", _inputs(_normal(3, 4)), E.exp, lambda t, x: t.exp(x)),
    Case("log", _inputs(_positive(3, 4)), E.log, lambda t, x: t.log(x)),
    Case("tanh", _inputs(_normal(3, 4)), E.tanh, lambda t, x: t.tanh(x)),
    Case("sigmoid", _inputs(_normal(3, 4)), E.sigmoid, lambda t, x: t.sigmoid(x)),
    Case("matmul", _inputs(_normal(2, 3, 4), _normal(4, 5)), E.matmul, lambda t, a, b: a @ b),
    Case(
        "batched matmul", _inputs(_normal(3, 4), _normal(2, 4, 2)), E.matmul, lambda t, a, b: a @ b
    ),
    Case("sum", _inputs(_normal(2, 3, 4)), lambda x: E.sum(x, (0, 2)), lambda t, x: x.sum((0, 2))),
    Case(
        "sum keepdims",
        _inputs(_normal(2, 3)),
        lambda x: E.sum(x, -1, keepdims=True),
        lambda t, x: x.sum(-1, keepdim=True),
    ),
    Case("mean", _inputs(_normal(2, 3)), E.mean, lambda t, x: x.mean()),
    Case(
        "reshape",
        _inputs(_normal(2, 6)),
        lambda x: E.mul(E.reshape(x, 3, 4), E.permute(E.reshape(x, 4, 3), 1, 0)),
        lambda t, x: x.reshape(3, 4) * x.reshape(4, 3).T,
    ),
    Case(
        "permute",
        _inputs(_normal(2, 3, 4)),
        lambda x: E.permute(x, 2, 0, 1),
        lambda t, x: x.permute(2, 0, 1),
    ),
    Case(
        "max_pool2d",
        _inputs(_distinct(2, 2, 5, 5)),
        lambda x: E.max_pool2d(x, 3, 2, 1),
        lambda t, x: t.nn.functional.max_pool2d(x, 3, 2, 1),
    ),
    Case(
        "overlapping max_pool2d",
        _inputs(_distinct(1, 2, 4, 5)),
        lambda x: E.max_pool2d(x, 2, 1),
        lambda t, x: t.nn.functional.max_pool2d(x, 2, 1),
    ),
    Case(
        "relu_max_pool2d",
        _inputs(_distinct(2, 2, 4, 6)),
        lambda x: E.relu_max_pool2d(x, (2, 3), (2, 1), (1, 0)),
        lambda t, x: t.nn.functional.max_pool2d(t.relu(x), (2, 3), (2, 1), (1, 0)),
    ),
    Case(
        "layer_norm",
        _inputs(_normal(2, 3, 5), _normal(5), _normal(5)),
        lambda x, w, b: E.layer_norm(x, w, b, 1e-3),
        lambda t, x, w, b: t.nn.functional.layer_norm(x, (5,), w, b, 1e-3),
    ),
    Case(
        "gelu",
        _inputs(_normal(3, 4)),
        E.gelu,
        lambda t, x: t.nn.functional.gelu(x, approximate="tanh"),
    ),
    Case(
        "softmax",
        _inputs(_normal(3, 5)),
        lambda x: E.softmax(x, -1, 0.5),
        lambda t, x: t.softmax(x * 0.5, -1),
    ),
    Case(
        "softmax axis 0",
        _inputs(_normal(3, 5)),
        lambda x: E.softmax(x, 0),
        lambda t, x: t.softmax(x, 0),
    ),
    Case(
        "conv2d",
        _inputs(_normal(2, 3, 6, 5), _normal(4, 3, 3, 3), _normal(4)),
        lambda x, w, b: E.conv2d(x, w, b, 2, 1),
        lambda t, x, w, b: t.nn.functional.conv2d(x, w, b, 2, 1),
    ),
    Case(
        "conv2d 1x2 kernel",
        _inputs(_normal(1, 2, 4, 4), _normal(3, 2, 1, 2)),
        lambda x, w: E.conv2d(x, w, stride=(1, 2)),
        lambda t, x, w: t.nn.functional.conv2d(x, w, stride=(1, 2)),
    ),
    Case(
        "embedding",
        _inputs(_normal(6, 3)),
        lambda table: E.embedding(table, Tensor.from_array(IDS, memory=table.memory), 2),
        lambda t, table: t.nn.functional.embedding(_ids(t), table, padding_idx=2),
        skipped_rows=(2,),
    ),
]


def _run(kernels: Kernels, case: Case, values: list[np.ndarray], weights: np.ndarray):
    """Our output and gradients (host float64 arrays)."""
    with E.use_kernels(kernels):
        leaves = [Tensor.from_array(v, memory=kernels.memory).with_requires_grad() for v in values]
        out = case.ours(*leaves)
        E.backward(out, Tensor.from_array(weights, memory=kernels.memory))
        return out.numpy(), [leaf.grad.numpy() for leaf in leaves]


def _objective(kernels: Kernels, case: Case, values: list[np.ndarray], weights: np.ndarray):
    with E.use_kernels(kernels), E.no_grad():
        tensors = [Tensor.from_array(v, memory=kernels.memory) for v in values]
        return float(np.sum(case.ours(*tensors).numpy() * weights))


def _case_values(case: Case) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(sum(map(ord, case.name)))
    values = case.inputs(rng)
    with E.no_grad():
        shape = case.ours(*(Tensor.from_array(v) for v in values)).shape
    return values, rng.standard_normal(shape)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_gradient_matches_central_differences(kernels: Kernels, case: Case) -> None:
    values, weights = _case_values(case)
    _, grads = _run(kernels, case, values, weights)
    for index, value in enumerate(values):
        numeric = np.zeros_like(value)
        for position in np.ndindex(value.shape):
            shifted = [v.copy() for v in values]
            shifted[index][position] = value[position] + STEP
            above = _objective(kernels, case, shifted, weights)
            shifted[index][position] = value[position] - STEP
            below = _objective(kernels, case, shifted, weights)
            numeric[position] = (above - below) / (2 * STEP)
        if index == 0:
            numeric[list(case.skipped_rows)] = 0
        np.testing.assert_allclose(grads[index], numeric, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_forward_and_gradient_match_pytorch(kernels: Kernels, case: Case) -> None:
    torch = pytest.importorskip("torch")
    values, weights = _case_values(case)
    out, grads = _run(kernels, case, values, weights)
    leaves = [torch.tensor(v, requires_grad=True) for v in values]
    expected = case.theirs(torch, *leaves)
    expected.backward(torch.tensor(weights))
    np.testing.assert_allclose(out, expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    for ours, leaf in zip(grads, leaves, strict=True):
        np.testing.assert_allclose(ours, leaf.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_float32_gradient_matches_pytorch(case: Case) -> None:
    """The float32 path (the one models train in) agrees with torch's float32 closely."""
    torch = pytest.importorskip("torch")
    values, weights = _case_values(case)
    values = [v.astype(np.float32) for v in values]
    leaves = [Tensor.from_array(v).with_requires_grad() for v in values]
    E.backward(case.ours(*leaves), Tensor.from_array(weights.astype(np.float32)))
    theirs = [torch.tensor(v, requires_grad=True) for v in values]
    case.theirs(torch, *theirs).backward(torch.tensor(weights, dtype=torch.float32))
    for leaf, expected in zip(leaves, theirs, strict=True):
        np.testing.assert_allclose(leaf.grad.numpy(), expected.grad.numpy(), rtol=2e-4, atol=2e-5)
