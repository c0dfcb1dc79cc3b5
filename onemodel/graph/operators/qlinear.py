"""The com.microsoft quantized operators that onnxruntime.quantization writes beyond ONNX's own
(QuantizeLinear, MatMulInteger, QLinearConv... live in quantize.py).

DynamicQuantizeLSTM is an LSTM whose W (D, I, 4H) and R (D, H, 4H) are int8/uint8 with scales
and zero points per direction or per direction and gate column (quantize_dynamic writes it for
every LSTM). Its weights are dequantized once, (q − zero) · scale in float32, transposed to
LSTM's (D, 4H, ·) layout, and the float LSTM runs; onnxruntime instead quantizes X and each
step's h to uint8 for an integer product, so the two differ by that activation rounding
(well inside the 1e-2 the int8 comparisons allow).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onemodel.graph.operators.base import (
    Array,
    InferContext,
    OpDef,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.recurrent import LSTMOp
from onemodel.tensors import DType

MICROSOFT = "com.microsoft"
_EIGHT_BITS = frozenset({DType.INT8, DType.UINT8})
_W, _R = 1, 2
_W_SCALE, _W_ZERO, _R_SCALE, _R_ZERO = 8, 9, 10, 11


class DynamicQuantizeLSTMOp(LSTMOp):
    """LSTM with quantized W and R (see the module docstring); inputs 8–11 are W_scale,
    W_zero_point, R_scale and R_zero_point."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        node = self.node
        if len(ctx) < 12 or not all(ctx.has(i) for i in (_W_SCALE, _W_ZERO, _R_SCALE, _R_ZERO)):
            raise node.invalid("DynamicQuantizeLSTM needs W/R scales and zero points (inputs 8–11)")
        self.check_types(ctx, _EIGHT_BITS, _W, _R)
        self.check_types(ctx, frozenset({DType.FLOAT}), 0, _W_SCALE, _R_SCALE)
        float_specs = list(ctx.specs[:8])
        for weights, scale, zero in ((_W, _W_SCALE, _W_ZERO), (_R, _R_SCALE, _R_ZERO)):
            shape = ctx.shape(weights)
            if len(shape) != 3:
                raise node.bad_input(
                    f"DynamicQuantizeLSTM input '{node.inputs[weights]}' of shape {shape} is not "
                    "(directions, rows, 4 · hidden)",
                    node.inputs[weights],
                )
            if ctx.dtype(zero) != ctx.dtype(weights):
                raise node.invalid(
                    f"DynamicQuantizeLSTM: zero point '{node.inputs[zero]}' is not of the type "
                    f"of '{node.inputs[weights]}'",
                    node.inputs[zero],
                )
            allowed = ((shape[0],), (shape[0], shape[2]))
            for index in (scale, zero):
                if ctx.shape(index) not in allowed:
                    raise node.bad_input(
                        f"DynamicQuantizeLSTM input '{node.inputs[index]}' of shape "
                        f"{ctx.shape(index)} is neither {allowed[0]} nor {allowed[1]}",
                        node.inputs[index],
                    )
            float_specs[weights] = TensorSpec(DType.FLOAT, (shape[0], shape[2], shape[1]))
        return super().infer(InferContext(node, float_specs, [None] * len(float_specs)))

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        given = list(inputs[:8])
        for weights, scale, zero in ((_W, _W_SCALE, _W_ZERO), (_R, _R_SCALE, _R_ZERO)):
            q, s, z = inputs[weights], inputs[scale], inputs[zero]
            per_column = (s.shape[0], 1, -1)  # (D,) or (D, 4H) against (D, rows, 4H)
            shifted = q.astype(xp.float32) - z.reshape(per_column).astype(xp.float32)
            real = shifted * s.reshape(per_column).astype(xp.float32)
            given[weights] = xp.ascontiguousarray(real.transpose(0, 2, 1))
        super().run(ctx, given, outputs)


DEFS: tuple[OpDef, ...] = (
    OpDef("DynamicQuantizeLSTM", 1, DynamicQuantizeLSTMOp, domain=MICROSOFT),
)
