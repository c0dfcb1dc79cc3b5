"""A small randomly initialised DistilBERT (transformers config, no download) exported with
torch.onnx and quantized by onnxruntime.quantization.quantize_dynamic, against onnxruntime with
its graph optimisations off: every integer intermediate (DynamicQuantizeLinear's uint8 values,
scales' zero points, MatMulInteger's int32 sums) exposed as a graph output and compared.

With 7-bit or uint8 weights all integers are onnxruntime's. With quantize_dynamic's default
int8 weights onnxruntime's x86 kernel without VNNI saturates int16 pair sums of its uint8 ×
int8 products, so its MatMulInteger sums (and what follows) can differ from the exact sums
ONNX defines, which onemodel computes; the float output still agrees within 1e-2. Skipped
without torch and transformers (CI has neither)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest

from onemodel import Session

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def distilbert(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    config = transformers.DistilBertConfig(
        vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
        max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.DistilBertModel(config).eval()
    ids = torch.randint(0, 1000, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 12:] = 0
    path = tmp_path_factory.mktemp("distilbert") / "model.onnx"
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    torch.onnx.export(model, (ids, mask), str(path), input_names=list(axes),
                      output_names=["hidden"], opset_version=17, dynamo=False,
                      dynamic_axes=axes)  # fmt: skip
    return path, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}


def _both(model: onnx.ModelProto, feeds: dict) -> tuple[dict, dict]:
    inferred = onnx.shape_inference.infer_shapes(model)
    declared = {output.name for output in inferred.graph.output}
    produced = {name for node in inferred.graph.node for name in node.output}
    inferred.graph.output.extend(
        v for v in inferred.graph.value_info if v.name in produced - declared
    )
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = inferred.SerializeToString()
    reference = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    names = [output.name for output in reference.get_outputs()]
    expected = dict(zip(names, reference.run(None, feeds), strict=True))
    got = dict(zip(names, Session.load(data).run(None, feeds), strict=True))
    return got, expected


@pytest.mark.parametrize(
    ("weights", "reduce_range"), [("QInt8", True), ("QUInt8", False), ("QInt8", False)],
    ids=["int8_7bit", "uint8", "int8_default"],
)  # fmt: skip
def test_quantized_distilbert_integers_equal_onnxruntime(
    distilbert, tmp_path, weights: str, reduce_range: bool
) -> None:
    source, feeds = distilbert
    target = tmp_path / "quantized.onnx"
    logging.getLogger().setLevel(logging.ERROR)
    quantization.quantize_dynamic(source, target, weight_type=quantization.QuantType[weights],
                                  reduce_range=reduce_range)  # fmt: skip
    model = onnx.load(target)
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= {n.op_type for n in model.graph.node}
    got, expected = _both(model, feeds)
    integers = [name for name, value in expected.items() if value.dtype.kind in "iu"]
    quantized = [name for name in integers if expected[name].dtype == np.uint8]
    assert len(quantized) >= 8  # the DynamicQuantizeLinear outputs
    if weights == "QUInt8" or reduce_range:
        for name in integers:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    else:
        _first_difference_is_a_saturated_product(model, got, expected)
    np.testing.assert_allclose(got["hidden"], expected["hidden"], rtol=1e-2, atol=1e-2)


def _first_difference_is_a_saturated_product(model: onnx.ModelProto, got, expected) -> None:
    """In node order, the first integer value that differs comes out of a MatMulInteger whose
    inputs agree, and ours is the exact sum: the difference is onnxruntime's saturation."""
    values = {init.name: onnx.numpy_helper.to_array(init) for init in model.graph.initializer}
    for node in model.graph.node:
        for name in node.output:
            if name not in expected or expected[name].dtype.kind not in "iu":
                continue
            if np.array_equal(got[name], expected[name]):
                continue
            assert node.op_type == "MatMulInteger", (node.op_type, name)
            a, b, a_zero, b_zero = (got.get(i, values.get(i)) for i in node.input)
            for given in node.input:
                if given in expected:
                    np.testing.assert_array_equal(got[given], expected[given])
            exact = (a.astype(np.int64) - a_zero) @ (b.astype(np.int64) - b_zero)
            np.testing.assert_array_equal(got[name], exact)
            return
