"""A bounded mutation-fuzzing run (tests/fuzzing.py has the longer, documented command)."""

from __future__ import annotations

import fuzzing


def test_mutated_models_end_in_a_result_or_a_session_error():
    outcomes = fuzzing.fuzz(cases=250, seed=2026)
    findings = {o: n for o, n in outcomes.items() if o.startswith(("OTHER", "different"))}
    assert findings == {}
    assert sum(outcomes.values()) == 250
    assert any(o.startswith("SessionError") for o in outcomes)  # the mutations do bite
    assert outcomes["result"] > 0  # and the layout cases ran
