"""Exact mode on a flushing backend — the checked-device stand-in, which flushes float32
subnormals as CuPy does, and CuPy itself on a GPU machine: every single-node ONNX conformance
case of an operator exact mode accepts must give the bits numpy-reference gives (NaN canonical
on both), and numpy-reference's exact outputs must be within the conformance tolerances of
ONNX's expected outputs (where fast mode passes the case). Cases exact mode refuses at session
creation (element types CuPy lacks, types an exact kernel does not take) are skipped, and a
separate test makes sure most are compared.
"""

from __future__ import annotations

import numpy as np
import pytest
from conformance_cases import node_cases
from conformance_expected import EXPECTED_FAILURES, RANDOM_OUTPUTS
from operator_harness import assert_same

from onemodel import ExecutionMode, Session, SessionError, SessionOptions
from onemodel.backends import BackendUnavailableError, KernelPaths
from onemodel.graph.importer import model_from_proto
from onemodel.graph.operators import optable

EXACT_OPERATORS = frozenset(
    d.op_type for d in optable.TABLE if getattr(d.factory, "supports_exact", False)
)  # Dropout's factory is a function that picks a class; it has no exact flag
CASES = {
    name: case for name, case in node_cases(EXACT_OPERATORS).items() if name not in RANDOM_OUTPUTS
}


def _exact_session(case, backend: str) -> Session:
    options = SessionOptions(mode=ExecutionMode.EXACT, backend=backend, outputs_as="numpy")
    return Session.create(model_from_proto(case.model), options)


def _outputs(session: Session, case) -> list:
    feeds = dict(zip((i.name for i in case.model.graph.input), case.inputs, strict=False))
    return session.run(None, feeds)


def _same_bits(first: object, second: object) -> bool:
    if isinstance(first, list):
        return isinstance(second, list) and len(first) == len(second) and all(
            _same_bits(a, b) for a, b in zip(first, second, strict=True)
        )  # fmt: skip
    if first is None or second is None:
        return first is second
    first, second = np.asarray(first), np.asarray(second)
    if first.dtype.kind == "O":
        return first.shape == second.shape and bool((first == second).all())
    return (first.dtype, first.shape) == (second.dtype, second.shape) and (
        first.tobytes() == second.tobytes()
    )


@pytest.mark.parametrize("backend", ["checked-device", pytest.param("cupy", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_bits_on_a_flushing_backend_are_numpy_references(name: str, backend: str) -> None:
    try:
        KernelPaths.get(backend)
    except BackendUnavailableError as error:
        pytest.skip(str(error))
    case = CASES[name]
    try:  # only a refusal at creation is a reason to skip: a failing run is a failure
        reference, session = _exact_session(case, "numpy-reference"), _exact_session(case, backend)
    except SessionError as error:
        pytest.skip(f"exact mode refuses it here: {error.kind.name}")
    try:
        want, got = _outputs(reference, case), _outputs(session, case)
    except SessionError as error:  # a run that fast mode fails as well is not exact mode's
        if name not in EXPECTED_FAILURES:
            raise
        pytest.skip(f"fast mode fails it too ({EXPECTED_FAILURES[name]}): {error.kind.name}")
    assert all(_same_bits(a, b) for a, b in zip(got, want, strict=True))
    if name not in EXPECTED_FAILURES:
        _assert_close_to_expected(case, want, name)


# Cases whose expected values carry their generator's own float32 rounding where exact mode's
# float64 result is near the true value: name → (atol, why).
ROUNDED_EXPECTATIONS = {
    name: (1e-6, "the reference's float32 FFT leaves 1.9e-7 where the exact value is 3e-15")
    for name in ("test_dft_inverse", "test_dft_inverse_opset19")
}


def _assert_close_to_expected(case, outputs: list, name: str = "") -> None:
    """onnx's runner tolerances (conformance_cases.run_case): rtol 1e-3 (bfloat16 1e-2),
    atol 1e-7 (or ROUNDED_EXPECTATIONS'); sequences element by element."""
    atol = ROUNDED_EXPECTATIONS.get(name, (1e-7, ""))[0]
    named = [o for o, n in zip(outputs, case.model.graph.output, strict=True) if n.name]
    for index, (result, expected) in enumerate(zip(named, case.outputs, strict=True)):
        results, expecteds = (
            (result, expected) if isinstance(expected, list) else ([result], [expected])
        )
        for got, want in zip(results, expecteds, strict=True):
            want = np.asarray(want)
            rtol = 1e-2 if want.dtype.name == "bfloat16" else 1e-3
            assert_same(np.asarray(got), want, rtol=rtol, atol=atol, label=f"output {index}")


def test_the_sweep_compares_most_cases_rather_than_skipping_them() -> None:
    """1238 of the 1380 cases are accepted (and so compared) with onnx 1.23; the others use
    element types CuPy lacks (strings, bfloat16, float8, float4, int4, int2)."""
    options = SessionOptions(mode=ExecutionMode.EXACT, backend="checked-device")
    accepted = 0
    for case in CASES.values():
        try:
            Session.create(model_from_proto(case.model), options)
        except SessionError:
            continue
        accepted += 1
    assert accepted >= 1150
