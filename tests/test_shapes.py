"""Shapes, strides, views, contiguity, broadcasting and reshape (seed 002 §3, §4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onemodel.tensors import TensorShapeError
from onemodel.tensors.shapes import (
    broadcast_shapes,
    broadcast_strides,
    check_shape,
    check_strides,
    check_view,
    contiguous_strides,
    is_contiguous,
    resolve_reshape,
    try_reshape,
)

I32_MAX = 2**31 - 1
I32_MIN = -(2**31)
PROPERTY = settings(max_examples=300, deadline=None)


# -- §3 limits -------------------------------------------------------------------------------


@pytest.mark.parametrize("rank", range(9))
def test_ranks_0_to_8_pass(rank):
    assert check_shape((2,) * rank) == (2,) * rank


@pytest.mark.parametrize("shape", [(1,) * 9, (0,) * 9, (2,) * 12])
def test_rank_above_8_rejected(shape):
    with pytest.raises(TensorShapeError):
        check_shape(shape)


@pytest.mark.parametrize(
    "shape", [(-1,), (3, -1), (2**31,), (0, 2**31), (2**31, 0), (2**40,), (1, -5, 0)]
)
def test_extent_outside_int32_rejected(shape):
    with pytest.raises(TensorShapeError):
        check_shape(shape)


@pytest.mark.parametrize("extent", [2.0, "3", None, True])
def test_non_integer_extent_rejected(extent):
    with pytest.raises(TensorShapeError):
        check_shape((2, extent))


@pytest.mark.parametrize(
    "shape",
    [
        (100000, 100000, 0),
        (2**31 - 1, 2, 0),
        (65536, 32768, 0),
        (46341, 46341),
        (2**16, 2**16),
        (2**31 - 1, 2),
    ],
)
def test_prefix_product_above_limit_rejected(shape):
    with pytest.raises(TensorShapeError):
        check_shape(shape)


@pytest.mark.parametrize(
    "shape",
    [
        (2**31 - 1,),
        (2**31 - 1, 1),
        (1, 2**31 - 1),
        (2**31 - 1, 0),
        (0, 2**31 - 1),
        (0, 100000, 100000),  # prefix products 0: fine
        (46341, 46340),
        (65536, 32767),
        (),
        (0,),
    ],
)
def test_boundary_shapes_pass(shape):
    assert check_shape(shape) == shape


def test_byte_size_limit_for_float64():
    limit_elements = I32_MAX // 8  # 268435455 float64 = 2147483640 bytes
    assert check_shape((limit_elements,), 8) == (limit_elements,)
    assert check_shape((3, 5, 17895697), 8) == (3, 5, 17895697)  # 2147483640 bytes
    with pytest.raises(TensorShapeError):
        check_shape((limit_elements + 1,), 8)
    with pytest.raises(TensorShapeError):
        check_shape((2**14, 2**14), 8)  # 2**31 bytes
    with pytest.raises(TensorShapeError):
        check_shape((2**28,), 8)
    # The same element counts are fine at one byte each.
    assert check_shape((2**14, 2**14), 1) == (2**14, 2**14)
    # Byte size of an empty shape is zero however large the extents.
    assert check_shape((2**20, 0, 2**10), 8) == (2**20, 0, 2**10)


def test_byte_size_limit_for_float32_and_int16():
    assert check_shape((2**29 - 1,), 4) == (2**29 - 1,)
    with pytest.raises(TensorShapeError):
        check_shape((2**29,), 4)
    assert check_shape((2**30 - 1,), 2) == (2**30 - 1,)
    with pytest.raises(TensorShapeError):
        check_shape((2**30,), 2)


def test_strides_are_signed_int32():
    assert check_strides((I32_MAX, I32_MIN, 0), 3) == (I32_MAX, I32_MIN, 0)
    with pytest.raises(TensorShapeError):
        check_strides((I32_MAX + 1,), 1)
    with pytest.raises(TensorShapeError):
        check_strides((I32_MIN - 1,), 1)
    with pytest.raises(TensorShapeError):
        check_strides((1, 1), 3)


# -- view validity ---------------------------------------------------------------------------


def _reach(shape, strides, offset):
    """Lowest and highest offsets reached, by enumerating every index."""
    offsets = [
        offset + sum(i * s for i, s in zip(index, strides, strict=True))
        for index in np.ndindex(*shape)
    ]
    return min(offsets), max(offsets)


@pytest.mark.parametrize(
    ("shape", "strides", "offset", "capacity"),
    [
        ((4,), (1,), 0, 4),
        ((4,), (-1,), 3, 4),
        ((1,), (1,), 9, 10),  # last element
        ((3, 4), (4, 1), 0, 12),
        ((3, 4), (-4, 1), 8, 12),
        ((3, 4), (-4, -1), 11, 12),
        ((3, 4), (1, 3), 0, 12),
        ((3, 4), (0, 1), 8, 12),  # broadcast rows, last row of the buffer
        ((5, 5), (0, 0), 0, 1),
        ((2, 3), (-3, 2), 3, 8),
        ((), (), 6, 7),
    ],
)
def test_valid_views(shape, strides, offset, capacity):
    low, high = _reach(shape, strides, offset)
    assert low >= 0
    assert high < capacity
    check_view(shape, strides, offset, capacity)


@pytest.mark.parametrize(
    ("shape", "strides", "offset", "capacity"),
    [
        ((4,), (1,), 1, 4),  # one past the end
        ((4,), (-1,), 2, 4),  # one before the start
        ((1,), (1,), 10, 10),
        ((), (), 7, 7),
        ((3, 4), (-4, 1), 7, 12),
        ((3, 4), (4, 1), 0, 11),
        ((3, 4), (-4, -1), 10, 12),
        ((2, 3), (-3, 2), 2, 8),
        ((4,), (1,), -1, 100),
        ((2, 2), (I32_MAX, 1), 0, 100),
    ],
)
def test_invalid_views(shape, strides, offset, capacity):
    with pytest.raises(TensorShapeError):
        check_view(shape, strides, offset, capacity)


@pytest.mark.parametrize(
    ("shape", "strides", "offset", "capacity"),
    [
        ((0,), (1,), 0, 0),
        ((0, 5), (5, 1), 100, 4),
        ((5, 0), (-1000, 1), 0, 0),
        ((3, 0, 2), (I32_MAX, 1, I32_MIN), 7, 1),
    ],
)
def test_empty_views_are_always_valid(shape, strides, offset, capacity):
    check_view(shape, strides, offset, capacity)


@given(
    shape=st.lists(st.integers(1, 4), max_size=4).map(tuple),
    data=st.data(),
)
@PROPERTY
def test_check_view_matches_enumeration(shape, data):
    strides = tuple(data.draw(st.integers(-7, 7)) for _ in shape)
    offset = data.draw(st.integers(0, 40))
    capacity = data.draw(st.integers(0, 40))
    low, high = _reach(shape, strides, offset)
    if low >= 0 and high < capacity:
        check_view(shape, strides, offset, capacity)
    else:
        with pytest.raises(TensorShapeError):
            check_view(shape, strides, offset, capacity)


# -- contiguity ------------------------------------------------------------------------------


def test_contiguous_strides_are_row_major():
    assert contiguous_strides((2, 3, 4)) == (12, 4, 1)
    assert contiguous_strides(()) == ()
    assert contiguous_strides((7,)) == (1,)


@pytest.mark.parametrize(
    ("shape", "strides", "expected"),
    [
        ((2, 3, 4), (12, 4, 1), True),
        ((2, 3, 4), (12, 4, 2), False),
        ((2, 3, 4), (1, 2, 6), False),
        ((2, 1, 4), (4, 999, 1), True),  # extent-1 stride ignored
        ((2, 1, 4), (4, -7, 1), True),
        ((1, 1, 1), (0, 5, -3), True),
        ((1, 5), (0, 1), True),
        ((5, 1), (1, 0), True),
        ((5, 1), (2, 1), False),
        ((3,), (0,), False),  # broadcast is not contiguous
        ((3,), (-1,), False),
        ((0, 3), (17, 5), True),  # empty tensors are contiguous
        ((3, 0), (-1, 0), True),
        ((), (), True),
        ((2, 3), (3, 1), True),
        ((2, 3), (2, 1), False),
    ],
)
def test_is_contiguous(shape, strides, expected):
    assert is_contiguous(shape, strides) is expected


@given(
    shape=st.lists(st.integers(0, 4), max_size=5).map(tuple),
    data=st.data(),
)
@PROPERTY
def test_is_contiguous_against_numpy_flags(shape, data):
    """NumPy's C_CONTIGUOUS flag (relaxed strides) follows the same rule."""
    strides = tuple(data.draw(st.integers(-6, 24)) for _ in shape)
    base = np.zeros(200, dtype=np.int8)
    offset = 100
    if math.prod(shape):
        low, high = _reach(shape, strides, offset)
        if low < 0 or high >= base.size:
            return
    view = np.lib.stride_tricks.as_strided(base[offset:], shape=shape, strides=strides)
    assert is_contiguous(shape, strides) == view.flags.c_contiguous


# -- broadcasting ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        (((2, 3), (3,)), (2, 3)),
        (((2, 1), (1, 3)), (2, 3)),
        (((), (4, 5)), (4, 5)),
        (((1,), (0,)), (0,)),
        (((0, 1), (1, 7)), (0, 7)),
        (((5, 1, 4), (3, 1), (1,)), (5, 3, 4)),
        (((),), ()),
    ],
)
def test_broadcast_shapes(shapes, expected):
    assert broadcast_shapes(*shapes) == expected
    assert np.broadcast_shapes(*shapes) == expected


@pytest.mark.parametrize(
    "shapes", [((2,), (3,)), ((0,), (2,)), ((2, 3), (3, 2)), ((4, 1), (3,), (2, 1))]
)
def test_broadcast_shapes_refused(shapes):
    with pytest.raises(TensorShapeError):
        broadcast_shapes(*shapes)


@pytest.mark.parametrize(
    "shapes",
    [
        ((65536, 1), (1, 32768)),  # 2**31 elements
        ((100000, 1, 0), (1, 100000, 0)),  # prefix product
        ((1,) * 9, (2,)),  # rank 9
        ((46341, 1), (46341,)),
    ],
)
def test_broadcast_result_must_satisfy_limits(shapes):
    np.broadcast_shapes(*shapes)  # NumPy has no such limit
    with pytest.raises(TensorShapeError):
        broadcast_shapes(*shapes)


def test_broadcast_just_below_limit_passes():
    assert broadcast_shapes((65536, 1), (1, 32767)) == (65536, 32767)


def test_broadcast_strides():
    assert broadcast_strides((3, 1), (1, 1), (2, 3, 4)) == (0, 1, 0)
    assert broadcast_strides((3,), (-2,), (5, 3)) == (0, -2)
    with pytest.raises(TensorShapeError):
        broadcast_strides((3,), (1,), (4,))
    with pytest.raises(TensorShapeError):
        broadcast_strides((2, 3), (3, 1), (3,))


_extents = st.integers(0, 3)
_shape = st.lists(_extents, max_size=5).map(tuple)


@st.composite
def _related_shapes(draw):
    """A shape and another that is often (not always) broadcast-compatible with it."""
    first = draw(_shape)
    keep = draw(st.integers(0, len(first)))
    second = []
    for extent in first[len(first) - keep :]:
        second.append(draw(st.sampled_from([extent, 1, extent, draw(_extents)])))
    lead = draw(st.lists(_extents, max_size=2))
    return first, tuple(lead + second)


@given(pair=st.one_of(_related_shapes(), st.tuples(_shape, _shape)), third=st.none() | _shape)
@PROPERTY
def test_broadcast_shapes_against_numpy(pair, third):
    shapes = [*pair] if third is None else [*pair, third]
    try:
        expected = np.broadcast_shapes(*shapes)
    except ValueError:
        with pytest.raises(TensorShapeError):
            broadcast_shapes(*shapes)
    else:
        assert broadcast_shapes(*shapes) == expected


# -- resolve_reshape -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("new_shape", "count", "expected"),
    [
        ((-1,), 12, (12,)),
        ((3, -1), 12, (3, 4)),
        ((-1, 2, 2), 12, (3, 2, 2)),
        ((2, -1, 1), 12, (2, 6, 1)),
        ((-1,), 0, (0,)),
        ((-1, 3), 0, (0, 3)),
        ((2, 0, -1), 0, None),  # -1 cannot be inferred next to a 0 extent
        ((), 1, ()),
        ((-1,), 1, (1,)),
        ((1, -1, 1), 1, (1, 1, 1)),
        ((4, 3), 12, (4, 3)),
    ],
)
def test_resolve_reshape(new_shape, count, expected):
    if expected is None:
        with pytest.raises(TensorShapeError):
            resolve_reshape(new_shape, count)
        with pytest.raises(ValueError):
            np.zeros(count).reshape(new_shape)
        return
    assert resolve_reshape(new_shape, count) == expected
    assert np.zeros(count).reshape(new_shape).shape == expected


@pytest.mark.parametrize(
    ("new_shape", "count"),
    [
        ((-1, -1), 12),  # two -1s
        ((-1, 2, -1), 8),
        ((5, -1), 12),  # not divisible
        ((5,), 12),  # mismatch
        ((3, 5), 12),
        ((), 2),
        ((0,), 1),
        ((-2, -6), 12),  # negative extents that multiply to the count
        ((-1, 2**31), 2**31),
    ],
)
def test_resolve_reshape_refused(new_shape, count):
    with pytest.raises(TensorShapeError):
        resolve_reshape(new_shape, count)


# -- try_reshape -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "strides", "new_shape", "expected"),
    [
        ((2, 3, 4), (12, 4, 1), (6, 4), (4, 1)),
        ((2, 3, 4), (12, 4, 1), (24,), (1,)),
        ((2, 3, 4), (1, 2, 6), (24,), None),  # transposed: needs a copy
        ((4, 3), (1, 4), (2, 2, 3), (2, 1, 4)),  # split the outer dim of a transpose
        ((4, 3), (1, 4), (12,), None),
        ((3, 4), (10, 2), (3, 2, 2), (10, 4, 2)),  # step-2 columns split
        ((3, 4), (10, 2), (12,), None),
        ((3, 4), (8, 2), (12,), (2,)),  # rows 8 apart, columns 2 apart: one run
        ((3, 4), (-4, -1), (12,), (-1,)),
        ((3, 4), (0, 1), (3, 2, 2), (0, 2, 1)),
        ((3, 4), (0, 0), (2, 6), (0, 0)),
        ((0, 4), (4, 1), (2, 0, 3), "any"),  # empty: always a view
        ((3, 0), (-5, 7), (0,), "any"),
    ],
)
def test_try_reshape_cases(shape, strides, new_shape, expected):
    got = try_reshape(shape, strides, new_shape)
    if expected is None:
        assert got is None
        return
    assert got is not None
    assert len(got) == len(new_shape)
    if expected == "any":
        assert is_contiguous(new_shape, got)
        return
    # Strides of extent-1 dims are free; the others must match.
    assert [s for s, e in zip(got, new_shape, strict=True) if e != 1] == [
        s for s, e in zip(expected, new_shape, strict=True) if e != 1
    ]


def _prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while p * p <= n:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    if n > 1:
        factors.append(n)
    return factors


@st.composite
def _strided_view(draw):
    """A NumPy view of a contiguous base array: permuted, step-sliced, maybe broadcast."""
    base_shape = tuple(draw(st.lists(st.sampled_from([2, 3, 4, 1, 2, 3, 4, 0]), max_size=5)))
    base = np.arange(math.prod(base_shape), dtype=np.int32).reshape(base_shape)
    view = base
    if view.ndim:
        view = view.transpose(draw(st.permutations(range(view.ndim))))
    slices = []
    for extent in view.shape:
        step = draw(st.sampled_from([2, -1, 1, -2, 3, 1, -3, -1]))
        empty = draw(st.integers(0, 19)) == 19  # now and then an empty slice of a full axis
        if extent == 0:
            slices.append(slice(None, None, step))
        elif step > 0:
            start = draw(st.integers(0, extent - 1))
            stop = start if empty else draw(st.none() | st.integers(start + 1, extent))
            slices.append(slice(start, stop, step))
        else:
            high = draw(st.integers(0, extent - 1))
            low = high if empty else draw(st.integers(-1, high - 1))
            slices.append(slice(high, None if low < 0 else low, step))
    view = view[(Ellipsis, *slices)]  # the Ellipsis keeps a 0-d view an array
    if draw(st.booleans()):
        lead = draw(st.lists(st.integers(1, 3), max_size=2))
        target = [draw(st.integers(1, 3)) if e == 1 else e for e in view.shape]
        view = np.broadcast_to(view, (*lead, *target))
    return base, view


@st.composite
def _same_count_shape(draw, shape: tuple[int, ...]):
    """A random shape with as many elements as `shape`.

    Either the prime factors of the count grouped at random, or `shape` itself with neighbours
    merged (viewable exactly when the merged dims form runs) or reversed; then extent-1 dims
    inserted anywhere.
    """
    count = math.prod(shape)
    if count == 0:
        dims = draw(st.lists(st.integers(0, 4), min_size=1, max_size=5))
        if 0 not in dims:
            dims[draw(st.integers(0, len(dims) - 1))] = 0
        return tuple(dims)
    kind = draw(st.sampled_from(["factors", "merge", "reverse"]))
    groups: list[int] = []
    if kind == "factors":
        for factor in draw(st.permutations(_prime_factors(count))):
            if groups and (len(groups) >= 6 or draw(st.booleans())):
                groups[-1] *= factor
            else:
                groups.append(factor)
    else:
        for extent in (e for e in shape if e != 1):
            if groups and (len(groups) >= 6 or draw(st.booleans())):
                groups[-1] *= extent
            else:
                groups.append(extent)
        if kind == "reverse":
            groups.reverse()
    ones = draw(st.integers(0, 8 - len(groups)))
    for _ in range(ones):
        groups.insert(draw(st.integers(0, len(groups))), 1)
    return tuple(groups)


def _element_layout(base, view):
    itemsize = base.itemsize
    strides = tuple(s // itemsize for s in view.strides)
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // (
        itemsize
    )
    return strides, offset


@given(pair=_strided_view(), data=st.data())
@PROPERTY
def test_try_reshape_against_numpy(pair, data):
    base, view = pair
    strides, offset = _element_layout(base, view)
    new_shape = data.draw(_same_count_shape(view.shape))
    assert math.prod(new_shape) == view.size
    got = try_reshape(view.shape, strides, new_shape)

    numpy_view_ok = True
    try:
        np.reshape(view, new_shape, copy=False)
    except ValueError:
        numpy_view_ok = False

    if view.size == 0:
        # §4: empty tensors are always viewable, with contiguous strides.
        assert got is not None
        assert len(got) == len(new_shape)
        assert is_contiguous(new_shape, got)
        return
    if numpy_view_ok:
        assert got is not None, (
            f"NumPy views {view.shape} strides {strides} as {new_shape} without a copy"
        )
    if got is None:
        return
    assert len(got) == len(new_shape)
    check_view(new_shape, got, offset, base.size)
    flat = base.reshape(-1)
    rebuilt = np.lib.stride_tricks.as_strided(
        flat[offset:], shape=new_shape, strides=tuple(s * base.itemsize for s in got)
    )
    np.testing.assert_array_equal(rebuilt, np.reshape(view, new_shape))


@given(pair=_strided_view(), data=st.data())
@PROPERTY
def test_try_reshape_to_own_shape_and_flat(pair, data):
    """Reshaping to the same shape is always a view; flattening is a view iff NumPy agrees."""
    base, view = pair
    strides, _ = _element_layout(base, view)
    same = try_reshape(view.shape, strides, view.shape)
    assert same is not None
    if view.size:
        assert [s for s, e in zip(same, view.shape, strict=True) if e != 1] == [
            s for s, e in zip(strides, view.shape, strict=True) if e != 1
        ]
    flat = try_reshape(view.shape, strides, (view.size,))
    try:
        np.reshape(view, (view.size,), copy=False)
        numpy_ok = True
    except ValueError:
        numpy_ok = False
    if view.size:
        assert (flat is not None) == numpy_ok
