"""The ONNX backend conformance node cases of a family of operators, one node at a time.

The operator test modules run every single-node case of their op types through
`operator_harness.run_node`, before (and besides) the session-level suite of
test_conformance.py, which also runs the `_expanded` function bodies left out here. The cases
are onnx's own: read from onnx/backend/test/data/node where the installed onnx ships the data
files, else made in-process by the generators of onnx.backend.test.case.node (onnx ≥ 1.21 ships
no node data files), importing only the generator modules that build nodes of those op types.
"""

from __future__ import annotations

import functools
import importlib
import re
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from operator_harness import assert_same, run_node

_GENERATORS = "onnx.backend.test.case.node"
_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"


class Case(NamedTuple):
    """One single-node case: its model, and its inputs and expected outputs as NumPy values
    (sequences stay lists)."""

    model: onnx.ModelProto
    inputs: list
    outputs: list

    @property
    def op_type(self) -> str:
        return self.model.graph.node[0].op_type


def _value(value: Any) -> Any:
    """A case's value as the tests use it: a tensor proto or a NumPy scalar as an array."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value) if isinstance(value, np.generic) else value


def _stored_cases() -> Iterator[tuple[str, onnx.ModelProto, list, list]]:
    for folder in sorted(_DATA.glob("test_*")):
        data = folder / "test_data_set_0"
        if not data.is_dir():
            continue

        def read(prefix: str, data: Path = data) -> list:
            files = sorted(data.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[-1]))
            return [onnx.TensorProto.FromString(path.read_bytes()) for path in files]

        yield folder.name, onnx.load(folder / "model.onnx"), read("input"), read("output")


def _generated_cases(
    op_types: Collection[str],
) -> Iterator[tuple[str, onnx.ModelProto, list, list]]:
    package = importlib.import_module(_GENERATORS)
    makes_node = re.compile(r'make_node\(\s*"(\w+)"')
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for path in sorted(Path(package.__file__).parent.glob("*.py")):
            if not set(op_types).isdisjoint(makes_node.findall(path.read_text())):
                importlib.import_module(f"{_GENERATORS}.{path.stem}")
    for case in package._NodeTestCases:
        inputs, outputs = case.data_sets[0]
        yield case.name, case.model, list(inputs), list(outputs)


@functools.cache
def _node_cases(op_types: frozenset[str]) -> dict[str, Case]:
    source = _stored_cases() if _DATA.is_dir() else _generated_cases(op_types)
    cases = {
        name: Case(model, [_value(x) for x in inputs], [_value(x) for x in outputs])
        for name, model, inputs, outputs in source
        if "_expanded" not in name
        and len(model.graph.node) == 1
        and model.graph.node[0].op_type in op_types
    }
    return dict(sorted(cases.items()))


def node_cases(op_types: Collection[str]) -> dict[str, Case]:
    """name → case, in name order, for every single-node case of `op_types`."""
    return _node_cases(frozenset(op_types))


def case_params(
    names: Iterable[str],
    expected_failures: Mapping[str, str] | Collection[str] = (),
    marks: Callable[[str], list] | None = None,
) -> list:
    """One pytest param a case name, with the name as its id: the expected failures (a set, or
    name → reason) strict xfails, and `marks(name)` added."""
    reasons = expected_failures if isinstance(expected_failures, Mapping) else {}
    params = []
    for name in names:
        added = list(marks(name)) if marks else []
        if name in expected_failures:
            added.append(pytest.mark.xfail(strict=True, reason=reasons.get(name, "")))
        params.append(pytest.param(name, id=name, marks=added))
    return params


def _attribute(proto: onnx.AttributeProto) -> Any:
    """An attribute as the importer gives it: tensors as arrays, strings as text."""
    value = helper.get_attribute_value(proto)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


def run_case(case: Case, *, backend: str = "numpy", bfloat16_rtol: float = 1e-3) -> None:
    """Runs the case's node with `run_node` and compares each output it names with the expected
    one at the tolerances of onnx's backend runner: rtol 1e-3 and atol 1e-7 (`bfloat16_rtol`
    for bfloat16; onnx's runner allows two bfloat16 ulps, 2⁻⁶), integers exactly."""
    (node,) = case.model.graph.node
    domain = "" if node.domain == "ai.onnx" else node.domain
    (opset,) = [
        o.version
        for o in case.model.opset_import
        if (o.domain if o.domain != "ai.onnx" else "") == domain
    ]
    given = iter(case.inputs)
    results = run_node(
        node.op_type,
        [next(given) if name else None for name in node.input],
        {a.name: _attribute(a) for a in node.attribute},
        opset=opset,
        outputs=len(node.output),
        domain=domain,
        backend=backend,
    )
    named = [result for result, name in zip(results, node.output, strict=True) if name]
    for index, (result, expected) in enumerate(zip(named, case.outputs, strict=True)):
        rtol = bfloat16_rtol if expected.dtype.name == "bfloat16" else 1e-3
        assert_same(result, expected, rtol=rtol, atol=1e-7, label=f"output {index}")
