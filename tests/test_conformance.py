"""ONNX's own backend conformance suite (node, simple, pytorch-converted, pytorch-operator and
light models: 2,033 cases with onnx 1.23), run through `onemodel.onnx_backend` in checked mode.

Every case is expected to pass except those in EXPECTED_FAILURES, each with its reason. They are
marked xfail through the suite's own mechanism (unittest's expectedFailure), so a case that
starts passing fails the run until it is taken off the list: the list can only shrink. Cases
whose expected outputs are random draws (RANDOM_OUTPUTS) are left out.
"""

from __future__ import annotations

import os

import onnx.backend.test
from conformance_expected import EXPECTED_FAILURES, RANDOM_OUTPUTS

from onemodel.onnx_backend import OnemodelBackend


class CheckedBackend(OnemodelBackend):
    """Every case in checked mode: dead slab blocks poisoned with 0xFF and canaries after
    every buffer, so a value read after its memory went to another one fails the case (this
    is how a run-time view outliving its source's block was found). It costs about 1 s."""

    checked = True


backend_test = onnx.backend.test.BackendTest(CheckedBackend, __name__)
for name in RANDOM_OUTPUTS:
    backend_test.exclude(f"^{name}_(cpu|cuda)$")
if not os.environ.get("ONEMODEL_CONFORMANCE_NO_XFAIL"):  # set it to see why listed cases fail
    for name in EXPECTED_FAILURES:
        backend_test.xfail(f"^{name}_(cpu|cuda)$")

globals().update(backend_test.test_cases)
