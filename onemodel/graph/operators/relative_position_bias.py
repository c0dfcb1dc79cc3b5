"""com.microsoft.RelativePositionBias: T5's bucketed relative-position attention bias, which
onnxruntime's transformer optimizer fuses (model_type "t5") and onnxruntime runs only on CUDA.

Output (1, N, Q, K)[h, i, j] is the table entry of head h for the bucket of the distance
j − (K − Q + i) (the queries are the last Q of the K positions). Buckets follow T5: half of
them for each sign when bidirectional (else only distances to the past count), exact below
half the buckets, logarithmic up to max_distance, with the logarithms in float32 as
onnxruntime's kernel computes them; exact mode decides T5's logarithmic bucket by integer
arithmetic instead (`log_bucket_thresholds`), so no library logarithm can move it. The table
(num_buckets, N) is read head-major, as onnxruntime reads it ("COL-major" in its schema):
entry (h, b) is element h · num_buckets + b.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.graph.operators.attention import NARROW_FLOATS
from onemodel.graph.operators.base import (
    MICROSOFT,
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.tensors import DType


@functools.lru_cache(maxsize=64)
def log_bucket_thresholds(exact: int, count: int, max_distance: int) -> np.ndarray:
    """The smallest distance of each logarithmic bucket past the first: with n = count − exact,
    bucket exact + k (k = 1 … n − 1) starts at the least integer d with d^n ≥ max_distance^k ·
    exact^(n − k), which is ⌊ln(d / exact) / ln(max_distance / exact) · n⌋ ≥ k in exact real
    arithmetic (both sides raised to the n-th power), decided on Python integers."""
    n = count - exact
    thresholds = []
    for k in range(1, n):
        bound = max_distance**k * exact ** (n - k)
        low, high = 0, max(max_distance, exact)  # high**n ≥ bound
        while low < high:  # the least d with d**n ≥ bound
            middle = (low + high) // 2
            low, high = (middle + 1, high) if middle**n < bound else (low, middle)
        thresholds.append(low)
    return np.asarray(thresholds, dtype=np.int64)


class RelativePositionBias(Operator):
    """T5's relative position bias (see the module docstring). Exact: the same gather, with
    the logarithmic buckets from `log_bucket_thresholds` (integers, the same everywhere)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.max_distance = int(node.attr("max_distance"))
        self.bidirectional = bool(node.attr("is_bidirectional", 0))
        if self.max_distance < 1:
            raise node.invalid(f"RelativePositionBias: max_distance {self.max_distance} < 1")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, NARROW_FLOATS, 0)
        self.check_types(ctx, frozenset({DType.INT64}), 1, 2)
        table = ctx.shape(0)
        if len(table) != 2 or table[0] < (4 if self.bidirectional else 2):
            raise self.node.bad_input(
                f"RelativePositionBias: bias_table of shape {table} is not (num_buckets, heads)",
                self.node.inputs[0],
            )
        lengths = []
        for index in (1, 2):
            value = ctx.value(index).reshape(-1)
            if value.size != 1 or int(value[0]) < 0:
                raise self.node.bad_input(
                    f"RelativePositionBias: input {index} must be one length ≥ 0",
                    self.node.inputs[index],
                )
            lengths.append(int(value[0]))
        queries, keys = lengths
        if queries > keys:
            raise self.node.bad_input(
                f"RelativePositionBias: query_length {queries} exceeds key_length {keys}",
                self.node.inputs[1],
            )
        return [ctx.output(ctx.dtype(0), (1, table[1], queries, keys))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        table = inputs[0]
        (out,) = outputs
        _, heads, queries, keys = out.shape
        buckets = self._buckets(table.shape[0], queries, keys, ctx.exact)
        by_head = table.reshape(heads, table.shape[0])
        out[0] = xp.take(by_head, xp.asarray(buckets.reshape(-1)), axis=1).reshape(
            heads, queries, keys
        )

    def _buckets(self, count: int, queries: int, keys: int, exact_mode: bool) -> np.ndarray:
        """(Q, K) int64 bucket of each query/key pair."""
        distance = np.arange(keys)[None, :] - np.arange(keys - queries, keys)[:, None]
        buckets = np.zeros(distance.shape, np.int64)
        if self.bidirectional:
            count //= 2
            buckets += np.where(distance > 0, count, 0)
            distance = np.abs(distance)
        else:
            distance = -np.minimum(distance, 0)
        exact = count // 2
        small = distance < exact
        if exact_mode:
            thresholds = log_bucket_thresholds(exact, count, self.max_distance)
            large = exact + np.searchsorted(thresholds, distance, side="right")
        else:
            large = self._float32_log_buckets(distance, small, exact, count)
        return buckets + np.where(small, distance, large)

    def _float32_log_buckets(
        self, distance: np.ndarray, small: np.ndarray, exact: int, count: int
    ) -> np.ndarray:
        """exact + ⌊ln(d / exact) / ln(max_distance / exact) · (count − exact)⌋ capped at
        count − 1, the logarithms and products in float32 (onnxruntime's kernel)."""
        with np.errstate(all="ignore"):
            ratio = np.log(np.where(small, exact, distance).astype(np.float32) / np.float32(exact))
            scale = np.log(np.float32(self.max_distance) / np.float32(exact))
            large = exact + (ratio / scale * np.float32(count - exact)).astype(np.int64)
        return np.minimum(large, count - 1)


DEFS = (OpDef("RelativePositionBias", 1, RelativePositionBias, domain=MICROSOFT),)
