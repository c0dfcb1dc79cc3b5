"""com.microsoft.GroupQueryAttention: causal grouped-query self-attention with a KV cache, as
onnxruntime-genai's model builder writes it for decoder-only LLMs (Llama, Qwen, Phi, Mistral).

The contract followed is onnxruntime's CPU kernel:
- query is (B, S, N·H), or packed (B, S, (N + 2·Nk)·H) Q|K|V when key and value are absent;
- seqlens_k (B,) int32 holds each row's total length − 1, total_sequence_length the batch's
  maximum total length; S == total_sequence_length is the first prompt (no past is read),
  otherwise row b's past length is seqlens_k[b] + 1 − S (and S must be 1, or the batch 1);
- present_key/value are (B, Nk, max(total_sequence_length, past buffer length), H): row b's
  past, then its S new keys, then zeros;
- with do_rotary, Q and the new K are rotated at positions past_b + s (first prompt: s, or
  position_ids[0] + s when given), by the cos/sin caches' first 2·columns features;
- query s of row b attends to keys j ≤ past_b + s (and j > past_b + s − local_window_size),
  scores scaled by `scale` (default 1/√H), soft-capped when softcap > 0, then attention_bias
  added; smooth_softmax / head_sink add one more logit (0 or the head's sink) to the softmax.
Everything computes in float32 (float64 never occurs: the operator is float16/bfloat16/float)
and rounds once into the outputs. Exact: Q and the new K rotated by RotaryEmbedding's exact
recipe, rounded once into the inputs' type (so present_key holds what attention reads), then
the contrib attentions' ExactAttentionMath over the present caches: the scores the exact dot
products rounded once into float32, then in float64 · scale, softcap, + attention_bias, the
mask, the exact softmax with the sink as one more logit, the probabilities rounded to float32
for the exact P·V, the output rounded once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.graph.operators.attention import (
    NARROW_FLOATS,
    AttentionMath,
    DotProductAttention,
    ExactAttentionMath,
    RotaryEmbeddingOp,
)
from onemodel.graph.operators.base import (
    MICROSOFT,
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.binary import check_same_type
from onemodel.tensors import DType

(
    QUERY,
    KEY,
    VALUE,
    PAST_KEY,
    PAST_VALUE,
    SEQLENS_K,
    TOTAL_LENGTH,
    COS,
    SIN,
    POSITION_IDS,
    ATTENTION_BIAS,
    HEAD_SINK,
) = range(12)
_INT32 = frozenset({DType.INT32})


class GroupQueryAttention(DotProductAttention):
    """Grouped-query attention over a KV cache (see the module docstring for the contract)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.heads = int(node.attr("num_heads"))
        self.kv_heads = int(node.attr("kv_num_heads"))
        if self.heads < 1 or self.kv_heads < 1 or self.heads % self.kv_heads:
            raise node.invalid(
                f"GroupQueryAttention: num_heads {self.heads} is not a positive multiple of "
                f"kv_num_heads {self.kv_heads}"
            )
        self.scale = float(node.attr("scale", 0.0)) or None
        self.softcap = float(node.attr("softcap", 0.0))
        self.window = int(node.attr("local_window_size", -1))
        self.rotary = bool(node.attr("do_rotary", 0))
        self.interleaved = int(node.attr("rotary_interleaved", 0))
        self.smooth = bool(node.attr("smooth_softmax", 0))
        if int(node.attr("qk_output", 0)):
            raise node.unsupported("GroupQueryAttention with qk_output is not supported")
        for name in ("k_quant_type", "v_quant_type"):
            if str(node.attr(name, "NONE")) != "NONE":
                raise node.unsupported(f"GroupQueryAttention with a quantized cache ({name})")
        self._rotations: dict[int, RotaryEmbeddingOp] = {}

    def _given(self, ctx: InferContext, index: int) -> bool:
        return index < len(ctx) and ctx.has(index)

    def _fail(self, index: int, message: str) -> Exception:
        value = self.node.inputs[index] if index < len(self.node.inputs) else None
        return self.node.bad_input(f"GroupQueryAttention: {message}", value or None)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        floats = [
            i
            for i in (QUERY, KEY, VALUE, PAST_KEY, PAST_VALUE, COS, SIN, ATTENTION_BIAS, HEAD_SINK)
            if self._given(ctx, i)
        ]
        self.check_types(ctx, NARROW_FLOATS, *floats)
        check_same_type(ctx, tuple(floats))
        for index in (SEQLENS_K, TOTAL_LENGTH):
            if not self._given(ctx, index):
                raise self.node.invalid(f"GroupQueryAttention: input {index} is required")
        self.check_types(ctx, _INT32, SEQLENS_K, TOTAL_LENGTH)
        query = ctx.shape(QUERY)
        if len(query) != 3:
            raise self._fail(QUERY, f"query of shape {query} is not (B, S, hidden)")
        batch, length, width = query
        packed = not self._given(ctx, KEY)
        if packed == self._given(ctx, VALUE):
            raise self.node.invalid("GroupQueryAttention: key and value come together")
        parts = self.heads + 2 * self.kv_heads if packed else self.heads
        if width % parts:
            raise self._fail(QUERY, f"query width {width} is not a multiple of {parts} heads")
        head = width // parts
        if not packed:
            for index in (KEY, VALUE):
                if ctx.shape(index) != (batch, length, self.kv_heads * head):
                    raise self._fail(
                        index,
                        f"input of shape {ctx.shape(index)} is not "
                        f"({batch}, {length}, {self.kv_heads * head})",
                    )
        past = 0
        if self._given(ctx, PAST_KEY) != self._given(ctx, PAST_VALUE):
            raise self.node.invalid("GroupQueryAttention: past_key and past_value come together")
        if self._given(ctx, PAST_KEY):
            for index in (PAST_KEY, PAST_VALUE):
                shape = ctx.shape(index)
                if len(shape) != 4 or shape[:2] != (batch, self.kv_heads) or shape[3] != head:
                    raise self._fail(
                        index,
                        f"past of shape {shape} is not ({batch}, {self.kv_heads}, past, {head})",
                    )
            past = ctx.shape(PAST_KEY)[2]
            if ctx.shape(PAST_VALUE) != ctx.shape(PAST_KEY):
                raise self._fail(PAST_VALUE, "past_value's shape differs from past_key's")
        if ctx.shape(SEQLENS_K) != (batch,):
            raise self._fail(
                SEQLENS_K, f"seqlens_k of shape {ctx.shape(SEQLENS_K)} is not ({batch},)"
            )
        if math.prod(ctx.shape(TOTAL_LENGTH)) != 1:
            raise self._fail(TOTAL_LENGTH, "total_sequence_length must hold one value")
        if self.rotary:
            self._check_caches(ctx, head)
        if self._given(ctx, POSITION_IDS):
            self.check_types(ctx, frozenset({DType.INT64}), POSITION_IDS)
        if self._given(ctx, HEAD_SINK) and ctx.shape(HEAD_SINK) != (self.heads,):
            raise self._fail(
                HEAD_SINK, f"head_sink of shape {ctx.shape(HEAD_SINK)} is not ({self.heads},)"
            )
        total = int(ctx.value(TOTAL_LENGTH).reshape(-1)[0])
        self._check_lengths(batch, length, total)
        if self._given(ctx, ATTENTION_BIAS):
            bias = ctx.shape(ATTENTION_BIAS)
            if (
                len(bias) != 4
                or bias[0] not in (1, batch)
                or bias[1] not in (1, self.heads)
                or bias[2:] != (length, total)
            ):
                raise self._fail(
                    ATTENTION_BIAS,
                    f"attention_bias of shape {bias} is not "
                    f"({batch} or 1, {self.heads} or 1, {length}, {total})",
                )
        dtype = ctx.dtype(QUERY)
        present = ctx.output(dtype, (batch, self.kv_heads, max(total, past), head))
        return [ctx.output(dtype, (batch, length, self.heads * head)), present, present]

    def _check_caches(self, ctx: InferContext, head: int) -> None:
        if not (self._given(ctx, COS) and self._given(ctx, SIN)):
            raise self.node.invalid("GroupQueryAttention with do_rotary needs cos and sin caches")
        cos = ctx.shape(COS)
        if len(cos) != 2 or ctx.shape(SIN) != cos or not 0 < 2 * cos[1] <= head:
            raise self._fail(
                COS,
                f"caches of shapes {cos} and {ctx.shape(SIN)} are not "
                f"(rows, d/2) with d ≤ head size {head}",
            )

    def _check_lengths(self, batch: int, length: int, total: int) -> None:
        if total < length:
            raise self._fail(
                TOTAL_LENGTH,
                f"total_sequence_length {total} is shorter than the {length} new tokens",
            )
        if length > 1 and length != total and batch != 1:
            raise self._fail(
                QUERY,
                "a prompt continuing a past (S > 1 and S ≠ "
                "total_sequence_length) needs batch size 1",
            )

    # -- running --------------------------------------------------------------------------------

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        given = list(inputs) + [None] * (12 - len(inputs))
        query = given[QUERY]
        batch, length, _ = query.shape
        head = outputs[0].shape[2] // self.heads
        ops = (
            ExactAttentionMath(ctx.kernels, query.dtype)
            if ctx.exact
            else AttentionMath(xp, xp.float32)
        )
        q, k, v = self._split(xp, given, head)  # (B, N or Nk, S, H) views of the inputs
        if not ctx.exact:  # fast mode rotates in float32; exact mode in the inputs' type
            q, k = q.astype(xp.float32), k.astype(xp.float32)
        to_host = ctx.kernels.memory.to_host
        total = int(to_host(given[TOTAL_LENGTH]).reshape(-1)[0])
        seqlens = np.asarray(to_host(given[SEQLENS_K]), dtype=np.int64).reshape(-1)
        first_prompt = length == total
        totals = seqlens + 1
        pasts = np.zeros(batch, np.int64) if first_prompt else totals - length
        buffer = 0 if given[PAST_KEY] is None else given[PAST_KEY].shape[2]
        if (
            (totals < 1).any()
            or (totals > total).any()
            or (pasts < 0).any()
            or (not first_prompt and (pasts > buffer).any())
        ):
            raise self._fail(
                SEQLENS_K,
                f"seqlens_k {seqlens.tolist()} does not fit "
                f"total_sequence_length {total}, {length} new tokens and a past "
                f"of {buffer}",
            )
        if self.rotary:
            positions = self._positions(xp, given[POSITION_IDS], pasts, first_prompt, length)
            q = self._rotate(ctx, q, positions, given[COS], given[SIN])
            k = self._rotate(ctx, k, positions, given[COS], given[SIN])
        caches = ((outputs[1], k, given[PAST_KEY]), (outputs[2], v, given[PAST_VALUE]))
        for out, new, past in caches:
            out[...] = 0
            for b in range(batch):
                start = int(pasts[b])
                if start:
                    out[b, :, :start] = past[b, :, :start]
                out[b, :, start : start + length] = new[b]
        ops.store(outputs[0], self._attend(ops, given, q, pasts, total, outputs[1], outputs[2]))

    def _attend(
        self, ops: AttentionMath, given: list, q: Array, pasts: np.ndarray, total: int,
        present_key: Array, present_value: Array,
    ) -> Array:  # fmt: skip
        """(B, S, N·H) in the working type: softmax(softcap(q·kᵀ · scale) + attention_bias,
        masked, with the sink) · v over the first `total` keys of the present caches."""
        xp, compute = ops.xp, ops.compute
        batch, heads, length, head = q.shape
        keys = ops.cast(present_key[:, :, :total])
        values = ops.cast(present_value[:, :, :total])
        scale = self.scale if self.scale is not None else 1 / math.sqrt(head)
        with np.errstate(all="ignore"):
            scores = self._grouped_scores(xp, ops.cast(q), keys, ops.matmul)
            scores *= compute(scale)
            if self.softcap > 0:
                scores = ops.tanh(scores / compute(self.softcap)) * compute(self.softcap)
            if given[ATTENTION_BIAS] is not None:
                scores += ops.cast(given[ATTENTION_BIAS])
            scores = xp.where(self._allowed(xp, pasts, length, total), scores, -np.inf)
            probs = self._softmax_with_sink(ops, scores, given[HEAD_SINK])
            context = self._grouped_values(xp, probs, values, ops.matmul)
        return xp.transpose(context, (0, 2, 1, 3)).reshape(batch, length, heads * head)

    def _split(self, xp: Any, given: list, head: int) -> tuple[Array, Array, Array]:
        """Q (B, N, S, H), K and V (B, Nk, S, H), views of the inputs."""
        query = given[QUERY]
        batch, length, _ = query.shape
        if given[KEY] is None:
            query_width, kv_width = self.heads * head, self.kv_heads * head
            parts = (
                query[..., :query_width],
                query[..., query_width : query_width + kv_width],
                query[..., query_width + kv_width :],
            )
        else:
            parts = (query, given[KEY], given[VALUE])
        counts = (self.heads, self.kv_heads, self.kv_heads)
        return tuple(  # type: ignore[return-value]
            xp.transpose(part.reshape(batch, length, count, head), (0, 2, 1, 3))
            for part, count in zip(parts, counts, strict=True)
        )

    def _positions(
        self, xp: Any, position_ids: Array | None, pasts: np.ndarray, first: bool, length: int
    ) -> Array:
        """(B, S) rotary positions: the first prompt counts from 0 (or position_ids[0]), later
        tokens from each row's past length (or position_ids as given)."""
        steps = np.arange(length, dtype=np.int64)
        if position_ids is not None and not first:
            return position_ids.astype(xp.int64)
        if position_ids is not None:
            start = position_ids.reshape(-1)[:1].astype(xp.int64)
            return xp.broadcast_to(start + xp.asarray(steps), (len(pasts), length))
        return xp.asarray(pasts[:, None] + steps[None, :])

    def _rotate(self, ctx: RunContext, x: Array, positions: Array, cos: Array, sin: Array) -> Array:
        """x (B, heads, S, H) rotated at `positions` by the caches (RotaryEmbedding's kernel)."""
        rotary = 2 * cos.shape[1]
        rotation = self._rotations.get(rotary)
        if rotation is None:
            attributes = {"interleaved": self.interleaved, "rotary_embedding_dim": rotary}
            node = self.node
            rotation = RotaryEmbeddingOp(
                NodeInfo(
                    node.name,
                    "RotaryEmbedding",
                    "",
                    23,
                    (node.inputs[QUERY], node.inputs[COS], node.inputs[SIN], ""),
                    node.outputs[:1],
                    attributes,
                )
            )
            self._rotations[rotary] = rotation
        out = ctx.xp.empty_like(x)
        rotation.run(ctx, [x, cos, sin, positions], [out])
        return out

    def _allowed(self, xp: Any, pasts: np.ndarray, length: int, total: int) -> Array:
        """(B, 1, S, T) True where query s of row b may attend key j."""
        keys = np.arange(total)[None, None, :]
        last = pasts[:, None, None] + np.arange(length)[None, :, None]
        allowed = keys <= last
        if self.window >= 0:
            allowed &= keys > last - self.window
        return xp.asarray(allowed[:, None])

    def _softmax_with_sink(
        self, ops: AttentionMath, scores: Array, head_sink: Array | None
    ) -> Array:
        """Softmax over the keys; with smooth_softmax or head_sink, one more logit (0, or the
        head's sink) joins them as the last, its probability then dropped."""
        if head_sink is None and not self.smooth:
            return ops.softmax(scores)
        xp = ops.xp
        batch, heads, length, _ = scores.shape
        if head_sink is None:
            sink = xp.zeros((batch, heads, length, 1), dtype=ops.compute)
        else:
            sink = xp.broadcast_to(
                ops.cast(head_sink).reshape(1, -1, 1, 1), (batch, heads, length, 1)
            )
        return ops.softmax(xp.concatenate((scores, sink), axis=-1))[..., :-1]


DEFS = (OpDef("GroupQueryAttention", 1, GroupQueryAttention, domain=MICROSOFT),)
