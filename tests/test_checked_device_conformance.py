"""ONNX's conformance cases of the operators real models use most, run on the checked-device
stand-in (CuPy's rules on the CPU): what would fail on a GPU for lack of device-ready code
fails here in CI. This sample keeps the suite fast; ONEMODEL_CHECKED_DEVICE_ALL=1 runs every
case on the stand-in instead (docs/gpu.md has the counts).

Cases of element types CuPy lacks (bfloat16, float8, int4/uint4/int2/uint2, float4, strings)
are left out of the sample: the stand-in refuses them as CuPy does (docs/gpu.md, "Element
types the device lacks").
"""

from __future__ import annotations

import os

import onnx.backend.test
from conformance_expected import EXPECTED_FAILURES, RANDOM_OUTPUTS

from onemodel.onnx_backend import OnemodelBackend, OnemodelRep
from onemodel.session import Session, SessionOptions

FAMILIES = (
    "abs", "add", "argmax", "averagepool", "batchnorm", "cast", "clip", "concat", "constant",
    "conv", "convtranspose", "cumsum", "div", "einsum", "erf", "exp", "expand", "flatten",
    "gather", "gelu", "gemm", "globalaveragepool", "globalmaxpool", "identity", "if",
    "instancenorm", "layer_normalization", "leakyrelu", "log", "loop", "lrn", "lstm", "gru",
    "matmul", "max", "maxpool", "mean", "min", "mul", "neg", "nonzero", "onehot", "pad", "pow",
    "range", "reciprocal", "reduce", "relu", "reshape", "resize", "scan", "scatter", "shape",
    "sigmoid", "slice", "softmax", "split", "sqrt", "squeeze", "sub", "sum", "tanh", "tile",
    "topk", "transpose", "unsqueeze", "where",
)  # fmt: skip
LACKING_TYPES = r"(?i:bfloat16|bf16|float8|e4m3|e5m2|int4|int2|float4|e2m1|e8m0|string)"


class CheckedDeviceBackend(OnemodelBackend):
    """The suite's backend with every session on the stand-in."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        from onemodel.graph.importer import model_from_proto

        options = SessionOptions(backend="checked-device")
        return OnemodelRep(Session.create(model_from_proto(model), options))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


backend_test = onnx.backend.test.BackendTest(CheckedDeviceBackend, __name__)
if not os.environ.get("ONEMODEL_CHECKED_DEVICE_ALL"):
    backend_test.include(rf"^test_({'|'.join(FAMILIES)})(_.*)?_cpu$")
    backend_test.exclude(rf"^test_.*{LACKING_TYPES}.*_cpu$")
for name in (*RANDOM_OUTPUTS, *EXPECTED_FAILURES):
    backend_test.exclude(f"^{name}_cpu$")

globals().update(backend_test.test_cases)
