"""Broadcasting ufunc calls with one row's ufunc buffer (onemodel/backends/broadcasting.py):
the same bits as the plain call, the caller's buffer size back afterwards, and the rule."""

import numpy as np
import pytest

from onemodel.backends import broadcasting
from onemodel.backends.broadcasting import row_buffer, ufunc_into


@pytest.mark.parametrize(
    ("shape", "other"),
    [((256, 1024), (1024,)), ((256, 1024), (256, 1)), ((1, 64, 64, 64), (1, 64, 1, 1)),
     ((8, 128, 768), (768,)), ((64, 4096), ())],
)  # fmt: skip
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "maximum", "less"])
def test_bits_match_the_plain_call(shape, other, name) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(other).astype(np.float32)
    ufunc = getattr(np, name)
    expected = ufunc(x, b)
    out = np.empty_like(expected)
    ufunc_into(np, ufunc, x, b, out=out)
    np.testing.assert_array_equal(out, expected)
    reversed_out = np.empty_like(expected)
    ufunc_into(np, ufunc, b, x, out=reversed_out)
    np.testing.assert_array_equal(reversed_out, ufunc(b, x))


def test_the_buffer_size_comes_back_even_after_an_error() -> None:
    before = np.getbufsize()
    x = np.ones((256, 1024), np.float32)
    ufunc_into(np, np.add, x, np.ones(1024, np.float32), out=x)
    assert np.getbufsize() == before
    with pytest.raises(TypeError):
        ufunc_into(np, np.add, x, np.ones(1024, np.float32), out=x, no_such_keyword=1)
    assert np.getbufsize() == before


def test_which_calls_get_a_row_buffer() -> None:
    out = np.empty((256, 1024), np.float32)
    assert row_buffer(np, out, out, np.ones(1024, np.float32)) == 1024
    assert row_buffer(np, out, out, np.ones((256, 1), np.float32)) == 1024
    assert row_buffer(np, out, out, out) is None  # nothing broadcast
    assert row_buffer(np, out, out, np.float32(2)) is None  # a single value
    assert row_buffer(np, out.T, out.T, np.ones(256, np.float32)) is None  # not C-contiguous
    odd = np.empty((512, 1000), np.float32)
    assert row_buffer(np, odd, odd, np.ones(1000, np.float32)) == 992  # a multiple of 16
    narrow = np.empty((4096, 96), np.float32)
    assert row_buffer(np, narrow, narrow, np.ones(96, np.float32)) is None  # short rows
    assert row_buffer(np, narrow, narrow, np.ones((4096, 1), np.float32)) is None
    planes = np.empty((1, 64, 64, 64), np.float32)  # a per-channel factor: runs of 4096
    assert row_buffer(np, planes, planes, np.ones((64, 1, 1), np.float32)) == 64
    assert row_buffer(np, planes, planes, np.ones(64, np.float32)) is None  # runs of 64
    wide = np.empty((4, 1 << 14), np.float32)
    assert row_buffer(np, wide, wide, np.ones(1 << 14, np.float32)) is None  # rows ≥ buffer
    small = np.empty((4, 1024), np.float32)
    assert small.size <= broadcasting.ROW_BUFFER_ABOVE
    assert row_buffer(np, small, small, np.ones(1024, np.float32)) is None
    assert row_buffer(object(), out, out, np.ones(1024, np.float32)) is None  # not NumPy


def test_inside_a_run_the_buffer_is_set_directly_errors_still_ignored() -> None:
    from onemodel.backends.fp_errors import run_scope

    seen = []

    def recording_add(*operands, out):
        seen.append((np.getbufsize(), np.geterr()["divide"]))
        return np.add(*operands, out=out)

    x = np.ones((256, 1024), np.float32)
    with run_scope():
        before = (np.getbufsize(), np.geterr())
        ufunc_into(np, recording_add, x, np.ones(1024, np.float32), out=x)
        ufunc_into(np, recording_add, x, np.ones(1024, np.float32), out=x)  # the cached state
        assert (np.getbufsize(), np.geterr()) == before
    assert seen == [(1024, "ignore"), (1024, "ignore")]
    np.testing.assert_array_equal(x, 3)
