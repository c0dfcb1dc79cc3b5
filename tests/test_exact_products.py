"""The exact products of the operators beyond MatMul, Gemm and Conv against the slow oracle.

ConvTranspose, Attention (scores and probabilities · V), Einsum, DFT, AffineGrid and the
linear models multiply through exact_products (docs/exact-mode.md's table): for float32
inputs each dot product is the exact sum rounded once into float32, whatever the BLAS's order.
Each case compares a one-node run, on NumPy, numpy-reference, the flushing checked-device
stand-in and (gpu mark) CuPy, with tests/exact_oracle.py (integer sums, one rounding by
Fraction) on adversarial operands: cancellation, exponents far apart in one sum, subnormals,
±0, inf and NaN, and long sums. A multiplication by a float64 constant (DFT's twiddles,
AffineGrid's base points) is the exact product with that constant, by its exact split into
three float32 parts.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from exact_oracle import adversarial_operands, oracle
from operator_harness import run_node

from onemodel.backends import BackendUnavailableError, KernelPaths
from onemodel.backends.exact_activations import masked_softmax
from onemodel.backends.exact_elementary import sincos64
from onemodel.backends.numpy_cpu.reference import ReferenceKernels
from onemodel.graph.operators.exact_products import constant_product, float32_parts
from onemodel.graph.operators.resize import base_coordinates

SEEDS = range(40)


@pytest.fixture(
    params=[
        "numpy",
        "numpy-reference",
        "checked-device",
        pytest.param("cupy", marks=pytest.mark.gpu),
    ]
)
def backend(request: pytest.FixtureRequest) -> str:
    try:
        KernelPaths.get(request.param)
    except BackendUnavailableError as error:
        pytest.skip(str(error))
    return request.param


def _bits(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)


def assert_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    wrong = np.argwhere(_bits(got) != _bits(want))
    if wrong.size:
        first = tuple(wrong[0])
        pytest.fail(f"{len(wrong)} differ, first at {first}: {got[first]!r}, not {want[first]!r}")


def _operands(seed: int) -> tuple[np.ndarray, np.ndarray]:
    return adversarial_operands(np.random.default_rng(7000 + seed))


def _exact(op_type: str, inputs: list, attributes: dict, backend: str, **kwargs) -> list:
    return run_node(op_type, inputs, attributes, backend=backend, exact=True, **kwargs)


def test_einsum_contractions_are_the_exact_dot_products_rounded_once(backend: str) -> None:
    for seed in SEEDS:
        a, b = _operands(seed)
        (got,) = _exact("Einsum", [a, b], {"equation": "mk,kn->mn"}, backend, opset=12)
        assert_bits(got, oracle(a, b, np.float32))
        (got,) = _exact("Einsum", [a], {"equation": "mk->m"}, backend, opset=12)
        ones = np.ones((a.shape[1], 1), dtype=np.float32)
        assert_bits(got, oracle(a, ones, np.float32)[:, 0])
    depth = 1 << 16  # a long sum that cancels to a remainder far below its terms
    rng = np.random.default_rng(2)
    long = rng.standard_normal((1, depth)) * 2.0 ** rng.integers(-30, 30, (1, depth))
    long = long.astype(np.float32)
    long[0, depth // 2 :] = -long[0, : depth // 2]
    long[0, -1] = np.float32(2.0**-60)
    column = np.ones((depth, 2), dtype=np.float32)
    (got,) = _exact("Einsum", [long, column], {"equation": "mk,kn->mn"}, backend, opset=12)
    assert_bits(got, oracle(long, column, np.float32))
    a, b = _operands(3)
    c = np.random.default_rng(1).standard_normal((b.shape[1], 3)).astype(np.float32)
    (got,) = _exact("Einsum", [a, b, c], {"equation": "ij,jk,kl->il"}, backend, opset=12)
    assert_bits(got, oracle(oracle(a, b, np.float32), c, np.float32))


def test_conv_transpose_columns_are_exact_dot_products_over_the_channels(backend: str) -> None:
    """Kernel 2, stride 2: each output takes one column (added to +0), the exact sum over the
    channels rounded once. Kernel 3, stride 1: the columns so rounded, then summed in float64
    from +0 in tap order and rounded once."""
    for seed in SEEDS:
        a, b = _operands(seed)  # a: (positions, channels), b: (channels, outputs)
        x = np.ascontiguousarray(a.T)[None]  # (1, C, L)
        taps = np.stack([b, b[:, ::-1]], axis=-1)  # (C, M, 2)
        (got,) = _exact("ConvTranspose", [x, taps], {"strides": [2]}, backend)
        want = np.stack([oracle(a, taps[..., t], np.float32).T for t in range(2)], axis=-1)
        want = (want.astype(np.float64) + 0.0).astype(np.float32)  # from +0: −0 becomes +0
        assert_bits(got, want.reshape(1, b.shape[1], -1))
        kernel = np.stack([b, -b, b[:, ::-1]], axis=-1)
        (got,) = _exact("ConvTranspose", [x, kernel], {}, backend)
        total = np.zeros((b.shape[1], a.shape[0] + 2))
        with np.errstate(all="ignore"):
            for t in range(3):
                total[:, t : t + a.shape[0]] += oracle(a, kernel[..., t], np.float32).T
        assert_bits(got, total.astype(np.float32)[None])


def test_attention_scores_and_values_are_exact_dot_products(backend: str) -> None:
    """scale 1: the scores (qk_matmul_output) are the exact Q·Kᵀ rounded once into float32;
    Y is the exact P·V with P the exact softmax of the scores rounded to float32."""
    for seed in SEEDS:
        q, k = _operands(seed)
        keys = k.T  # (T, E)
        v = np.random.default_rng(seed).standard_normal((keys.shape[0], 3)).astype(np.float32)
        y, _, _, scores = _exact(
            "Attention",
            [q[None, None], keys[None, None], v[None, None]],
            {"scale": 1.0, "qk_matmul_output_mode": 0},
            backend,
            opset=23,
            outputs=4,
        )
        want_scores = oracle(q, k, np.float32)
        assert_bits(scores[0, 0], want_scores)
        with np.errstate(all="ignore"):
            probs = masked_softmax(np, want_scores.astype(np.float64)).astype(np.float32)
        assert_bits(y[0, 0], oracle(probs, v, np.float32))


def _twiddles(length: int) -> tuple[np.ndarray, np.ndarray]:
    turns = (np.arange(length)[:, None] * np.arange(length)[None, :]) % length
    with np.errstate(all="ignore"):
        sine, cosine = sincos64(np, (2 * np.pi) * turns / length)
    return cosine.T, -sine.T


def test_dft_is_the_exact_product_with_the_float64_twiddles(backend: str) -> None:
    for seed in SEEDS:
        a, _ = _operands(seed)  # rows of signals of length K
        cosine, sine = _twiddles(a.shape[1])
        (got,) = _exact("DFT", [a[..., None]], {}, backend, opset=20)
        assert_bits(got[..., 0], oracle(a, cosine, np.float32))
        assert_bits(got[..., 1], oracle(a, sine, np.float32))


def test_inverse_dft_divides_the_exact_product_once_by_the_length(backend: str) -> None:
    for seed in SEEDS:
        real, imag = _operands(seed)
        imag = np.resize(imag.reshape(-1), real.shape).astype(np.float32)
        length = real.shape[1]
        cosine, sine = _twiddles(length)  # forward's: the inverse's sine has the other sign
        (got,) = _exact("DFT", [np.stack([real, imag], axis=-1)], {"inverse": 1}, backend, opset=20)
        signal = np.concatenate([real, imag], axis=1)
        with np.errstate(all="ignore"):
            for index, weights in enumerate(
                (np.concatenate([cosine, sine]), np.concatenate([-sine, cosine]))
            ):
                want = oracle(signal, weights, np.float32).astype(np.float64) / length
                assert_bits(got[..., index], want.astype(np.float32))


def test_affine_grid_is_the_exact_product_with_the_base_points(backend: str) -> None:
    rng = np.random.default_rng(5)
    for seed in SEEDS:
        a, _ = _operands(seed)
        theta = np.resize(a, (2, 2, 3)).astype(np.float32)
        theta[1] *= np.float32(2.0**-100) if seed % 3 else rng.choice([1, -1], (2, 3))
        size = np.array([2, 1, 3, 7], dtype=np.int64)
        (got,) = _exact("AffineGrid", [theta, size], {}, backend, opset=20)
        rows, cols = np.meshgrid(
            base_coordinates(3, False), base_coordinates(7, False), indexing="ij"
        )
        points = np.stack([cols, rows, np.ones_like(rows)], axis=-1).reshape(-1, 3)
        for n in range(2):
            want = oracle(theta[n], points.T, np.float32).T.reshape(3, 7, 2)
            assert_bits(got[n], want)


def test_linear_regressor_scores_are_exact_dot_products(backend: str) -> None:
    for seed in SEEDS:
        a, b = _operands(seed)
        if not np.isfinite(b).all():
            continue  # the coefficients are an attribute
        attributes = {"coefficients": b.T.reshape(-1).tolist(), "targets": b.shape[1]}
        (got,) = _exact("LinearRegressor", [a], attributes, backend, opset=1, domain="ai.onnx.ml")
        with np.errstate(all="ignore"):
            want = (oracle(a, b, np.float32).astype(np.float64) + 0.0).astype(np.float32)
        assert_bits(got, want)


def test_float32_parts_split_float64_constants_exactly() -> None:
    rng = np.random.default_rng(11)
    signs = rng.choice([-1.0, 1.0], (64, 8))
    c = signs * rng.uniform(1, 2, (64, 8)) * 2.0 ** rng.integers(-97, 126, (64, 8))
    c[0, :4] = [0.0, -0.0, 2.0**-97, -(2.0**127)]
    c[1, :3] = [1.0, np.nextafter(1.0, 2.0), 1 / 3]
    parts = float32_parts(c).reshape(3, *c.shape)
    assert np.array_equal(parts.astype(np.float32).astype(np.float64), parts)
    for index in np.ndindex(*c.shape):
        assert sum(Fraction(p) for p in parts[(slice(None), *index)]) == Fraction(c[index])
    with pytest.raises(ValueError, match="split"):
        float32_parts(np.array([[2.0**-98]]))


def test_constant_products_are_exact_also_for_long_sums_and_non_finite_operands() -> None:
    """K = 2^14 against a float64 constant; inf meets only the constant's leading part, so
    inf times an entry that is exactly a float32 (its later parts 0) stays inf."""
    kernels = ReferenceKernels()
    rng = np.random.default_rng(12)
    depth = 1 << 14
    a = rng.standard_normal((2, depth)) * 2.0 ** rng.integers(-40, 40, (2, depth))
    a = a.astype(np.float32)
    c = rng.standard_normal((depth, 3)) * 2.0 ** rng.integers(-60, 60, (depth, 3))
    a[:, : depth // 2] = a[:, depth // 2 :]
    c[: depth // 2] = c[depth // 2 :] * -(1 + 2.0**-40)  # cancellation to tiny remainders
    got = constant_product(kernels, a.astype(np.float64), c, np.float32).astype(np.float32)
    assert_bits(got, oracle(a, c, np.float32))
    special = np.array([[np.inf, 1.0], [-np.inf, 0.0], [np.nan, 1.0]], dtype=np.float32)
    ones = np.array([[1.0, 1 / 3], [2.0, 0.0]])
    got = constant_product(kernels, special.astype(np.float64), ones, np.float32)
    with np.errstate(invalid="ignore"):
        want = oracle(special, ones, np.float32)
    assert_bits(got.astype(np.float32), want)
    assert got[0, 0] == math.inf  # not inf·0 from 1.0's zero later parts
