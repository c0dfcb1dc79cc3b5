"""How many single-node ONNX conformance cases open in exact mode on the NumPy backend.

Walks every single-node case of the operators in the table (onnx's own cases, as
tests/conformance_cases.py finds them), leaves out the random ones and those fast mode is
expected to fail, and tries to create an exact session on "numpy" for each: prints the count
that opens and, by operator, those refused at creation. Run from the repository root:

    PYTHONPATH=$PWD python tools/exact_sweep.py
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from conformance_cases import node_cases
from conformance_expected import EXPECTED_FAILURES, RANDOM_OUTPUTS

from onemodel import ExecutionMode, Session, SessionError, SessionOptions
from onemodel.graph.importer import model_from_proto
from onemodel.graph.operators import optable


def main() -> int:
    cases = node_cases({d.op_type for d in optable.TABLE})
    exact = SessionOptions(mode=ExecutionMode.EXACT, backend="numpy")
    fast = SessionOptions(backend="numpy")
    refused: collections.Counter[str] = collections.Counter()
    tried = 0
    for name, case in cases.items():
        if name in RANDOM_OUTPUTS or name in EXPECTED_FAILURES:
            continue
        try:
            Session.create(model_from_proto(case.model), fast)
        except SessionError:
            continue  # fast mode does not open it either
        tried += 1
        try:
            Session.create(model_from_proto(case.model), exact)
        except SessionError:
            refused[case.op_type] += 1
    print(f"{tried - sum(refused.values())} of {tried} single-node cases open in exact mode")
    for op_type, count in refused.most_common():
        print(f"  refused: {op_type} {count}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
