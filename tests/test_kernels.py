"""Element-wise and matmul kernels on every available backend, against NumPy as the oracle.

The same bodies run on numpy-reference, numpy and (with CUDA) cupy, so a GPU run of this file
is the parity check of the GPU backend.
"""

from __future__ import annotations

import numpy as np
import pytest

from onemodel.backends import BinaryOp, KernelPaths, Kernels, UnaryOp
from onemodel.tensors import DType, Memory, Tensor, TensorError, TensorShapeError
from onemodel.tensors.buffers import aligned_numpy_bytes

INPUT_LAYOUTS = [
    "contiguous",
    "transposed",
    "first axis reversed",
    "last axis reversed",
    "first axis broadcast",
    "last axis broadcast",
]
OUTPUT_LAYOUTS = ["contiguous", "transposed", "first axis reversed"]
CORRECTLY_ROUNDED = {UnaryOp.NEG, UnaryOp.ABS, UnaryOp.RELU, UnaryOp.SQRT}
SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38, -3e38, 1.0, -1.0], np.float32
)


@pytest.fixture
def reference() -> Kernels:
    return KernelPaths.get("numpy-reference")


# -- operands in many layouts ----------------------------------------------------------------


def _stored(values: np.ndarray, layout: str) -> np.ndarray:
    """What the buffer holds for a logical array seen through `layout`."""
    return {
        "contiguous": values,
        "transposed": values.transpose(),
        "first axis reversed": values[::-1],
        "last axis reversed": values[..., ::-1],
        "first axis broadcast": values[:1],
        "last axis broadcast": values[..., :1],
    }[layout]


def _view(base: Tensor, shape: tuple[int, ...], layout: str) -> Tensor:
    """The logical view of `shape` over a buffer laid out by `_stored`."""
    s = base.strides
    if layout == "transposed":
        return base.view(shape, s[::-1])
    if layout == "first axis reversed":
        return base.view(shape, (-s[0], *s[1:]), (shape[0] - 1) * s[0])
    if layout == "last axis reversed":
        return base.view(shape, (*s[:-1], -s[-1]), (shape[-1] - 1) * s[-1])
    if layout == "first axis broadcast":
        return base.view(shape, (0, *s[1:]))
    if layout == "last axis broadcast":
        return base.view(shape, (*s[:-1], 0))
    return base


def operand(kernels: Kernels, values: np.ndarray, layout: str) -> tuple[Tensor, np.ndarray]:
    """A tensor of the backend in `layout` and the logical values it shows (a broadcast layout
    repeats the first slice of `values`)."""
    stored = _stored(values, layout)
    tensor = _view(kernels.from_host(np.ascontiguousarray(stored)), values.shape, layout)
    logical = np.broadcast_to(stored, values.shape) if "broadcast" in layout else values
    assert_same_floats(kernels.to_host(tensor), logical)
    return tensor, logical


def empty_out(kernels: Kernels, shape: tuple[int, ...], layout: str) -> Tensor:
    stored_shape = _stored(np.empty(shape, np.float32), layout).shape
    return _view(Tensor.empty(stored_shape, DType.FLOAT, memory=kernels.memory), shape, layout)


def random_floats(rng: np.random.Generator, shape: tuple[int, ...], specials: bool) -> np.ndarray:
    values = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 50.0], shape)).astype(np.float32)
    if specials:
        mask = rng.random(shape) < 0.2
        values[mask] = rng.choice(SPECIALS, int(mask.sum()))
    return values


# -- comparisons -----------------------------------------------------------------------------


def assert_same_floats(actual: np.ndarray, expected: np.ndarray) -> None:
    """Bit for bit, except that any NaN matches any NaN: IEEE leaves NaN payloads open and CUDA
    produces its own canonical NaN."""
    actual, expected = np.asarray(actual, np.float32), np.asarray(expected, np.float32)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    numbers = ~np.isnan(expected)
    np.testing.assert_array_equal(
        actual[numbers].view(np.uint32), expected[numbers].view(np.uint32)
    )


def flush_subnormals(values: np.ndarray) -> np.ndarray:
    """Subnormals replaced by zeros of their sign, as a flush-to-zero GPU kernel sees them."""
    values = np.asarray(values, np.float32)
    tiny = np.finfo(np.float32).tiny
    return np.where(np.abs(values) < tiny, np.copysign(np.float32(0), values), values)


def expected_of(kernels: Kernels, function, *inputs: np.ndarray) -> np.ndarray:
    """NumPy's result, flushed on the way in and out where the backend declares it flushes."""
    if not kernels.flushes_subnormals:
        return function(*inputs)
    return flush_subnormals(function(*(flush_subnormals(x) for x in inputs)))


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Number of float32 values between a and b (on a monotone integer line through ±0)."""

    def ordered(x: np.ndarray) -> np.ndarray:
        bits = np.ascontiguousarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)

    return np.abs(ordered(a) - ordered(b))


def numpy_binary(op: BinaryOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    functions = {
        BinaryOp.ADD: np.add,
        BinaryOp.SUB: np.subtract,
        BinaryOp.MUL: np.multiply,
        BinaryOp.DIV: np.divide,
        BinaryOp.MAX: np.maximum,
        BinaryOp.MIN: np.minimum,
    }
    with np.errstate(all="ignore"):
        return functions[op](a, b)


def numpy_unary(op: UnaryOp, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op is UnaryOp.RELU:
            return np.where((x > 0) | np.isnan(x), x, np.float32(0))
        if op is UnaryOp.SIGMOID:
            return np.float32(1) / (np.float32(1) + np.exp(-x))
        functions = {
            UnaryOp.NEG: np.negative,
            UnaryOp.ABS: np.abs,
            UnaryOp.SQRT: np.sqrt,
            UnaryOp.EXP: np.exp,
            UnaryOp.LOG: np.log,
            UnaryOp.TANH: np.tanh,
        }
        return functions[op](x)


# -- binary ----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(BinaryOp))
@pytest.mark.parametrize("out_layout", OUTPUT_LAYOUTS)
def test_binary_matches_numpy_bit_for_bit(kernels: Kernels, op: BinaryOp, out_layout: str) -> None:
    rng = np.random.default_rng([7, list(BinaryOp).index(op)])
    shape = (13, 17)
    for a_layout, b_layout in zip(INPUT_LAYOUTS, INPUT_LAYOUTS[::-1], strict=True):
        # Specials on disjoint positions: ±0 against ∓0 is the one pair where MAX/MIN may
        # legitimately pick either zero, and it is not what this test is about.
        special_a = rng.random(shape) < 0.5
        a_values = np.where(
            special_a, random_floats(rng, shape, True), random_floats(rng, shape, False)
        )
        b_values = np.where(
            special_a, random_floats(rng, shape, False), random_floats(rng, shape, True)
        )
        a, a_logical = operand(kernels, a_values, a_layout)
        b, b_logical = operand(kernels, b_values, b_layout)
        out = empty_out(kernels, shape, out_layout)
        kernels.binary(op, a, b, out)
        expected = expected_of(kernels, lambda a, b: numpy_binary(op, a, b), a_logical, b_logical)
        assert_same_floats(kernels.to_host(out), expected)


@pytest.mark.parametrize("op", [BinaryOp.MAX, BinaryOp.MIN])
def test_max_and_min_propagate_nan(kernels: Kernels, op: BinaryOp) -> None:
    nan, inf = np.nan, np.inf
    a = kernels.from_host(np.array([nan, 1.0, nan, -inf, inf, nan], np.float32))
    b = kernels.from_host(np.array([1.0, nan, nan, nan, nan, -inf], np.float32))
    out = Tensor.empty((6,), DType.FLOAT, memory=kernels.memory)
    kernels.binary(op, a, b, out)
    assert np.isnan(kernels.to_host(out)).all()


def test_binary_refuses_bad_operands_before_writing(kernels: Kernels) -> None:
    a = kernels.from_host(np.ones((2, 3), np.float32))
    out = Tensor.empty((2, 3), DType.FLOAT, memory=kernels.memory)
    version = out.version
    with pytest.raises(TensorError, match="DOUBLE"):
        kernels.binary(BinaryOp.ADD, a, kernels.from_host(np.ones((2, 3))), out)
    with pytest.raises(TensorShapeError, match="broadcast"):
        kernels.binary(BinaryOp.ADD, a, kernels.from_host(np.ones((1, 3), np.float32)), out)
    with pytest.raises(TensorShapeError, match="broadcast view"):
        kernels.binary(BinaryOp.ADD, a, a, out.view((2, 3), (0, 1)))
    assert out.version == version


def test_kernels_refuse_tensors_of_another_memory(kernels: Kernels) -> None:
    elsewhere = Memory("elsewhere", object(), aligned_numpy_bytes)
    foreign = Tensor.empty((2, 3), DType.FLOAT, memory=elsewhere)
    mine = Tensor.empty((2, 3), DType.FLOAT, memory=kernels.memory)
    with pytest.raises(TensorError, match="elsewhere memory"):
        kernels.binary(BinaryOp.ADD, mine, foreign, mine)


# -- unary -----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(UnaryOp))
def test_unary_matches_numpy(kernels: Kernels, op: UnaryOp) -> None:
    """Bit for bit where NumPy computes both sides or the operation is correctly rounded; a
    GPU's exp/log/tanh are other (documented ≤ 2 ulp) approximations than NumPy's."""
    rng = np.random.default_rng([11, list(UnaryOp).index(op)])
    shape = (9, 23)
    bit_exact = op in CORRECTLY_ROUNDED or kernels.xp is np
    for x_layout, out_layout in zip(INPUT_LAYOUTS, OUTPUT_LAYOUTS * 2, strict=True):
        x, logical = operand(kernels, random_floats(rng, shape, specials=True), x_layout)
        out = empty_out(kernels, shape, out_layout)
        kernels.unary(op, x, out)
        actual = kernels.to_host(out)
        expected = expected_of(kernels, lambda x: numpy_unary(op, x), logical)
        if bit_exact:
            assert_same_floats(actual, expected)
        else:
            np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
            numbers = ~np.isnan(expected)
            assert ulp_distance(actual[numbers], expected[numbers]).max() <= 4


def test_relu_is_a_compare_and_select(kernels: Kernels) -> None:
    x = np.array([-0.0, 0.0, -1.0, 2.5, np.nan, -np.inf, np.inf, -1e-45, 1e-45], np.float32)
    out = Tensor.empty(x.shape, DType.FLOAT, memory=kernels.memory)
    kernels.unary(UnaryOp.RELU, kernels.from_host(x), out)
    result = kernels.to_host(out)
    np.testing.assert_array_equal(result[[0, 1, 2, 5, 7]].view(np.uint32), 0)  # +0, never −0
    assert np.isnan(result[4])
    np.testing.assert_array_equal(result[[3, 6]], x[[3, 6]])
    assert result[8] == (0 if kernels.flushes_subnormals else x[8])


def test_sigmoid_saturates_without_warnings(kernels: Kernels) -> None:
    x = np.array([-1000.0, -100.0, -88.0, 0.0, 100.0, np.inf, -np.inf], np.float32)
    out = Tensor.empty(x.shape, DType.FLOAT, memory=kernels.memory)
    with np.errstate(all="raise"):
        kernels.unary(UnaryOp.SIGMOID, kernels.from_host(x), out)
    result = kernels.to_host(out)
    np.testing.assert_array_equal(result[[0, 1, 6]], 0.0)
    np.testing.assert_array_equal(result[[3, 4, 5]], [0.5, 1.0, 1.0])
    assert (result[2] == 0) if kernels.flushes_subnormals else (0 < result[2] < 1e-37)


# -- matmul ----------------------------------------------------------------------------------

MATMUL_SHAPES = [((33, 17), (17, 5)), ((4, 13, 21), (4, 21, 6)), ((2, 3, 5, 7), (2, 3, 7, 4))]


def _matmul(kernels: Kernels, a: Tensor, b: Tensor, out_layout: str = "contiguous") -> np.ndarray:
    out = empty_out(kernels, (*a.shape[:-1], b.shape[-1]), out_layout)
    kernels.matmul(a, b, out)
    return kernels.to_host(out)


@pytest.mark.parametrize(("a_shape", "b_shape"), MATMUL_SHAPES)
def test_reference_matmul_is_float64_rounded_once(
    reference: Kernels, a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(3)
    a_values, b_values = random_floats(rng, a_shape, False), random_floats(rng, b_shape, False)
    result = _matmul(reference, reference.from_host(a_values), reference.from_host(b_values))
    expected = np.matmul(a_values.astype(np.float64), b_values.astype(np.float64))
    assert ulp_distance(result, expected.astype(np.float32)).max() <= 1


def test_reference_matmul_is_exact_on_integers(reference: Kernels) -> None:
    rng = np.random.default_rng(4)
    a_values = rng.integers(-50, 50, (3, 8, 40)).astype(np.float32)
    b_values = rng.integers(-50, 50, (3, 40, 6)).astype(np.float32)
    result = _matmul(reference, reference.from_host(a_values), reference.from_host(b_values))
    np.testing.assert_array_equal(result, (a_values.astype(np.int64) @ b_values.astype(np.int64)))


@pytest.mark.parametrize(("a_shape", "b_shape"), MATMUL_SHAPES)
@pytest.mark.parametrize("layout", INPUT_LAYOUTS)
def test_matmul_agrees_with_reference(
    kernels: Kernels,
    reference: Kernels,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    layout: str,
) -> None:
    """Within 1e-5 of Σ|a||b| per element: a relative bound that survives cancellation."""
    rng = np.random.default_rng(5)
    a, a_logical = operand(kernels, random_floats(rng, a_shape, False), layout)
    b_layout = INPUT_LAYOUTS[::-1][INPUT_LAYOUTS.index(layout)]
    b, b_logical = operand(kernels, random_floats(rng, b_shape, False), b_layout)
    out_layout = OUTPUT_LAYOUTS[INPUT_LAYOUTS.index(layout) % len(OUTPUT_LAYOUTS)]
    result = _matmul(kernels, a, b, out_layout)
    expected = _matmul(reference, reference.from_host(a_logical), reference.from_host(b_logical))
    scale = np.matmul(np.abs(a_logical), np.abs(b_logical))
    assert (np.abs(result - expected) <= 1e-5 * scale).all()


def test_reference_matmul_bits_ignore_layout_and_repetition(reference: Kernels) -> None:
    rng = np.random.default_rng(6)
    a_values = random_floats(rng, (3, 11, 29), False)
    b_values = random_floats(rng, (3, 29, 7), False)
    first = _matmul(reference, reference.from_host(a_values), reference.from_host(b_values))
    for a_layout, b_layout in zip(INPUT_LAYOUTS[:4], INPUT_LAYOUTS[3::-1], strict=True):
        a, _ = operand(reference, a_values, a_layout)
        b, _ = operand(reference, b_values, b_layout)
        for out_layout in OUTPUT_LAYOUTS:
            np.testing.assert_array_equal(
                _matmul(reference, a, b, out_layout).view(np.uint32), first.view(np.uint32)
            )


def test_matmul_with_empty_inner_dimension_is_zero(kernels: Kernels) -> None:
    a = Tensor.empty((3, 0), DType.FLOAT, memory=kernels.memory)
    b = Tensor.empty((0, 4), DType.FLOAT, memory=kernels.memory)
    np.testing.assert_array_equal(_matmul(kernels, a, b), np.zeros((3, 4), np.float32))


def test_matmul_refuses_bad_operands_before_writing(kernels: Kernels) -> None:
    a = kernels.from_host(np.ones((2, 3, 4), np.float32))
    out = Tensor.empty((2, 3, 5), DType.FLOAT, memory=kernels.memory)
    version = out.version
    with pytest.raises(TensorShapeError, match="do not agree"):
        kernels.matmul(a, kernels.from_host(np.ones((2, 5, 5), np.float32)), out)
    with pytest.raises(TensorShapeError, match="do not agree"):
        kernels.matmul(a, kernels.from_host(np.ones((3, 4, 5), np.float32)), out)
    with pytest.raises(TensorShapeError, match="rank"):
        kernels.matmul(a, kernels.from_host(np.ones((4, 5), np.float32)), out)
    with pytest.raises(TensorError, match="INT32"):
        kernels.matmul(a, kernels.from_host(np.ones((2, 4, 5), np.int32)), out)
    assert out.version == version
