"""The NumPy fast path's data movement (numpy_cpu/movement.py): blocked permuted copies and
gathers, against NumPy's own transpose and take, directly and through the operators."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from operator_harness import run_node

from onemodel.backends.numpy_cpu.movement import merged_permutation, transpose_copy

SHAPES = [(256, 1024), (1, 64, 64, 64), (3, 1, 40, 17, 9), (2, 64, 3, 64), (4096, 64), (9, 33)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_transpose_copy_is_numpys_transpose_for_every_permutation(shape: tuple) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for perm in itertools.permutations(range(len(shape))):
        out = np.full(tuple(shape[p] for p in perm), np.nan, np.float32)
        transpose_copy(x, perm, out)
        np.testing.assert_array_equal(out, x.transpose(perm), err_msg=str(perm))


def test_transpose_copy_reads_strided_inputs() -> None:
    x = np.arange(64 * 2048, dtype=np.float32).reshape(64, 2048)[:, ::2]
    out = np.empty((1024, 64), np.float32)
    transpose_copy(x, (1, 0), out)
    np.testing.assert_array_equal(out, x.T)


def test_merged_permutation_merges_neighbours_and_drops_unit_axes() -> None:
    assert merged_permutation((1, 64, 64, 64), (0, 2, 3, 1)) == ((64, 4096), (1, 0))
    assert merged_permutation((2, 3, 4, 5), (0, 2, 3, 1)) == ((2, 3, 20), (0, 2, 1))
    assert merged_permutation((2, 3, 4), (0, 1, 2)) == ((24,), (0,))


@pytest.mark.parametrize("perm", [(1, 0, 2, 3), (0, 2, 3, 1), (3, 2, 1, 0), (0, 3, 1, 2)])
def test_transpose_operator_blocks_large_inputs(perm: tuple) -> None:
    x = np.random.default_rng(1).standard_normal((2, 48, 32, 40)).astype(np.float32)
    (y,) = run_node("Transpose", [x], {"perm": list(perm)})
    np.testing.assert_array_equal(y, x.transpose(perm))


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back_on_a_large_input(mode: str) -> None:
    x = np.random.default_rng(2).standard_normal((2, 64, 24, 40)).astype(np.float32)
    (up,) = run_node("DepthToSpace", [x], {"blocksize": 2, "mode": mode})
    if mode == "DCR":
        expected = x.reshape(2, 2, 2, 16, 24, 40).transpose(0, 3, 4, 1, 5, 2)
    else:
        expected = x.reshape(2, 16, 2, 2, 24, 40).transpose(0, 1, 4, 2, 5, 3)
    np.testing.assert_array_equal(up, expected.reshape(2, 16, 48, 80))
    (down,) = run_node("SpaceToDepth", [up], {"blocksize": 2})
    if mode == "DCR":
        np.testing.assert_array_equal(down, x)


def test_gather_takes_checked_positions_with_negative_indices() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 512)).astype(np.float32)
    indices = rng.integers(-300, 300, size=(7, 40)).astype(np.int64)
    for axis in (0, 1):
        picked = indices % x.shape[axis] - (x.shape[axis] if axis else 0)
        (y,) = run_node("Gather", [x, picked], {"axis": axis})
        np.testing.assert_array_equal(y, np.take(x, picked, axis=axis))


def test_pad_of_a_large_output_fills_only_the_padding_and_keeps_the_rest() -> None:
    x = np.random.default_rng(4).standard_normal((1, 17, 250, 256)).astype(np.float32)
    pads = np.array([0, 1, 2, 0, 0, 2, 1, 3], np.int64)  # more than 2^20 outputs
    value = np.array(-7.5, np.float32)
    (y,) = run_node("Pad", [x, pads, value], opset=18)
    expected = np.pad(x, [(0, 0), (1, 2), (2, 1), (0, 3)], constant_values=-7.5)
    np.testing.assert_array_equal(y, expected)
