"""Models as a new user exports them since torch 2.9: `torch.onnx.export(model, args, path)`,
whose default is the dynamo exporter (torch.export, then onnxscript's translation and
optimizer; opset 18+, weights in a `.onnx.data` file beside the model, axes as inputs).

`CASES` maps a name to a factory `make(batch) -> (module, example args)`, all randomly
initialised (nothing downloaded): torchvision, timm and tiny Hugging Face transformers models,
and small modules that each exercise a few operators the way the exporter writes them.
`export_dynamo` writes one; `feeds_for_args` turns the example args into the graph's feeds.
tools/dynamo_export_sweep.py runs them all against onnxruntime; tests/test_real_exports.py
runs a few live and stores goldens of the smallest (tests/models/real/dynamo-*).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

Factory = Callable[[int], tuple[Any, tuple[Any, ...]]]


def _torch() -> Any:
    import torch

    return torch


class Lambda:
    """A module around a function of its inputs and a few parameters (built lazily so that
    importing this file needs no torch)."""

    def __new__(cls, function: Callable, **parameters: Any) -> Any:
        torch = _torch()

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                for name, module in parameters.items():
                    setattr(self, name, module)

            def forward(self, *args: Any) -> Any:
                return function(self, *args)

        return Wrapped().eval()


def _image(batch: int, channels: int = 3, size: int = 64) -> Any:
    return _torch().randn(batch, channels, size, size)


def _vision(build: Callable[[], Any], size: int | None = None) -> Factory:
    """Images of `size`, or by default of 32·batch (64 at the export's batch of 2, 96 at 3),
    so that a dynamic export runs at another height and width as well."""

    def make(batch: int) -> tuple[Any, tuple[Any, ...]]:
        from real_exports import _lively

        return _lively(build()), (_image(batch, size=size or 32 * batch),)

    return make


def _vision_cases() -> dict[str, Factory]:
    def tv(name: str, **extra: Any) -> Callable[[], Any]:
        import torchvision.models as tvm

        return lambda: getattr(tvm, name)(weights=None, **extra)

    def timm(name: str, **extra: Any) -> Callable[[], Any]:
        def build() -> Any:
            import timm as library

            return library.create_model(name, num_classes=10, **extra)

        return build

    def segmentation(name: str) -> Callable[[], Any]:
        def build() -> Any:
            from torchvision.models import segmentation as seg

            return getattr(seg, name)(weights=None, weights_backbone=None, num_classes=4)

        return build

    def detection(name: str) -> Callable[[], Any]:
        def build() -> Any:
            from torchvision.models import detection as det

            return getattr(det, name)(weights=None, weights_backbone=None, num_classes=5)

        return build

    def vit_b_16() -> Any:
        import torchvision.models as tvm

        return tvm.VisionTransformer(
            image_size=64,
            patch_size=16,
            num_layers=2,
            num_heads=2,
            hidden_dim=32,
            mlp_dim=64,
            num_classes=10,
        )

    def swin_t() -> Any:
        from torchvision.models.swin_transformer import SwinTransformer

        return SwinTransformer(
            patch_size=[4, 4],
            embed_dim=16,
            depths=[1, 1],
            num_heads=[2, 2],
            window_size=[4, 4],
            num_classes=10,
        )

    return {
        "resnet18": _vision(tv("resnet18", num_classes=10)),
        "mobilenet-v2": _vision(tv("mobilenet_v2", num_classes=10)),
        "mobilenet-v3-small": _vision(tv("mobilenet_v3_small", num_classes=10)),
        "efficientnet-b0": _vision(tv("efficientnet_b0", num_classes=10)),
        "regnet-y-400mf": _vision(tv("regnet_y_400mf", num_classes=10)),
        "squeezenet": _vision(tv("squeezenet1_1", num_classes=10)),
        "shufflenet-v2": _vision(tv("shufflenet_v2_x0_5", num_classes=10)),
        "densenet121": _vision(tv("densenet121", num_classes=10)),
        "convnext-tiny": _vision(tv("convnext_tiny", num_classes=10)),
        "vit-b-16-tiny": _vision(vit_b_16, size=64),
        "swin-t-tiny": _vision(swin_t),
        "lraspp": _vision(segmentation("lraspp_mobilenet_v3_large")),
        "deeplabv3": _vision(segmentation("deeplabv3_mobilenet_v3_large")),
        "ssdlite": _vision(detection("ssdlite320_mobilenet_v3_large"), size=320),
        "fasterrcnn": _vision(detection("fasterrcnn_mobilenet_v3_large_320_fpn"), size=320),
        "timm-convnext-atto": _vision(timm("convnext_atto")),
        "timm-mobilevit-xxs": _vision(timm("mobilevit_xxs")),
        "timm-efficientvit-b0": _vision(timm("efficientvit_b0")),
        "timm-vit-tiny": _vision(timm("vit_tiny_patch16_224", img_size=64), size=64),
    }


# -- transformers -------------------------------------------------------------------------------


def _text(build: Callable[[], Any], *, mask: bool = True) -> Factory:
    """Token ids (and an attention mask padding the last row's last two tokens) of a length
    that grows with the batch, so that a dynamic export runs at another length too."""

    def make(batch: int) -> tuple[Any, tuple[Any, ...]]:
        torch = _torch()
        model = build().eval()
        length = 5 + batch
        ids = torch.randint(1, 100, (batch, length))
        if not mask:
            return model, (ids,)
        attention = torch.ones(batch, length, dtype=torch.int64)
        attention[-1, -2:] = 0
        return model, (ids, attention)

    return make


def _returning_tensors(
    model: Any, keys: tuple[str, ...], inputs: tuple[str, ...] = ("input_ids", "attention_mask")
) -> Any:
    """The model's outputs named `keys` as a tuple, from its keyword `inputs` (a ModelOutput
    with a cache in it would be flattened into every layer's keys and values)."""

    def forward(self: Any, *args: Any) -> tuple[Any, ...]:
        out = self.inner(**dict(zip(inputs, args, strict=True)))
        return tuple(getattr(out, key) for key in keys)

    return Lambda(forward, inner=model)


def _transformer_cases() -> dict[str, Factory]:
    def t() -> Any:
        import transformers

        return transformers

    encoder = dict(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )

    def gpt2() -> Any:
        return t().GPT2LMHeadModel(
            t().GPT2Config(
                vocab_size=100,
                n_embd=32,
                n_layer=2,
                n_head=2,
                n_positions=64,
                initializer_range=0.2,
            )
        )

    def gpt2_with_past(batch: int) -> tuple[Any, tuple[Any, ...]]:
        """One decode step from a cache of 4 positions, the cache as plain tensors in and
        out (what an exporter for generation writes)."""
        torch = _torch()
        from transformers.cache_utils import DynamicCache

        model = gpt2().eval()
        layers, heads, past, size = 2, 2, 4, 16

        def step(self: Any, ids: Any, mask: Any, *cache: Any) -> Any:
            pairs = DynamicCache(config=self.inner.config)
            for layer in range(layers):
                pairs.update(cache[2 * layer], cache[2 * layer + 1], layer)
            out = self.inner(
                input_ids=ids, attention_mask=mask, past_key_values=pairs, use_cache=True
            )
            present = out.past_key_values
            flat = []
            for layer in range(layers):
                flat += [present.layers[layer].keys, present.layers[layer].values]
            return (out.logits, *flat)

        cache = tuple(torch.randn(batch, heads, past, size) for _ in range(2 * layers))
        ids = torch.randint(1, 100, (batch, 1))
        mask = torch.ones(batch, past + 1, dtype=torch.int64)
        return Lambda(step, inner=model), (ids, mask, *cache)

    def llama() -> Any:
        return t().LlamaModel(
            t().LlamaConfig(**{**encoder, "num_attention_heads": 4}, num_key_value_heads=2)
        )

    def t5_encoder() -> Any:
        return t().T5EncoderModel(
            t().T5Config(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2)
        )

    def whisper_encoder(batch: int) -> tuple[Any, tuple[Any, ...]]:
        torch = _torch()
        config = t().WhisperConfig(
            vocab_size=100,
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            num_mel_bins=16,
            max_source_positions=16,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=1,
        )
        model = t().WhisperModel(config).get_encoder().eval()
        encoder = _returning_tensors(model, ("last_hidden_state",), ("input_features",))
        return encoder, (torch.randn(batch, 16, 32),)

    def vit(batch: int) -> tuple[Any, tuple[Any, ...]]:
        config = t().ViTConfig(
            image_size=32,
            patch_size=8,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
        )
        return t().ViTModel(config).eval(), (_image(batch, size=32),)

    def deberta() -> Any:
        return t().DebertaV2Model(
            t().DebertaV2Config(
                **encoder,
                relative_attention=True,
                position_buckets=16,
                max_relative_positions=32,
                pos_att_type=["p2c", "c2p"],
            )
        )

    return {
        "hf-bert": _text(lambda: t().BertModel(t().BertConfig(**encoder))),
        "hf-distilbert": _text(
            lambda: t().DistilBertModel(
                t().DistilBertConfig(
                    vocab_size=100,
                    dim=32,
                    n_layers=2,
                    n_heads=2,
                    hidden_dim=64,
                    max_position_embeddings=64,
                )
            )
        ),
        "hf-roberta": _text(lambda: t().RobertaModel(t().RobertaConfig(**encoder, pad_token_id=1))),
        "hf-gpt2": _text(lambda: _returning_tensors(gpt2(), ("logits",))),
        "hf-gpt2-with-past": gpt2_with_past,
        "hf-llama": _text(lambda: _returning_tensors(llama(), ("last_hidden_state",))),
        "hf-t5-encoder": _text(t5_encoder),
        "hf-whisper-encoder": whisper_encoder,
        "hf-vit": vit,
        "hf-deberta-v2": _text(deberta),
    }


# -- small modules, a few operators each ------------------------------------------------------


def _op(
    function: Callable,
    *shapes: tuple[int, ...],
    ints: dict[int, int] | None = None,
    **parameters: Callable[[], Any],
) -> Factory:
    """A module computing `function(self, *inputs)`; inputs of `shapes` with the batch first
    (-1 stands for the batch), random normal, or integers below `ints[position]`."""

    def make(batch: int) -> tuple[Any, tuple[Any, ...]]:
        torch = _torch()
        built = {name: factory() for name, factory in parameters.items()}
        args = []
        for position, shape in enumerate(shapes):
            dims = tuple(batch if d == -1 else d for d in shape)
            if ints and position in ints:
                args.append(torch.randint(0, ints[position], dims))
            else:
                args.append(torch.randn(dims))
        return Lambda(function, **built), tuple(args)

    return make


def _op_cases() -> dict[str, Factory]:
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    def recurrent(kind: type, **extra: Any) -> Callable[[], Any]:
        return lambda: kind(8, 12, **extra)

    def causal_mask(length: int) -> Any:
        return torch.ones(length, length, dtype=torch.bool).tril()

    # fmt: off
    return {
        "lstm-bidirectional-2layer": _op(
            lambda s, x: s.rnn(x)[0], (-1, 5, 8),
            rnn=recurrent(nn.LSTM, num_layers=2, bidirectional=True, batch_first=True),
        ),
        "lstm-seq-first-state": _op(
            lambda s, x: s.rnn(x), (5, -1, 8), rnn=recurrent(nn.LSTM)
        ),
        "gru-bidirectional-2layer": _op(
            lambda s, x: s.rnn(x)[0], (-1, 5, 8),
            rnn=recurrent(nn.GRU, num_layers=2, bidirectional=True, batch_first=True),
        ),
        "rnn-tanh": _op(lambda s, x: s.rnn(x)[0], (-1, 5, 8),
                        rnn=recurrent(nn.RNN, batch_first=True)),
        "sdpa-causal": _op(
            lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            (-1, 2, 6, 8), (-1, 2, 6, 8), (-1, 2, 6, 8),
        ),
        "sdpa-bool-mask": _op(
            lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(6)),
            (-1, 2, 6, 8), (-1, 2, 6, 8), (-1, 2, 6, 8),
        ),
        "sdpa-float-mask-scale": _op(
            lambda s, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
            (-1, 2, 6, 8), (-1, 2, 4, 8), (-1, 2, 4, 8), (-1, 1, 6, 4),
        ),
        "multihead-attention": _op(
            lambda s, x: s.mha(x, x, x, need_weights=False)[0], (-1, 6, 16),
            mha=lambda: nn.MultiheadAttention(16, 4, batch_first=True),
        ),
        "multihead-attention-key-padding": _op(
            lambda s, x, m: s.mha(x, x, x, key_padding_mask=m > 0.5)[0], (-1, 6, 16), (-1, 6),
            mha=lambda: nn.MultiheadAttention(16, 4, batch_first=True),
        ),
        "transformer-encoder-layer": _op(
            lambda s, x: s.layer(x), (-1, 6, 16),
            layer=lambda: nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0),
        ),
        "norms": _op(
            lambda s, x: (s.ln(x.permute(0, 2, 3, 1)), s.gn(x), s.inorm(x), s.bn(x),
                          F.normalize(x, dim=1), F.rms_norm(x, (8,))),
            (-1, 6, 5, 8),
            ln=lambda: nn.LayerNorm(6), gn=lambda: nn.GroupNorm(3, 6),
            inorm=lambda: nn.InstanceNorm2d(6, affine=True), bn=lambda: nn.BatchNorm2d(6).eval(),
        ),
        "interpolate": _op(
            lambda s, x: (
                F.interpolate(x, scale_factor=2, mode="nearest"),
                F.interpolate(x, size=(7, 9), mode="nearest"),
                F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
                F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True),
                F.interpolate(x, scale_factor=1.5, mode="bicubic", align_corners=False),
                F.interpolate(x, size=(3, 3), mode="bicubic", align_corners=True),
                F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=False),
            ),
            (-1, 3, 6, 8),
        ),
        "interpolate-1d-3d": _op(
            lambda s, x, y: (F.interpolate(x, scale_factor=2, mode="linear"),
                             F.interpolate(y, scale_factor=2, mode="trilinear"),
                             F.upsample_nearest(y, scale_factor=2)),
            (-1, 3, 6), (-1, 2, 3, 4, 5),
        ),
        "pad-modes": _op(
            lambda s, x: (F.pad(x, (1, 2, 3, 0)), F.pad(x, (1, 2, 2, 1), value=0.5),
                          F.pad(x, (2, 2, 1, 1), mode="reflect"),
                          F.pad(x, (2, 1, 1, 2), mode="replicate"),
                          F.pad(x, (2, 1, 1, 2), mode="circular"), F.pad(x, (-1, 1, 0, -2))),
            (-1, 3, 6, 8),
        ),
        "conv-family": _op(
            lambda s, x, y: (s.c1(x), s.ct(y), s.dil(y), s.grp(y), s.c3(y.unsqueeze(2))),
            (-1, 4, 20), (-1, 4, 6, 7),
            c1=lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1),
            ct=lambda: nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
            dil=lambda: nn.Conv2d(4, 4, 3, dilation=2, padding="same"),
            grp=lambda: nn.Conv2d(4, 8, 3, groups=2, padding_mode="reflect", padding=1),
            c3=lambda: nn.Conv3d(4, 2, (1, 3, 3)),
        ),
        "conv-transpose-1d": _op(
            lambda s, x: s.ct(x), (-1, 4, 9),
            ct=lambda: nn.ConvTranspose1d(4, 2, 4, stride=3, padding=1, groups=2),
        ),
        "einsum": _op(
            lambda s, a, b, c: (torch.einsum("bij,bjk->bik", a, b), torch.einsum("bii->bi", c),
                                torch.einsum("bij->bji", a), torch.einsum("bij,bij->b", a, a),
                                torch.einsum("bhid,bhjd->bhij", c[:, None], c[:, None])),
            (-1, 3, 4), (-1, 4, 5), (-1, 4, 4),
        ),
        "topk-sort-argmax": _op(
            lambda s, x: (*torch.topk(x, 3, dim=-1), *torch.topk(x, 2, dim=1, largest=False),
                          *torch.sort(x, dim=-1, descending=True), torch.argsort(x, dim=1),
                          x.argmax(-1), x.argmin(1, keepdim=True), x.max(dim=1).values),
            (-1, 5, 7),
        ),
        "cumsum-where-clamp-pow": _op(
            lambda s, x, y: (torch.cumsum(x, 1), torch.cumsum(x, -1).flip(-1),
                             torch.where(x > 0, x, y), x.clamp(-0.5, 0.7), x.clamp(min=0.1),
                             x.abs().pow(1.5), torch.pow(x, 2), torch.pow(2.0, x),
                             x.clamp_max(y)),
            (-1, 5, 7), (-1, 5, 7),
        ),
        "gather-scatter-index": _op(
            lambda s, x, i, j: (torch.gather(x, 1, i), x.index_select(1, j[0]),
                                x.scatter(1, i, 1.0), torch.zeros_like(x).scatter_add(1, i, x),
                                x[:, j[0]], x[:, 1:4:2], x[..., -1],
                                torch.zeros_like(x).index_put((j[0],), torch.ones(7)),
                                x.index_add(1, j[0], x[:, :3])),
            (-1, 5, 7), (-1, 5, 7), (1, 3), ints={1: 5, 2: 5},
        ),
        "masked-fill-embedding": _op(
            lambda s, ids, x: (s.emb(ids), x.masked_fill(x > 0.3, -1e4),
                               x.masked_fill(torch.arange(7) > 4, 0.0), s.bag(ids)),
            (-1, 6), (-1, 5, 7), ints={0: 20},
            emb=lambda: nn.Embedding(20, 8, padding_idx=0),
            bag=lambda: nn.EmbeddingBag(20, 4, mode="mean"),
        ),
        "activations": _op(
            lambda s, x: (F.softmax(x, -1), F.log_softmax(x, 1), F.gelu(x),
                          F.gelu(x, approximate="tanh"), F.silu(x), F.hardswish(x),
                          F.hardsigmoid(x), F.mish(x), F.elu(x), F.selu(x), F.leaky_relu(x, 0.1),
                          F.softplus(x), F.relu6(x), torch.sigmoid(x), torch.tanh(x),
                          F.prelu(x, torch.tensor([0.25])), F.glu(x, -1)[..., :3],
                          torch.erf(x), F.logsigmoid(x), torch.rsqrt(x.abs() + 1),
                          F.softmin(x, -1), F.hardtanh(x)),
            (-1, 5, 8),
        ),
        "unfold-fold-pixel-shuffle": _op(
            lambda s, x: (F.unfold(x, 3, padding=1, stride=2),
                          F.fold(F.unfold(x, 2, stride=2), (6, 8), 2, stride=2),
                          F.pixel_shuffle(x[:, :4], 2), F.pixel_unshuffle(x, 2),
                          x.unfold(3, 3, 2)),
            (-1, 4, 6, 8),
        ),
        "pooling": _op(
            lambda s, x: (F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, (3, 2)),
                          F.adaptive_max_pool2d(x, (3, 4)), F.avg_pool2d(x, 3, 2, 1),
                          F.avg_pool2d(x, 3, 2, 1, count_include_pad=False, ceil_mode=True),
                          F.max_pool2d(x, 3, 2, 1, ceil_mode=True), F.max_pool1d(x[:, 0], 2),
                          F.lp_pool2d(x, 2, 2), F.avg_pool1d(x[:, 0], 3)),
            (-1, 3, 9, 8),
        ),
        "max-pool-with-indices": _op(
            lambda s, x: F.max_pool2d(x, 2, 2, return_indices=True), (-1, 3, 6, 8)
        ),
        "reductions-shapes": _op(
            lambda s, x: (x.sum((1, 2)), x.mean(-1, keepdim=True), x.amax(1), x.std(-1),
                          x.var(1, unbiased=False), x.prod(-1), x.norm(dim=-1),
                          torch.logsumexp(x, 1), x.reshape(x.shape[0], -1), x.transpose(1, 2),
                          x.flatten(1), x.unsqueeze(1).expand(-1, 2, -1, -1),
                          torch.cat([x, x * 2], 1), torch.stack([x, x], -1), x.split(2, 1)[1],
                          x.chunk(2, -1)[0], x.repeat(1, 2, 1), x.tile(2), x.roll(2, 1),
                          torch.tril(x), torch.triu(x, 1), x.any(-1), x.all(1),
                          (x > 0).sum(-1), x.mean()),
            (-1, 4, 6),
        ),
        "arithmetic-casts": _op(
            lambda s, x, i: (x // 0.3, torch.remainder(x, 0.7), torch.fmod(x, 0.7), x.round(),
                             x.floor(), x.ceil(), x.trunc(), x.sign(), torch.atan2(x, x + 1),
                             x.to(torch.int32), i.float() / 3, i // 2, i % 3, i * i,
                             torch.bitwise_and(i, 3), x.to(torch.float16).float(),
                             torch.isnan(x / x), torch.nan_to_num(x / 0), x.reciprocal(),
                             torch.log1p(x.abs()), torch.expm1(x), torch.clamp(i, 1, 3),
                             torch.maximum(x, torch.zeros(1)), torch.lerp(x, x * 2, 0.3)),
            (-1, 5), (-1, 5), ints={1: 10},
        ),
        "creation-range-mask": _op(
            lambda s, x: (x + torch.arange(x.shape[-1]), torch.ones_like(x).cumsum(-1),
                          torch.full((x.shape[0], 3), 2.5), x.new_zeros(x.shape),
                          torch.ones(6, 6).triu(1)[None] * x[:, :1, None],
                          torch.arange(0, 1, 0.25) + x[:, :4], torch.linspace(0, 1, 5),
                          torch.eye(3), x.flip(0),
                          torch.zeros(x.shape[0], 2, dtype=torch.int64)),
            (-1, 6),
        ),
        "matmul-linear-bmm": _op(
            lambda s, x, y: (s.lin(x), x @ y, torch.bmm(x, y), s.bil(x, x),
                             F.linear(x, torch.ones(3, 6)), torch.baddbmm(x @ y, x, y),
                             torch.addmm(torch.ones(3), x[0], y[0]), torch.outer(x[0, 0],
                                                                                  y[0, 0])),
            (-1, 4, 6), (-1, 6, 3), lin=lambda: nn.Linear(6, 5), bil=lambda: nn.Bilinear(6, 6, 2),
        ),
        "cond-branches": _op(
            lambda s, x: torch.cond(x.sum() > 0, lambda y: y.sin() * 2, lambda y: y.cos() - 1,
                                    (x,)),
            (-1, 5),
        ),
        "fft-stft": _op(
            lambda s, x: (torch.fft.rfft(x, dim=-1).abs(), torch.fft.fft(x).real,
                          torch.fft.irfft(torch.fft.rfft(x)),
                          torch.stft(x, 16, hop_length=4, window=torch.hann_window(16),
                                     return_complex=True).abs()),
            (-1, 64),
        ),
        "grid-sample-affine": _op(
            lambda s, x, g: (F.grid_sample(x, g.tanh(), align_corners=False),
                             F.grid_sample(x, g.tanh(), mode="nearest", padding_mode="border",
                                           align_corners=True),
                             F.affine_grid(torch.eye(2, 3)[None].expand(x.shape[0], -1, -1),
                                           (x.shape[0], 1, 4, 5), align_corners=False)),
            (-1, 2, 6, 8), (-1, 4, 5, 2),
        ),
    }
    # fmt: on


def cases() -> dict[str, Factory]:
    """Every model and module of the sweep, by name."""
    return {**_vision_cases(), **_transformer_cases(), **_op_cases()}


def _quietly(function: Callable[[], Any]) -> Any:
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return function()


def export_dynamo(
    name: str,
    folder: Path,
    *,
    opset: int | None = None,
    dynamic: bool = False,
    optimize: bool = True,
    dtype: str | None = None,
    batch: int = 2,
) -> tuple[Path, tuple[Any, ...]]:
    """`torch.onnx.export(module, args, path)` at its defaults (the dynamo exporter, its
    optimizer, external data), at `opset` when given, with every input dimension `Dim.AUTO`
    when `dynamic` (dynamic where the model lets it be), without onnxscript's optimizer unless
    `optimize`, the module and its float inputs cast to `dtype` when given; the model path and
    the example args."""
    torch = _torch()
    torch.manual_seed(0)
    module, args = cases()[name](batch)
    if dtype is not None:
        module, args = _cast(module, args, getattr(torch, dtype))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.onnx"
    extra: dict[str, Any] = {"optimize": optimize}
    if opset is not None:
        extra["opset_version"] = opset
    if dynamic:
        extra["dynamic_shapes"] = _every_dimension_auto(module, args)
    with torch.no_grad():
        _quietly(lambda: torch.onnx.export(module, args, str(path), **extra))
    return path, args


def _every_dimension_auto(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """dynamic_shapes naming every dimension Dim.AUTO, one entry per forward parameter (a
    `*args` forward takes them all as one)."""
    import inspect

    torch = _torch()
    shapes = tuple({axis: torch.export.Dim.AUTO for axis in range(a.ndim)} for a in args)
    kinds = [p.kind for p in inspect.signature(module.forward).parameters.values()]
    return (shapes,) if inspect.Parameter.VAR_POSITIONAL in kinds else shapes


def _cast(module: Any, args: tuple[Any, ...], dtype: Any) -> tuple[Any, tuple[Any, ...]]:
    return module.to(dtype), tuple(a.to(dtype) if a.is_floating_point() else a for a in args)


def args_for(name: str, batch: int, dtype: str | None = None) -> tuple[Any, ...]:
    """The same case's example args at another batch size (the weights do not matter)."""
    torch = _torch()
    torch.manual_seed(1)
    module, args = cases()[name](batch)
    return args if dtype is None else _cast(module, args, getattr(torch, dtype))[1]


def feeds_for_args(path: Path, args: tuple[Any, ...]) -> dict[str, np.ndarray]:
    """The graph's inputs, in order, from the example args (the exporter names them after
    forward's parameters and drops none of these tensors)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    names = [value.name for value in graph.input]
    arrays = [arg.detach().numpy() for arg in args]
    if len(names) != len(arrays):
        raise ValueError(f"{path.name}: {len(names)} inputs for {len(arrays)} args")
    return dict(zip(names, arrays, strict=True))
