"""Run one operator outside a session: resolve it in the table, infer, allocate, run.

Unit tests of operator families use this before (and besides) whole-model tests; every input is
given to `infer` as a known value, as constant evaluation in a plan would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onemodel.backends import KernelPaths
from onemodel.graph.operators import optable
from onemodel.graph.operators.base import Constant, InferContext, NodeInfo, RunContext, TensorSpec
from onemodel.tensors import onnx_code_for_numpy


def run_node(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: Mapping[str, Any] | None = None,
    *,
    opset: int = 17,
    outputs: int = 1,
    domain: str = "",
    backend: str = "numpy",
    exact: bool = False,
    known: Sequence[bool] | None = None,
) -> list[np.ndarray]:
    """The outputs of one node on host arrays; `known[i]` False hides input i's value from infer."""
    definition = optable.resolve(domain, op_type, opset)
    if definition is None:
        raise LookupError(f"{op_type} (opset {opset}) is not in the operator table")
    names = tuple(f"in{i}" if x is not None else "" for i, x in enumerate(inputs))
    node = NodeInfo(
        f"{op_type.lower()}_node", op_type, domain, opset, names,
        tuple(f"out{i}" for i in range(outputs)), dict(attributes or {}),
    )  # fmt: skip
    operator = definition.factory(node)
    kernels = KernelPaths.get(backend)
    ctx = RunContext(kernels, exact)
    device = [None if x is None else kernels.xp.asarray(x) for x in inputs]
    if operator.outputs_data_dependent:
        results = operator.run(ctx, device, None)
        return [kernels.memory.to_host(r) for r in results]
    specs = [
        None if x is None else TensorSpec(onnx_code_for_numpy(x.dtype), x.shape) for x in inputs
    ]
    visible = known or [True] * len(inputs)
    constants = [x if shown else None for x, shown in zip(inputs, visible, strict=True)]
    stated = operator.infer(InferContext(node, specs, constants))
    if all(isinstance(s, Constant) for s in stated):
        return [np.asarray(s.value) for s in stated]
    if operator.view_of_input is not None:
        (spec,) = stated
        return [kernels.memory.to_host(device[operator.view_of_input].reshape(spec.shape))]
    results = [kernels.xp.empty(s.shape, dtype=s.numpy_dtype) for s in stated]
    operator.run(ctx, device, results)
    return [kernels.memory.to_host(r) for r in results]
