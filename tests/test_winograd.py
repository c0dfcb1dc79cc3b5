"""Winograd F(2×2, 3×3) and F(4×4, 3×3) (numpy_cpu/winograd.py) against the direct float64
sum over taps: within 1e-4 of the largest output, relative, on unit-scale data (measured:
F(2×2) about 1e-6, F(4×4) about 1e-5), for padding, dilation, batches, odd extents and
several bands of tiles; the fast backend takes it only where the tiles fill its GEMMs."""

from __future__ import annotations

import numpy as np
import pytest

from onemodel.backends.numpy_cpu import NumpyKernels, winograd
from tests.test_fast_conv import direct_conv

BOUND = 1e-4


def _allocate(shape, dtype):
    return np.full(tuple(shape), np.nan, dtype=dtype)  # scratch contents are unspecified


def _case(rng, batch, channels, filters, height, width):
    x = rng.standard_normal((batch, channels, height, width)).astype(np.float32)
    w = (rng.standard_normal((filters, channels, 3, 3)) / np.sqrt(9 * channels)).astype(np.float32)
    return x, w


@pytest.mark.parametrize("block", [2, 4])
@pytest.mark.parametrize(
    "batch, channels, filters, height, width, pads, dilations",
    [
        (1, 32, 40, 16, 16, (1, 1, 1, 1), (1, 1)),  # whole blocks
        (2, 33, 35, 13, 11, (1, 1, 1, 1), (1, 1)),  # odd extents: cropped last blocks
        (1, 32, 32, 16, 18, (0, 2, 1, 0), (1, 1)),  # uneven pads
        (1, 32, 32, 17, 19, (2, 2, 2, 2), (2, 2)),  # dilated (DeepLabV3)
        (1, 32, 32, 15, 16, (3, 2, 3, 2), (3, 2)),  # different dilations per axis
        (1, 32, 16, 90, 90, (1, 1, 1, 1), (1, 1)),  # several bands of tile rows
    ],
)
def test_winograd_matches_the_direct_sum(
    block, batch, channels, filters, height, width, pads, dilations
):
    rng = np.random.default_rng(block * 1000 + height)
    x, w = _case(rng, batch, channels, filters, height, width)
    expected = direct_conv(x, w, (1, 1), pads, dilations, 1)
    prepared = winograd.transformed_filter(w, block)
    out = np.full(expected.shape, np.nan, dtype=np.float32)
    kernels = NumpyKernels()
    assert winograd.winograd_conv(
        x, prepared, out, pads[:2], dilations, _allocate, kernels.matmul_arrays
    )
    error = np.abs(out - expected).max() / np.abs(expected).max()
    assert error < BOUND


@pytest.mark.parametrize("block", [2, 4])
@pytest.mark.parametrize(
    "batch, height, width, pad",
    [
        (4, 7, 7, 1),  # 7×7 (ResNet's last stage): the last block row and column cropped
        (2, 13, 17, 0),  # no padding: 11×15 outputs
        (1, 16, 20, 2),  # pads 2: 18×22 outputs
    ],
)
@pytest.mark.parametrize("with_bias", [False, True])
def test_winograd_writes_a_slice_of_a_wider_output_with_its_bias(
    block, batch, height, width, pad, with_bias
):
    """out a Concat's slice (channels 3.. of a wider array, not C-contiguous): the blocks go
    to their places, the bias once each, and nothing around the slice is touched."""
    rng = np.random.default_rng(block * 100 + height)
    x, w = _case(rng, batch, 32, 36, height, width)
    b = rng.standard_normal(36).astype(np.float32) if with_bias else None
    expected = direct_conv(x, w, (1, 1), (pad,) * 4, (1, 1), 1)
    if with_bias:
        expected = expected + b.reshape(-1, 1, 1)
    wide = np.full((batch, 3 + 36 + 5, *expected.shape[2:]), np.nan, np.float32)
    kernels = NumpyKernels()
    prepared = winograd.transformed_filter(w, block)
    assert winograd.winograd_conv(
        x, prepared, wide[:, 3:39], (pad, pad), (1, 1), _allocate, kernels.matmul_arrays, b
    )
    error = np.abs(wide[:, 3:39] - expected).max() / np.abs(expected).max()
    assert error < BOUND
    assert np.isnan(wide[:, :3]).all() and np.isnan(wide[:, 39:]).all()


def test_the_fast_backend_prepares_transforms_only_for_wide_3x3_float32_filters():
    rng = np.random.default_rng(0)
    kernels = NumpyKernels()
    wide = rng.standard_normal((64, 96, 3, 3)).astype(np.float32)
    transforms = kernels.conv_weights(wide, 1).winograd
    assert transforms.for_output(1, (56, 56), (1, 1)).block == 4
    assert transforms.for_output(1, (14, 14), (1, 1)).block == 2
    assert transforms.for_output(1, (56, 56), (1, 1)) is transforms.for_output(2, (28, 28), (1, 1))
    narrow = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)  # ResNet's first stage
    assert kernels.conv_weights(narrow, 1).winograd.for_output(1, (56, 56), (1, 1)).block == 4
    small = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    assert kernels.conv_weights(small, 1).winograd.for_output(2, (8, 8), (1, 1)) is None  # 1.2M
    for w, group in [
        (rng.standard_normal((16, 16, 3, 3)).astype(np.float32), 1),  # too few channels
        (rng.standard_normal((128, 31, 3, 3)).astype(np.float32), 1),  # 31 inputs: direct
        (rng.standard_normal((16, 64, 3, 3)).astype(np.float32), 1),  # too few filters
        (rng.standard_normal((96, 48, 3, 3)).astype(np.float32), 2),  # grouped
        (rng.standard_normal((96, 96, 5, 5)).astype(np.float32), 1),  # not 3×3
        (rng.standard_normal((96, 96, 3, 3)), 1),  # float64
    ]:
        assert isinstance(kernels.conv_weights(w, group), np.ndarray)


@pytest.mark.parametrize(
    "shape, strides, expect_winograd",
    [
        ((1, 96, 20, 20), (1, 1), True),
        ((1, 96, 20, 20), (2, 2), False),  # strided: the direct path
        ((1, 96, 6, 6), (1, 1), False),  # 9 tiles: too few columns for the GEMMs
        ((2, 48, 8, 8), (1, 1), False),  # 32 F(2×2) tiles, but 48·48·9·128 = 2.7M products
        ((1, 96, 12, 12), (1, 1), True),  # F(2×2)'s 36 tiles (F(4×4) has 9)
    ],
)
def test_conv_arrays_takes_winograd_where_it_pays_and_agrees_either_way(
    monkeypatch, shape, strides, expect_winograd
):
    rng = np.random.default_rng(1)
    x, w = _case(rng, *shape[:2], 48, *shape[2:])
    kernels = NumpyKernels()
    prepared = kernels.conv_weights(w, 1)
    calls = []
    real = winograd.winograd_conv

    def spy(*args):
        done = real(*args)
        calls.append(done)
        return done

    monkeypatch.setattr("onemodel.backends.numpy_cpu.winograd.winograd_conv", spy)
    pads = (1, 1, 1, 1)
    expected = direct_conv(x, w, strides, pads, (1, 1), 1)
    out = np.full(expected.shape, np.nan, dtype=np.float32)
    kernels.conv_arrays(x, w, out, strides, pads[:2], (1, 1), 1, weights=prepared)
    assert any(calls) == expect_winograd
    assert np.abs(out - expected).max() / np.abs(expected).max() < BOUND


@pytest.mark.parametrize(
    "batch, out_spatial, dilations, block",
    [
        (1, (7, 7), (1, 1), 2),  # ResNet's last stage, one image: F(4×4) has 4 tiles
        (8, (7, 7), (1, 1), 4),  # eight images: 32 F(4×4) tiles
        (1, (14, 14), (1, 1), 2),  # 16 F(4×4) tiles covering 256 outputs of 196
        (1, (8, 32), (1, 1), 4),  # 16 F(4×4) tiles covering the output exactly
        (1, (28, 28), (1, 1), 4),
        (1, (2, 32), (1, 1), 2),  # F(4×4) would compute twice the rows
        (1, (6, 6), (1, 1), None),  # 9 F(2×2) tiles: the direct path
        (1, (16, 16), (2, 2), 4),  # four residue images of 8×8: 16 tiles, exact cover
        (1, (10, 10), (2, 2), 2),
        # DeepLabV3's atrous rates over 14×14: the residues hold 2×2 or 1×1 outputs, so
        # F(4×4) would compute 2304 outputs for 196 and F(2×2) 576 (rate 6: 576 and 324)
        (1, (14, 14), (12, 12), None),
        (1, (14, 14), (6, 6), None),
        (1, (33, 33), (12, 12), 4),  # 2.1 outputs per output: F(4×4) still saves half
    ],
)
def test_the_block_size_follows_the_tiles_of_the_output(batch, out_spatial, dilations, block):
    assert winograd.winograd_block(batch, out_spatial, dilations, 128 * 128) == block


@pytest.mark.parametrize(
    "batch, out_spatial, block",
    [
        (1, (7, 7), None),  # ResNet-50's last stage, one image: F(2×2)'s 16.8 MB for 16 tiles
        (8, (7, 7), 4),  # eight images: 32 F(4×4) tiles use each element of U enough
        (1, (14, 14), 2),  # 49 F(2×2) tiles
    ],
)
def test_a_filter_streamed_from_memory_needs_more_tiles(batch, out_spatial, block):
    assert winograd.winograd_block(batch, out_spatial, (1, 1), 512 * 512) == block
