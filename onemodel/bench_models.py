"""The benchmark set of `onemodel bench`: the one list of models the published figures use.

Nine "light" models ship inside the onnx package (`onnx/backend/test/data/light`): the
architectures of the ONNX model zoo classics at full 1x3x224x224 size, with their weights
replaced by small generated constants, so they carry real compute but no inputs file (the
benchmark generates inputs from the declared types). Three small PyTorch exports live in
`tests/models` with an `.inputs.npz` beside each. The issue's named PyTorch set (ResNet-18 and
ResNet-50 at 224x224, a BERT-style encoder at sequence 128, a GPT-2 block, an LSTM and a GRU,
MobileNetV2/V3, EfficientNet-B0, a YOLO-style detector, a CRNN recogniser, a Keras-style 1-D
CNN and a DB-style text detector) is too large to commit: `python tools/export_models.py
--bench-set` writes it to `benchmarks/models/`, and the set includes each model found there;
`missing_exports()` names the ones that are not.

`iterations`/`warmup`, when set, cap the command's `--iterations`/`--warmup` for a model that
is slow enough that a handful of runs already gives a stable median.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEST_MODELS = REPO / "tests" / "models"
BENCH_EXPORTS = REPO / "benchmarks" / "models"
EXPORT_COMMAND = "python tools/export_models.py --bench-set"


def light_directory() -> Path:
    import onnx

    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


@dataclass(frozen=True)
class BenchModel:
    name: str
    path: Path
    description: str
    iterations: int | None = None
    warmup: int | None = None
    # Generated models (onemodel/bench_graphs.py): built into `path` on first use.
    generated: bool = False
    # Streaming: (output, input) pairs fed from each run into the next, for `runs` runs.
    carry: tuple[tuple[str, str], ...] = ()
    runs: int | None = None
    create_repeats: int | None = None

    def ensure(self) -> None:
        """Write a generated model (and its inputs file) if it is not there yet."""
        if self.generated:
            from onemodel.bench_graphs import ensure

            ensure(self.name, self.path.parent)

    @property
    def inputs_path(self) -> Path | None:
        """`<model>.inputs.npz` beside the model, when there is one."""
        candidate = self.path.with_name(self.path.name.removesuffix(".onnx") + ".inputs.npz")
        return candidate if candidate.is_file() else None


_LIGHT = (
    ("alexnet", "light_bvlc_alexnet.onnx", "AlexNet (BVLC): 5 conv, 3 fully connected", 5),
    ("densenet121", "light_densenet121.onnx", "DenseNet-121: concatenating dense blocks", 3),
    ("inception_v1", "light_inception_v1.onnx", "GoogLeNet / Inception v1", 5),
    ("inception_v2", "light_inception_v2.onnx", "Inception v2 with batch norm", 5),
    ("resnet50", "light_resnet50.onnx", "ResNet-50 (Caffe2 export)", 5),
    ("shufflenet", "light_shufflenet.onnx", "ShuffleNet v1: grouped conv, channel shuffle", 10),
    ("squeezenet", "light_squeezenet.onnx", "SqueezeNet 1.0: fire modules", 10),
    ("vgg19", "light_vgg19.onnx", "VGG-19: 16 conv, 3 fully connected", 3),
    ("zfnet512", "light_zfnet512.onnx", "ZFNet-512", 5),
)

_TESTS = (
    ("mlp", "mlp.onnx", "PyTorch export: Linear-ReLU-Linear-GELU-Linear, batch 8 x 32"),
    ("cnn", "cnn.onnx", "PyTorch export: small residual CNN with batch norm"),
    ("transformer", "transformer.onnx", "PyTorch export: one-layer transformer encoder"),
)


_EXPORTS = (
    ("resnet18_224", "PyTorch export: ResNet-18, 1x3x224x224", 10),
    ("bert_seq128", "PyTorch export: BERT-style encoder, 4 layers x 512, sequence 128", 10),
    ("gpt2_block", "PyTorch export: GPT-2 (124M) decoder block, sequence 128", 10),
    ("lstm", "PyTorch export: 2-layer LSTM (hidden 256), sequence 64", None),
    ("gru", "PyTorch export: 2-layer GRU (hidden 256), sequence 64", None),
    ("resnet50_224", "PyTorch export: ResNet-50, 1x3x224x224", 5),
    ("mobilenet_v2", "torchvision MobileNetV2 (random weights), 1x3x224x224", 10),
    ("mobilenet_v3", "torchvision MobileNetV3-Large (HardSwish), 1x3x224x224", 10),
    ("efficientnet_b0", "timm EfficientNet-B0 (SiLU, squeeze-excite), 1x3x224x224", 10),
    ("yolo_silu", "YOLOv8-style detector (Conv+SiLU, C2f, nearest upsample), 1x3x320x320", 10),
    ("crnn_ocr", "CRNN-style OCR recogniser: conv stack + 2-layer BiLSTM, 1x1x32x128", 10),
    ("keras_cnn1d", "Keras-style 1-D CNN, one-hot by Equal->Cast over 257 symbols, 2048 ids", 10),
    ("db_detector", "DB-style text detector: FPN, nearest Resize, ConvTranspose 2x2/2", 10),
)


def missing_exports(exports: Path = BENCH_EXPORTS) -> list[str]:
    """Names of the exported benchmark-set models that are not (yet) in `exports`."""
    return [name for name, _, _ in _EXPORTS if not (exports / f"{name}.onnx").is_file()]


def missing_line(exports: Path = BENCH_EXPORTS) -> str | None:
    """The line the bench prints when part of the set is missing, or None."""
    missing = missing_exports(exports)
    if not missing:
        return None
    return (
        f"benchmark set: {', '.join(missing)} not found in {exports} and left out "
        f"(export them with `{EXPORT_COMMAND}`; needs torch)"
    )


def bench_set(exports: Path = BENCH_EXPORTS) -> list[BenchModel]:
    """The benchmark set: light models, the exports found in `exports`, the test models."""
    light = light_directory()
    models = [
        BenchModel(name, light / file, f"onnx light model: {text}", iterations=n, warmup=1)
        for name, file, text, n in _LIGHT
    ]
    models += [
        BenchModel(name, exports / f"{name}.onnx", text, iterations=n, warmup=2 if n else None)
        for name, text, n in _EXPORTS
        if (exports / f"{name}.onnx").is_file()
    ]
    models += [BenchModel(name, TEST_MODELS / file, text) for name, file, text in _TESTS]
    models += _generated()
    return models


def _generated() -> list[BenchModel]:
    """The runtime-overhead models of onemodel/bench_graphs.py (built when first measured)."""
    from onemodel.bench_graphs import GENERATED, VAD_CARRY

    return [
        BenchModel("vad_stream", GENERATED / "vad_stream.onnx",
                   "generated: streaming VAD, If on the sample rate over an LSTM cell written "
                   "with Gemm; state carried through 1,000 runs",
                   generated=True, carry=VAD_CARRY, runs=1000),
        BenchModel("add_chain_100k", GENERATED / "add_chain_100k.onnx",
                   "generated: 100,000 Adds in a chain (creation time)",
                   iterations=5, warmup=1, generated=True, create_repeats=1),
        BenchModel("add_tree_100k", GENERATED / "add_tree_100k.onnx",
                   "generated: 100,000 Adds in a balanced binary tree (creation time)",
                   iterations=5, warmup=1, generated=True, create_repeats=1),
    ]  # fmt: skip


def resolve(specs: list[str]) -> list[BenchModel]:
    """Models for command-line arguments: `all` (the whole set), a name from the set, or a path
    to an .onnx file (its inputs file is used when present)."""
    known = {model.name: model for model in bench_set()}
    models: list[BenchModel] = []
    for spec in specs:
        if spec == "all":
            models += known.values()
        elif spec in known:
            models.append(known[spec])
        else:
            path = Path(spec)
            match = [m for m in known.values() if m.path.resolve() == path.resolve()]
            if match:
                models.append(match[0])
                continue
            if not path.is_file():
                raise ValueError(
                    f"no model file '{spec}' and no benchmark model by that name "
                    f"(names: all, {', '.join(known)})"
                )
            models.append(BenchModel(path.name.removesuffix(".onnx"), path, ""))
    return models
