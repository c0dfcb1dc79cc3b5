"""The static operator table: every operator the runtime runs, and the family module defining it.

`FAMILIES` names, for each (domain, operator type), the module under onemodel/graph/operators/
whose `DEFS` tuple holds its definitions with their opset ranges; nothing is found by
reflection. A family module is imported the first time one of its operators is looked up, so a
session pays only for the families its model uses (importing all ~40 costs ~40 ms of a cold
start). A node resolves to the definition whose range holds the opset its model imports for
the node's domain; a node no range covers is reported (with every other such node) when the
session is created. tests/test_operator_table.py checks that `FAMILIES` and the families'
`DEFS` list the same operators.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from onemodel.graph.operators.base import OpDef

# One line per operator, sorted by domain then type: (domain, op_type) -> family module.
FAMILIES: dict[tuple[str, str], str] = {
    ("", "Abs"): "unary",
    ("", "Acos"): "unary",
    ("", "Acosh"): "unary",
    ("", "Add"): "binary",
    ("", "AffineGrid"): "resize",
    ("", "And"): "binary",
    ("", "ArgMax"): "reductions",
    ("", "ArgMin"): "reductions",
    ("", "Asin"): "unary",
    ("", "Asinh"): "unary",
    ("", "Atan"): "unary",
    ("", "Atanh"): "unary",
    ("", "Attention"): "attention",
    ("", "AveragePool"): "pooling",
    ("", "BatchNormalization"): "normalization",
    ("", "Bernoulli"): "selection",
    ("", "BitCast"): "selection",
    ("", "BitShift"): "binary",
    ("", "BitwiseAnd"): "binary",
    ("", "BitwiseNot"): "unary",
    ("", "BitwiseOr"): "binary",
    ("", "BitwiseXor"): "binary",
    ("", "BlackmanWindow"): "signal",
    ("", "Cast"): "cast",
    ("", "CastLike"): "cast",
    ("", "CausalConvWithState"): "attention",
    ("", "Ceil"): "unary",
    ("", "Celu"): "activations",
    ("", "CenterCropPad"): "spatial",
    ("", "Clip"): "activations",
    ("", "Col2Im"): "spatial",
    ("", "Compress"): "selection",
    ("", "Concat"): "concat_split",
    ("", "ConcatFromSequence"): "sequences",
    ("", "Constant"): "constants",
    ("", "ConstantOfShape"): "constants",
    ("", "Conv"): "conv",
    ("", "ConvInteger"): "quantize",
    ("", "ConvTranspose"): "conv",
    ("", "Cos"): "unary",
    ("", "Cosh"): "unary",
    ("", "CumProd"): "selection",
    ("", "CumSum"): "selection",
    ("", "DFT"): "signal",
    ("", "DeformConv"): "imaging",
    ("", "DepthToSpace"): "spatial",
    ("", "DequantizeLinear"): "quantize",
    ("", "Det"): "selection",
    ("", "Div"): "binary",
    ("", "Dropout"): "dropout",
    ("", "DynamicQuantizeLinear"): "quantize",
    ("", "Einsum"): "selection",
    ("", "Elu"): "activations",
    ("", "Equal"): "binary",
    ("", "Erf"): "unary",
    ("", "Exp"): "unary",
    ("", "Expand"): "expand_tile",
    ("", "EyeLike"): "constants",
    ("", "Flatten"): "views",
    ("", "Floor"): "unary",
    ("", "GRU"): "recurrent",
    ("", "Gather"): "gather",
    ("", "GatherElements"): "gather",
    ("", "GatherND"): "gather",
    ("", "Gelu"): "activations",
    ("", "Gemm"): "matmul",
    ("", "GlobalAveragePool"): "pooling",
    ("", "GlobalMaxPool"): "pooling",
    ("", "Greater"): "binary",
    ("", "GreaterOrEqual"): "binary",
    ("", "GridSample"): "resize",
    ("", "GroupNormalization"): "normalization",
    ("", "HammingWindow"): "signal",
    ("", "HannWindow"): "signal",
    ("", "HardSigmoid"): "activations",
    ("", "HardSwish"): "activations",
    ("", "Hardmax"): "softmax",
    ("", "Identity"): "views",
    ("", "If"): "control_flow",
    ("", "ImageDecoder"): "imaging",
    ("", "InstanceNormalization"): "normalization",
    ("", "IsInf"): "unary",
    ("", "IsNaN"): "unary",
    ("", "LRN"): "normalization",
    ("", "LSTM"): "recurrent",
    ("", "LayerNormalization"): "normalization",
    ("", "LeakyRelu"): "activations",
    ("", "Less"): "binary",
    ("", "LessOrEqual"): "binary",
    ("", "LinearAttention"): "attention",
    ("", "Log"): "unary",
    ("", "LogSoftmax"): "softmax",
    ("", "Loop"): "control_flow",
    ("", "LpNormalization"): "normalization",
    ("", "LpPool"): "pooling",
    ("", "MatMul"): "matmul",
    ("", "MatMulInteger"): "quantize",
    ("", "Max"): "binary",
    ("", "MaxPool"): "pooling",
    ("", "MaxUnpool"): "spatial",
    ("", "Mean"): "binary",
    ("", "MeanVarianceNormalization"): "selection",
    ("", "MelWeightMatrix"): "signal",
    ("", "Min"): "binary",
    ("", "Mish"): "activations",
    ("", "Mod"): "binary",
    ("", "Mul"): "binary",
    ("", "Multinomial"): "selection",
    ("", "Neg"): "unary",
    ("", "NegativeLogLikelihoodLoss"): "losses",
    ("", "NonMaxSuppression"): "selection",
    ("", "NonZero"): "selection",
    ("", "Not"): "unary",
    ("", "OneHot"): "constants",
    ("", "Optional"): "sequences",
    ("", "OptionalGetElement"): "sequences",
    ("", "OptionalHasElement"): "sequences",
    ("", "Or"): "binary",
    ("", "PRelu"): "activations",
    ("", "Pad"): "pad",
    ("", "Pow"): "binary",
    ("", "QLinearConv"): "quantize",
    ("", "QLinearMatMul"): "quantize",
    ("", "QuantizeLinear"): "quantize",
    ("", "RMSNormalization"): "attention",
    ("", "RNN"): "recurrent",
    ("", "RandomNormal"): "selection",
    ("", "RandomNormalLike"): "selection",
    ("", "RandomUniform"): "selection",
    ("", "RandomUniformLike"): "selection",
    ("", "Range"): "constants",
    ("", "Reciprocal"): "unary",
    ("", "ReduceL1"): "reductions",
    ("", "ReduceL2"): "reductions",
    ("", "ReduceLogSum"): "reductions",
    ("", "ReduceLogSumExp"): "reductions",
    ("", "ReduceMax"): "reductions",
    ("", "ReduceMean"): "reductions",
    ("", "ReduceMin"): "reductions",
    ("", "ReduceProd"): "reductions",
    ("", "ReduceSum"): "reductions",
    ("", "ReduceSumSquare"): "reductions",
    ("", "RegexFullMatch"): "strings",
    ("", "Relu"): "activations",
    ("", "Reshape"): "views",
    ("", "Resize"): "resize",
    ("", "ReverseSequence"): "spatial",
    ("", "RoiAlign"): "resize",
    ("", "RotaryEmbedding"): "attention",
    ("", "Round"): "unary",
    ("", "STFT"): "signal",
    ("", "Scan"): "control_flow",
    ("", "Scatter"): "gather",
    ("", "ScatterElements"): "gather",
    ("", "ScatterND"): "gather",
    ("", "Selu"): "activations",
    ("", "SequenceAt"): "sequences",
    ("", "SequenceConstruct"): "sequences",
    ("", "SequenceEmpty"): "sequences",
    ("", "SequenceErase"): "sequences",
    ("", "SequenceInsert"): "sequences",
    ("", "SequenceLength"): "sequences",
    ("", "SequenceMap"): "sequences",
    ("", "Shape"): "shape_info",
    ("", "Shrink"): "activations",
    ("", "Sigmoid"): "activations",
    ("", "Sign"): "unary",
    ("", "SimplifiedLayerNormalization"): "contrib",
    ("", "Sin"): "unary",
    ("", "Sinh"): "unary",
    ("", "Size"): "shape_info",
    ("", "Slice"): "slice",
    ("", "Softmax"): "softmax",
    ("", "SoftmaxCrossEntropyLoss"): "losses",
    ("", "Softplus"): "activations",
    ("", "Softsign"): "activations",
    ("", "SpaceToDepth"): "spatial",
    ("", "Split"): "concat_split",
    ("", "SplitToSequence"): "sequences",
    ("", "Sqrt"): "unary",
    ("", "Squeeze"): "views",
    ("", "StringConcat"): "strings",
    ("", "StringNormalizer"): "strings",
    ("", "StringSplit"): "strings",
    ("", "Sub"): "binary",
    ("", "Sum"): "binary",
    ("", "SwiGLU"): "attention",
    ("", "Swish"): "attention",
    ("", "Tan"): "unary",
    ("", "Tanh"): "activations",
    ("", "TensorScatter"): "selection",
    ("", "TfIdfVectorizer"): "strings",
    ("", "ThresholdedRelu"): "activations",
    ("", "Tile"): "expand_tile",
    ("", "TopK"): "selection",
    ("", "Transpose"): "transpose",
    ("", "Trilu"): "spatial",
    ("", "Unique"): "selection",
    ("", "Unsqueeze"): "views",
    ("", "Upsample"): "resize",
    ("", "Where"): "where",
    ("", "Xor"): "binary",
    ("ai.onnx.ml", "ArrayFeatureExtractor"): "ml",
    ("ai.onnx.ml", "Binarizer"): "ml",
    ("ai.onnx.ml", "Imputer"): "ml",
    ("ai.onnx.ml", "LabelEncoder"): "ml",
    ("ai.onnx.ml", "LinearClassifier"): "ml",
    ("ai.onnx.ml", "LinearRegressor"): "ml",
    ("ai.onnx.ml", "Normalizer"): "ml",
    ("ai.onnx.ml", "OneHotEncoder"): "ml",
    ("ai.onnx.ml", "SVMClassifier"): "ml",
    ("ai.onnx.ml", "SVMRegressor"): "ml",
    ("ai.onnx.ml", "Scaler"): "ml",
    ("ai.onnx.ml", "TreeEnsemble"): "ml",
    ("ai.onnx.ml", "TreeEnsembleClassifier"): "ml",
    ("ai.onnx.ml", "TreeEnsembleRegressor"): "ml",
    ("ai.onnx.ml", "ZipMap"): "ml",
    ("ai.onnx.preview", "FlexAttention"): "attention",
    ("ai.onnx.preview.training", "Adagrad"): "training",
    ("ai.onnx.preview.training", "Adam"): "training",
    ("ai.onnx.preview.training", "Momentum"): "training",
    ("com.microsoft", "Attention"): "contrib",
    ("com.microsoft", "BiasAdd"): "bias_fusions",
    ("com.microsoft", "BiasGelu"): "contrib",
    ("com.microsoft", "DequantizeLinear"): "qlinear",
    ("com.microsoft", "DynamicQuantizeLSTM"): "qlinear",
    ("com.microsoft", "DynamicQuantizeMatMul"): "contrib",
    ("com.microsoft", "EmbedLayerNormalization"): "embedding",
    ("com.microsoft", "FastGelu"): "contrib",
    ("com.microsoft", "FusedConv"): "contrib",
    ("com.microsoft", "FusedMatMul"): "contrib",
    ("com.microsoft", "Gelu"): "contrib",
    ("com.microsoft", "GemmFastGelu"): "bias_fusions",
    ("com.microsoft", "GroupQueryAttention"): "group_query_attention",
    ("com.microsoft", "MatMulIntegerToFloat"): "qlinear",
    ("com.microsoft", "MatMulNBits"): "contrib",
    ("com.microsoft", "MultiHeadAttention"): "contrib",
    ("com.microsoft", "QAttention"): "qlinear",
    ("com.microsoft", "QEmbedLayerNormalization"): "embedding",
    ("com.microsoft", "QGemm"): "qlinear",
    ("com.microsoft", "QLinearAdd"): "qlinear",
    ("com.microsoft", "QLinearAveragePool"): "qlinear",
    ("com.microsoft", "QLinearConcat"): "qlinear",
    ("com.microsoft", "QLinearGlobalAveragePool"): "qlinear",
    ("com.microsoft", "QLinearLeakyRelu"): "qlinear",
    ("com.microsoft", "QLinearMul"): "qlinear",
    ("com.microsoft", "QLinearSigmoid"): "qlinear",
    ("com.microsoft", "QLinearSoftmax"): "qlinear",
    ("com.microsoft", "QLinearWhere"): "qlinear",
    ("com.microsoft", "QuantizeLinear"): "qlinear",
    ("com.microsoft", "QuickGelu"): "contrib",
    ("com.microsoft", "RelativePositionBias"): "relative_position_bias",
    ("com.microsoft", "RotaryEmbedding"): "contrib",
    ("com.microsoft", "SkipLayerNormalization"): "contrib",
    ("com.microsoft", "SkipSimplifiedLayerNormalization"): "contrib",
    ("onemodel.internal", "OnesLike"): "training",
    ("onemodel.internal", "SumToShape"): "training",
    ("onemodel.internal", "Widen"): "widen",
}

_BY_NAME: dict[tuple[str, str], tuple[OpDef, ...]] = {}
_LOADED: set[str] = set()
_LOCK = threading.Lock()


def family_definitions(family: str) -> tuple[OpDef, ...]:
    """The `DEFS` of one family module (imported on first use)."""
    module = importlib.import_module(f"onemodel.graph.operators.{family}")
    return module.DEFS


def _load(family: str) -> None:
    definitions = family_definitions(family)
    with _LOCK:
        if family in _LOADED:
            return
        by_name: dict[tuple[str, str], tuple[OpDef, ...]] = {}
        for definition in definitions:
            key = (definition.domain, definition.op_type)
            by_name[key] = (*by_name.get(key, ()), definition)
        _BY_NAME.update(by_name)
        _LOADED.add(family)


def resolve(domain: str, op_type: str, opset: int) -> OpDef | None:
    """The definition of `op_type` in `domain` at `opset`, or None when none covers it."""
    definitions = _BY_NAME.get((domain, op_type))
    if definitions is None:
        family = FAMILIES.get((domain, op_type))
        if family is None:
            return None
        _load(family)
        definitions = _BY_NAME.get((domain, op_type), ())
    for definition in definitions:
        if definition.covers(opset):
            return definition
    return None


def definitions() -> tuple[OpDef, ...]:
    """Every definition of every family (importing them all), family by family."""
    return tuple(d for family in sorted(set(FAMILIES.values())) for d in family_definitions(family))


def __getattr__(name: str) -> Any:
    if name == "TABLE":  # the whole table, for tools and tests: imports every family
        return definitions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def markdown_table() -> str:
    """The supported operators as the Markdown table docs/operators.md carries (one row per
    definition: domain, operator, opset range, exact-mode support)."""
    rows = ["| domain | operator | opsets | exact |", "| --- | --- | --- | --- |"]
    for definition in sorted(definitions(), key=lambda d: (d.domain, d.op_type, d.since)):
        until = "" if definition.until is None else str(definition.until)
        exact = getattr(definition.factory, "supports_exact", False)
        rows.append(
            f"| {definition.domain or 'ai.onnx'} | {definition.op_type} | "
            f"{definition.since}–{until} | {'yes' if exact else ''} |"
        )
    return "\n".join(rows)
