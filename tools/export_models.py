"""Export the small PyTorch models that tests/test_exported_models.py runs.

Run it by hand, never in CI: it needs torch, which is not a dependency of onemodel.

    pip install torch onnxscript   # locally only
    python tools/export_models.py [--out tests/models]
    python tools/export_models.py --bench-set [--out benchmarks/models]   # larger, for bench

Each model is exported with the TorchScript exporter (``dynamo=False``) at opset 17 with a
dynamic ``batch`` axis, so the graphs carry the op patterns that real exported models have:
Shape→Gather→Unsqueeze→Concat→Reshape chains, Gemm, the Erf form of GELU, unfused attention.
``patterns`` is exported at opset 14, where LayerNorm too is written out op by op, for the
pattern passes' tests (tests/test_passes_patterns.py).
Beside each ``<name>.onnx`` goes ``<name>.inputs.npz``: one input set keyed by input name, and
the outputs that onnxruntime (CPU provider) computes for it under ``output:<output name>``.
"""

from __future__ import annotations

import argparse
import collections
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

OPSET = 17
TOLERANCE = 1e-4
MAX_BYTES = 1 << 20
VOCAB = 100


class MLP(nn.Module):
    """Linear-ReLU-Linear-GELU-Linear on (batch, 32)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(32, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
            nn.GELU(),
            nn.Linear(64, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
    )


class ResidualBlock(nn.Module):
    """relu(x + bn(conv(relu(bn(conv(x))))))."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.first = conv_bn(channels, channels)
        self.second = conv_bn(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.second(torch.relu(self.first(x))))


class CNN(nn.Module):
    """A small image classifier on (batch, 3, 32, 32) → (batch, 10)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            conv_bn(16, 32, stride=2),
            nn.ReLU(),
            ResidualBlock(32),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class EncoderLayer(nn.Module):
    """A post-norm transformer encoder layer written out by hand.

    It computes what ``nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0,
    activation="gelu", batch_first=True)`` does in eval mode. That module is not exported
    directly: under the TorchScript tracer ``nn.MultiheadAttention`` folds the traced batch and
    sequence lengths into its Reshape targets (the export then fails on any other shape), so the
    heads are split here with sizes read from ``x.shape``, which the tracer keeps dynamic.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int) -> None:
        super().__init__()
        self.nhead = nhead
        self.head_dim = d_model // nhead
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, dim_feedforward)
        self.ff2 = nn.Linear(dim_feedforward, d_model)
        self.act = nn.GELU()
        self.norm2 = nn.LayerNorm(d_model)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, d_model) → (batch, nhead, seq, head_dim)."""
        return x.reshape(x.shape[0], x.shape[1], self.nhead, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        attended = torch.matmul(torch.softmax(scores, dim=-1), v)
        attended = attended.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        x = self.norm1(x + self.out(attended))
        return self.norm2(x + self.ff2(self.act(self.ff1(x))))


class Transformer(nn.Module):
    """Embedding, two encoder layers, a final LayerNorm: (batch, seq) → (batch, seq, 64)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 64)
        self.layers = nn.ModuleList(EncoderLayer(64, 4, 128) for _ in range(2))
        self.norm = nn.LayerNorm(64)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids) * math.sqrt(64)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class PatternBlock(nn.Module):
    """LayerNorm, attention with an additive mask, then both GELU forms, on (batch, seq, 32):
    the three patterns the graph passes recognise, as the exporter writes them at opset 14."""

    def __init__(self, d_model: int = 32, nhead: int = 4) -> None:
        super().__init__()
        self.nhead, self.head_dim = nhead, d_model // nhead
        self.norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.ff = nn.Linear(d_model, d_model)
        self.erf_gelu = nn.GELU()
        self.tanh_gelu = nn.GELU(approximate="tanh")

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, seq = x.shape[0], x.shape[1]
        q, k, v = self.qkv(self.norm(x)).split(self.nhead * self.head_dim, dim=-1)
        q, k, v = (
            t.reshape(batch, seq, self.nhead, self.head_dim).transpose(1, 2) for t in (q, k, v)
        )
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim) + mask
        attended = torch.matmul(torch.softmax(scores, dim=-1), v)
        hidden = attended.transpose(1, 2).reshape(batch, seq, -1)
        return self.tanh_gelu(self.ff(self.erf_gelu(hidden)))


def randomise_batchnorm(model: nn.Module, generator: torch.Generator) -> None:
    """Give every BatchNorm non-trivial statistics and affine parameters, so it is tested."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            n = module.num_features
            with torch.no_grad():
                module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
                module.running_var.copy_(torch.rand(n, generator=generator) * 0.5 + 0.75)
                module.weight.copy_(torch.rand(n, generator=generator) * 0.5 + 0.75)
                module.bias.copy_(torch.randn(n, generator=generator) * 0.1)


def randomise_layernorm(model: nn.Module, generator: torch.Generator) -> None:
    """Give every LayerNorm a non-trivial scale and shift, so the affine part is tested.

    This also keeps the exporter from sharing the identical default ones and zeros between
    the norms through Identity nodes.
    """
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            n = module.normalized_shape[0]
            with torch.no_grad():
                module.weight.copy_(torch.rand(n, generator=generator) * 0.5 + 0.75)
                module.bias.copy_(torch.randn(n, generator=generator) * 0.1)


def build(name: str) -> tuple[nn.Module, dict[str, np.ndarray], list[str], dict]:
    """The model in eval mode, its inputs, its output names and its export options."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if name == "mlp":
        model = MLP()
        inputs = {"input": rng.standard_normal((2, 32)).astype(np.float32)}
        outputs = ["logits"]
        axes = {"input": {0: "batch"}, "logits": {0: "batch"}}
        options: dict = {}
    elif name == "cnn":
        model = CNN()
        randomise_batchnorm(model, torch.Generator().manual_seed(1))
        inputs = {"image": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}
        outputs = ["logits"]
        axes = {"image": {0: "batch"}, "logits": {0: "batch"}}
        # Constant folding in eval mode runs the eval peephole pass, which fuses each
        # BatchNormalization into the Conv before it; without it the BatchNormalization
        # nodes stay in the graph, in inference form (one output, running statistics).
        options = {"do_constant_folding": False}
    elif name == "transformer":
        model = Transformer()
        randomise_layernorm(model, torch.Generator().manual_seed(1))
        inputs = {"input_ids": rng.integers(0, VOCAB, size=(2, 7), dtype=np.int64)}
        outputs = ["hidden"]
        axes = {"input_ids": {0: "batch", 1: "seq"}, "hidden": {0: "batch", 1: "seq"}}
        options = {}
    elif name == "patterns":
        model = PatternBlock()
        randomise_layernorm(model, torch.Generator().manual_seed(1))
        inputs = {
            "x": rng.standard_normal((2, 7, 32)).astype(np.float32),
            "mask": rng.standard_normal((2, 1, 1, 7)).astype(np.float32),
        }
        outputs = ["y"]
        axes = {"x": {0: "batch"}, "mask": {0: "batch"}, "y": {0: "batch"}}
        options = {"opset_version": 14}
    else:
        raise ValueError(name)
    model.eval()
    options["dynamic_axes"] = axes
    return model, inputs, outputs, options


def op_summary(model: onnx.ModelProto) -> str:
    counts = collections.Counter(node.op_type for node in model.graph.node)
    ops = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    opsets = {entry.domain or "ai.onnx": entry.version for entry in model.opset_import}
    lines = [f"  opset {opsets}, {len(model.graph.node)} nodes"]
    lines += [f"    {op:<22} {count}" for op, count in ops]
    return "\n".join(lines)


def compare(
    name: str, output_names: list[str], expected: list[torch.Tensor], got: list[np.ndarray]
) -> float:
    """The largest absolute difference; exits when any output is outside the tolerance."""
    worst = 0.0
    for out_name, want, have in zip(output_names, expected, got, strict=True):
        want = want.numpy()
        if want.shape != have.shape:
            raise SystemExit(f"{name}: {out_name} has shape {have.shape}, torch {want.shape}")
        diff = float(np.max(np.abs(want - have)))
        worst = max(worst, diff)
        if not np.allclose(have, want, rtol=TOLERANCE, atol=TOLERANCE):
            raise SystemExit(f"{name}: onnxruntime differs from torch on {out_name} by {diff}")
    return worst


def resized(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs of batch 3 (and sequence length 5 for token ids), of the same kind."""
    rng = np.random.default_rng(1)
    others = {}
    for key, array in inputs.items():
        if np.issubdtype(array.dtype, np.integer):
            others[key] = rng.integers(0, VOCAB, size=(3, 5), dtype=array.dtype)
        else:
            others[key] = rng.standard_normal((3, *array.shape[1:])).astype(array.dtype)
    return others


def export(name: str, out: Path) -> None:
    model, inputs, output_names, options = build(name)
    input_names = list(inputs)
    path = out / f"{name}.onnx"
    args = tuple(torch.from_numpy(array) for array in inputs.values())
    opset = options.pop("opset_version", OPSET)
    torch.onnx.export(
        model,
        args,
        str(path),
        input_names=input_names,
        output_names=output_names,
        opset_version=opset,
        dynamo=False,
        **options,
    )
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    size = path.stat().st_size
    if size >= MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over {MAX_BYTES}")

    with torch.no_grad():
        expected = model(*args)
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, inputs)
    names = [output.name for output in session.get_outputs()]
    assert names == output_names, names

    worst = compare(name, output_names, expected, got)

    # The dynamic axes must really be dynamic: run another batch (and sequence) length.
    others = resized(inputs)
    with torch.no_grad():
        expected = model(*(torch.from_numpy(array) for array in others.values()))
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    resized_worst = compare(name, output_names, expected, session.run(None, others))

    arrays = dict(inputs)
    arrays.update({f"output:{n}": a for n, a in zip(output_names, got, strict=True)})
    np.savez(out / f"{name}.inputs.npz", **arrays)

    shapes = ", ".join(f"{key} {tuple(array.shape)}" for key, array in others.items())
    print(f"{name}.onnx: {size} bytes, max |torch - onnxruntime| = {worst:.3g}")
    print(f"  resized inputs ({shapes}): max |torch - onnxruntime| = {resized_worst:.3g}")
    print(op_summary(proto))


# -- the benchmark set (`--bench-set`): larger models for `onemodel bench`, not for tests -------
#
# Written to benchmarks/models/ (too large for tests/models) with the same `<name>.inputs.npz`
# beside each, which `onemodel bench benchmarks/models/<name>.onnx` picks up.

BENCH_SET = (
    "resnet18_224",
    "bert_seq128",
    "gpt2_block",
    "lstm",
    "gru",
    "resnet50_224",
    "mobilenet_v2",
    "mobilenet_v3",
    "efficientnet_b0",
    "yolo_silu",
    "crnn_ocr",
    "keras_cnn1d",
    "db_detector",
)
# The torchvision / timm architectures of the set, built with random weights (nothing downloaded).
VISION = {
    "mobilenet_v2": ("torchvision", "mobilenet_v2"),
    "mobilenet_v3": ("torchvision", "mobilenet_v3_large"),
    "efficientnet_b0": ("timm", "efficientnet_b0"),
}
BENCH_OUT = Path("benchmarks/models")


class BasicBlock(nn.Module):
    """ResNet's basic block, with a strided 1x1 projection when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.first = conv_bn(cin, cout, stride)
        self.second = conv_bn(cout, cout)
        self.project = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.project(x) + self.second(torch.relu(self.first(x))))


def resnet_stem() -> nn.Sequential:
    """7x7/2 convolution to 64 channels, BatchNorm, ReLU, 3x3/2 max pooling."""
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
    )


class ResNet18(nn.Module):
    """ResNet-18 written out (no torchvision): (batch, 3, 224, 224) → (batch, 1000)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = resnet_stem()
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


class Bottleneck(nn.Module):
    """ResNet-50's bottleneck: 1x1 down to `mid`, 3x3 (strided), 1x1 up to 4·mid, with a
    strided 1x1 projection when the shape changes."""

    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = 4 * mid
        self.reduce = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid))
        self.spatial = conv_bn(mid, mid, stride)
        self.expand = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.project = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.expand(torch.relu(self.spatial(torch.relu(self.reduce(x)))))
        return torch.relu(self.project(x) + y)


class ResNet50(nn.Module):
    """ResNet-50 written out (no torchvision): (batch, 3, 224, 224) → (batch, 1000)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = resnet_stem()
        blocks, cin = [], 64
        for mid, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for index in range(count):
                blocks.append(Bottleneck(cin, mid, stride if index == 0 else 1))
                cin = 4 * mid
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


class Bert(nn.Module):
    """A BERT-style encoder on token ids: token + position embeddings, LayerNorm, post-norm
    encoder layers, (batch, seq, d_model). The defaults are BERT-small's sizes (4 layers, 512
    wide, 8 heads); BERT-base is 12 layers, 768 wide, 12 heads."""

    def __init__(
        self, vocab: int = 30522, d_model: int = 512, layers: int = 4, nhead: int = 8
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(512, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, nhead, 4 * d_model) for _ in range(layers)
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.norm(self.tokens(input_ids) + self.positions(positions))
        for layer in self.layers:
            x = layer(x)
        return x


class GPT2Block(nn.Module):
    """One GPT-2 (124M sizes) pre-norm decoder block with a causal mask on (batch, seq, 768)."""

    def __init__(self, d_model: int = 768, nhead: int = 12) -> None:
        super().__init__()
        self.nhead, self.head_dim = nhead, d_model // nhead
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq = x.shape[0], x.shape[1]
        q, k, v = self.qkv(self.ln1(x)).split(self.nhead * self.head_dim, dim=-1)
        q, k, v = (
            t.reshape(batch, seq, self.nhead, self.head_dim).transpose(1, 2) for t in (q, k, v)
        )
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        causal = torch.ones(seq, seq).tril() == 0
        scores = scores.masked_fill(causal, float("-inf"))
        attended = torch.matmul(torch.softmax(scores, dim=-1), v)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, seq, -1))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class Recurrent(nn.Module):
    """A 2-layer LSTM or GRU (hidden 256) on (batch, seq 64, 128) and a linear head."""

    def __init__(self, cell: type[nn.Module]) -> None:
        super().__init__()
        self.rnn = cell(128, 256, num_layers=2, batch_first=True)
        self.head = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0])


def conv_bn_silu(cin: int, cout: int, kernel: int = 3, stride: int = 1) -> nn.Sequential:
    """YOLOv5/v8's Conv: convolution, batch norm, SiLU."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(cout),
        nn.SiLU(),
    )


class CSPBlock(nn.Module):
    """YOLOv8's C2f, shortened: split, two residual 3x3 pairs on one half, concatenate."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        half = channels // 2
        self.split = conv_bn_silu(channels, channels, 1)
        self.inner = nn.Sequential(conv_bn_silu(half, half), conv_bn_silu(half, half))
        self.merge = conv_bn_silu(channels + half, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.split(x).chunk(2, dim=1)
        return self.merge(torch.cat([a, b, b + self.inner(b)], dim=1))


class YoloSiLU(nn.Module):
    """A small YOLOv8-style detector on (batch, 3, 320, 320): strided Conv+SiLU backbone with
    CSP blocks, nearest upsampling into a two-scale neck, 1x1 heads (box + 80 classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn_silu(3, 16, stride=2), conv_bn_silu(16, 32, stride=2))
        self.stage3 = nn.Sequential(CSPBlock(32), conv_bn_silu(32, 64, stride=2), CSPBlock(64))
        self.stage4 = nn.Sequential(conv_bn_silu(64, 128, stride=2), CSPBlock(128))
        self.stage5 = nn.Sequential(conv_bn_silu(128, 256, stride=2), CSPBlock(256))
        self.lateral = conv_bn_silu(256 + 128, 128, 1)
        self.head_small = nn.Conv2d(128, 84, 1)
        self.head_large = nn.Conv2d(256, 84, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p4 = self.stage4(self.stage3(self.stem(x)))
        p5 = self.stage5(p4)
        up = nn.functional.interpolate(p5, scale_factor=2.0, mode="nearest")
        n4 = self.lateral(torch.cat([up, p4], dim=1))
        small = self.head_small(n4).flatten(2)
        large = self.head_large(p5).flatten(2)
        return torch.cat([small, large], dim=2)


class CRNN(nn.Module):
    """A CRNN-style OCR recogniser on (batch, 1, 32, 128): VGG-like conv stack to a width
    sequence, a 2-layer bidirectional LSTM (hidden 128), per-step class logits."""

    def __init__(self, classes: int = 97) -> None:
        super().__init__()

        def block(cin: int, cout: int, pool: tuple[int, int]) -> list[nn.Module]:
            return [
                nn.Conv2d(cin, cout, 3, padding=1),
                nn.BatchNorm2d(cout),
                nn.ReLU(),
                nn.MaxPool2d(pool),
            ]

        self.features = nn.Sequential(
            *block(1, 64, (2, 2)),
            *block(64, 128, (2, 2)),
            *block(128, 256, (2, 1)),
            *block(256, 256, (2, 1)),
            *block(256, 256, (2, 1)),
        )
        self.rnn = nn.LSTM(256, 128, num_layers=2, bidirectional=True, batch_first=True)
        self.classifier = nn.Linear(256, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sequence = self.features(x).squeeze(2).transpose(1, 2)  # (batch, width, channels)
        return self.classifier(self.rnn(sequence)[0])


class KerasCNN1D(nn.Module):
    """A Keras-style 1-D text CNN on token ids (batch, 2048): a one-hot input built by
    Equal -> Cast over a 257-symbol alphabet, Conv1D + ReLU + MaxPool1D stages, global max
    pooling, a dense head."""

    def __init__(self, symbols: int = 257) -> None:
        super().__init__()
        self.register_buffer("alphabet", torch.arange(symbols).reshape(1, 1, symbols))
        self.features = nn.Sequential(
            nn.Conv1d(symbols, 128, 7, padding=3), nn.ReLU(), nn.MaxPool1d(3),
            nn.Conv1d(128, 128, 7, padding=3), nn.ReLU(), nn.MaxPool1d(3),
            nn.Conv1d(128, 128, 3, padding=1), nn.ReLU(),
        )  # fmt: skip
        self.head = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        one_hot = (ids.unsqueeze(-1) == self.alphabet).float()  # Equal -> Cast
        features = self.features(one_hot.transpose(1, 2))
        return self.head(features.amax(dim=2))


class DBDetector(nn.Module):
    """A DB-style (differentiable binarisation) text detector on (batch, 3, 320, 320): a
    small strided backbone, an FPN with nearest Resize to 1/4 scale, and a probability head
    that upsamples with two 2x2 stride-2 ConvTransposes."""

    def __init__(self) -> None:
        super().__init__()
        widths = (16, 32, 64, 128)
        stages, cin = [], 3
        for index, cout in enumerate(widths):
            stride = 4 if index == 0 else 2
            stages.append(
                nn.Sequential(conv_bn(cin, cout, 2), conv_bn(cout, cout, 1))
                if stride == 2
                else nn.Sequential(conv_bn(cin, cout, 2), conv_bn(cout, cout, 2))
            )
            cin = cout
        self.stages = nn.ModuleList(stages)
        self.laterals = nn.ModuleList(nn.Conv2d(w, 64, 1) for w in widths)
        self.smooth = nn.ModuleList(nn.Conv2d(64, 16, 3, padding=1) for _ in widths)
        self.head = nn.Sequential(
            conv_bn(64, 16),
            nn.ConvTranspose2d(16, 16, 2, stride=2), nn.BatchNorm2d(16), nn.ReLU(),
            nn.ConvTranspose2d(16, 1, 2, stride=2), nn.Sigmoid(),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = []
        for stage in self.stages:
            x = stage(x)
            features.append(x)
        laterals = [lateral(f) for lateral, f in zip(self.laterals, features, strict=True)]
        for index in range(len(laterals) - 1, 0, -1):
            laterals[index - 1] = laterals[index - 1] + nn.functional.interpolate(
                laterals[index], scale_factor=2.0, mode="nearest"
            )
        size = laterals[0].shape[2:]
        fused = torch.cat(
            [
                nn.functional.interpolate(smooth(f), size=size, mode="nearest")
                for smooth, f in zip(self.smooth, laterals, strict=True)
            ],
            dim=1,
        )
        return self.head(fused)


def vision_model(name: str) -> nn.Module:
    """A torchvision or timm classifier of the set with random weights."""
    library, architecture = VISION[name]
    if library == "torchvision":
        import torchvision

        return getattr(torchvision.models, architecture)(weights=None)
    import timm

    return timm.create_model(architecture, pretrained=False)


def bench_build(name: str) -> tuple[nn.Module, dict[str, np.ndarray], list[str], dict]:
    """A benchmark-set model in eval mode, its inputs, output names and export options."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    options: dict = {}
    if name == "resnet18_224":
        model: nn.Module = ResNet18()
        randomise_batchnorm(model, torch.Generator().manual_seed(1))
        inputs = {"image": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
        outputs, axes = ["logits"], {"image": {0: "batch"}, "logits": {0: "batch"}}
    elif name == "resnet50_224":
        model = ResNet50()
        randomise_batchnorm(model, torch.Generator().manual_seed(1))
        inputs = {"image": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
        outputs, axes = ["logits"], {"image": {0: "batch"}, "logits": {0: "batch"}}
    elif name in ("bert_seq128", "bert_base_seq128"):
        model = Bert() if name == "bert_seq128" else Bert(d_model=768, layers=12, nhead=12)
        randomise_layernorm(model, torch.Generator().manual_seed(1))
        inputs = {"input_ids": rng.integers(0, 30522, size=(1, 128), dtype=np.int64)}
        outputs = ["hidden"]
        axes = {"input_ids": {0: "batch", 1: "seq"}, "hidden": {0: "batch", 1: "seq"}}
    elif name == "gpt2_block":
        model = GPT2Block()
        randomise_layernorm(model, torch.Generator().manual_seed(1))
        inputs = {"hidden_in": rng.standard_normal((1, 128, 768)).astype(np.float32)}
        outputs = ["hidden"]
        axes = {"hidden_in": {0: "batch", 1: "seq"}, "hidden": {0: "batch", 1: "seq"}}
    elif name in ("lstm", "gru"):
        model = Recurrent(nn.LSTM if name == "lstm" else nn.GRU)
        inputs = {"sequence": rng.standard_normal((1, 64, 128)).astype(np.float32)}
        outputs, axes = ["logits"], {"sequence": {0: "batch"}, "logits": {0: "batch"}}
    elif name in VISION:
        model = vision_model(name)
        randomise_batchnorm(model, torch.Generator().manual_seed(1))
        inputs = {"image": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
        outputs, axes = ["logits"], {"image": {0: "batch"}, "logits": {0: "batch"}}
    elif name in ("yolo_silu", "db_detector"):
        model = YoloSiLU() if name == "yolo_silu" else DBDetector()
        randomise_batchnorm(model, torch.Generator().manual_seed(1))
        inputs = {"image": rng.standard_normal((1, 3, 320, 320)).astype(np.float32)}
        outputs, axes = ["maps"], {"image": {0: "batch"}, "maps": {0: "batch"}}
    elif name == "crnn_ocr":
        model = CRNN()
        randomise_batchnorm(model, torch.Generator().manual_seed(1))
        inputs = {"line": rng.standard_normal((1, 1, 32, 128)).astype(np.float32)}
        outputs, axes = ["logits"], {"line": {0: "batch"}, "logits": {0: "batch"}}
    elif name == "keras_cnn1d":
        model = KerasCNN1D()
        inputs = {"ids": rng.integers(0, 257, size=(1, 2048), dtype=np.int64)}
        outputs, axes = ["logits"], {"ids": {0: "batch"}, "logits": {0: "batch"}}
    else:
        raise ValueError(name)
    model.eval()
    options["dynamic_axes"] = axes
    return model, inputs, outputs, options


def export_onnx(
    model: nn.Module,
    inputs: dict[str, np.ndarray],
    output_names: list[str],
    options: dict,
    path: Path,
) -> tuple[torch.Tensor, ...]:
    """Export `model` at OPSET with the TorchScript exporter and check the file; the example
    inputs as torch tensors."""
    args = tuple(torch.from_numpy(array) for array in inputs.values())
    torch.onnx.export(
        model,
        args,
        str(path),
        input_names=list(inputs),
        output_names=output_names,
        opset_version=OPSET,
        dynamo=False,
        **options,
    )
    onnx.checker.check_model(str(path), full_check=True)
    return args


def export_bench(name: str, out: Path) -> None:
    """Export one benchmark-set model, check onnxruntime against torch, save its inputs."""
    model, inputs, output_names, options = bench_build(name)
    path = out / f"{name}.onnx"
    args = export_onnx(model, inputs, output_names, options, path)
    with torch.no_grad():
        expected = model(*args)
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, inputs)
    worst = compare(name, output_names, expected, got)
    arrays = dict(inputs)
    arrays.update({f"output:{n}": a for n, a in zip(output_names, got, strict=True)})
    np.savez(out / f"{name}.inputs.npz", **arrays)
    size = path.stat().st_size
    print(f"{name}.onnx: {size / 2**20:.1f} MiB, max |torch - onnxruntime| = {worst:.3g}")
    print(op_summary(onnx.load(str(path))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="default tests/models")
    parser.add_argument(
        "--bench-set",
        action="store_true",
        help=f"export the benchmark set ({', '.join(BENCH_SET)}) to {BENCH_OUT} instead "
        "(also builds resnet50_224 and bert_base_seq128, the GPU benchmark's models, by name)",
    )
    parser.add_argument("models", nargs="*")
    args = parser.parse_args(argv)
    args.out = args.out or (BENCH_OUT if args.bench_set else Path("tests/models"))
    args.models = args.models or (
        list(BENCH_SET) if args.bench_set else ["mlp", "cnn", "transformer", "patterns"]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    # The TorchScript exporter is chosen on purpose (see above); torch warns that it is legacy.
    warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based")
    print(f"torch {torch.__version__}, onnx {onnx.__version__}, onnxruntime {ort.__version__}")
    for name in args.models:
        (export_bench if args.bench_set else export)(name, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
