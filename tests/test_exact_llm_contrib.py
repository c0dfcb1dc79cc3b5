"""Exact mode of the com.microsoft EmbedLayerNormalization, QEmbedLayerNormalization,
GroupQueryAttention and RelativePositionBias (docs/exact-mode.md): close to onnxruntime's CPU
kernels (RelativePositionBias, which onnxruntime runs on CUDA only, bit for bit against T5's
bucket computed with 60-digit decimal logarithms), the same bits on numpy-reference, numpy and
the flushing checked-device stand-in (CuPy under the gpu mark) and on a session's repeated
runs, and the embedding's normalization against its recipe written out in Python floats."""

from __future__ import annotations

import decimal
import math
from typing import Any

import numpy as np
import pytest
from operator_harness import onnxruntime_run, run_node
from test_ops_contrib import MS, contrib_model

from onemodel import ExecutionMode, Session, SessionOptions
from onemodel.backends import BackendUnavailableError, KernelPaths
from onemodel.graph.importer import model_from_proto
from tests.test_exact_operators import assert_bits

pytest.importorskip("onnxruntime")
BACKENDS = ["numpy", "checked-device", pytest.param("cupy", marks=pytest.mark.gpu)]
HEADS, KV_HEADS, HEAD = 4, 2, 32


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, name)))


def _normal(rng: np.random.Generator, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _ids(rng: np.random.Generator, high: int, *shape: int) -> np.ndarray:
    return rng.integers(0, high, size=shape).astype(np.int32)


# -- the cases ------------------------------------------------------------------------------


def _embed(rng: np.random.Generator, segments: bool, positions: str) -> list:
    batch, length, hidden = 2, 5, 16
    mask = np.ones((batch, length), np.int32)
    mask[1, 3:] = 0
    position_ids = {"none": None, "rows": _ids(rng, 8, batch, length),
                    "shared": _ids(rng, 8, 1, length)}[positions]  # fmt: skip
    return [
        _ids(rng, 30, batch, length), _ids(rng, 2, batch, length) if segments else None,
        _normal(rng, 30, hidden), _normal(rng, 8, hidden),
        _normal(rng, 2, hidden) if segments else None,
        _normal(rng, hidden), _normal(rng, hidden), mask, position_ids,
    ]  # fmt: skip


def _quantized(rng: np.random.Generator, kind: Any, *shape: int) -> list[np.ndarray]:
    """An 8-bit table with its float32 scale and zero point."""
    info = np.iinfo(kind)
    values = rng.integers(info.min, info.max + 1, size=shape).astype(kind)
    zero = np.array(rng.integers(info.min // 2, info.max // 2), kind)
    return [values, np.array(rng.uniform(0.005, 0.05), np.float32), zero]


def _qembed(rng: np.random.Generator, kind: Any) -> list:
    batch, length, hidden = 2, 6, 16
    tables = [_quantized(rng, kind, *shape) for shape in ((30, hidden), (8, hidden), (2, hidden),
                                                          (hidden,), (hidden,))]  # fmt: skip
    mask = np.ones((batch, length), np.int32)
    mask[0, 4:] = 0
    ids = [_ids(rng, 30, batch, length), _ids(rng, 2, batch, length)]
    return [*ids, *(t[0] for t in tables), mask, *(t[1] for t in tables),
            *(t[2] for t in tables)]  # fmt: skip


def _gqa(
    rng: np.random.Generator, batch: int, length: int, past: int, seqlens: list[int], *,
    packed: bool = True, rotary: int = 0, dtype: Any = np.float32, bias: bool = False,
    sink: bool = False, positions: list[list[int]] | None = None,
) -> list:  # fmt: skip
    total = max(seqlens) + 1
    width = (HEADS + 2 * KV_HEADS) * HEAD if packed else HEADS * HEAD
    inputs: list = [_normal(rng, batch, length, width, dtype=dtype)]
    if packed:
        inputs += [None, None]
    else:
        inputs += [_normal(rng, batch, length, KV_HEADS * HEAD, dtype=dtype) for _ in range(2)]
    inputs += [_normal(rng, batch, KV_HEADS, past, HEAD, dtype=dtype) for _ in range(2)]
    inputs += [np.array(seqlens, np.int32), np.array(total, np.int32)]
    angles = np.arange(32)[:, None] * (1e-2 ** (np.arange(rotary // 2) / max(rotary // 2, 1)))
    inputs += [np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)] if rotary else [None] * 2
    inputs += [None if positions is None else np.array(positions, np.int64)]
    inputs += [_normal(rng, 1, HEADS, length, total, dtype=dtype)] if bias else [None]
    inputs += [_normal(rng, HEADS, dtype=dtype)] if sink else []
    return inputs


def _gqa_case(attributes: dict | None = None, rotary: int = 0, **options: Any) -> tuple:
    def make(rng: np.random.Generator) -> list:
        return _gqa(rng, rotary=rotary, **options)

    given = {"num_heads": HEADS, "kv_num_heads": KV_HEADS, "do_rotary": int(bool(rotary))}
    return ("GroupQueryAttention", make, {**given, **(attributes or {})}, ("y", "key", "value"))


def _rpb(rng: np.random.Generator, buckets: int, queries: int, keys: int) -> list:
    return [_normal(rng, buckets, 3), np.array(queries, np.int64), np.array(keys, np.int64)]


EMBED_OUTPUTS = ("y", "mask_index", "sum")
PROMPT = {"batch": 1, "length": 6, "past": 0, "seqlens": [5], "rotary": HEAD}
CASES: dict[str, tuple] = {
    "embed-segments": ("EmbedLayerNormalization", lambda r: _embed(r, True, "none"),
                       {"epsilon": 1e-12}, EMBED_OUTPUTS),
    "embed-position-rows": ("EmbedLayerNormalization", lambda r: _embed(r, True, "rows"),
                            {"epsilon": 1e-5}, EMBED_OUTPUTS),
    "embed-shared-positions-no-segments": (
        "EmbedLayerNormalization", lambda r: _embed(r, False, "shared"), {}, EMBED_OUTPUTS),
    "qembed-uint8": ("QEmbedLayerNormalization", lambda r: _qembed(r, np.uint8),
                     {"epsilon": 1e-12}, ("y", "mask_index")),
    "qembed-int8": ("QEmbedLayerNormalization", lambda r: _qembed(r, np.int8), {},
                    ("y", "mask_index")),
    "gqa-prompt-packed": _gqa_case(batch=2, length=5, past=0, seqlens=[4, 4]),
    "gqa-prompt-separate-kv": _gqa_case(batch=2, length=5, past=0, seqlens=[4, 4], packed=False),
    "gqa-prompt-rotary": _gqa_case(**PROMPT),
    "gqa-partial-rotary": _gqa_case(batch=2, length=3, past=0, seqlens=[2, 2], rotary=HEAD // 2),
    "gqa-decode-ragged-rows": _gqa_case(batch=2, length=1, past=6, seqlens=[6, 3], rotary=HEAD),
    "gqa-decode-position-ids": _gqa_case(batch=2, length=1, past=6, seqlens=[6, 3],
                                         rotary=HEAD, positions=[[9], [4]]),
    "gqa-prompt-position-ids": _gqa_case(batch=1, length=4, past=0, seqlens=[3], rotary=HEAD,
                                         positions=[[3, 4, 5, 6]]),
    "gqa-continued-prompt": _gqa_case(batch=1, length=3, past=4, seqlens=[6], rotary=HEAD),
    "gqa-float16": _gqa_case(batch=2, length=1, past=3, seqlens=[3, 3], rotary=HEAD,
                             dtype=np.float16),
    "gqa-local-window": _gqa_case({"local_window_size": 2}, **PROMPT),
    "gqa-softcap-scale": _gqa_case({"softcap": 0.5, "scale": 0.7}, **PROMPT),
    "gqa-smooth-softmax": _gqa_case({"smooth_softmax": 1}, **PROMPT),
    "gqa-interleaved-rotary": _gqa_case({"rotary_interleaved": 1}, **PROMPT),
    "gqa-attention-bias": _gqa_case(batch=1, length=4, past=0, seqlens=[3], bias=True),
    "gqa-head-sink": _gqa_case(batch=1, length=4, past=0, seqlens=[3], sink=True),
    # onnxruntime runs RelativePositionBias on CUDA only: test_relative_position_bias_* below.
    "rpb-bidirectional": ("RelativePositionBias", lambda r: _rpb(r, 32, 40, 200),
                          {"max_distance": 128, "is_bidirectional": 1}, ("y",)),
    "rpb-decoder": ("RelativePositionBias", lambda r: _rpb(r, 32, 1, 300),
                    {"max_distance": 128}, ("y",)),
}  # fmt: skip


def _build(name: str) -> tuple[Any, dict[str, np.ndarray]]:
    op_type, make, attributes, outputs = CASES[name]
    return contrib_model(op_type, make(_rng(name)), attributes, outputs, MS)


def _session(model: Any, backend: str) -> Session:
    try:
        KernelPaths.get(backend)
    except BackendUnavailableError as error:
        pytest.skip(str(error))
    options = SessionOptions(mode=ExecutionMode.EXACT, backend=backend, outputs_as="numpy")
    return Session.create(model_from_proto(model), options)


# -- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [name for name in CASES if not name.startswith("rpb")])
def test_exact_outputs_are_close_to_onnxruntime(name: str) -> None:
    model, feeds = _build(name)
    expected = onnxruntime_run(model, feeds)
    got = _session(model, "numpy-reference").run(None, feeds)
    tolerance = 2e-3 if expected[0].dtype == np.float16 else 1e-4
    for index, (result, wanted) in enumerate(zip(got, expected, strict=True)):
        assert result.dtype == wanted.dtype and result.shape == wanted.shape, index
        np.testing.assert_allclose(
            result.astype(np.float64), wanted.astype(np.float64), rtol=tolerance,
            atol=tolerance / 10, err_msg=f"{name} output {index}",
        )  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_exact_outputs_are_the_same_bits_everywhere(name: str, backend: str) -> None:
    """numpy-reference's bits on `backend`, on a session's first and second runs."""
    model, feeds = _build(name)
    want = _session(model, "numpy-reference").run(None, feeds)
    session = _session(model, backend)
    for attempt in ("first", "second"):
        got = session.run(None, feeds)
        for index, (result, wanted) in enumerate(zip(got, want, strict=True)):
            assert_bits(result, wanted, f"{name} output {index}, {attempt} run on {backend}")


# -- RelativePositionBias against T5's bucket in decimal arithmetic ---------------------------


def _t5_bucket(relative: int, bidirectional: bool, buckets: int, max_distance: int) -> int:
    """T5's relative_position_bucket for one distance, its logarithms in 60-digit decimals
    (rounded to 40 places before the floor, so that exact integers such as
    ln 2 / ln 16 · 8 = 2 stay integers)."""
    base = 0
    if bidirectional:
        buckets //= 2
        base = buckets if relative > 0 else 0
        distance = abs(relative)
    else:
        distance = -min(relative, 0)
    exact = buckets // 2
    if distance < exact:
        return base + distance
    with decimal.localcontext() as context:
        context.prec = 60
        ratio = (decimal.Decimal(distance) / exact).ln() / (
            decimal.Decimal(max_distance) / exact
        ).ln()
        value = (ratio * (buckets - exact)).quantize(decimal.Decimal("1e-40"))
    return base + min(exact + int(value), buckets - 1)


@pytest.mark.parametrize(
    ("buckets", "max_distance", "bidirectional"),
    [(32, 128, 1), (32, 128, 0), (16, 20, 1), (64, 1000, 0), (10, 33, 1), (8, 8, 0)],
)
def test_relative_position_bias_gathers_t5s_bucket(
    buckets: int, max_distance: int, bidirectional: int
) -> None:
    """Every query/key pair of (Q, K) = (7, 1200) reads table[bucket, head], the bucket T5's."""
    queries, keys = 7, 1200
    table = _rpb(_rng("rpb"), buckets, queries, keys)
    attributes = {"max_distance": max_distance, "is_bidirectional": bidirectional}
    model, feeds = contrib_model("RelativePositionBias", table, attributes, ("y",), MS)
    (got,) = _session(model, "numpy-reference").run(None, feeds)
    relative = np.arange(keys)[None, :] - np.arange(keys - queries, keys)[:, None]
    distances = np.arange(-(keys - 1), queries)
    bucket = {
        int(r): _t5_bucket(int(r), bool(bidirectional), buckets, max_distance) for r in distances
    }
    want_buckets = np.vectorize(bucket.__getitem__)(relative)
    by_head = table[0].reshape(3, buckets)
    want = np.ascontiguousarray(by_head[:, want_buckets][None])
    assert_bits(got, want, f"{buckets} buckets, max_distance {max_distance}")


# -- the embeddings against their recipe --------------------------------------------------------


def _layer_norm_recipe(
    row: list[float], gamma: np.ndarray, beta: np.ndarray, epsilon: float
) -> list[float]:
    """LayerNormalization's exact recipe on one row of Python (IEEE double) floats."""
    mean = 0.0
    for x in row:
        mean += x
    mean /= len(row)
    deviations = [x - mean for x in row]
    variance = 0.0
    for d in deviations:
        variance += d * d
    inv_std = 1 / math.sqrt(variance / len(row) + epsilon)
    return [
        (d * inv_std) * float(g) + float(b) for d, g, b in zip(deviations, gamma, beta, strict=True)
    ]


def _embedding_recipe(
    tables: list[np.ndarray], ids: list[np.ndarray], gamma: np.ndarray, beta: np.ndarray,
    epsilon: float,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """((word + position) + segment) per element in float64 (ids of one row shared by every
    batch row), then the normalization; the output and the sum each rounded once."""
    batch, length = ids[0].shape
    sums = np.zeros((batch, length, gamma.size))
    normalized = np.zeros_like(sums)
    for b in range(batch):
        for s in range(length):
            rows = [
                table[picks[min(b, len(picks) - 1), s]]
                for table, picks in zip(tables, ids, strict=True)
            ]
            total = [float(v) for v in rows[0]]
            for row in rows[1:]:
                total = [t + float(v) for t, v in zip(total, row, strict=True)]
            sums[b, s] = total
            normalized[b, s] = _layer_norm_recipe(total, gamma, beta, epsilon)
    return normalized.astype(np.float32), sums.astype(np.float32)


def test_embed_layer_normalization_follows_its_recipe() -> None:
    ids, segment_ids, words, positions, segments, gamma, beta, mask, position_ids = _embed(
        _rng("recipe"), True, "shared"
    )
    words[3, :4] = [3e-39, -0.0, 1e30, -7e-45]  # subnormals, a signed zero, a large value
    ids[0, 0] = 3
    inputs = [ids, segment_ids, words, positions, segments, gamma, beta, mask, position_ids]
    model, feeds = contrib_model(
        "EmbedLayerNormalization", inputs, {"epsilon": 1e-5}, EMBED_OUTPUTS, MS
    )
    y, mask_index, total = _session(model, "checked-device").run(None, feeds)
    want_y, want_total = _embedding_recipe(
        [words, positions, segments], [ids, position_ids, segment_ids], gamma, beta, 1e-5
    )
    assert_bits(y, want_y, "output")
    assert_bits(total, want_total, "sum")
    np.testing.assert_array_equal(mask_index, (mask == 1).sum(axis=1))


def test_qembed_layer_normalization_dequantizes_with_one_float32_rounding() -> None:
    """(q − zero point) · scale as one float32 product per value, then the recipe."""
    inputs = _qembed(_rng("qrecipe"), np.int8)
    ids, segment_ids = inputs[:2]
    quantized, scales, zeros = inputs[2:7], inputs[8:13], inputs[13:18]
    values = [
        np.multiply((q.astype(np.int32) - int(z)).astype(np.float32), s)
        for q, s, z in zip(quantized, scales, zeros, strict=True)
    ]
    model, feeds = contrib_model("QEmbedLayerNormalization", inputs, {"epsilon": 1e-4}, ("y",), MS)
    (y,) = _session(model, "checked-device").run(None, feeds)
    positions = np.arange(ids.shape[1], dtype=np.int32)[None]
    want, _ = _embedding_recipe(
        values[:3], [ids, positions, segment_ids], values[3], values[4], 1e-4
    )
    assert_bits(y, want, "output")


def test_relative_position_bias_fast_mode_agrees_with_exact_on_t5s_buckets() -> None:
    """fast mode's float32 logarithms (onnxruntime's kernel) pick the exact bucket on every
    distance below 4096 for T5's 32 buckets up to 128, both directions (one query: the
    distances 0 … −4095, whose magnitudes both directions bucket alike)."""
    for bidirectional in (0, 1):
        inputs = _rpb(_rng("t5"), 32, 1, 4096)
        attributes = {"max_distance": 128, "is_bidirectional": bidirectional}
        fast = run_node("RelativePositionBias", inputs, attributes, opset=1, domain=MS)
        exact = run_node("RelativePositionBias", inputs, attributes, opset=1, domain=MS, exact=True)
        assert_bits(fast[0], exact[0], f"bidirectional {bidirectional}")
