"""A small MLP and a small CNN trained with plain SGD written on the eager API: the loss falls on
every backend, and in exact mode the reference and fast NumPy kernels give the same bits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import onemodel.eager as E
from onemodel.backends import Kernels
from onemodel.tensors import Tensor

STEPS = 6


def _mlp_problem(rng: np.random.Generator) -> tuple[dict, list[np.ndarray]]:
    inputs = rng.standard_normal((32, 6))
    teacher = rng.standard_normal((6, 1))
    data = {"x": inputs, "y": np.tanh(inputs @ teacher)}
    parameters = [
        rng.standard_normal((6, 16)) * 0.4,  # w1
        np.zeros(16),  # b1
        np.ones(16),  # layer-norm scale
        np.zeros(16),  # layer-norm shift
        rng.standard_normal((16, 1)) * 0.25,  # w2
        np.zeros(1),  # b2
    ]
    return data, parameters


def _mlp(data: dict, w1, b1, scale, shift, w2, b2) -> Tensor:
    hidden = E.relu(E.layer_norm(E.add(E.matmul(data["x"], w1), b1), scale, shift))
    return E.add(E.matmul(hidden, w2), b2)


def _cnn_problem(rng: np.random.Generator) -> tuple[dict, list[np.ndarray]]:
    images = rng.standard_normal((8, 2, 8, 8))
    data = {"x": images, "y": images[:, :1, ::4, ::4].reshape(8, 4).mean(1, keepdims=True)}
    parameters = [
        rng.standard_normal((4, 2, 3, 3)) * 0.3,  # conv weights
        np.zeros(4),  # conv bias
        rng.standard_normal((64, 1)) * 0.1,  # dense weights
        np.zeros(1),  # dense bias
    ]
    return data, parameters


def _cnn(data: dict, kernel, kernel_bias, dense, dense_bias) -> Tensor:
    features = E.relu_max_pool2d(E.conv2d(data["x"], kernel, kernel_bias, padding=1), 2)
    return E.add(E.matmul(E.reshape(features, 8, 64), dense), dense_bias)


PROBLEMS = {"mlp": (_mlp_problem, _mlp, 0.1), "cnn": (_cnn_problem, _cnn, 0.005)}


def train(
    kernels: Kernels, problem: str, *, exact: bool = False
) -> tuple[list[float], list[np.ndarray]]:
    """Losses per step and the final parameters of a few SGD steps on float32 tensors."""
    make, model, rate = PROBLEMS[problem]
    arrays, initial = make(np.random.default_rng(7))

    def to_tensor(values: np.ndarray) -> Tensor:
        return Tensor.from_array(values.astype(np.float32), memory=kernels.memory)

    data = {name: to_tensor(values) for name, values in arrays.items()}
    parameters = [to_tensor(values).with_requires_grad() for values in initial]
    losses = []
    with E.use_kernels(kernels, exact=exact):
        for _ in range(STEPS):
            error = E.sub(model(data, *parameters), data["y"])
            loss = E.mean(E.mul(error, error))
            E.backward(loss)
            losses.append(float(loss.numpy()))
            with E.no_grad():
                for parameter in parameters:
                    parameter.copy_from(E.sub(parameter, E.mul(parameter.grad, rate)))
                    parameter.grad.fill(0.0)
    return losses, [parameter.numpy() for parameter in parameters]


def _falls(losses: list[float]) -> bool:
    return all(b < a for a, b in itertools.pairwise(losses))


@pytest.mark.parametrize("problem", PROBLEMS)
def test_loss_falls(kernels: Kernels, problem: str) -> None:
    losses, _ = train(kernels, problem)
    assert _falls(losses), losses


@pytest.mark.parametrize("problem", PROBLEMS)
def test_exact_mode_gives_the_same_bits_on_reference_and_fast_numpy(problem: str) -> None:
    from onemodel.backends import KernelPaths

    reference = train(KernelPaths.get("numpy-reference"), problem, exact=True)
    fast = train(KernelPaths.get("numpy"), problem, exact=True)
    assert _falls(reference[0])
    assert reference[0] == fast[0]
    for ours, theirs in zip(reference[1], fast[1], strict=True):
        assert ours.tobytes() == theirs.tobytes()


def test_float32_training_follows_pytorch() -> None:
    """The same MLP steps in PyTorch give the same losses to float32 accuracy."""
    torch = pytest.importorskip("torch")
    from onemodel.backends import KernelPaths

    losses, _ = train(KernelPaths.get("numpy"), "mlp")
    arrays, initial = _mlp_problem(np.random.default_rng(7))
    x, y = (torch.tensor(arrays[k], dtype=torch.float32) for k in ("x", "y"))
    w1, b1, scale, shift, w2, b2 = (
        torch.tensor(v, dtype=torch.float32, requires_grad=True) for v in initial
    )
    expected = []
    for _ in range(STEPS):
        hidden = torch.relu(torch.nn.functional.layer_norm(x @ w1 + b1, (16,), scale, shift))
        loss = ((hidden @ w2 + b2 - y) ** 2).mean()
        loss.backward()
        expected.append(loss.item())
        with torch.no_grad():
            for p in (w1, b1, scale, shift, w2, b2):
                p -= 0.1 * p.grad
                p.grad.zero_()
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
