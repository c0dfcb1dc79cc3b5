"""The benchmark set of `onemodel bench`: the one list of models the published figures use.

Nine "light" models ship inside the onnx package (`onnx/backend/test/data/light`): the
architectures of the ONNX model zoo classics at full 1x3x224x224 size, with their weights
replaced by small generated constants, so they carry real compute but no inputs file (the
benchmark generates inputs from the declared types). Three small PyTorch exports live in
`tests/models` with an `.inputs.npz` beside each.

`iterations`/`warmup`, when set, cap the command's `--iterations`/`--warmup` for a model that
is slow enough that a handful of runs already gives a stable median.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEST_MODELS = REPO / "tests" / "models"


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


def bench_set() -> list[BenchModel]:
    """The benchmark set, light models first."""
    light = light_directory()
    models = [
        BenchModel(name, light / file, f"onnx light model: {text}", iterations=n, warmup=1)
        for name, file, text, n in _LIGHT
    ]
    models += [BenchModel(name, TEST_MODELS / file, text) for name, file, text in _TESTS]
    return models


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
            if not path.is_file():
                raise ValueError(
                    f"no model file '{spec}' and no benchmark model by that name "
                    f"(names: all, {', '.join(known)})"
                )
            name = path.name.removesuffix(".onnx")
            match = [m for m in known.values() if m.path.resolve() == path.resolve()]
            models.append(match[0] if match else BenchModel(name, path, ""))
    return models
